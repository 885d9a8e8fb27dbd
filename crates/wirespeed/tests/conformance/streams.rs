//! Messages and bodies: order, sizes around every threshold, many streams, held bodies, gathered
//! and filled bodies, and a stream's end.

use super::*;

pub fn round_trip(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let a = c.open_stream().unwrap();
    a.send(b"header", &[b"hello ", b"", b"world"]).unwrap();
    a.send(b"", &[]).unwrap();
    a.finish().unwrap();
    let b = s.accept_stream().unwrap();
    let m = b.recv().unwrap().unwrap();
    assert_eq!(m.header, b"header");
    assert_eq!(m.body.to_vec(), b"hello world");
    let m = b.recv().unwrap().unwrap();
    assert!(m.header.is_empty() && m.body.is_empty());
    assert!(b.recv().unwrap().is_none(), "finish ends the stream");
    // And back the other way on the same stream.
    b.send(b"reply", &[&pattern(1, 70_000)]).unwrap();
    let m = a.recv().unwrap().unwrap();
    assert_eq!(m.body.to_vec(), pattern(1, 70_000));
}

/// Both ends derive the same per-connection keys; another connection derives others.
pub fn derived_keys_match_per_connection(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    assert_eq!(c.derive_key(b"label"), s.derive_key(b"label"));
    assert_ne!(c.derive_key(b"label"), c.derive_key(b"other label"));
    let (_l, c2, _s) = pair(scheme);
    assert_ne!(c2.derive_key(b"label"), c.derive_key(b"label"));
}

/// Owned bodies may still be in flight when `send_bytes` returns; they arrive whole and in
/// order, across frames, sizes and body pieces.
pub fn owned_bodies_arrive_in_order(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let data = wirespeed::Bytes::from(pattern(5, 3 << 20));
    let sizes = [0usize, 1, 4096, 200_000, 1 << 20, (3 << 20) - 7];
    std::thread::scope(|scope| {
        let data = &data;
        scope.spawn(move || {
            let st = c.open_stream().unwrap();
            for round in 0..20u32 {
                for &n in &sizes {
                    let (a, b) = (data.slice(..n / 3), data.slice(n / 3..n));
                    st.send_bytes(&round.to_le_bytes(), &[a, b]).unwrap();
                }
            }
            st.finish().unwrap();
            assert!(st.recv().unwrap().is_none());
        });
        let st = s.accept_stream().unwrap();
        for round in 0..20u32 {
            for &n in &sizes {
                let m = st.recv().unwrap().unwrap();
                assert_eq!(m.header, round.to_le_bytes());
                assert!(m.body.to_vec() == data[..n], "round {round}, {n} bytes");
            }
        }
        assert!(st.recv().unwrap().is_none());
        st.finish().unwrap();
    });
}

/// Sends `count` messages of `size` bytes on one stream, each numbered in its header and
/// with its own pattern as its body, then waits for the peer to finish too.
fn send_numbered(c: &Connection, count: usize, size: usize) {
    let st = c.open_stream().unwrap();
    for i in 0..count {
        st.send(&(i as u32).to_le_bytes(), &[&pattern(i as u64, size)]).unwrap();
    }
    st.finish().unwrap();
    assert!(st.recv().unwrap().is_none());
}

/// A receiver may keep every message of a stream several times larger than the transport's
/// buffers (shm's ring, ucx's pools); the sender must not stall on the memory those pin.
pub fn held_bodies_never_stall_the_sender(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let config = Config::default();
    receive_all_and_keep(&c, &s, 4 * config.shm_ring_bytes / (1 << 20), 1 << 20);
}

