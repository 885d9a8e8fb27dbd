use super::*;
use crate::fabric::Fabric;
use crate::proto::frame::HEADER_LEN;
use std::collections::VecDeque;

const P: Params = Params { fabric: Fabric::Tcp, max_streams: 4, stream_window: 1000 };

fn pair() -> (Session, Session) {
    (Session::new(Role::Client, P, P), Session::new(Role::Server, P, P))
}

/// A frame as the receiver takes it: its decoded header, its meta and its payload.
type Wire = (FrameHeader, Vec<u8>, Buf);

/// The frame a session cut: the head it wrote, and the body bytes that follow it.
fn wire(head: &[u8], payload: &[u8]) -> Wire {
    let h = FrameHeader::decode(head[..HEADER_LEN].try_into().unwrap(), &Default::default()).unwrap();
    assert_eq!(h.payload_len(), payload.len() as u64);
    (h, head[HEADER_LEN..].to_vec(), Buf::from(payload.to_vec()))
}

/// Every frame of a message `from` sends on `id`, cut in chunks of at most `max_chunk`; the
/// peer's credit must last.
fn send(from: &mut Session, id: u32, header: &[u8], body: &[u8], max_chunk: u64) -> Vec<Wire> {
    let mut msg = Outgoing::new(id, body.len() as u64);
    let (mut head, mut at, mut frames) = (Vec::new(), 0, Vec::new());
    while !msg.is_done() {
        let take = from.next_frame(&mut msg, header, max_chunk, &mut head).unwrap().expect("credit");
        frames.push(wire(&head, &body[at..at + take]));
        at += take;
    }
    frames
}

/// The one frame of a message that fits in one.
fn message(from: &mut Session, id: u32, header: &[u8], body: &[u8]) -> Wire {
    let mut frames = send(from, id, header, body, u64::MAX);
    assert_eq!(frames.len(), 1);
    frames.pop().unwrap()
}

fn finish(from: &mut Session, id: u32) -> Wire {
    wire(&from.finish(id).unwrap().expect("a first finish"), &[])
}

/// A Message frame as a peer may send it, valid or not: `body_len` need not match.
fn raw_message(stream: u32, header: &[u8], body_len: u64, payload: &[u8]) -> Wire {
    let mut meta = body_len.to_le_bytes().to_vec();
    meta.extend_from_slice(header);
    let mut h = FrameHeader::new(Kind::Message, stream);
    h.meta_len = meta.len() as u32;
    h.len = payload.len() as u64;
    (h, meta, Buf::from(payload.to_vec()))
}

fn raw_data(stream: u32, payload: &[u8]) -> Wire {
    let mut h = FrameHeader::new(Kind::Data, stream);
    h.len = payload.len() as u64;
    (h, vec![], Buf::from(payload.to_vec()))
}

fn deliver(s: &mut Session, f: Wire) -> Result<Touched, Error> {
    s.on_frame(&f.0, &f.1, f.2)
}

/// Feeds every control frame `from` wants sent into `to`.
fn pump(from: &mut Session, to: &mut Session) {
    let bytes = from.poll_transmit();
    for f in bytes.chunks(24) {
        let h = FrameHeader::decode(f.try_into().unwrap(), &Default::default()).unwrap();
        to.on_frame(&h, &[], Buf::empty()).unwrap();
    }
}

#[test]
fn message_round_trip_with_chunks() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    assert_eq!(id, 1);
    let body: Vec<u8> = (0..300).map(|i| i as u8).collect();
    let frames = send(&mut c, id, b"hdr", &body, 200);
    assert_eq!(
        frames.iter().map(|f| (f.0.kind, f.0.len)).collect::<Vec<_>>(),
        [(Kind::Message, 200), (Kind::Data, 100)]
    );
    for f in frames {
        deliver(&mut s, f).unwrap();
    }
    assert_eq!(s.poll_accept().unwrap().unwrap(), 1);
    match s.poll_recv(1).unwrap().unwrap() {
        RecvEvent::Message { header, body_len } => assert_eq!((header.as_slice(), body_len), (&b"hdr"[..], 300)),
        e => panic!("{e:?}"),
    }
    assert!(matches!(s.poll_recv(1), Some(Ok(RecvEvent::Chunk(b))) if *b == body[..200]));
    assert!(matches!(s.poll_recv(1), Some(Ok(RecvEvent::Chunk(b))) if *b == body[200..]));
    assert!(s.poll_recv(1).is_none());
}

