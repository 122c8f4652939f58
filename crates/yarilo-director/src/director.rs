//! The director state machine: backends + user directory + sessions +
//! domain placements, driven by requests and a clock passed in.
//!
//! Invariants:
//! - Every placement goes through [`Director::assign_and_pin`] (LOOKUP,
//!   the admin map resolve, LMTP routing): no caller picks a backend on
//!   its own, so a user never gets two writers (deployment seed,
//!   "Initial placement policy").
//! - A live pin is honoured whatever the ring says now (stickiness), except
//!   under `domain` policy where a pin holds only while it names the
//!   domain's backend.
//! - No entry names a removed backend: removal purges pins, sessions and
//!   domain placements in the same step.
//! - The last backend of a tag is never evicted by the lease or by
//!   reports (it is kept and reported instead).
//! - Pure: no clock, no I/O, no randomness; `now` is a [`Tick`].

use std::collections::HashMap;
use std::net::IpAddr;

use md5::{Digest, Md5};
use yarilo_config::{AssignmentPolicy, DirectorService, HashMode};

use crate::backend::{slot, BackendId, BackendSet, Source, TagId};
use crate::directory::{DirectorId, MergeOutcome, Stamp, UserDirectory, UserKey, MAX_SEQ};
use crate::ring::user_hash;
use crate::session::{Session, SessionRegistry};
use crate::template::{domain_of, UsernameTemplate};
use crate::{DirectorError, Proto, Tick};

/// The settings the state machine reads (from `director_service.*`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub template: UsernameTemplate,
    pub hash_mode: HashMode,
    pub policy: AssignmentPolicy,
    pub user_expire_secs: u32,
    pub backend_expire_ms: u64,
    pub unreachable_reporters: u32,
    pub unreachable_window_ms: u64,
    pub domain_expire_secs: u32,
    /// 0 = no rebalancing.
    pub domain_rebalance_interval_ms: u64,
    pub domain_rebalance_threshold: u32,
    /// Bound on a confirmed-kill hold (`user_kill_timeout`), in ms.
    pub user_kill_timeout_ms: Tick,
}

impl Settings {
    /// Settings from the configuration; an invalid template is an error.
    pub fn from_config(c: &DirectorService) -> Result<Settings, DirectorError> {
        Ok(Settings {
            template: UsernameTemplate::parse(c.effective_username_hash())?,
            hash_mode: c.hash_mode,
            policy: c.assignment_policy,
            user_expire_secs: secs_u32(c.user_expire),
            backend_expire_ms: c.backend_expire.saturating_mul(1000),
            unreachable_reporters: c.backend_unreachable_reporters.max(1),
            unreachable_window_ms: c.backend_unreachable_window.saturating_mul(1000),
            domain_expire_secs: secs_u32(c.director_domain_expire),
            domain_rebalance_interval_ms: c.domain_rebalance_interval.saturating_mul(1000),
            domain_rebalance_threshold: c.domain_rebalance_threshold,
            user_kill_timeout_ms: c.user_kill_timeout.max(1).saturating_mul(1000),
        })
    }

    /// The defaults of `director_service`.
    pub fn defaults() -> Settings {
        // The default template is valid by construction.
        match Settings::from_config(&DirectorService::default()) {
            Ok(s) => s,
            Err(_) => unreachable!("default director settings are valid"),
        }
    }
}

fn secs_u32(s: u64) -> u32 {
    s.clamp(1, u64::from(u32::MAX)) as u32
}

fn secs(now: Tick) -> u32 {
    (now / 1000).min(u64::from(u32::MAX)) as u32
}

/// Where a user goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub backend: BackendId,
    pub ip: IpAddr,
    /// The port to dial; 0: the login's own protocol port (a registered
    /// pod, or a static backend listed without a port).
    pub port: u16,
    /// A new pin was made by this call (it must be replicated).
    pub fresh: bool,
    pub stamp: Stamp,
}

/// Why a LOOKUP cannot be answered. State unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The tag has no backend that can take the user.
    #[error("no backend available for tag `{tag}`")]
    NoBackend { tag: String },
    /// The user was just moved or kicked and the old sessions are not yet
    /// confirmed gone: retry at `until` or when sessions close (no two
    /// backends may serve one mailbox).
    #[error("user is being moved; retry shortly")]
    Held { until: Tick },
}

/// How long a move waits for the old sessions to close (confirmed-kill
/// hold) before giving up and letting LOOKUPs through, by default
/// (`director_service.user_kill_timeout`).
pub const USER_KILL_TIMEOUT: Tick = 30_000;
/// A user with no live session when the move starts confirms after this.
pub const USER_KILL_CONFIRM_GRACE: Tick = 1_000;

/// A confirmed-kill hold on one user.
#[derive(Debug, Clone)]
struct Hold {
    username: Box<str>,
    old: IpAddr,
    old_id: BackendId,
    new: Option<IpAddr>,
    until: Tick,
    /// No sessions were live: reaching `until` is a confirmation.
    offline: bool,
    /// Run the flush hook on confirmation (admin move, graceful flush).
    hook: bool,
}

