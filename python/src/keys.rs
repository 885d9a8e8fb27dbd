//! Keys as Python gives them: str or bytes, else WIRESPEED_KEY. They never come from a command
//! line, and the key itself never travels (the core's handshake proves it).

use pyo3::prelude::*;
use wirespeed::Key;

use crate::errors;

/// The key given, else WIRESPEED_KEY, else none (Flight then uses gRPC only).
pub fn key(given: Option<Vec<u8>>) -> PyResult<Option<Key>> {
    match given {
        Some(bytes) => Key::new(bytes).map(Some).map_err(errors::transport),
        None => Key::from_env_or_file(None).map_err(errors::transport),
    }
}

/// As [`key`], where a key is needed.
pub fn required_key(given: Option<Vec<u8>>) -> PyResult<Key> {
    let missing = || errors::transport(wirespeed::Error::Key("no key: pass key= or set WIRESPEED_KEY".into()));
    key(given)?.ok_or_else(missing)
}
