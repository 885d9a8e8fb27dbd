//! FLESnet's item distribution, sans-IO: which consumer ("worker") gets which timeslice
//! ("item"), and when an item is done. Messages and time in, actions out; the driver
//! (`publisher`) moves the bytes.
//!
//! The rules are FLESnet's (`lib/shm_ipc`): a worker registers with
//! `REGISTER stride offset policy group name` and wants the items whose id n has
//! n mod stride = offset; it holds one item at a time and sends `COMPLETE id` when done; an
//! idle worker hears `HEARTBEAT` every second and answers it. Policy 0 queues every wanted item
//! while the worker is busy, 1 keeps only the newest, 2 skips them. Workers of one non-zero
//! group share the items: each goes to one of them. A worker that goes away gives its items
//! back; one that speaks out of turn hears `DISCONNECT`. An item is done once no worker holds
//! or queues it.
//!
//! FLESnet's worker is a ZeroMQ REQ socket: it takes one reply to each message it sends and
//! drops any other. So a worker hears something (an item, a heartbeat, the end) only when it
//! is owed a reply; an item that comes while its answer to our heartbeat is on the way waits
//! in its queue for that answer.
//!
//! One rule is ours: a worker that holds an item longer than the hold limit loses it, and its
//! registration, so that a stalled consumer never holds the builder; it hears `DISCONNECT`
//! when it next speaks, as FLESnet's workers do after a protocol error, and registers anew.
//! At the end of a run every waiting worker hears `DISCONNECT END`: FLESnet's workers read it
//! as DISCONNECT, ours as the end of the stream.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A worker's connection, as the driver numbers them.
pub type WorkerId = u64;
/// An item's id: the timeslice's position in this node's sequence.
pub type ItemId = u64;

/// How often a worker hears from the distributor when it has nothing else to say.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// What a worker wants when items come faster than it takes them (FLESnet's WorkerQueuePolicy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Every item, queued: none is skipped.
    QueueAll,
    /// The newest item only, held back for when the worker asks.
    PrebufferOne,
    /// Only items that come while the worker waits; the rest are skipped.
    Skip,
}

/// A worker's REGISTER message: which items it wants, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// It takes the items whose id modulo `stride` is `offset`.
    pub stride: u64,
    /// See `stride`.
    pub offset: u64,
    /// What it wants when it falls behind.
    pub policy: Policy,
    /// Workers of one group share items: each goes to one of them.
    pub group: u64,
    /// The worker's name, for reports.
    pub name: String,
}

impl Registration {
    /// `REGISTER stride offset policy group name`, as FLESnet's worker sends it.
    pub fn parse(text: &str) -> Option<Registration> {
        let mut w = text.strip_prefix("REGISTER ")?.splitn(5, ' ');
        let mut num = || w.next()?.parse::<u64>().ok();
        let (stride, offset, policy, group) = (num()?, num()?, num()?, num()?);
        let policy = match policy {
            0 => Policy::QueueAll,
            1 => Policy::PrebufferOne,
            2 => Policy::Skip,
            _ => return None,
        };
        let name = w.next().unwrap_or_default().to_string();
        (stride > 0).then_some(Registration { stride, offset, policy, group, name })
    }

    /// The REGISTER message's text, as a worker sends it.
    pub fn message(&self) -> String {
        let policy = self.policy as u8;
        format!("REGISTER {} {} {policy} {} {}", self.stride, self.offset, self.group, self.name)
    }

    fn wants(&self, id: ItemId) -> bool {
        id % self.stride == self.offset
    }
}

/// What the driver does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send the worker a message of these parts.
    Send(WorkerId, Vec<Vec<u8>>),
    /// No worker holds or queues the item any more: its space may go back.
    Done(ItemId),
}

struct Worker {
    reg: Registration,
    /// The item it holds, and since when.
    holding: Option<(ItemId, Instant)>,
    queue: VecDeque<ItemId>,
    last_heard_from_us: Instant,
    /// It sent a message we have not answered: we may send it one.
    owed: bool,
}

impl Worker {
    /// Whether it may be handed an item now.
    fn free(&self) -> bool {
        self.holding.is_none() && self.owed
    }
}

