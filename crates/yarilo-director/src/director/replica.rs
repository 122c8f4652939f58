//! What the director ring replicates, on the state machine's side.
//!
//! Every local change another director must learn is recorded as a
//! [`RingEvent`] in an outbox (only while [`Director::set_replicating`] is
//! on); the driver drains it after each operation and forwards it over
//! every live ring connection except the one it arrived on. Remote changes
//! are applied through the same methods, and they record an event only
//! when they changed something: an event travelling round the ring stops
//! where it is already known (a seq already seen, a stamp that does not
//! win, a backend already present). That is the loop guard.
//!
//! Pure like the rest of the state machine: no clock, no I/O.

use std::net::IpAddr;

use crate::backend::{BackendId, Source};
use crate::directory::{DirectorId, MergeOutcome, Stamp, UserKey};
use crate::session::{Session, MAX_SESSION_ID, MAX_USERNAME};
use crate::{Proto, Tick};

use super::{secs, BackendUp, Confirmed, Director, Kick};

/// How long a closed session id is remembered, so an open that arrives
/// after its close (over another path round the ring, or from the other
/// side of a healed partition) stays closed.
pub const SESSION_TOMB_MS: Tick = 600_000;
/// Most closed session ids remembered.
const MAX_SESSION_TOMBS: usize = 1 << 20;
/// How long an admin-removed backend is remembered (as long as a member
/// tombstone by default).
pub const BACKEND_TOMB_MS: Tick = 600_000;
/// How long a replicated kick is remembered (its loop guard).
const KICK_SEEN_MS: Tick = 60_000;
/// Most replicated kicks remembered.
const MAX_KICKS_SEEN: usize = 1 << 16;

/// A session as the ring exchanges it (`SESSION-OPEN`): the login's
/// report, and the envelope of the director it reached (`origin`, and a
/// seq on that director's Lamport clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: String,
    pub user: String,
    pub tag: String,
    pub backend: IpAddr,
    pub proto: Proto,
    pub origin: DirectorId,
    pub seq: u64,
}

/// Most events held between two drains (a driver drains after every lock,
/// so this only bounds a bug).
const MAX_EVENTS: usize = 1 << 20;

/// A backend as the ring exchanges it (`BACKEND` line): enough to insert
/// it where it is unknown and to carry a registered backend's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendState {
    pub ip: IpAddr,
    pub port: u16,
    pub tag: String,
    pub vhosts: u32,
    pub source: Source,
    /// Highest heartbeat seq seen from it (registered backends).
    pub seq: Option<u64>,
    pub draining: bool,
    /// The Lamport seq of its admin add (0: static or registered); an
    /// admin remove with a higher seq keeps it out.
    pub added: u64,
}

/// One sticky assignment as the ring exchanges it (`USER` / `USER-ASSIGN`).
/// The tag is the backend's: a backend serves exactly one tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRecord {
    pub hash: u32,
    pub backend: IpAddr,
    pub stamp: Stamp,
    pub weak: bool,
}

/// A change the other directors must learn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingEvent {
    /// A new pin (LOOKUP, admin move) or a merged one that won.
    Assign(UserRecord),
    /// A backend appeared (admin add, or learnt from a snapshot).
    Backend(BackendState),
    /// An accepted heartbeat.
    Up(BackendUp),
    Down {
        ip: IpAddr,
        seq: Option<u64>,
    },
    Flush {
        ip: IpAddr,
        seq: Option<u64>,
    },
    /// Admin remove, with the Lamport seq that orders it against an admin
    /// re-add.
    Remove {
        ip: IpAddr,
        seq: u64,
    },
    Vhosts {
        ip: IpAddr,
        vhosts: u32,
    },
    /// A login reported a session (or a snapshot entry of one).
    SessionOpen(SessionRecord),
    /// A login closed a session, on whichever director it reached.
    SessionClose {
        id: String,
        origin: DirectorId,
        seq: u64,
    },
    /// An admin kick, for every director's kick watchers.
    Kick {
        user: String,
        backend: IpAddr,
        origin: DirectorId,
        seq: u64,
    },
}

