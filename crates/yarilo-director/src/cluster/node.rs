//! One director's ring as a pure state machine: inputs (ring lines,
//! connection changes, dial / probe / poll results, the clock) in,
//! outputs (lines to send, connections to open or close, probes, polls,
//! kicks) out. Nothing here reads a clock, a socket or a random source,
//! so the same code runs under the tokio driver (`super`) and under the
//! seeded simulator (`tests/ring_sim.rs`).
//!
//! The routing state (backends, the user directory) lives in the
//! [`Director`] state machine; every call takes it by `&mut` so the
//! driver decides the locking and the simulator owns one per member.
//!
//! Invariants, each a failure found in a live test of the reference
//! design (director seed, ring history):
//! - Each member dials only its right neighbour (with two, only the lower
//!   one); a lone member dials nobody and only polls its seeds.
//! - Every change is forwarded over every live connection except the one
//!   it came in on, and only when it changed something here.
//! - Broadcasts go out over the connection set as it was before the
//!   change is reconciled (the outputs are ordered: sends first, then the
//!   re-targeted dial).
//! - Every connection starts with the member list and tombstones, then
//!   the backends, then the user directory, then `SYNC-DONE`.
//! - A lost connection to a neighbour is confirmed by probes before the
//!   neighbour is declared dead; a `QUIT` is never taken for a death.
//! - A connection silent for `ping_interval + ping_timeout` is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use crate::director::{BackendOutcome, Confirmed, Director, Kick, Removal, RingEvent, UpOutcome};
use crate::Tick;

use super::membership::{Change, Membership};
use super::wire::RingMsg;

/// A ring connection, named by the driver.
pub type LinkId = u64;

/// Retry after a load-balanced seed routed our poll to ourselves.
pub const SELF_DIAL_RETRY: Tick = 500;
/// Retry after the peer closed on purpose (it re-targets or leaves), or a
/// dial found nobody listening.
pub const QUIT_RETRY: Tick = 500;
/// Retry after a refused or failed join.
pub const JOIN_RETRY: Tick = 2_000;
/// A neighbour with no connection either way for this long is probed:
/// the one a member never hears from otherwise is a left neighbour that
/// died before it dialled us (with two members the higher never dials, so
/// a lower member killed before its first dial would stay forever).
pub const UNLINKED_GRACE: Tick = 3_000;

/// What the node reads from `director_service.*`, in milliseconds.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub me: SocketAddr,
    pub incarnation: u64,
    /// Whether `peers` (or the headless ring name) gives seeds to poll.
    pub has_seeds: bool,
    /// None: poll once.
    pub seed_poll: Option<Tick>,
    pub seed_poll_idle: Tick,
    pub min_members: usize,
    pub ping_interval: Tick,
    pub ping_timeout: Tick,
    /// None: off.
    pub anti_entropy: Option<Tick>,
    /// None: tombstones are kept.
    pub tombstone_ttl: Option<Tick>,
}

/// How a ring connection ended, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// We closed it on purpose.
    Ours,
    /// The peer said QUIT.
    PeerQuit,
    /// EOF, error or silence without QUIT: maybe a death.
    Lost,
}

/// Why a dial failed, as far as the node cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialFailure {
    /// No connection or no greeting: the peer may be dead (probe it).
    Unreachable,
    /// JOIN-FAIL, a bad proof, a protocol error: retry later.
    Refused,
}

/// Something that happened to this director.
#[derive(Debug, Clone)]
pub enum Input {
    /// Time passed (the driver ticks a few times a second).
    Tick,
    /// A connection passed its join and is ours to use. `dial`: the
    /// generation of the dial that opened it (None: accepted).
    LinkUp {
        link: LinkId,
        peer: SocketAddr,
        dial: Option<u64>,
    },
    /// A line on an established connection.
    Line {
        link: LinkId,
        msg: RingMsg,
    },
    LinkDown {
        link: LinkId,
        end: End,
    },
    DialFailed {
        gen: u64,
        failure: DialFailure,
    },
    /// The probes of a suspected neighbour finished.
    Probed {
        peer: SocketAddr,
        inc: u64,
        alive: bool,
    },
    /// A seed poll round finished: the member lines it read, whether a
    /// dial landed on ourselves, and the targets nobody answered at.
    PollDone {
        self_dial: bool,
        lines: Vec<RingMsg>,
        unreachable: Vec<SocketAddr>,
    },
    /// Changes made here (LOOKUP pins, heartbeats, admin actions).
    Local(Vec<RingEvent>),
    /// Graceful leave.
    Leave,
}