/// `count` numbered messages of `size` bytes from `c` to `s`, all kept until the last arrived
/// and checked then; returned, still held.
pub fn receive_all_and_keep(c: &Connection, s: &Connection, count: usize, size: usize) -> Vec<Message> {
    std::thread::scope(|scope| {
        scope.spawn(move || send_numbered(c, count, size));
        let st = s.accept_stream().unwrap();
        let mut held = Vec::new();
        while let Some(m) = st.recv().unwrap() {
            held.push(m);
        }
        st.finish().unwrap();
        assert_eq!(held.len(), count);
        for (i, m) in held.iter().enumerate() {
            assert_eq!(m.header, (i as u32).to_le_bytes());
            assert!(m.body.to_vec() == pattern(i as u64, size), "message {i} changed while held");
        }
        held
    })
}

/// A receiver slower than its sender, which drops most messages but keeps every fifth: the
/// views it drops free the transport's memory by themselves (shm waits for them rather than
/// copying), and those it keeps must stay intact when the rest of the ring is reused.
pub fn a_slow_receiver_keeping_some_messages_gets_them_all_intact(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let (size, count) = (1 << 20, 3 * Config::default().shm_ring_bytes / (1 << 20));
    std::thread::scope(|scope| {
        scope.spawn(move || send_numbered(&c, count, size));
        let st = s.accept_stream().unwrap();
        let (mut kept, mut i) = (Vec::new(), 0);
        while let Some(m) = st.recv().unwrap() {
            assert_eq!(m.header, (i as u32).to_le_bytes());
            assert!(m.body.to_vec() == pattern(i as u64, size), "message {i} arrived changed");
            if i % 5 == 0 {
                kept.push((i, m));
            }
            std::thread::sleep(Duration::from_micros(500));
            i += 1;
        }
        st.finish().unwrap();
        assert_eq!(i, count);
        for (i, m) in &kept {
            assert!(m.body.to_vec() == pattern(*i as u64, size), "message {i} changed while kept");
        }
    });
}

/// Bodies in sealed regions arrive intact however they are sent (whole, sliced, mixed with
/// heap pieces, borrowed), stay valid after the sender drops its regions, and keep arriving
/// when more regions are used than a shm peer maps (those are copied).
pub fn sealed_region_bodies_arrive_intact(scheme: &str) {
    use wirespeed::SealedRegion;
    let (_l, c, s) = pair(scheme);
    let big = pattern(21, 3 << 20);
    let small: Vec<Vec<u8>> = (0..300).map(|i| pattern(100 + i, 4096)).collect();
    let mut expected: Vec<Vec<u8>> = Vec::new();
    for round in 0..8 {
        expected.push(big.clone());
        expected.push(big[round * 64 + 1..(1 << 20) + round].to_vec());
        expected.push(big[..100].to_vec());
        expected.push([&big[..5000], &b"heap"[..]].concat());
    }
    expected.extend(small.iter().cloned());
    std::thread::scope(|scope| {
        let (big, small) = (&big, &small);
        let sender = scope.spawn(move || {
            let region = SealedRegion::copy_of(big).unwrap();
            let st = c.open_stream().unwrap();
            for round in 0..8 {
                st.send_bytes(b"whole", &[region.slice(0, big.len())]).unwrap();
                st.send_bytes(b"slice", &[region.slice(round * 64 + 1, (1 << 20) + round - round * 64 - 1)]).unwrap();
                st.send(b"tiny", &[&region[..100]]).unwrap();
                st.send_bytes(b"mixed", &[region.slice(0, 5000), wirespeed::Bytes::from_static(b"heap")]).unwrap();
            }
            drop(region);
            for bytes in small {
                let r = SealedRegion::copy_of(bytes).unwrap();
                st.send(b"small", &[&r[..]]).unwrap();
            }
            st.finish().unwrap();
            st
        });
        let st = s.accept_stream().unwrap();
        let mut held = Vec::new();
        while let Some(m) = st.recv().unwrap() {
            held.push(m);
        }
        st.finish().unwrap();
        let peer = sender.join().unwrap();
        assert!(peer.recv().unwrap().is_none());
        assert_eq!(held.len(), expected.len());
        for (i, (m, want)) in held.iter().zip(&expected).enumerate() {
            assert!(m.body.to_vec() == *want, "message {i} ({:?}) changed", String::from_utf8_lossy(&m.header));
        }
    });
}