/// The distributor's state.
pub struct Distributor {
    workers: BTreeMap<WorkerId, Worker>,
    /// Each live item's payload and how many workers hold or queue it.
    items: HashMap<ItemId, (Vec<u8>, usize)>,
    actions: VecDeque<Action>,
    hold_limit: Duration,
    ending: bool,
}

impl Distributor {
    /// A distributor that takes an item back from a worker holding it longer than `hold_limit`.
    pub fn new(hold_limit: Duration) -> Self {
        Distributor {
            workers: BTreeMap::new(),
            items: HashMap::new(),
            actions: VecDeque::new(),
            hold_limit,
            ending: false,
        }
    }

    /// The next thing the driver must do (send a message, release an item), if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Items not yet done.
    pub fn live_items(&self) -> usize {
        self.items.len()
    }

    /// The workers registered now, and what each asked for.
    pub fn workers(&self) -> impl Iterator<Item = (WorkerId, &Registration)> {
        self.workers.iter().map(|(&id, w)| (id, &w.reg))
    }

    /// A new item. It is done at once if no worker wants it.
    pub fn on_item(&mut self, id: ItemId, payload: Vec<u8>, now: Instant) {
        self.items.insert(id, (payload, 0));
        let mut served_groups = Vec::new();
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for w in ids {
            let worker = &self.workers[&w];
            let group = worker.reg.group;
            if !worker.reg.wants(id) || (group != 0 && served_groups.contains(&group)) {
                continue;
            }
            if worker.reg.policy == Policy::PrebufferOne {
                self.clear_queue(w);
            }
            let worker = self.workers.get_mut(&w).expect("listed above");
            if worker.free() {
                if group != 0 {
                    served_groups.push(group);
                    self.unqueue_from_group(group, w, id);
                }
                self.hand(w, id, now);
            } else if worker.reg.policy != Policy::Skip {
                worker.queue.push_back(id);
                self.items.get_mut(&id).expect("inserted above").1 += 1;
            }
        }
        self.release_if_unheld(id);
    }

    /// A message from worker connection `w`.
    pub fn on_message(&mut self, w: WorkerId, parts: &[Vec<u8>], now: Instant) {
        let text = match parts {
            [one] => String::from_utf8_lossy(one),
            _ => return self.refuse(w),
        };
        if let Some(reg) = Registration::parse(&text) {
            self.on_gone(w);
            let worker = Worker { reg, holding: None, queue: VecDeque::new(), last_heard_from_us: now, owed: true };
            self.workers.insert(w, worker);
            // FLESnet answers a registration with the next item, or a heartbeat a second on.
            if self.ending {
                self.say_end(w);
            }
        } else if let Some(id) = text.strip_prefix("COMPLETE ").and_then(|n| n.trim().parse::<ItemId>().ok()) {
            let Some(worker) = self.workers.get_mut(&w) else { return self.refuse(w) };
            if worker.holding.map(|(held, _)| held) != Some(id) {
                return self.refuse(w);
            }
            worker.holding = None;
            worker.last_heard_from_us = now;
            worker.owed = true;
            self.drop_reference(id);
            self.next_for(w, now);
        } else if let Some(worker) = self.workers.get_mut(&w).filter(|_| text.starts_with("HEARTBEAT")) {
            // An answer to ours: what came meanwhile goes now, else the next beat a second on.
            worker.owed = true;
            if worker.holding.is_none() && (!worker.queue.is_empty() || self.ending) {
                self.next_for(w, now);
            }
        } else {
            self.refuse(w);
        }
    }

    /// Worker connection `w` is gone: what it held or queued is given back.
    pub fn on_gone(&mut self, w: WorkerId) {
        if let Some(worker) = self.workers.remove(&w) {
            for id in worker.holding.map(|(id, _)| id).into_iter().chain(worker.queue) {
                self.drop_reference(id);
            }
        }
    }

    /// Heartbeats to idle workers, and the hold limit for busy ones.
    pub fn on_tick(&mut self, now: Instant) {
        let mut stalled = Vec::new();
        for (&w, worker) in &mut self.workers {
            match worker.holding {
                Some((_, since)) if now.duration_since(since) > self.hold_limit => stalled.push(w),
                Some(_) => {}
                None if worker.owed
                    && !self.ending
                    && now.duration_since(worker.last_heard_from_us) >= HEARTBEAT_EVERY =>
                {
                    worker.last_heard_from_us = now;
                    worker.owed = false;
                    self.actions.push_back(Action::Send(w, vec![b"HEARTBEAT".to_vec()]));
                }
                None => {}
            }
        }
        // It hears DISCONNECT when it next speaks, being a worker we no longer know.
        for w in stalled {
            self.on_gone(w);
        }
    }

