//! Flight's session options (SetSessionOptions, GetSessionOptions, CloseSession): options a
//! client sets once and later calls of its session see, as Arrow C++'s session middleware keeps
//! them. The session is named by the `arrow_flight_session_id` cookie the server sets on the
//! first SetSessionOptions. Sessions are kept in memory, at most [`MAX_SESSIONS`] of them for
//! at most [`IDLE`] each since last used, and [`MAX_OPTIONS`] options apiece.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::codegen::http::HeaderMap;

use crate::error::{Error, Result};
use wirespeed::sync::Unpoison;

pub(crate) const SET: &str = "SetSessionOptions";
pub(crate) const GET: &str = "GetSessionOptions";
pub(crate) const CLOSE: &str = "CloseSession";
pub(crate) const COOKIE: &str = "arrow_flight_session_id";

const MAX_SESSIONS: usize = 10_000;
const MAX_OPTIONS: usize = 256;
const IDLE: Duration = Duration::from_secs(3600);

/// One option's value, as Flight.proto's `SessionOptionValue` has it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionOptionValue {
    /// The value; none means "unset this option".
    #[prost(oneof = "OptionValue", tags = "1, 2, 3, 4, 5")]
    pub option_value: Option<OptionValue>,
}

/// The kinds of value an option takes.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum OptionValue {
    /// A string.
    #[prost(string, tag = "1")]
    StringValue(String),
    /// A boolean.
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    /// A 64-bit integer.
    #[prost(sfixed64, tag = "3")]
    Int64Value(i64),
    /// A double.
    #[prost(double, tag = "4")]
    DoubleValue(f64),
    /// A list of strings.
    #[prost(message, tag = "5")]
    StringListValue(StringList),
}

/// A list of strings, as an option's value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringList {
    /// The strings.
    #[prost(string, repeated, tag = "1")]
    pub values: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SetSessionOptionsRequest {
    #[prost(map = "string, message", tag = "1")]
    pub session_options: HashMap<String, SessionOptionValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SetSessionOptionsResult {
    #[prost(map = "string, message", tag = "1")]
    pub errors: HashMap<String, SetError>,
}

/// Why an option was not set: Flight's `SetSessionOptionsResult.ErrorValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SetError {
    #[prost(int32, tag = "1")]
    pub value: i32,
}

/// `ErrorValue.INVALID_VALUE`.
const INVALID_VALUE: i32 = 2;
/// `ErrorValue.ERROR`.
const ERROR: i32 = 3;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GetSessionOptionsResult {
    #[prost(map = "string, message", tag = "1")]
    pub session_options: HashMap<String, SessionOptionValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CloseSessionResult {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `CloseSessionResult.Status.CLOSED` and `CLOSING`.
pub(crate) const CLOSED: i32 = 1;
pub(crate) const CLOSING: i32 = 2;

/// What a session action answers, and the cookie to set with it.
pub(crate) struct Answer {
    pub body: bytes::Bytes,
    pub set_cookie: Option<String>,
}

/// A session's options, and when it was last used.
type Session = (HashMap<String, SessionOptionValue>, Instant);

#[derive(Default)]
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Runs one of the session actions (`kind`) for the client whose headers are `headers`.
    pub(crate) fn act(&self, kind: &str, body: &[u8], headers: &HeaderMap) -> Result<Answer> {
        use prost::Message as _;
        let id = session_id(headers);
        let mut open = self.open.lock().unpoison();
        open.retain(|_, (_, used)| used.elapsed() < IDLE);
        let known = id.filter(|id| open.contains_key(id));
        match kind {
            SET => {
                let request = SetSessionOptionsRequest::decode(body)
                    .map_err(|e| Error::invalid_argument(format!("bad SetSessionOptionsRequest: {e}")))?;
                let (id, set_cookie) = match known {
                    Some(id) => (id, None),
                    None => {
                        if open.len() >= MAX_SESSIONS {
                            return Err(Error::status(
                                crate::error::Code::ResourceExhausted,
                                "too many sessions open on this server: close one, or try again later",
                            ));
                        }
                        let id = new_id()?;
                        (id.clone(), Some(format!("{COOKIE}={id}")))
                    }
                };
                let (options, used) = open.entry(id).or_insert_with(|| (HashMap::new(), Instant::now()));
                *used = Instant::now();
                let mut errors = HashMap::new();
                for (name, value) in request.session_options {
                    match value.option_value {
                        None => {
                            options.remove(&name);
                        }
                        Some(OptionValue::DoubleValue(d)) if !d.is_finite() => {
                            errors.insert(name, SetError { value: INVALID_VALUE });
                        }
                        Some(_) if options.len() >= MAX_OPTIONS && !options.contains_key(&name) => {
                            errors.insert(name, SetError { value: ERROR });
                        }
                        Some(_) => {
                            options.insert(name, value);
                        }
                    }
                }
                Ok(Answer { body: SetSessionOptionsResult { errors }.encode_to_vec().into(), set_cookie })
            }
            GET => {
                let session_options = match &known {
                    Some(id) => {
                        let (options, used) = open.get_mut(id).expect("known");
                        *used = Instant::now();
                        options.clone()
                    }
                    None => HashMap::new(),
                };
                Ok(Answer {
                    body: GetSessionOptionsResult { session_options }.encode_to_vec().into(),
                    set_cookie: None,
                })
            }
            _ => {
                let id = known.ok_or_else(|| Error::not_found("no session to close: set an option first"))?;
                open.remove(&id);
                let body = CloseSessionResult { status: CLOSED }.encode_to_vec().into();
                Ok(Answer { body, set_cookie: Some(format!("{COOKIE}={id}; Max-Age=0")) })
            }
        }
    }
}

/// The session the request's cookies name, if any.
fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim_matches('"').to_string())
}