/// A relocation whose old sessions are confirmed gone (or given up on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed {
    pub user: String,
    pub user_hash: u32,
    pub old: IpAddr,
    pub new: Option<IpAddr>,
    /// False when `user_kill_timeout` passed with sessions still open.
    pub confirmed: bool,
    /// The flush hook should run (deliberate relocation, confirmed).
    pub run_hook: bool,
}

/// Why a backend left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovalReason {
    /// BACKEND-DOWN (graceful leave).
    Down,
    /// No heartbeat within `backend_expire`.
    LeaseExpired,
    /// `backend_unreachable_reporters` distinct reports in the window.
    Unreachable,
    /// Admin API remove.
    Admin,
}

impl RemovalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::Down => "down",
            RemovalReason::LeaseExpired => "lease_expired",
            RemovalReason::Unreachable => "unreachable",
            RemovalReason::Admin => "admin",
        }
    }
}

/// A backend removal and what it released. The sessions listed were on
/// it; their users re-route on their next LOOKUP (kicking them is the
/// caller's business).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub ip: IpAddr,
    pub tag: String,
    pub reason: RemovalReason,
    pub users_unpinned: usize,
    pub sessions: Vec<Session>,
}

/// A kick order for the login pods: end `user`'s sessions on `backend`.
/// `user` is the username as the sessions were opened with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kick {
    pub user: String,
    pub backend: IpAddr,
}

impl Removal {
    /// One kick per distinct user that had a session on the removed pod.
    pub fn kicks(&self) -> Vec<Kick> {
        let mut users: Vec<&str> = self.sessions.iter().map(|s| &*s.username).collect();
        users.sort_unstable();
        users.dedup();
        users
            .into_iter()
            .map(|u| Kick {
                user: u.to_string(),
                backend: self.ip,
            })
            .collect()
    }
}

/// Why an admin move failed. State unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    #[error("no backend {0}")]
    UnknownBackend(IpAddr),
    #[error("backend {ip} serves tag `{actual}`, not `{wanted}`")]
    WrongTag {
        ip: IpAddr,
        actual: String,
        wanted: String,
    },
}

/// A completed admin move: the new pin, and where the user was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub from: Option<IpAddr>,
    pub to: IpAddr,
    pub stamp: Stamp,
}

/// A `BACKEND-UP` heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendUp {
    pub ip: IpAddr,
    pub port: u16,
    pub tag: String,
    pub vhosts: u32,
    pub seq: u64,
}

/// What a heartbeat did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpOutcome {
    /// New registered backend.
    Added,
    /// Lease refreshed (and port / vhosts / drain updated).
    Refreshed,
    /// A static or admin backend: nothing to lease; drain cleared.
    Permanent,
    /// Re-registered under another tag: removed from the old one first.
    Retagged(Removal),
    /// Seq not newer than one already seen: ignored.
    Stale,
    /// A limit (backends, tags) was reached: ignored.
    Refused,
}

/// What BACKEND-DOWN / BACKEND-FLUSH / an unreachable report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendOutcome {
    Removed(Removal),
    Draining,
    /// Report recorded; this many distinct reporters in the window.
    Reported(usize),
    /// Would evict, but it is the last backend of its tag.
    KeptLast,
    Stale,
    Unknown,
    /// Static / admin backends leave only through the admin API.
    NotRegistered,
}

/// What a tick did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    pub removed: Vec<Removal>,
    /// Lease-expired backends kept because each is the last of its tag
    /// (reported once per silence).
    pub kept_last: Vec<IpAddr>,
    pub users_expired: usize,
    pub pins_refreshed: usize,
    pub domains_moved: usize,
    /// Holds released by confirmation or timeout.
    pub released: Vec<Confirmed>,
}

#[derive(Debug, Clone, Copy)]
struct DomainEntry {
    backend: BackendId,
    used_secs: u32,
}

/// A session's domain (policy `domain`): tag in the top 16 bits, 48 bits
/// of MD5(domain). A collision only co-locates two domains.
type DomainKey = u64;

/// Session ids and reporters are bounded; see `session::MAX_SESSION_ID`.
const MAX_REPORTS: usize = 64;

/// The state machine.
#[derive(Debug)]
pub struct Director {
    settings: Settings,
    me: DirectorId,
    clock: u64,
    backends: BackendSet,
    users: UserDirectory,
    sessions: SessionRegistry,
    session_domains: HashMap<Box<str>, DomainKey>,
    domains: HashMap<DomainKey, DomainEntry>,
    /// Lease-expired backends already reported as kept-last.
    kept_last: Vec<IpAddr>,
    holds: HashMap<UserKey, Hold>,
    next_sweep: Tick,
    next_refresh: Tick,
    next_rebalance: Tick,
    scratch: Vec<u8>,
    /// Record [`RingEvent`]s for the director ring (off for a lone
    /// director, so nothing accumulates).
    replicating: bool,
    /// Changes the ring must forward; drained by [`Director::take_events`].
    events: Vec<RingEvent>,
    /// Closed session ids: when, and the close's envelope (replication's
    /// loop guard, see replica).
    closed_sessions: HashMap<Box<str>, (Tick, DirectorId, u64)>,
    /// Replicated kicks already seen: (origin, seq) → when.
    kicks_seen: HashMap<(DirectorId, u64), Tick>,
    /// The latest clock reading seen (for calls that take none).
    last_now: Tick,
    /// Lamport seq of each admin-added backend's add.
    admin_added: HashMap<IpAddr, u64>,
    /// Admin-removed backends: when, and the removal's seq.
    backend_tombs: HashMap<IpAddr, (Tick, u64)>,
}