#[test]
fn credits_bound_the_sender_and_come_back_when_consumed() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    let (mut sent, mut head) = (0, Vec::new());
    loop {
        let mut msg = Outgoing::new(id, 100);
        let Some(n) = c.next_frame(&mut msg, b"", 100, &mut head).unwrap() else { break };
        assert!(msg.is_done());
        deliver(&mut s, wire(&head, &vec![0; n])).unwrap();
        sent += 1;
        assert!(sent <= 100, "credit never ran out");
    }
    assert_eq!(sent, 9); // 9 * 108 bytes fit in a 1000-byte window
    // Too much data is a protocol error on the receiving side.
    assert!(matches!(
        deliver(&mut Session::new(Role::Server, P, P), raw_message(1, b"", 2000, &[0; 1000])),
        Err(Error::PeerMisbehaved(Violation::CreditExceeded { stream: 1, sent: 1008, credit: 1000 }))
    ));
    s.poll_accept();
    for _ in 0..4 {
        s.poll_recv(id).unwrap().unwrap(); // 216 bytes: under a quarter window, no grant yet
    }
    assert!(!s.has_transmit());
    for _ in 0..2 {
        s.poll_recv(id).unwrap().unwrap();
    }
    pump(&mut s, &mut c);
    assert!(c.next_frame(&mut Outgoing::new(id, 100), b"", 100, &mut head).unwrap().is_some());
}

#[test]
fn interleaved_streams_stay_apart() {
    let (mut c, mut s) = pair();
    let a = c.open_stream().unwrap();
    let b = c.open_stream().unwrap();
    let mut of_a = send(&mut c, a, b"a", &[1; 4], 2).into_iter();
    deliver(&mut s, of_a.next().unwrap()).unwrap();
    for f in send(&mut c, b, b"b", &[2; 2], 2) {
        deliver(&mut s, f).unwrap();
    }
    deliver(&mut s, of_a.next().unwrap()).unwrap();
    deliver(&mut s, finish(&mut c, b)).unwrap();
    assert!(matches!(s.poll_recv(b), Some(Ok(RecvEvent::Message { .. }))));
    assert!(matches!(s.poll_recv(b), Some(Ok(RecvEvent::Chunk(x))) if *x == [2, 2]));
    assert!(matches!(s.poll_recv(b), Some(Ok(RecvEvent::Finished))));
    assert!(matches!(s.poll_recv(a), Some(Ok(RecvEvent::Message { .. }))));
    assert!(matches!(s.poll_recv(a), Some(Ok(RecvEvent::Chunk(x))) if *x == [1, 1]));
    assert!(matches!(s.poll_recv(a), Some(Ok(RecvEvent::Chunk(x))) if *x == [1, 1]));
}

#[test]
fn reset_reaches_both_sides_and_late_frames_are_dropped() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    let mut frames = send(&mut c, id, b"", &[0; 10], 5).into_iter();
    deliver(&mut s, frames.next().unwrap()).unwrap();
    s.poll_accept();
    s.reset(id, ErrorCode::CANCELLED);
    assert!(matches!(s.poll_recv(id), Some(Err(Error::Reset { code: ErrorCode::CANCELLED, .. }))));
    pump(&mut s, &mut c);
    let mut head = Vec::new();
    assert!(matches!(c.next_frame(&mut Outgoing::new(id, 5), b"", 5, &mut head), Err(Error::Reset { .. })));
    s.release(id);
    deliver(&mut s, frames.next().unwrap()).unwrap();
    assert!(!s.has_transmit());
}

