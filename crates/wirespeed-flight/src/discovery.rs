//! How a client holding the key learns, harmlessly, that a Flight server has data planes, and
//! asks for a call's locations (sans-IO): the one definition the client, the server and
//! `wirespeed.flight`'s pyarrow-based server share. It adds a request header to a call any Flight server answers (ListActions);
//! one with planes and the same key answers with a response header naming them, and only
//! then is asked for locations. A server that knows nothing of this ignores the header, so it
//! never sees a call it could fail; a peer without the key learns nothing.
//!
//! ```text
//! x-wirespeed-hello:  v1.<nonce, 16 bytes hex>.<HMAC-SHA256(key, LABEL || nonce), hex>
//! x-wirespeed-call:   hello | get | put | exchange
//! x-wirespeed-planes: shm,tcp        (the planes this server offers)
//! ```
//!
//! `x-wirespeed-call` says what the call is for: the ListActions that asks (`hello`), or the
//! DoAction that asks for one data-plane call's locations (its method). A server shows a
//! service's middleware the second as the call it stands for, and the first not at all.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use wirespeed::Key;

use crate::error::{Error, Result};
use crate::plane::proto::Method;

/// The client's request header.
pub const HELLO_HEADER: &str = "x-wirespeed-hello";
/// The client's request header: what a call carrying the hello is for.
pub const CALL_HEADER: &str = "x-wirespeed-call";
/// The server's response header.
pub const PLANES_HEADER: &str = "x-wirespeed-planes";
const LABEL: &[u8] = b"wirespeed-flight hello v1";
/// What the name of an action that hands out a call's locations starts with.
const ACTION_PREFIX: &str = "wirespeed.";

/// The action that hands out a call's data-plane locations: `wirespeed.get`, `wirespeed.put`
/// or `wirespeed.exchange`.
pub fn plane_action(method: Method) -> String {
    format!("{ACTION_PREFIX}{}", method.name())
}

/// The method a location action (see [`plane_action`]) asks for; `None` for any other action.
pub fn action_method(action: &str) -> Option<Method> {
    action.strip_prefix(ACTION_PREFIX).and_then(Method::named)
}

fn mac(key: &Key, nonce: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(LABEL);
    mac.update(nonce);
    mac
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    // Lower-case only, so that each hello has one spelling.
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

/// A fresh hello for `key`.
pub fn hello(key: &Key) -> Result<String> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(format!("v1.{}.{}", hex(&nonce), hex(&mac(key, &nonce).finalize().into_bytes())))
}

/// Whether `value` is a hello made with `key`; never panics, whatever the text.
pub fn verify(key: &Key, value: &str) -> bool {
    let mut parts = value.split('.');
    let (Some("v1"), Some(nonce), Some(tag), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    match (unhex(nonce), unhex(tag)) {
        (Some(nonce), Some(tag)) if nonce.len() == 16 => mac(key, &nonce).verify_slice(&tag).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(text: &str) -> Key {
        Key::new(text.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn only_the_same_key_verifies() {
        let h = hello(&key("k1")).unwrap();
        assert!(verify(&key("k1"), &h));
        assert!(!verify(&key("k2"), &h));
        assert_ne!(h, hello(&key("k1")).unwrap(), "a nonce per hello");
    }

    #[test]
    fn a_known_vector() {
        // HMAC-SHA256("k", "wirespeed-flight hello v1" || 16 zero bytes), from Python's hmac.
        let h = format!("v1.{}.8d8d9cf7113e8b726b4d6c519292afecd003ee62b7e6d62af85f9c9b3d209b6f", "00".repeat(16));
        assert!(verify(&key("k"), &h));
    }

    proptest! {
        #[test]
        fn altered_hellos_fail(i in 0usize..100, c in proptest::char::range('0', 'z')) {
            let h = hello(&key("k")).unwrap();
            let mut altered: Vec<char> = h.chars().collect();
            let i = i % altered.len();
            prop_assume!(altered[i] != c);
            altered[i] = c;
            prop_assert!(!verify(&key("k"), &altered.into_iter().collect::<String>()));
        }

        #[test]
        fn verifying_never_panics(s in ".{0,200}") {
            let _ = verify(&key("k"), &s);
        }
    }
}
