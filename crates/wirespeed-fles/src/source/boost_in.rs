//! Reading FLESnet's archives as Boost.Serialization wrote them: the header, the
//! ArchiveDescriptor (its type checked, and zstd after it where it says so), then the fields
//! of the objects, each class's tracking byte and version before its first appearance.

use std::io::{self, BufRead, Read};

use wirespeed::proto::codec::ReadFields;

use crate::error::{FlesError, Result, malformed};
use crate::output::tsa::{MAGIC, TYPE_SIZES, ZSTD};
pub(crate) use crate::output::tsa::{MICROSLICE_ARCHIVE, TIMESLICE_ARCHIVE};

/// The file, or the zstd stream in it that a compressed archive's objects are.
pub(crate) enum In<R: BufRead> {
    Plain(R),
    Zstd(io::BufReader<zstd::stream::read::Decoder<'static, R>>),
}

impl<R: BufRead> Read for In<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            In::Plain(r) => r.read(buf),
            In::Zstd(z) => z.read(buf),
        }
    }
}

impl<R: BufRead> BufRead for In<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self {
            In::Plain(r) => r.fill_buf(),
            In::Zstd(z) => z.fill_buf(),
        }
    }

    fn consume(&mut self, n: usize) {
        match self {
            In::Plain(r) => r.consume(n),
            In::Zstd(z) => z.consume(n),
        }
    }
}

pub(crate) fn io_error(e: io::Error) -> FlesError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        malformed("archive", "it ends in the middle of an object")
    } else {
        crate::error::io("reading an archive", e)
    }
}

/// An archive being read.
pub(crate) struct ArchiveIn<R: BufRead> {
    pub input: In<R>,
    /// Each class's version, once it has appeared (classes numbered by the reader).
    versions: [Option<u32>; 8],
    pub host: String,
    pub user: String,
}

impl<R: BufRead> ArchiveIn<R> {
    /// Reads an archive's header (`what`, in errors); its objects follow.
    pub(crate) fn headed(mut input: R, what: &'static str) -> Result<Self> {
        // The magic's length and the magic, the library's version, the type sizes, and 1.
        let mut head = || {
            Ok::<_, io::Error>((input.u64()?, input.array::<22>()?, input.u16()?, input.array::<4>()?, input.i32()?))
        };
        let (magic_len, magic, _, sizes, _) = head().map_err(|_| malformed(what, "too short for its header"))?;
        if magic_len != MAGIC.len() as u64 || &magic != MAGIC {
            return Err(malformed(what, "not a Boost.Serialization binary archive"));
        }
        if sizes != TYPE_SIZES {
            return Err(malformed(what, "written on a platform with other type sizes"));
        }
        Ok(ArchiveIn { input: In::Plain(input), versions: [None; 8], host: String::new(), user: String::new() })
    }

    /// Reads the header and descriptor of an archive of `archive_type` (`what`, in errors).
    pub(crate) fn open(input: R, archive_type: i32, what: &'static str) -> Result<Self> {
        let mut a = Self::headed(input, what)?;
        a.u8()?;
        let version = a.u32()?;
        let found = if version > 0 { a.u32()? as i32 } else { TIMESLICE_ARCHIVE };
        if found != archive_type {
            return Err(malformed(what, format!("an archive of type {found}, not {archive_type}")));
        }
        let compression = if version > 1 { a.u32()? as i32 } else { 0 };
        a.u64()?; // creation time
        a.host = a.string()?;
        a.user = a.string()?;
        match (compression, a.input) {
            (0, input) => a.input = input,
            (ZSTD, In::Plain(raw)) => {
                let decoder = zstd::stream::read::Decoder::with_buffer(raw).map_err(io_error)?;
                a.input = In::Zstd(io::BufReader::new(decoder));
            }
            (other, _) => {
                let why = format!("compression {other} is neither none (0) nor zstd (1)");
                return Err(crate::error::malformed("archive", why));
            }
        }
        Ok(a)
    }

    /// Whether the archive has ended.
    pub(crate) fn at_end(&mut self) -> Result<bool> {
        Ok(self.input.fill_buf().map_err(io_error)?.is_empty())
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        ReadFields::u8(&mut self.input).map_err(io_error)
    }
    pub(crate) fn u16(&mut self) -> Result<u16> {
        ReadFields::u16(&mut self.input).map_err(io_error)
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        ReadFields::u32(&mut self.input).map_err(io_error)
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        ReadFields::u64(&mut self.input).map_err(io_error)
    }
    pub(crate) fn string(&mut self) -> Result<String> {
        let len = self.u64()?;
        if len > 4096 {
            return Err(malformed("archive", format!("a {len}-byte name")));
        }
        let mut b = vec![0u8; len as usize];
        self.input.read_exact(&mut b).map_err(io_error)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// `len` raw bytes (a vector of bytes' contents).
    pub(crate) fn vec(&mut self, len: u64) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        (&mut self.input).take(len).read_to_end(&mut bytes).map_err(io_error)?;
        if bytes.len() as u64 != len {
            return Err(malformed("archive", "it ends in the middle of an object"));
        }
        Ok(bytes)
    }

    /// Class `which`'s version: read with its tracking byte the first time it appears.
    pub(crate) fn class(&mut self, which: usize) -> Result<u32> {
        if let Some(v) = self.versions[which] {
            return Ok(v);
        }
        self.u8()?;
        let v = self.u32()?;
        self.versions[which] = Some(v);
        Ok(v)
    }
}
