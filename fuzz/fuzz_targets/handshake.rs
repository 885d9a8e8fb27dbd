//! Both ends of the handshake fed any frames: no panic, and nothing but a proven peer ever
//! completes it (the forger does not know the key).
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed::Fabric;
use wirespeed::proto::decoder::FrameDecoder;
use wirespeed::proto::frame::Limits;
use wirespeed::proto::handshake::{Handshake, Params};

const P: Params = Params { fabric: Fabric::Tcp, max_streams: 8, stream_window: 1 << 20 };

fuzz_target!(|data: &[u8]| {
    let Some((&side, mut rest)) = data.split_first() else { return };
    let mut hs = if side & 1 == 0 {
        Handshake::server(b"a key the fuzzer does not know", P, [7; 32])
    } else {
        Handshake::client(b"a key the fuzzer does not know", P, [7; 32]).0
    };
    let mut dec = FrameDecoder::new(Limits { max_meta: 1024, max_payload: 0 });
    while !rest.is_empty() {
        let Ok(used) = dec.feed(rest) else { return };
        rest = &rest[used..];
        let Some(f) = dec.take_frame() else { return };
        match hs.on_frame(&f.header, &f.meta) {
            Ok(p) => assert!(p.done.is_none(), "a handshake completed without the key"),
            Err(_) => return,
        }
    }
});
