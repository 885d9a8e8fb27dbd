#![deny(missing_docs, unreachable_pub)]
//! wirespeed core: endpoint URLs, keys, message memory, the sans-IO protocol, and the
//! transports that drive it (tcp, shm, ucx, and in-process pairs). Nothing here knows about
//! Arrow, files or schedulers.
//!
//! ```
//! use wirespeed::{Config, Key, connect, listen};
//!
//! # fn main() -> wirespeed::Result<()> {
//! let key = Key::new("a shared secret")?; // or Key::require(None) for WIRESPEED_KEY
//! let listener = listen("tcp://127.0.0.1:0", &key, &Config::default())?;
//! let client = connect(listener.url(), &key, &Config::default())?;
//! let server = listener.accept()?;
//!
//! let out = client.open_stream()?;
//! out.send(b"header", &[b"body in ", b"two buffers"])?; // written without concatenating
//! out.finish()?;
//!
//! let inc = server.accept_stream()?;
//! let msg = inc.recv()?.expect("one message");
//! assert_eq!(msg.header, b"header");
//! assert_eq!(msg.body.to_vec(), b"body in two buffers");
//! assert!(inc.recv()?.is_none()); // the client finished the stream
//! # Ok(())
//! # }
//! ```
//!
//! # What is public, and for whom
//!
//! - **The crate root** is the API applications use and that is meant to stay: [`connect`],
//!   [`listen`], [`Config`], [`Connection`], [`Stream`], [`Listener`], [`Key`], [`Buf`],
//!   [`Body`], [`Region`], [`RemoteRegion`], [`Fabric`], and the errors: [`Error`], its
//!   [`Class`] (the one table behind the CLI's exit codes and Python's exception classes),
//!   [`Violation`], [`Limit`] and [`ParseError`]. [`url`], [`key`], [`fabric`] and [`error`]
//!   are the modules behind them; [`transport`] holds the root's connection types.
//! - **Internal**, and hidden from these docs: `proto` (the protocol without I/O: frames, the
//!   handshake, the session, the one codec), `mem` (message memory's internals), `sync`,
//!   `seal` and the backends under `transport`. They are public so that this repository's other
//!   crates, its fuzz targets and its tools can use them; they follow the wire protocol's
//!   version, not the API's, and are outside semver.

pub mod error;
pub mod fabric;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod key;
#[doc(hidden)]
pub mod mem;
mod parse;
#[doc(hidden)]
pub mod proto;
#[doc(hidden)]
pub mod seal;
#[doc(hidden)]
pub mod sync;
pub mod transport;
pub mod url;

pub use bytes::Bytes;
pub use error::{Class, Error, ErrorCode, Limit, Result, Violation};
pub use fabric::{Fabric, Provider};
pub use key::Key;
pub use mem::{Body, Buf, Recycler, SealedRegion};
pub use parse::ParseError;
#[cfg(feature = "gpu")]
pub use transport::DeviceRegion;
pub use transport::{
    Config, Connection, Incoming, LentMemory, Listener, Message, PEER_TIMEOUT_ENV, Ready, Region, RemoteRegion, Stream,
    connect, listen,
};
