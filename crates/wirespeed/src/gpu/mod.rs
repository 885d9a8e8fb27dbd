//! GPU memory as an endpoint, through the CUDA driver API opened at run time (cudarc with
//! dynamic loading): the binary builds and runs on hosts without CUDA, and says "no GPU"
//! there instead of failing to start.
//!
//! What the timeslice builder needs and no more: device buffers, pinned host buffers and host
//! memory registered in place (so that a receive ring is copied from without staging), device
//! memory lent to another process (CUDA IPC), streams that copy asynchronously, events that
//! say when, and kernels compiled at run time by NVRTC.
//! Every object keeps the device's context alive and makes it current before it calls the
//! driver, so any thread may use or drop it.

mod cuda_ipc;
mod device;
mod kernel;

pub use cuda_ipc::{IPC_HANDLE_LEN, IpcMapping};
pub use device::{DeviceBuffer, Gpu, GpuEvent, GpuStream, PinnedBuffer, Registration};
pub use kernel::{Kernel, KernelArg};

/// What can go wrong with a GPU.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// No driver, no device of that number, or this build has none.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// A driver call that failed.
    #[error("CUDA {what}: {why}")]
    Driver {
        /// The driver call.
        what: &'static str,
        /// The driver's words.
        why: String,
    },
    /// NVRTC refused a kernel's source (its log).
    #[error("compiling a GPU kernel: {0}")]
    Compile(String),
}

/// A GPU call's result.
pub type GpuResult<T> = std::result::Result<T, GpuError>;

/// A GPU failing under a transport (a put into GPU memory, say).
impl From<GpuError> for crate::Error {
    fn from(e: GpuError) -> Self {
        crate::Error::Fabric { op: "CUDA", status: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_without_the_driver_says_no_gpu() {
        // SAFETY: only tries to open the library.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            return; // a GPU host: bench/gpu_device.sh checks the device itself
        }
        let e = Gpu::open(0).err().expect("no driver here");
        assert!(matches!(e, GpuError::NoGpu(_)), "{e}");
        assert!(e.to_string().starts_with("no GPU: "), "{e}");
    }
}
