//! Peers that are slow, silent, closing, resetting, hostile or killed: each fails only what it
//! must, and the listener serves on.

use super::*;

pub fn slow_reader_does_not_stall_others(scheme: &str) {
    let config = Config { stream_window: 1 << 20, ..Config::default() };
    let (_l, c, s) = pair_with(scheme, &config);
    let sent_on_slow = AtomicUsize::new(0);
    let body = pattern(7, 256 << 10);
    let (body, sent_on_slow) = (&body, &sent_on_slow);
    let slow = c.open_stream().unwrap();
    slow.send(b"slow", &[]).unwrap();
    let slow_rx = s.accept_stream().unwrap();
    assert_eq!(slow_rx.recv().unwrap().unwrap().header, b"slow");
    let slow = &slow;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for _ in 0..100 {
                slow.send(b"", &[body]).unwrap();
                sent_on_slow.fetch_add(1, Ordering::SeqCst);
            }
            slow.finish().unwrap();
        });
        // The fast stream moves 100 MiB while nobody reads the slow one.
        let fast = c.open_stream().unwrap();
        scope.spawn(move || {
            for _ in 0..400 {
                fast.send(b"", &[body]).unwrap();
            }
            fast.finish().unwrap();
        });
        let fast_rx = s.accept_stream().unwrap();
        let mut n = 0;
        while let Some(m) = fast_rx.recv().unwrap() {
            assert_eq!(m.body.len(), body.len() as u64);
            n += 1;
        }
        assert_eq!(n, 400);
        // The slow stream's sender is held to its 1 MiB window.
        let sent = sent_on_slow.load(Ordering::SeqCst);
        assert!(sent <= 5, "the unread stream buffered {sent} messages of 256 KiB");
        let mut m = 0;
        while slow_rx.recv().unwrap().is_some() {
            m += 1;
        }
        assert_eq!(m, 100);
    });
}

pub fn accepts_while_other_streams_sit_idle(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    std::thread::scope(|scope| {
        let acceptor = scope.spawn(|| {
            let first = s.accept_stream().unwrap();
            assert_eq!(first.recv().unwrap().unwrap().header, b"one");
            // `first` stays open and unread while a second stream arrives.
            let second = s.accept_stream().unwrap();
            assert_eq!(second.recv().unwrap().unwrap().header, b"two");
            (first, second)
        });
        let one = c.open_stream().unwrap();
        one.send(b"one", &[]).unwrap();
        let two = c.open_stream().unwrap();
        two.send(b"two", &[]).unwrap();
        let (first, second) = acceptor.join().unwrap();
        for (tx, rx) in [(&one, &first), (&two, &second)] {
            tx.send(b"again", &[b"x"]).unwrap();
            assert_eq!(rx.recv().unwrap().unwrap().header, b"again");
        }
    });
}

pub fn close_delivers_everything_sent_before_it(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let body = pattern(9, 256 << 10);
    std::thread::scope(|scope| {
        let body = &body;
        scope.spawn(move || {
            let st = c.open_stream().unwrap();
            for i in 0..200u32 {
                // Owned bodies may still be queued when the connection closes.
                if i % 2 == 0 {
                    st.send(&i.to_le_bytes(), &[body]).unwrap();
                } else {
                    st.send_bytes(&i.to_le_bytes(), &[Bytes::copy_from_slice(body)]).unwrap();
                }
            }
            st.finish().unwrap();
            // Close at once, with credit frames from the reader still unread.
            drop(st);
            c.close();
        });
        let st = s.accept_stream().unwrap();
        for i in 0..200u32 {
            let m = st.recv().unwrap().unwrap();
            assert_eq!(m.header, i.to_le_bytes());
            assert!(m.body.to_vec() == *body);
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        assert!(st.recv().unwrap().is_none());
    });
}

pub fn reset_reaches_the_peer(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let a = c.open_stream().unwrap();
    a.send(b"x", &[]).unwrap();
    let b = s.accept_stream().unwrap();
    b.recv().unwrap().unwrap();
    assert!(!a.is_reset() && !b.is_reset(), "a live stream");
    b.reset(ErrorCode(ErrorCode::APP_BASE + 5));
    assert!(b.is_reset());
    // Seen without a recv (a server asking whether its client gave up).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !a.is_reset() {
        assert!(std::time::Instant::now() < deadline, "the reset never showed");
    }
    let err = a.recv().unwrap_err();
    assert!(matches!(err, Error::Reset { code: ErrorCode(0x1005), .. }), "{err}");
    // Dropping an open stream cancels it.
    let a2 = c.open_stream().unwrap();
    a2.send(b"y", &[]).unwrap();
    let b2 = s.accept_stream().unwrap();
    drop(a2);
    b2.recv().unwrap().unwrap();
    let err = b2.recv().unwrap_err();
    assert!(matches!(err, Error::Reset { code: ErrorCode::CANCELLED, .. }), "{err}");
    // Other streams carry on.
    let a3 = c.open_stream().unwrap();
    a3.send(b"z", &[]).unwrap();
    assert_eq!(s.accept_stream().unwrap().recv().unwrap().unwrap().header, b"z");
}

