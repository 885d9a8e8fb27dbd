//! Tickets: without a time to live, a flight's ticket is its name, as any client may write it.
//! With one (`serve --ticket-ttl`), a ticket also carries when it expires and a tag (HMAC-SHA256
//! under a key this process drew at start) that proves this server issued it, so a client can
//! neither forge one nor move its expiry; its endpoint says when (`expiration_time`), and
//! RenewFlightEndpoint gives a later one. A restart makes every issued ticket invalid.
//!
//! Layout with a time to live: `name NUL expiry NUL tag`, the expiry in milliseconds since the
//! Unix epoch (decimal), the tag in hex over the two before it. A name never holds NUL (no path
//! can).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow_flight::{FlightEndpoint, Ticket};
use hmac::{Hmac, KeyInit, Mac};
use prost_types::Timestamp;
use sha2::Sha256;
use wirespeed_flight::error::Quote;
use wirespeed_flight::{Error, Result};

/// How this server's tickets are made and checked.
pub(crate) struct Tickets {
    lifetime: Option<(Duration, [u8; 32])>,
}

impl Tickets {
    /// Tickets that are names (`ttl` None), or that expire `ttl` after they are issued.
    pub(crate) fn new(ttl: Option<Duration>) -> Result<Self> {
        let lifetime = match ttl {
            None => None,
            Some(ttl) => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(|e| Error::internal(format!("no randomness for tickets: {e}")))?;
                Some((ttl, key))
            }
        };
        Ok(Tickets { lifetime })
    }

    /// The endpoint that reads flight `name`: its ticket, and when that expires.
    pub(crate) fn endpoint(&self, name: &str) -> FlightEndpoint {
        let Some((ttl, key)) = &self.lifetime else {
            return FlightEndpoint::new().with_ticket(Ticket::new(name.to_string()));
        };
        let expiry = now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let signed = format!("{name}\0{expiry}");
        let tag = hex(&mac(key, signed.as_bytes()).finalize().into_bytes());
        FlightEndpoint::new()
            .with_ticket(Ticket::new(format!("{signed}\0{tag}")))
            .with_expiration_time(timestamp(expiry))
    }

    /// The flight a ticket names, if this server issued it and it has not expired.
    pub(crate) fn redeem(&self, ticket: &[u8]) -> Result<String> {
        let text = std::str::from_utf8(ticket).map_err(|_| Error::invalid_argument("tickets are UTF-8 paths"))?;
        let Some((_, key)) = &self.lifetime else { return Ok(text.to_string()) };
        let mut parts = text.rsplitn(3, '\0');
        let (Some(tag), Some(expiry), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::invalid_argument(format!(
                "{} is not a ticket of this server: its tickets expire, take one from GetFlightInfo",
                Quote::str(text)
            )));
        };
        let genuine =
            unhex(tag).is_some_and(|tag| mac(key, &ticket[..name.len() + 1 + expiry.len()]).verify_slice(&tag).is_ok());
        let expiry = expiry.parse::<u64>().ok().filter(|_| genuine).ok_or_else(|| {
            Error::invalid_argument(format!(
                "the ticket for {} was not issued by this server (or not since it started): take one from GetFlightInfo",
                Quote::str(name)
            ))
        })?;
        let now = now_ms();
        if now >= expiry {
            return Err(Error::not_found(format!(
                "the ticket for {} expired {} ago: renew its endpoint (RenewFlightEndpoint) before it expires, or \
                 take a new one from GetFlightInfo",
                Quote::str(name),
                ago(now - expiry)
            )));
        }
        Ok(name.to_string())
    }

    /// `endpoint` with a ticket that expires a time to live from now, if its own has not yet.
    pub(crate) fn renew(&self, endpoint: &FlightEndpoint) -> Result<FlightEndpoint> {
        if self.lifetime.is_none() {
            return Err(Error::unimplemented("this server's tickets do not expire (serve --ticket-ttl makes them)"));
        }
        let ticket = endpoint.ticket.as_ref().ok_or_else(|| Error::invalid_argument("the endpoint has no ticket"))?;
        let name = self.redeem(&ticket.ticket)?;
        let renewed = self.endpoint(&name);
        Ok(FlightEndpoint { ticket: renewed.ticket, expiration_time: renewed.expiration_time, ..endpoint.clone() })
    }
}

