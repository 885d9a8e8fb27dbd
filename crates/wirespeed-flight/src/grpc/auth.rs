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

use crate::error::{Error, Result};
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

/// A login that failed: why, and how long its answer is held back (see [`Throttle`]).
pub(crate) struct Refused {
    pub error: Error,
    pub hold: Duration,
}

impl Auth {
    pub(crate) fn new(password: String) -> Result<Self> {
        let mut secret = [0; 32];
        getrandom::fill(&mut secret).map_err(|e| Error::internal(format!("no randomness for tokens: {e}")))?;
        Ok(Auth { password, secret, throttle: Throttle::default() })
    }

    /// Checks `Basic user:password` and returns a bearer token and the user. `peer` is the
    /// client's address, for the throttle: a right password always gets in at once; a wrong
    /// one past the free ones is answered only after the address's cool-down.
    pub(crate) fn login(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> std::result::Result<(String, String), Refused> {
        match self.check_password(headers) {
            Ok(user) => {
                self.throttle.forget(peer);
                Ok((self.token(&user), user))
            }
            Err(error) => Err(Refused { error, hold: self.throttle.failed(peer) }),
        }
    }

    /// The user of good Basic credentials.
    fn check_password(&self, headers: &HeaderMap) -> Result<String> {
        let encoded = credentials(headers, "basic").ok_or_else(|| Error::unauthenticated("send Basic credentials"))?;
        let malformed = || Error::unauthenticated("malformed Basic credentials");
        let decoded = BASE64.decode(encoded).map_err(|_| malformed())?;
        let colon = decoded.iter().position(|&b| b == b':').ok_or_else(malformed)?;
        // Compare MACs rather than the strings, so the time taken says nothing of the password.
        let expected = self.mac(b"password", self.password.as_bytes()).finalize().into_bytes();
        self.mac(b"password", &decoded[colon + 1..])
            .verify_slice(&expected)
            .map_err(|_| Error::unauthenticated("wrong user name or password"))?;
        Ok(String::from_utf8_lossy(&decoded[..colon]).into_owned())
    }

    /// `expiry.user.mac`, the user in hex: the MAC covers both.
    fn token(&self, user: &str) -> String {
        let expiry = now_secs() + TOKEN_LIFETIME.as_secs();
        let user = hex(user.as_bytes());
        let mac = self.mac(b"token", format!("{expiry}.{user}").as_bytes()).finalize().into_bytes();
        format!("{expiry}.{user}.{}", hex(&mac))
    }

    /// Checks the bearer token of a call; returns its user.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<String> {
        let token = credentials(headers, "bearer")
            .ok_or_else(|| Error::unauthenticated("this server needs a bearer token: authenticate first"))?;
        let malformed = || Error::unauthenticated("malformed token");
        let (signed, mac) = token.rsplit_once('.').ok_or_else(malformed)?;
        let (expiry, user) = signed.split_once('.').ok_or_else(malformed)?;
        let expiry: u64 = expiry.parse().map_err(|_| malformed())?;
        let mac = unhex(mac).ok_or_else(malformed)?;
        self.mac(b"token", signed.as_bytes())
            .verify_slice(&mac)
            .map_err(|_| Error::unauthenticated("invalid token"))?;
        if expiry < now_secs() {
            return Err(Error::unauthenticated("the token has expired: authenticate again"));
        }
        let user = unhex(user).ok_or_else(malformed)?;
        Ok(String::from_utf8_lossy(&user).into_owned())
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

/// Failed logins in a row from one address that are answered at once.
const FREE_FAILURES: u32 = 5;
/// The first cool-down past them; it doubles with each further failure up to [`MAX_COOL_DOWN`].
const FIRST_COOL_DOWN: Duration = Duration::from_secs(1);
const MAX_COOL_DOWN: Duration = Duration::from_secs(30);
/// A record of failures this old is forgotten (faillock's `fail_interval`).
const FORGET_AFTER: Duration = Duration::from_secs(900);
/// Addresses remembered at most; the quiet ones are forgotten first.
const MAX_ADDRESSES: usize = 10_000;

/// Slows down password guessing without locking anyone out. Past [`FREE_FAILURES`] failures in
/// a row, an address's failed logins are answered one per cool-down, however many it sends at
/// once: a guess costs the guesser its wait. A right password is never refused nor held, so
/// one mistyped password, or a guesser behind the same NAT, keeps no one out; it also clears
/// the record, as faillock's does.
#[derive(Default)]
struct Throttle {
    failures: Mutex<HashMap<IpAddr, Failures>>,
}

struct Failures {
    count: u32,
    last: Instant,
    /// When the address's next failed answer may go out.
    next_answer: Instant,
}

impl Throttle {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Failures>> {
        self.failures.lock().unpoison()
    }

    /// Counts a failure; returns how long to hold its answer.
    fn failed(&self, peer: Option<IpAddr>) -> Duration {
        let Some(ip) = peer else { return Duration::ZERO };
        let now = Instant::now();
        let mut failures = self.lock();
        if failures.len() >= MAX_ADDRESSES {
            failures.retain(|_, f| f.last.elapsed() < MAX_COOL_DOWN);
        }
        let f = failures.entry(ip).or_insert(Failures { count: 0, last: now, next_answer: now });
        if f.last.elapsed() > FORGET_AFTER {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        if f.count <= FREE_FAILURES {
            return Duration::ZERO;
        }
        let cool_down = (FIRST_COOL_DOWN * 2u32.pow((f.count - FREE_FAILURES - 1).min(5))).min(MAX_COOL_DOWN);
        f.next_answer = f.next_answer.max(now) + cool_down;
        f.next_answer - now
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

    fn token(auth: &Auth, user: &str, password: &str) -> String {
        auth.login(&headers(&basic(user, password)), None).map_err(|r| r.error).unwrap().0
    }

    #[test]
    fn basic_gives_a_bearer_token_that_opens_calls() {
        let auth = Auth::new("s3cret:x".into()).unwrap();
        assert!(auth.login(&headers(&basic("u", "wrong")), None).is_err());
        assert!(auth.login(&HeaderMap::new(), None).is_err());
        let token = token(&auth, "u", "s3cret:x");
        assert_eq!(auth.check(&headers(&format!("Bearer {token}"))).unwrap(), "u");
        assert!(auth.check(&headers("Bearer 99999999999.00.00")).is_err());
        assert!(auth.check(&headers(&format!("Basic {token}"))).is_err());
        assert!(auth.check(&HeaderMap::new()).is_err());
        let other = Auth::new("s3cret:x".into()).unwrap();
        assert!(other.check(&headers(&format!("Bearer {token}"))).is_err(), "another server's token");
        let (expiry, rest) = token.split_once('.').unwrap();
        let altered = format!("{}.{rest}", expiry.parse::<u64>().unwrap() + 1);
        assert!(auth.check(&headers(&format!("Bearer {altered}"))).is_err(), "a longer life");
        let (_, mac) = rest.split_once('.').unwrap();
        let other_user = format!("{expiry}.{}.{mac}", hex(b"root"));
        assert!(auth.check(&headers(&format!("Bearer {other_user}"))).is_err(), "another user");
    }

    /// As other Flight clients send them: base64 without padding (arrow-go), schemes in any case.
    #[test]
    fn credentials_as_other_clients_write_them() {
        let auth = Auth::new("pw".into()).unwrap();
        let unpadded = base64::engine::general_purpose::STANDARD_NO_PAD.encode("user:pw");
        assert!(!unpadded.ends_with('='));
        let (token, user) = auth.login(&headers(&format!("Basic {unpadded}")), None).map_err(|r| r.error).unwrap();
        assert_eq!(user, "user");
        assert!(auth.login(&headers(&format!("basic  {}", &basic("user", "pw")[6..])), None).is_ok());
        auth.check(&headers(&format!("bearer {token}"))).unwrap();
        auth.check(&headers(&format!("BEARER {token}"))).unwrap();
    }

    fn guess(auth: &Auth, peer: Option<IpAddr>) -> Duration {
        let Err(refused) = auth.login(&headers(&basic("u", "guess")), peer) else { panic!("a guess got in") };
        assert_eq!(refused.error.code(), crate::error::Code::Unauthenticated);
        refused.hold
    }

    #[test]
    fn failures_past_the_free_ones_are_answered_one_per_cool_down() {
        let auth = Auth::new("pw".into()).unwrap();
        for _ in 0..FREE_FAILURES {
            assert_eq!(guess(&auth, PEER), Duration::ZERO);
        }
        // Sent at once, the next guesses are answered one after another, each cool-down longer.
        let holds: Vec<Duration> = (0..3).map(|_| guess(&auth, PEER)).collect();
        let secs: Vec<u64> = holds.iter().map(|h| h.as_millis().div_ceil(1000) as u64).collect();
        assert_eq!(secs, [1, 3, 7], "{holds:?}");
        // Another address is not held up.
        assert_eq!(guess(&auth, Some("10.0.0.1".parse().unwrap())), Duration::ZERO);
    }

    /// One mistyped password, or a guesser on the same address, never keeps out the right one.
    #[test]
    fn the_right_password_gets_in_at_once_whatever_failed_before() {
        let auth = Auth::new("pw".into()).unwrap();
        guess(&auth, PEER);
        assert!(auth.login(&headers(&basic("u", "pw")), PEER).is_ok(), "after one typo");
        for _ in 0..FREE_FAILURES + 10 {
            guess(&auth, PEER);
        }
        assert!(auth.login(&headers(&basic("u", "pw")), PEER).is_ok(), "while the address is held back");
        assert!(auth.throttle.lock().is_empty(), "a login clears the record");
    }
}