/// A sender that finishes and drops its stream at once, before the receiver read anything (or
/// finished its own side), loses nothing: the drop resets only what the receiver would send.
pub fn finished_then_dropped_delivers_everything(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let body = pattern(11, 4096);
    let a = c.open_stream().unwrap();
    for i in 0..20u32 {
        a.send(&i.to_le_bytes(), &[&body]).unwrap();
    }
    a.finish().unwrap();
    drop(a);
    c.open_stream().unwrap().send(b"next", &[]).unwrap();
    let b = s.accept_stream().unwrap();
    // Accepting the next stream reads past the first one's messages, finish and reset.
    assert_eq!(s.accept_stream().unwrap().recv().unwrap().unwrap().header, b"next");
    for i in 0..20u32 {
        let m = b.recv().unwrap().unwrap();
        assert_eq!((m.header.as_slice(), m.body.to_vec()), (&i.to_le_bytes()[..], body.clone()));
    }
    assert!(b.recv().unwrap().is_none());
    let err = b.send(b"late", &[]).unwrap_err();
    assert!(matches!(err, Error::Reset { code: ErrorCode::CANCELLED, .. }), "{err}");
}

/// Waiting until a stream is readable takes nothing from it: a wait in vain says so after its
/// slice, and a message, a large body and the end all come intact after waits that saw them.
pub fn waiting_for_readable_takes_nothing(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let a = c.open_stream().unwrap();
    a.send(b"first", &[]).unwrap();
    let b = s.accept_stream().unwrap();
    assert!(b.wait_readable(Duration::from_secs(10)).unwrap());
    assert!(b.wait_readable(Duration::from_secs(10)).unwrap());
    assert_eq!(b.recv().unwrap().unwrap().header, b"first");
    let t = Instant::now();
    assert!(!b.wait_readable(Duration::from_millis(100)).unwrap());
    assert!((Duration::from_millis(100)..Duration::from_secs(5)).contains(&t.elapsed()));
    let body = pattern(5, 4 << 20);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            a.send(b"big", &[&body]).unwrap();
            a.finish().unwrap();
        });
        assert!(b.wait_readable(Duration::from_secs(10)).unwrap());
        let m = b.recv().unwrap().unwrap();
        assert_eq!((m.header.as_slice(), m.body.to_vec() == body), (&b"big"[..], true));
        assert!(b.wait_readable(Duration::from_secs(10)).unwrap());
        assert!(b.recv().unwrap().is_none());
    });
}

pub fn recv_times_out_on_a_silent_peer(scheme: &str) {
    let (_l, c, s) = pair(scheme);
    let mut a = c.open_stream().unwrap();
    a.send(b"hi", &[]).unwrap();
    let b = s.accept_stream().unwrap();
    b.recv().unwrap().unwrap();
    a.set_timeout(Duration::from_millis(200));
    let t = Instant::now();
    assert!(matches!(a.recv(), Err(Error::Timeout(_))));
    assert!(t.elapsed() < Duration::from_secs(5));
    // A timeout is not fatal.
    b.send(b"late", &[]).unwrap();
    a.set_timeout(Duration::from_secs(10));
    assert_eq!(a.recv().unwrap().unwrap().header, b"late");
}

