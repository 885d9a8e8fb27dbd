//! The receive half of the connection's state: messages put back in order, frames whole, in
//! pieces or by rendezvous (reading the body from the sender's memory into a buffer of our
//! own, no further ahead of the reader than the window allows), and arrivals handed over in
//! order once complete.

use super::*;

impl Core {
    /// Takes the oldest arrival if it is complete: header, meta and payload.
    pub(super) fn take_arrival(&mut self) -> Option<Result<(FrameHeader, Meta, Buf)>> {
        self.pull_deferred();
        let front = self.arrivals.front()?;
        if front.reads_left > 0 || front.deferred.is_some() {
            return None;
        }
        let a = self.arrivals.pop_front()?;
        self.held -= a.held_bytes();
        self.arrivals_held -= usize::from(a.held_bytes() > 0);
        let payload_len = a.header.payload_len() as usize;
        let (meta, payload) = match a.buf {
            None => (a.meta, a.copied),
            Some(buf) => {
                let meta = if a.data_meta > 0 { buf.as_slice(a.pad, a.data_meta).into() } else { a.meta };
                let payload = if payload_len > 0 { buf.lend(a.pad + a.data_meta, payload_len) } else { Buf::empty() };
                (meta, payload)
            }
        };
        Some(Ok((a.header, meta, payload)))
    }

    /// Handles a received message in its turn, and any that arrived early waiting for it.
    /// Only a message that comes early is copied, to wait for its turn.
    pub(super) fn arrive_in_order(&mut self, msg: &[u8]) -> Result<()> {
        let seq = wire::seq(msg).ok_or(Violation::Malformed("libfabric message"))?;
        if seq != self.received {
            if self.early.len() >= MAX_EARLY || seq.wrapping_sub(self.received) > MAX_EARLY as u32 {
                return Err(Violation::Malformed("libfabric message number").into());
            }
            self.early.insert(seq, msg.to_vec());
            return Ok(());
        }
        self.arrive(msg)?;
        self.received = self.received.wrapping_add(1);
        while let Some(next) = self.early.remove(&self.received) {
            self.arrive(&next)?;
            self.received = self.received.wrapping_add(1);
        }
        Ok(())
    }

    /// Handles a frame that came whole.
    fn arrive_frame(&mut self, bytes: &[u8]) -> Result<()> {
        let (fixed, rest) = bytes.split_first_chunk::<HEADER_LEN>().ok_or(FrameError::Malformed("frame"))?;
        let header = self.decode_header(fixed)?;
        let meta_len = header.meta_len as usize;
        if rest.len() as u64 != meta_len as u64 + header.payload_len() {
            return Err(FrameError::Malformed("libfabric frame length").into());
        }
        let (meta, payload) = rest.split_at(meta_len);
        // A small body is copied to a heap buffer of its size: a page from the pool for each
        // would fault in a page per message while the reader is behind.
        let copied = if payload.is_empty() { Buf::empty() } else { Buf::from(payload.to_vec()) };
        self.held += payload.len();
        self.arrivals_held += usize::from(!payload.is_empty());
        let id = self.new_id();
        self.arrivals.push_back(Arrival {
            id,
            header,
            meta: meta.into(),
            data_meta: 0,
            pad: 0,
            buf: None,
            copied,
            local: None,
            reads_left: 0,
            posted: 0,
            token: 0,
            deferred: None,
        });
        Ok(())
    }

