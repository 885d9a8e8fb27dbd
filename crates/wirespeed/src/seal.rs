//! AES-256-GCM sealing of messages above a connection (the file tools' `--encrypt`, Flight's
//! tcp plane under TLS). Each end derives the keys from the connection's handshake
//! ([`Connection::derive_key`](crate::Connection::derive_key)), so they never travel; a
//! message's nonce is where it sits (its stream and a counter per stream and direction), so a
//! replayed, reordered, cut or forged message fails to open.

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

/// Bytes a seal adds.
pub const TAG_LEN: usize = 16;

/// A message failed to open: tampered with, replayed, reordered or sealed under another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a sealed message failed authentication (tampered, replayed or reordered)")]
pub struct Unauthentic;

/// The sealing key of one direction of a connection.
pub struct SealKey(LessSafeKey);

impl SealKey {
    pub fn new(bytes: &[u8; 32]) -> Self {
        SealKey(LessSafeKey::new(UnboundKey::new(&AES_256_GCM, bytes).expect("a 32-byte AES-256 key")))
    }

    /// Seals `buf[from..]` in place and appends the tag. Each (key, stream, counter) must be
    /// used once.
    pub fn seal(&self, stream: u32, counter: u64, aad: &[u8], buf: &mut Vec<u8>, from: usize) {
        let tag = self
            .0
            .seal_in_place_separate_tag(nonce(stream, counter), Aad::from(aad), &mut buf[from..])
            .expect("AES-GCM seals any message shorter than 64 GiB");
        buf.extend_from_slice(tag.as_ref());
    }

    /// Opens `buf` (sealed, tag last) in place, leaving the plain bytes.
    pub fn open(&self, stream: u32, counter: u64, aad: &[u8], buf: &mut Vec<u8>) -> Result<(), Unauthentic> {
        let n = self.0.open_in_place(nonce(stream, counter), Aad::from(aad), buf).map_err(|_| Unauthentic)?.len();
        buf.truncate(n);
        Ok(())
    }
}

fn nonce(stream: u32, counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&stream.to_le_bytes());
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// docs/PROTOCOL.md's vector for a sealed Flight plane message, checked against Python's
    /// `cryptography` (AESGCM): key bytes 0 to 31, stream 7, the header at counter 2 (a
    /// 5-byte body's length, then header byte 1), the body "hello" at counter 3.
    #[test]
    fn the_documented_test_vector() {
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let key = SealKey::new(&key);
        let mut header = 5u64.to_le_bytes().to_vec();
        header.push(1);
        key.seal(7, 2, b"wirespeed-flight plane", &mut header, 0);
        assert_eq!(hex(&header), "02560cf6dadcd3c4f70e0f2bc284e6f317649419432ff7ed5f");
        let mut body = b"hello".to_vec();
        key.seal(7, 3, b"wirespeed-flight plane", &mut body, 0);
        assert_eq!(hex(&body), "8533f936bbd2524aff595e34a4297f9b8abb06a152");
    }

    #[test]
    fn what_is_sealed_opens_only_where_it_was_sealed() {
        let key = SealKey::new(&[7; 32]);
        let mut buf = b"head:".to_vec();
        buf.extend_from_slice(b"secret payload");
        key.seal(3, 8, b"aad", &mut buf, 5);
        assert_eq!(buf.len(), 5 + 14 + TAG_LEN);
        assert!(!buf.windows(6).any(|w| w == b"secret"));
        let sealed = buf[5..].to_vec();
        let mut good = sealed.clone();
        key.open(3, 8, b"aad", &mut good).unwrap();
        assert_eq!(good, b"secret payload");
        for (stream, counter, aad) in [(4, 8, &b"aad"[..]), (3, 9, b"aad"), (3, 8, b"other")] {
            assert_eq!(key.open(stream, counter, aad, &mut sealed.clone()), Err(Unauthentic));
        }
        let mut flipped = sealed.clone();
        flipped[0] ^= 1;
        assert_eq!(key.open(3, 8, b"aad", &mut flipped), Err(Unauthentic));
        assert_eq!(SealKey::new(&[8; 32]).open(3, 8, b"aad", &mut sealed.clone()), Err(Unauthentic));
        assert_eq!(key.open(3, 8, b"aad", &mut sealed[..10].to_vec()), Err(Unauthentic));
    }
}
