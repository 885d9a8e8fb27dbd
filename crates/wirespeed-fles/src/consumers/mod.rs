//! FLESnet's consumer interface: each complete timeslice stays where the inputs wrote it, in a
//! Boost.Interprocess managed shared-memory segment ([`segment`]), and consumers hear of it as
//! a work item ([`work_item`]) over FLESnet's item protocol ([`distributor`]) on ZeroMQ
//! ([`zmtp`]) at `ipc://@NAME`: so `tsclient -i shm:NAME`, CbmRoot's online reconstruction and
//! any `fles::TimesliceReceiver` attach unchanged. [`publisher`] runs it for a compute node;
//! [`receiver`] is our own consumer of the same interface.

pub mod distributor;
pub mod publisher;
pub mod receiver;
pub mod segment;
pub mod work_item;
pub mod zmtp;
