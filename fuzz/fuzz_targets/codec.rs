//! The core's codec, under every wire format: any bytes read as any sequence of fields
//! without panic or over-read, and the fields read, written back, are the bytes they took.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wirespeed::proto::codec::{Reader, Writer};

fuzz_target!(|data: &[u8]| {
    let (ops, bytes) = data.split_at(data.len().min(8));
    let mut r = Reader::new(bytes);
    let mut w = Writer::default();
    for &op in ops {
        let read = match op % 6 {
            0 => r.u8().map(|v| w.u8(v)),
            1 => r.u16().map(|v| w.u16(v)),
            2 => r.u32().map(|v| w.u32(v)),
            3 => r.u64().map(|v| w.u64(v)),
            4 => r.u128().map(|v| w.u128(v)),
            _ => r.bytes(usize::from(op / 6)).map(|b| w.bytes(b)),
        };
        if read.is_err() {
            break;
        }
    }
    let taken = bytes.len() - r.rest().len();
    assert_eq!(w.into_inner(), &bytes[..taken]);
});
