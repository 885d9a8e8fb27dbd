//! One error type for both planes. Flight errors are gRPC status codes, so a handler's error
//! reaches a client with the same code whichever plane carried the call.

pub use tonic::Code;
pub use wirespeed::Class;

/// Everything a Flight call can fail with, on gRPC and every data plane alike: [`Error::code`] is the status code it travels as, [`Error::class`] the kind of failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error with a Flight status code, raised by a handler or received from the server.
    #[error("{message} ({code:?})")]
    Status {
        /// The status code.
        code: Code,
        /// The message, without the code.
        message: String,
        /// Binary details (gRPC's status details, pyarrow's `extra_info`).
        details: bytes::Bytes,
    },
    /// The data-plane transport failed (connection lost, timeout, reset).
    #[error("data plane: {0}")]
    Connection(#[from] wirespeed::Error),
    /// The peer sent something malformed or out of place.
    #[error("protocol error: {0}")]
    Peer(#[from] Violation),
    /// An Arrow error: data that does not encode or decode.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

/// What a peer sent that it may not: on a data plane, or in an Arrow IPC stream on either.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// A data-plane message that does not decode (`what`: its kind, or "empty").
    #[error("malformed data-plane {0} message")]
    Malformed(&'static str),
    /// A data-plane message of a type no version has.
    #[error("unknown data-plane message type {0}")]
    UnknownMessage(u8),
    /// A location from the server without the grant a plane call needs.
    #[error("location {0} carries no capability")]
    NoCapability(String),
    /// The call's stream ended before its OPEN.
    #[error("the call ended before OPEN")]
    EndedBeforeOpen,
    /// A call's first message was not OPEN.
    #[error("a call must start with OPEN")]
    OpenNotFirst,
    /// A second OPEN in one call.
    #[error("OPEN in the middle of a call")]
    OpenMidCall,
    /// A sealed message that does not open under the call's key, or has the wrong shape.
    #[error("a sealed plane message: {0}")]
    Unsealed(String),
    /// A stream that ended before its schema.
    #[error("the stream ended before its schema")]
    EndedBeforeSchema,
    /// A batch before the stream's schema.
    #[error("a batch before the schema")]
    BatchBeforeSchema,
    /// In a stream (`stream`) or an upload (`upload`).
    #[error("a second schema in one {0}")]
    SecondSchema(&'static str),
    /// Arrow IPC that does not decode, or whose buffers lie outside its body.
    #[error(transparent)]
    Ipc(#[from] IpcViolation),
}

/// What is wrong with an Arrow IPC message a peer sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IpcViolation {
    /// Metadata that is not a flatbuffer `Message` (the flatbuffer reader's words).
    #[error("IPC metadata is not a valid Message: {0}")]
    NotAMessage(String),
    /// A message whose header is missing (`0`: the message's kind).
    #[error("a {0} message without its header")]
    NoHeader(&'static str),
    /// A dictionary or record batch (`0`) before the schema.
    #[error("a {0} before the schema")]
    BeforeSchema(&'static str),
    /// A message of a kind a stream does not carry (`0`: its kind).
    #[error("unexpected IPC message {0}")]
    Unexpected(&'static str),
    /// A buffer outside the message's body.
    #[error("IPC buffer {offset}+{length} lies outside a body of {body_len} bytes")]
    BufferOutside {
        /// Where the buffer starts in the body.
        offset: i64,
        /// Its length.
        length: i64,
        /// The body's length.
        body_len: usize,
    },
    /// Data that arrow refuses (arrow's words).
    #[error("malformed IPC data: {0}")]
    Malformed(String),
}

/// A Flight call's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The most bytes of a peer's text (a ticket, a path, a header) that a message quotes.
pub const QUOTED_BYTES: usize = 200;

/// The most bytes of a message that travel: gRPC's C++ client refuses a `grpc-message` over
/// 8 KiB at times and over 16 KiB always, and would report that instead of the error.
pub const MESSAGE_BYTES: usize = 1024;

/// A peer's text as a message quotes it: quoted and escaped, its first [`QUOTED_BYTES`]
/// bytes only, then how long it was.
pub struct Quote<'a>(pub &'a [u8]);

impl Quote<'_> {
    /// A peer's text, quoted.
    pub fn str(text: &str) -> Quote<'_> {
        Quote(text.as_bytes())
    }
}

impl std::fmt::Display for Quote<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = &self.0[..self.0.len().min(QUOTED_BYTES)];
        write!(f, "\"{}\"", shown.escape_ascii())?;
        if shown.len() < self.0.len() {
            write!(f, "… ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

/// `message` cut to [`MESSAGE_BYTES`] on a character's boundary.
fn bounded(mut message: String) -> String {
    if message.len() > MESSAGE_BYTES {
        let mut end = MESSAGE_BYTES - '…'.len_utf8();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

impl Error {
    /// An error with `code` and `message`.
    pub fn status(code: Code, message: impl Into<String>) -> Self {
        Error::Status { code, message: message.into(), details: bytes::Bytes::new() }
    }

    /// The error with binary details for the client (gRPC's status details, pyarrow's
    /// `extra_info`); only a status error carries them.
    pub fn with_details(self, details: bytes::Bytes) -> Self {
        match self {
            Error::Status { code, message, .. } => Error::Status { code, message, details },
            other => other,
        }
    }

    /// Its binary details: a status error's, else none.
    pub fn details(&self) -> bytes::Bytes {
        match self {
            Error::Status { details, .. } => details.clone(),
            _ => bytes::Bytes::new(),
        }
    }
    /// NOT_FOUND: no such flight, ticket or path.
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::status(Code::NotFound, message)
    }
    /// INVALID_ARGUMENT: a request that cannot be served as it is.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::status(Code::InvalidArgument, message)
    }
    /// UNAUTHENTICATED: no credentials, or wrong ones.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Error::status(Code::Unauthenticated, message)
    }
    /// PERMISSION_DENIED: credentials that do not allow this.
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Error::status(Code::PermissionDenied, message)
    }
    /// UNIMPLEMENTED: a call this service does not serve.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Error::status(Code::Unimplemented, message)
    }
    /// UNAVAILABLE: the server cannot be reached, or went away.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::status(Code::Unavailable, message)
    }
    /// INTERNAL: a failure of the server's own.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::status(Code::Internal, message)
    }

    /// The Flight status code this error travels as. A data plane's failure travels as the
    /// code of its class, so that a caller sees what a gRPC call failing alike would give.
    pub fn code(&self) -> Code {
        match self {
            Error::Status { code, .. } => *code,
            Error::Connection(wirespeed::Error::Reset { code, .. }) if *code == wirespeed::ErrorCode::CANCELLED => {
                Code::Cancelled
            }
            Error::Connection(e) => match e.class() {
                Class::Timeout => Code::DeadlineExceeded,
                Class::Auth => Code::Unauthenticated,
                Class::Usage => Code::InvalidArgument,
                Class::Limit => Code::ResourceExhausted,
                _ => Code::Unavailable,
            },
            Error::Peer(_) => Code::InvalidArgument,
            Error::Arrow(_) => Code::Internal,
        }
    }

    /// What kind of failure this is: its status code's class.
    pub fn class(&self) -> Class {
        match self {
            Error::Connection(e) => e.class(),
            Error::Peer(_) => Class::Protocol,
            _ => class_of(self.code()),
        }
    }

    /// The message without the code, as it travels: at most [`MESSAGE_BYTES`].
    pub fn message(&self) -> String {
        bounded(match self {
            Error::Status { message, .. } => message.clone(),
            other => other.to_string(),
        })
    }
}