impl Director {
    pub fn new(settings: Settings, me: DirectorId) -> Director {
        Director {
            backends: BackendSet::new(settings.hash_mode),
            users: UserDirectory::new(settings.user_expire_secs),
            sessions: SessionRegistry::default(),
            session_domains: HashMap::new(),
            domains: HashMap::new(),
            kept_last: Vec::new(),
            holds: HashMap::new(),
            next_sweep: 0,
            next_refresh: 0,
            next_rebalance: settings.domain_rebalance_interval_ms,
            scratch: Vec::with_capacity(128),
            replicating: false,
            events: Vec::new(),
            closed_sessions: HashMap::new(),
            kicks_seen: HashMap::new(),
            last_now: 0,
            admin_added: HashMap::new(),
            backend_tombs: HashMap::new(),
            settings,
            me,
            clock: 0,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }
    pub fn backends(&self) -> &BackendSet {
        &self.backends
    }
    pub fn users(&self) -> &UserDirectory {
        &self.users
    }
    pub fn sessions(&self) -> &SessionRegistry {
        &self.sessions
    }
    pub fn id(&self) -> DirectorId {
        self.me
    }

    /// The user-directory key of `user` in `tag` (None: unknown tag).
    pub fn user_key(&mut self, user: &str, tag: &str) -> Option<UserKey> {
        let tag = self.backends.tag_id(tag)?;
        Some(UserKey::new(tag, self.hash_user(user)))
    }

    /// The 32-bit hash of `user` under the configured template and mode.
    pub fn hash_user(&mut self, user: &str) -> u32 {
        self.settings.template.expand_into(user, &mut self.scratch);
        user_hash(self.settings.hash_mode, &self.scratch)
    }

    fn domain_key(tag: TagId, user: &str) -> DomainKey {
        let d = Md5::digest(domain_of(user).as_bytes());
        let mut low = [0u8; 8];
        low[2..].copy_from_slice(&d[..6]);
        (u64::from(tag.0) << 48) | u64::from_be_bytes(low)
    }

    fn next_stamp(&mut self) -> Stamp {
        self.clock = (self.clock + 1).min(MAX_SEQ);
        Stamp {
            seq: self.clock,
            by: self.me,
        }
    }

    fn route(&self, backend: BackendId, fresh: bool, stamp: Stamp) -> Option<Route> {
        let b = self.backends.get(backend)?;
        Some(Route {
            backend,
            ip: b.ip,
            // A registered pod serves every protocol on its own port: the
            // BACKEND-UP port is nominal, and 0 tells the login to dial
            // its own protocol port (deployment seed, backend registration).
            port: if b.source == Source::Registered {
                0
            } else {
                b.port
            },
            fresh,
            stamp,
        })
    }

    /// LOOKUP: where `user` of `tag` goes, pinning a new user.
    pub fn lookup(
        &mut self,
        now: Tick,
        user: &str,
        tag: &str,
        proto: Option<Proto>,
    ) -> Result<Route, LookupError> {
        self.assign_and_pin(now, user, tag, proto)
    }

    /// The one placement path. An existing live pin wins (and is
    /// refreshed); otherwise `assignment_policy` picks and the choice is
    /// pinned with a new Lamport stamp.
    pub fn assign_and_pin(
        &mut self,
        now: Tick,
        user: &str,
        tag: &str,
        proto: Option<Proto>,
    ) -> Result<Route, LookupError> {
        let no_backend = || LookupError::NoBackend {
            tag: tag.to_string(),
        };
        let now_s = secs(now);
        let tag_id = self.backends.tag_id(tag).ok_or_else(no_backend)?;
        let hash = self.hash_user(user);
        let key = UserKey::new(tag_id, hash);
        if let Some(h) = self.holds.get(&key) {
            if now < h.until {
                return Err(LookupError::Held { until: h.until });
            }
        }
        let domain = (self.settings.policy == AssignmentPolicy::Domain)
            .then(|| Director::domain_key(tag_id, user));
        let domain_backend = domain.and_then(|d| self.live_domain(d, now_s));

        if let Some(a) = self.users.get(key, now_s) {
            if domain_backend.is_none_or(|db| db == a.backend) {
                self.users.touch(key, now_s);
                if let Some(d) = domain {
                    self.touch_domain(d, a.backend, now_s);
                }
                return self.route(a.backend, false, a.stamp).ok_or_else(no_backend);
            }
        }
        let chosen = match self.settings.policy {
            AssignmentPolicy::Hash => self.hashed(tag_id, hash),
            AssignmentPolicy::LeastSessions => self.least_loaded(tag_id, proto),
            AssignmentPolicy::Domain => domain_backend.or_else(|| self.least_loaded(tag_id, None)),
        }
        .ok_or_else(no_backend)?;
        if let Some(d) = domain {
            self.touch_domain(d, chosen, now_s);
        }
        let stamp = self.next_stamp();
        self.users.pin(key, chosen, stamp, now_s);
        self.emit_assign(hash, chosen, stamp);
        self.route(chosen, true, stamp).ok_or_else(no_backend)
    }

    /// The ring's choice for a hash, walking past backends that take no
    /// new users (their slice stays theirs).
    fn hashed(&mut self, tag: TagId, hash: u32) -> Option<BackendId> {
        let (ring, slots) = self.backends.ring_and_slots(tag)?;
        ring.lookup(hash, |id| {
            !slot(slots, id).is_some_and(|b| b.takes_new_users())
        })
    }

    /// The ring's choice for `user` (admin map: "hashed" column).
    pub fn hashed_backend(&mut self, user: &str, tag: &str) -> Option<BackendId> {
        let tag = self.backends.tag_id(tag)?;
        let hash = self.hash_user(user);
        self.hashed(tag, hash)
    }

    /// Least loaded by (protocol sessions, total sessions) per vhost, tie
    /// to the lower (ip, port).
    fn least_loaded(&self, tag: TagId, proto: Option<Proto>) -> Option<BackendId> {
        self.backends
            .in_tag(tag)
            .filter(|(_, b)| b.takes_new_users())
            .min_by_key(|(_, b)| {
                let v = u64::from(b.vhosts);
                let level1 =
                    proto.map_or(0, |p| u64::from(b.sessions_by_proto[p.index()]) * 100 / v);
                (level1, u64::from(b.sessions) * 100 / v, b.ip, b.port)
            })
            .map(|(id, _)| id)
    }

    fn live_domain(&self, d: DomainKey, now_s: u32) -> Option<BackendId> {
        let e = self.domains.get(&d)?;
        (now_s.saturating_sub(e.used_secs) < self.settings.domain_expire_secs
            && self.backends.get(e.backend).is_some())
        .then_some(e.backend)
    }

    fn touch_domain(&mut self, d: DomainKey, backend: BackendId, now_s: u32) {
        let e = self.domains.entry(d).or_insert(DomainEntry {
            backend,
            used_secs: now_s,
        });
        e.backend = backend;
        e.used_secs = e.used_secs.max(now_s);
    }

    /// Merges a replicated assignment (the ring, issue 11). The Lamport
    /// clock advances past the remote seq either way.
    pub fn merge_assignment(
        &mut self,
        now: Tick,
        key: UserKey,
        backend_ip: IpAddr,
        stamp: Stamp,
    ) -> Option<MergeOutcome> {
        self.clock = self.clock.max(stamp.seq.min(MAX_SEQ));
        let backend = self.backends.by_ip(backend_ip)?;
        Some(self.users.merge(key, backend, stamp, secs(now)))
    }

    /// Admin USER-MOVE: pins `user` to `to` with a new stamp (a normal,
    /// expiring pin — it lives while the user stays connected). The caller
    /// kicks the user's sessions on `from`.
    pub fn move_user(
        &mut self,
        now: Tick,
        user: &str,
        tag: &str,
        to: IpAddr,
    ) -> Result<Moved, MoveError> {
        let id = self
            .backends
            .by_ip(to)
            .ok_or(MoveError::UnknownBackend(to))?;
        let actual = self
            .backends
            .get(id)
            .map(|b| self.backends.tag_name(b.tag).to_string())
            .unwrap_or_default();
        if actual != tag {
            return Err(MoveError::WrongTag {
                ip: to,
                actual,
                wanted: tag.to_string(),
            });
        }
        let key = self
            .user_key(user, tag)
            .ok_or(MoveError::UnknownBackend(to))?;
        let now_s = secs(now);
        let from = self
            .users
            .get(key, now_s)
            .and_then(|a| self.backends.get(a.backend))
            .map(|b| b.ip);
        let stamp = self.next_stamp();
        self.users.pin(key, id, stamp, now_s);
        self.emit_assign(key.hash(), id, stamp);
        if let Some(old) = from.filter(|f| *f != to) {
            self.hold(now, key, user, old, Some(to), true);
        }
        Ok(Moved { from, to, stamp })
    }

    /// Starts a confirmed-kill hold: LOOKUPs of `key` wait until the
    /// user's sessions on `old` close (or a grace / timeout passes).
    fn hold(
        &mut self,
        now: Tick,
        key: UserKey,
        user: &str,
        old: IpAddr,
        new: Option<IpAddr>,
        hook: bool,
    ) {
        let Some(old_id) = self.backends.by_ip(old) else {
            return;
        };
        let live = self.sessions_on(key, old_id);
        let offline = live == 0;
        self.holds.insert(
            key,
            Hold {
                username: user.into(),
                old,
                old_id,
                new,
                until: now
                    + if offline {
                        USER_KILL_CONFIRM_GRACE
                    } else {
                        self.settings.user_kill_timeout_ms
                    },
                offline,
                hook,
            },
        );
    }

    fn sessions_on(&self, key: UserKey, backend: BackendId) -> usize {
        self.sessions
            .iter()
            .filter(|(_, s)| s.user == key && s.backend == backend)
            .count()
    }

    fn release(&mut self, key: UserKey, confirmed: bool) -> Option<Confirmed> {
        let h = self.holds.remove(&key)?;
        Some(Confirmed {
            user: h.username.to_string(),
            user_hash: key.hash(),
            old: h.old,
            new: h.new,
            confirmed,
            run_hook: confirmed && h.hook,
        })
    }

    /// Users currently held (admin status).
    pub fn holds(&self) -> usize {
        self.holds.len()
    }

    /// Admin kick: where `user` (of `tag`) has sessions or a pin.
    pub fn kicks_for_user(&mut self, now: Tick, user: &str, tag: &str) -> Vec<Kick> {
        let Some(key) = self.user_key(user, tag) else {
            return Vec::new();
        };
        let mut backends: Vec<BackendId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.user == key)
            .map(|(_, s)| s.backend)
            .collect();
        if let Some(a) = self.users.get(key, secs(now)) {
            backends.push(a.backend);
        }
        backends.sort_unstable();
        backends.dedup();
        let kicks: Vec<Kick> = backends
            .into_iter()
            .filter_map(|b| self.backends.get(b))
            .map(|b| Kick {
                user: user.to_string(),
                backend: b.ip,
            })
            .collect();
        // Every director's watchers get them: a login watches one.
        self.emit_kicks(now, &kicks);
        kicks
    }

