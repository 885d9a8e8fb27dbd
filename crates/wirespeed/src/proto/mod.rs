//! The wire protocol as sans-IO state machines: bytes and buffers in, events and bytes out.
//! No sockets, threads or clocks in here; every backend drives these.

pub mod codec;
pub mod decoder;
pub mod frame;
pub mod handshake;
pub mod rma;
pub mod session;