impl Director {
    /// Turns the event outbox on (the ring does, when it runs).
    pub fn set_replicating(&mut self, on: bool) {
        self.replicating = on;
        if !on {
            self.events.clear();
        }
    }

    /// Drains the outbox.
    pub fn take_events(&mut self) -> Vec<RingEvent> {
        std::mem::take(&mut self.events)
    }

    pub(super) fn emit(&mut self, event: RingEvent) {
        if self.replicating && self.events.len() < MAX_EVENTS {
            self.events.push(event);
        }
    }

    pub(super) fn emit_assign(&mut self, hash: u32, backend: BackendId, stamp: Stamp) {
        if !self.replicating {
            return;
        }
        if let Some(b) = self.backends.get(backend) {
            let ip = b.ip;
            self.emit(RingEvent::Assign(UserRecord {
                hash,
                backend: ip,
                stamp,
                weak: false,
            }));
        }
    }

    pub(super) fn emit_backend(&mut self, ip: IpAddr) {
        if !self.replicating {
            return;
        }
        if let Some(state) = self.backend_state(ip) {
            self.emit(RingEvent::Backend(state));
        }
    }

    fn backend_state(&self, ip: IpAddr) -> Option<BackendState> {
        let b = self.backends.get(self.backends.by_ip(ip)?)?;
        Some(BackendState {
            ip,
            port: b.port,
            tag: self.backends.tag_name(b.tag).to_string(),
            vhosts: b.vhosts,
            source: b.source,
            seq: self.backends.seq_of(ip),
            draining: b.draining,
            added: self.admin_added.get(&ip).copied().unwrap_or(0),
        })
    }

    /// Every backend, for the snapshot sent on a ring (re)connect.
    pub fn backend_states(&self) -> Vec<BackendState> {
        self.backends
            .iter()
            .filter_map(|(_, b)| self.backend_state(b.ip))
            .collect()
    }

    /// Every live assignment, for the snapshot sent on a ring (re)connect.
    pub fn user_records(&self, now: Tick) -> Vec<UserRecord> {
        let now_s = secs(now);
        let expire = self.users.expire_secs();
        self.users
            .iter()
            .filter(|(_, a)| now_s.saturating_sub(a.used_secs) < expire)
            .filter_map(|(k, a)| {
                Some(UserRecord {
                    hash: k.hash(),
                    backend: self.backends.get(a.backend)?.ip,
                    stamp: a.stamp,
                    weak: a.weak,
                })
            })
            .collect()
    }

    /// Applies a backend learnt from another director: inserted where
    /// unknown; a registered one's lease is refreshed when its seq is
    /// newer. Attributes of a known backend change only through their own
    /// events (vhosts, flush), never through a snapshot, so two views that
    /// differ cannot swap forever. Returns whether anything changed (the
    /// event is then forwarded).
    pub fn apply_backend(&mut self, now: Tick, s: &BackendState) -> bool {
        // Removed by an admin after this add (the other side of a healed
        // partition still lists it): stays removed.
        if self
            .backend_tombs
            .get(&s.ip)
            .is_some_and(|t| t.1 >= s.added)
        {
            return false;
        }
        self.clock = self.clock.max(s.added.min(crate::directory::MAX_SEQ));
        if s.added > 0 {
            // Re-added after any removal still remembered: the add wins.
            self.backend_tombs.remove(&s.ip);
        }
        let changed = match self.backends.by_ip(s.ip) {
            None => {
                if s.source == Source::Registered {
                    match s.seq {
                        Some(seq) if self.backends.accept_seq(s.ip, seq, now) => {}
                        // A removal already seen a newer seq: stays gone.
                        _ => return false,
                    }
                }
                match self
                    .backends
                    .insert(s.ip, s.port, &s.tag, s.vhosts, s.source, now)
                {
                    Some(id) => {
                        if let Some(b) = self.backends.get_mut(id) {
                            b.draining = s.draining;
                        }
                        if s.added > 0 {
                            self.admin_added.insert(s.ip, s.added);
                        }
                        true
                    }
                    None => false,
                }
            }
            Some(id) => {
                let registered = self
                    .backends
                    .get(id)
                    .is_some_and(|b| b.source == Source::Registered);
                match s.seq {
                    Some(seq) if registered && self.backends.accept_seq(s.ip, seq, now) => {
                        if let Some(b) = self.backends.get_mut(id) {
                            b.last_seen = now;
                        }
                        true
                    }
                    _ => false,
                }
            }
        };
        if changed {
            self.emit(RingEvent::Backend(s.clone()));
        }
        changed
    }

