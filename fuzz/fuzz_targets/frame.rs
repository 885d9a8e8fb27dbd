//! The frame decoder fed any bytes in any split: it never panics, never hands out a frame
//! over its limits, and a frame it decodes encodes back to the bytes it came from.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed::proto::decoder::FrameDecoder;
use wirespeed::proto::frame::{HEADER_LEN, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&split, mut rest)) = data.split_first() else { return };
    let limits = Limits { max_meta: 512, max_payload: 4096 };
    let mut dec = FrameDecoder::new(limits);
    let step = split as usize % 37 + 1;
    let mut consumed = 0;
    while !rest.is_empty() {
        let piece = &rest[..step.min(rest.len())];
        let Ok(used) = dec.feed(piece) else { return };
        rest = &rest[used..];
        if let Some(f) = dec.take_frame() {
            assert!(f.meta.len() as u32 <= limits.max_meta && f.payload.len() as u64 <= limits.max_payload);
            assert_eq!(f.header.meta_len as usize, f.meta.len());
            let total = HEADER_LEN + f.meta.len() + f.payload.len();
            let original = &data[1 + consumed..1 + consumed + total];
            assert_eq!(&original[..HEADER_LEN], &f.header.encode()[..], "header round trip");
            assert_eq!(&original[HEADER_LEN..], &[&f.meta[..], &f.payload[..]].concat()[..]);
            consumed += total;
        } else if used == 0 {
            return;
        }
    }
});