/// Something the driver must do, in order.
#[derive(Debug, Clone)]
pub enum Output {
    /// Queue these lines on a connection, in order.
    Send {
        link: LinkId,
        msgs: Vec<RingMsg>,
    },
    /// Say `QUIT <reason>` and close.
    Close {
        link: LinkId,
        reason: &'static str,
    },
    /// Close without a word (the peer went silent).
    Drop {
        link: LinkId,
    },
    /// Open a ring connection to `peer` (report LinkUp or DialFailed with
    /// `gen`).
    Dial {
        peer: SocketAddr,
        gen: u64,
    },
    /// Probe a suspected neighbour (report Probed).
    Probe {
        peer: SocketAddr,
        inc: u64,
    },
    /// Poll every seed (report PollDone).
    Poll,
    /// A merge moved users: end their sessions on the old backend.
    Kick(Vec<Kick>),
    /// An admin kick made on another director (paced like one made here).
    AdminKick(Vec<Kick>),
    /// A backend left through a ring event: kick its sessions.
    Removed(Removal),
    /// A session closed elsewhere ended a confirmed-kill hold here.
    Released(Confirmed),
    /// A member joined or left our view (log, status).
    MemberJoined(SocketAddr),
    MemberLeft(SocketAddr),
    /// We declared a neighbour dead.
    DeclaredDead(SocketAddr),
    /// We were evicted while running and came back with a new incarnation.
    Refuted(u64),
}

#[derive(Debug, Clone)]
struct Link {
    peer: SocketAddr,
    dialed: bool,
    last_heard: Tick,
    next_ping: Tick,
    /// The peer's snapshot is in (`SYNC-DONE`).
    synced: bool,
    /// The digest its snapshot ended with.
    digest: Option<u64>,
    /// We caught up before its snapshot was in: once it is, send ours
    /// unless the digests agree.
    owed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Dial {
    peer: SocketAddr,
    gen: u64,
    link: Option<LinkId>,
}

/// One director's ring.
#[derive(Debug, Clone)]
pub struct RingNode {
    cfg: NodeConfig,
    membership: Membership,
    links: BTreeMap<LinkId, Link>,
    dial: Option<Dial>,
    gen: u64,
    probing: BTreeSet<SocketAddr>,
    not_before: BTreeMap<SocketAddr, Tick>,
    /// None: no (more) seed polls.
    next_poll: Option<Tick>,
    polling: bool,
    next_anti_entropy: Option<Tick>,
    leaving: bool,
    deaths_declared: u64,
    /// Suspects whose probes start at the next reconcile.
    pending_probes: Vec<(SocketAddr, u64)>,
    /// Neighbours without a connection, since when.
    unlinked: BTreeMap<SocketAddr, Tick>,
    /// A whole snapshot has come in since start. Until then, what the
    /// snapshots bring is applied but not forwarded entry by entry: a
    /// director that joins a ring of a million users would otherwise
    /// pass each one to its other neighbour, which has them all, one line
    /// at a time. It sends one snapshot to its other connections instead.
    caught_up: bool,
}

impl RingNode {
    /// A ring of one at time `now`; the first seed poll is due at once.
    pub fn new(cfg: NodeConfig, now: Tick) -> RingNode {
        let membership = Membership::new(cfg.me, cfg.incarnation, cfg.tombstone_ttl);
        RingNode {
            next_poll: cfg.has_seeds.then_some(now),
            next_anti_entropy: cfg.anti_entropy.map(|d| now + d),
            cfg,
            membership,
            links: BTreeMap::new(),
            dial: None,
            gen: 0,
            probing: BTreeSet::new(),
            not_before: BTreeMap::new(),
            polling: false,
            leaving: false,
            deaths_declared: 0,
            pending_probes: Vec::new(),
            unlinked: BTreeMap::new(),
            caught_up: false,
        }
    }