#[test]
fn frames_that_cross_our_reset_are_dropped_while_the_stream_is_held() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    let mut frames = send(&mut c, id, b"", &[0; 10], 5).into_iter();
    deliver(&mut s, frames.next().unwrap()).unwrap();
    s.poll_accept();
    s.reset(id, ErrorCode::CANCELLED);
    // Sent by the peer before it heard of the reset: the rest of that body, another message,
    // its finish, a grant.
    deliver(&mut s, frames.next().unwrap()).unwrap();
    deliver(&mut s, message(&mut c, id, b"late", &[1; 3])).unwrap();
    deliver(&mut s, finish(&mut c, id)).unwrap();
    let mut credit = FrameHeader::new(Kind::Credit, id);
    credit.len = 100;
    deliver(&mut s, (credit, vec![], Buf::empty())).unwrap();
    assert!(matches!(s.poll_recv(id), Some(Err(Error::Reset { code: ErrorCode::CANCELLED, .. }))));
    assert!(s.terminal_error().is_none(), "the connection lives on");
}

#[test]
fn a_reset_after_the_peers_finish_keeps_what_it_sent() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    deliver(&mut s, message(&mut c, id, b"", &[7; 5])).unwrap();
    deliver(&mut s, finish(&mut c, id)).unwrap(); // the caller sends the Finish behind the data
    assert_eq!(c.finish(id).unwrap(), None, "a second finish sends nothing");
    c.release(id); // the server never finished its side: this resets the stream
    pump(&mut c, &mut s);
    s.poll_accept();
    assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Message { body_len: 5, .. }))));
    assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Chunk(b))) if *b == [7; 5]));
    assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Finished))));
    let mut head = Vec::new();
    let answer = s.next_frame(&mut Outgoing::new(id, 1), b"", 1, &mut head);
    assert!(matches!(answer, Err(Error::Reset { code: ErrorCode::CANCELLED, .. })));
    // A stream we reset ourselves stays reset when the peer's reset crosses ours.
    let id = c.open_stream().unwrap();
    deliver(&mut s, message(&mut c, id, b"", &[])).unwrap();
    s.poll_accept();
    s.reset(id, ErrorCode(ErrorCode::APP_BASE));
    c.reset(id, ErrorCode::CANCELLED);
    pump(&mut c, &mut s);
    assert!(matches!(s.poll_recv(id), Some(Err(Error::Reset { .. }))));
}

/// Polls `id` once, checking that `recv_ready` said beforehand whether it would get anything.
fn poll_agrees(s: &mut Session, id: u32) -> bool {
    let ready = s.recv_ready(id);
    assert_eq!(ready, s.poll_recv(id).is_some());
    ready
}

#[test]
fn recv_ready_says_whether_poll_recv_has_something() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    deliver(&mut s, message(&mut c, id, b"h", &[1; 3])).unwrap();
    s.poll_accept();
    assert!(poll_agrees(&mut s, id) && poll_agrees(&mut s, id)); // the message, its body
    assert!(!poll_agrees(&mut s, id));
    deliver(&mut s, finish(&mut c, id)).unwrap();
    assert!(poll_agrees(&mut s, id) && poll_agrees(&mut s, id)); // the end, for good
    let id = c.open_stream().unwrap();
    deliver(&mut s, message(&mut c, id, b"", &[])).unwrap();
    s.poll_accept();
    assert!(poll_agrees(&mut s, id) && !poll_agrees(&mut s, id));
    c.reset(id, ErrorCode::CANCELLED);
    pump(&mut c, &mut s);
    assert!(poll_agrees(&mut s, id)); // the reset
    assert!(poll_agrees(&mut s, 99)); // a stream never opened
}

#[test]
fn dropping_an_open_stream_cancels_it() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    deliver(&mut s, message(&mut c, id, b"", &[])).unwrap();
    c.release(id);
    pump(&mut c, &mut s);
    s.poll_accept();
    assert!(matches!(s.poll_recv(id), Some(Err(Error::Reset { code: ErrorCode::CANCELLED, .. }))));
}

#[test]
fn protocol_violations_are_errors() {
    let (_, mut s) = pair();
    assert!(deliver(&mut s, raw_data(1, &[1])).is_err()); // data before a message
    let (_, mut s) = pair();
    assert!(deliver(&mut s, raw_message(2, b"", 0, &[])).is_err()); // server's own id
    let (_, mut s) = pair();
    assert!(deliver(&mut s, raw_message(1, b"", 1, &[1, 2])).is_err()); // payload longer than body
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    assert_eq!(deliver(&mut s, message(&mut c, id, b"", &[])).unwrap(), Touched::Accept);
    assert_eq!(deliver(&mut s, message(&mut c, id, b"", &[])).unwrap(), Touched::Stream(1));
    deliver(&mut s, finish(&mut c, id)).unwrap();
    assert!(deliver(&mut s, raw_message(id, b"", 0, &[])).is_err()); // a message after Finish
}