pub fn bodies_of_every_size_around_the_thresholds(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let mut sizes = vec![0, 1, 63, 64, 65, 4095, 4096, 4097];
    for edge in [64 << 10, 128 << 10, 1 << 20, 4 << 20] {
        sizes.extend([edge - 65, edge - 1, edge, edge + 1, edge + 64]);
    }
    let data = pattern(11, (4 << 20) + 64);
    std::thread::scope(|scope| {
        let (sizes, data) = (&sizes, &data);
        scope.spawn(move || {
            let st = c.open_stream().unwrap();
            for &n in sizes {
                // Three slices of uneven lengths, so splits land inside and between them.
                let (a, b) = (n / 3, n / 3 + n / 5);
                st.send(&(n as u64).to_le_bytes(), &[&data[..a], &data[a..b], &data[b..n]]).unwrap();
            }
            st.finish().unwrap();
            assert!(st.recv().unwrap().is_none());
        });
        let st = s.accept_stream().unwrap();
        for &n in sizes {
            let m = st.recv().unwrap().unwrap();
            assert_eq!(m.header, (n as u64).to_le_bytes());
            assert!(m.body.to_vec() == data[..n], "body of {n} bytes differs");
        }
        assert!(st.recv().unwrap().is_none());
        st.finish().unwrap();
    });
}

/// `recv` waits for a whole body, even one larger than the stream's window: the credit for
/// what it took so far must reach the sender while it waits. `recv_contiguous` hands such a
/// body over in one piece.
pub fn recv_takes_a_body_larger_than_the_window(scheme: &str) {
    let config = Config { stream_window: 1 << 20, ..Config::default() };
    let (_l, c, s) = pair_with(scheme, &config);
    let data = pattern(21, (5 << 20) + 3);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let st = c.open_stream().unwrap();
            st.send(b"big", &[&data]).unwrap();
            st.send(b"whole", &[&data[..1000], &data[1000..]]).unwrap();
            st.finish().unwrap();
        });
        let st = s.accept_stream().unwrap();
        let m = st.recv().unwrap().unwrap();
        assert_eq!(m.header, b"big");
        assert!(m.body.to_vec() == data, "the body differs");
        let m = st.recv_contiguous().unwrap().unwrap();
        assert_eq!((m.header.as_slice(), m.body.chunks().len()), (&b"whole"[..], 1));
        assert!(m.body.chunks()[0][..] == data[..], "the gathered body differs");
        assert!(st.recv_contiguous().unwrap().is_none());
    });
}

pub fn many_concurrent_streams(scheme: &str) {
    const STREAMS: usize = 64;
    const MESSAGES: usize = 24;
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        for i in 0..STREAMS {
            let c = &c;
            scope.spawn(move || {
                let st = c.open_stream().unwrap();
                for m in 0..MESSAGES {
                    let seed = (i * 1000 + m) as u64;
                    let body = pattern(seed, (seed as usize * 7919) % (300 << 10));
                    let digest = blake3::hash(&body);
                    st.send(digest.as_bytes(), &[&body[..body.len() / 3], &body[body.len() / 3..]]).unwrap();
                }
                st.finish().unwrap();
                let ack = st.recv().unwrap().unwrap();
                assert_eq!(ack.header, (MESSAGES as u32).to_le_bytes());
                assert!(st.recv().unwrap().is_none(), "the server finishes after its ack");
            });
        }
        for _ in 0..STREAMS {
            let st = s.accept_stream().unwrap();
            scope.spawn(move || {
                let mut n = 0u32;
                while let Some(m) = st.recv().unwrap() {
                    let body = m.body.to_vec();
                    assert_eq!(m.header, blake3::hash(&body).as_bytes(), "checksum on stream {}", st.id());
                    n += 1;
                }
                st.send(&n.to_le_bytes(), &[]).unwrap();
                st.finish().unwrap();
            });
        }
    });
}

