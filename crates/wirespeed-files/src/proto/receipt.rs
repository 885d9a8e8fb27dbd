//! One large file's chunks at the sink, as rules without I/O: which chunks may come, where
//! each one's bytes go, whose turn it is where the output is written in order, and when the
//! file is complete. The sink's data streams hold one per file and do what it answers.

use super::chunks::ChunkSet;
use super::violation::{ChunkFault, Violation};
use super::{Msg, STREAMED};

/// How a chunk arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Its bytes follow in the message body.
    Data,
    /// The sink already holds it.
    Same,
    /// All zeros, in a hole of the source.
    Hole,
}

impl Arrival {
    /// The chunk message's file, index and arrival; `None` for other messages.
    pub fn of(msg: &Msg) -> Option<(u64, u32, Arrival)> {
        match *msg {
            Msg::Chunk { id, index } => Some((id, index, Arrival::Data)),
            Msg::Same { id, index } => Some((id, index, Arrival::Same)),
            Msg::Hole { id, index } => Some((id, index, Arrival::Hole)),
            _ => None,
        }
    }
}

/// Where a chunk's bytes go: at most `len` bytes at `offset` of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub offset: u64,
    pub len: u64,
}

/// The state of one file being received.
#[derive(Debug)]
pub struct Receipt {
    id: u64,
    /// The file's length, or [`STREAMED`].
    size: u64,
    chunk: u64,
    /// Chunks the file has; 0 for a streamed file, whose length comes with its Eof.
    total: u64,
    seen: ChunkSet,
    written: u64,
    /// The chunk an ordered output writes next.
    next: u32,
    finished: bool,
}

impl Receipt {
    /// `chunk` is the transfer's chunk size, which Begin's checks keep non-zero.
    pub fn new(id: u64, size: u64, chunk: u64) -> Result<Self, Violation> {
        let total = if size == STREAMED { 0 } else { size.div_ceil(chunk.max(1)) };
        if total > u32::MAX as u64 + 1 {
            return Err(Violation::TooManyChunks(id));
        }
        Ok(Receipt {
            id,
            size,
            chunk: chunk.max(1),
            total,
            seen: ChunkSet::default(),
            written: 0,
            next: 0,
            finished: false,
        })
    }

    pub fn streamed(&self) -> bool {
        self.size == STREAMED
    }

    fn fault(&self, index: u32, fault: ChunkFault) -> Violation {
        Violation::Chunk { id: self.id, index, fault }
    }

    /// A chunk's message came: where its bytes go. A streamed file's chunks are all data;
    /// others come once each, in any order.
    pub fn arrive(&mut self, index: u32, how: Arrival) -> Result<Span, Violation> {
        let offset = index as u64 * self.chunk;
        if self.streamed() {
            if how != Arrival::Data {
                return Err(self.fault(index, ChunkFault::NotData));
            }
            return Ok(Span { offset, len: self.chunk });
        }
        if index as u64 >= self.total || !self.seen.insert(index) {
            return Err(self.fault(index, ChunkFault::UnknownOrRepeated));
        }
        Ok(Span { offset, len: (self.size - offset).min(self.chunk) })
    }

    /// Whether chunk `index` is the one an ordered output writes now; an error when its turn
    /// has passed, or, for a streamed file (whose chunks come in order), is not now.
    pub fn is_turn(&self, index: u32) -> Result<bool, Violation> {
        if index == self.next {
            return Ok(true);
        }
        if self.streamed() || index < self.next {
            return Err(self.fault(index, ChunkFault::OutOfOrder));
        }
        Ok(false)
    }

    /// The chunk an ordered output writes next.
    pub fn next(&self) -> u32 {
        self.next
    }

    /// An ordered output wrote its chunk: the next one's turn.
    pub fn pass_turn(&mut self) {
        self.next = self.next.saturating_add(1);
    }

    /// Checks the `len` bytes a data chunk at `place` brought: all of its place, but for a
    /// streamed file's last chunk (its Eof says where it ends).
    pub fn check_len(&self, index: u32, place: Span, len: u64) -> Result<(), Violation> {
        let whole = if self.streamed() { len <= place.len } else { len == place.len };
        if !whole || len == 0 {
            return Err(self.fault(index, ChunkFault::WrongLength));
        }
        Ok(())
    }

    /// A chunk is in place; true when it completes a file of known size.
    pub fn written(&mut self) -> bool {
        if self.streamed() {
            return false;
        }
        self.written += 1;
        self.written == self.total
    }

    /// A streamed file ended at `size` bytes. Its chunks came in order before the Eof, on
    /// the same stream, so all of them are written.
    pub fn eof(&self, size: u64) -> Result<(), Violation> {
        if !self.streamed() {
            return Err(Violation::EofOfSizedFile(self.id));
        }
        if self.next as u64 != size.div_ceil(self.chunk) {
            return Err(Violation::EofMismatch { id: self.id, size });
        }
        Ok(())
    }

    /// The file is complete and goes into place; only once.
    pub fn finish(&mut self) -> Result<(), Violation> {
        if std::mem::replace(&mut self.finished, true) {
            return Err(Violation::FinishedTwice(self.id));
        }
        Ok(())
    }