    /// Merges an assignment learnt from another director in Lamport order
    /// (higher seq wins, a tie goes to the lower director id); the local
    /// clock moves past the remote seq either way. When the merge moves
    /// the user to another backend, the returned kicks end the user's
    /// sessions this director knows of on the old one, so a mailbox is
    /// never served by two backends. `None`: the backend is unknown here
    /// (the record is dropped; the backend set is exchanged first).
    pub fn merge_user(&mut self, now: Tick, r: &UserRecord) -> Option<(MergeOutcome, Vec<Kick>)> {
        let backend = self.backends.by_ip(r.backend)?;
        let tag = self.backends.get(backend)?.tag;
        let key = UserKey::new(tag, r.hash);
        let outcome = self.merge_assignment(now, key, r.backend, r.stamp)?;
        let kicks = match outcome {
            MergeOutcome::Kept => return Some((outcome, Vec::new())),
            MergeOutcome::Inserted | MergeOutcome::Replaced { moved_from: None } => Vec::new(),
            MergeOutcome::Replaced {
                moved_from: Some(old),
            } => {
                let kicks = self.kicks_on(key, old);
                // Sessions on the old backend: LOOKUPs here wait for them
                // to close too (the confirmed kill holds ring-wide).
                if let Some(k) = kicks.first() {
                    let (user, old_ip) = (k.user.clone(), k.backend);
                    self.hold(now, key, &user, old_ip, Some(r.backend), false);
                }
                kicks
            }
        };
        self.emit(RingEvent::Assign(*r));
        Some((outcome, kicks))
    }