/// The server reads 32 streams from one thread with `next_ready`, the client writes them from
/// one thread in turns; every message arrives whole, checksummed and in order per stream.
pub fn one_thread_serves_many_streams(scheme: &str) {
    const STREAMS: usize = 32;
    const MESSAGES: usize = 16;
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let streams: Vec<_> = (0..STREAMS).map(|_| c.open_stream().unwrap()).collect();
            for m in 0..MESSAGES {
                for (i, st) in streams.iter().enumerate() {
                    let seed = (i * 1000 + m) as u64;
                    let body = pattern(seed, (seed as usize * 7919) % (300 << 10));
                    let mut header = (m as u32).to_le_bytes().to_vec();
                    header.extend_from_slice(blake3::hash(&body).as_bytes());
                    st.send_bytes(&header, &[Bytes::from(body)]).unwrap();
                }
            }
            for st in &streams {
                st.finish().unwrap();
                assert_eq!(st.recv().unwrap().unwrap().header, (MESSAGES as u32).to_le_bytes());
                assert!(st.recv().unwrap().is_none());
            }
        });
        let mut open = std::collections::HashMap::new();
        let mut done = 0;
        while done < STREAMS {
            match s.next_ready().unwrap() {
                Ready::Accept => {
                    let st = s.accept_stream().unwrap();
                    open.insert(st.id(), (st, 0u32));
                }
                Ready::Stream(id) => {
                    let (st, n) = open.get_mut(&id).expect("ready streams were accepted first");
                    match st.recv().unwrap() {
                        Some(m) => {
                            assert_eq!(m.header[..4], n.to_le_bytes(), "order on stream {id}");
                            assert_eq!(&m.header[4..], blake3::hash(&m.body.to_vec()).as_bytes());
                            *n += 1;
                        }
                        None => {
                            let (st, n) = open.remove(&id).unwrap();
                            st.send(&n.to_le_bytes(), &[]).unwrap();
                            st.finish().unwrap();
                            done += 1;
                        }
                    }
                }
            }
        }
    });
}

/// Many small messages, with a large one now and then, sent from one thread over 8 streams
/// in turns (so small ones pile up behind a large one, where fabrics batch them): each stream's
/// arrive in order and intact.
pub fn small_messages_among_large_ones_arrive_in_order(scheme: &str) {
    const STREAMS: usize = 8;
    const MESSAGES: u32 = 600;
    let size = |i: usize, m: u32| match m % 97 {
        0 => 200_000 + i * 1000,
        _ => (m as usize * 131 + i * 17) % 2000,
    };
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let streams: Vec<_> = (0..STREAMS).map(|_| c.open_stream().unwrap()).collect();
            for m in 0..MESSAGES {
                for (i, st) in streams.iter().enumerate() {
                    let header = [i as u32, m].map(u32::to_le_bytes).concat();
                    st.send(&header, &[&pattern(i as u64 * 100_000 + m as u64, size(i, m))]).unwrap();
                }
            }
            for st in &streams {
                st.finish().unwrap();
            }
        });
        let streams: Vec<_> = (0..STREAMS).map(|_| s.accept_stream().unwrap()).collect();
        for st in streams {
            scope.spawn(move || {
                let mut i = None;
                for m in 0..MESSAGES {
                    let got = st.recv().unwrap().expect("every message");
                    let i = *i.get_or_insert(u32::from_le_bytes(got.header[..4].try_into().unwrap()) as usize);
                    assert_eq!(got.header[4..], m.to_le_bytes(), "order on stream {i}");
                    assert!(
                        got.body.to_vec() == pattern(i as u64 * 100_000 + m as u64, size(i, m)),
                        "message {m} on {i}"
                    );
                }
                assert!(st.recv().unwrap().is_none());
            });
        }
    });
}

