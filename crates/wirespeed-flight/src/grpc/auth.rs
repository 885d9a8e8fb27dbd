//! gRPC auth as Flight clients do it: a Handshake call with `authorization: Basic …` gets an
//! `authorization: Bearer …` header back, which every later call carries. Tokens are MACs under
//! a per-process secret, so they need no table and die with the server. Both are checked on a
//! call's headers alone, before its body is read, so a client without them can make the server
//! hold nothing. Failed logins slow down their address (see [`Throttle`]).
//!
//! Without TLS the password crosses the network in clear, as for any Flight server; the
//! data-plane key never does (it only proves itself in the wirespeed handshake).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tonic::codegen::http::HeaderMap;

use crate::error::{Code, Error, Result};
use wirespeed::sync::Unpoison;

const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Base64 with or without its `=` padding: arrow-go sends it without (`RawStdEncoding`).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

pub(crate) struct Auth {
    password: String,
    secret: [u8; 32],
    throttle: Throttle,
}

impl Auth {
    pub(crate) fn new(password: String) -> Result<Self> {
        let mut secret = [0; 32];
        getrandom::fill(&mut secret).map_err(|e| Error::internal(format!("no randomness for tokens: {e}")))?;
        Ok(Auth { password, secret, throttle: Throttle::default() })
    }

    /// Checks `Basic user:password` and returns a bearer token. `peer` is the client's
    /// address, for the throttle.
    pub(crate) fn login(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Result<String> {
        self.throttle.admit(peer)?;
        let checked = self.check_password(headers);
        match &checked {
            Ok(()) => self.throttle.forget(peer),
            Err(_) => self.throttle.failed(peer),
        }
        checked?;
        let expiry = now_secs() + TOKEN_LIFETIME.as_secs();
        Ok(format!("{expiry}.{}", hex(&self.mac(b"token", &expiry.to_le_bytes()).finalize().into_bytes())))
    }

    fn check_password(&self, headers: &HeaderMap) -> Result<()> {
        let encoded = credentials(headers, "basic").ok_or_else(|| Error::unauthenticated("send Basic credentials"))?;
        let malformed = || Error::unauthenticated("malformed Basic credentials");
        let decoded = BASE64.decode(encoded).map_err(|_| malformed())?;
        let colon = decoded.iter().position(|&b| b == b':').ok_or_else(malformed)?;
        // Compare MACs rather than the strings, so the time taken says nothing of the password.
        let expected = self.mac(b"password", self.password.as_bytes()).finalize().into_bytes();
        self.mac(b"password", &decoded[colon + 1..])
            .verify_slice(&expected)
            .map_err(|_| Error::unauthenticated("wrong user name or password"))
    }

    /// Checks the bearer token of a call.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<()> {
        let token = credentials(headers, "bearer")
            .ok_or_else(|| Error::unauthenticated("this server needs a bearer token: authenticate first"))?;
        let malformed = || Error::unauthenticated("malformed token");
        let (expiry, mac) = token.split_once('.').ok_or_else(malformed)?;
        let expiry: u64 = expiry.parse().map_err(|_| malformed())?;
        let mac = unhex(mac).ok_or_else(malformed)?;
        self.mac(b"token", &expiry.to_le_bytes())
            .verify_slice(&mac)
            .map_err(|_| Error::unauthenticated("invalid token"))?;
        if expiry < now_secs() {
            return Err(Error::unauthenticated("the token has expired: authenticate again"));
        }
        Ok(())
    }

    fn mac(&self, label: &[u8], data: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret).expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(data);
        mac
    }
}

/// The credentials of an `authorization` header with `scheme` (any case, as HTTP has it).
fn credentials<'a>(headers: &'a HeaderMap, scheme: &str) -> Option<&'a str> {
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (given, rest) = value.split_once(' ')?;
    given.eq_ignore_ascii_case(scheme).then(|| rest.trim())
}

/// Failed logins are free up to this many in a row from one address.
const FREE_FAILURES: u32 = 5;
/// The longest an address waits between attempts once past them.
const MAX_COOL_DOWN: Duration = Duration::from_secs(60);
/// Addresses remembered at most; the oldest quiet ones are forgotten first.
const MAX_ADDRESSES: usize = 10_000;

/// Slows down password guessing: past [`FREE_FAILURES`] failures in a row, an address must wait
/// a cool-down that doubles with every further failure (up to [`MAX_COOL_DOWN`]) before its next
/// attempt is even looked at. A successful login forgets the address.
#[derive(Default)]
struct Throttle {
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

impl Throttle {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, (u32, Instant)>> {
        self.failures.lock().unpoison()
    }