    /// Admin map: the live pin of `user` (if any) and its expiry second.
    pub fn pin_of(&mut self, now: Tick, user: &str, tag: &str) -> Option<(IpAddr, u32)> {
        let key = self.user_key(user, tag)?;
        let a = self.users.get(key, secs(now))?;
        let b = self.backends.get(a.backend)?;
        Some((b.ip, a.used_secs.saturating_add(self.users.expire_secs())))
    }

    // ---- sessions --------------------------------------------------------

    /// SESSION-OPEN: a login pod opened `id` for `user` on `backend_ip`.
    /// Refreshes the user's pin. False when the backend or tag is unknown
    /// or the registry is full (routing is unaffected).
    pub fn session_open(
        &mut self,
        now: Tick,
        id: &str,
        user: &str,
        tag: &str,
        backend_ip: IpAddr,
        proto: Proto,
    ) -> bool {
        let Some(backend) = self.backends.by_ip(backend_ip) else {
            return false;
        };
        let Some(key) = self.user_key(user, tag) else {
            return false;
        };
        self.last_now = self.last_now.max(now);
        let seq = self.next_stamp().seq;
        let session = Session {
            username: user.chars().take(crate::session::MAX_USERNAME).collect(),
            user: key,
            backend,
            proto,
            origin: self.me,
            seq,
        };
        // Ids are unique (logins draw 64 random bits); a closed id stays
        // closed ring-wide for the tombstone's life, here too.
        if self.closed_sessions.contains_key(id) {
            return false;
        }
        if !self.insert_session(id, session) {
            return false;
        }
        self.users.touch(key, secs(now));
        self.emit_session_open(id, tag);
        true
    }

