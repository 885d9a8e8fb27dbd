//! Incremental frame decoder: feed it bytes in any split, take whole frames out.
//! Large payloads can be read straight into the frame's own buffer (no staging copy).

use std::mem::MaybeUninit;

use super::frame::{FrameHeader, HEADER_LEN, Limits};
use crate::error::FrameError;

/// A whole frame, owned.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub header: FrameHeader,
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
}

#[derive(Debug)]
enum State {
    Header { have: usize },
    Meta { header: FrameHeader },
    Payload { header: FrameHeader },
    Ready,
    Failed,
}

#[derive(Debug)]
pub struct FrameDecoder {
    limits: Limits,
    state: State,
    head: [u8; HEADER_LEN],
    meta: Vec<u8>,
    payload: Vec<u8>,
    ready: Option<Frame>,
}

impl FrameDecoder {
    pub fn new(limits: Limits) -> Self {
        FrameDecoder {
            limits,
            state: State::Header { have: 0 },
            head: [0; HEADER_LEN],
            meta: Vec::new(),
            payload: Vec::new(),
            ready: None,
        }
    }

    /// True between frames (no partial frame buffered).
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Header { have: 0 })
    }

    /// Consumes bytes from `input` and returns how many it used. It stops at the end of a
    /// frame; take it with [`FrameDecoder::take_frame`] before feeding more.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, FrameError> {
        let mut used = 0;
        loop {
            match self.state {
                State::Failed => return Err(FrameError::Malformed("stream after an earlier error")),
                State::Ready => return Ok(used),
                State::Header { have } => {
                    let n = (HEADER_LEN - have).min(input.len() - used);
                    self.head[have..have + n].copy_from_slice(&input[used..used + n]);
                    used += n;
                    if have + n < HEADER_LEN {
                        self.state = State::Header { have: have + n };
                        return Ok(used);
                    }
                    let header = match FrameHeader::decode(&self.head, &self.limits) {
                        Ok(h) => h,
                        Err(e) => {
                            self.state = State::Failed;
                            return Err(e);
                        }
                    };
                    self.meta = Vec::with_capacity(header.meta_len as usize);
                    self.state = State::Meta { header };
                }
                State::Meta { header } => {
                    let want = header.meta_len as usize - self.meta.len();
                    let n = want.min(input.len() - used);
                    self.meta.extend_from_slice(&input[used..used + n]);
                    used += n;
                    if n < want {
                        return Ok(used);
                    }
                    // Limits were checked in decode, so this allocation is bounded.
                    self.payload = Vec::with_capacity(header.payload_len() as usize);
                    self.state = State::Payload { header };
                }
                State::Payload { header } => {
                    let want = header.payload_len() as usize - self.payload.len();
                    let n = want.min(input.len() - used);
                    self.payload.extend_from_slice(&input[used..used + n]);
                    used += n;
                    if n < want {
                        return Ok(used);
                    }
                    self.ready = Some(Frame {
                        header,
                        meta: std::mem::take(&mut self.meta),
                        payload: std::mem::take(&mut self.payload),
                    });
                    self.state = State::Ready;
                }
            }
        }
    }

    pub fn take_frame(&mut self) -> Option<Frame> {
        let f = self.ready.take()?;
        self.state = State::Header { have: 0 };
        Some(f)
    }

    /// Payload bytes still missing from the current frame (0 outside a payload).
    pub fn payload_missing(&self) -> usize {
        match self.state {
            State::Payload { header } => header.payload_len() as usize - self.payload.len(),
            _ => 0,
        }
    }

    /// The uninitialised tail of the current payload, for reading into directly.
    pub fn payload_spare(&mut self) -> &mut [MaybeUninit<u8>] {
        let missing = self.payload_missing();
        &mut self.payload.spare_capacity_mut()[..missing]
    }

    /// Records that `n` bytes were written into [`FrameDecoder::payload_spare`].
    ///
    /// # Safety
    /// The first `n` bytes of the spare slice must have been initialised.
    pub unsafe fn payload_filled(&mut self, n: usize) {
        assert!(n <= self.payload_missing());
        // SAFETY: the caller initialised these bytes, and they are within capacity.
        unsafe { self.payload.set_len(self.payload.len() + n) };
        // Completing the frame goes through the ordinary path with no input.
        if self.payload_missing() == 0 {
            let _ = self.feed(&[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::frame::Kind;
    use proptest::prelude::*;

    fn message(stream: u32, meta: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut h = FrameHeader::new(Kind::Message, stream);
        h.meta_len = meta.len() as u32;
        h.len = payload.len() as u64;
        let mut v = h.encode().to_vec();
        v.extend_from_slice(meta);
        v.extend_from_slice(payload);
        v
    }

    fn decode_all(bytes: &[u8], split: usize) -> Result<Vec<Frame>, FrameError> {
        let mut d = FrameDecoder::new(Limits::default());
        let mut out = vec![];
        for chunk in bytes.chunks(split.max(1)) {
            let mut off = 0;
            while off < chunk.len() {
                off += d.feed(&chunk[off..])?;
                out.extend(d.take_frame());
            }
            out.extend(d.take_frame());
        }
        Ok(out)
    }

    #[test]
    fn frames_survive_every_split() {
        let mut bytes = message(1, b"12345678hdr", b"body bytes");
        bytes.extend(message(3, b"\0\0\0\0\0\0\0\0", b""));
        for split in 1..bytes.len() {
            let frames = decode_all(&bytes, split).unwrap();
            assert_eq!(frames.len(), 2);
            assert_eq!(frames[0].payload, b"body bytes");
            assert_eq!(frames[1].header.stream, 3);
        }
    }

    #[test]
    fn direct_payload_reads() {
        let bytes = message(5, b"", &[7u8; 1000]);
        let mut d = FrameDecoder::new(Limits::default());
        assert_eq!(d.feed(&bytes[..HEADER_LEN + 10]).unwrap(), HEADER_LEN + 10);
        assert_eq!(d.payload_missing(), 990);
        let spare = d.payload_spare();
        for (dst, src) in spare.iter_mut().zip(&bytes[HEADER_LEN + 10..]) {
            dst.write(*src);
        }
        // SAFETY: the loop above wrote the first 990 bytes of the spare slice.
        unsafe { d.payload_filled(990) };
        let f = d.take_frame().unwrap();
        assert_eq!(f.payload, vec![7u8; 1000]);
        assert!(d.is_idle());
    }

    proptest! {
        // Arbitrary bytes never panic, never allocate past the limits, and an error is sticky.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096), split in 1usize..64) {
            let limits = Limits { max_meta: 64, max_payload: 512 };
            let mut d = FrameDecoder::new(limits);
            let mut failed = false;
            for chunk in bytes.chunks(split) {
                let mut off = 0;
                while off < chunk.len() {
                    match d.feed(&chunk[off..]) {
                        Ok(n) => {
                            prop_assert!(!failed, "a feed succeeded after an error");
                            prop_assert!(n > 0 || d.ready.is_some());
                            off += n;
                        }
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                    prop_assert!(d.meta.capacity() <= limits.max_meta as usize, "meta {}", d.meta.capacity());
                    prop_assert!(d.payload.capacity() <= limits.max_payload as usize);
                    if let Some(f) = d.take_frame() {
                        prop_assert!(f.meta.len() <= limits.max_meta as usize && f.payload.len() <= limits.max_payload as usize);
                    }
                }
                if failed {
                    prop_assert!(d.feed(chunk).is_err() && d.feed(&[]).is_err(), "the error did not stick");
                    break;
                }
            }
        }

        #[test]
        fn valid_frames_round_trip(stream in any::<u32>(), meta in proptest::collection::vec(any::<u8>(), 0..300),
                                   payload in proptest::collection::vec(any::<u8>(), 0..3000), split in 1usize..500) {
            let frames = decode_all(&message(stream, &meta, &payload), split).unwrap();
            prop_assert_eq!(frames.len(), 1);
            prop_assert_eq!(frames[0].header.stream, stream);
            prop_assert_eq!(&frames[0].meta, &meta);
            prop_assert_eq!(&frames[0].payload, &payload);
        }
    }
}