fn new_id() -> Result<String> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(|e| Error::internal(format!("no randomness for a session id: {e}")))?;
    Ok(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn set(sessions: &Sessions, cookie: Option<&str>, options: &[(&str, Option<OptionValue>)]) -> Answer {
        let request = SetSessionOptionsRequest {
            session_options: options
                .iter()
                .map(|(n, v)| (n.to_string(), SessionOptionValue { option_value: v.clone() }))
                .collect(),
        };
        sessions.act(SET, &request.encode_to_vec(), &headers(cookie)).unwrap()
    }

    fn headers(cookie: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(c) = cookie {
            h.insert("cookie", format!("other=1; {c}").parse().unwrap());
        }
        h
    }

    fn get(sessions: &Sessions, cookie: Option<&str>) -> HashMap<String, SessionOptionValue> {
        let answer = sessions.act(GET, &[], &headers(cookie)).unwrap();
        GetSessionOptionsResult::decode(answer.body).unwrap().session_options
    }

    #[test]
    fn a_session_keeps_its_options_until_closed() {
        let sessions = Sessions::default();
        let first =
            set(&sessions, None, &[("a", Some(OptionValue::Int64Value(7))), ("b", Some(OptionValue::BoolValue(true)))]);
        let cookie = first.set_cookie.unwrap();
        assert!(cookie.starts_with("arrow_flight_session_id="));
        let again = set(&sessions, Some(&cookie), &[("b", None), ("c", Some(OptionValue::DoubleValue(f64::NAN)))]);
        assert!(again.set_cookie.is_none(), "the session is known");
        let errors = SetSessionOptionsResult::decode(again.body).unwrap().errors;
        assert_eq!(errors["c"].value, INVALID_VALUE);
        let options = get(&sessions, Some(&cookie));
        assert_eq!(options.len(), 1);
        assert_eq!(options["a"].option_value, Some(OptionValue::Int64Value(7)));
        assert!(get(&sessions, None).is_empty(), "another client sees none of it");
        let closed = sessions.act(CLOSE, &[], &headers(Some(&cookie))).unwrap();
        assert_eq!(CloseSessionResult::decode(closed.body).unwrap().status, CLOSED);
        assert!(get(&sessions, Some(&cookie)).is_empty());
        assert!(sessions.act(CLOSE, &[], &headers(Some(&cookie))).is_err());
    }
}