    /// Records a session and its counts; false when the registry refuses.
    pub(super) fn insert_session(&mut self, id: &str, session: Session) -> bool {
        let (b, p, key) = (session.backend, session.proto, session.user);
        let domain = (self.settings.policy == AssignmentPolicy::Domain)
            .then(|| Director::domain_key(key.tag(), &session.username));
        match self.sessions.insert(id, session) {
            Err(_) => return false,
            Ok(Some(old)) => self.count_session(old.backend, old.proto, false),
            Ok(None) => {}
        }
        self.count_session(b, p, true);
        if let Some(d) = domain {
            self.session_domains.insert(id.into(), d);
        }
        true
    }

    /// SESSION-CLOSE. Returns whether the session was known, and the
    /// hold it released (its user's last session on the old backend).
    /// Replicated even when unknown here: the login may have opened it
    /// through another director.
    pub fn session_close(&mut self, id: &str) -> (bool, Option<Confirmed>) {
        let now = self.last_now;
        let seq = self.next_stamp().seq;
        self.tomb_session(id, now, self.me, seq);
        if self.replicating && id.len() <= crate::session::MAX_SESSION_ID {
            self.emit(RingEvent::SessionClose {
                id: id.to_string(),
                origin: self.me,
                seq,
            });
        }
        self.remove_session(id)
    }

    pub(super) fn remove_session(&mut self, id: &str) -> (bool, Option<Confirmed>) {
        self.session_domains.remove(id);
        let Some(s) = self.sessions.remove(id) else {
            return (false, None);
        };
        self.count_session(s.backend, s.proto, false);
        let released = match self.holds.get(&s.user) {
            Some(h) if h.old_id == s.backend && self.sessions_on(s.user, s.backend) == 0 => {
                self.release(s.user, true)
            }
            _ => None,
        };
        (true, released)
    }

    fn count_session(&mut self, backend: BackendId, proto: Proto, open: bool) {
        if let Some(b) = self.backends.get_mut(backend) {
            let p = &mut b.sessions_by_proto[proto.index()];
            if open {
                b.sessions = b.sessions.saturating_add(1);
                *p = p.saturating_add(1);
            } else {
                b.sessions = b.sessions.saturating_sub(1);
                *p = p.saturating_sub(1);
            }
        }
    }

    // ---- backends --------------------------------------------------------

