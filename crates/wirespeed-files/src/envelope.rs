//! Optional wrapping of copy-protocol messages (sans-IO): zstd-compressed bodies
//! (`--compress`) and AES-256-GCM sealing of headers and bodies (`--encrypt`).
//!
//! A plain message goes out as it is. A wrapped one's header is `WRAPPED`, a flags byte,
//! then the message header, sealed when `SEALED` is set. Its body is the body, compressed
//! when `ZSTD` is set, then sealed when `SEALED` is set. Sealing uses a key per direction of
//! the connection (derived from its handshake, so a key per transfer that never travels)
//! and a nonce made of the stream id and a per-stream counter: the header takes an even
//! counter, the body the odd one after it. Replayed, reordered, cut or forged messages
//! fail to open. Layout: docs/PROTOCOL.md, "Wrapped messages".

use std::borrow::Cow;

pub(crate) use wirespeed::seal::SealKey;

use crate::error::{FilesError, Result};
use crate::proto::Violation;

/// First byte of a wrapped message's header; copy-protocol tags are far below it.
pub(crate) const WRAPPED: u8 = 0xE0;
/// Flags: header and body are sealed.
pub(crate) const SEALED: u8 = 1;
/// Flags: the body is one zstd frame.
pub(crate) const ZSTD: u8 = 2;
/// Bodies below this size are not worth compressing.
const COMPRESS_MIN: usize = 512;

/// Where a sealed message sits in its stream: the stream id and the even counter of its
/// header. Each (key, stream, counter) is used once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    pub stream: u32,
    pub counter: u64,
}

/// Wraps one message. Returns the header to send and, when the body changed, the body to
/// send instead of the original one.
pub(crate) fn wrap(
    header: &[u8],
    body: &[&[u8]],
    compress: Option<i32>,
    seal: Option<(&SealKey, Place)>,
) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    let body_len: usize = body.iter().map(|b| b.len()).sum();
    let mut flags = 0;
    let mut new_body = None;
    if let Some(level) = compress.filter(|_| body_len >= COMPRESS_MIN) {
        let whole = match body {
            [one] => Cow::Borrowed(*one),
            _ => Cow::Owned(body.concat()),
        };
        let packed =
            zstd::bulk::compress(&whole, level).map_err(|e| FilesError::io(std::path::Path::new("<zstd>"), e))?;
        // Incompressible data goes as it is.
        if packed.len() < body_len {
            flags |= ZSTD;
            new_body = Some(packed);
        }
    }
    let Some((key, at)) = seal else {
        // A header that starts like a wrapped one is wrapped (with no flags), so it reads back
        // as itself.
        if flags == 0 && header.first() != Some(&WRAPPED) {
            return Ok((header.to_vec(), None));
        }
        let mut out = vec![WRAPPED, flags];
        out.extend_from_slice(header);
        return Ok((out, new_body));
    };
    flags |= SEALED;
    let aad = [WRAPPED, flags];
    let mut out = vec![WRAPPED, flags];
    out.extend_from_slice(header);
    key.seal(at.stream, at.counter, &aad, &mut out, 2);
    if body_len > 0 {
        let mut b = new_body.unwrap_or_else(|| body.concat());
        key.seal(at.stream, at.counter + 1, &aad, &mut b, 0);
        new_body = Some(b);
    }
    Ok((out, new_body))
}

/// A received header, unwrapped: the message header (plain ones are not copied) and the
/// flags its body needs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Opened<'a> {
    pub header: Cow<'a, [u8]>,
    pub flags: u8,
}

/// Unwraps a received header. `at` is where a sealed one would sit; `key` opens it.
pub(crate) fn open_header<'a>(wire: &'a [u8], key: Option<&SealKey>, at: Place) -> Result<Opened<'a>> {
    if wire.first() != Some(&WRAPPED) {
        return Ok(Opened { header: Cow::Borrowed(wire), flags: 0 });
    }
    let Some(&flags) = wire.get(1) else {
        return Err(Violation::Envelope("a wrapped header without flags").into());
    };
    if flags & !(SEALED | ZSTD) != 0 {
        return Err(Violation::Envelope("unknown wrapping flags").into());
    }
    let mut header = wire[2..].to_vec();
    if flags & SEALED != 0 {
        let key = key.ok_or_else(|| FilesError::Sealing("a sealed message where none was expected".into()))?;
        open_in_place(key, at.stream, at.counter, &[WRAPPED, flags], &mut header)?;
    }
    Ok(Opened { header: Cow::Owned(header), flags })
}

