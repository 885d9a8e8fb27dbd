//! What only one fabric has: shared memory's socket files and areas, a client of another
//! fabric, an oversized frame over tcp.

use super::*;

#[test]
fn shm_listen_never_clobbers_a_file_or_a_live_listener() {
    let url = fresh_url("shm");
    let path = url.trim_start_matches("shm://").to_string();
    std::fs::write(&path, b"precious").unwrap();
    let err = listen(&url, &key(), &Config::default()).err().unwrap();
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    std::fs::remove_file(&path).unwrap();
    let live = listen(&url, &key(), &Config::default()).unwrap();
    assert!(listen(&url, &key(), &Config::default()).err().unwrap().to_string().contains("in use"));
    drop(live);
    // A stale socket left by a dead listener is replaced.
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale);
    still_serves(&listen(&url, &key(), &Config::default()).unwrap());
}

/// UCX, once loaded, interposes libc's memory calls to keep its registration cache right,
/// and its `mremap` drops the target address that shm's evacuation passes: in a process that
/// had made a ucx connection, held shm bodies were overwritten.
#[test]
fn shm_held_bodies_survive_in_a_process_that_loaded_ucx() {
    still_serves(&listen(&fresh_url("ucx"), &key(), &Config::default()).unwrap());
    held_bodies_never_stall_the_sender("shm");
}

/// A shm receiver keeping five rings' worth: the ring moves to its other area while the views
/// stay, past the last area they are copied out, and the areas freed when they are dropped
/// serve the next round. Everything arrives and stays intact, round after round, both ways.
#[test]
fn shm_bodies_held_past_every_area_stay_intact_round_after_round() {
    let config = Config { shm_ring_bytes: 8 << 20, shm_ring_areas: 2, ..Config::default() };
    let (_l, c, s) = pair_with("shm", &config);
    for _ in 0..3 {
        drop(receive_all_and_keep(&c, &s, 40, 1 << 20));
        drop(receive_all_and_keep(&s, &c, 40, 1 << 20));
    }
    let bad = Config { shm_ring_areas: 65, ..Config::default() };
    assert!(matches!(listen(&fresh_url("shm"), &key(), &bad), Err(Error::Limit(_))));
}

/// The areas a shm receiver filled with views it kept stay for reuse while it works, and go
/// back to the kernel once they have been free for a while (10 s).
#[test]
fn shm_areas_left_idle_give_their_memory_back() {
    let config = Config { shm_ring_bytes: 8 << 20, ..Config::default() };
    let (_l, c, s) = pair_with("shm", &config);
    let held = receive_all_and_keep(&c, &s, 40, 1 << 20);
    let at = held[0].body.chunks()[0].as_ptr() as usize;
    let used = memfd_bytes_at(at);
    assert!(used >= 40 << 20, "{used} bytes hold 40 MiB of views");
    drop(held);
    std::thread::sleep(Duration::from_secs(13));
    let left = memfd_bytes_at(at);
    assert!(left < used / 2, "{left} of {used} bytes still held after the areas idled");
}

/// Bodies too big to lend (over a quarter of the ring) are gathered on the heap; once the
/// reader drops one, the next reuses its memory. Each arrives intact and a held one is never
/// reused, whatever the sizes that follow.
#[test]
fn shm_gathered_bodies_reuse_memory_the_reader_dropped() {
    let config = Config { shm_ring_bytes: 8 << 20, ..Config::default() };
    let (_l, c, s) = pair_with("shm", &config);
    let sizes = [3 << 20, 3 << 20, (3 << 20) - 5, 5 << 20, (2 << 20) + 1, 1 << 20];
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let st = c.open_stream().unwrap();
            for (i, &n) in sizes.iter().enumerate() {
                st.send(&[], &[&pattern(i as u64, n)]).unwrap();
            }
            st.finish().unwrap();
        });
        let st = s.accept_stream().unwrap();
        let next = |i: usize| {
            let m = st.recv().unwrap().unwrap();
            assert!(m.body.to_vec() == pattern(i as u64, sizes[i]), "body {i} differs");
            m
        };
        let at = |m: &Message| m.body.chunks()[0].as_ptr();
        let (first, second) = (next(0), next(1));
        assert_ne!(at(&first), at(&second), "a held body's memory is not reused");
        let kept = at(&first);
        drop((first, second));
        let third = next(2);
        assert_eq!(at(&third), kept, "the body dropped first is reused");
        drop(third);
        drop(next(3)); // bigger: the spare grows
        drop(next(4)); // under half of that: a fresh buffer
        drop(next(5)); // lent from the ring
        assert!(st.recv().unwrap().is_none());
    });
}

/// Memory the memfd mapped at `addr` holds, from its allocated blocks.
fn memfd_bytes_at(addr: usize) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let inode: u64 = maps
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (lo, hi) = fields[0].split_once('-')?;
            let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
            (lo <= addr && addr < hi).then(|| fields[4].parse().unwrap())
        })
        .unwrap();
    let fds = std::fs::read_dir("/proc/self/fd").unwrap();
    let memfd = fds.filter_map(|e| std::fs::metadata(e.ok()?.path()).ok()).find(|m| m.ino() == inode).unwrap();
    memfd.blocks() * 512
}

/// tcp and ucx listen on TCP ports alike. A client asking one for the other's fabric learns
/// so after the key is proven, before anything fabric-specific (a UCX address) is read.
#[test]
fn a_client_of_another_fabric_is_refused_and_the_listener_serves_on() {
    for (listening, asking) in [("tcp", "ucx"), ("ucx", "tcp")] {
        let l = listen(&fresh_url(listening), &key(), &Config::default()).unwrap();
        let port = l.url().rsplit(':').next().unwrap();
        let err = connect(&format!("{asking}://127.0.0.1:{port}"), &key(), &Config::default()).err().unwrap();
        assert!(matches!(err, Error::WrongFabric { .. }), "{asking} client of a {listening} listener: {err}");
        let refused = expect_rejected(&l);
        assert!(refused.to_string().contains("same transport"), "{refused}");
        still_serves(&l);
    }
}

/// Data-phase bad input needs a raw authenticated client; over TCP we can be one.
#[test]
fn tcp_oversized_frame_after_auth_fails_the_connection_only() {
    let l = listen(&fresh_url("tcp"), &key(), &Config::default()).unwrap();
    let mut s = TcpStream::connect(l.url().trim_start_matches("tcp://")).unwrap();
    let (mut hs, hello) = Handshake::client(
        key().as_bytes(),
        Params { fabric: Fabric::Tcp, max_streams: 8, stream_window: 1 << 20 },
        [3; 32],
    );
    s.write_all(&hello).unwrap();
    while !hs.is_done() {
        let mut head = [0u8; HEADER_LEN];
        s.read_exact(&mut head).unwrap();
        let h = FrameHeader::decode(&head, &Limits::default()).unwrap();
        let mut meta = vec![0; h.meta_len as usize];
        s.read_exact(&mut meta).unwrap();
        let p = hs.on_frame(&h, &meta).unwrap();
        s.write_all(&p.send).unwrap();
    }
    let conn = l.accept().unwrap();
    let mut h = FrameHeader::new(Kind::Message, 1);
    h.meta_len = u32::MAX;
    s.write_all(&h.encode()).unwrap();
    let err = conn.accept_stream().err().unwrap();
    assert!(matches!(err, Error::Frame(_)), "{err}");
    assert_eq!(read_error_code(&mut s), Some(ErrorCode::PROTOCOL.0));
    still_serves(&l);
}