    pub fn me(&self) -> SocketAddr {
        self.cfg.me
    }

    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    pub fn members(&self) -> Vec<SocketAddr> {
        self.membership.members()
    }

    pub fn incarnation(&self) -> u64 {
        self.membership.incarnation()
    }

    pub fn is_leaving(&self) -> bool {
        self.leaving
    }

    pub fn deaths_declared(&self) -> u64 {
        self.deaths_declared
    }

    /// Live connections: (link, peer, whether we dialled it).
    pub fn links(&self) -> Vec<(LinkId, SocketAddr, bool)> {
        self.links
            .iter()
            .map(|(id, l)| (*id, l.peer, l.dialed))
            .collect()
    }

    /// How many connections are live (cheap: the driver's gauge reads it
    /// after every line).
    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// When the node next needs a Tick (the earliest of its timers).
    pub fn next_deadline(&self) -> Option<Tick> {
        let silence = self.cfg.ping_interval + self.cfg.ping_timeout;
        let links = self
            .links
            .values()
            .map(|l| l.next_ping.min(l.last_heard + silence));
        let poll = self.next_poll.filter(|_| !self.polling);
        links
            .chain(poll)
            .chain(self.next_anti_entropy)
            .chain(self.not_before.values().copied())
            .min()
    }

    /// The member list and tombstones (a poll answer's body; the head of
    /// every snapshot).
    pub fn member_msgs(&self, now: Tick) -> Vec<RingMsg> {
        let m = &self.membership;
        let mut out: Vec<RingMsg> = m
            .member_list()
            .into_iter()
            .map(|(addr, inc)| RingMsg::Add { addr, inc })
            .collect();
        out.extend(
            m.tomb_list(now)
                .into_iter()
                .map(|(addr, inc, ttl_ms)| RingMsg::Remove { addr, inc, ttl_ms }),
        );
        out
    }

    /// The whole snapshot a connection starts with.
    pub fn snapshot(&self, now: Tick, d: &Director) -> Vec<RingMsg> {
        let mut out = self.member_msgs(now);
        out.extend(
            d.backend_states()
                .into_iter()
                .map(|b| RingMsg::Event(RingEvent::Backend(b))),
        );
        out.extend(d.backend_tomb_events().into_iter().map(RingMsg::Event));
        let users = d.user_records(now);
        let digest = d.digest_with(&users);
        out.extend(users.into_iter().map(RingMsg::User));
        out.extend(
            d.session_records()
                .into_iter()
                .map(|s| RingMsg::Event(RingEvent::SessionOpen(s))),
        );
        out.extend(d.session_tombs().into_iter().map(RingMsg::Event));
        out.push(RingMsg::SyncDone {
            digest: Some(digest),
        });
        out
    }

    /// Whether a join from `addr` may proceed (before the proof).
    pub fn join_refusal(&self, addr: SocketAddr) -> Option<&'static str> {
        if self.leaving {
            Some("shutting down")
        } else if addr == self.cfg.me {
            Some("self")
        } else {
            None
        }
    }

    /// A join (ring or poll) passed its proof: merge the joiner. A known
    /// member re-joining changes nothing and is not re-announced.
    pub fn joined(&mut self, now: Tick, addr: SocketAddr, inc: u64, out: &mut Vec<Output>) {
        self.merge_member(now, &RingMsg::Add { addr, inc }, None, out);
        self.reconcile(now, out);
    }