    /// One kick per distinct username with a session of `key` on `backend`.
    fn kicks_on(&self, key: UserKey, backend: BackendId) -> Vec<Kick> {
        let Some(ip) = self.backends.get(backend).map(|b| b.ip) else {
            return Vec::new();
        };
        let mut users: Vec<&str> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.user == key && s.backend == backend)
            .map(|(_, s)| &*s.username)
            .collect();
        users.sort_unstable();
        users.dedup();
        users
            .into_iter()
            .map(|u| Kick {
                user: u.to_string(),
                backend: ip,
            })
            .collect()
    }

    /// An admin remove made on another director. An admin re-add with a
    /// higher seq wins; otherwise the backend goes and a tombstone keeps
    /// it out of snapshots for `BACKEND_TOMB_MS`. Returns whether anything
    /// changed, and the removal (its sessions to kick).
    pub fn merge_backend_remove(
        &mut self,
        now: Tick,
        ip: IpAddr,
        seq: u64,
    ) -> (bool, Option<super::Removal>) {
        self.clock = self.clock.max(seq.min(crate::directory::MAX_SEQ));
        if self.admin_added.get(&ip).is_some_and(|a| *a > seq) {
            return (false, None);
        }
        if self.backend_tombs.get(&ip).is_some_and(|t| t.1 >= seq) {
            return (false, None);
        }
        self.backend_tombs.insert(ip, (now, seq));
        self.admin_added.remove(&ip);
        let removal = self
            .backends
            .by_ip(ip)
            .and_then(|id| self.remove(id, super::RemovalReason::Admin));
        self.emit(RingEvent::Remove { ip, seq });
        (true, removal)
    }

    /// Backends removed by an admin and still remembered, for the
    /// snapshot (after the backends, so the receiver drops them too).
    pub fn backend_tomb_events(&self) -> Vec<RingEvent> {
        self.backend_tombs
            .iter()
            .map(|(ip, (_, seq))| RingEvent::Remove { ip: *ip, seq: *seq })
            .collect()
    }

    /// A digest of the routing state a snapshot carries (backends, live
    /// assignments, tracked sessions): equal digests mean two directors
    /// hold the same state, so a snapshot from one would change nothing at
    /// the other. Order-free (a sum of mixed entries).
    pub fn digest(&self, now: Tick) -> u64 {
        self.digest_with(&self.user_records(now))
    }

    /// [`Director::digest`] over assignments already collected (the
    /// snapshot has them in hand).
    pub fn digest_with(&self, users: &[UserRecord]) -> u64 {
        let mut sum = 0u64;
        for b in self.backends.iter().map(|(_, b)| b.ip) {
            sum = sum.wrapping_add(mix(1, ip_bits(b)));
        }
        for u in users {
            let v = u64::from(u.hash) ^ ip_bits(u.backend).rotate_left(32);
            sum = sum.wrapping_add(mix(mix(2, v), u.stamp.seq ^ u.stamp.by.0.rotate_left(17)));
        }
        for (id, sess) in self.sessions.iter() {
            let id_bits = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
                (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
            });
            let backend = self.backends.get(sess.backend).map_or(0, |b| ip_bits(b.ip));
            sum = sum.wrapping_add(mix(mix(3, id_bits), backend ^ sess.seq));
        }
        sum
    }

    /// Every tracked session, for the snapshot sent on a ring (re)connect.
    pub fn session_records(&self) -> Vec<SessionRecord> {
        self.sessions
            .iter()
            .filter_map(|(id, s)| {
                Some(SessionRecord {
                    id: id.to_string(),
                    user: s.username.to_string(),
                    tag: self.backends.tag_name(s.user.tag()).to_string(),
                    backend: self.backends.get(s.backend)?.ip,
                    proto: s.proto,
                    origin: s.origin,
                    seq: s.seq,
                })
            })
            .collect()
    }

    pub(super) fn emit_session_open(&mut self, id: &str, tag: &str) {
        if !self.replicating {
            return;
        }
        let Some(s) = self.sessions.get(id) else {
            return;
        };
        let Some(ip) = self.backends.get(s.backend).map(|b| b.ip) else {
            return;
        };
        let r = SessionRecord {
            id: id.to_string(),
            user: s.username.to_string(),
            tag: tag.to_string(),
            backend: ip,
            proto: s.proto,
            origin: s.origin,
            seq: s.seq,
        };
        self.emit(RingEvent::SessionOpen(r));
    }

    /// Remembers a closed id (bounded; they go in the sweep).
    pub(super) fn tomb_session(
        &mut self,
        id: &str,
        now: Tick,
        origin: DirectorId,
        seq: u64,
    ) -> bool {
        if self.closed_sessions.contains_key(id) {
            return false;
        }
        if self.closed_sessions.len() < MAX_SESSION_TOMBS && id.len() <= MAX_SESSION_ID {
            self.closed_sessions.insert(id.into(), (now, origin, seq));
        }
        true
    }

    /// Closed ids still remembered, for the snapshot (so the other side
    /// of a healed partition drops them too).
    pub fn session_tombs(&self) -> Vec<RingEvent> {
        self.closed_sessions
            .iter()
            .map(|(id, (_, origin, seq))| RingEvent::SessionClose {
                id: id.to_string(),
                origin: *origin,
                seq: *seq,
            })
            .collect()
    }

    /// A session another director learnt of. An id closed anywhere stays
    /// closed; a reopened id keeps the later envelope. Returns whether it
    /// changed anything (the event is then forwarded).
    pub fn merge_session_open(&mut self, now: Tick, r: &SessionRecord) -> bool {
        self.last_now = self.last_now.max(now);
        if self.closed_sessions.contains_key(r.id.as_str()) {
            return false;
        }
        if let Some(s) = self.sessions.get(&r.id) {
            if (s.seq, s.origin) >= (r.seq, r.origin) {
                return false;
            }
        }
        let Some(backend) = self.backends.by_ip(r.backend) else {
            return false;
        };
        let Some(key) = self.user_key(&r.user, &r.tag) else {
            return false;
        };
        self.clock = self.clock.max(r.seq.min(crate::directory::MAX_SEQ));
        let session = Session {
            username: r.user.chars().take(MAX_USERNAME).collect(),
            user: key,
            backend,
            proto: r.proto,
            origin: r.origin,
            seq: r.seq,
        };
        if !self.insert_session(&r.id, session) {
            return false;
        }
        self.users.touch(key, secs(now));
        self.emit(RingEvent::SessionOpen(r.clone()));
        true
    }

    /// A session closed on another director. Returns whether it changed
    /// anything, and the hold it released.
    pub fn merge_session_close(
        &mut self,
        now: Tick,
        id: &str,
        origin: DirectorId,
        seq: u64,
    ) -> (bool, Option<Confirmed>) {
        self.last_now = self.last_now.max(now);
        if !self.tomb_session(id, now, origin, seq) {
            return (false, None);
        }
        self.clock = self.clock.max(seq.min(crate::directory::MAX_SEQ));
        let (_, released) = self.remove_session(id);
        self.emit(RingEvent::SessionClose {
            id: id.to_string(),
            origin,
            seq,
        });
        (true, released)
    }

    /// An admin kick made on another director: the kick for this one's
    /// watchers, the first time it arrives.
    pub fn merge_kick(
        &mut self,
        now: Tick,
        user: &str,
        backend: IpAddr,
        origin: DirectorId,
        seq: u64,
    ) -> Option<Kick> {
        if self.kicks_seen.contains_key(&(origin, seq)) || self.kicks_seen.len() >= MAX_KICKS_SEEN {
            return None;
        }
        self.kicks_seen.insert((origin, seq), now);
        let user: String = user.chars().take(MAX_USERNAME).collect();
        self.emit(RingEvent::Kick {
            user: user.clone(),
            backend,
            origin,
            seq,
        });
        Some(Kick { user, backend })
    }

    /// Records admin kicks made here for the other directors' watchers.
    pub(super) fn emit_kicks(&mut self, now: Tick, kicks: &[Kick]) {
        if !self.replicating {
            return;
        }
        for k in kicks {
            let seq = self.next_stamp().seq;
            self.kicks_seen.insert((self.me, seq), now);
            self.emit(RingEvent::Kick {
                user: k.user.clone(),
                backend: k.backend,
                origin: self.me,
                seq,
            });
        }
    }

    /// Forgets closed ids and kicks past their time.
    pub(super) fn sweep_replicas(&mut self, now: Tick) {
        self.closed_sessions
            .retain(|_, t| now.saturating_sub(t.0) < SESSION_TOMB_MS);
        self.kicks_seen
            .retain(|_, at| now.saturating_sub(*at) < KICK_SEEN_MS);
        self.backend_tombs
            .retain(|_, t| now.saturating_sub(t.0) < BACKEND_TOMB_MS);
    }

    /// The Lamport clock (for tests and status).
    pub fn lamport(&self) -> u64 {
        self.clock
    }

    /// The id stamped on this director's assignments.
    pub fn director_id(&self) -> DirectorId {
        self.me
    }
}

