//! The backend set: who may serve users, per tag, and how each one got
//! there.
//!
//! Sources and their lifecycle (deployment seed, "backend liveness"):
//! - `Static` (`mail_servers`) and `Admin` (admin API add): never expire.
//! - `Registered` (BACKEND-UP from the backend-reg sidecar): a lease kept
//!   alive by heartbeats with a per-origin monotonic `seq`; a heartbeat is
//!   accepted only if its seq is newer than any seen from that IP, so a
//!   delayed packet never resurrects a backend that said goodbye.
//!
//! A backend is identified by its IP (one pod = one ring entry serving
//! every protocol; the login dials its own protocol port on that IP).
//! Slots are indexed by a small [`BackendId`] so user entries stay compact;
//! a slot is reused only after every reference to it has been purged.

use std::collections::HashMap;
use std::net::IpAddr;

use yarilo_config::HashMode;

use crate::ring::Ring;
use crate::{Proto, Tick};

/// Index of a backend slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(pub u16);

/// Index of an interned tag ("" is the untagged pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagId(pub u16);

/// How a backend joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `director_service.mail_servers`; never expires.
    Static,
    /// Admin API add; never expires.
    Admin,
    /// Self-registration; expires without heartbeats.
    Registered,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Static => "static",
            Source::Admin => "admin",
            Source::Registered => "registered",
        }
    }
}

/// One backend pod.
#[derive(Debug, Clone)]
pub struct Backend {
    pub ip: IpAddr,
    /// Nominal port; the login overrides it with its protocol port.
    pub port: u16,
    pub tag: TagId,
    /// Ring weight 0..=100.
    pub vhosts: u32,
    pub source: Source,
    /// When the last accepted heartbeat arrived (registered only).
    pub last_seen: Tick,
    /// BACKEND-FLUSH: keeps its slice and its pinned users, takes no new
    /// ones. Cleared by the next BACKEND-UP.
    pub draining: bool,
    /// Admin flush: like `draining`, but only the admin API ends it.
    pub admin_drain: bool,
    /// Live sessions on it, in total and per protocol.
    pub sessions: u32,
    pub sessions_by_proto: [u32; Proto::COUNT],
    /// Recent "unreachable" reports: (reporter, when).
    pub(crate) reports: Vec<(String, Tick)>,
}

impl Backend {
    /// Whether a new user may be placed here.
    pub fn takes_new_users(&self) -> bool {
        !self.draining && !self.admin_drain && self.vhosts > 0
    }
}

/// The backends, their tags and the per-tag rings (rebuilt lazily).
#[derive(Debug)]
pub struct BackendSet {
    mode: HashMode,
    slots: Vec<Option<Backend>>,
    by_ip: HashMap<IpAddr, BackendId>,
    tags: Vec<String>,
    tag_ids: HashMap<String, TagId>,
    rings: Vec<Option<Ring>>,
    /// Highest heartbeat seq seen per registering IP, kept after removal
    /// (with the time it was seen) so a reordered heartbeat stays stale.
    seen_seq: HashMap<IpAddr, (u64, Tick)>,
}

/// Most backends the set holds (slot index is 16 bits).
pub const MAX_BACKENDS: usize = u16::MAX as usize;
/// Most distinct tags.
pub const MAX_TAGS: usize = 4096;

impl BackendSet {
    pub fn new(mode: HashMode) -> BackendSet {
        BackendSet {
            mode,
            slots: Vec::new(),
            by_ip: HashMap::new(),
            tags: Vec::new(),
            tag_ids: HashMap::new(),
            rings: Vec::new(),
            seen_seq: HashMap::new(),
        }
    }

    pub fn tag_id(&self, tag: &str) -> Option<TagId> {
        self.tag_ids.get(tag).copied()
    }

    pub fn tag_name(&self, tag: TagId) -> &str {
        self.tags.get(tag.0 as usize).map_or("", |s| s.as_str())
    }

    fn intern_tag(&mut self, tag: &str) -> Option<TagId> {
        if let Some(id) = self.tag_ids.get(tag) {
            return Some(*id);
        }
        if self.tags.len() >= MAX_TAGS {
            return None;
        }
        let id = TagId(self.tags.len() as u16);
        self.tags.push(tag.to_string());
        self.tag_ids.insert(tag.to_string(), id);
        self.rings.push(None);
        Some(id)
    }

    pub fn get(&self, id: BackendId) -> Option<&Backend> {
        self.slots.get(id.0 as usize).and_then(|s| s.as_ref())
    }

    pub fn get_mut(&mut self, id: BackendId) -> Option<&mut Backend> {
        self.slots.get_mut(id.0 as usize).and_then(|s| s.as_mut())
    }

    pub fn by_ip(&self, ip: IpAddr) -> Option<BackendId> {
        self.by_ip.get(&ip).copied()
    }

