//! FLESnet's MicrosliceDescriptor: 32 packed little-endian bytes before each microslice's
//! content, byte for byte as fles_ipc writes it.

use wirespeed::proto::codec::{Reader, Truncated};

use crate::error::{Result, malformed};

/// Bytes of an encoded [`MicrosliceDescriptor`].
pub const DESCRIPTOR_LEN: usize = 32;
/// The header id every microslice descriptor starts with.
pub const HDR_ID: u8 = 0xDD;
/// The descriptor format's version.
pub const HDR_VER: u8 = 0x01;

/// Bits of [`MicrosliceDescriptor::flags`].
pub mod flags {
    /// `crc` holds the content's CRC-32C.
    pub const CRC_VALID: u16 = 1;
    /// The FLIM's buffer overflowed: the microslice lacks data.
    pub const OVERFLOW_FLIM: u16 = 2;
    /// The user logic's buffer overflowed.
    pub const OVERFLOW_USER: u16 = 4;
    /// The data holds an error the front end flagged.
    pub const DATA_ERROR: u16 = 8;
}

/// FLESnet's MicrosliceDescriptor, 32 bytes before each microslice's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MicrosliceDescriptor {
    /// Always [`HDR_ID`].
    pub hdr_id: u8,
    /// Always [`HDR_VER`].
    pub hdr_ver: u8,
    /// Equipment identifier: which link the data came from.
    pub eq_id: u16,
    /// Bits of [`flags`].
    pub flags: u16,
    /// Subsystem identifier and format version.
    pub sys_id: u8,
    /// See `sys_id`.
    pub sys_ver: u8,
    /// The microslice's index (or start time).
    pub idx: u64,
    /// CRC-32C of the content, where `flags` has CRC_VALID.
    pub crc: u32,
    /// Content bytes.
    pub size: u32,
    /// Byte offset of the content in the input's stream.
    pub offset: u64,
}

impl MicrosliceDescriptor {
    /// A descriptor for `content`, its CRC computed.
    pub fn for_content(eq_id: u16, sys_id: u8, sys_ver: u8, idx: u64, offset: u64, content: &[u8]) -> Self {
        MicrosliceDescriptor {
            hdr_id: HDR_ID,
            hdr_ver: HDR_VER,
            eq_id,
            flags: flags::CRC_VALID,
            sys_id,
            sys_ver,
            idx,
            crc: crc32c::crc32c(content),
            size: content.len() as u32,
            offset,
        }
    }

    /// The descriptor's 32 bytes, as FLESnet writes it.
    pub fn encode(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0u8; DESCRIPTOR_LEN];
        b[0] = self.hdr_id;
        b[1] = self.hdr_ver;
        b[2..4].copy_from_slice(&self.eq_id.to_le_bytes());
        b[4..6].copy_from_slice(&self.flags.to_le_bytes());
        b[6] = self.sys_id;
        b[7] = self.sys_ver;
        b[8..16].copy_from_slice(&self.idx.to_le_bytes());
        b[16..20].copy_from_slice(&self.crc.to_le_bytes());
        b[20..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    /// Decodes a descriptor, refusing any other header id or version.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b: &[u8; DESCRIPTOR_LEN] =
            b.first_chunk().ok_or_else(|| malformed("microslice descriptor", format!("{} bytes, not 32", b.len())))?;
        // The fields fill the 32 bytes, so none is short; reading from an array of known
        // length lets the compiler drop the checks (compute threads read every descriptor).
        let mut r = Reader::new(b);
        let mut read = || -> std::result::Result<_, Truncated> {
            Ok(MicrosliceDescriptor {
                hdr_id: r.u8()?,
                hdr_ver: r.u8()?,
                eq_id: r.u16()?,
                flags: r.u16()?,
                sys_id: r.u8()?,
                sys_ver: r.u8()?,
                idx: r.u64()?,
                crc: r.u32()?,
                size: r.u32()?,
                offset: r.u64()?,
            })
        };
        let d = read().map_err(|_| malformed("microslice descriptor", "short"))?;
        if d.hdr_id != HDR_ID || d.hdr_ver != HDR_VER {
            return Err(malformed(
                "microslice descriptor",
                format!("header {:#04x} version {:#04x}, not 0xdd version 0x01", d.hdr_id, d.hdr_ver),
            ));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The first microslice of ../shared/fles/two.tsa, as FLESnet wrote it.
    #[test]
    fn encodes_as_flesnet_does() {
        let d = MicrosliceDescriptor {
            hdr_id: HDR_ID,
            hdr_ver: HDR_VER,
            eq_id: 0x1234,
            flags: 0,
            sys_id: 0xF0,
            sys_ver: 0x81,
            idx: 1000,
            crc: 0,
            size: 4,
            offset: 0,
        };
        let want = [
            0xdd, 0x01, 0x34, 0x12, 0, 0, 0xf0, 0x81, 0xe8, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0,
        ];
        assert_eq!(d.encode(), want);
        assert_eq!(MicrosliceDescriptor::decode(&want).ok(), Some(d));
    }

    #[test]
    fn refuses_other_headers_and_short_input() {
        let mut b = MicrosliceDescriptor::for_content(1, 2, 3, 4, 5, b"x").encode();
        b[0] = 0xDE;
        assert!(MicrosliceDescriptor::decode(&b).is_err());
        assert!(MicrosliceDescriptor::decode(&b[..31]).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = MicrosliceDescriptor::decode(&bytes);
        }

        #[test]
        fn round_trips(eq in any::<u16>(), f in any::<u16>(), idx in any::<u64>(), crc in any::<u32>(), size in any::<u32>(), off in any::<u64>()) {
            let d = MicrosliceDescriptor { hdr_id: HDR_ID, hdr_ver: HDR_VER, eq_id: eq, flags: f, sys_id: 7, sys_ver: 9, idx, crc, size, offset: off };
            prop_assert_eq!(MicrosliceDescriptor::decode(&d.encode()).ok(), Some(d));
        }
    }
}