/// SplitMix64's finaliser over a tagged value.
fn mix(tag: u64, v: u64) -> u64 {
    let mut z = v.wrapping_add(tag.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn ip_bits(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => u64::from(u32::from(v4)),
        IpAddr::V6(v6) => {
            let b = u128::from(v6);
            (b as u64) ^ ((b >> 64) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Settings;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pair() -> (Director, Director) {
        let mut a = Director::new(Settings::defaults(), DirectorId(1));
        let mut b = Director::new(Settings::defaults(), DirectorId(2));
        for d in [&mut a, &mut b] {
            d.set_replicating(true);
            d.add_static(0, ip("10.0.0.1"), 1, "", 100);
            d.add_static(0, ip("10.0.0.2"), 1, "", 100);
        }
        (a, b)
    }

    /// Delivers `from`'s outbox to `to`; returns what `to` would forward.
    fn deliver(from: &mut Director, to: &mut Director) -> Vec<RingEvent> {
        for e in from.take_events() {
            match e {
                RingEvent::Assign(r) => {
                    to.merge_user(0, &r);
                }
                RingEvent::Backend(s) => {
                    to.apply_backend(0, &s);
                }
                RingEvent::Up(up) => {
                    to.backend_up(0, &up);
                }
                RingEvent::Down { ip, seq } => {
                    to.backend_down(0, ip, seq);
                }
                RingEvent::Flush { ip, seq } => {
                    to.backend_flush(0, ip, seq);
                }
                RingEvent::Remove { ip, seq } => {
                    to.merge_backend_remove(0, ip, seq);
                }
                RingEvent::Vhosts { ip, vhosts } => {
                    to.set_vhosts(ip, vhosts);
                }
                RingEvent::SessionOpen(r) => {
                    to.merge_session_open(0, &r);
                }
                RingEvent::SessionClose { id, origin, seq } => {
                    to.merge_session_close(0, &id, origin, seq);
                }
                RingEvent::Kick {
                    user,
                    backend,
                    origin,
                    seq,
                } => {
                    to.merge_kick(0, &user, backend, origin, seq);
                }
            }
        }
        to.take_events()
    }

    #[test]
    fn sessions_replicate_and_a_close_anywhere_wins_over_a_late_open() {
        let (mut a, mut b) = pair();
        assert!(a.session_open(0, "s1", "u@d", "", ip("10.0.0.2"), crate::Proto::Imap));
        let fwd = deliver(&mut a, &mut b);
        assert_eq!(fwd.len(), 1, "new to b: forwarded on");
        assert_eq!(b.sessions().len(), 1);
        let at = b.backends().by_ip(ip("10.0.0.2")).unwrap();
        assert_eq!(b.backends().get(at).unwrap().sessions, 1);
        // The same open again (the other way round the ring): no change.
        b.events = fwd;
        assert!(deliver(&mut b, &mut a).is_empty());
        // The login closes it through b; a learns it.
        b.session_close("s1");
        assert_eq!(deliver(&mut b, &mut a).len(), 1);
        assert_eq!(a.sessions().len(), 0);
        // An open of s1 arriving late (another path) stays closed.
        let late = SessionRecord {
            id: "s1".into(),
            user: "u@d".into(),
            tag: String::new(),
            backend: ip("10.0.0.2"),
            proto: crate::Proto::Imap,
            origin: DirectorId(1),
            seq: 1,
        };
        assert!(!a.merge_session_open(0, &late));
        assert_eq!(a.sessions().len(), 0);
        // A close of a session b never saw is remembered and forwarded.
        a.session_close("s9");
        assert_eq!(deliver(&mut a, &mut b).len(), 1);
    }

    #[test]
    fn an_admin_kick_reaches_the_other_directors_once() {
        let (mut a, mut b) = pair();
        a.session_open(0, "s1", "u@d", "", ip("10.0.0.1"), crate::Proto::Imap);
        deliver(&mut a, &mut b);
        let kicks = a.kicks_for_user(0, "u@d", "");
        assert_eq!(kicks.len(), 1);
        let fwd = deliver(&mut a, &mut b);
        assert_eq!(fwd.len(), 1);
        b.events = fwd;
        assert!(deliver(&mut b, &mut a).is_empty(), "a made it: not again");
    }

    #[test]
    fn a_fresh_pin_replicates_and_stops_where_it_is_known() {
        let (mut a, mut b) = pair();
        let ra = a.lookup(0, "u@d", "", None).unwrap();
        assert!(ra.fresh);
        let forwarded = deliver(&mut a, &mut b);
        assert_eq!(forwarded.len(), 1, "new to b: forwarded on");
        let rb = b.lookup(0, "u@d", "", None).unwrap();
        assert!(!rb.fresh);
        assert_eq!(rb.ip, ra.ip);
        // Back at a: already known, nothing forwarded.
        b.events = forwarded;
        assert!(deliver(&mut b, &mut a).is_empty());
    }

    #[test]
    fn conflicting_pins_converge_and_the_loser_kicks() {
        let (mut a, mut b) = pair();
        // Both pin the same user to different backends with equal seqs.
        a.move_user(0, "u@d", "", ip("10.0.0.1")).unwrap();
        b.move_user(0, "u@d", "", ip("10.0.0.2")).unwrap();
        assert!(b.session_open(0, "s1", "u@d", "", ip("10.0.0.2"), crate::Proto::Imap));
        let a_events = a.take_events();
        let b_events = b.take_events();
        a.events = a_events.clone();
        b.events = b_events.clone();
        // b (higher id) loses the tie and kicks its session on 10.0.0.2.
        let RingEvent::Assign(ra) = &a_events[0] else {
            panic!("assign expected")
        };
        let (_, kicks) = b.merge_user(0, ra).unwrap();
        assert_eq!(
            kicks,
            vec![Kick {
                user: "u@d".into(),
                backend: ip("10.0.0.2")
            }]
        );
        let RingEvent::Assign(rb) = &b_events[0] else {
            panic!("assign expected")
        };
        let (outcome, _) = a.merge_user(0, rb).unwrap();
        assert_eq!(outcome, MergeOutcome::Kept);
        let key_a = a.user_key("u@d", "").unwrap();
        let key_b = b.user_key("u@d", "").unwrap();
        assert_eq!(
            a.users().get(key_a, 0).unwrap().backend,
            b.users().get(key_b, 0).unwrap().backend
        );
    }

    #[test]
    fn heartbeats_and_removals_travel_once_round_the_ring() {
        let (mut a, mut b) = pair();
        let up = BackendUp {
            ip: ip("10.0.0.9"),
            port: 1,
            tag: "".into(),
            vhosts: 100,
            seq: 5,
        };
        a.backend_up(0, &up);
        let fwd = deliver(&mut a, &mut b);
        assert_eq!(fwd.len(), 1);
        assert!(b.backends().by_ip(ip("10.0.0.9")).is_some());
        b.events = fwd;
        assert!(deliver(&mut b, &mut a).is_empty(), "same seq is stale at a");
        a.backend_flush(0, ip("10.0.0.9"), None);
        assert_eq!(deliver(&mut a, &mut b).len(), 1);
        a.backend_flush(0, ip("10.0.0.9"), None);
        assert!(a.take_events().is_empty(), "already draining: no event");
        a.backend_down(0, ip("10.0.0.9"), Some(6));
        assert_eq!(deliver(&mut a, &mut b).len(), 1);
        assert!(b.backends().by_ip(ip("10.0.0.9")).is_none());
        // A snapshot from a director that missed the DOWN cannot bring it back.
        let stale = BackendState {
            ip: ip("10.0.0.9"),
            port: 1,
            tag: "".into(),
            vhosts: 100,
            source: Source::Registered,
            seq: Some(5),
            draining: false,
            added: 0,
        };
        assert!(!b.apply_backend(0, &stale));
    }

    #[test]
    fn a_lone_director_records_nothing() {
        let mut d = Director::new(Settings::defaults(), DirectorId(1));
        d.add_static(0, ip("10.0.0.1"), 1, "", 100);
        d.lookup(0, "u", "", None).unwrap();
        assert!(d.take_events().is_empty());
    }
}