#[test]
fn ready_streams_take_turns_until_drained_or_released() {
    let (mut c, mut s) = pair();
    assert!(s.poll_ready().is_none());
    let (one, three) = (c.open_stream().unwrap(), c.open_stream().unwrap());
    deliver(&mut s, message(&mut c, one, b"", &[])).unwrap();
    deliver(&mut s, message(&mut c, three, b"", &[])).unwrap();
    deliver(&mut s, message(&mut c, one, b"", &[])).unwrap();
    assert_eq!(s.poll_ready().unwrap().unwrap(), Ready::Accept);
    while s.poll_accept().is_some_and(|r| r.is_ok()) {}
    // Level-triggered and fair: 1 has two messages, yet 3 gets its turn in between.
    let order: Vec<_> = (0..3).map(|_| s.poll_ready().unwrap().unwrap()).collect();
    assert_eq!(order, [Ready::Stream(1), Ready::Stream(3), Ready::Stream(1)]);
    for id in [1, 1, 3] {
        assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Message { .. }))));
    }
    assert!(s.poll_ready().is_none()); // drained: nothing waits
    deliver(&mut s, finish(&mut c, three)).unwrap();
    assert_eq!(s.poll_ready().unwrap().unwrap(), Ready::Stream(3));
    assert_eq!(s.poll_ready().unwrap().unwrap(), Ready::Stream(3)); // its end stays readable
    s.release(3);
    assert!(s.poll_ready().is_none());
    s.fail(Error::Closed);
    assert!(matches!(s.poll_ready(), Some(Err(Error::Closed))));
}

#[test]
fn streams_may_start_out_of_order() {
    let (_, mut s) = pair();
    // Threads of the peer race to the socket: a later stream's first frame may come first.
    deliver(&mut s, raw_message(5, b"", 0, &[])).unwrap();
    deliver(&mut s, raw_message(1, b"", 0, &[])).unwrap();
    deliver(&mut s, raw_message(3, b"", 0, &[])).unwrap();
    let accepted: Vec<u32> = std::iter::from_fn(|| s.poll_accept().and_then(|r| r.ok())).collect();
    assert_eq!(accepted, [5, 1, 3]);
    assert!(deliver(&mut s, raw_message(1001, b"", 0, &[])).is_err()); // skips 497 ids
}

proptest::proptest! {
    // Whatever frames a peer sends, the session never panics and stays bounded.
    #[test]
    fn arbitrary_frames_never_panic(frames in proptest::collection::vec(
        (1u8..=14, 0u32..12, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24), 0usize..3000, proptest::prelude::any::<u64>(), proptest::prelude::any::<u32>()),
        0..40,
    )) {
        let mut s = Session::new(Role::Server, P, P);
        for (kind, stream, meta, payload, len, aux) in frames {
            let Ok(kind) = Kind::from_u8(kind) else { continue };
            let mut h = FrameHeader::new(kind, stream);
            h.meta_len = meta.len() as u32;
            h.aux = aux;
            h.len = if kind.has_payload() { payload as u64 } else { len };
            let body = if kind.has_payload() { Buf::from(vec![0; payload]) } else { Buf::empty() };
            if s.on_frame(&h, &meta, body).is_err() {
                break; // fatal: the driver would close here
            }
            while let Some(Ok(id)) = s.poll_accept() {
                // Finished repeats once reached, so stop there.
                while let Some(Ok(RecvEvent::Message { .. } | RecvEvent::Chunk(_))) = s.poll_recv(id) {}
            }
            s.poll_transmit();
        }
        proptest::prop_assert!(s.streams.len() <= P.max_streams as usize);
    }
}

#[test]
fn too_many_streams_are_refused() {
    let (_, mut s) = pair();
    for id in [1, 3, 5, 7, 9] {
        deliver(&mut s, raw_message(id, b"", 0, &[])).unwrap(); // a peer that ignores the limit
    }
    assert_eq!(s.accept_queue.len(), 4);
    let t = s.poll_transmit();
    assert_eq!((t[0], t[4]), (Kind::Reset as u8, 9));
}

