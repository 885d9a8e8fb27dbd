//! One file's chunk rules at the sink driven by any sequence of a peer's chunk messages:
//! no panic, every placed span inside the file, no chunk placed twice, one finish at most.
#![no_main]
use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use wirespeed_files::proto::{Arrival, Receipt, STREAMED, Span};

fuzz_target!(|data: &[u8]| {
    let Some((head, ops)) = data.split_first_chunk::<12>() else { return };
    let size = match u64::from_le_bytes(head[..8].try_into().unwrap()) {
        s if s % 7 == 0 => STREAMED,
        s => s % (1 << 40),
    };
    let chunk = (64u64 << 10) << (u32::from_le_bytes(head[8..].try_into().unwrap()) % 13);
    let Ok(mut r) = Receipt::new(1, size, chunk) else { return };
    let (mut placed, mut finished, mut arrivals) = (HashSet::new(), 0, 0);
    for op in ops.chunks(5) {
        let index = op.get(1..5).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) % 1024);
        match op[0] % 8 {
            0..=2 => {
                arrivals += 1;
                let how = [Arrival::Data, Arrival::Same, Arrival::Hole][op[0] as usize % 3];
                if let Ok(Span { offset, len }) = r.arrive(index, how) {
                    assert!(len > 0 && len <= chunk);
                    if size != STREAMED {
                        assert!(offset + len <= size && placed.insert(index));
                    }
                }
            }
            3 => {
                let _ = r.is_turn(index);
            }
            4 => r.pass_turn(),
            5 => {
                let _ = r.check_len(index, Span { offset: 0, len: chunk }, index as u64 * 977);
                let _ = r.written();
            }
            6 => {
                let _ = r.eof(index as u64 * 4099);
            }
            _ => finished += r.finish().is_ok() as u32,
        }
        assert!(r.runs() <= arrivals);
    }
    assert!(finished <= 1);
});
