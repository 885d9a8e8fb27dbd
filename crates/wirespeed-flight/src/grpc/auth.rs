//! gRPC auth as Flight clients do it: a Handshake call with `authorization: Basic …` gets an
//! `authorization: Bearer …` header back, which every later call carries. Tokens are MACs under
//! a per-process secret, so they need no table and die with the server.
//!
//! Without TLS the password crosses the network in clear, as for any Flight server; the
//! data-plane key never does (it only proves itself in the wirespeed handshake).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tonic::metadata::MetadataMap;

use crate::error::{Error, Result};

const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

pub struct Auth {
    password: String,
    secret: [u8; 32],
}

impl Auth {
    pub fn new(password: String) -> Result<Self> {
        let mut secret = [0; 32];
        getrandom::fill(&mut secret).map_err(|e| Error::internal(format!("no randomness for tokens: {e}")))?;
        Ok(Auth { password, secret })
    }

    /// Checks `Basic user:password` and returns a bearer token.
    pub fn handshake(&self, headers: &MetadataMap) -> Result<String> {
        let value = authorization(headers).ok_or_else(|| Error::unauthenticated("send Basic credentials"))?;
        let encoded = value.strip_prefix("Basic ").ok_or_else(|| Error::unauthenticated("send Basic credentials"))?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| Error::unauthenticated("malformed Basic credentials"))?;
        let colon = decoded.iter().position(|&b| b == b':');
        let password = &decoded[colon.ok_or_else(|| Error::unauthenticated("malformed Basic credentials"))? + 1..];
        // Compare MACs rather than the strings, so the time taken says nothing of the password.
        if self.mac(b"password", password) != self.mac(b"password", self.password.as_bytes()) {
            return Err(Error::unauthenticated("wrong user name or password"));
        }
        let expiry = now_secs() + TOKEN_LIFETIME.as_secs();
        Ok(format!("{expiry}.{}", hex(&self.mac(b"token", &expiry.to_le_bytes()))))
    }

    /// Checks the bearer token of a call.
    pub fn check(&self, headers: &MetadataMap) -> Result<()> {
        let token = authorization(headers)
            .and_then(|v| v.strip_prefix("Bearer ").map(str::to_string))
            .ok_or_else(|| Error::unauthenticated("this server needs a bearer token: authenticate first"))?;
        let (expiry, mac) = token.trim().split_once('.').ok_or_else(|| Error::unauthenticated("malformed token"))?;
        let expiry: u64 = expiry.parse().map_err(|_| Error::unauthenticated("malformed token"))?;
        if hex(&self.mac(b"token", &expiry.to_le_bytes())) != mac {
            return Err(Error::unauthenticated("invalid token"));
        }
        if expiry < now_secs() {
            return Err(Error::unauthenticated("the token has expired: authenticate again"));
        }
        Ok(())
    }

    fn mac(&self, label: &[u8], data: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret).expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }
}

fn authorization(headers: &MetadataMap) -> Option<String> {
    headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string)
}

pub fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> MetadataMap {
        let mut h = MetadataMap::new();
        h.insert("authorization", value.parse().unwrap());
        h
    }

    #[test]
    fn basic_gives_a_bearer_token_that_opens_calls() {
        let auth = Auth::new("s3cret:x".into()).unwrap();
        assert!(auth.handshake(&headers(&basic("u", "wrong"))).is_err());
        assert!(auth.handshake(&MetadataMap::new()).is_err());
        let token = auth.handshake(&headers(&basic("u", "s3cret:x"))).unwrap();
        auth.check(&headers(&format!("Bearer {token}"))).unwrap();
        assert!(auth.check(&headers("Bearer 99999999999.00")).is_err());
        assert!(auth.check(&MetadataMap::new()).is_err());
        let other = Auth::new("s3cret:x".into()).unwrap();
        assert!(other.check(&headers(&format!("Bearer {token}"))).is_err(), "another server's token");
    }
}