/// Unwraps a received body of a header opened with `flags`; refuses to grow it past `max`.
pub(crate) fn open_body(flags: u8, mut data: Vec<u8>, key: Option<&SealKey>, at: Place, max: u64) -> Result<Vec<u8>> {
    if flags & SEALED != 0 && !data.is_empty() {
        let key = key.ok_or_else(|| FilesError::Sealing("a sealed message where none was expected".into()))?;
        open_in_place(key, at.stream, at.counter + 1, &[WRAPPED, flags], &mut data)?;
    }
    if flags & ZSTD == 0 {
        return Ok(data);
    }
    let declared = zstd::zstd_safe::get_frame_content_size(&data)
        .ok()
        .flatten()
        .ok_or(Violation::Envelope("a compressed body without its size"))?;
    if declared > max {
        return Err(Violation::BodyTooLarge { len: declared, max }.into());
    }
    let out = zstd::bulk::decompress(&data, declared as usize)
        .map_err(|_| Violation::Envelope("a compressed body does not decompress"))?;
    if out.len() as u64 != declared {
        return Err(Violation::Envelope("a compressed body is shorter than it says").into());
    }
    Ok(out)
}

fn open_in_place(key: &SealKey, stream: u32, counter: u64, aad: &[u8], buf: &mut Vec<u8>) -> Result<()> {
    key.open(stream, counter, aad, buf).map_err(|e| FilesError::Sealing(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const AT: Place = Place { stream: 3, counter: 8 };

    fn key(b: u8) -> SealKey {
        SealKey::new(&[b; 32])
    }

    fn round_trip(body: &[u8], compress: Option<i32>, seal: bool) -> (Vec<u8>, Option<Vec<u8>>) {
        let k = key(1);
        let (h, b) = wrap(b"header", &[body], compress, seal.then_some((&k, AT))).unwrap();
        let opened = open_header(&h, Some(&k), AT).unwrap();
        assert_eq!(&opened.header[..], b"header");
        let got = open_body(opened.flags, b.clone().unwrap_or_else(|| body.to_vec()), Some(&k), AT, 1 << 20).unwrap();
        assert_eq!(got, body);
        (h, b)
    }

    #[test]
    fn plain_stays_plain() {
        let (h, b) = round_trip(&[7; 4096], None, false);
        assert_eq!((h.as_slice(), b), (&b"header"[..], None));
    }

    /// Found by the `envelope` fuzz target: a plain header that began with the WRAPPED byte
    /// read back two bytes short.
    #[test]
    fn a_plain_header_that_looks_wrapped_reads_back_as_itself() {
        let (h, _) = wrap(&[WRAPPED, 0], &[], None, None).unwrap();
        assert_eq!(&open_header(&h, None, AT).unwrap().header[..], [WRAPPED, 0]);
    }

    #[test]
    fn compressible_bodies_shrink_and_random_ones_go_as_they_are() {
        let (h, b) = round_trip(&[0; 100_000], Some(1), false);
        assert_eq!(h[..2], [WRAPPED, ZSTD]);
        assert!(b.unwrap().len() < 1000);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        let (h, b) = round_trip(&noise, Some(1), false);
        assert_eq!((h.as_slice(), b), (&b"header"[..], None));
    }

    #[test]
    fn sealed_hides_header_and_body() {
        for compress in [None, Some(3)] {
            let body = b"secret file contents ".repeat(100);
            let (h, b) = round_trip(&body, compress, true);
            assert!(!h.windows(6).any(|w| w == b"header"));
            assert!(!b.unwrap().windows(6).any(|w| w == b"secret"));
        }
        round_trip(b"", None, true);
    }

    #[test]
    fn a_wrong_place_or_key_or_a_flipped_bit_fails() {
        let k = key(1);
        let (h, b) = wrap(b"header", &[b"body bytes"], None, Some((&k, AT))).unwrap();
        let b = b.unwrap();
        let bad = |r: Result<Opened>| matches!(r, Err(FilesError::Sealing(_)));
        assert!(bad(open_header(&h, Some(&k), Place { stream: 3, counter: 10 })));
        assert!(bad(open_header(&h, Some(&k), Place { stream: 5, counter: 8 })));
        assert!(bad(open_header(&h, Some(&key(2)), AT)));
        assert!(bad(open_header(&h, None, AT)));
        let mut flipped = h.clone();
        flipped[5] ^= 1;
        assert!(bad(open_header(&flipped, Some(&k), AT)));
        // The body cannot pass for a header, nor a header's flags be changed.
        let mut unflagged = h.clone();
        unflagged[1] = SEALED | ZSTD;
        assert!(bad(open_header(&unflagged, Some(&k), AT)));
        assert!(open_body(SEALED, b.clone(), Some(&k), Place { stream: 3, counter: 7 }, 100).is_err());
        assert_eq!(open_body(SEALED, b, Some(&k), AT, 100).unwrap(), b"body bytes");
    }

    #[test]
    fn a_compression_bomb_is_refused() {
        let (h, b) = wrap(b"h", &[&vec![0u8; 1 << 20]], Some(1), None).unwrap();
        let flags = open_header(&h, None, AT).unwrap().flags;
        assert!(open_body(flags, b.unwrap(), None, AT, 1 << 19).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(wire in proptest::collection::vec(any::<u8>(), 0..64), body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let k = key(1);
            let mut wire = wire;
            if let Some(b) = wire.first_mut() { *b = WRAPPED; }
            if let Ok(o) = open_header(&wire, Some(&k), AT) {
                let _ = open_body(o.flags, body, Some(&k), AT, 1 << 20);
            }
        }
    }
}
