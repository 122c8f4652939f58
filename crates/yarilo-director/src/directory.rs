//! The user directory: sticky user → backend assignments.
//!
//! Keyed by (tag, 32-bit user hash) like the reference (two names with one
//! hash share a pin, which is harmless: they only share a backend). Each
//! entry is 16 bytes — Lamport seq (62 bits) + flags, last-use time in
//! seconds, backend slot, interned director id — so with the 8-byte key a
//! million active users cost ~50 MB including the table's slack.
//!
//! Assignments carry a Lamport [`Stamp`] (seq, director id): the higher seq
//! wins, a tie goes to the lower director id. That is the order the ring
//! (issue 11) merges replicated assignments in; [`UserDirectory::merge`]
//! is that merge, already usable by a single replica.
//!
//! Invariant: an entry never names a removed backend — removal purges
//! (see [`UserDirectory::purge_backend`]) before the slot is reused.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::backend::{BackendId, TagId};

/// A director's identity in Lamport tie-breaks. For an IPv4 member it is
/// `ip << 16 | port`, so ids order like members do (by IP, then port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DirectorId(pub u64);

impl DirectorId {
    pub fn from_addr(addr: std::net::SocketAddr) -> DirectorId {
        match addr.ip() {
            std::net::IpAddr::V4(v4) => {
                DirectorId((u64::from(u32::from(v4)) << 16) | u64::from(addr.port()))
            }
            std::net::IpAddr::V6(v6) => {
                // Above every IPv4 id; the low bits keep the address order
                // as far as 48 bits allow.
                let bits = u128::from(v6);
                DirectorId((1 << 63) | ((bits >> 80) as u64) << 15 | u64::from(addr.port() >> 1))
            }
        }
    }
}

/// Lamport order of an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub seq: u64,
    pub by: DirectorId,
}

impl Stamp {
    /// Whether `self` wins over `other`: higher seq, then lower id.
    pub fn beats(&self, other: &Stamp) -> bool {
        self.seq > other.seq || (self.seq == other.seq && self.by < other.by)
    }
}

/// Highest seq a stamp can carry (2 bits of the word are flags).
pub const MAX_SEQ: u64 = (1 << 62) - 1;
const WEAK: u64 = 1 << 62;

/// (tag, user hash) packed into one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UserKey(pub u64);

impl UserKey {
    pub fn new(tag: TagId, hash: u32) -> UserKey {
        UserKey((u64::from(tag.0) << 32) | u64::from(hash))
    }
    pub fn tag(self) -> TagId {
        TagId((self.0 >> 32) as u16)
    }
    pub fn hash(self) -> u32 {
        self.0 as u32
    }
}

/// The packed entry (16 bytes).
#[derive(Debug, Clone, Copy)]
struct Entry {
    seq_flags: u64,
    used_secs: u32,
    backend: u16,
    by: u16,
}

/// An assignment as callers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assignment {
    pub backend: BackendId,
    /// Seconds (of the injected clock) of the last use.
    pub used_secs: u32,
    pub stamp: Stamp,
    /// Set while a move is in flight (reserved for moves / the ring).
    pub weak: bool,
}

/// The keys are already MD5 output; a multiply spreads the tag bits.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// What [`UserDirectory::merge`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeOutcome {
    /// New entry.
    Inserted,
    /// The remote stamp won. `moved_from` is the old backend when it
    /// differs: its sessions for this user must be kicked.
    Replaced { moved_from: Option<BackendId> },
    /// The local stamp won; nothing changed.
    Kept,
}

/// The sticky assignments.
#[derive(Debug, Default)]
pub struct UserDirectory {
    map: HashMap<UserKey, Entry, BuildHasherDefault<KeyHasher>>,
    /// Interned director ids (index in `Entry::by`).
    directors: Vec<DirectorId>,
    expire_secs: u32,
}