fn mac(key: &[u8; 32], signed: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(signed);
    mac
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp { seconds: (ms / 1000) as i64, nanos: ((ms % 1000) * 1_000_000) as i32 }
}

fn ago(ms: u64) -> String {
    if ms < 10_000 { format!("{:.1} s", ms as f64 / 1000.0) } else { format!("{} s", ms / 1000) }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_flight::Code;

    fn ticket(endpoint: &FlightEndpoint) -> Vec<u8> {
        endpoint.ticket.as_ref().unwrap().ticket.to_vec()
    }

    #[test]
    fn without_a_time_to_live_a_ticket_is_the_name() {
        let tickets = Tickets::new(None).unwrap();
        let endpoint = tickets.endpoint("a/b.arrow");
        assert_eq!(ticket(&endpoint), b"a/b.arrow");
        assert!(endpoint.expiration_time.is_none());
        assert_eq!(tickets.redeem(b"a/b.arrow").unwrap(), "a/b.arrow");
        assert_eq!(tickets.renew(&endpoint).unwrap_err().code(), Code::Unimplemented);
    }

    #[test]
    fn a_ticket_holds_until_it_expires_and_renewing_moves_its_expiry() {
        let tickets = Tickets::new(Some(Duration::from_millis(300))).unwrap();
        let endpoint = tickets.endpoint("a.arrow");
        let ms = |e: &FlightEndpoint| e.expiration_time.map(|t| t.seconds * 1000 + i64::from(t.nanos / 1_000_000));
        let expires = ms(&endpoint).unwrap();
        assert_eq!(tickets.redeem(&ticket(&endpoint)).unwrap(), "a.arrow");
        std::thread::sleep(Duration::from_millis(20));
        let renewed = tickets.renew(&endpoint).unwrap();
        assert!(ms(&renewed).unwrap() > expires);
        std::thread::sleep(Duration::from_millis(300));
        let expired = tickets.redeem(&ticket(&endpoint)).unwrap_err();
        assert_eq!(expired.code(), Code::NotFound);
        assert!(expired.message().contains("expired"), "{}", expired.message());
        assert_eq!(tickets.renew(&endpoint).unwrap_err().code(), Code::NotFound);
    }

    #[test]
    fn a_time_to_live_past_the_clock_never_expires() {
        let tickets = Tickets::new(Some(Duration::MAX)).unwrap();
        let endpoint = tickets.endpoint("a.arrow");
        assert!(endpoint.expiration_time.unwrap().seconds > 4_000_000_000, "not wrapped into the past");
        assert_eq!(tickets.redeem(&ticket(&endpoint)).unwrap(), "a.arrow");
    }

    #[test]
    fn a_forged_moved_or_foreign_ticket_is_refused() {
        let tickets = Tickets::new(Some(Duration::from_secs(60))).unwrap();
        let good = String::from_utf8(ticket(&tickets.endpoint("a.arrow"))).unwrap();
        let mut parts: Vec<&str> = good.split('\0').collect();
        let later = (parts[1].parse::<u64>().unwrap() + 3_600_000).to_string();
        parts[1] = &later;
        let cases = [
            "a.arrow".to_string(),
            parts.join("\0"),
            good.replacen("a.arrow", "b.arrow", 1),
            ticket(&Tickets::new(Some(Duration::from_secs(60))).unwrap().endpoint("a.arrow"))
                .into_iter()
                .map(char::from)
                .collect(),
            format!("a.arrow\0{}\0zz", parts[1]),
        ];
        for case in cases {
            let refused = tickets.redeem(case.as_bytes()).unwrap_err();
            assert_eq!(refused.code(), Code::InvalidArgument, "{case:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn redeeming_any_bytes_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = Tickets::new(Some(Duration::from_secs(1))).unwrap().redeem(&bytes);
        }
    }
}