/// A lone small message is not held back to be batched: twenty ping-pongs of 64 bytes, after
/// a burst, take a median far under 100 ms.
pub fn a_lone_small_message_goes_at_once(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let st = s.accept_stream().unwrap();
            while let Some(m) = st.recv().unwrap() {
                if m.header == b"ping" {
                    st.send(b"pong", &[&m.body.to_vec()]).unwrap();
                }
            }
            st.finish().unwrap();
        });
        let st = c.open_stream().unwrap();
        for i in 0..200u32 {
            st.send(b"burst", &[&pattern(i as u64, 4096)]).unwrap();
        }
        let mut rounds: Vec<_> = (0..20)
            .map(|_| {
                let t = std::time::Instant::now();
                st.send(b"ping", &[&[7u8; 64]]).unwrap();
                let m = st.recv().unwrap().unwrap();
                assert_eq!((&m.header[..], m.body.to_vec()), (&b"pong"[..], vec![7u8; 64]));
                t.elapsed()
            })
            .collect();
        rounds.sort();
        assert!(rounds[10] < std::time::Duration::from_millis(100), "round trips {rounds:?}");
        st.finish().unwrap();
        assert!(st.recv().unwrap().is_none());
    });
}

pub fn body_larger_than_4_gib(scheme: &str) {
    const PIECE: usize = 64 << 20;
    let total: u64 = (4u64 << 30) + 12_345;
    let piece = pattern(42, PIECE);
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut parts: Vec<&[u8]> = vec![&piece[..]; (total / PIECE as u64) as usize];
            parts.push(&piece[..(total % PIECE as u64) as usize]);
            let st = c.open_stream().unwrap();
            st.send(b"big", &parts).unwrap();
            st.finish().unwrap();
        });
        let st = s.accept_stream().unwrap();
        let start = st.recv_start().unwrap().unwrap();
        assert_eq!((start.header.as_slice(), start.body_len), (&b"big"[..], total));
        let mut off = 0u64;
        while let Some(chunk) = st.read_chunk().unwrap() {
            let mut at = 0;
            while at < chunk.len() {
                let p = (off % PIECE as u64) as usize;
                let n = (PIECE - p).min(chunk.len() - at);
                assert!(chunk[at..at + n] == piece[p..p + n], "body differs at byte {off}");
                at += n;
                off += n as u64;
            }
        }
        assert_eq!(off, total);
        assert!(st.recv().unwrap().is_none());
    });
}

/// A second finish sends nothing: the peer sees the stream end once, and the connection goes
/// on serving (a second Finish frame would be a protocol violation that fails it).
pub fn finishing_twice_ends_the_stream_once(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let a = c.open_stream().unwrap();
    a.send(b"only", &[]).unwrap();
    a.finish().unwrap();
    a.finish().unwrap();
    let b = s.accept_stream().unwrap();
    assert_eq!(b.recv().unwrap().unwrap().header, b"only");
    assert!(b.recv().unwrap().is_none());
    let a2 = c.open_stream().unwrap();
    a2.send(b"next", &[b"body"]).unwrap();
    let b2 = s.accept_stream().unwrap();
    let m = b2.recv().unwrap().unwrap();
    assert_eq!((m.header.as_slice(), m.body.to_vec()), (&b"next"[..], b"body".to_vec()));
    drop(b);
}

/// A body handed over as many slices (more than a fabric's gather list takes) arrives whole,
/// from borrowed slices and from owned ones. The receiver reads meanwhile: over ucx and ofi a
/// borrowed body is read from the sender's memory, so its send waits for the reader.
pub fn a_body_of_many_slices_arrives_whole(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let slices: Vec<Vec<u8>> = (0..40).map(|i| pattern(i, 40_000 + i as usize)).collect();
    let whole = slices.concat();
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let b = s.accept_stream().unwrap();
            for header in [&b"borrowed"[..], b"owned"] {
                let m = b.recv().unwrap().unwrap();
                assert_eq!(m.header, header);
                assert!(m.body.to_vec() == whole, "{scheme}: the {:?} body differs", String::from_utf8_lossy(header));
            }
        });
        let a = c.open_stream().unwrap();
        a.send(b"borrowed", &slices.iter().map(|v| &v[..]).collect::<Vec<_>>()).unwrap();
        let owned: Vec<wirespeed::Bytes> = slices.iter().map(|v| wirespeed::Bytes::from(v.clone())).collect();
        a.send_bytes(b"owned", &owned).unwrap();
        reader.join().unwrap();
    });
}

