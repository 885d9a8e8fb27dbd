//! One-sided access: regions exposed and lent, puts and gets, and a put outside any region.

use super::*;

/// The server sends `region`'s descriptor over a stream the client opens: the client's end of
/// it, the server's, and the region as the client reaches it.
fn hand_over(c: &Connection, s: &Connection, region: &Region) -> (Stream, Stream, RemoteRegion) {
    let control = c.open_stream().unwrap();
    control.send(b"hello", &[]).unwrap();
    let served = s.accept_stream().unwrap();
    served.recv().unwrap().unwrap();
    served.send(region.descriptor(), &[]).unwrap();
    let remote = c.remote_region(&control.recv().unwrap().unwrap().header).unwrap();
    (control, served, remote)
}

/// The server exposes a region and sends its descriptor; the client puts into it (more than
/// one frame's worth), then gets back what the server wrote. Ordering: bytes put before a
/// message are there when the message arrives.
pub fn one_sided_put_and_get(scheme: &str) {
    const LEN: usize = (5 << 20) / 2 + 4099;
    let (_l, c, s) = pair(scheme);
    let region = s.register(LEN).unwrap();
    assert_eq!(region.len(), LEN);
    let (control, served, remote) = hand_over(&c, &s, &region);
    assert_eq!(remote.len(), LEN as u64);
    let data = pattern(9, LEN - 1000);
    c.put(&remote, 1000, &data).unwrap();
    c.put(&remote, 0, b"head").unwrap();
    // Out of bounds: refused locally, nothing is sent.
    assert!(matches!(c.put(&remote, LEN as u64 - 1, b"xy"), Err(Error::Limit(_))));
    assert!(matches!(c.get(&remote, u64::MAX, &mut [0; 2]), Err(Error::Limit(_))));
    control.send(b"put done", &[]).unwrap();

    assert_eq!(served.recv().unwrap().unwrap().header, b"put done");
    let mut back = vec![0; LEN];
    region.read(0, &mut back).unwrap();
    assert_eq!(&back[..4], b"head");
    assert_eq!(&back[1000..], &data[..], "put bytes on {scheme}");
    let written = pattern(10, 300_000);
    region.write(LEN as u64 - written.len() as u64, &written).unwrap();
    served.send(b"wrote", &[]).unwrap();

    assert_eq!(control.recv().unwrap().unwrap().header, b"wrote");
    // The server thread reads nothing now, yet gets are answered: natively, or by the
    // server's reader once it waits for the next message.
    std::thread::scope(|scope| {
        scope.spawn(|| assert!(served.recv().unwrap().is_none()));
        let mut got = vec![0; written.len()];
        c.get(&remote, (LEN - written.len()) as u64, &mut got).unwrap();
        assert_eq!(got, written, "get bytes on {scheme}");
        control.finish().unwrap();
    });
    assert!(c.remote_region(b"not a descriptor").is_err());
}

/// Two connections from one process, each to a server that answers every message, take 500
/// one-sided writes of 64 KiB in turns, each followed by a message and its answer (as an
/// input's put, status and acknowledgement in timeslice building): every write lands before
/// the message after it, on both.
pub fn one_sided_writes_in_turns_over_two_connections(scheme: &str) {
    const LEN: usize = 64 << 10;
    const ROUNDS: u64 = 500;
    let (pairs, regions): (Vec<_>, Vec<_>) = (0..2)
        .map(|_| {
            let (l, c, s) = pair(scheme);
            let region = s.register(LEN).unwrap();
            ((l, c, s), region)
        })
        .unzip();
    let handed: Vec<_> = pairs.iter().zip(&regions).map(|((_, c, s), r)| hand_over(c, s, r)).collect();
    std::thread::scope(|scope| {
        for ((_, served, _), region) in handed.iter().zip(&regions) {
            scope.spawn(move || {
                while let Some(m) = served.recv().unwrap() {
                    let i = u64::from_le_bytes(m.header[..].try_into().unwrap());
                    let mut back = vec![0; LEN];
                    region.read(0, &mut back).unwrap();
                    assert!(back == pattern(i, LEN), "write {i} landed before its message");
                    served.send(&m.header, &[]).unwrap();
                }
            });
        }
        for i in 0..ROUNDS {
            let ((_, c, _), (control, _, remote)) = (&pairs[(i % 2) as usize], &handed[(i % 2) as usize]);
            c.put(remote, 0, &pattern(i, LEN)).unwrap();
            control.send(&i.to_le_bytes(), &[]).unwrap();
            assert_eq!(control.recv().unwrap().unwrap().header, i.to_le_bytes());
        }
        for (control, _, _) in &handed {
            control.finish().unwrap();
        }
    });
}

