//! The send half of the connection's state: frames queued whole, batched or in pieces,
//! rendezvous sends until the peer's Done, and the outbox handed to the provider.

use super::*;

impl Core {
    /// Queues a frame to travel whole, or in pieces where it is larger than a receive buffer.
    pub(in crate::transport::ofi) fn queue_copied(&mut self, head: &[u8], payload: &[IoSlice<'_>]) -> Result<()> {
        self.usable()?;
        let total = head.len() + payload.iter().map(|s| s.len()).sum::<usize>();
        let parts = std::iter::once(head).chain(payload.iter().map(|s| &s[..]));
        if PREFIX_LEN + total <= RECV_BYTES {
            if let Some(last) = self.outbox.back_mut()
                && wire::batchable(last)
                && last.len() + wire::batch_cost(total) <= RECV_BYTES
            {
                let before = last.len();
                wire::batch_onto(last, total, parts);
                self.inflight_bytes += last.len() - before;
                return Ok(());
            }
            let mut msg = std::mem::take(&mut self.scratch);
            msg.clear();
            msg.extend_from_slice(&wire::frame_prefix());
            parts.for_each(|p| msg.extend_from_slice(p));
            if self.inject_now(&mut msg)? {
                self.scratch = msg;
                return Ok(());
            }
            self.queue(msg);
        } else {
            // Pieces of at most a receive buffer each, cut across the parts.
            let piece = RECV_BYTES - PREFIX_LEN;
            let mut msg = Vec::with_capacity(RECV_BYTES);
            msg.extend_from_slice(&wire::first_prefix(total as u64));
            for mut p in parts {
                while !p.is_empty() {
                    let n = p.len().min(PREFIX_LEN + piece - msg.len());
                    msg.extend_from_slice(&p[..n]);
                    p = &p[n..];
                    if msg.len() == PREFIX_LEN + piece {
                        self.queue(std::mem::replace(&mut msg, Vec::with_capacity(RECV_BYTES)));
                        msg.extend_from_slice(&wire::more_prefix());
                    }
                }
            }
            if msg.len() > PREFIX_LEN {
                self.queue(msg);
            }
        }
        self.flush();
        Ok(())
    }

    /// Sends a small message at once, where nothing waits before it and the provider takes it
    /// without a completion; false if it must be queued.
    fn inject_now(&mut self, msg: &mut [u8]) -> Result<bool> {
        if !self.outbox.is_empty() || msg.len() > self.ep.abilities.inject_size {
            return Ok(false);
        }
        wire::set_seq(msg, self.sent);
        let sent = self.ep.inject(msg).inspect_err(|e| self.fail(e.clone()))?;
        if sent {
            self.sent = self.sent.wrapping_add(1);
        }
        Ok(sent)
    }

    pub(super) fn queue(&mut self, mut msg: Vec<u8>) {
        wire::set_seq(&mut msg, self.sent);
        self.sent = self.sent.wrapping_add(1);
        self.inflight_bytes += msg.len();
        self.outbox.push_back(msg);
    }

    /// Starts a rendezvous send: registers the meta (when it does not fit the message) and
    /// the payload where they lie, and tells the peer where to read them. Returns the token
    /// the peer's Done will name. `owned` keeps the bytes alive until then; without it the
    /// caller waits for `finished(token)`.
    ///
    /// # Safety
    /// Unless `owned` holds them, the payload's bytes stay valid until `finished(token)` or
    /// `abandon(token)`.
    pub(in crate::transport::ofi) unsafe fn start_rendezvous(
        &mut self,
        head: &[u8],
        payload: &[IoSlice<'_>],
        owned: Option<Vec<Bytes>>,
    ) -> Result<u64> {
        let waited = owned.is_none();
        self.usable()?;
        let (header, meta) = head.split_at(HEADER_LEN);
        let inline_room = RECV_BYTES - PREFIX_LEN - MAX_SEGMENTS * SEGMENT_LEN - HEADER_LEN;
        let meta_inline = meta.len() <= inline_room;
        let gathered: Bytes;
        let mut parts: SmallVec<[&[u8]; 4]> = SmallVec::new();
        if !meta_inline {
            parts.push(meta);
        }
        parts.extend(payload.iter().map(|s| &s[..]).filter(|s| !s.is_empty()));
        let mut owned = owned.unwrap_or_default();
        if parts.len() > MAX_SEGMENTS {
            // More slices than a message names: gather them into one buffer we own.
            gathered = Bytes::from(parts.concat());
            owned.push(gathered.clone());
            parts = SmallVec::from_slice(&[&gathered[..]]);
        }
        let mut registrations = Vec::with_capacity(parts.len());
        let mut segments = Vec::with_capacity(parts.len());
        for p in &parts {
            // SAFETY: the caller keeps the bytes valid until Done or abandon drops this.
            let r = unsafe { self.ep.register(p.as_ptr(), p.len(), FI_REMOTE_READ as u64)? };
            segments.push(Segment { addr: r.addr, key: r.key, len: p.len() as u64 });
            registrations.push(r);
        }
        let token = self.next_token;
        self.next_token += 1;
        let msg = wire::rendezvous(token, &segments, header, meta_inline.then_some(meta));
        let bytes = if waited { 0 } else { parts.iter().map(|p| p.len()).sum() };
        self.inflight_bytes += bytes;
        self.pending
            .insert(token, Pending { _registrations: registrations, _owned: owned, bytes, waited, done: false });
        self.queue(msg);
        self.flush();
        Ok(token)
    }

    /// Whether the peer has read the rendezvous body of `token`; forgets it if so.
    pub(in crate::transport::ofi) fn finished(&mut self, token: u64) -> bool {
        let done = self.pending.get(&token).is_some_and(|p| p.done);
        if done {
            self.forget(token);
        }
        done
    }

    /// Revokes the peer's access to a rendezvous body its caller gave up waiting for.
    pub(in crate::transport::ofi) fn abandon(&mut self, token: u64) {
        self.forget(token);
    }

    pub(super) fn forget(&mut self, token: u64) {
        if let Some(p) = self.pending.remove(&token) {
            self.inflight_bytes -= p.bytes;
        }
    }

    /// Hands queued messages to the provider until it is busy or has `SENDS_IN_FLIGHT`.
    pub(super) fn flush(&mut self) {
        while let Some(msg) = self.outbox.front() {
            let len = msg.len();
            let injected = len <= self.ep.abilities.inject_size;
            if !injected && self.sends_in_flight >= SENDS_IN_FLIGHT {
                break;
            }
            let posted = if injected {
                self.ep.inject(msg).map(|ok| ok.then_some(None))
            } else {
                let id = self.new_id();
                let mut ctx = Box::new(OpCtx { space: fi_context2::default(), id });
                let ctx_ptr: *mut OpCtx = &mut *ctx;
                let iov = [libc::iovec { iov_base: self.outbox[0].as_ptr() as *mut c_void, iov_len: len }];
                let mut desc = [std::ptr::null_mut()];
                // SAFETY: the message moves into `ops` with its context (a Vec's heap bytes
                // do not move with it) and stays there until its completion.
                unsafe { self.ep.send(&iov, &mut desc, ctx_ptr.cast()) }.map(|ok| ok.then_some(Some(ctx)))
            };
            match posted {
                Ok(None) => break, // busy
                Ok(Some(ctx)) => {
                    let msg = self.outbox.pop_front().expect("the front");
                    match ctx {
                        None => self.inflight_bytes -= len, // injected: done already
                        Some(ctx) => {
                            self.sends_in_flight += 1;
                            self.ops.insert(ctx.id, (ctx, Op::Send { _msg: msg }));
                        }
                    }
                }
                Err(e) => {
                    self.fail(e);
                    break;
                }
            }
        }
    }
}
