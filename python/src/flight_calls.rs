//! The Flight RPCs and actions pyarrow 26's client lacks (PollFlightInfo, CancelFlightInfo,
//! RenewFlightEndpoint, the session options), made by the Rust client for `wirespeed.flight`'s
//! FlightClient. Messages cross as the protobuf bytes pyarrow's `serialize` gives and its
//! `deserialize` takes; the session's cookie stays here, between calls. A server's hooks for
//! the two actions get their requests' messages unwrapped here too.

use std::collections::HashMap;
use std::sync::Mutex;

use arrow_flight::{
    CancelFlightInfoRequest, CancelFlightInfoResult, FlightDescriptor, FlightEndpoint, FlightInfo,
    RenewFlightEndpointRequest,
};
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};
use wirespeed_flight::{Client, ClientTls, OptionValue, SessionOptionError, SessionOptionValue, StringList};

use crate::errors;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FlightCalls>()?;
    m.add_function(wrap_pyfunction!(action_request, m)?)?;
    m.add_function(wrap_pyfunction!(cancel_result, m)?)
}

/// One server's newer RPCs, on a gRPC connection of their own.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct FlightCalls {
    client: Mutex<Client>,
}

fn decode<M: Message + Default>(what: &str, bytes: &[u8]) -> PyResult<M> {
    M::decode(bytes).map_err(|e| errors::usage(format!("not a serialized {what}: {e}")))
}

fn bytes<'py>(py: Python<'py>, message: &impl Message) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &message.encode_to_vec())
}

/// A session option's value from Python: str, bool, int, float, a list of str, or None (unset).
fn option_value(value: &Bound<'_, PyAny>) -> PyResult<SessionOptionValue> {
    let option_value = if value.is_none() {
        None
    } else if value.is_instance_of::<PyBool>() {
        Some(OptionValue::BoolValue(value.extract()?))
    } else if value.is_instance_of::<PyInt>() {
        Some(OptionValue::Int64Value(value.extract()?))
    } else if value.is_instance_of::<PyFloat>() {
        Some(OptionValue::DoubleValue(value.extract()?))
    } else if value.is_instance_of::<PyString>() {
        Some(OptionValue::StringValue(value.extract()?))
    } else if let Ok(values) = value.extract::<Vec<String>>() {
        Some(OptionValue::StringListValue(StringList { values }))
    } else {
        let kind = value.get_type().name()?;
        return Err(errors::usage(format!(
            "a session option is str, bool, int, float, a list of str or None, not {kind}"
        )));
    };
    Ok(SessionOptionValue { option_value })
}

fn option_to_py<'py>(py: Python<'py>, value: &SessionOptionValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match &value.option_value {
        None => py.None().into_bound(py),
        Some(OptionValue::StringValue(s)) => s.into_pyobject(py)?.into_any(),
        Some(OptionValue::BoolValue(b)) => PyBool::new(py, *b).to_owned().into_any(),
        Some(OptionValue::Int64Value(i)) => i.into_pyobject(py)?.into_any(),
        Some(OptionValue::DoubleValue(d)) => d.into_pyobject(py)?.into_any(),
        Some(OptionValue::StringListValue(list)) => PyList::new(py, &list.values)?.into_any(),
    })
}

impl FlightCalls {
    /// Runs `call` on the client, which carries `authorization` (the program's header) if any.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        authorization: Option<String>,
        call: impl FnOnce(&Client) -> wirespeed_flight::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
            client.set_authorization(authorization.as_deref())?;
            call(&client)
        })
        .map_err(errors::flight)
    }
}

#[pymethods]
impl FlightCalls {
    #[new]
    #[pyo3(signature = (url, roots=None, identity=None, server_name=None, skip_verification=false))]
    fn new(
        py: Python<'_>,
        url: &str,
        roots: Option<Vec<u8>>,
        identity: Option<(Vec<u8>, Vec<u8>)>,
        server_name: Option<String>,
        skip_verification: bool,
    ) -> PyResult<Self> {
        let tls = ClientTls { roots, identity, server_name, skip_verification };
        let client = py.detach(|| Client::connect_tls(url, &tls)).map_err(errors::flight)?;
        Ok(FlightCalls { client: Mutex::new(client) })
    }