/// One end of the pair the property test drives: its session, the streams it sends on, what
/// it received, and its frames on their way to the other end, in the order it sent them.
#[derive(Default)]
struct End {
    session: Option<Session>,
    streams: Vec<Sending>,
    /// Per stream: the messages received whole, the one arriving, whether it finished.
    received: HashMap<u32, Received>,
    wire: VecDeque<Wire>,
}

#[derive(Default)]
struct Received {
    whole: Vec<(Vec<u8>, Vec<u8>)>,
    /// Its header, its body so far, and how long that will be.
    arriving: Option<(Vec<u8>, Vec<u8>, usize)>,
    finished: bool,
}

#[derive(Default)]
struct Sending {
    id: u32,
    /// Messages not cut into frames yet; the first may be under way.
    queue: VecDeque<(Vec<u8>, Vec<u8>)>,
    under_way: Option<(Outgoing, usize)>,
    /// Messages cut whole.
    sent: Vec<(Vec<u8>, Vec<u8>)>,
    finish: bool,
    finished: bool,
    reset: bool,
}

impl End {
    fn session(&mut self) -> &mut Session {
        self.session.as_mut().unwrap()
    }

    fn track(&mut self, id: u32) {
        self.streams.push(Sending { id, ..Default::default() });
        self.received.entry(id).or_default();
    }

    /// Cuts every frame credit allows, then takes the control frames the session queued.
    fn cut(&mut self, max_chunk: u64) {
        let session = self.session.as_mut().unwrap();
        let mut head = Vec::new();
        for s in self.streams.iter_mut().filter(|s| !s.reset) {
            loop {
                if s.under_way.is_none() {
                    let Some((_, body)) = s.queue.front() else { break };
                    s.under_way = Some((Outgoing::new(s.id, body.len() as u64), 0));
                }
                let (msg, at) = s.under_way.as_mut().unwrap();
                let (header, body) = s.queue.front().unwrap();
                match session.next_frame(msg, header, max_chunk, &mut head) {
                    Ok(Some(take)) => {
                        self.wire.push_back(wire(&head, &body[*at..*at + take]));
                        *at += take;
                        if msg.is_done() {
                            s.under_way = None;
                            s.sent.push(s.queue.pop_front().unwrap());
                        }
                    }
                    Ok(None) => break,
                    Err(Error::Reset { .. }) => {
                        s.reset = true;
                        break;
                    }
                    Err(e) => panic!("sending on {}: {e}", s.id),
                }
            }
            if s.finish && !s.finished && s.queue.is_empty() && !s.reset {
                s.finished = true;
                match session.finish(s.id) {
                    Ok(frame) => self.wire.push_back(wire(&frame.expect("a first finish"), &[])),
                    Err(Error::Reset { .. }) => s.reset = true,
                    Err(e) => panic!("finishing {}: {e}", s.id),
                }
            }
        }
        self.control();
    }

    fn control(&mut self) {
        let bytes = self.session().poll_transmit();
        for f in bytes.chunks(HEADER_LEN) {
            self.wire.push_back(wire(f, &[]));
        }
    }

    /// Takes everything that arrived on every stream.
    fn receive(&mut self) {
        let session = self.session.as_mut().unwrap();
        for (id, r) in self.received.iter_mut() {
            while let Some(event) = session.poll_recv(*id) {
                match event {
                    Ok(RecvEvent::Message { header, body_len }) => {
                        assert!(r.arriving.is_none(), "a message inside a message");
                        r.arriving = Some((header, Vec::new(), body_len as usize));
                    }
                    Ok(RecvEvent::Chunk(b)) => {
                        r.arriving.as_mut().expect("a chunk inside a message").1.extend_from_slice(&b)
                    }
                    Ok(RecvEvent::Finished) => {
                        r.finished = true;
                        break;
                    }
                    Err(Error::Reset { .. }) => break,
                    Err(e) => panic!("receiving on {id}: {e}"),
                }
                if let Some((header, body, _)) = r.arriving.take_if(|(_, body, len)| body.len() == *len) {
                    r.whole.push((header, body));
                }
            }
        }
        self.control();
    }
}

