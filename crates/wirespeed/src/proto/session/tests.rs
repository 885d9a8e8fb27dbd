use super::*;
use crate::fabric::Fabric;

const P: Params = Params { fabric: Fabric::Tcp, max_streams: 4, stream_window: 1000 };

fn pair() -> (Session, Session) {
    (Session::new(Role::Client, P, P), Session::new(Role::Server, P, P))
}

fn message_frame(stream: u32, header: &[u8], body_len: u64, payload: &[u8]) -> (FrameHeader, Vec<u8>, Buf) {
    let mut meta = body_len.to_le_bytes().to_vec();
    meta.extend_from_slice(header);
    let mut h = FrameHeader::new(Kind::Message, stream);
    h.meta_len = meta.len() as u32;
    h.len = payload.len() as u64;
    (h, meta, Buf::from(payload.to_vec()))
}

fn data_frame(stream: u32, payload: &[u8]) -> (FrameHeader, Vec<u8>, Buf) {
    let mut h = FrameHeader::new(Kind::Data, stream);
    h.len = payload.len() as u64;
    (h, vec![], Buf::from(payload.to_vec()))
}

fn deliver(s: &mut Session, f: (FrameHeader, Vec<u8>, Buf)) -> Result<Touched, Error> {
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
    assert_eq!(c.take_send_credit(id, 11, 300, 200).unwrap(), Some(200));
    deliver(&mut s, message_frame(id, b"hdr", 300, &[1; 200])).unwrap();
    assert_eq!(c.take_send_credit(id, 0, 100, 200).unwrap(), Some(100));
    deliver(&mut s, data_frame(id, &[2; 100])).unwrap();
    assert_eq!(s.poll_accept().unwrap().unwrap(), 1);
    match s.poll_recv(1).unwrap().unwrap() {
        RecvEvent::Message { header, body_len } => assert_eq!((header.as_slice(), body_len), (&b"hdr"[..], 300)),
        e => panic!("{e:?}"),
    }
    assert!(matches!(s.poll_recv(1), Some(Ok(RecvEvent::Chunk(b))) if b.len() == 200));
    assert!(matches!(s.poll_recv(1), Some(Ok(RecvEvent::Chunk(b))) if b.len() == 100));
    assert!(s.poll_recv(1).is_none());
}

#[test]
fn credits_bound_the_sender_and_come_back_when_consumed() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    let mut sent = 0;
    while let Some(n) = c.take_send_credit(id, 8, 100, 100).unwrap() {
        deliver(&mut s, message_frame(id, b"", 100, &vec![0; n as usize])).unwrap();
        sent += 1;
        if sent > 100 {
            panic!("credit never ran out");
        }
    }
    assert_eq!(sent, 9); // 9 * 108 bytes fit in a 1000-byte window
    // Too much data is a protocol error on the receiving side.
    assert!(matches!(
        deliver(&mut Session::new(Role::Server, P, P), message_frame(1, b"", 2000, &[0; 1000])),
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
    assert!(c.take_send_credit(id, 8, 100, 100).unwrap().is_some());
}

#[test]
fn interleaved_streams_stay_apart() {
    let (mut c, mut s) = pair();
    let a = c.open_stream().unwrap();
    let b = c.open_stream().unwrap();
    deliver(&mut s, message_frame(a, b"a", 4, &[1, 1])).unwrap();
    deliver(&mut s, message_frame(b, b"b", 2, &[2, 2])).unwrap();
    deliver(&mut s, data_frame(a, &[1, 1])).unwrap();
    let mut finish = FrameHeader::new(Kind::Finish, b);
    finish.len = 0;
    s.on_frame(&finish, &[], Buf::empty()).unwrap();
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
    deliver(&mut s, message_frame(id, b"", 10, &[0; 5])).unwrap();
    s.poll_accept();
    s.reset(id, ErrorCode::CANCELLED);
    assert!(matches!(s.poll_recv(id), Some(Err(Error::Reset { code: ErrorCode::CANCELLED, .. }))));
    pump(&mut s, &mut c);
    assert!(matches!(c.take_send_credit(id, 0, 5, 5), Err(Error::Reset { .. })));
    s.release(id);
    deliver(&mut s, data_frame(id, &[0; 5])).unwrap();
    assert!(!s.has_transmit());
}

#[test]
fn frames_that_cross_our_reset_are_dropped_while_the_stream_is_held() {
    let (mut c, mut s) = pair();
    let id = c.open_stream().unwrap();
    deliver(&mut s, message_frame(id, b"", 10, &[0; 5])).unwrap();
    s.poll_accept();
    s.reset(id, ErrorCode::CANCELLED);
    // Sent by the peer before it heard of the reset: the rest of that body, another message,
    // its finish, a grant.
    deliver(&mut s, data_frame(id, &[0; 5])).unwrap();
    deliver(&mut s, message_frame(id, b"late", 3, &[1; 3])).unwrap();
    deliver(&mut s, (FrameHeader::new(Kind::Finish, id), vec![], Buf::empty())).unwrap();
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
    deliver(&mut s, message_frame(id, b"", 5, &[7; 5])).unwrap();
    assert!(c.finish(id).unwrap()); // the caller sends the Finish frame behind the data
    s.on_frame(&FrameHeader::new(Kind::Finish, id), &[], Buf::empty()).unwrap();
    c.release(id); // the server never finished its side: this resets the stream
    pump(&mut c, &mut s);
    s.poll_accept();
    assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Message { body_len: 5, .. }))));
    assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Chunk(b))) if *b == [7; 5]));
    assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Finished))));
    assert!(matches!(s.take_send_credit(id, 0, 1, 1), Err(Error::Reset { code: ErrorCode::CANCELLED, .. })));
    // A stream we reset ourselves stays reset when the peer's reset crosses ours.
    let id = c.open_stream().unwrap();
    deliver(&mut s, message_frame(id, b"", 0, &[])).unwrap();
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
    deliver(&mut s, message_frame(id, b"h", 3, &[1; 3])).unwrap();
    s.poll_accept();
    assert!(poll_agrees(&mut s, id) && poll_agrees(&mut s, id)); // the message, its body
    assert!(!poll_agrees(&mut s, id));
    s.on_frame(&FrameHeader::new(Kind::Finish, id), &[], Buf::empty()).unwrap();
    assert!(poll_agrees(&mut s, id) && poll_agrees(&mut s, id)); // the end, for good
    let id = c.open_stream().unwrap();
    deliver(&mut s, message_frame(id, b"", 0, &[])).unwrap();
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
    deliver(&mut s, message_frame(id, b"", 0, &[])).unwrap();
    c.release(id);
    pump(&mut c, &mut s);
    s.poll_accept();
    assert!(matches!(s.poll_recv(id), Some(Err(Error::Reset { code: ErrorCode::CANCELLED, .. }))));
}

