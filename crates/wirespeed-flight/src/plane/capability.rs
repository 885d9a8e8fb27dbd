//! Per-call capabilities: a MAC over (method, expiry, ticket or descriptor) under a secret that
//! only this server process knows. The control plane hands one out with each data-plane
//! location after its own auth; the data plane serves only the call it names, only until it
//! expires, and only while this process runs, so a forged, altered or stale ticket gets nothing.
//! Each grant has an expiry (in nanoseconds) of its own, and so a MAC of its own: a grant names
//! the one control-plane call that made it, for a service that carries that call's state over.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::proto::Method;
use crate::error::{Error, Result};

/// How long a capability stays good: long enough to start a call, short enough to go stale.
pub(crate) const LIFETIME: Duration = Duration::from_secs(3600);

pub(crate) struct Minter {
    secret: [u8; 32],
    /// The latest expiry granted.
    last: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub expiry: u64,
    pub mac: [u8; 32],
}

impl Minter {
    pub(crate) fn new() -> Result<Self> {
        let mut secret = [0; 32];
        getrandom::fill(&mut secret).map_err(|e| Error::internal(format!("no randomness for capabilities: {e}")))?;
        Ok(Minter { secret, last: AtomicU64::new(0) })
    }

    pub(crate) fn grant(&self, method: Method, target: &[u8]) -> Grant {
        let soonest = now_nanos() + LIFETIME.as_nanos() as u64;
        let previous = self.last.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| Some(soonest.max(last + 1)));
        let expiry = soonest.max(previous.unwrap_or(0) + 1);
        Grant { expiry, mac: self.mac(method, expiry, target).finalize().into_bytes().into() }
    }

    pub(crate) fn check(&self, method: Method, target: &[u8], grant: &Grant) -> Result<()> {
        self.mac(method, grant.expiry, target).verify_slice(&grant.mac).map_err(|_| {
            Error::unauthenticated(format!("the {} capability does not match its ticket", method.name()))
        })?;
        if grant.expiry < now_nanos() {
            return Err(Error::unauthenticated(format!("the {} capability has expired", method.name())));
        }
        Ok(())
    }

    fn mac(&self, method: Method, expiry: u64, target: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret).expect("HMAC takes keys of any length");
        mac.update(b"wirespeed-flight v1 capability");
        mac.update(&[method as u8]);
        mac.update(&expiry.to_le_bytes());
        mac.update(target);
        mac
    }
}

fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_opens_only_its_own_call() {
        let m = Minter::new().unwrap();
        let g = m.grant(Method::Get, b"t1");
        m.check(Method::Get, b"t1", &g).unwrap();
        assert!(m.check(Method::Get, b"t2", &g).is_err(), "another ticket");
        assert!(m.check(Method::Put, b"t1", &g).is_err(), "another method");
        assert!(m.check(Method::Get, b"t1", &Grant { expiry: g.expiry + 1, ..g }).is_err(), "a longer life");
        assert!(Minter::new().unwrap().check(Method::Get, b"t1", &g).is_err(), "another server");
        let again = m.grant(Method::Get, b"t1");
        assert_ne!(again.mac, g.mac, "each grant its own");
        m.check(Method::Get, b"t1", &again).unwrap();
        let stale = Grant { expiry: 1, mac: m.mac(Method::Get, 1, b"t1").finalize().into_bytes().into() };
        assert!(m.check(Method::Get, b"t1", &stale).unwrap_err().to_string().contains("expired"));
    }
}