    fn admit(&self, peer: Option<IpAddr>) -> Result<()> {
        let Some(ip) = peer else { return Ok(()) };
        let Some(&(count, last)) = self.lock().get(&ip) else { return Ok(()) };
        if count < FREE_FAILURES {
            return Ok(());
        }
        let cool_down = Duration::from_secs(1 << (count - FREE_FAILURES).min(6)).min(MAX_COOL_DOWN);
        match cool_down.checked_sub(last.elapsed()) {
            Some(left) if !left.is_zero() => Err(Error::status(
                Code::ResourceExhausted,
                format!("too many failed logins from {ip}: try again in {} s", left.as_secs() + 1),
            )),
            _ => Ok(()),
        }
    }

    fn failed(&self, peer: Option<IpAddr>) {
        let Some(ip) = peer else { return };
        let mut failures = self.lock();
        if failures.len() >= MAX_ADDRESSES {
            let cutoff = MAX_COOL_DOWN;
            failures.retain(|_, (_, last)| last.elapsed() < cutoff);
        }
        let entry = failures.entry(ip).or_insert((0, Instant::now()));
        *entry = (entry.0.saturating_add(1), Instant::now());
    }

    fn forget(&self, peer: Option<IpAddr>) {
        if let Some(ip) = peer {
            self.lock().remove(&ip);
        }
    }
}

pub(crate) fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.is_ascii() || !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", value.parse().unwrap());
        h
    }

    const PEER: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    #[test]
    fn basic_gives_a_bearer_token_that_opens_calls() {
        let auth = Auth::new("s3cret:x".into()).unwrap();
        assert!(auth.login(&headers(&basic("u", "wrong")), None).is_err());
        assert!(auth.login(&HeaderMap::new(), None).is_err());
        let token = auth.login(&headers(&basic("u", "s3cret:x")), None).unwrap();
        auth.check(&headers(&format!("Bearer {token}"))).unwrap();
        assert!(auth.check(&headers("Bearer 99999999999.00")).is_err());
        assert!(auth.check(&headers(&format!("Basic {token}"))).is_err());
        assert!(auth.check(&HeaderMap::new()).is_err());
        let other = Auth::new("s3cret:x".into()).unwrap();
        assert!(other.check(&headers(&format!("Bearer {token}"))).is_err(), "another server's token");
        let (expiry, mac) = token.split_once('.').unwrap();
        let altered = format!("{}.{mac}", expiry.parse::<u64>().unwrap() + 1);
        assert!(auth.check(&headers(&format!("Bearer {altered}"))).is_err(), "a longer life");
    }

    /// As other Flight clients send them: base64 without padding (arrow-go), schemes in any case.
    #[test]
    fn credentials_as_other_clients_write_them() {
        let auth = Auth::new("pw".into()).unwrap();
        let unpadded = base64::engine::general_purpose::STANDARD_NO_PAD.encode("user:pw");
        assert!(!unpadded.ends_with('='));
        let token = auth.login(&headers(&format!("Basic {unpadded}")), None).unwrap();
        auth.login(&headers(&format!("basic  {}", &basic("user", "pw")[6..])), None).unwrap();
        auth.check(&headers(&format!("bearer {token}"))).unwrap();
        auth.check(&headers(&format!("BEARER {token}"))).unwrap();
    }

    #[test]
    fn repeated_failures_are_refused_for_a_while_then_heard_again() {
        let auth = Auth::new("pw".into()).unwrap();
        for _ in 0..FREE_FAILURES {
            let e = auth.login(&headers(&basic("u", "guess")), PEER).unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated);
        }
        let refused = auth.login(&headers(&basic("u", "pw")), PEER).unwrap_err();
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused}");
        assert!(refused.to_string().contains("too many failed logins"), "{refused}");
        // Another address is not held up.
        auth.login(&headers(&basic("u", "pw")), Some("10.0.0.1".parse().unwrap())).unwrap();
        // Once the cool-down has passed, the right password gets in and clears the record.
        auth.throttle.lock().get_mut(&PEER.unwrap()).unwrap().1 -= MAX_COOL_DOWN;
        auth.login(&headers(&basic("u", "pw")), PEER).unwrap();
        assert!(auth.throttle.lock().is_empty());
    }
}