    /// A static `mail_servers` address. False if the IP is already known.
    pub fn add_static(&mut self, now: Tick, ip: IpAddr, port: u16, tag: &str, vhosts: u32) -> bool {
        self.backends
            .insert(ip, port, tag, vhosts, Source::Static, now)
            .is_some()
    }

    /// Admin add (never expires). False if the IP is already known.
    pub fn add_admin(&mut self, now: Tick, ip: IpAddr, port: u16, tag: &str, vhosts: u32) -> bool {
        let added = self
            .backends
            .insert(ip, port, tag, vhosts, Source::Admin, now)
            .is_some();
        if added {
            let seq = self.next_stamp().seq;
            self.admin_added.insert(ip, seq);
            self.backend_tombs.remove(&ip);
            self.emit_backend(ip);
        }
        added
    }

    /// Admin remove (any source; the admin may empty a tag). Leaves a
    /// tombstone so no other director's snapshot brings it back.
    pub fn remove_admin(&mut self, ip: IpAddr) -> Option<Removal> {
        let id = self.backends.by_ip(ip)?;
        let removal = self.remove(id, RemovalReason::Admin)?;
        let seq = self.next_stamp().seq;
        self.admin_added.remove(&ip);
        self.backend_tombs.insert(ip, (self.last_now, seq));
        self.emit(RingEvent::Remove { ip, seq });
        Some(removal)
    }

    /// Admin vhosts update. False if unknown.
    pub fn set_vhosts(&mut self, ip: IpAddr, vhosts: u32) -> bool {
        match self.backends.by_ip(ip) {
            Some(id) => {
                let changed = self
                    .backends
                    .get(id)
                    .is_some_and(|b| b.vhosts != vhosts.min(100));
                self.backends.set_vhosts(id, vhosts);
                if changed {
                    self.emit(RingEvent::Vhosts { ip, vhosts });
                }
                true
            }
            None => false,
        }
    }

