//! Arrow IPC metadata and bodies from a peer, through the decoder both Flight planes use:
//! a schema message, then messages against it. No panic, whatever the flatbuffers say.
#![no_main]
use arrow_buffer::Buffer;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use wirespeed_flight::internal::Decoder;

fuzz_target!(|data: &[u8]| {
    let mut dec = Decoder::default();
    // Messages: u16 metadata length, u16 body length, then the bytes.
    let mut rest = data;
    while let Some((lens, tail)) = rest.split_first_chunk::<4>() {
        let meta_len = (u16::from_le_bytes([lens[0], lens[1]]) as usize).min(tail.len());
        let (meta, tail) = tail.split_at(meta_len);
        let body_len = (u16::from_le_bytes([lens[2], lens[3]]) as usize).min(tail.len());
        let (body, tail) = tail.split_at(body_len);
        let _ = dec.decode(meta, Buffer::from(body.to_vec()), Bytes::new());
        rest = tail;
    }
});
