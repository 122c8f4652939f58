//! Ring membership, pure: who is in the ring, who was removed, and whom
//! this director dials.
//!
//! Invariants (director seed, "Ring formation"; each one a failure found
//! in a live test of the reference design):
//! - Members are ordered by (ip, port) with IPs compared as numbers
//!   (`SocketAddr`'s order: 10.0.0.6 < 10.0.0.17), never as strings.
//! - A member is `(addr, incarnation)`; the incarnation grows on every
//!   restart. A tombstone `(addr, inc)` removes every incarnation up to
//!   `inc`, so merging two views is a union where a tombstone wins: a plain
//!   union on reconnect can never resurrect a member someone evicted, while
//!   a restarted director (a higher incarnation) comes back.
//! - A director that learns its own tombstone while running refutes it by
//!   raising its incarnation past it (a hung or partitioned member that
//!   was evicted rejoins by itself); while leaving it accepts it.
//! - Each member dials only its right neighbour; with two members only the
//!   lower one dials (one connection, not two racing ones).
//! - Tombstones expire after `tombstone_ttl` (None keeps them), counted
//!   from where they were created: a forwarded tombstone carries the time
//!   it has left, so gossip cannot keep one alive forever.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::Tick;

/// A removed member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tomb {
    pub inc: u64,
    /// When it is forgotten; None: never.
    pub expires: Option<Tick>,
}

/// What a merge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Known already: do not forward.
    None,
    /// The view changed: forward the message, recompute the neighbours.
    Changed,
    /// We were removed while running: our incarnation went up; announce
    /// ourselves (`DIRECTOR-ADD me inc`) everywhere.
    Refuted(u64),
}

/// The member list and tombstones of one director.
#[derive(Debug, Clone)]
pub struct Membership {
    me: SocketAddr,
    members: BTreeMap<SocketAddr, u64>,
    tombs: BTreeMap<SocketAddr, Tomb>,
    ttl: Option<Tick>,
    leaving: bool,
}

impl Membership {
    /// A ring of one. `ttl`: how long a tombstone lives (None: forever).
    pub fn new(me: SocketAddr, incarnation: u64, ttl: Option<Tick>) -> Membership {
        let mut members = BTreeMap::new();
        members.insert(me, incarnation);
        Membership {
            me,
            members,
            tombs: BTreeMap::new(),
            ttl,
            leaving: false,
        }
    }

    pub fn me(&self) -> SocketAddr {
        self.me
    }

    /// Our incarnation.
    pub fn incarnation(&self) -> u64 {
        self.members.get(&self.me).copied().unwrap_or(0)
    }

    pub fn is_leaving(&self) -> bool {
        self.leaving
    }

    /// The incarnation of a live member.
    pub fn inc_of(&self, addr: SocketAddr) -> Option<u64> {
        self.members.get(&addr).copied()
    }

    pub fn contains(&self, addr: SocketAddr) -> bool {
        self.members.contains_key(&addr)
    }