    /// Memory held beyond the fixed part, in runs of chunks: grows with what arrived, never
    /// with what the peer announced.
    pub fn runs(&self) -> usize {
        self.seen.runs()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_sized_file_completes_once_when_every_chunk_is_in() {
        let mut r = Receipt::new(1, 2 * MIB + 5, MIB).unwrap();
        assert_eq!(r.arrive(2, Arrival::Data), Ok(Span { offset: 2 * MIB, len: 5 }));
        assert!(r.check_len(2, Span { offset: 2 * MIB, len: 5 }, 4).is_err());
        assert!(!r.written());
        assert_eq!(r.arrive(0, Arrival::Hole).map(|p| p.len), Ok(MIB));
        assert!(r.arrive(0, Arrival::Same).is_err(), "repeated");
        assert!(r.arrive(3, Arrival::Data).is_err(), "past the end");
        assert!(!r.written());
        r.arrive(1, Arrival::Same).unwrap();
        assert!(r.written());
        assert!(r.eof(2 * MIB + 5).is_err(), "an Eof for a file of known size");
        assert!(r.finish().is_ok() && r.finish().is_err());
    }

    #[test]
    fn a_streamed_file_comes_in_order_and_ends_where_its_eof_says() {
        let mut r = Receipt::new(1, STREAMED, MIB).unwrap();
        assert!(r.arrive(0, Arrival::Hole).is_err(), "a streamed file is all data");
        for i in 0..3 {
            let place = r.arrive(i, Arrival::Data).unwrap();
            assert_eq!(r.is_turn(i), Ok(true));
            assert!(r.is_turn(i + 1).is_err());
            r.check_len(i, place, if i == 2 { 7 } else { MIB }).unwrap();
            assert!(!r.written());
            r.pass_turn();
        }
        assert!(r.eof(2 * MIB).is_err() && r.eof(3 * MIB + 1).is_err());
        r.eof(2 * MIB + 7).unwrap();
    }

    #[test]
    fn the_largest_announced_file_costs_nothing_until_its_chunks_come() {
        assert_eq!(Receipt::new(1, u64::MAX - 1, 64 << 10).unwrap_err(), Violation::TooManyChunks(1));
        let mut r = Receipt::new(1, (u32::MAX as u64 + 1) * (64 << 10), 64 << 10).unwrap();
        assert_eq!(r.runs(), 0);
        assert!(r.arrive(u32::MAX, Arrival::Data).is_ok());
        assert_eq!(r.runs(), 1);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Arrive(u32, Arrival),
        Turn(u32),
        Pass,
        Len(u32, u64),
        Written,
        Eof(u64),
        Finish,
    }

    fn op() -> impl Strategy<Value = Op> {
        let index = prop_oneof![0u32..40, any::<u32>()];
        let how = prop_oneof![Just(Arrival::Data), Just(Arrival::Same), Just(Arrival::Hole)];
        prop_oneof![
            (index.clone(), how).prop_map(|(i, h)| Op::Arrive(i, h)),
            index.clone().prop_map(Op::Turn),
            Just(Op::Pass),
            (index, any::<u64>()).prop_map(|(i, n)| Op::Len(i, n)),
            Just(Op::Written),
            any::<u64>().prop_map(Op::Eof),
            Just(Op::Finish),
        ]
    }

    proptest! {
        /// Whatever a peer sends: no panic, every place lies inside a sized file, each chunk
        /// of it is placed once, memory grows only with chunks that came, and the file is
        /// finished at most once.
        #[test]
        fn any_sequence_stays_inside_the_file(
            size in prop_oneof![Just(STREAMED), 0u64..40 * MIB, any::<u64>()],
            chunk in prop_oneof![Just(64u64 << 10), Just(MIB), (64u64 << 10)..(256 << 20)],
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let Ok(mut r) = Receipt::new(7, size, chunk) else {
                prop_assert!(size != STREAMED && size.div_ceil(chunk) > u32::MAX as u64 + 1);
                return Ok(());
            };
            let (mut placed, mut arrivals, mut finished) = (std::collections::HashSet::new(), 0, 0);
            for op in ops {
                match op {
                    Op::Arrive(i, how) => {
                        arrivals += 1;
                        if let Ok(p) = r.arrive(i, how) {
                            prop_assert!(p.len > 0 && p.len <= chunk);
                            if size != STREAMED {
                                prop_assert!(p.offset.checked_add(p.len).is_some_and(|end| end <= size));
                                prop_assert!(placed.insert(i), "chunk {} placed twice", i);
                            }
                        }
                    }
                    Op::Turn(i) => { let _ = r.is_turn(i); }
                    Op::Pass => r.pass_turn(),
                    Op::Len(i, n) => { let _ = r.check_len(i, Span { offset: 0, len: chunk }, n); }
                    Op::Written => { let _ = r.written(); }
                    Op::Eof(n) => { let _ = r.eof(n); }
                    Op::Finish => finished += r.finish().is_ok() as u32,
                }
                prop_assert!(r.runs() <= arrivals);
            }
            prop_assert!(finished <= 1);
        }
    }
}
