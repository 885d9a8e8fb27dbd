//! GPU memory lent to the peer: its puts land in device memory without passing through a host
//! buffer of ours. Only fabrics that can write device memory lend it (shared memory through
//! CUDA IPC, UCX with its CUDA transports); the rest say so, and the caller stages through
//! host memory instead.

use std::sync::Arc;

use super::conn::Connection;
use super::rma::{DEVICE_REGION, RemoteRegion};
use crate::error::{Error, Result};
use crate::gpu::{DeviceBuffer, Gpu};
use crate::proto::rma::Descriptor;

/// Device memory of ours that the peer may put into and get from, for as long as this lives.
pub struct DeviceRegion {
    /// The fabric's registration, undone before the memory goes.
    _access: Box<dyn std::any::Any + Send + Sync>,
    mem: Arc<DeviceBuffer>,
    descriptor: Vec<u8>,
}

impl DeviceRegion {
    /// What the peer passes to [`Connection::remote_region`]. Send it only over this
    /// connection: it grants access to the memory.
    pub fn descriptor(&self) -> &[u8] {
        &self.descriptor
    }

    /// The memory's device address.
    pub fn address(&self) -> u64 {
        self.mem.device_ptr()
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }
}

impl Connection {
    /// Lends the peer `mem`, device memory, for one-sided puts and gets; send it
    /// [`DeviceRegion::descriptor`]. Fails on fabrics that cannot write device memory.
    pub fn register_device(&self, mem: Arc<DeviceBuffer>) -> Result<DeviceRegion> {
        let Some(native) = &self.inner.native_rma else {
            return Err(Error::Fabric {
                op: "lending GPU memory",
                status: "this fabric has no one-sided access".into(),
            });
        };
        let (access, native) = native.register_device(&mem)?;
        let descriptor = Descriptor { id: DEVICE_REGION, len: mem.len() as u64, native }.encode();
        Ok(DeviceRegion { _access: access, mem, descriptor })
    }
}

impl RemoteRegion {
    /// The GPU that puts into this region are copied to by this process (shared memory lends
    /// GPU memory through CUDA IPC): page-lock what is put from there for the copy engines to
    /// read it directly. None for host memory, or where the fabric moves the bytes.
    pub fn copied_by(&self) -> Option<Gpu> {
        self.native.as_ref().and_then(|n| n.copied_by())
    }
}