impl UserDirectory {
    pub fn new(expire_secs: u32) -> UserDirectory {
        UserDirectory {
            map: HashMap::default(),
            directors: Vec::new(),
            expire_secs: expire_secs.max(1),
        }
    }

    pub fn expire_secs(&self) -> u32 {
        self.expire_secs
    }

    fn intern(&mut self, id: DirectorId) -> u16 {
        if let Some(i) = self.directors.iter().position(|d| *d == id) {
            return i as u16;
        }
        // The ring holds a handful of directors over its life; past the
        // index space the last slot is shared (only tie-breaks degrade).
        if self.directors.len() > u16::MAX as usize {
            return u16::MAX;
        }
        self.directors.push(id);
        (self.directors.len() - 1) as u16
    }

    fn view(&self, e: &Entry) -> Assignment {
        Assignment {
            backend: BackendId(e.backend),
            used_secs: e.used_secs,
            stamp: Stamp {
                seq: e.seq_flags & MAX_SEQ,
                by: self
                    .directors
                    .get(e.by as usize)
                    .copied()
                    .unwrap_or(DirectorId(u64::MAX)),
            },
            weak: e.seq_flags & WEAK != 0,
        }
    }

    fn live(&self, e: &Entry, now_secs: u32) -> bool {
        now_secs.saturating_sub(e.used_secs) < self.expire_secs
    }

    /// The live assignment of `key`.
    pub fn get(&self, key: UserKey, now_secs: u32) -> Option<Assignment> {
        let e = self.map.get(&key)?;
        self.live(e, now_secs).then(|| self.view(e))
    }

    /// Refreshes the last-use time of a live entry; false if none.
    pub fn touch(&mut self, key: UserKey, now_secs: u32) -> bool {
        let expire = self.expire_secs;
        match self.map.get_mut(&key) {
            Some(e) if now_secs.saturating_sub(e.used_secs) < expire => {
                e.used_secs = e.used_secs.max(now_secs);
                true
            }
            _ => false,
        }
    }

    /// Sets the assignment unconditionally (a local decision).
    pub fn pin(&mut self, key: UserKey, backend: BackendId, stamp: Stamp, now_secs: u32) {
        let by = self.intern(stamp.by);
        self.map.insert(
            key,
            Entry {
                seq_flags: stamp.seq.min(MAX_SEQ),
                used_secs: now_secs,
                backend: backend.0,
                by,
            },
        );
    }

    /// Merges a replicated assignment in Lamport order.
    pub fn merge(
        &mut self,
        key: UserKey,
        backend: BackendId,
        stamp: Stamp,
        now_secs: u32,
    ) -> MergeOutcome {
        match self
            .map
            .get(&key)
            .map(|e| (self.view(e), self.live(e, now_secs)))
        {
            Some((local, true)) => {
                if !stamp.beats(&local.stamp) {
                    return MergeOutcome::Kept;
                }
                self.pin(key, backend, stamp, now_secs.max(local.used_secs));
                let moved_from = (local.backend != backend).then_some(local.backend);
                MergeOutcome::Replaced { moved_from }
            }
            _ => {
                self.pin(key, backend, stamp, now_secs);
                MergeOutcome::Inserted
            }
        }
    }

    pub fn remove(&mut self, key: UserKey) -> Option<Assignment> {
        let e = self.map.remove(&key)?;
        Some(self.view(&e))
    }

    /// Drops every entry naming `backend`; returns how many.
    pub fn purge_backend(&mut self, backend: BackendId) -> usize {
        let before = self.map.len();
        self.map.retain(|_, e| e.backend != backend.0);
        before - self.map.len()
    }

    /// Drops expired entries; returns how many.
    pub fn sweep(&mut self, now_secs: u32) -> usize {
        let before = self.map.len();
        let expire = self.expire_secs;
        self.map
            .retain(|_, e| now_secs.saturating_sub(e.used_secs) < expire);
        before - self.map.len()
    }

