//! One little-endian codec for every wire format of the project (the frames' own, the file
//! protocol's, Flight's planes', libfabric's messages, FLESnet's): a [`Reader`] over bytes that
//! fails with [`Truncated`] when they run out, and a [`Writer`] that appends. Each format maps
//! `Truncated` into its own violation and adds its own rules (lengths, kinds) on top. A format
//! read off or written onto a stream too large to hold (an archive through zstd) uses the same
//! fields through [`ReadFields`] and [`WriteFields`].

use std::io;

/// The bytes ended before a field did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("truncated")]
pub struct Truncated;

/// Reads fields off the front of a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// What is left to read.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next `N` bytes, as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let (head, rest) = self.rest.split_first_chunk::<N>().ok_or(Truncated)?;
        self.rest = rest;
        Ok(*head)
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        if n > self.rest.len() {
            return Err(Truncated);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// Everything left, which the reader then holds no more of.
    #[inline]
    pub fn take_rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// A u32 length, then that many bytes: every format's variable-length field. Takes
    /// nothing when they are not all there.
    #[inline]
    pub fn prefixed(&mut self) -> Result<&'a [u8], Truncated> {
        let mut r = self.clone();
        let len = r.u32()?;
        let bytes = r.bytes(len as usize)?;
        *self = r;
        Ok(bytes)
    }
}

/// Reads a whole message with `read`: `None` when the bytes end before it does, or go on after.
#[inline]
pub fn read_all<'a, T>(bytes: &'a [u8], read: impl FnOnce(&mut Reader<'a>) -> Result<T, Truncated>) -> Option<T> {
    let mut r = Reader::new(bytes);
    read(&mut r).ok().filter(|_| r.is_empty())
}

/// Appends fields to a byte vector.
#[derive(Debug, Default, Clone)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    #[inline]
    pub fn with_capacity(n: usize) -> Self {
        Writer(Vec::with_capacity(n))
    }

    #[inline]
    pub fn into_inner(self) -> Vec<u8> {
        self.0
    }

    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    /// A u32 length, then the bytes (see [`Reader::prefixed`]).
    #[inline]
    pub fn prefixed(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.bytes(b);
    }
}

/// One reading and one writing method per little-endian integer type, named after it, on
/// the reader, the writer and streams.
macro_rules! integers {
    ($($t:ident),*) => {
        impl Reader<'_> {
            $(#[inline]
            pub fn $t(&mut self) -> Result<$t, Truncated> {
                Ok($t::from_le_bytes(self.array()?))
            })*
        }

        /// The reader's fields off any [`io::Read`]: a stream that ends early fails as
        /// `read_exact` does, with `UnexpectedEof`.
        pub trait ReadFields: io::Read {
            #[inline]
            fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
                let mut b = [0u8; N];
                self.read_exact(&mut b)?;
                Ok(b)
            }
            $(#[inline]
            fn $t(&mut self) -> io::Result<$t> {
                Ok($t::from_le_bytes(self.array()?))
            })*
        }

        impl<R: io::Read + ?Sized> ReadFields for R {}

        /// The writer's fields onto any [`io::Write`].
        pub trait WriteFields: io::Write {
            $(#[inline]
            fn $t(&mut self, v: $t) -> io::Result<()> {
                self.write_all(&v.to_le_bytes())
            })*
            /// A u64 length, then the bytes: Boost.Serialization's strings and byte vectors.
            #[inline]
            fn u64_prefixed(&mut self, b: &[u8]) -> io::Result<()> {
                self.write_all(&(b.len() as u64).to_le_bytes())?;
                self.write_all(b)
            }
        }

        impl<W: io::Write + ?Sized> WriteFields for W {}

        impl Writer {
            $(#[inline]
            pub fn $t(&mut self, v: $t) {
                self.bytes(&v.to_le_bytes());
            })*
        }
    };
}

integers!(u8, u16, u32, u64, u128, i32, i64);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fields_read_back_as_written_and_a_short_read_is_truncated() {
        let mut w = Writer::default();
        w.u8(1);
        w.u16(2);
        w.u32(3);
        w.u64(4);
        w.i64(-5);
        w.u128(6);
        w.prefixed(b"tail");
        let bytes = w.into_inner();
        let mut r = Reader::new(&bytes);
        assert_eq!((r.u8(), r.u16(), r.u32(), r.u64(), r.i64(), r.u128()), (Ok(1), Ok(2), Ok(3), Ok(4), Ok(-5), Ok(6)));
        assert_eq!(r.bytes(9), Err(Truncated));
        assert_eq!(r.clone().prefixed(), Ok(&b"tail"[..]));
        assert_eq!(r.rest(), b"\x04\0\0\0tail", "a failed read takes nothing");
        assert_eq!(r.u32(), Ok(4));
        assert_eq!(r.prefixed(), Err(Truncated), "a length with too few bytes after it");
        assert_eq!(r.take_rest(), b"tail");
        assert!(r.is_empty());
        assert_eq!(r.u8(), Err(Truncated));
    }

    #[test]
    fn whole_messages_and_streams_read_the_same_fields() {
        let mut w = Writer::default();
        w.u16(7);
        w.u64(8);
        let bytes = w.into_inner();
        assert_eq!(read_all(&bytes, |r| Ok((r.u16()?, r.u64()?))), Some((7, 8)));
        assert_eq!(read_all(&bytes, |r| r.u16()), None, "bytes left over");
        assert_eq!(read_all(&bytes[..9], |r| Ok((r.u16()?, r.u64()?))), None, "bytes missing");
        let mut written = Vec::new();
        WriteFields::u16(&mut written, 7).unwrap();
        WriteFields::u64(&mut written, 8).unwrap();
        assert_eq!(written, bytes);
        let mut stream = &bytes[..];
        assert_eq!((ReadFields::u16(&mut stream).unwrap(), ReadFields::u64(&mut stream).unwrap()), (7, 8));
        assert_eq!(ReadFields::u8(&mut stream).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    proptest! {
        /// Whatever the bytes, reading never panics and never reads past them.
        #[test]
        fn any_bytes_read_or_truncate(bytes in proptest::collection::vec(any::<u8>(), 0..40), n in 0usize..48) {
            let mut r = Reader::new(&bytes);
            let _ = r.u64();
            let before = r.rest().len();
            match r.bytes(n) {
                Ok(b) => prop_assert_eq!(b.len(), n),
                Err(Truncated) => prop_assert_eq!(r.rest().len(), before),
            }
        }
    }
}
