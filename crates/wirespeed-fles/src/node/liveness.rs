//! Telling a slow peer from a dead one, sans-IO. Every node beats to each peer every `every`
//! and hears the peer's beats and messages. A peer is suspected once it has missed more than
//! one beat, and given up once its silence passes the run's limit or, on a loaded host where
//! beats come late, 25 times their mean lateness (FLESnet's DFS takes 20 and 25 times the
//! mean heartbeat latency). Silence counts only while this node itself ran: a node woken far
//! later than it asked to be (its process was descheduled, its loop held up) adds the pause
//! to every peer's allowance rather than taking it for their silence; and when every peer it
//! watches falls silent at once, the fault is likelier its own (its host, its link), so it
//! gives none up, and fails only once all have been silent for twice the limit (the run's
//! timeout). A busy machine never turns one loss into all.

use crate::sched::Nanos;

/// Suspicion needs this many beats missed; death this many times the mean lateness.
const SUSPECT_BEATS: u64 = 2;
const SUSPECT_FACTOR: u64 = 20;
const DEAD_FACTOR: u64 = 25;

/// A wake-up this much later than asked for is the node's own pause, not its peers' silence.
const PAUSE_GRACE_SHARE: u64 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivenessSettings {
    /// How often a node beats to each peer.
    pub every: Nanos,
    /// Silence after which a peer is given up on a quiet host (the run's timeout / 2).
    pub limit: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    Alive,
    /// More than one beat missed: still waited for.
    Suspected,
    /// Given up on.
    Dead,
    /// No longer watched: it finished, or was given up on for another reason.
    Gone,
}

/// What a node does at a timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Beat to every peer now.
    pub beat: bool,
    /// Peers newly found dead: give them up.
    pub dead: Vec<usize>,
    /// Every peer watched has been silent this long, twice the limit: fail.
    pub stalled: Option<Nanos>,
}

#[derive(Debug, Clone, Copy)]
struct Clock {
    /// When last heard from, shifted forward by this node's own pauses since.
    heard: Nanos,
    /// When the last beat came, and the mean lateness of beats (an exponential average).
    last_beat: Option<Nanos>,
    lateness: Nanos,
    state: PeerState,
}

pub struct Liveness {
    settings: LivenessSettings,
    peers: Vec<Clock>,
    /// When this node next beats, and until when it knowingly slept: its last look at the
    /// time, or the wake-up it asked for since.
    next_beat: Nanos,
    awake: Nanos,
    /// The longest pause of this node seen, for the report.
    pub longest_pause: Nanos,
}

impl Liveness {
    pub fn new(peers: usize, settings: LivenessSettings, now: Nanos) -> Self {
        let clock = Clock { heard: now, last_beat: None, lateness: 0, state: PeerState::Alive };
        Liveness { settings, peers: vec![clock; peers], next_beat: now + settings.every, awake: now, longest_pause: 0 }
    }

    /// Something came from `peer` at `now`; `beat` if it was a heartbeat.
    pub fn heard(&mut self, peer: usize, now: Nanos, beat: bool) {
        let c = &mut self.peers[peer];
        c.heard = c.heard.max(now);
        if beat {
            if let Some(last) = c.last_beat {
                let late = now.saturating_sub(last).saturating_sub(self.settings.every);
                c.lateness = (c.lateness * 7 + late) / 8;
            }
            c.last_beat = Some(now);
        }
        if c.state == PeerState::Suspected {
            c.state = PeerState::Alive;
        }
    }

    /// Stops watching `peer` (it finished, or was given up on otherwise).
    pub fn forget(&mut self, peer: usize) {
        self.peers[peer].state = PeerState::Gone;
    }

    pub fn state(&self, peer: usize) -> PeerState {
        self.peers[peer].state
    }

    /// Peers suspected now.
    pub fn suspected(&self) -> usize {
        self.peers.iter().filter(|c| c.state == PeerState::Suspected).count()
    }

