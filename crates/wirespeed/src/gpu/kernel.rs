//! Kernels compiled at run time by NVRTC for the device at hand, so the repository ships
//! CUDA C++ source and needs no CUDA toolkit to build.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::{result, sys};
use cudarc::nvrtc;

use super::device::{Context, Gpu, GpuStream, driver};
use super::{GpuError, GpuResult};

/// One kernel of a module compiled from source; the module stays loaded while it lives.
pub struct Kernel {
    ctx: Arc<Context>,
    module: sys::CUmodule,
    function: sys::CUfunction,
}

// SAFETY: module and function handles may be used from any thread with the context current.
unsafe impl Send for Kernel {}

/// A kernel parameter, passed by value.
#[derive(Debug, Clone, Copy)]
pub enum KernelArg {
    /// A 64-bit integer (or a device pointer).
    U64(u64),
    /// A 32-bit integer.
    U32(u32),
}

impl Gpu {
    /// Compiles `source` (CUDA C++) for this device and loads its `extern "C"` kernel `name`.
    pub fn compile(&self, source: &str, name: &str) -> GpuResult<Kernel> {
        // SAFETY: only tries to open the library.
        if !unsafe { nvrtc::sys::is_culib_present() } {
            return Err(GpuError::Compile("NVRTC (libnvrtc.so) is not installed on this host".into()));
        }
        self.ctx.bind()?;
        let attr = |a| {
            let mut v = 0;
            // SAFETY: a valid device and attribute.
            unsafe { sys::cuDeviceGetAttribute(&mut v, a, self.ctx.device) }.result().map(|()| v)
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        let (major, minor) = (
            major.map_err(driver("reading the device's capability"))?,
            minor.map_err(driver("reading the device's capability"))?,
        );
        let ptx = compile_ptx(source, &format!("--gpu-architecture=compute_{major}{minor}"))?;
        // SAFETY: `ptx` is NUL-terminated PTX text from NVRTC.
        let module = unsafe { result::module::load_data(ptx.as_ptr().cast()) }.map_err(driver("loading a kernel"))?;
        let cname = CString::new(name).map_err(|_| GpuError::Compile(format!("{name:?} is no kernel name")))?;
        // SAFETY: a module just loaded.
        match unsafe { result::module::get_function(module, cname) } {
            Ok(function) => Ok(Kernel { ctx: self.ctx.clone(), module, function }),
            Err(e) => {
                // SAFETY: loaded above, used by nothing.
                let _ = unsafe { result::module::unload(module) };
                Err(driver("finding the kernel")(e))
            }
        }
    }
}

fn compile_ptx(source: &str, arch: &str) -> GpuResult<Vec<u8>> {
    let src = CString::new(source).map_err(|_| GpuError::Compile("the source holds a NUL byte".into()))?;
    let prog = nvrtc::result::create_program(&src, None).map_err(|e| GpuError::Compile(format!("{e:?}")))?;
    // SAFETY: `prog` was just created and is destroyed once, below.
    unsafe {
        let compiled = nvrtc::result::compile_program(prog, &[arch, "--std=c++17"]);
        let out = match compiled {
            Ok(()) => nvrtc::result::get_ptx(prog).map(|p| p.iter().map(|&c| c as u8).collect()),
            Err(e) => {
                let log = nvrtc::result::get_program_log(prog).unwrap_or_default();
                let log: Vec<u8> = log.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                let _ = nvrtc::result::destroy_program(prog);
                return Err(GpuError::Compile(format!("{e:?}: {}", String::from_utf8_lossy(&log))));
            }
        };
        let _ = nvrtc::result::destroy_program(prog);
        out.map_err(|e| GpuError::Compile(format!("{e:?}")))
    }
}

impl Kernel {
    /// Queues the kernel on `stream` over `grid` blocks of `block` threads.
    ///
    /// # Safety
    /// The arguments must be what the kernel expects, and any memory they point to must stay
    /// allocated until the work completes.
    pub unsafe fn launch(&self, stream: &GpuStream, grid: u32, block: u32, args: &[KernelArg]) -> GpuResult<()> {
        self.ctx.bind()?;
        let mut values: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                KernelArg::U64(v) => v,
                KernelArg::U32(v) => v as u64,
            })
            .collect();
        // The driver reads each parameter's own size from its address: a u32 is the low half
        // of its slot (this is a little-endian host).
        let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| (v as *mut u64).cast()).collect();
        // SAFETY: the caller vouches for the arguments; `params` outlives the call, which
        // copies them.
        unsafe { result::launch_kernel(self.function, (grid, 1, 1), (block, 1, 1), 0, stream.raw, &mut params) }
            .map_err(driver("launching a kernel"))
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: loaded in `Gpu::compile`; its launches were waited for by the owner.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}