    /// Admin flush: the backend takes no new users; pins of users with no
    /// session there are dropped at once. Returns the users that do have
    /// sessions there: each is then evicted with [`Director::evict_flushed`]
    /// in its window (until then its pin keeps it on this backend, so it is
    /// never served by two). `None` if unknown.
    pub fn admin_flush(&mut self, ip: IpAddr) -> Option<Vec<(UserKey, String)>> {
        let id = self.backends.by_ip(ip)?;
        let b = self.backends.get_mut(id)?;
        b.admin_drain = true;
        let mut users: Vec<(UserKey, String)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.backend == id)
            .map(|(_, s)| (s.user, s.username.to_string()))
            .collect();
        users.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        users.dedup_by(|a, b| a.0 == b.0);
        let live: std::collections::HashSet<UserKey> = users.iter().map(|u| u.0).collect();
        let offline: Vec<UserKey> = self
            .users
            .iter()
            .filter(|(k, a)| a.backend == id && !live.contains(k))
            .map(|(k, _)| k)
            .collect();
        for k in offline {
            self.users.remove(k);
        }
        Some(users)
    }

    /// Evicts one flushed user: drops its pin on `ip` and holds its
    /// LOOKUPs until its sessions there close. Returns the kick to send.
    pub fn evict_flushed(
        &mut self,
        now: Tick,
        key: UserKey,
        user: &str,
        ip: IpAddr,
        hook: bool,
    ) -> Kick {
        if let (Some(a), Some(id)) = (self.users.get(key, secs(now)), self.backends.by_ip(ip)) {
            if a.backend == id {
                self.users.remove(key);
            }
        }
        self.hold(now, key, user, ip, None, hook);
        Kick {
            user: user.to_string(),
            backend: ip,
        }
    }

    /// Whether `key` is held (a flush window waits for its users).
    pub fn is_held(&self, key: UserKey) -> bool {
        self.holds.contains_key(&key)
    }

    /// Ends an admin flush. False if unknown.
    pub fn admin_unflush(&mut self, ip: IpAddr) -> bool {
        match self
            .backends
            .by_ip(ip)
            .and_then(|id| self.backends.get_mut(id))
        {
            Some(b) => {
                b.admin_drain = false;
                true
            }
            None => false,
        }
    }

    pub(super) fn remove(&mut self, id: BackendId, reason: RemovalReason) -> Option<Removal> {
        let backend = self.backends.remove(id)?;
        let users_unpinned = self.users.purge_backend(id);
        let sessions = self.sessions.drop_backend(id);
        if !self.session_domains.is_empty() {
            let sessions_left = &self.sessions;
            self.session_domains
                .retain(|sid, _| sessions_left.get(sid).is_some());
        }
        self.domains.retain(|_, e| e.backend != id);
        self.kept_last.retain(|ip| *ip != backend.ip);
        self.holds.retain(|_, h| h.old_id != id);
        Some(Removal {
            ip: backend.ip,
            tag: self.backends.tag_name(backend.tag).to_string(),
            reason,
            users_unpinned,
            sessions,
        })
    }

    /// BACKEND-UP: registration and heartbeat. Every accepted heartbeat
    /// is forwarded around the ring, so a lease refreshed on one director
    /// is refreshed on all.
    pub fn backend_up(&mut self, now: Tick, up: &BackendUp) -> UpOutcome {
        let outcome = self.backend_up_inner(now, up);
        if !matches!(outcome, UpOutcome::Stale | UpOutcome::Refused) {
            self.emit(RingEvent::Up(up.clone()));
        }
        outcome
    }

    fn backend_up_inner(&mut self, now: Tick, up: &BackendUp) -> UpOutcome {
        if !self.backends.accept_seq(up.ip, up.seq, now) {
            return UpOutcome::Stale;
        }
        let vhosts = up.vhosts.min(100);
        let Some(id) = self.backends.by_ip(up.ip) else {
            return match self.backends.insert(
                up.ip,
                up.port,
                &up.tag,
                vhosts,
                Source::Registered,
                now,
            ) {
                Some(_) => UpOutcome::Added,
                None => UpOutcome::Refused,
            };
        };
        self.kept_last.retain(|ip| *ip != up.ip);
        let (source, same_tag) = match self.backends.get(id) {
            Some(b) => (b.source, self.backends.tag_name(b.tag) == up.tag),
            None => return UpOutcome::Refused,
        };
        if source != Source::Registered {
            if let Some(b) = self.backends.get_mut(id) {
                b.draining = false;
            }
            return UpOutcome::Permanent;
        }
        if !same_tag {
            let Some(removal) = self.remove(id, RemovalReason::Down) else {
                return UpOutcome::Refused;
            };
            return match self.backends.insert(
                up.ip,
                up.port,
                &up.tag,
                vhosts,
                Source::Registered,
                now,
            ) {
                Some(_) => UpOutcome::Retagged(removal),
                None => UpOutcome::Refused,
            };
        }
        if let Some(b) = self.backends.get_mut(id) {
            b.last_seen = now;
            b.port = up.port;
            b.draining = false;
            b.reports.clear();
        }
        self.backends.set_vhosts(id, vhosts);
        UpOutcome::Refreshed
    }

    /// BACKEND-DOWN: graceful leave (remove + rehash).
    pub fn backend_down(&mut self, now: Tick, ip: IpAddr, seq: Option<u64>) -> BackendOutcome {
        if let Some(seq) = seq {
            if !self.backends.accept_seq(ip, seq, now) {
                return BackendOutcome::Stale;
            }
        }
        let Some(id) = self.backends.by_ip(ip) else {
            return BackendOutcome::Unknown;
        };
        if self.backends.get(id).map(|b| b.source) != Some(Source::Registered) {
            return BackendOutcome::NotRegistered;
        }
        match self.remove(id, RemovalReason::Down) {
            Some(r) => {
                self.emit(RingEvent::Down { ip, seq });
                BackendOutcome::Removed(r)
            }
            None => BackendOutcome::Unknown,
        }
    }

    /// BACKEND-FLUSH: drain — keep the slice and the pins, take no new
    /// users. Refreshes a registered backend's lease when `seq` is newer.
    pub fn backend_flush(&mut self, now: Tick, ip: IpAddr, seq: Option<u64>) -> BackendOutcome {
        let fresh = match seq {
            Some(seq) if self.backends.is_stale(ip, seq) => return BackendOutcome::Stale,
            Some(seq) => self.backends.accept_seq(ip, seq, now),
            None => false,
        };
        let Some(id) = self.backends.by_ip(ip) else {
            return BackendOutcome::Unknown;
        };
        let mut changed = fresh;
        if let Some(b) = self.backends.get_mut(id) {
            changed |= !b.draining;
            b.draining = true;
            if fresh && b.source == Source::Registered {
                b.last_seen = now;
            }
        }
        // Forward only what changed something: the event comes back
        // round the ring with a seq already seen and stops there.
        if changed {
            self.emit(RingEvent::Flush { ip, seq });
        }
        BackendOutcome::Draining
    }

    /// A login pod could not reach `ip`. Registered backends are evicted
    /// once `backend_unreachable_reporters` distinct reporters said so
    /// within `backend_unreachable_window`.
    pub fn backend_unreachable(&mut self, now: Tick, ip: IpAddr, reporter: &str) -> BackendOutcome {
        let Some(id) = self.backends.by_ip(ip) else {
            return BackendOutcome::Unknown;
        };
        let window = self.settings.unreachable_window_ms;
        let needed = self.settings.unreachable_reporters as usize;
        let (distinct, tag, source) = {
            let Some(b) = self.backends.get_mut(id) else {
                return BackendOutcome::Unknown;
            };
            b.reports.retain(|(_, at)| now.saturating_sub(*at) < window);
            b.reports.retain(|(r, _)| r != reporter);
            if b.reports.len() >= MAX_REPORTS {
                b.reports.remove(0);
            }
            b.reports.push((reporter.chars().take(128).collect(), now));
            (b.reports.len(), b.tag, b.source)
        };
        if source != Source::Registered {
            return BackendOutcome::NotRegistered;
        }
        if distinct < needed {
            return BackendOutcome::Reported(distinct);
        }
        if self.backends.count_in_tag(tag) <= 1 {
            return BackendOutcome::KeptLast;
        }
        match self.remove(id, RemovalReason::Unreachable) {
            Some(r) => {
                self.emit(RingEvent::Down { ip, seq: None });
                BackendOutcome::Removed(r)
            }
            None => BackendOutcome::Unknown,
        }
    }

    // ---- time --------------------------------------------------------------

    /// Runs the timers due at `now`: lease expiry, pin refresh for live
    /// sessions (every `user_expire / 2`), expired-entry sweeps, domain
    /// rebalancing. Call it about once a second.
    pub fn tick(&mut self, now: Tick) -> TickReport {
        let mut report = TickReport::default();
        self.last_now = self.last_now.max(now);
        self.sweep_replicas(now);
        let now_s = secs(now);

        // Leases.
        let expire = self.settings.backend_expire_ms;
        let expired: Vec<(BackendId, IpAddr, TagId)> = self
            .backends
            .iter()
            .filter(|(_, b)| {
                b.source == Source::Registered && now.saturating_sub(b.last_seen) > expire
            })
            .map(|(id, b)| (id, b.ip, b.tag))
            .collect();
        for (id, ip, tag) in expired {
            if self.backends.count_in_tag(tag) <= 1 {
                if !self.kept_last.contains(&ip) {
                    self.kept_last.push(ip);
                    report.kept_last.push(ip);
                }
                continue;
            }
            if let Some(r) = self.remove(id, RemovalReason::LeaseExpired) {
                report.removed.push(r);
            }
        }

        // Holds past their deadline: an offline user is confirmed, a user
        // whose sessions never closed is let through (logged).
        let due: Vec<(UserKey, bool)> = self
            .holds
            .iter()
            .filter(|(_, h)| now >= h.until)
            .map(|(k, h)| (*k, h.offline))
            .collect();
        for (key, offline) in due {
            if let Some(c) = self.release(key, offline) {
                report.released.push(c);
            }
        }

        // Pins of connected users stay fresh.
        let expire_ms = u64::from(self.settings.user_expire_secs) * 1000;
        if now >= self.next_refresh {
            self.next_refresh = now + (expire_ms / 2).max(1000);
            for (_, s) in self.sessions.iter() {
                if self.users.touch(s.user, now_s) {
                    report.pins_refreshed += 1;
                }
            }
            for d in self.session_domains.values() {
                if let Some(e) = self.domains.get_mut(d) {
                    e.used_secs = e.used_secs.max(now_s);
                }
            }
        }

        // Sweeps: lookups already ignore expired entries; this frees them.
        if now >= self.next_sweep {
            self.next_sweep = now + (expire_ms / 8).clamp(1000, 60_000);
            report.users_expired = self.users.sweep(now_s);
            let dexp = self.settings.domain_expire_secs;
            self.domains
                .retain(|_, e| now_s.saturating_sub(e.used_secs) < dexp);
            self.backends.prune_seqs(now, expire.saturating_mul(4));
        }

        if self.settings.domain_rebalance_interval_ms > 0 && now >= self.next_rebalance {
            self.next_rebalance = now + self.settings.domain_rebalance_interval_ms;
            report.domains_moved = self.rebalance_domains();
        }
        report
    }

    /// Moves at most one domain per tag from the most to the least loaded
    /// backend when the load (sessions per vhost) differs by more than
    /// `domain_rebalance_threshold` percent. Users follow at their next
    /// login; live sessions are left alone.
    fn rebalance_domains(&mut self) -> usize {
        if self.settings.policy != AssignmentPolicy::Domain {
            return 0;
        }
        // Sessions per (domain, backend).
        let mut per_domain: HashMap<(DomainKey, BackendId), u64> = HashMap::new();
        for (sid, s) in self.sessions.iter() {
            if let Some(d) = self.session_domains.get(sid) {
                *per_domain.entry((*d, s.backend)).or_default() += 1;
            }
        }
        let tags: Vec<TagId> = {
            let mut t: Vec<TagId> = self.backends.iter().map(|(_, b)| b.tag).collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        let load = |b: &crate::backend::Backend| u64::from(b.sessions) * 100 / u64::from(b.vhosts);
        let mut moved = 0;
        for tag in tags {
            let eligible: Vec<(BackendId, u64, u32)> = self
                .backends
                .in_tag(tag)
                .filter(|(_, b)| b.takes_new_users())
                .map(|(id, b)| (id, load(b), b.vhosts))
                .collect();
            let (Some(max), Some(min)) = (
                eligible.iter().max_by_key(|e| e.1),
                eligible.iter().min_by_key(|e| e.1),
            ) else {
                continue;
            };
            if max.0 == min.0
                || max.1 * 100
                    <= min.1 * (100 + u64::from(self.settings.domain_rebalance_threshold))
            {
                continue;
            }
            // The busiest domain on `max` whose move does not invert the
            // imbalance (its sessions at most half the gap).
            let gap_sessions = (max.1 - min.1) * u64::from(max.2) / 100;
            let candidate = self
                .domains
                .iter()
                .filter(|(_, e)| e.backend == max.0)
                .map(|(d, _)| (*d, per_domain.get(&(*d, max.0)).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0 && *n * 2 <= gap_sessions)
                .max_by_key(|(d, n)| (*n, *d));
            if let Some((d, _)) = candidate {
                if let Some(e) = self.domains.get_mut(&d) {
                    e.backend = min.0;
                    moved += 1;
                }
            }
        }
        moved
    }
}

mod replica;
pub use replica::{BackendState, RingEvent, SessionRecord, UserRecord};

#[cfg(test)]
mod tests;
