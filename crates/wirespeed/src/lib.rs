//! wirespeed core: endpoint URLs, keys, message memory, the sans-IO protocol, and the
//! transports that drive it (tcp, shm). Nothing here knows about Arrow, files or schedulers.

pub mod error;
pub mod key;
pub mod mem;
pub mod proto;
pub mod transport;
pub mod url;

pub use error::{Error, ErrorCode, Result};
pub use key::Key;
pub use mem::{Body, Buf};
pub use transport::{Config, Connection, Incoming, Listener, Message, Stream, connect, listen};