/// Memory the owner maps from a shared-memory file of its own (at an offset past a first
/// page) is lent to the peer, which puts into it: the bytes land in the file, where a third
/// mapping of it sees them.
pub fn one_sided_put_into_lent_memory(scheme: &str) {
    use std::os::fd::OwnedFd;
    use std::sync::Arc;
    const LEN: usize = 1 << 20;
    const AT: usize = 4096;
    let (_l, c, s) = pair(scheme);
    let file = nix::sys::memfd::memfd_create("lent", nix::sys::memfd::MFdFlags::empty()).unwrap();
    nix::unistd::ftruncate(&file, (AT + LEN) as i64).unwrap();
    let file: Arc<OwnedFd> = Arc::new(file);
    let map = |offset: usize, len: usize| {
        let len = std::num::NonZeroUsize::new(len).unwrap();
        let prot = nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE;
        // SAFETY: a fresh shared mapping of a file this test holds, unmapped never (a test).
        unsafe { nix::sys::mman::mmap(None, len, prot, nix::sys::mman::MapFlags::MAP_SHARED, &*file, offset as i64) }
            .unwrap()
            .cast::<u8>()
    };
    let ptr = map(AT, LEN);
    let lent = wirespeed::LentMemory { ptr, len: LEN, file: file.clone(), offset: AT as u64, keep: Box::new(()) };
    // SAFETY: the mapping above stays for the whole test.
    let region = unsafe { s.lend(lent) }.unwrap();
    let (control, served, remote) = hand_over(&c, &s, &region);
    assert_eq!(remote.len(), LEN as u64);
    let data = pattern(11, LEN - 10);
    c.put(&remote, 10, &data).unwrap();
    assert!(matches!(c.put(&remote, LEN as u64 - 1, b"xy"), Err(Error::Limit(_))));
    control.send(b"put done", &[]).unwrap();
    assert_eq!(served.recv().unwrap().unwrap().header, b"put done");
    let whole = map(0, AT + LEN);
    // SAFETY: the mapping is AT + LEN bytes; the put is done (ordered by the message).
    let seen = unsafe { std::slice::from_raw_parts(whole.as_ptr().add(AT + 10), LEN - 10) };
    assert_eq!(seen, &data[..], "lent bytes on {scheme}");
}

/// A put into a region the owner never exposed (or already dropped) fails that connection
/// with a protocol error on both sides; the listener serves others.
pub fn put_into_an_unexposed_region_fails_the_connection(scheme: &str) {
    let (l, c, s) = pair(scheme);
    let forged = wirespeed::proto::rma::Descriptor { id: 999, len: 64, native: Vec::new() }.encode();
    let remote = c.remote_region(&forged).unwrap();
    let _ = c.put(&remote, 0, b"intruder");
    match s.accept_stream_timeout(Duration::from_secs(10)) {
        Err(Error::PeerMisbehaved(Violation::UnknownRegion(999))) => {}
        other => panic!("expected a protocol error, got {:?}", other.map(|st| st.id())),
    }
    // Every later call on the failed connection reports the same typed violation.
    assert!(matches!(s.open_stream().map(|st| st.id()), Err(Error::PeerMisbehaved(Violation::UnknownRegion(999)))));
    let st = c.open_stream().and_then(|st| st.send(b"x", &[]).and_then(|_| st.recv()));
    match st {
        Err(Error::Remote { code, .. }) => assert_eq!(code, ErrorCode::PROTOCOL),
        Err(Error::ConnectionLost(_)) => {} // the owner's hang-up can overtake its Error frame
        other => panic!("expected the peer's error, got {:?}", other.map(|m| m.is_some())),
    }
    if let Some(l) = &l {
        still_serves(l);
    }
}