    /// Handles one received message.
    fn arrive(&mut self, msg: &[u8]) -> Result<()> {
        match wire::decode(msg)? {
            Msg::Frame(bytes) => self.arrive_frame(bytes)?,
            Msg::Batch(frames) => {
                for frame in frames {
                    self.arrive_frame(frame)?;
                }
            }
            Msg::Rendezvous { token, segments, header, meta } => {
                if !self.ep.abilities.rma {
                    return Err(Violation::Malformed("rendezvous without one-sided access").into());
                }
                let header = self.decode_header(header)?;
                let meta_len = header.meta_len as usize;
                let data_meta = match meta {
                    Some(m) if m.len() == meta_len => 0,
                    Some(_) => return Err(FrameError::Malformed("rendezvous meta").into()),
                    None => meta_len,
                };
                let remote: u64 = segments.iter().try_fold(0u64, |t, s| t.checked_add(s.len)).unwrap_or(u64::MAX);
                if remote != data_meta as u64 + header.payload_len() || segments.iter().any(|s| s.len == 0) {
                    return Err(FrameError::Malformed("rendezvous segments").into());
                }
                let pad = (PAYLOAD_ALIGN - data_meta % PAYLOAD_ALIGN) % PAYLOAD_ALIGN;
                let id = self.new_id();
                self.arrivals.push_back(Arrival {
                    id,
                    header,
                    meta: meta.unwrap_or_default().into(),
                    data_meta,
                    pad,
                    buf: None,
                    copied: Buf::empty(),
                    local: None,
                    reads_left: 0,
                    posted: 0,
                    token,
                    deferred: Some(segments),
                });
                self.to_pull.push_back(id);
                self.pull_deferred();
            }
            Msg::Done(token) => match self.pending.get_mut(&token) {
                Some(p) if !p.waited => self.forget(token),
                Some(p) => p.done = true,
                // One we abandoned after a timeout; tokens never issued are a lie.
                None if token < self.next_token => {}
                None => return Err(Violation::Malformed("Done for an unknown rendezvous").into()),
            },
            Msg::First { total, bytes } => {
                if self.assembly.is_some() {
                    return Err(Violation::Malformed("a frame's first piece inside another frame").into());
                }
                let fixed = bytes.first_chunk::<HEADER_LEN>().ok_or(FrameError::Malformed("first piece"))?;
                let header = self.decode_header(fixed)?;
                let head = HEADER_LEN + header.meta_len as usize;
                if total != head as u64 + header.payload_len() {
                    return Err(FrameError::Malformed("pieced frame length").into());
                }
                let pad = (PAYLOAD_ALIGN - head % PAYLOAD_ALIGN) % PAYLOAD_ALIGN;
                let mut buf = self.pool.take(pad + total as usize)?;
                // SAFETY: `bytes` is shorter than `total` (decode checked), which fits.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_mut_ptr().add(pad), bytes.len()) };
                self.assembly = Some(Assembly { buf, pad, filled: bytes.len(), total: total as usize, header });
            }
            Msg::More(bytes) => {
                let a = self.assembly.as_mut().ok_or(Violation::Malformed("a piece outside any frame"))?;
                if a.filled + bytes.len() > a.total {
                    return Err(Violation::Malformed("more pieces than the frame's length").into());
                }
                // SAFETY: in bounds (checked above).
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), a.buf.as_mut_ptr().add(a.pad + a.filled), bytes.len())
                };
                a.filled += bytes.len();
                if a.filled == a.total {
                    let a = self.assembly.take().expect("assembling");
                    let id = self.new_id();
                    let meta_len = a.header.meta_len as usize;
                    self.held += a.pad + a.total;
                    self.arrivals_held += 1;
                    self.arrivals.push_back(Arrival {
                        id,
                        header: a.header,
                        meta: Meta::new(),
                        data_meta: meta_len,
                        // The header is skipped: meta and payload follow it.
                        pad: a.pad + HEADER_LEN,
                        buf: Some(a.buf),
                        copied: Buf::empty(),
                        local: None,
                        reads_left: 0,
                        posted: 0,
                        token: 0,
                        deferred: None,
                    });
                }
            }
        }
        Ok(())
    }

    fn decode_header(&self, fixed: &[u8; HEADER_LEN]) -> Result<FrameHeader> {
        let h = FrameHeader::decode(fixed, &self.limits)?;
        if h.flags != 0 {
            return Err(FrameError::Reserved.into()); // flags belong to rings
        }
        Ok(h)
    }

    /// Starts reading deferred rendezvous bodies, oldest first, while they fit the window;
    /// the oldest always may.
    pub(super) fn pull_deferred(&mut self) {
        if let Err(e) = self.try_pull_deferred() {
            self.fail(e);
        }
    }

    fn try_pull_deferred(&mut self) -> Result<()> {
        while let Some(&id) = self.to_pull.front() {
            let Some(i) = self.arrival_index(id) else {
                self.to_pull.pop_front();
                continue;
            };
            let a = &self.arrivals[i];
            if a.buf.is_none() {
                // Not started: it needs room in the window, and a buffer.
                let length = a.data_meta + a.header.payload_len() as usize;
                let full = self.arrivals_held >= RECV_AHEAD || self.held + a.pad + length > self.recv_window;
                if i > 0 && self.held > 0 && full {
                    break;
                }
                let mut buf = self.pool.take(a.pad + length)?;
                let local = match self.ep.abilities.mr_local {
                    // SAFETY: the buffer lives in the arrival until it is popped, after its reads.
                    true => Some(unsafe { self.ep.register(buf.as_mut_ptr(), a.pad + length, FI_READ as u64)? }),
                    false => None,
                };
                self.held += a.pad + length;
                self.arrivals_held += 1;
                let a = &mut self.arrivals[i];
                (a.buf, a.local, a.posted) = (Some(buf), local, 0);
            }
            if !self.post_reads(i)? {
                break; // the provider is busy: the rest go on a later pass
            }
            self.to_pull.pop_front();
        }
        Ok(())
    }

    /// Where arrival `id` is in `arrivals` (ids grow along it).
    fn arrival_index(&self, id: u64) -> Option<usize> {
        self.arrivals.binary_search_by_key(&id, |a| a.id).ok()
    }

    /// Posts the reads of arrival `i`'s segments not posted yet; false if the provider was busy
    /// before all were.
    fn post_reads(&mut self, i: usize) -> Result<bool> {
        let a = &mut self.arrivals[i];
        let (id, segments) = (a.id, a.deferred.take().expect("segments to read"));
        let desc = a.local.as_ref().map_or(std::ptr::null_mut(), |r| r.desc);
        let base = a.buf.as_mut().expect("a buffer").as_mut_ptr();
        let mut at = a.pad + segments[..a.posted].iter().map(|s| s.len as usize).sum::<usize>();
        let mut posted = a.posted;
        let mut outcome = Ok(true);
        for s in &segments[posted..] {
            let op = self.new_id();
            let mut ctx = Box::new(OpCtx { space: fi_context2::default(), id: op });
            let ctx_ptr: *mut OpCtx = &mut *ctx;
            // SAFETY: the buffer has room for every segment (their lengths were summed against
            // it) and stays in the arrival, like the context in `ops`, until the read completes.
            let started =
                unsafe { self.ep.rma(false, base.add(at), s.len as usize, desc, (s.addr, s.key), ctx_ptr.cast()) };
            match started {
                Ok(true) => {}
                Ok(false) => {
                    outcome = Ok(false);
                    break;
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
            self.ops.insert(op, (ctx, Op::Read { arrival: id }));
            posted += 1;
            at += s.len as usize;
        }
        let a = &mut self.arrivals[i];
        a.reads_left += posted - a.posted;
        a.posted = posted;
        if posted < segments.len() {
            a.deferred = Some(segments);
        }
        outcome
    }

    pub(super) fn read_done(&mut self, arrival: u64) {
        let Some(i) = self.arrival_index(arrival) else { return };
        let a = &mut self.arrivals[i];
        a.reads_left -= 1;
        if a.reads_left == 0 && a.deferred.is_none() {
            a.local = None;
            let token = a.token;
            self.queue(wire::done(token).to_vec());
        }
    }
}
