//! The libfabric message decoder fed any bytes: it never panics, and a rendezvous message it
//! accepts (the one that names the sender's memory) encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wirespeed::transport::ofi::fuzz_decode(data));
