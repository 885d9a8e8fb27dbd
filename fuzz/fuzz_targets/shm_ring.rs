//! The shared-memory ring's reader over whatever a peer wrote there (see `fuzz_locate`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wirespeed::transport::shm::fuzz_locate(data));