    fn suspect_after(&self, c: &Clock) -> Nanos {
        self.settings.every * SUSPECT_BEATS + SUSPECT_FACTOR * c.lateness
    }

    fn dead_after(&self, c: &Clock) -> Nanos {
        self.settings.limit.max(self.settings.every * SUSPECT_BEATS + DEAD_FACTOR * c.lateness)
    }

    /// When this node must next be woken: to beat, or to judge a peer (or all of them, once
    /// all are silent).
    pub fn poll_timeout(&mut self) -> Nanos {
        let watched = self.peers.iter().filter(|c| matches!(c.state, PeerState::Alive | PeerState::Suspected));
        let judge = watched.flat_map(|c| {
            let after = if c.state == PeerState::Alive { self.suspect_after(c) } else { self.dead_after(c) };
            // The first moments past each allowance that are still to come.
            [c.heard + after + 1, c.heard + 2 * self.settings.limit + 1].into_iter().filter(|&t| t > self.awake)
        });
        let at = judge.fold(self.next_beat, Nanos::min);
        self.awake = self.awake.max(at);
        at
    }

    /// As [`handle_timeout`](Self::handle_timeout), with a stall as the error: nothing from
    /// any of the `peers` (as the message names them) for the whole timeout.
    pub fn judge(&mut self, now: Nanos, peers: crate::error::Role) -> crate::error::Result<Verdict> {
        let verdict = self.handle_timeout(now);
        match verdict.stalled {
            Some(silent) => {
                Err(crate::error::Lost::AllSilent { peers, silent: std::time::Duration::from_nanos(silent) }.into())
            }
            None => Ok(verdict),
        }
    }

