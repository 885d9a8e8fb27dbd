//! Copies of large payloads into memory another process reads later (a shared-memory ring),
//! with non-temporal stores on x86-64.
//!
//! A receiver keeps what it is lent until it lets go, so a ring's free space is often memory
//! nobody has touched for a while: a plain copy first reads every destination line from DRAM,
//! then writes it back. Streaming stores skip that read, and copy about 1.6 × as fast there;
//! into memory still in cache, plain copies win (bench/RESULTS.md, 2026-11-26 late).

/// Payloads at least this long are streamed; shorter ones are likely read again soon.
pub(crate) const MIN_STREAMED: usize = 64 << 10;

/// Copies `src` to `dst` past the caches where the CPU can. The copy is complete and ordered
/// before any later store (a release that publishes it) when this returns.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and not overlap `src`.
pub(crate) unsafe fn stream(src: &[u8], dst: *mut u8) {
    // SAFETY: the caller's contract.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        x86::stream(src, dst)
    };
    // SAFETY: the caller's contract.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len())
    };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};

    const LINE: usize = 64;

    /// SSE2 streaming stores, which every x86-64 has: memory-bound, so wider ones gain nothing.
    ///
    /// # Safety
    /// As `super::stream`.
    pub(super) unsafe fn stream(src: &[u8], dst: *mut u8) {
        let len = src.len();
        // Plain copies up to the first 64-byte boundary of `dst` and after the last one.
        let head = dst.align_offset(LINE).min(len);
        let lines = (len - head) / LINE;
        let body_end = head + lines * LINE;
        // SAFETY: every access below lies in `src` and the `len` bytes at `dst`; the streamed
        // stores go to 16-byte-aligned addresses (`dst + head` is 64-aligned).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
            let (mut s, mut d) = (src.as_ptr().add(head), dst.add(head));
            for _ in 0..lines {
                let v = [0, 16, 32, 48].map(|o| _mm_loadu_si128(s.add(o).cast::<__m128i>()));
                for (o, v) in [0, 16, 32, 48].into_iter().zip(v) {
                    _mm_stream_si128(d.add(o).cast::<__m128i>(), v);
                }
                (s, d) = (s.add(LINE), d.add(LINE));
            }
            std::ptr::copy_nonoverlapping(src.as_ptr().add(body_end), dst.add(body_end), len - body_end);
            // Streaming stores are weakly ordered: fence them before whatever publishes them.
            _mm_sfence();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..MIN_STREAMED * 2 + 200).map(|i| (i * 7 + i / 251) as u8).collect();
        for (offset, len) in
            [(0, MIN_STREAMED), (1, MIN_STREAMED + 63), (17, MIN_STREAMED * 2 + 5), (63, 100), (60, 3), (5, 0)]
        {
            let mut dst = vec![0xAAu8; len + 128];
            // SAFETY: `dst` has `offset + len` bytes and is a separate allocation.
            unsafe { stream(&src[3..3 + len], dst.as_mut_ptr().add(offset)) };
            assert_eq!(&dst[offset..offset + len], &src[3..3 + len], "offset {offset}, length {len}");
            assert!(dst[..offset].iter().chain(&dst[offset + len..]).all(|&b| b == 0xAA), "wrote outside");
        }
    }
}
