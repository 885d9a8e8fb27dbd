//! Options as (key, value) strings, as ADBC takes them: new options never change the ABI.
//! Any option `X` may be given as `X_file`, a path whose contents are its value, so that keys,
//! passwords and PEM need not be in the program.

use std::ffi::c_char;
use std::time::Duration;

use wirespeed::Key;
use wirespeed_flight::{Error, Result};

use crate::args::text;

/// One option: both strings NUL-terminated UTF-8.
#[repr(C)]
pub struct WsOption {
    /// Its name, such as `key_file`, `transport` or `header.x-trace`.
    pub key: *const c_char,
    /// Its value.
    pub value: *const c_char,
}

/// Options not yet taken; what is left at the end was not understood.
pub(crate) struct Options(Vec<(String, String)>);

impl Options {
    /// # Safety
    /// `options` is null or points to `len` WsOptions whose strings outlive the call.
    pub(crate) unsafe fn read(options: *const WsOption, len: usize) -> Result<Self> {
        // SAFETY: the caller's contract.
        let list = unsafe { crate::args::slice(options, len, "options")? };
        list.iter()
            .map(|o| {
                // SAFETY: the caller's contract.
                let (key, value) = unsafe { (text(o.key, "an option's key")?, text(o.value, "an option's value")?) };
                Ok((key.to_string(), value.to_string()))
            })
            .collect::<Result<Vec<_>>>()
            .map(Options)
    }

    /// The value of `key`, or the contents of the file `key_file` names.
    pub(crate) fn take(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        if let Some(value) = self.take_text(key) {
            return Ok(Some(value.into_bytes()));
        }
        let Some(path) = self.take_text(&format!("{key}_file")) else { return Ok(None) };
        std::fs::read(&path).map(Some).map_err(|e| Error::invalid_argument(format!("{key}_file {path:?}: {e}")))
    }

    /// `key`'s value as UTF-8 text (also from `key_file`, less a trailing newline).
    pub(crate) fn take_string(&mut self, key: &str) -> Result<Option<String>> {
        let Some(value) = self.take(key)? else { return Ok(None) };
        let text = String::from_utf8(value).map_err(|_| Error::invalid_argument(format!("{key} is not UTF-8")))?;
        Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()))
    }

    /// The data planes' key: `key`, or `key_file` (read as `wirespeed` reads key files).
    pub(crate) fn take_key(&mut self) -> Result<Option<Key>> {
        if let Some(key) = self.take_text("key") {
            return Ok(Some(Key::new(key)?));
        }
        match self.take_text("key_file") {
            Some(path) => Ok(Some(Key::from_file(std::path::Path::new(&path))?)),
            None => Ok(None),
        }
    }

    fn take_text(&mut self, key: &str) -> Option<String> {
        let at = self.0.iter().rposition(|(k, _)| k == key)?;
        let value = self.0.remove(at).1;
        self.0.retain(|(k, _)| k != key);
        Some(value)
    }

    /// `true` or `false`; absent is false.
    pub(crate) fn take_flag(&mut self, key: &str) -> Result<bool> {
        match self.take_text(key).as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(Error::invalid_argument(format!("{key} {other:?}: expected true or false"))),
        }
    }

    /// A count of seconds (fractions allowed).
    pub(crate) fn take_seconds(&mut self, key: &str) -> Result<Option<Duration>> {
        let Some(value) = self.take_text(key) else { return Ok(None) };
        let bad = || Error::invalid_argument(format!("{key} {value:?}: expected seconds, such as 2.5"));
        let seconds: f64 = value.parse().map_err(|_| bad())?;
        Duration::try_from_secs_f64(seconds).ok().filter(|d| !d.is_zero()).map(Some).ok_or_else(bad)
    }

    /// A value `key` that parses as `T`.
    pub(crate) fn take_parsed<T: std::str::FromStr>(&mut self, key: &str, expected: &str) -> Result<Option<T>> {
        let Some(value) = self.take_text(key) else { return Ok(None) };
        value.parse().map(Some).map_err(|_| Error::invalid_argument(format!("{key} {value:?}: expected {expected}")))
    }

    /// Every option named `prefix` + NAME, as (NAME, value).
    pub(crate) fn take_prefixed(&mut self, prefix: &str) -> Vec<(String, String)> {
        let (taken, rest) = std::mem::take(&mut self.0).into_iter().partition(|(k, _)| k.starts_with(prefix));
        self.0 = rest;
        taken.into_iter().map(|(k, v)| (k[prefix.len()..].to_string(), v)).collect()
    }

    /// An error naming any option left over.
    pub(crate) fn finish(self, known: &str) -> Result<()> {
        match self.0.first() {
            None => Ok(()),
            Some((key, _)) => Err(Error::invalid_argument(format!("unknown option {key:?} (known: {known})"))),
        }
    }
}
