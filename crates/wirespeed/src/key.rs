//! The pre-shared key: from `WIRESPEED_KEY`, a key file, or freshly generated. Never argv.

use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};

/// The environment variable that holds the key.
pub const KEY_ENV: &str = "WIRESPEED_KEY";

/// A pre-shared key. Its Debug form never shows the bytes.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl Key {
    /// A key of these bytes; an empty one is an error.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(Error::Key("the key is empty".into()));
        }
        Ok(Key(bytes))
    }

    /// A random 256-bit key and its hex text, for a receiver to print once.
    pub fn generate() -> Result<(Key, String)> {
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| Error::Key(format!("no randomness: {e}")))?;
        let text: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        Ok((Key(text.clone().into_bytes()), text))
    }

    /// Reads the key file's contents, less a trailing newline.
    pub fn from_file(path: &Path) -> Result<Self> {
        let mut bytes =
            std::fs::read(path).map_err(|e| Error::Key(format!("cannot read key file {}: {e}", path.display())))?;
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        Key::new(bytes).map_err(|_| Error::Key(format!("key file {} is empty", path.display())))
    }

    /// The key file if one is given (the caller's explicit choice), else `WIRESPEED_KEY` if it
    /// is set, else none.
    pub fn from_env_or_file(file: Option<&Path>) -> Result<Option<Self>> {
        if let Some(path) = file {
            return Key::from_file(path).map(Some);
        }
        match std::env::var_os(KEY_ENV) {
            Some(v) => Key::new(v.into_encoded_bytes()).map(Some),
            None => Ok(None),
        }
    }

    /// Like [`Key::from_env_or_file`], but a missing key is an error.
    pub fn require(file: Option<&Path>) -> Result<Self> {
        Key::from_env_or_file(file)?.ok_or_else(|| Error::Key(format!("no key: set {KEY_ENV} or give a key file")))
    }

    /// A key for one purpose, such as one run, derived from this one: HMAC-SHA256 over
    /// `context`, as hex. Peers that hold this key and learn the context (which may travel in
    /// clear) get the same key, and the key itself never travels.
    pub fn derive(&self, context: &[u8]) -> Key {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(context);
        Key(mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect::<String>().into_bytes())
    }

    /// The key's bytes, to hand to a peer's own configuration (never to a command line).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_depend_on_key_and_context() {
        let a = Key::new("base").unwrap();
        // HMAC-SHA256("base", "run 1"), as `openssl dgst -sha256 -hmac base` prints it.
        assert_eq!(
            std::str::from_utf8(a.derive(b"run 1").as_bytes()).unwrap(),
            "5bcb89d523b3f89dfbcf3f008f5b0474b808188e8681b930c4e21e0e1b23bdc4"
        );
        assert_ne!(a.derive(b"run 1").as_bytes(), a.derive(b"run 2").as_bytes());
        assert_ne!(a.derive(b"run 1").as_bytes(), Key::new("other").unwrap().derive(b"run 1").as_bytes());
    }
}
