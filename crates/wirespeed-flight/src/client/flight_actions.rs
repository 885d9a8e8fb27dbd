//! The RPCs and actions Flight has grown since Arrow 13, which pyarrow 26 lacks:
//! PollFlightInfo, CancelFlightInfo, RenewFlightEndpoint and the session options.

use std::collections::HashMap;

use arrow_flight::{
    Action, CancelFlightInfoRequest, CancelFlightInfoResult, FlightDescriptor, FlightEndpoint, FlightInfo, PollInfo,
    RenewFlightEndpointRequest,
};
use prost::Message as _;

use super::Client;
use crate::error::{Error, Result};
use crate::grpc::service::{CANCEL_FLIGHT_INFO, RENEW_FLIGHT_ENDPOINT};
use crate::grpc::session::{
    self, CloseSessionResult, GetSessionOptionsResult, SessionOptionValue, SetSessionOptionsRequest,
    SetSessionOptionsResult,
};

/// Why an option was not set, as SetSessionOptions answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionOptionError {
    /// The server knows no option of this name.
    InvalidName,
    /// The value does not suit the option.
    InvalidValue,
    /// Another failure (or one this client does not know).
    Error,
}

impl Client {
    /// PollFlightInfo: how far the query `descriptor` names has come, and its FlightInfo so far.
    pub fn poll_flight_info(&self, descriptor: &FlightDescriptor) -> Result<PollInfo> {
        let mut grpc = self.grpc.clone();
        let request = self.request(descriptor.clone());
        Ok(self.runtime.block_on(grpc.poll_flight_info(request))?.into_inner())
    }

    /// The CancelFlightInfo action: asks the server to stop the query behind `info`.
    pub fn cancel_flight_info(&self, info: &FlightInfo) -> Result<CancelFlightInfoResult> {
        let body = CancelFlightInfoRequest { info: Some(info.clone()) }.encode_to_vec();
        self.one_answer(CANCEL_FLIGHT_INFO, body)
    }

    /// The RenewFlightEndpoint action: `endpoint` with a later expiration time.
    pub fn renew_flight_endpoint(&self, endpoint: &FlightEndpoint) -> Result<FlightEndpoint> {
        let body = RenewFlightEndpointRequest { endpoint: Some(endpoint.clone()) }.encode_to_vec();
        self.one_answer(RENEW_FLIGHT_ENDPOINT, body)
    }

    /// SetSessionOptions: sets (or, with no value, unsets) options for this client's session,
    /// which the server starts on the first call; returns the options it refused.
    pub fn set_session_options(
        &self,
        options: HashMap<String, SessionOptionValue>,
    ) -> Result<HashMap<String, SessionOptionError>> {
        let body = SetSessionOptionsRequest { session_options: options }.encode_to_vec();
        let request = self.request(Action { r#type: session::SET.into(), body: body.into() });
        let mut grpc = self.grpc.clone();
        let (cookie, answer) = self.runtime.block_on(async move {
            let response = grpc.do_action(request).await?;
            let cookie = response.metadata().get("set-cookie").cloned();
            let answer = response.into_inner().message().await?;
            Ok::<_, Error>((cookie, answer))
        })?;
        if let Some(cookie) = cookie.and_then(|c| c.to_str().ok()?.split(';').next()?.parse().ok()) {
            *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(cookie);
        }
        let answer = answer.ok_or_else(|| Error::internal("SetSessionOptions returned no result"))?;
        let result = decode::<SetSessionOptionsResult>(&answer.body)?;
        let kind = |value| match value {
            1 => SessionOptionError::InvalidName,
            2 => SessionOptionError::InvalidValue,
            _ => SessionOptionError::Error,
        };
        Ok(result.errors.into_iter().map(|(name, e)| (name, kind(e.value))).collect())
    }

    /// GetSessionOptions: the options of this client's session.
    pub fn get_session_options(&self) -> Result<HashMap<String, SessionOptionValue>> {
        let result: GetSessionOptionsResult = self.one_answer(session::GET, Vec::new())?;
        Ok(result.session_options)
    }

    /// CloseSession: ends this client's session; later calls start a new one.
    pub fn close_session(&self) -> Result<()> {
        let result: CloseSessionResult = self.one_answer(session::CLOSE, Vec::new())?;
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = None;
        match result.status {
            session::CLOSED | session::CLOSING => Ok(()),
            status => Err(Error::internal(format!("the server did not close the session (status {status})"))),
        }
    }

    /// An action with one result, decoded as `M`.
    fn one_answer<M: prost::Message + Default>(&self, kind: &str, body: Vec<u8>) -> Result<M> {
        let results = self.action(self.request(Action { r#type: kind.into(), body: body.into() }))?;
        let first = results.first().ok_or_else(|| Error::internal(format!("{kind} returned no result")))?;
        decode(first)
    }
}

fn decode<M: prost::Message + Default>(body: &[u8]) -> Result<M> {
    M::decode(body).map_err(|e| Error::internal(format!("the server's answer does not decode: {e}")))
}