/// Bodies written in place by `send_filled`, from several streams at once, arrive whole;
/// the receivers read them piece by piece, as a file sink does.
pub fn filled_bodies_arrive_whole(scheme: &str) {
    const STREAMS: usize = 2;
    const MESSAGES: usize = 40;
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        for i in 0..STREAMS {
            let c = &c;
            scope.spawn(move || {
                let st = c.open_stream().unwrap();
                for m in 0..MESSAGES {
                    let seed = (i * 1000 + m) as u64;
                    let body = pattern(seed, (4 << 20) - (seed as usize * 7919) % (1 << 20));
                    let mut at = 0;
                    let filled = st.send_filled(blake3::hash(&body).as_bytes(), body.len() as u64, |piece| {
                        piece.copy_from_slice(&body[at..at + piece.len()]);
                        at += piece.len();
                        Ok(())
                    });
                    filled.unwrap().unwrap();
                    assert_eq!(at, body.len());
                    st.send(b"next", &[]).unwrap();
                }
                st.finish().unwrap();
                assert!(st.recv().unwrap().is_none(), "the server finishes once it has read all");
            });
        }
        for _ in 0..STREAMS {
            let st = s.accept_stream().unwrap();
            scope.spawn(move || {
                while let Some(m) = st.recv_start().unwrap() {
                    let mut h = blake3::Hasher::new();
                    while let Some(chunk) = st.read_chunk().unwrap() {
                        h.update(&chunk);
                    }
                    assert_eq!(m.header, h.finalize().as_bytes(), "checksum on stream {}", st.id());
                    assert_eq!(st.recv().unwrap().unwrap().header, b"next");
                }
                st.finish().unwrap();
            });
        }
    });
}

/// A fill that fails cuts its message short: the peer sees the stream reset, and the
/// connection carries on.
pub fn failed_fill_resets_only_its_stream(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let st = c.open_stream().unwrap();
    let mut calls = 0;
    let filled = st.send_filled(b"doomed", 3 << 20, |piece| {
        calls += 1;
        piece.fill(7);
        if calls == 2 { Err(std::io::Error::other("disk gone")) } else { Ok(()) }
    });
    assert_eq!(filled.unwrap().unwrap_err().to_string(), "disk gone");
    let peer = s.accept_stream().unwrap();
    assert!(matches!(peer.recv(), Err(Error::Reset { code: ErrorCode::CANCELLED, .. })));
    let st2 = c.open_stream().unwrap();
    st2.send(b"still here", &[b"body"]).unwrap();
    let m = s.accept_stream().unwrap().recv().unwrap().unwrap();
    assert_eq!((m.header.as_slice(), m.body.to_vec()), (&b"still here"[..], b"body".to_vec()));
}

/// Messages without a body, sent as fast as a slower reader frees room: each header arrives
/// as sent. (Space of a frame without payload must not be reused before its header is read.)
pub fn headers_survive_a_full_ring(scheme: &str) {
    const MESSAGES: u64 = 200_000;
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let st = c.open_stream().unwrap();
            for i in 0..MESSAGES {
                st.send(&pattern(i, 100 + (i % 7) as usize * 50), &[]).unwrap();
            }
            st.finish().unwrap();
            assert!(st.recv().unwrap().is_none());
        });
        let st = s.accept_stream().unwrap();
        let mut i = 0;
        while let Some(m) = st.recv().unwrap() {
            assert!(m.header == pattern(i, 100 + (i % 7) as usize * 50), "header of message {i} changed");
            i += 1;
        }
        st.finish().unwrap();
        assert_eq!(i, MESSAGES);
    });
}