    /// When the next tick is due.
    pub fn next_tick(&self, now: Instant) -> Instant {
        let hold = self.workers.values().filter_map(|w| w.holding.map(|(_, since)| since + self.hold_limit));
        let beat = self.workers.values().filter(|w| w.free()).map(|w| w.last_heard_from_us + HEARTBEAT_EVERY);
        hold.chain(beat).min().unwrap_or(now + HEARTBEAT_EVERY).max(now)
    }

    /// No more items come: idle workers hear the end now, busy ones once they are done.
    pub fn end(&mut self) {
        if std::mem::replace(&mut self.ending, true) {
            return; // told once
        }
        // Those waiting for our reply with nothing queued; the others once they speak.
        let idle = self.workers.iter().filter(|(_, w)| w.free() && w.queue.is_empty()).map(|(&w, _)| w);
        for w in idle.collect::<Vec<_>>() {
            self.say_end(w);
        }
    }

    fn say_end(&mut self, w: WorkerId) {
        if let Some(worker) = self.workers.get_mut(&w) {
            worker.owed = false;
        }
        self.actions.push_back(Action::Send(w, vec![b"DISCONNECT END".to_vec()]));
    }

    fn refuse(&mut self, w: WorkerId) {
        self.actions.push_back(Action::Send(w, vec![b"DISCONNECT".to_vec()]));
        self.on_gone(w);
    }

    /// Sends worker `w` item `id` (a reference it now holds).
    fn hand(&mut self, w: WorkerId, id: ItemId, now: Instant) {
        let Some((payload, refs)) = self.items.get_mut(&id) else { return };
        *refs += 1;
        let message = vec![format!("WORK_ITEM {id}").into_bytes(), payload.clone()];
        let worker = self.workers.get_mut(&w).expect("a known worker");
        worker.holding = Some((id, now));
        worker.last_heard_from_us = now;
        worker.owed = false;
        self.actions.push_back(Action::Send(w, message));
    }

    /// After a completion: the worker's next queued item, or the end.
    fn next_for(&mut self, w: WorkerId, now: Instant) {
        let Some(worker) = self.workers.get_mut(&w) else { return };
        let Some(id) = worker.queue.pop_front() else {
            if self.ending {
                self.say_end(w);
            }
            return;
        };
        let group = worker.reg.group;
        // Handing it over turns the queued reference into a held one.
        self.drop_reference_only(id);
        if group != 0 {
            self.unqueue_from_group(group, w, id);
        }
        self.hand(w, id, now);
    }

    fn clear_queue(&mut self, w: WorkerId) {
        let queued = std::mem::take(&mut self.workers.get_mut(&w).expect("a known worker").queue);
        for id in queued {
            self.drop_reference(id);
        }
    }

    /// Item `id` leaves the queues of the other workers of `group`, now that `w` takes it.
    fn unqueue_from_group(&mut self, group: u64, w: WorkerId, id: ItemId) {
        let mut removed = 0;
        for (&other, worker) in &mut self.workers {
            if other != w && worker.reg.group == group {
                let before = worker.queue.len();
                worker.queue.retain(|&q| q != id);
                removed += before - worker.queue.len();
            }
        }
        for _ in 0..removed {
            self.drop_reference_only(id);
        }
    }

    fn drop_reference_only(&mut self, id: ItemId) {
        if let Some((_, refs)) = self.items.get_mut(&id) {
            *refs = refs.saturating_sub(1);
        }
    }

    fn drop_reference(&mut self, id: ItemId) {
        self.drop_reference_only(id);
        self.release_if_unheld(id);
    }