    /// Handles one input; appends what to do to `out`.
    pub fn handle(&mut self, now: Tick, input: Input, d: &mut Director, out: &mut Vec<Output>) {
        match input {
            Input::Tick => self.tick(now, out),
            Input::LinkUp { link, peer, dial } => self.link_up(now, link, peer, dial, d, out),
            Input::Line { link, msg } => self.line(now, link, msg, d, out),
            Input::LinkDown { link, end } => self.link_down(now, link, end),
            Input::DialFailed { gen, failure } => self.dial_failed(now, gen, failure),
            Input::Probed { peer, inc, alive } => {
                self.probing.remove(&peer);
                if alive {
                    self.not_before.remove(&peer);
                } else {
                    self.declare_dead(now, peer, inc, out);
                }
            }
            Input::PollDone {
                self_dial,
                lines,
                unreachable,
            } => {
                self.polling = false;
                for m in &lines {
                    if matches!(m, RingMsg::Add { .. } | RingMsg::Remove { .. }) {
                        self.merge_member(now, m, None, out);
                    }
                }
                // A member the seed lists but nobody answers at: probe it
                // (the poll is every member's second pair of eyes).
                for a in unreachable {
                    self.suspect_member(a);
                }
                self.next_poll = self.poll_after(now, self_dial);
            }
            Input::Local(events) => self.broadcast_events(&events, None, out),
            Input::Leave => {
                self.leave(now, out);
                return;
            }
        }
        self.reconcile(now, out);
    }

    // ---- timers ------------------------------------------------------------

