//! The client side of the data plane: one authenticated connection per location URL, reused
//! by every call, and a stream per call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wirespeed::{Connection, Key};

use super::proto::{Method, Msg};
use super::{CallStream, Side};
use crate::error::{Result, Violation};
use crate::location::PlaneLocation;

pub(crate) struct PlaneConnections {
    key: Key,
    config: wirespeed::Config,
    connections: Mutex<HashMap<String, Connection>>,
}

impl PlaneConnections {
    pub(crate) fn new(key: Key) -> Self {
        PlaneConnections { key, config: super::config(), connections: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    /// Opens a call: a new stream on the location's connection, starting with OPEN.
    pub(crate) fn open(&self, location: &PlaneLocation, method: Method, target: &[u8]) -> Result<Arc<CallStream>> {
        let grant = location.grant.ok_or_else(|| Violation::NoCapability(location.url.clone()))?;
        let stream = self.stream(&location.url, location.sealed)?;
        let open = Msg::Open { method, expiry: grant.expiry, mac: grant.mac, target: target.to_vec().into() };
        stream.send(&open.encode(), &[])?;
        Ok(Arc::new(stream))
    }

    /// A stream on a cached connection, or on a fresh one if there is none or it died.
    fn stream(&self, url: &str, sealed: bool) -> Result<CallStream> {
        let cached = self.connections.lock().expect("planes lock").get(url).cloned();
        if let Some(conn) = cached
            && let Ok(stream) = conn.open_stream()
        {
            return Ok(CallStream::new(stream, &conn, Side::Client, sealed));
        }
        let conn = wirespeed::connect(url, &self.key, &self.config)?;
        let stream = CallStream::new(conn.open_stream()?, &conn, Side::Client, sealed);
        self.connections.lock().expect("planes lock").insert(url.to_string(), conn);
        Ok(stream)
    }
}
