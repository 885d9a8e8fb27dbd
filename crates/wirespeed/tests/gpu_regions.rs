//! GPU memory lent for one-sided puts: shm by CUDA IPC (from another process, and within this
//! one), UCX as CUDA memory, refused by fabrics that cannot write it, and forged descriptors
//! refused. Runs where a GPU is (bench/gpu_device.sh carries this binary to the lent machine);
//! elsewhere only the descriptors that are refused before any GPU is opened are checked.
#![cfg(feature = "gpu")]

use std::sync::Arc;
use std::time::Duration;

use wirespeed::gpu::Gpu;
use wirespeed::proto::rma::Descriptor;
use wirespeed::{Config, Connection, Key, connect, listen};

const LEN: usize = 3 << 20;
/// Set in a child process of this binary: the URL it connects to as the putting peer.
const PEER_URL: &str = "WIRESPEED_GPU_TEST_PEER";
const KEY: &str = "gpu-regions-test-key-0123456789";

fn gpu() -> Option<Gpu> {
    Gpu::open(0).inspect_err(|e| eprintln!("skipped: {e}")).ok()
}

fn key() -> Key {
    Key::new(KEY.as_bytes()).unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// What the device holds at `address`.
fn device_bytes(gpu: &Gpu, address: u64, len: usize) -> Vec<u8> {
    let stream = gpu.stream().unwrap();
    let mut out = vec![0; len];
    // SAFETY: `address` names `len` bytes of device memory the caller keeps allocated.
    unsafe { stream.copy_from_address(&mut out, address) }.unwrap();
    stream.synchronize().unwrap();
    out
}

fn pair(scheme: &str) -> (wirespeed::Listener, Connection, Connection) {
    let url = match scheme {
        "shm" => format!("shm://@wirespeed-gpu-test-{}-{}", std::process::id(), rand_suffix()),
        other => format!("{other}://127.0.0.1:0"),
    };
    let l = listen(&url, &key(), &Config::default()).unwrap();
    let c = connect(l.url(), &key(), &Config::default()).unwrap();
    let s = l.accept().unwrap();
    (l, c, s)
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// The owner lends GPU memory; the peer (this process) puts into it and gets back.
fn put_and_get_in_process(scheme: &str) {
    let Some(gpu) = gpu() else { return };
    let (_l, c, s) = pair(scheme);
    let region = match s.register_device(Arc::new(gpu.alloc(LEN).unwrap())) {
        Ok(r) => r,
        // A UCX built without CUDA: a clear error, which the builder falls back on.
        Err(e) if scheme == "ucx" => {
            eprintln!("ucx lends no GPU memory here: {e}");
            assert!(e.to_string().contains("GPU memory"), "{e}");
            return;
        }
        Err(e) => panic!("{scheme}: {e}"),
    };
    let remote = c.remote_region(region.descriptor()).unwrap();
    assert_eq!(remote.len(), LEN as u64);
    let data = pattern(LEN - 1000);
    c.put(&remote, 1000, &data).unwrap();
    assert_eq!(device_bytes(&gpu, region.address() + 1000, data.len()), data, "{scheme}: put into GPU memory");
    let mut back = vec![0; 5000];
    c.get(&remote, 1000, &mut back).unwrap();
    assert_eq!(back, data[..5000], "{scheme}: got from GPU memory");
    assert!(c.put(&remote, LEN as u64 - 10, &[0; 11]).is_err(), "{scheme}: a put past the end");
}

#[test]
fn a_peer_in_this_process_puts_into_gpu_memory_over_shm() {
    put_and_get_in_process("shm");
}

#[test]
fn a_peer_in_this_process_puts_into_gpu_memory_over_ucx() {
    put_and_get_in_process("ucx");
}

#[test]
fn a_peer_process_puts_into_gpu_memory_by_cuda_ipc() {
    let Some(gpu) = gpu() else { return };
    let url = format!("shm://@wirespeed-gpu-test-ipc-{}", std::process::id());
    let l = listen(&url, &key(), &Config::default()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "peer_process_role", "--nocapture", "--test-threads=1"])
        .env(PEER_URL, l.url())
        .spawn()
        .unwrap();
    let s = l.accept_timeout(Duration::from_secs(20)).unwrap();
    let region = s.register_device(Arc::new(gpu.alloc(LEN).unwrap())).unwrap();
    let stream = s.accept_stream_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(stream.recv().unwrap().unwrap().header, b"ready");
    stream.send(region.descriptor(), &[]).unwrap();
    let said = stream.recv().unwrap().unwrap().header;
    assert_eq!(said, b"put; the put past the end failed", "{}", String::from_utf8_lossy(&said));
    assert_eq!(device_bytes(&gpu, region.address() + 4096, LEN - 4096), pattern(LEN - 4096));
    assert!(stream.recv().unwrap().is_none());
    assert!(child.wait().unwrap().success());
}

/// The other side of `a_peer_process_puts_into_gpu_memory_by_cuda_ipc`, run in a child
/// process; does nothing when run as a test of its own.
#[test]
fn peer_process_role() {
    let Ok(url) = std::env::var(PEER_URL) else { return };
    let c = connect(&url, &key(), &Config::default()).unwrap();
    let stream = c.open_stream().unwrap();
    stream.send(b"ready", &[]).unwrap();
    let remote = c.remote_region(&stream.recv().unwrap().unwrap().header).unwrap();
    c.put(&remote, 4096, &pattern(LEN - 4096)).unwrap();
    let past = c.put(&remote, LEN as u64, &[1]);
    let said: &[u8] = if past.is_err() { b"put; the put past the end failed" } else { b"a put past the end went in" };
    stream.send(said, &[]).unwrap();
    stream.finish().unwrap();
}

#[test]
fn fabrics_that_cannot_write_gpu_memory_say_so() {
    let Some(gpu) = gpu() else { return };
    let (_l, _c, s) = pair("tcp");
    let e = s.register_device(Arc::new(gpu.alloc(4096).unwrap())).err().expect("tcp has no one-sided access");
    assert!(e.to_string().contains("lending GPU memory"), "{e}");
}

#[test]
fn forged_gpu_descriptors_are_errors() {
    let (_l, c, _s) = pair("shm");
    let forge = |native: Vec<u8>| Descriptor { id: u32::MAX, len: 4096, native }.encode();
    let short = c.remote_region(&forge(b"CUDA".to_vec())).err().expect("short");
    assert!(matches!(short, wirespeed::Error::PeerMisbehaved(_)), "{short}");
    // A GPU region without fabric access.
    assert!(c.remote_region(&Descriptor { id: u32::MAX, len: 4096, native: Vec::new() }.encode()).is_err());
    let Some(gpu) = gpu() else { return };
    // This process's own "memory" at an address nothing allocated.
    let mut native = b"CUDA".to_vec();
    native.extend_from_slice(&gpu.uuid().unwrap());
    native.extend_from_slice(&[0; 64]);
    native.extend_from_slice(&0x1234_0000u64.to_le_bytes());
    native.extend_from_slice(&4096u64.to_le_bytes());
    let e = c.remote_region(&forge(native)).err().expect("no such allocation");
    assert!(e.to_string().contains("not one allocation"), "{e}");
}