    /// Every backend, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (BackendId, &Backend)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|b| (BackendId(i as u16), b)))
    }

    /// Backends of one tag.
    pub fn in_tag(&self, tag: TagId) -> impl Iterator<Item = (BackendId, &Backend)> {
        self.iter().filter(move |(_, b)| b.tag == tag)
    }

    pub fn count_in_tag(&self, tag: TagId) -> usize {
        self.in_tag(tag).count()
    }

    pub fn len(&self) -> usize {
        self.by_ip.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty()
    }

    /// Marks a tag's ring for rebuilding.
    pub fn invalidate(&mut self, tag: TagId) {
        if let Some(r) = self.rings.get_mut(tag.0 as usize) {
            *r = None;
        }
    }

    /// Adds a backend. `None` when the IP is already present or a limit is
    /// reached (state unchanged).
    pub fn insert(
        &mut self,
        ip: IpAddr,
        port: u16,
        tag: &str,
        vhosts: u32,
        source: Source,
        now: Tick,
    ) -> Option<BackendId> {
        if self.by_ip.contains_key(&ip) {
            return None;
        }
        let tag = self.intern_tag(tag)?;
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.slots.len() < MAX_BACKENDS => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return None,
        };
        let id = BackendId(slot as u16);
        self.slots[slot] = Some(Backend {
            ip,
            port,
            tag,
            vhosts: vhosts.min(100),
            source,
            last_seen: now,
            draining: false,
            admin_drain: false,
            sessions: 0,
            sessions_by_proto: [0; Proto::COUNT],
            reports: Vec::new(),
        });
        self.by_ip.insert(ip, id);
        self.invalidate(tag);
        Some(id)
    }

    /// Removes a backend from the set and its ring. The caller purges
    /// every reference to `id` before the slot can be reused.
    pub fn remove(&mut self, id: BackendId) -> Option<Backend> {
        let backend = self.slots.get_mut(id.0 as usize)?.take()?;
        self.by_ip.remove(&backend.ip);
        self.invalidate(backend.tag);
        Some(backend)
    }

    pub fn set_vhosts(&mut self, id: BackendId, vhosts: u32) {
        if let Some(b) = self.get_mut(id) {
            if b.vhosts != vhosts.min(100) {
                b.vhosts = vhosts.min(100);
                let tag = b.tag;
                self.invalidate(tag);
            }
        }
    }

    /// Records a heartbeat seq from `ip`; false when it is not newer than
    /// one already seen (stale: ignore the message).
    pub fn accept_seq(&mut self, ip: IpAddr, seq: u64, now: Tick) -> bool {
        match self.seen_seq.get(&ip) {
            Some((seen, _)) if seq <= *seen => false,
            _ => {
                self.seen_seq.insert(ip, (seq, now));
                true
            }
        }
    }

    /// The newest heartbeat seq seen from `ip`.
    pub fn seq_of(&self, ip: IpAddr) -> Option<u64> {
        self.seen_seq.get(&ip).map(|(seq, _)| *seq)
    }

    /// Whether `seq` is older than the newest seen from `ip`.
    pub fn is_stale(&self, ip: IpAddr, seq: u64) -> bool {
        self.seen_seq.get(&ip).is_some_and(|(seen, _)| seq < *seen)
    }

    /// Forgets seqs of absent backends older than `keep` (they can only be
    /// replayed by a restart, which resumes above them anyway).
    pub fn prune_seqs(&mut self, now: Tick, keep: u64) {
        let by_ip = &self.by_ip;
        self.seen_seq
            .retain(|ip, (_, at)| by_ip.contains_key(ip) || now.saturating_sub(*at) < keep);
    }

    /// The ring of `tag`, rebuilt if a change invalidated it.
    pub fn ring(&mut self, tag: TagId) -> Option<&Ring> {
        let idx = tag.0 as usize;
        if idx >= self.rings.len() {
            return None;
        }
        if self.rings[idx].is_none() {
            let members: Vec<_> = self
                .in_tag(tag)
                .map(|(id, b)| (id, b.ip, b.vhosts))
                .collect();
            self.rings[idx] = Some(Ring::build(self.mode, &members));
        }
        self.rings[idx].as_ref()
    }

    /// Splits the borrow: the ring of `tag` plus read access to backends.
    pub fn ring_and_slots(&mut self, tag: TagId) -> Option<(&Ring, &[Option<Backend>])> {
        self.ring(tag)?;
        let ring = self.rings.get(tag.0 as usize)?.as_ref()?;
        Some((ring, &self.slots))
    }
}

/// Reads a slot list (used with [`BackendSet::ring_and_slots`]).
pub fn slot(slots: &[Option<Backend>], id: BackendId) -> Option<&Backend> {
    slots.get(id.0 as usize).and_then(|s| s.as_ref())
}