/// Delivers up to `n` of `from`'s frames to `to`; a correct peer's frames never fail.
fn carry(from: &mut End, to: &mut End, n: usize) {
    for _ in 0..n {
        let Some(f) = from.wire.pop_front() else { return };
        deliver(to.session(), f).unwrap();
        while let Some(Ok(id)) = to.session().poll_accept() {
            to.track(id);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Open,
    Send { stream: usize, header: usize, body: usize },
    Finish(usize),
    Reset(usize),
    Cut,
    Carry(usize),
    Receive,
}

fn op() -> impl proptest::strategy::Strategy<Value = (bool, Op)> {
    use proptest::prelude::*;
    let op = prop_oneof![
        Just(Op::Open),
        (0usize..6, 0usize..40, 0usize..2500).prop_map(|(stream, header, body)| Op::Send { stream, header, body }),
        (0usize..6).prop_map(Op::Finish),
        (0usize..6).prop_map(Op::Reset),
        Just(Op::Cut),
        (1usize..20).prop_map(Op::Carry),
        Just(Op::Receive),
    ];
    (any::<bool>(), op)
}

proptest::proptest! {
    /// Two sessions, each opening, sending, finishing and resetting streams in both
    /// directions as frames go back and forth in any rhythm: no frame a correct peer sends
    /// is refused, credit is never overrun, and each stream delivers exactly the messages
    /// sent on it, in order (up to a reset), then its finish.
    #[test]
    fn two_sessions_deliver_what_each_sent(
        ops in proptest::collection::vec(op(), 0..80),
        max_chunk in 1u64..1200,
    ) {
        let (c, s) = pair();
        let mut ends = [End { session: Some(c), ..End::default() }, End { session: Some(s), ..End::default() }];
        let mut serial = 0u8;
        for (which, op) in ops {
            let [a, b] = &mut ends;
            let (this, other) = if which { (a, b) } else { (b, a) };
            match op {
                Op::Open => {
                    if let Ok(id) = this.session().open_stream() {
                        this.track(id);
                    }
                }
                Op::Send { stream, header, body } if !this.streams.is_empty() => {
                    serial = serial.wrapping_add(1);
                    let n = this.streams.len();
                    let s = &mut this.streams[stream % n];
                    if !s.finish {
                        s.queue.push_back((vec![serial; header], (0..body).map(|i| i as u8 ^ serial).collect()));
                    }
                }
                Op::Finish(stream) if !this.streams.is_empty() => {
                    let n = this.streams.len();
                    this.streams[stream % n].finish = true;
                }
                Op::Reset(stream) if !this.streams.is_empty() => {
                    let n = this.streams.len();
                    let s = &mut this.streams[stream % n];
                    s.reset = true;
                    let id = s.id;
                    this.session().reset(id, ErrorCode(ErrorCode::APP_BASE));
                    this.control();
                }
                Op::Cut => this.cut(max_chunk),
                Op::Carry(n) => carry(this, other, n),
                Op::Receive => this.receive(),
                _ => {}
            }
        }
        // Then everything runs its course.
        for _ in 0..1000 {
            let [a, b] = &mut ends;
            a.receive();
            b.receive();
            a.cut(max_chunk);
            b.cut(max_chunk);
            if a.wire.is_empty() && b.wire.is_empty() {
                break;
            }
            carry(a, b, usize::MAX);
            carry(b, a, usize::MAX);
        }
        let [a, b] = &ends;
        proptest::prop_assert!(a.wire.is_empty() && b.wire.is_empty(), "the pair never settled");
        let nothing = Received::default(); // a stream opened that sent nothing is unknown to the peer
        for (from, to) in [(a, b), (b, a)] {
            for s in &from.streams {
                let Received { whole, arriving, finished } = to.received.get(&s.id).unwrap_or(&nothing);
                let was_reset = s.reset || to.streams.iter().any(|t| t.id == s.id && t.reset);
                if was_reset {
                    proptest::prop_assert!(s.sent.starts_with(whole), "stream {}: not what was sent", s.id);
                } else {
                    proptest::prop_assert_eq!(whole, &s.sent, "stream {}", s.id);
                    proptest::prop_assert!(arriving.is_none() && s.queue.is_empty());
                    proptest::prop_assert_eq!(*finished, s.finish, "stream {}: its finish", s.id);
                }
            }
        }
    }
}