    fn release_if_unheld(&mut self, id: ItemId) {
        if self.items.get(&id).is_some_and(|(_, refs)| *refs == 0) {
            self.items.remove(&id);
            self.actions.push_back(Action::Done(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(d: &mut Distributor) -> Vec<Action> {
        std::iter::from_fn(|| d.poll_action()).collect()
    }

    fn msg(s: &str) -> Vec<Vec<u8>> {
        vec![s.as_bytes().to_vec()]
    }

    fn item(id: ItemId) -> Vec<Vec<u8>> {
        vec![format!("WORK_ITEM {id}").into_bytes(), vec![id as u8]]
    }

    #[test]
    fn registrations_parse_as_flesnet_writes_them() {
        let r = Registration::parse("REGISTER 2 1 1 7 tsclient 3").unwrap();
        assert_eq!(
            (r.stride, r.offset, r.policy, r.group, r.name.as_str()),
            (2, 1, Policy::PrebufferOne, 7, "tsclient 3")
        );
        assert_eq!(Registration::parse(&r.message()), Some(r));
        for bad in ["REGISTER 0 0 0 0 x", "REGISTER 1 0 9 0 x", "REGISTER 1 x 0 0 y", "REGISTER", "HELLO 1 0 0 0 x"] {
            assert_eq!(Registration::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn items_nobody_wants_are_done_at_once() {
        let t = Instant::now();
        let mut d = Distributor::new(Duration::from_secs(10));
        d.on_item(0, vec![0], t);
        d.on_message(1, &msg("REGISTER 2 1 0 0 odd"), t);
        d.on_item(2, vec![2], t);
        assert_eq!(drain(&mut d), [Action::Done(0), Action::Done(2)]);
        d.on_item(3, vec![3], t);
        assert_eq!(drain(&mut d), [Action::Send(1, item(3))]);
        assert_eq!(d.live_items(), 1);
    }

    #[test]
    fn a_busy_worker_queues_by_its_policy() {
        let t = Instant::now();
        let mut d = Distributor::new(Duration::from_secs(10));
        d.on_message(1, &msg("REGISTER 1 0 0 0 all"), t);
        d.on_message(2, &msg("REGISTER 1 0 1 0 newest"), t);
        d.on_message(3, &msg("REGISTER 1 0 2 0 skip"), t);
        for id in 0..3 {
            d.on_item(id, vec![id as u8], t);
        }
        // Each got item 0; the rest: all queued, the newest kept, skipped.
        let sent = drain(&mut d);
        assert_eq!(sent, [Action::Send(1, item(0)), Action::Send(2, item(0)), Action::Send(3, item(0))]);
        d.on_message(3, &msg("COMPLETE 0"), t);
        d.on_message(2, &msg("COMPLETE 0"), t);
        assert_eq!(drain(&mut d), [Action::Send(2, item(2))]);
        d.on_message(1, &msg("COMPLETE 0"), t);
        assert_eq!(drain(&mut d), [Action::Done(0), Action::Send(1, item(1))]);
        d.on_message(1, &msg("COMPLETE 1"), t);
        assert_eq!(drain(&mut d), [Action::Done(1), Action::Send(1, item(2))]);
        d.on_message(2, &msg("COMPLETE 2"), t);
        d.on_message(1, &msg("COMPLETE 2"), t);
        assert_eq!(drain(&mut d), [Action::Done(2)]);
    }

    #[test]
    fn a_group_shares_its_items() {
        let t = Instant::now();
        let mut d = Distributor::new(Duration::from_secs(10));
        d.on_message(1, &msg("REGISTER 1 0 0 5 a"), t);
        d.on_message(2, &msg("REGISTER 1 0 0 5 b"), t);
        d.on_item(0, vec![0], t);
        d.on_item(1, vec![1], t);
        d.on_item(2, vec![2], t);
        // 0 to a, 1 to b, 2 queued with both, then taken by whoever finishes first.
        assert_eq!(drain(&mut d), [Action::Send(1, item(0)), Action::Send(2, item(1))]);
        d.on_message(2, &msg("COMPLETE 1"), t);
        assert_eq!(drain(&mut d), [Action::Done(1), Action::Send(2, item(2))]);
        d.on_message(1, &msg("COMPLETE 0"), t);
        d.on_message(2, &msg("COMPLETE 2"), t);
        assert_eq!(drain(&mut d), [Action::Done(0), Action::Done(2)]);
        assert_eq!(d.live_items(), 0);
    }

    #[test]
    fn a_worker_that_goes_or_stalls_gives_its_items_back() {
        let t = Instant::now();
        let mut d = Distributor::new(Duration::from_secs(10));
        d.on_message(1, &msg("REGISTER 1 0 0 0 a"), t);
        d.on_item(0, vec![0], t);
        d.on_item(1, vec![1], t);
        drain(&mut d);
        d.on_gone(1);
        assert_eq!(drain(&mut d), [Action::Done(0), Action::Done(1)]);

        d.on_message(2, &msg("REGISTER 1 0 0 0 b"), t);
        d.on_item(2, vec![2], t);
        drain(&mut d);
        assert_eq!(d.next_tick(t), t + Duration::from_secs(10));
        d.on_tick(t + Duration::from_secs(9));
        assert_eq!(drain(&mut d), [], "slow is not stalled");
        d.on_tick(t + Duration::from_secs(11));
        assert_eq!(drain(&mut d), [Action::Done(2)]);
        // Its late completion is out of turn: it hears DISCONNECT and may register anew.
        d.on_message(2, &msg("COMPLETE 2"), t);
        assert_eq!(drain(&mut d), [Action::Send(2, msg("DISCONNECT"))]);
    }

    #[test]
    fn idle_workers_hear_heartbeats_and_the_end() {
        let t = Instant::now();
        let mut d = Distributor::new(Duration::from_secs(10));
        d.on_message(1, &msg("REGISTER 1 0 0 0 a"), t);
        d.on_message(2, &msg("REGISTER 1 0 0 0 b"), t);
        d.on_tick(t + Duration::from_millis(500));
        assert_eq!(drain(&mut d), []);
        d.on_tick(t + HEARTBEAT_EVERY);
        assert_eq!(drain(&mut d), [Action::Send(1, msg("HEARTBEAT")), Action::Send(2, msg("HEARTBEAT"))]);
        d.on_message(1, &msg("HEARTBEAT"), t);
        d.on_item(0, vec![0], t);
        drain(&mut d);
        d.end();
        assert_eq!(drain(&mut d), [], "both hold item 0");
        d.on_message(1, &msg("COMPLETE 0"), t);
        assert_eq!(drain(&mut d), [Action::Send(1, msg("DISCONNECT END"))]);
        d.end();
        assert_eq!(drain(&mut d), [], "the end is told once");
    }

    /// FLESnet's worker is a REQ socket: an item sent while its answer to our heartbeat is on
    /// the way would be dropped there, and the worker, holding nothing, would hear nothing more.
    #[test]
    fn a_worker_hears_one_reply_per_message() {
        let t = Instant::now();
        let mut d = Distributor::new(Duration::from_secs(10));
        d.on_message(1, &msg("REGISTER 1 0 0 0 a"), t);
        d.on_tick(t + HEARTBEAT_EVERY);
        assert_eq!(drain(&mut d), [Action::Send(1, msg("HEARTBEAT"))]);
        d.on_item(0, vec![0], t + HEARTBEAT_EVERY);
        d.on_item(1, vec![1], t + HEARTBEAT_EVERY);
        d.on_tick(t + 3 * HEARTBEAT_EVERY);
        assert_eq!(drain(&mut d), [], "nothing until it answers, not even a heartbeat");
        d.on_message(1, &msg("HEARTBEAT"), t + 3 * HEARTBEAT_EVERY);
        assert_eq!(drain(&mut d), [Action::Send(1, item(0))]);
        d.end();
        assert_eq!(drain(&mut d), [], "it holds 0 and has 1 queued");
        d.on_message(1, &msg("COMPLETE 0"), t);
        assert_eq!(drain(&mut d), [Action::Done(0), Action::Send(1, item(1))]);
        d.on_message(1, &msg("COMPLETE 1"), t);
        assert_eq!(drain(&mut d), [Action::Done(1), Action::Send(1, msg("DISCONNECT END"))]);
    }

    #[test]
    fn garbage_is_refused() {
        let t = Instant::now();
        let mut d = Distributor::new(Duration::from_secs(10));
        d.on_message(1, &msg("COMPLETE 0"), t);
        d.on_message(2, &[b"REGISTER 1 0 0 0 a".to_vec(), b"extra".to_vec()], t);
        d.on_message(3, &msg("REGISTER 1 0 0 0 c"), t);
        d.on_message(3, &msg("COMPLETE 99"), t);
        d.on_message(4, &[vec![0xFF; 10]], t);
        let refused: Vec<_> = (1..=4).map(|w| Action::Send(w, msg("DISCONNECT"))).collect();
        assert_eq!(drain(&mut d), refused);
        assert_eq!(d.workers().count(), 0);
    }
}