    /// (FlightInfo or None, FlightDescriptor to poll next or None, progress or None,
    /// expiration in ns since the epoch or None), the messages serialized.
    #[allow(clippy::type_complexity)]
    fn poll_flight_info<'py>(
        &self,
        py: Python<'py>,
        descriptor: &[u8],
        authorization: Option<String>,
    ) -> PyResult<(Option<Bound<'py, PyBytes>>, Option<Bound<'py, PyBytes>>, Option<f64>, Option<i64>)> {
        let descriptor: FlightDescriptor = decode("FlightDescriptor", descriptor)?;
        let poll = self.run(py, authorization, |c| c.poll_flight_info(&descriptor))?;
        let expiration = poll.expiration_time.map(|t| t.seconds * 1_000_000_000 + i64::from(t.nanos));
        Ok((
            poll.info.as_ref().map(|m| bytes(py, m)),
            poll.flight_descriptor.as_ref().map(|m| bytes(py, m)),
            poll.progress,
            expiration,
        ))
    }

    /// The CancelFlightInfo action for a serialized FlightInfo: its CancelStatus's number.
    fn cancel_flight_info(&self, py: Python<'_>, info: &[u8], authorization: Option<String>) -> PyResult<i32> {
        let info: FlightInfo = decode("FlightInfo", info)?;
        Ok(self.run(py, authorization, |c| c.cancel_flight_info(&info))?.status)
    }

    /// The RenewFlightEndpoint action for a serialized FlightEndpoint: the renewed one.
    fn renew_flight_endpoint<'py>(
        &self,
        py: Python<'py>,
        endpoint: &[u8],
        authorization: Option<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let endpoint: FlightEndpoint = decode("FlightEndpoint", endpoint)?;
        Ok(bytes(py, &self.run(py, authorization, |c| c.renew_flight_endpoint(&endpoint))?))
    }

    /// SetSessionOptions: the options refused, by name, as "invalid_name", "invalid_value" or
    /// "error".
    fn set_session_options(
        &self,
        py: Python<'_>,
        options: &Bound<'_, PyDict>,
        authorization: Option<String>,
    ) -> PyResult<HashMap<String, &'static str>> {
        let mut wanted = HashMap::new();
        for (name, value) in options.iter() {
            wanted.insert(name.extract::<String>()?, option_value(&value)?);
        }
        let refused = self.run(py, authorization, |c| c.set_session_options(wanted))?;
        let name = |e| match e {
            SessionOptionError::InvalidName => "invalid_name",
            SessionOptionError::InvalidValue => "invalid_value",
            _ => "error",
        };
        Ok(refused.into_iter().map(|(option, e)| (option, name(e))).collect())
    }

    /// GetSessionOptions: the session's options as Python values.
    fn get_session_options<'py>(&self, py: Python<'py>, authorization: Option<String>) -> PyResult<Bound<'py, PyDict>> {
        let options = self.run(py, authorization, |c| c.get_session_options())?;
        let dict = PyDict::new(py);
        for (name, value) in &options {
            dict.set_item(name, option_to_py(py, value)?)?;
        }
        Ok(dict)
    }

    /// CloseSession: ends the session; later calls start another.
    fn close_session(&self, py: Python<'_>, authorization: Option<String>) -> PyResult<()> {
        self.run(py, authorization, |c| c.close_session())
    }
}

/// The message inside a CancelFlightInfo or RenewFlightEndpoint action's body (a serialized
/// FlightInfo or FlightEndpoint), for a server's hooks.
#[pyfunction]
pub fn action_request<'py>(py: Python<'py>, kind: &str, body: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    match kind {
        "CancelFlightInfo" => {
            let request: CancelFlightInfoRequest = decode(kind, body)?;
            Ok(bytes(py, &request.info.ok_or_else(|| errors::usage("CancelFlightInfo names no FlightInfo"))?))
        }
        "RenewFlightEndpoint" => {
            let request: RenewFlightEndpointRequest = decode(kind, body)?;
            Ok(bytes(py, &request.endpoint.ok_or_else(|| errors::usage("RenewFlightEndpoint names no endpoint"))?))
        }
        other => Err(errors::usage(format!("{other:?} is not an action with a request message"))),
    }
}

/// A serialized CancelFlightInfoResult.
#[pyfunction]
pub fn cancel_result(py: Python<'_>, status: i32) -> Bound<'_, PyBytes> {
    bytes(py, &CancelFlightInfoResult { status })
}