#[test]
fn protocol_violations_are_errors() {
    let (_, mut s) = pair();
    assert!(deliver(&mut s, data_frame(1, &[1])).is_err()); // data before a message
    let (_, mut s) = pair();
    assert!(deliver(&mut s, message_frame(2, b"", 0, &[])).is_err()); // server's own id
    let (_, mut s) = pair();
    let (h, mut m, p) = message_frame(1, b"", 1, &[1, 2]);
    m.truncate(8);
    assert!(s.on_frame(&h, &m, p).is_err()); // payload longer than body
    let (_, mut s) = pair();
    assert_eq!(deliver(&mut s, message_frame(1, b"", 0, &[])).unwrap(), Touched::Accept);
    assert_eq!(deliver(&mut s, message_frame(1, b"", 0, &[])).unwrap(), Touched::Stream(1));
}

#[test]
fn ready_streams_take_turns_until_drained_or_released() {
    let (_, mut s) = pair();
    assert!(s.poll_ready().is_none());
    deliver(&mut s, message_frame(1, b"", 0, &[])).unwrap();
    deliver(&mut s, message_frame(3, b"", 0, &[])).unwrap();
    deliver(&mut s, message_frame(1, b"", 0, &[])).unwrap();
    assert_eq!(s.poll_ready().unwrap().unwrap(), Ready::Accept);
    while s.poll_accept().is_some_and(|r| r.is_ok()) {}
    // Level-triggered and fair: 1 has two messages, yet 3 gets its turn in between.
    let order: Vec<_> = (0..3).map(|_| s.poll_ready().unwrap().unwrap()).collect();
    assert_eq!(order, [Ready::Stream(1), Ready::Stream(3), Ready::Stream(1)]);
    for id in [1, 1, 3] {
        assert!(matches!(s.poll_recv(id), Some(Ok(RecvEvent::Message { .. }))));
    }
    assert!(s.poll_ready().is_none()); // drained: nothing waits
    let mut finish = FrameHeader::new(Kind::Finish, 3);
    finish.len = 0;
    s.on_frame(&finish, &[], Buf::empty()).unwrap();
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
    deliver(&mut s, message_frame(5, b"", 0, &[])).unwrap();
    deliver(&mut s, message_frame(1, b"", 0, &[])).unwrap();
    deliver(&mut s, message_frame(3, b"", 0, &[])).unwrap();
    let accepted: Vec<u32> = std::iter::from_fn(|| s.poll_accept().and_then(|r| r.ok())).collect();
    assert_eq!(accepted, [5, 1, 3]);
    assert!(deliver(&mut s, message_frame(1001, b"", 0, &[])).is_err()); // skips 497 ids
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
    for id in [1, 3, 5, 7] {
        deliver(&mut s, message_frame(id, b"", 0, &[])).unwrap();
    }
    deliver(&mut s, message_frame(9, b"", 0, &[])).unwrap();
    assert_eq!(s.accept_queue.len(), 4);
    let t = s.poll_transmit();
    assert_eq!((t[0], t[4]), (Kind::Reset as u8, 9));
}