    fn tick(&mut self, now: Tick, out: &mut Vec<Output>) {
        self.membership.expire(now);
        self.not_before.retain(|_, t| now < *t);
        let silence = self.cfg.ping_interval + self.cfg.ping_timeout;
        let silent: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(_, l)| now >= l.last_heard + silence)
            .map(|(id, _)| *id)
            .collect();
        for id in silent {
            out.push(Output::Drop { link: id });
            self.link_down(now, id, End::Lost);
        }
        for (id, l) in self.links.iter_mut() {
            if now >= l.next_ping {
                out.push(Output::Send {
                    link: *id,
                    msgs: vec![RingMsg::Ping],
                });
                l.next_ping = now + self.cfg.ping_interval;
            }
        }
        if let (Some(at), Some(every)) = (self.next_anti_entropy, self.cfg.anti_entropy) {
            if now >= at {
                let msgs = self.member_msgs(now);
                self.send_all(&msgs, None, out);
                self.next_anti_entropy = Some(now + every);
            }
        }
        if !self.polling && self.next_poll.is_some_and(|t| now >= t) && !self.leaving {
            self.polling = true;
            out.push(Output::Poll);
        }
        self.watch_unlinked(now);
    }

    /// Probes a neighbour nothing connects us to for `UNLINKED_GRACE`.
    fn watch_unlinked(&mut self, now: Tick) {
        let neighbours: BTreeSet<SocketAddr> = [self.membership.left(), self.membership.right()]
            .into_iter()
            .flatten()
            .collect();
        self.unlinked.retain(|a, _| neighbours.contains(a));
        for n in neighbours {
            if self.links.values().any(|l| l.peer == n) {
                self.unlinked.remove(&n);
                continue;
            }
            let since = *self.unlinked.entry(n).or_insert(now);
            if now.saturating_sub(since) >= UNLINKED_GRACE {
                self.unlinked.insert(n, now);
                self.suspect(n);
            }
        }
    }

    /// When the next seed poll is due: `seed_poll_interval` below
    /// `min_members`, `seed_poll_idle_interval` at it, 500 ms after a
    /// self-dial; None when polling once.
    fn poll_after(&self, now: Tick, self_dial: bool) -> Option<Tick> {
        if !self.cfg.has_seeds {
            return None;
        }
        if self_dial {
            return Some(now + SELF_DIAL_RETRY);
        }
        let every = self.cfg.seed_poll?;
        Some(
            now + if self.membership.len() >= self.cfg.min_members {
                self.cfg.seed_poll_idle
            } else {
                every
            },
        )
    }

    /// Below `min_members` again: the slow idle poll snaps back.
    fn membership_changed(&mut self, now: Tick) {
        if let (Some(every), Some(next)) = (self.cfg.seed_poll, self.next_poll) {
            if self.membership.len() < self.cfg.min_members && next > now + every {
                self.next_poll = Some(now + every);
            }
        }
    }

    // ---- connections ---------------------------------------------------------

    fn link_up(
        &mut self,
        now: Tick,
        link: LinkId,
        peer: SocketAddr,
        dial: Option<u64>,
        d: &Director,
        out: &mut Vec<Output>,
    ) {
        if self.leaving {
            out.push(Output::Close {
                link,
                reason: "shutting down",
            });
            return;
        }
        if let Some(gen) = dial {
            match self.dial.as_mut() {
                Some(cur) if cur.gen == gen && cur.link.is_none() && cur.peer == peer => {
                    cur.link = Some(link);
                }
                _ => {
                    // A dial we gave up on (re-targeted meanwhile).
                    out.push(Output::Close {
                        link,
                        reason: "retarget",
                    });
                    return;
                }
            }
        }
        self.links.insert(
            link,
            Link {
                peer,
                dialed: dial.is_some(),
                last_heard: now,
                next_ping: now + self.cfg.ping_interval,
                synced: false,
                digest: None,
                owed: false,
            },
        );
        self.not_before.remove(&peer);
        out.push(Output::Send {
            link,
            msgs: self.snapshot(now, d),
        });
    }

    fn link_down(&mut self, now: Tick, link: LinkId, end: End) {
        let Some(l) = self.links.remove(&link) else {
            return;
        };
        if self.dial.as_ref().and_then(|d| d.link) == Some(link) {
            self.dial = None;
        }
        match end {
            End::Ours => {}
            End::PeerQuit => {
                self.not_before.insert(l.peer, now + QUIT_RETRY);
            }
            End::Lost => self.suspect(l.peer),
        }
    }

    fn dial_failed(&mut self, now: Tick, gen: u64, failure: DialFailure) {
        let Some(d) = self.dial.filter(|d| d.gen == gen && d.link.is_none()) else {
            return;
        };
        self.dial = None;
        match failure {
            DialFailure::Unreachable => {
                self.not_before.insert(d.peer, now + QUIT_RETRY);
                self.suspect(d.peer);
            }
            DialFailure::Refused => {
                self.not_before.insert(d.peer, now + JOIN_RETRY);
            }
        }
    }

    fn line(
        &mut self,
        now: Tick,
        link: LinkId,
        msg: RingMsg,
        d: &mut Director,
        out: &mut Vec<Output>,
    ) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        l.last_heard = now;
        match msg {
            RingMsg::Ping => out.push(Output::Send {
                link,
                msgs: vec![RingMsg::Pong],
            }),
            RingMsg::Pong => {}
            RingMsg::SyncDone { digest } => {
                l.synced = true;
                l.digest = digest;
                let owed = std::mem::take(&mut l.owed);
                if !self.caught_up {
                    // What this director took in without passing it on
                    // goes to its other connections in one snapshot — to
                    // each whose own snapshot showed a different state
                    // (now, or when that snapshot is complete).
                    self.caught_up = true;
                    let mine = d.digest(now);
                    let mut send = Vec::new();
                    for (id, other) in self.links.iter_mut() {
                        if *id == link {
                            continue;
                        }
                        if !other.synced {
                            other.owed = true;
                        } else if other.digest != Some(mine) {
                            send.push(*id);
                        }
                    }
                    self.send_snapshot(now, d, &send, out);
                } else if owed && digest != Some(d.digest(now)) {
                    self.send_snapshot(now, d, &[link], out);
                }
            }
            RingMsg::Quit { .. } => {
                out.push(Output::Drop { link });
                self.link_down(now, link, End::PeerQuit);
            }
            RingMsg::Add { .. } | RingMsg::Remove { .. } => {
                self.merge_member(now, &msg, Some(link), out)
            }
            RingMsg::Event(e) => {
                let forward = self.caught_up || l.synced;
                self.apply_event(now, &e, Some(link), forward, d, out)
            }
            RingMsg::User(r) => {
                let forward = self.caught_up || l.synced;
                self.apply_event(now, &RingEvent::Assign(r), Some(link), forward, d, out)
            }
            // Handshake lines have no meaning on an established connection.
            _ => {}
        }
    }

    // ---- broadcast -------------------------------------------------------------

    fn send_snapshot(&self, now: Tick, d: &Director, links: &[LinkId], out: &mut Vec<Output>) {
        if links.is_empty() {
            return;
        }
        let snapshot = self.snapshot(now, d);
        for id in links {
            out.push(Output::Send {
                link: *id,
                msgs: snapshot.clone(),
            });
        }
    }

    fn send_all(&self, msgs: &[RingMsg], except: Option<LinkId>, out: &mut Vec<Output>) {
        if msgs.is_empty() {
            return;
        }
        for id in self.links.keys() {
            if Some(*id) != except {
                out.push(Output::Send {
                    link: *id,
                    msgs: msgs.to_vec(),
                });
            }
        }
    }

    fn broadcast_events(
        &self,
        events: &[RingEvent],
        except: Option<LinkId>,
        out: &mut Vec<Output>,
    ) {
        let msgs: Vec<RingMsg> = events.iter().cloned().map(RingMsg::Event).collect();
        self.send_all(&msgs, except, out);
    }

    // ---- merging ---------------------------------------------------------------

    fn merge_member(
        &mut self,
        now: Tick,
        msg: &RingMsg,
        from: Option<LinkId>,
        out: &mut Vec<Output>,
    ) {
        let change = match *msg {
            RingMsg::Add { addr, inc } => self.membership.add(addr, inc),
            RingMsg::Remove { addr, inc, ttl_ms } => self.membership.remove(addr, inc, ttl_ms, now),
            _ => Change::None,
        };
        match change {
            Change::None => {}
            Change::Changed => {
                match msg {
                    RingMsg::Add { addr, .. } => out.push(Output::MemberJoined(*addr)),
                    RingMsg::Remove { addr, .. } => out.push(Output::MemberLeft(*addr)),
                    _ => {}
                }
                self.send_all(std::slice::from_ref(msg), from, out);
                self.membership_changed(now);
            }
            Change::Refuted(inc) => {
                out.push(Output::Refuted(inc));
                let me = RingMsg::Add {
                    addr: self.cfg.me,
                    inc,
                };
                self.send_all(&[me], None, out);
                self.membership_changed(now);
            }
        }
    }

    /// Applies a routing-state change from a peer and forwards what
    /// changed here.
    fn apply_event(
        &mut self,
        now: Tick,
        event: &RingEvent,
        from: Option<LinkId>,
        forward: bool,
        d: &mut Director,
        out: &mut Vec<Output>,
    ) {
        let mut removals = Vec::new();
        let mut kicks = Vec::new();
        let mut admin_kicks = Vec::new();
        let mut released = Vec::new();
        match event {
            RingEvent::Assign(r) => {
                if let Some((_, k)) = d.merge_user(now, r) {
                    kicks = k;
                }
            }
            RingEvent::Backend(s) => {
                d.apply_backend(now, s);
            }
            RingEvent::Up(up) => {
                if let UpOutcome::Retagged(r) = d.backend_up(now, up) {
                    removals.push(r);
                }
            }
            RingEvent::Down { ip, seq } => {
                if let BackendOutcome::Removed(r) = d.backend_down(now, *ip, *seq) {
                    removals.push(r);
                }
            }
            RingEvent::Flush { ip, seq } => {
                d.backend_flush(now, *ip, *seq);
            }
            RingEvent::Remove { ip, seq } => {
                if let (_, Some(r)) = d.merge_backend_remove(now, *ip, *seq) {
                    removals.push(r);
                }
            }
            RingEvent::Vhosts { ip, vhosts } => {
                d.set_vhosts(*ip, *vhosts);
            }
            RingEvent::SessionOpen(r) => {
                d.merge_session_open(now, r);
            }
            RingEvent::SessionClose { id, origin, seq } => {
                if let (_, Some(c)) = d.merge_session_close(now, id, *origin, *seq) {
                    released.push(c);
                }
            }
            RingEvent::Kick {
                user,
                backend,
                origin,
                seq,
            } => {
                if let Some(k) = d.merge_kick(now, user, *backend, *origin, *seq) {
                    admin_kicks.push(k);
                }
            }
        }
        let events = d.take_events();
        if forward {
            self.broadcast_events(&events, from, out);
        }
        out.extend(removals.into_iter().map(Output::Removed));
        if !kicks.is_empty() {
            out.push(Output::Kick(kicks));
        }
        if !admin_kicks.is_empty() {
            out.push(Output::AdminKick(admin_kicks));
        }
        out.extend(released.into_iter().map(Output::Released));
    }

    // ---- death and leave ---------------------------------------------------------

    /// A connection to `peer` was lost or a dial failed: if it is a
    /// neighbour, confirm with probes before declaring it dead.
    fn suspect(&mut self, peer: SocketAddr) {
        if !self.membership.is_neighbour(peer) {
            return;
        }
        self.suspect_member(peer);
    }

    fn suspect_member(&mut self, peer: SocketAddr) {
        if self.leaving || peer == self.cfg.me {
            return;
        }
        let Some(inc) = self.membership.inc_of(peer) else {
            return;
        };
        if self.probing.insert(peer) {
            self.pending_probes.push((peer, inc));
        }
    }

    fn declare_dead(&mut self, now: Tick, peer: SocketAddr, inc: u64, out: &mut Vec<Output>) {
        if self.membership.inc_of(peer) != Some(inc) {
            return;
        }
        let Some(inc) = self.membership.declare_dead(peer, now) else {
            return;
        };
        let ttl_ms = self.membership.tomb_ttl(peer, now);
        self.deaths_declared += 1;
        out.push(Output::DeclaredDead(peer));
        // Over the current connections, before the neighbours change.
        self.send_all(
            &[RingMsg::Remove {
                addr: peer,
                inc,
                ttl_ms,
            }],
            None,
            out,
        );
        self.membership_changed(now);
    }

    /// Graceful leave: announce our own removal, then QUIT every
    /// connection; joins are refused from now on.
    fn leave(&mut self, now: Tick, out: &mut Vec<Output>) {
        if self.leaving {
            return;
        }
        let inc = self.membership.leave(now);
        let ttl_ms = self.membership.tomb_ttl(self.cfg.me, now);
        self.leaving = true;
        self.send_all(
            &[RingMsg::Remove {
                addr: self.cfg.me,
                inc,
                ttl_ms,
            }],
            None,
            out,
        );
        for id in std::mem::take(&mut self.links).into_keys() {
            out.push(Output::Close {
                link: id,
                reason: "shutting down",
            });
        }
        self.dial = None;
        self.next_poll = None;
    }

    // ---- the one outgoing connection ---------------------------------------------

    /// Starts pending probes and points the outgoing connection at the
    /// right neighbour.
    fn reconcile(&mut self, now: Tick, out: &mut Vec<Output>) {
        for (peer, inc) in std::mem::take(&mut self.pending_probes) {
            out.push(Output::Probe { peer, inc });
        }
        if self.leaving {
            return;
        }
        let target = self.membership.dial_target();
        if let Some(d) = self.dial {
            if Some(d.peer) == target {
                return;
            }
            if let Some(link) = d.link {
                self.links.remove(&link);
                out.push(Output::Close {
                    link,
                    reason: "retarget",
                });
            }
            self.dial = None;
        }
        let Some(target) = target else {
            return;
        };
        if self.probing.contains(&target) || self.not_before.get(&target).is_some_and(|t| now < *t)
        {
            return;
        }
        self.gen += 1;
        self.dial = Some(Dial {
            peer: target,
            gen: self.gen,
            link: None,
        });
        out.push(Output::Dial {
            peer: target,
            gen: self.gen,
        });
    }
}