    /// The time is `now`: what this node does about it.
    pub fn handle_timeout(&mut self, now: Nanos) -> Verdict {
        // Woken late: this node was not running; its peers' silence meanwhile does not count.
        let pause = now.saturating_sub(self.awake);
        self.awake = now;
        if pause > self.settings.every / PAUSE_GRACE_SHARE {
            self.longest_pause = self.longest_pause.max(pause);
            self.peers.iter_mut().for_each(|c| c.heard = c.heard.saturating_add(pause).min(now));
        }
        let mut dead = Vec::new();
        let mut watched = 0;
        let mut least_silence = Nanos::MAX;
        for p in 0..self.peers.len() {
            let c = self.peers[p];
            let silent = now.saturating_sub(c.heard);
            if matches!(c.state, PeerState::Alive | PeerState::Suspected) {
                watched += 1;
                least_silence = least_silence.min(silent);
            }
            match c.state {
                PeerState::Alive | PeerState::Suspected if silent > self.dead_after(&c) => dead.push(p),
                PeerState::Alive if silent > self.suspect_after(&c) => self.peers[p].state = PeerState::Suspected,
                _ => {}
            }
        }
        let all_silent = watched > 0 && dead.len() == watched;
        if all_silent {
            dead.iter().for_each(|&p| self.peers[p].state = PeerState::Suspected);
            dead.clear();
        }
        dead.iter().for_each(|&p| self.peers[p].state = PeerState::Dead);
        let beat = now >= self.next_beat;
        if beat {
            self.next_beat = now + self.settings.every;
        }
        let stalled = all_silent && least_silence > 2 * self.settings.limit;
        Verdict { beat, dead, stalled: stalled.then_some(least_silence) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn liveness(peers: usize) -> Liveness {
        Liveness::new(peers, LivenessSettings { every: S, limit: 10 * S }, 0)
    }

    /// Runs `l` from `from` to `until` as a driver would, waking when it asks;
    /// peer p beats every `period[p]` while `beating(p, t)`. Returns when each was found dead.
    fn drive(
        l: &mut Liveness,
        (from, until): (Nanos, Nanos),
        period: [Nanos; 2],
        beating: impl Fn(usize, Nanos) -> bool,
    ) -> Vec<Option<Nanos>> {
        let mut found = vec![None; 2];
        let mut now = from;
        let mut beats = [from + period[0], from + period[1]];
        while now < until {
            now = l.poll_timeout().min(beats[0]).min(beats[1]);
            for p in 0..2 {
                while now >= beats[p] {
                    if beating(p, beats[p]) {
                        l.heard(p, now, true);
                    }
                    beats[p] += period[p];
                }
            }
            for p in l.handle_timeout(now).dead {
                found[p] = Some(now);
            }
        }
        found
    }

    #[test]
    fn a_silent_peer_is_suspected_then_given_up_at_the_limit() {
        let mut l = liveness(2);
        let found = drive(&mut l, (0, 30 * S), [S, S], |p, t| p == 0 || t < 5 * S);
        assert_eq!(found[0], None, "the punctual one lives");
        let at = found[1].expect("the silent one is found");
        assert!((14 * S..=15 * S).contains(&at), "its last beat at 4 s, the limit 10 s: {at}");
        assert_eq!(l.state(1), PeerState::Dead);
    }

    #[test]
    fn one_missed_beat_is_no_suspicion_and_a_late_beat_clears_it() {
        let mut l = liveness(1);
        l.heard(0, 0, true);
        assert_eq!(l.poll_timeout(), S);
        l.handle_timeout(S);
        assert_eq!(l.state(0), PeerState::Alive);
        assert_eq!(l.poll_timeout(), 2 * S);
        l.handle_timeout(2 * S + 1);
        assert_eq!(l.state(0), PeerState::Suspected);
        assert_eq!(l.suspected(), 1);
        l.heard(0, 2 * S + 1, true);
        assert_eq!(l.state(0), PeerState::Alive);
    }

    #[test]
    fn late_beats_stretch_the_allowance() {
        // Peer 1 beats every 3 s (2 s late) until 60 s, then falls silent: 25 times its
        // lateness is past the 10 s limit.
        let mut l = liveness(2);
        let found = drive(&mut l, (0, 200 * S), [S, 3 * S], |p, t| p == 0 || t < 60 * S);
        let at = found[1].expect("found in the end");
        assert!(at > 57 * S + 40 * S, "{at}");
        assert_eq!(found[0], None);
    }

    #[test]
    fn this_nodes_own_pauses_are_not_its_peers_silence() {
        // The node is stopped for 20 s; the peers' beats meanwhile wait unread. Woken, it
        // judges before it reads them: the pause is its own.
        let mut l = liveness(2);
        assert_eq!(drive(&mut l, (0, 10 * S), [S, S], |_, _| true), [None, None]);
        let wake = l.poll_timeout();
        assert_eq!(l.handle_timeout(wake + 20 * S).dead, Vec::<usize>::new());
        assert!(l.longest_pause >= 20 * S);
        // Then peer 1 stays silent: the time the node runs counts again.
        let found = drive(&mut l, (wake + 20 * S, 60 * S), [S, S], |p, _| p == 0);
        assert!(found[1].is_some() && found[0].is_none(), "{found:?}");
    }

    #[test]
    fn gone_peers_are_not_judged() {
        let mut l = liveness(2);
        l.forget(1);
        let found = drive(&mut l, (0, 30 * S), [S, S], |p, _| p == 0);
        assert_eq!(found, [None, None]);
        assert_eq!(l.state(1), PeerState::Gone);
    }

    #[test]
    fn when_every_peer_falls_silent_at_once_none_is_given_up_until_the_timeout() {
        let mut l = liveness(2);
        let found = drive(&mut l, (0, 20 * S), [S, S], |_, t| t < 5 * S);
        assert_eq!(found, [None, None], "the silence is likelier this node's");
        assert_eq!(l.suspected(), 2);
        // Their last beats came at 4 s: at twice the limit after, the node fails.
        loop {
            let now = l.poll_timeout();
            let v = l.handle_timeout(now);
            assert!(v.dead.is_empty() && now <= 24 * S + 1, "{v:?} at {now}");
            if let Some(silent) = v.stalled {
                assert_eq!((now, silent), (24 * S + 1, 20 * S + 1));
                break;
            }
        }
    }
}