    /// Live members in ring order (ourselves included, unless leaving).
    pub fn members(&self) -> Vec<SocketAddr> {
        self.members.keys().copied().collect()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members with their incarnations (the `DIRECTOR-ADD` half of a list).
    pub fn member_list(&self) -> Vec<(SocketAddr, u64)> {
        self.members.iter().map(|(a, i)| (*a, *i)).collect()
    }

    /// Tombstones with the time each has left (the `DIRECTOR-REMOVE` half).
    pub fn tomb_list(&self, now: Tick) -> Vec<(SocketAddr, u64, Option<Tick>)> {
        self.tombs
            .iter()
            .map(|(a, t)| (*a, t.inc, t.expires.map(|e| e.saturating_sub(now))))
            .collect()
    }

    /// The time a member's tombstone has left (None: none, or kept).
    pub fn tomb_ttl(&self, addr: SocketAddr, now: Tick) -> Option<Tick> {
        self.tombs
            .get(&addr)
            .and_then(|t| t.expires.map(|e| e.saturating_sub(now)))
    }

    /// `DIRECTOR-ADD addr inc`.
    pub fn add(&mut self, addr: SocketAddr, inc: u64) -> Change {
        if addr == self.me {
            // An older life of ours may still circulate; outrun it.
            let mine = self.incarnation();
            if inc > mine && !self.leaving {
                let next = inc.saturating_add(1);
                self.members.insert(self.me, next);
                return Change::Refuted(next);
            }
            return Change::None;
        }
        if self.tombs.get(&addr).is_some_and(|t| t.inc >= inc) {
            return Change::None;
        }
        match self.members.get(&addr) {
            Some(known) if *known >= inc => Change::None,
            _ => {
                self.members.insert(addr, inc);
                Change::Changed
            }
        }
    }

    /// `DIRECTOR-REMOVE addr inc ttl_left`. `ttl_left` None: the sender
    /// keeps it forever (we then use our own ttl).
    pub fn remove(
        &mut self,
        addr: SocketAddr,
        inc: u64,
        ttl_left: Option<Tick>,
        now: Tick,
    ) -> Change {
        if addr == self.me && !self.leaving {
            let mine = self.incarnation();
            if inc >= mine {
                let next = inc.saturating_add(1);
                self.members.insert(self.me, next);
                return Change::Refuted(next);
            }
            return Change::None;
        }
        if self.tombs.get(&addr).is_some_and(|t| t.inc >= inc) {
            return Change::None;
        }
        let expires = match (ttl_left, self.ttl) {
            (Some(left), Some(ours)) => Some(now.saturating_add(left.min(ours))),
            (Some(left), None) => Some(now.saturating_add(left)),
            (None, Some(ours)) => Some(now.saturating_add(ours)),
            (None, None) => None,
        };
        self.tombs.insert(addr, Tomb { inc, expires });
        if self.members.get(&addr).is_some_and(|m| *m <= inc) {
            self.members.remove(&addr);
        }
        Change::Changed
    }

    /// Our neighbours decided `addr` is dead: tombstone its current
    /// incarnation. Returns that incarnation (None: not a member).
    pub fn declare_dead(&mut self, addr: SocketAddr, now: Tick) -> Option<u64> {
        if addr == self.me {
            return None;
        }
        let inc = self.inc_of(addr)?;
        self.remove(addr, inc, None, now);
        Some(inc)
    }

    /// Graceful leave: tombstone ourselves (to announce) and stop
    /// refuting. Returns our incarnation.
    pub fn leave(&mut self, now: Tick) -> u64 {
        let inc = self.incarnation();
        self.leaving = true;
        self.remove(self.me, inc, None, now);
        inc
    }

    /// Forgets expired tombstones; returns how many.
    pub fn expire(&mut self, now: Tick) -> usize {
        let before = self.tombs.len();
        self.tombs.retain(|_, t| t.expires.is_none_or(|e| now < e));
        before - self.tombs.len()
    }

    /// The next member after us in ring order (wrapping); None alone.
    pub fn right(&self) -> Option<SocketAddr> {
        if !self.members.contains_key(&self.me) || self.members.len() < 2 {
            return None;
        }
        self.members
            .range((
                std::ops::Bound::Excluded(self.me),
                std::ops::Bound::Unbounded,
            ))
            .next()
            .or_else(|| self.members.iter().next())
            .map(|(a, _)| *a)
            .filter(|a| *a != self.me)
    }

    /// The member before us in ring order (wrapping); None alone.
    pub fn left(&self) -> Option<SocketAddr> {
        if !self.members.contains_key(&self.me) || self.members.len() < 2 {
            return None;
        }
        self.members
            .range(..self.me)
            .next_back()
            .or_else(|| self.members.iter().next_back())
            .map(|(a, _)| *a)
            .filter(|a| *a != self.me)
    }

    /// Whom we dial: the right neighbour, except with two members where
    /// only the lower one dials (the higher one watches the accepted
    /// connection).
    pub fn dial_target(&self) -> Option<SocketAddr> {
        let right = self.right()?;
        if self.members.len() == 2 && self.me > right {
            return None;
        }
        Some(right)
    }

    /// Whether `addr` is a neighbour we watch (left or right).
    pub fn is_neighbour(&self, addr: SocketAddr) -> bool {
        self.right() == Some(addr) || self.left() == Some(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn members_order_by_ip_as_a_number_then_port() {
        let mut m = Membership::new(a("10.0.0.6:9102"), 1, None);
        m.add(a("10.0.0.17:9102"), 1);
        m.add(a("10.0.0.6:9000"), 1);
        m.add(a("9.255.0.1:9102"), 1);
        assert_eq!(
            m.members(),
            vec![
                a("9.255.0.1:9102"),
                a("10.0.0.6:9000"),
                a("10.0.0.6:9102"),
                a("10.0.0.17:9102")
            ]
        );
        assert_eq!(m.right(), Some(a("10.0.0.17:9102")));
        assert_eq!(m.left(), Some(a("10.0.0.6:9000")));
    }

    #[test]
    fn neighbours_wrap_and_a_lone_director_dials_nobody() {
        let mut m = Membership::new(a("10.0.0.3:1"), 1, None);
        assert_eq!(m.right(), None);
        assert_eq!(m.dial_target(), None);
        m.add(a("10.0.0.1:1"), 1);
        // N=2: the higher member never dials.
        assert_eq!(m.right(), Some(a("10.0.0.1:1")));
        assert_eq!(m.dial_target(), None);
        m.add(a("10.0.0.2:1"), 1);
        assert_eq!(m.right(), Some(a("10.0.0.1:1")));
        assert_eq!(m.left(), Some(a("10.0.0.2:1")));
        assert_eq!(m.dial_target(), Some(a("10.0.0.1:1")));
        let mut low = Membership::new(a("10.0.0.1:1"), 1, None);
        low.add(a("10.0.0.3:1"), 1);
        assert_eq!(low.dial_target(), Some(a("10.0.0.3:1")));
    }

    #[test]
    fn a_tombstone_wins_over_a_stale_add_but_not_a_newer_incarnation() {
        let mut m = Membership::new(a("10.0.0.1:1"), 1, Some(600_000));
        assert_eq!(m.add(a("10.0.0.2:1"), 5), Change::Changed);
        assert_eq!(m.add(a("10.0.0.2:1"), 5), Change::None);
        assert_eq!(m.remove(a("10.0.0.2:1"), 5, None, 0), Change::Changed);
        assert_eq!(m.remove(a("10.0.0.2:1"), 5, None, 0), Change::None);
        // Somebody's plain union still lists it: stays dead.
        assert_eq!(m.add(a("10.0.0.2:1"), 5), Change::None);
        assert!(!m.contains(a("10.0.0.2:1")));
        // It restarted: a new incarnation comes back.
        assert_eq!(m.add(a("10.0.0.2:1"), 6), Change::Changed);
        assert!(m.contains(a("10.0.0.2:1")));
        // The old tombstone forwarded again changes nothing.
        assert_eq!(m.remove(a("10.0.0.2:1"), 5, None, 0), Change::None);
    }

    #[test]
    fn an_evicted_running_member_refutes_its_tombstone_but_a_leaving_one_does_not() {
        let mut m = Membership::new(a("10.0.0.1:1"), 7, None);
        assert_eq!(m.remove(a("10.0.0.1:1"), 7, None, 0), Change::Refuted(8));
        assert_eq!(m.incarnation(), 8);
        assert_eq!(m.remove(a("10.0.0.1:1"), 7, None, 0), Change::None);
        let inc = m.leave(0);
        assert_eq!(inc, 8);
        assert!(!m.contains(a("10.0.0.1:1")));
        assert_eq!(m.remove(a("10.0.0.1:1"), 8, None, 0), Change::None);
        assert_eq!(m.add(a("10.0.0.1:1"), 9), Change::None);
    }

    #[test]
    fn tombstones_expire_with_the_time_they_carry() {
        let mut m = Membership::new(a("10.0.0.1:1"), 1, Some(600_000));
        m.remove(a("10.0.0.2:1"), 1, Some(1_000), 10);
        assert_eq!(m.tomb_list(500), vec![(a("10.0.0.2:1"), 1, Some(510))]);
        assert_eq!(m.expire(1_009), 0);
        assert_eq!(m.expire(1_010), 1);
        // Gone for good after the ttl: an old incarnation may be re-added,
        // and its neighbours evict it again if it is really dead.
        assert_eq!(m.add(a("10.0.0.2:1"), 1), Change::Changed);
    }

    #[test]
    fn views_merged_in_any_order_agree() {
        // Two views with members and tombstones, merged both ways.
        let ops: Vec<(bool, &str, u64)> = vec![
            (true, "10.0.0.2:1", 1),
            (true, "10.0.0.3:1", 1),
            (false, "10.0.0.3:1", 1),
            (true, "10.0.0.3:1", 2),
            (true, "10.0.0.4:1", 1),
            (false, "10.0.0.2:1", 1),
        ];
        let apply = |m: &mut Membership, op: &(bool, &str, u64)| {
            if op.0 {
                m.add(a(op.1), op.2);
            } else {
                m.remove(a(op.1), op.2, None, 0);
            }
        };
        let mut fwd = Membership::new(a("10.0.0.1:1"), 1, None);
        ops.iter().for_each(|op| apply(&mut fwd, op));
        let mut rev = Membership::new(a("10.0.0.1:1"), 1, None);
        ops.iter().rev().for_each(|op| apply(&mut rev, op));
        assert_eq!(fwd.members(), rev.members());
        assert_eq!(
            fwd.members(),
            vec![a("10.0.0.1:1"), a("10.0.0.3:1"), a("10.0.0.4:1")]
        );
    }
}