impl From<tonic::Status> for Error {
    /// Keeps the message proper: Arrow servers append ". Detail: …" (a Python traceback from
    /// pyarrow) after it.
    fn from(s: tonic::Status) -> Self {
        let first_line = s.message().lines().next().unwrap_or_default();
        let mut message = first_line.split(". Detail: ").next().unwrap_or_default().to_string();
        // A transport's status says only "transport error": the cause (a TLS alert, a refused
        // connection) is what a user can act on.
        if let Some(cause) = innermost_cause(&s).filter(|c| !message.contains(c.as_str())) {
            message = format!("{message}: {cause}");
            if cause.contains("CertificateRequired") {
                message.push_str(" (the server accepts only clients with a certificate from its CA)");
            }
        }
        Error::Status { code: s.code(), message, details: bytes::Bytes::copy_from_slice(s.details()) }
    }
}

fn innermost_cause(s: &tonic::Status) -> Option<String> {
    let mut cause = std::error::Error::source(s)?;
    while let Some(deeper) = cause.source() {
        cause = deeper;
    }
    Some(cause.to_string())
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        tonic::Status::with_details(e.code(), e.message(), e.details())
    }
}

impl From<arrow_flight::error::FlightError> for Error {
    fn from(e: arrow_flight::error::FlightError) -> Self {
        use arrow_flight::error::FlightError as F;
        match e {
            F::Tonic(s) => Error::from(*s),
            F::Arrow(a) => Error::Arrow(a),
            other => Violation::Ipc(IpcViolation::Malformed(other.to_string())).into(),
        }
    }
}

/// The class of a failure that arrives as `code`.
pub fn class_of(code: Code) -> Class {
    match code {
        Code::Unauthenticated | Code::PermissionDenied => Class::Auth,
        Code::Unavailable | Code::Cancelled | Code::Aborted => Class::Connection,
        Code::DeadlineExceeded => Class::Timeout,
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => Class::Usage,
        Code::NotFound => Class::NotFound,
        Code::ResourceExhausted => Class::Limit,
        _ => Class::Failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plane's failure has the class the same failure over gRPC has.
    #[test]
    fn a_transport_error_travels_as_a_code_of_its_class() {
        use std::io::{Error as Io, ErrorKind};
        let failures = [
            wirespeed::Error::Timeout(std::time::Duration::from_secs(1)),
            wirespeed::Error::Auth("wrong key"),
            wirespeed::Error::Key("unreadable".into()),
            wirespeed::Error::Usage("bad"),
            wirespeed::Error::Limit(wirespeed::Limit::Streams(4)),
            wirespeed::Error::from(Io::from(ErrorKind::ConnectionRefused)),
            wirespeed::Error::Closed,
        ];
        for e in failures {
            let class = e.class();
            let e = Error::Connection(e);
            assert_eq!(class_of(e.code()), class, "{e}");
            assert_eq!(e.class(), class);
        }
    }

    #[test]
    fn quotes_and_messages_are_bounded() {
        assert_eq!(Quote::str("t.arrow").to_string(), "\"t.arrow\"");
        assert_eq!(Quote(b"a\n\xff").to_string(), "\"a\\n\\xff\"");
        let long = "x".repeat(65536);
        let quoted = Quote::str(&long).to_string();
        assert!(quoted.len() < QUOTED_BYTES + 40 && quoted.ends_with("… (65536 bytes)"), "{quoted}");
        let e = Error::not_found("é".repeat(5000));
        assert!(e.message().len() <= MESSAGE_BYTES && e.message().ends_with('…'));
        assert_eq!(Error::not_found("short").message(), "short");
        assert!(tonic::Status::from(Error::internal(long)).message().len() <= MESSAGE_BYTES);
    }
}