/// A sender whose peer reads nothing gets a timeout once its window, the transport's
/// buffers and any send queue are full, never a hang.
pub fn sender_to_a_peer_that_never_reads_times_out(scheme: &str) {
    let config = Config { timeout: Duration::from_millis(500), ..Config::default() };
    let (_l, c, _s) = pair_with(scheme, &config);
    let st = c.open_stream().unwrap();
    let body = Bytes::from(pattern(3, 128 << 10));
    let t = Instant::now();
    let err = loop {
        if let Err(e) = st.send_bytes(b"", std::slice::from_ref(&body)) {
            break e;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "sends never stopped");
    };
    assert!(matches!(err, Error::Timeout(_) | Error::ConnectionLost(_)), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

pub fn wrong_key_is_rejected(scheme: &str) {
    let l = listen(&fresh_url(scheme), &key(), &Config::default()).unwrap();
    let err = connect(l.url(), &Key::new("wrong").unwrap(), &Config::default()).err().unwrap();
    assert!(matches!(err, Error::Auth(_)), "client saw {err}");
    assert!(matches!(expect_rejected(&l), Error::Auth(_)));
    still_serves(&l);
}

pub fn wrong_version_is_rejected(scheme: &str) {
    let l = listen(&fresh_url(scheme), &key(), &Config::default()).unwrap();
    let mut s = raw(l.url());
    let (_, mut hello) =
        Handshake::client(b"k", Params { fabric: Fabric::Tcp, max_streams: 1, stream_window: 1 }, [0; 32]);
    hello[HEADER_LEN + 4] = 99; // version field of the Hello
    s.write_all(&hello).unwrap();
    assert_eq!(read_error_code(&mut *s), Some(ErrorCode::VERSION.0));
    assert!(matches!(expect_rejected(&l), Error::Version { theirs: 99, .. }));
    still_serves(&l);
}

pub fn garbage_is_rejected(scheme: &str) {
    let l = listen(&fresh_url(scheme), &key(), &Config::default()).unwrap();
    for seed in 0..3 {
        let mut s = raw(l.url());
        let _ = s.write_all(&pattern(seed, 4096));
        assert_eq!(read_error_code(&mut *s), Some(ErrorCode::PROTOCOL.0));
        assert!(matches!(expect_rejected(&l), Error::Frame(_) | Error::BadMagic | Error::PeerMisbehaved(_)));
    }
    still_serves(&l);
}

pub fn truncated_frame_is_rejected(scheme: &str) {
    let l = listen(&fresh_url(scheme), &key(), &Config::default()).unwrap();
    let (_, hello) = Handshake::client(b"k", Params { fabric: Fabric::Tcp, max_streams: 1, stream_window: 1 }, [0; 32]);
    let mut s = raw(l.url());
    s.write_all(&hello[..hello.len() / 2]).unwrap();
    drop(s);
    assert!(matches!(expect_rejected(&l), Error::ConnectionLost(_)));
    still_serves(&l);
}

pub fn oversized_header_is_rejected(scheme: &str) {
    let l = listen(&fresh_url(scheme), &key(), &Config::default()).unwrap();
    let mut h = FrameHeader::new(Kind::Hello, 0);
    h.meta_len = 1 << 30;
    let mut s = raw(l.url());
    s.write_all(&h.encode()).unwrap();
    assert_eq!(read_error_code(&mut *s), Some(ErrorCode::PROTOCOL.0));
    assert!(matches!(expect_rejected(&l), Error::Frame(_)));
    still_serves(&l);
}

pub fn silent_peer_does_not_block_others(scheme: &str) {
    let config = Config { handshake_timeout: Duration::from_secs(3), ..Config::default() };
    let l = listen(&fresh_url(scheme), &key(), &config).unwrap();
    let _silent = raw(l.url());
    // A good client is served while the silent one is still pending.
    let c = connect(l.url(), &key(), &config).unwrap();
    let first = l.accept_timeout(Duration::from_secs(5));
    assert!(first.is_ok(), "the silent client delayed a good one: {:?}", first.err());
    drop(c);
    assert!(matches!(expect_rejected(&l), Error::Timeout(_)));
}

/// Far more silent sockets than handshakes may be pending: a real client still gets in, and
/// promptly (the oldest pending handshakes make room).
pub fn many_silent_peers_do_not_keep_a_real_one_out(scheme: &str) {
    let l = listen(&fresh_url(scheme), &key(), &Config::default()).unwrap();
    let _silent: Vec<_> = (0..200).map(|_| raw(l.url())).collect();
    let started = Instant::now();
    let c = connect(l.url(), &key(), &Config::default()).unwrap();
    loop {
        match l.accept_timeout(Duration::from_secs(5)) {
            Ok(server) => {
                c.open_stream().unwrap().send(b"through", &[]).unwrap();
                assert_eq!(server.accept_stream().unwrap().recv().unwrap().unwrap().header, b"through");
                break;
            }
            Err(Error::Rejected { .. }) => assert!(started.elapsed() < Duration::from_secs(5), "evicted too late"),
            Err(e) => panic!("the real client did not get in: {e}"),
        }
    }
}

pub fn killed_peer_mid_message(scheme: &str) {
    // libfabric's shm before 1.18 has a sender lock the receiver's region (a spinlock in the
    // shared memory) to queue each command: a sender killed holding it leaves the receiver's
    // progress spinning on it for good, in libfabric (about 1 run in 15 here, with one-sided
    // access off). 1.18 made the queue lock-free.
    const LOCK_FREE_SHM: u32 = (1 << 16) | 18;
    if scheme == "ofi+shm" && ofi_sys::FI_VERSION_BUILT < LOCK_FREE_SHM {
        eprintln!("skipped: libfabric before 1.18 wedges a receiver whose shm peer dies holding its lock");
        return;
    }
    let l = listen(&fresh_url(scheme), &key(), &Config::default()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_sends_forever", "--ignored", "--nocapture", "--test-threads=1"])
        .env("WS_CHILD_URL", l.url())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let conn = l.accept().unwrap();
    let st = conn.accept_stream().unwrap();
    let start = st.recv_start().unwrap().unwrap();
    assert_eq!(start.body_len, 1 << 40);
    st.read_chunk().unwrap().unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let err = loop {
        match st.read_chunk() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("an incomplete body looked complete"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::ConnectionLost(_)), "{err}");
    still_serves(&l);
}
