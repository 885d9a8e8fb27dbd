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
//!   [`Body`], [`Region`], [`RemoteRegion`], [`Fabric`], and the errors [`Error`] and
//!   [`Violation`]. [`url`] parses endpoints, [`sync`] is the one lock helper the other crates
//!   share.
//! - **[`proto`]** is the protocol without I/O (frames, handshake, session, one-sided frames).
//!   It is public so that other drivers can run it (the fuzz targets do, a simulator could);
//!   it follows the wire protocol's version, not the API's.
//! - **[`transport`]** holds the backends and the engine. Applications need only what the
//!   root re-exports; the rest is public for the tools in this repository (an in-process pair
//!   for a local copy, UCX-allocated memory for a fair benchmark) and may change.
//! - **[`mem`]** is message memory: [`Buf`], [`Body`], sealed regions and recyclers, all
//!   re-exported at the root; the module's other items serve the backends.
//!
//! Session state, the emulated one-sided state and every backend's internals are private.

pub mod error;
pub mod fabric;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod key;
#[doc(hidden)]
pub mod mem;
#[doc(hidden)]
pub mod proto;
#[doc(hidden)]
pub mod seal;
#[doc(hidden)]
pub mod sync;
pub mod transport;
pub mod url;

pub use bytes::Bytes;
pub use error::{Class, Error, ErrorCode, Limit, ParseError, Result, Violation};
pub use fabric::{Fabric, Provider};
pub use key::Key;
pub use mem::{Body, Buf, Recycler, SealedRegion};
#[cfg(feature = "gpu")]
pub use transport::DeviceRegion;
pub use transport::{
    Config, Connection, Incoming, LentMemory, Listener, Message, Ready, Region, RemoteRegion, Stream, connect, listen,
};