    /// Entries held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every entry (for the ring's USER stream and admin listings).
    pub fn iter(&self) -> impl Iterator<Item = (UserKey, Assignment)> + '_ {
        self.map.iter().map(|(k, e)| (*k, self.view(e)))
    }

    /// Bytes the table occupies: buckets × (key + entry + control byte).
    pub fn table_bytes(&self) -> usize {
        let cap = self.map.capacity();
        if cap == 0 {
            return 0;
        }
        // hashbrown keeps at most 7/8 of its power-of-two buckets full.
        let buckets = if cap < 8 {
            (cap + 1).next_power_of_two()
        } else {
            (cap * 8 / 7).next_power_of_two()
        };
        buckets * (std::mem::size_of::<(UserKey, Entry)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: DirectorId = DirectorId(1);
    const D2: DirectorId = DirectorId(2);

    fn key(h: u32) -> UserKey {
        UserKey::new(TagId(3), h)
    }

    #[test]
    fn entry_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        assert_eq!(std::mem::size_of::<(UserKey, Entry)>(), 24);
    }

    #[test]
    fn key_packs_tag_and_hash() {
        let k = UserKey::new(TagId(7), 0xdead_beef);
        assert_eq!(k.tag(), TagId(7));
        assert_eq!(k.hash(), 0xdead_beef);
    }

    #[test]
    fn entries_expire_unless_touched() {
        let mut d = UserDirectory::new(10);
        let s = Stamp { seq: 1, by: D1 };
        d.pin(key(1), BackendId(0), s, 100);
        assert!(d.get(key(1), 109).is_some());
        assert!(d.touch(key(1), 109));
        assert!(d.get(key(1), 118).is_some());
        assert!(d.get(key(1), 119).is_none());
        assert!(!d.touch(key(1), 119));
        assert_eq!(d.sweep(119), 1);
        assert!(d.is_empty());
    }

    #[test]
    fn lamport_merge_higher_seq_then_lower_id_wins() {
        let mut d = UserDirectory::new(100);
        let a = BackendId(1);
        let b = BackendId(2);
        assert_eq!(
            d.merge(key(9), a, Stamp { seq: 5, by: D2 }, 0),
            MergeOutcome::Inserted
        );
        // Lower seq loses.
        assert_eq!(
            d.merge(key(9), b, Stamp { seq: 4, by: D1 }, 0),
            MergeOutcome::Kept
        );
        // Same seq, lower id wins and reports the move.
        assert_eq!(
            d.merge(key(9), b, Stamp { seq: 5, by: D1 }, 0),
            MergeOutcome::Replaced {
                moved_from: Some(a)
            }
        );
        // Same seq, higher id loses.
        assert_eq!(
            d.merge(key(9), a, Stamp { seq: 5, by: D2 }, 0),
            MergeOutcome::Kept
        );
        let got = d.get(key(9), 0).unwrap();
        assert_eq!(got.backend, b);
        assert_eq!(got.stamp, Stamp { seq: 5, by: D1 });
    }

    #[test]
    fn purge_drops_only_that_backend() {
        let mut d = UserDirectory::new(100);
        for h in 0..10 {
            d.pin(
                key(h),
                BackendId((h % 2) as u16),
                Stamp { seq: 1, by: D1 },
                0,
            );
        }
        assert_eq!(d.purge_backend(BackendId(1)), 5);
        assert!(d.iter().all(|(_, a)| a.backend == BackendId(0)));
    }

    #[test]
    fn director_ids_order_like_members() {
        let a = DirectorId::from_addr("10.0.0.1:9102".parse().unwrap());
        let b = DirectorId::from_addr("10.0.0.1:9103".parse().unwrap());
        let c = DirectorId::from_addr("10.0.0.2:1".parse().unwrap());
        let v6 = DirectorId::from_addr("[::1]:1".parse().unwrap());
        assert!(a < b && b < c && c < v6);
    }
}
