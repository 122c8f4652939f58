//! The director ring: several directors that share membership, the
//! backend set and the sticky assignments (director seed, "Ring
//! formation"; issue 11).
//!
//! - [`membership`]: the member list and tombstones, pure.
//! - [`wire`]: the ring lines and the join proof, sans-I/O.
//! - this module: the tokio driver — one main task (neighbour dial, seed
//!   polls, anti-entropy, probes, graceful leave) and one task per ring
//!   connection.
//!
//! Invariants (each one a failure found in a live test of the reference
//! design; see the ring history in the seeds):
//! - Ring connections share the director port: a dialer speaks the usual
//!   `VERSION` exchange, then `DIRECTOR-HELLO` hands the connection over
//!   from the LOOKUP service to the ring.
//! - Each director dials only its right neighbour (with two, only the
//!   lower one); a lone director is a ring of one and runs no peer
//!   machinery beyond the seed poll.
//! - Every change is forwarded over every live ring connection except the
//!   one it came in on, and only when it changed something here (so it
//!   stops once known). Broadcasts go out over the current connection set
//!   before the neighbours are recomputed.
//! - Every ring connection begins with both snapshots (members and
//!   tombstones, then backends, then users), so a restarted director
//!   starts from the cluster's routing state.
//! - A dead member is detected by both neighbours: the right side through
//!   its dial, the left side through the accepted connection, confirmed
//!   by a few short probes (connect + VERSION line) before it is
//!   declared. A silent peer is lost after `ping_interval + ping_timeout`.
//!   Deliberate teardowns say `QUIT <reason>` and are never taken for a
//!   death.
//! - Without `ring_secret` the ring does not run: every join is refused
//!   and the director never dials.
//! - Locks: the director lock may be held while the links lock is taken
//!   (events are queued to the links in the order they happened); the
//!   membership lock is never held with another one, and no lock is held
//!   across an await.

pub mod membership;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tracing::{debug, info, warn};
use yarilo_config::DirectorService;
use yarilo_tls::internal::InternalTls;
use yarilo_wire::{LineCodec, Version};

use crate::director::{BackendOutcome, RingEvent, UpOutcome};
use crate::protocol::{self, PeerRoles, MAX_LINE};
use crate::service::Shared;
use crate::{DirectorError, Tick};

use membership::{Change, Membership};
use wire::{JoinMode, RingMsg};

/// Probes that must all fail before a neighbour is declared dead.
const PROBES: u32 = 3;
/// Each probe: connect and read the VERSION line within this.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
const PROBE_GAP: Duration = Duration::from_millis(200);
/// A dial's TCP connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Each step of the join exchange.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The director port's VERSION greeting on a dial (a live director greets
/// at once; a hung one never does, and its probes follow).
const GREETING_TIMEOUT: Duration = Duration::from_secs(2);
/// A seed poll, from connect to SYNC-DONE.
const POLL_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines accepted from one seed poll.
const POLL_MAX_LINES: usize = 100_000;
/// Retry after a load-balanced seed routed our poll to ourselves.
const SELF_DIAL_RETRY: Duration = Duration::from_millis(500);
/// Retry after the peer closed on purpose (it re-targets or leaves).
const QUIT_RETRY: Duration = Duration::from_millis(500);
/// Retry after a refused or failed join.
const JOIN_RETRY: Duration = Duration::from_secs(2);
/// Lines queued to one connection; a connection that falls this far
/// behind is closed (`QUIT resync`) and re-synchronises by snapshot.
const LINK_QUEUE: usize = 256 * 1024;
/// The main loop's timer.
const TICK: Duration = Duration::from_millis(250);

/// What the ring reads from `director_service.*`.
#[derive(Clone)]
pub struct RingSettings {
    /// The address the other directors know us by (`ring_address`).
    pub me: SocketAddr,
    /// Grows on every restart (a tombstone of an older life cannot evict
    /// this one).
    pub incarnation: u64,
    pub secret: Vec<u8>,
    pub peers: Vec<String>,
    pub join_allowed_nets: Vec<ipnet::IpNet>,
    /// None: off.
    pub anti_entropy: Option<Duration>,
    /// None: tombstones are kept.
    pub tombstone_ttl: Option<Duration>,
    /// None: poll once.
    pub seed_poll: Option<Duration>,
    pub seed_poll_idle: Duration,
    pub min_members: usize,
    pub ping_interval: Duration,
    pub ping_timeout: Duration,
    pub write_timeout: Option<Duration>,
    /// Bound on the graceful leave (`session_grace_period`, at most 5 s).
    pub leave_timeout: Duration,
    /// Internal mTLS for dials, pinning `ring_tls_server_name`.
    pub tls: Option<InternalTls>,
}

impl std::fmt::Debug for RingSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingSettings")
            .field("me", &self.me)
            .field("incarnation", &self.incarnation)
            .field("peers", &self.peers)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl RingSettings {
    /// The ring settings, or None when `ring_secret` is unset (the
    /// director then runs alone).
    pub fn from_config(
        c: &DirectorService,
        me: SocketAddr,
        incarnation: u64,
        tls: Option<&InternalTls>,
    ) -> Result<Option<RingSettings>, DirectorError> {
        let Some(secret) = c.ring_secret.as_ref().filter(|s| !s.is_empty()) else {
            if !c.peers.is_empty() {
                warn!("director_service.peers is set but ring_secret is not: this director never joins and runs alone");
            }
            return Ok(None);
        };
        if me.ip().is_unspecified() {
            return Err(DirectorError::Config(
                "director_service.ring_address: the ring needs the address other directors reach \
                 this one at; set ring_address, listen on a specific IP, or set POD_IP"
                    .into(),
            ));
        }
        let tls = match (tls, &c.ring_tls_server_name) {
            (Some(t), Some(name)) => Some(
                t.with_server_name(name)
                    .map_err(|e| DirectorError::Tls(e.to_string()))?,
            ),
            (Some(t), None) => Some(t.clone()),
            (None, _) => None,
        };
        let secs = Duration::from_secs;
        Ok(Some(RingSettings {
            me,
            incarnation,
            secret: secret.expose().as_bytes().to_vec(),
            peers: c.peers.clone(),
            join_allowed_nets: c.join_allowed_nets.clone(),
            anti_entropy: (c.anti_entropy_interval > 0).then(|| secs(c.anti_entropy_interval)),
            tombstone_ttl: (c.tombstone_ttl > 0).then(|| secs(c.tombstone_ttl)),
            seed_poll: (c.seed_poll_interval >= 0)
                .then(|| secs(c.seed_poll_interval.max(0) as u64).max(Duration::from_millis(100))),
            seed_poll_idle: secs(c.seed_poll_idle_interval).max(Duration::from_millis(100)),
            min_members: c.min_members.max(1) as usize,
            ping_interval: secs(c.ping_interval.max(1)),
            ping_timeout: secs(c.ping_timeout.max(1)),
            write_timeout: (c.write_timeout > 0).then(|| secs(c.write_timeout)),
            leave_timeout: secs(c.session_grace_period.clamp(1, 5)),
            tls,
        }))
    }
}

/// The address the ring knows this director by: `ring_address` when set
/// (port 0: the bound port), else the bound address when it names an IP,
/// else `$POD_IP` with the bound port, else the bound address.
pub fn ring_address(c: &DirectorService, bound: SocketAddr) -> Result<SocketAddr, DirectorError> {
    if !c.ring_address.is_empty() {
        let mut a: SocketAddr = c.ring_address.parse().map_err(|_| {
            DirectorError::Config(format!(
                "director_service.ring_address: `{}` is not ip:port",
                c.ring_address
            ))
        })?;
        if a.port() == 0 {
            a.set_port(bound.port());
        }
        return Ok(a);
    }
    if !bound.ip().is_unspecified() {
        return Ok(bound);
    }
    if let Some(ip) = std::env::var("POD_IP")
        .ok()
        .and_then(|v| v.parse::<std::net::IpAddr>().ok())
    {
        return Ok(SocketAddr::new(ip, bound.port()));
    }
    Ok(bound)
}

/// A new incarnation: milliseconds of the wall clock, so it grows across
/// restarts. The one wall-clock read of the crate (ordering, never
/// timing: the ring itself runs on the injected clock).
#[allow(clippy::disallowed_methods, clippy::disallowed_types)]
pub fn new_incarnation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(1)
        .max(1)
}

/// A byte stream a ring dial runs over (plain TCP or internal mTLS).
pub trait RingIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> RingIo for T {}

type DialConn = Framed<Box<dyn RingIo>, LineCodec>;
type Line = Arc<Vec<String>>;
/// A live ring connection's id (the arrival of an event, to skip it).
pub type LinkId = u64;

/// Why a dial failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialError {
    /// No TCP connection or no answer: the peer may be dead (probe it).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The peer answered JOIN-FAIL.
    #[error("join refused: {0}")]
    Refused(String),
    /// A load-balanced seed routed us to ourselves.
    #[error("dialled ourselves")]
    SelfDial,
    /// The peer could not prove it holds `ring_secret`.
    #[error("peer failed the join proof")]
    BadProof,
    /// The peer broke the protocol.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// How a ring connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// We closed it on purpose (QUIT sent).
    Ours,
    /// The peer said QUIT.
    PeerQuit,
    /// EOF, error or silence without QUIT: maybe a death.
    Lost,
}

struct Link {
    peer: SocketAddr,
    dialed: bool,
    tx: mpsc::Sender<Line>,
}

#[derive(Default)]
struct Links {
    next: LinkId,
    map: HashMap<LinkId, Link>,
}

#[derive(Debug)]
enum Note {
    LinkDown {
        peer: SocketAddr,
        gen: Option<u64>,
        end: End,
    },
    DialFailed {
        peer: SocketAddr,
        gen: u64,
        err: DialError,
    },
    Changed,
    Probed {
        peer: SocketAddr,
        inc: u64,
        alive: bool,
    },
}

/// Counters of one director's ring (status, metrics, tests).
#[derive(Debug, Default)]
pub struct RingStats {
    /// Joins (ring or poll) that passed the proof.
    pub joins_accepted: AtomicU64,
    /// Joins refused (bad proof, not allowed, shutting down, self, role).
    pub joins_refused: AtomicU64,
    /// Join proofs that failed, on either side (a peer with another
    /// `ring_secret`, or an impostor).
    pub proofs_failed: AtomicU64,
    /// Members this director declared dead after its probes failed.
    pub deaths_declared: AtomicU64,
    /// Ring connections established (both directions).
    pub links_up: AtomicU64,
}

/// One director's ring: membership, live connections, the main loop.
pub struct RingCore {
    stats: RingStats,
    settings: RingSettings,
    membership: Mutex<Membership>,
    links: Mutex<Links>,
    links_changed: Notify,
    notes: mpsc::UnboundedSender<Note>,
    notes_rx: Mutex<Option<mpsc::UnboundedReceiver<Note>>>,
    leaving: watch::Sender<bool>,
}

impl std::fmt::Debug for RingCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingCore")
            .field("me", &self.settings.me)
            .field("members", &self.members())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn until_true(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn until_true_opt(rx: &mut Option<watch::Receiver<bool>>) {
    match rx {
        Some(rx) => until_true(rx).await,
        None => std::future::pending().await,
    }
}

async fn write<S>(
    framed: &mut Framed<S, LineCodec>,
    fields: &[String],
    flush: bool,
    limit: Option<Duration>,
) -> Result<(), ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let op = async {
        if flush {
            framed.send(fields).await
        } else {
            framed.feed(fields).await
        }
    };
    match limit {
        Some(l) => match tokio::time::timeout(l, op).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        },
        None => op.await.map_err(|_| ()),
    }
}

async fn read_msg<S>(
    framed: &mut Framed<S, LineCodec>,
    limit: Duration,
) -> Result<RingMsg, DialError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(limit, framed.next()).await {
        Err(_) => Err(DialError::Unreachable("no answer in time".into())),
        Ok(None) => Err(DialError::Unreachable("closed".into())),
        Ok(Some(Err(e))) => Err(DialError::Protocol(e.to_string())),
        Ok(Some(Ok(Err(e)))) => Err(DialError::Protocol(e.to_string())),
        Ok(Some(Ok(Ok(fields)))) => {
            RingMsg::parse(&fields).map_err(|e| DialError::Protocol(e.to_string()))
        }
    }
}

impl RingCore {
    pub fn new(settings: RingSettings) -> Arc<RingCore> {
        let (notes, notes_rx) = mpsc::unbounded_channel();
        let ttl = settings.tombstone_ttl.map(|d| d.as_millis() as Tick);
        Arc::new(RingCore {
            stats: RingStats::default(),
            membership: Mutex::new(Membership::new(settings.me, settings.incarnation, ttl)),
            settings,
            links: Mutex::new(Links::default()),
            links_changed: Notify::new(),
            notes,
            notes_rx: Mutex::new(Some(notes_rx)),
            leaving: watch::channel(false).0,
        })
    }

    pub fn me(&self) -> SocketAddr {
        self.settings.me
    }

    pub fn stats(&self) -> &RingStats {
        &self.stats
    }

    pub fn settings(&self) -> &RingSettings {
        &self.settings
    }

    /// Live members in ring order (ourselves included until we leave).
    pub fn members(&self) -> Vec<SocketAddr> {
        lock(&self.membership).members()
    }

    /// A copy of the membership view (status, tests).
    pub fn membership(&self) -> Membership {
        lock(&self.membership).clone()
    }

    /// Our current incarnation.
    pub fn incarnation(&self) -> u64 {
        lock(&self.membership).incarnation()
    }

    /// Live ring connections: (peer, whether we dialled it).
    pub fn links(&self) -> Vec<(SocketAddr, bool)> {
        let mut v: Vec<_> = lock(&self.links)
            .map
            .values()
            .map(|l| (l.peer, l.dialed))
            .collect();
        v.sort();
        v
    }

    fn note(&self, n: Note) {
        let _ = self.notes.send(n);
    }

    fn now(&self, shared: &Shared) -> Tick {
        shared.now()
    }

    // ---- broadcast -------------------------------------------------------

    fn broadcast_lines(&self, lines: &[Line], except: Option<LinkId>) {
        if lines.is_empty() {
            return;
        }
        let mut links = lock(&self.links);
        let mut behind = Vec::new();
        for (id, link) in links.map.iter() {
            if Some(*id) == except {
                continue;
            }
            for l in lines {
                if link.tx.try_send(l.clone()).is_err() {
                    behind.push(*id);
                    break;
                }
            }
        }
        for id in behind {
            if let Some(l) = links.map.remove(&id) {
                warn!(peer = %l.peer, "ring connection too far behind; closing it to re-synchronise");
            }
        }
    }

    fn broadcast(&self, msg: &RingMsg, except: Option<LinkId>) {
        self.broadcast_lines(&[Arc::new(msg.to_fields())], except);
    }

    /// Queues state-machine events to every live ring connection except
    /// `except` (the one they came in on). Call it under the director lock
    /// so events keep their order.
    pub fn broadcast_events(&self, events: &[RingEvent], except: Option<LinkId>) {
        if events.is_empty() {
            return;
        }
        let lines: Vec<Line> = events
            .iter()
            .map(|e| Arc::new(RingMsg::Event(e.clone()).to_fields()))
            .collect();
        self.broadcast_lines(&lines, except);
    }

    fn member_lines(&self, now: Tick) -> Vec<RingMsg> {
        let m = lock(&self.membership);
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

    // ---- applying what peers send -----------------------------------------

    /// Merges a member-list line; forwards it when it changed our view.
    fn merge_member(&self, shared: &Shared, msg: &RingMsg, from: Option<LinkId>) {
        let now = self.now(shared);
        let change = {
            let mut m = lock(&self.membership);
            match *msg {
                RingMsg::Add { addr, inc } => m.add(addr, inc),
                RingMsg::Remove { addr, inc, ttl_ms } => m.remove(addr, inc, ttl_ms, now),
                _ => Change::None,
            }
        };
        match change {
            Change::None => {}
            Change::Changed => {
                match msg {
                    RingMsg::Add { addr, .. } => info!(member = %addr, "director joined the ring"),
                    RingMsg::Remove { addr, .. } => info!(member = %addr, "director left the ring"),
                    _ => {}
                }
                self.broadcast(msg, from);
                self.note(Note::Changed);
            }
            Change::Refuted(inc) => {
                warn!(
                    incarnation = inc,
                    "this director was removed from the ring while running; rejoining"
                );
                self.broadcast(
                    &RingMsg::Add {
                        addr: self.settings.me,
                        inc,
                    },
                    None,
                );
                self.note(Note::Changed);
            }
        }
    }

    /// Applies a routing-state line from a peer and forwards what changed.
    fn apply_event(&self, shared: &Arc<Shared>, event: &RingEvent, from: Option<LinkId>) {
        let now = shared.now();
        let mut removals = Vec::new();
        let mut kicks = Vec::new();
        {
            let mut d = shared.director();
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
                RingEvent::Remove { ip } => {
                    if let Some(r) = d.remove_admin(*ip) {
                        removals.push(r);
                    }
                }
                RingEvent::Vhosts { ip, vhosts } => {
                    d.set_vhosts(*ip, *vhosts);
                }
            }
            // Forward under the lock: events keep their order on every
            // connection.
            let events = d.take_events();
            self.broadcast_events(&events, from);
        }
        for r in &removals {
            info!(ip = %r.ip, users_unpinned = r.users_unpinned, "backend removed (ring)");
            shared.kick_removed(r);
        }
        if !kicks.is_empty() {
            info!(
                kicks = kicks.len(),
                "a ring merge moved a user; kicking its sessions on the old backend"
            );
            shared.kick_now(kicks);
        }
    }

    fn apply(&self, shared: &Arc<Shared>, msg: RingMsg, from: Option<LinkId>) {
        match msg {
            RingMsg::Add { .. } | RingMsg::Remove { .. } => self.merge_member(shared, &msg, from),
            RingMsg::Event(e) => self.apply_event(shared, &e, from),
            RingMsg::User(r) => self.apply_event(shared, &RingEvent::Assign(r), from),
            other => debug!(?other, "ring line ignored on an established connection"),
        }
    }

    // ---- connections -------------------------------------------------------

    fn register(&self, peer: SocketAddr, dialed: bool) -> (LinkId, mpsc::Receiver<Line>) {
        self.stats.links_up.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(LINK_QUEUE);
        let mut links = lock(&self.links);
        links.next += 1;
        let id = links.next;
        links.map.insert(id, Link { peer, dialed, tx });
        (id, rx)
    }

    fn unregister(&self, id: LinkId) {
        lock(&self.links).map.remove(&id);
        self.links_changed.notify_waiters();
    }

    async fn send_snapshot<S>(
        &self,
        shared: &Shared,
        framed: &mut Framed<S, LineCodec>,
        full: bool,
    ) -> Result<(), ()>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let now = self.now(shared);
        let limit = self.settings.write_timeout;
        for m in self.member_lines(now) {
            write(framed, &m.to_fields(), false, limit).await?;
        }
        if full {
            let (backends, users) = {
                let d = shared.director();
                (d.backend_states(), d.user_records(now))
            };
            for b in backends {
                write(
                    framed,
                    &RingMsg::Event(RingEvent::Backend(b)).to_fields(),
                    false,
                    limit,
                )
                .await?;
            }
            for u in users {
                write(framed, &RingMsg::User(u).to_fields(), false, limit).await?;
            }
        }
        write(framed, &RingMsg::SyncDone.to_fields(), true, limit).await
    }

    async fn quit<S>(&self, framed: &mut Framed<S, LineCodec>, reason: &str)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let _ = write(
            framed,
            &RingMsg::Quit {
                reason: reason.into(),
            }
            .to_fields(),
            true,
            Some(Duration::from_secs(1)),
        )
        .await;
    }

    /// Runs an authenticated ring connection until it ends: both
    /// snapshots, then events, keepalives and the read deadline.
    async fn run_link<S>(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        mut framed: Framed<S, LineCodec>,
        peer: SocketAddr,
        dialed: bool,
        mut cancel: Option<watch::Receiver<bool>>,
    ) -> End
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (id, mut rx) = self.register(peer, dialed);
        struct Unregister<'a>(&'a RingCore, LinkId);
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                self.0.unregister(self.1);
            }
        }
        let _unregister = Unregister(self, id);
        debug!(%peer, dialed, "ring connection up");
        let mut leaving = self.leaving.subscribe();
        if self.send_snapshot(shared, &mut framed, true).await.is_err() {
            return End::Lost;
        }
        let limit = self.settings.write_timeout;
        let interval = self.settings.ping_interval;
        let silence = interval + self.settings.ping_timeout;
        let mut ping = tokio::time::interval_at(Instant::now() + interval, interval);
        let mut last_heard = Instant::now();
        loop {
            tokio::select! {
                _ = until_true(&mut leaving) => {
                    // Our own DIRECTOR-REMOVE is queued before the flag.
                    while let Ok(line) = rx.try_recv() {
                        if write(&mut framed, &line, false, limit).await.is_err() {
                            return End::Ours;
                        }
                    }
                    self.quit(&mut framed, "shutting down").await;
                    return End::Ours;
                }
                _ = until_true_opt(&mut cancel) => {
                    self.quit(&mut framed, "retarget").await;
                    return End::Ours;
                }
                line = rx.recv() => match line {
                    Some(line) => {
                        if write(&mut framed, &line, rx.is_empty(), limit).await.is_err() {
                            return End::Lost;
                        }
                    }
                    None => {
                        self.quit(&mut framed, "resync").await;
                        return End::Ours;
                    }
                },
                _ = ping.tick() => {
                    if write(&mut framed, &RingMsg::Ping.to_fields(), true, limit).await.is_err() {
                        return End::Lost;
                    }
                }
                _ = tokio::time::sleep_until(last_heard + silence) => {
                    info!(%peer, "ring peer silent past ping_interval + ping_timeout");
                    return End::Lost;
                }
                item = framed.next() => {
                    last_heard = Instant::now();
                    let fields = match item {
                        None => return End::Lost,
                        Some(Err(e)) => {
                            debug!(%peer, error = %e, "ring connection broken");
                            return End::Lost;
                        }
                        Some(Ok(Err(e))) => {
                            debug!(%peer, error = %e, "bad ring line ignored");
                            continue;
                        }
                        Some(Ok(Ok(fields))) => fields,
                    };
                    match RingMsg::parse(&fields) {
                        Ok(RingMsg::Quit { reason }) => {
                            debug!(%peer, %reason, "ring peer closed the connection");
                            return End::PeerQuit;
                        }
                        Ok(RingMsg::Ping) => {
                            if write(&mut framed, &RingMsg::Pong.to_fields(), true, limit).await.is_err() {
                                return End::Lost;
                            }
                        }
                        Ok(RingMsg::Pong) => {}
                        Ok(RingMsg::SyncDone) => debug!(%peer, "ring snapshot received"),
                        Ok(msg) => self.apply(shared, msg, Some(id)),
                        Err(e) => debug!(%peer, error = %e, "ring line ignored"),
                    }
                }
            }
        }
    }

    fn allowed(&self, ip: std::net::IpAddr) -> bool {
        let nets = &self.settings.join_allowed_nets;
        nets.is_empty() || nets.iter().any(|n| n.contains(&ip))
    }

    /// Serves a connection accepted on the director port whose first line
    /// after VERSION was `DIRECTOR-HELLO`: the acceptor's side of the join,
    /// then a poll answer or a ring connection.
    pub(crate) async fn serve_accepted<S>(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        mut framed: Framed<S, LineCodec>,
        from: SocketAddr,
        hello: &[String],
        roles: PeerRoles,
        stop: watch::Receiver<bool>,
    ) where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let limit = self.settings.write_timeout;
        let me = self.settings.me;
        let refuse = |reason: &str| RingMsg::JoinFail {
            reason: reason.to_string(),
        };
        let (addr, dialer_nonce) = match RingMsg::parse(hello) {
            Ok(RingMsg::Hello { addr, nonce })
                if !nonce.is_empty() && nonce.len() <= wire::MAX_NONCE =>
            {
                (addr, nonce)
            }
            _ => {
                let _ = write(
                    &mut framed,
                    &refuse("expected DIRECTOR-HELLO <addr> <nonce>").to_fields(),
                    true,
                    limit,
                )
                .await;
                return;
            }
        };
        let reason = if !roles.director {
            Some("forbidden: ring commands need the director role")
        } else if *self.leaving.borrow() {
            Some("shutting down")
        } else if !self.allowed(from.ip()) || !self.allowed(addr.ip()) {
            warn!(%from, claimed = %addr, "ring join from outside join_allowed_nets refused");
            Some("address not allowed")
        } else if addr == me {
            Some("self")
        } else {
            None
        };
        if let Some(reason) = reason {
            self.stats.joins_refused.fetch_add(1, Ordering::Relaxed);
            let _ = write(&mut framed, &refuse(reason).to_fields(), true, limit).await;
            return;
        }
        let our_nonce = wire::nonce();
        let proof =
            wire::acceptor_proof(&self.settings.secret, &dialer_nonce, &our_nonce, me, addr);
        let challenge = RingMsg::Challenge {
            addr: me,
            nonce: our_nonce.clone(),
            proof,
        };
        if write(&mut framed, &challenge.to_fields(), true, limit)
            .await
            .is_err()
        {
            return;
        }
        let (inc, mode) = match read_msg(&mut framed, HANDSHAKE_TIMEOUT).await {
            Ok(RingMsg::Join {
                addr: joined,
                inc,
                mode,
                proof,
            }) if joined == addr
                && wire::check_dialer_proof(
                    &self.settings.secret,
                    &our_nonce,
                    &dialer_nonce,
                    addr,
                    me,
                    inc,
                    mode,
                    &proof,
                ) =>
            {
                (inc, mode)
            }
            Ok(RingMsg::Join { .. }) => {
                warn!(%from, claimed = %addr, "ring join with a bad proof refused (ring_secret differs?)");
                self.stats.joins_refused.fetch_add(1, Ordering::Relaxed);
                self.stats.proofs_failed.fetch_add(1, Ordering::Relaxed);
                let _ = write(&mut framed, &refuse("bad proof").to_fields(), true, limit).await;
                return;
            }
            other => {
                debug!(%from, ?other, "ring join abandoned");
                let _ = write(
                    &mut framed,
                    &refuse("expected DIRECTOR-JOIN").to_fields(),
                    true,
                    limit,
                )
                .await;
                return;
            }
        };
        if *self.leaving.borrow() {
            let _ = write(
                &mut framed,
                &refuse("shutting down").to_fields(),
                true,
                limit,
            )
            .await;
            return;
        }
        let ok = RingMsg::JoinOk {
            inc: self.incarnation(),
        };
        if write(&mut framed, &ok.to_fields(), true, limit)
            .await
            .is_err()
        {
            return;
        }
        self.stats.joins_accepted.fetch_add(1, Ordering::Relaxed);
        // A known member re-joining changes nothing and is not re-announced.
        self.merge_member(shared, &RingMsg::Add { addr, inc }, None);
        match mode {
            JoinMode::Poll => {
                if self.send_snapshot(shared, &mut framed, false).await.is_ok() {
                    self.quit(&mut framed, "poll done").await;
                }
            }
            JoinMode::Ring => {
                let end = self.run_link(shared, framed, addr, false, Some(stop)).await;
                self.note(Note::LinkDown {
                    peer: addr,
                    gen: None,
                    end,
                });
            }
        }
    }

    async fn connect(&self, target: SocketAddr) -> Result<Box<dyn RingIo>, DialError> {
        let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(DialError::Unreachable(e.to_string())),
            Err(_) => return Err(DialError::Unreachable("connect timed out".into())),
        };
        let _ = tcp.set_nodelay(true);
        match &self.settings.tls {
            None => Ok(Box::new(tcp)),
            Some(tls) => match tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(tcp)).await {
                Ok(Ok(s)) => Ok(Box::new(s)),
                Ok(Err(e)) => Err(DialError::Protocol(format!(
                    "TLS: {e} (does the peer's certificate carry ring_tls_server_name?)"
                ))),
                Err(_) => Err(DialError::Unreachable("TLS handshake timed out".into())),
            },
        }
    }

    /// The dialer's side of the join. Returns the connection, the peer's
    /// ring address and incarnation.
    async fn dial(
        &self,
        target: SocketAddr,
        mode: JoinMode,
    ) -> Result<(DialConn, SocketAddr, u64), DialError> {
        let io = self.connect(target).await?;
        let mut framed = Framed::new(io, LineCodec::new(MAX_LINE));
        let limit = self.settings.write_timeout;
        let broken = |_| DialError::Unreachable("write failed".into());
        // The director port greets first.
        let greeting = match tokio::time::timeout(GREETING_TIMEOUT, framed.next()).await {
            Ok(Some(Ok(Ok(fields)))) => fields,
            _ => return Err(DialError::Unreachable("no VERSION greeting".into())),
        };
        let ours = Version::new(protocol::SERVICE, protocol::MAJOR, protocol::MINOR);
        match Version::from_fields(&greeting) {
            Ok(v) if v.compatible_with(&ours) => {}
            _ => return Err(DialError::Protocol("not a director (VERSION)".into())),
        }
        write(&mut framed, &ours.to_fields(), false, limit)
            .await
            .map_err(broken)?;
        let me = self.settings.me;
        let our_nonce = wire::nonce();
        let hello = RingMsg::Hello {
            addr: me,
            nonce: our_nonce.clone(),
        };
        write(&mut framed, &hello.to_fields(), true, limit)
            .await
            .map_err(broken)?;
        let (peer, peer_nonce) = match read_msg(&mut framed, HANDSHAKE_TIMEOUT).await? {
            RingMsg::Challenge { addr, .. } if addr == me => return Err(DialError::SelfDial),
            RingMsg::Challenge { addr, nonce, proof } => {
                if nonce.is_empty()
                    || nonce.len() > wire::MAX_NONCE
                    || !wire::check_acceptor_proof(
                        &self.settings.secret,
                        &our_nonce,
                        &nonce,
                        addr,
                        me,
                        &proof,
                    )
                {
                    self.stats.proofs_failed.fetch_add(1, Ordering::Relaxed);
                    return Err(DialError::BadProof);
                }
                (addr, nonce)
            }
            RingMsg::JoinFail { reason } if reason == "self" => return Err(DialError::SelfDial),
            RingMsg::JoinFail { reason } => return Err(DialError::Refused(reason)),
            other => return Err(DialError::Protocol(format!("unexpected {other:?}"))),
        };
        let inc = self.incarnation();
        let proof = wire::dialer_proof(
            &self.settings.secret,
            &peer_nonce,
            &our_nonce,
            me,
            peer,
            inc,
            mode,
        );
        let join = RingMsg::Join {
            addr: me,
            inc,
            mode,
            proof,
        };
        write(&mut framed, &join.to_fields(), true, limit)
            .await
            .map_err(broken)?;
        match read_msg(&mut framed, HANDSHAKE_TIMEOUT).await? {
            RingMsg::JoinOk { inc } => Ok((framed, peer, inc)),
            RingMsg::JoinFail { reason } => Err(DialError::Refused(reason)),
            other => Err(DialError::Protocol(format!("unexpected {other:?}"))),
        }
    }

    /// A short probe: a connection and the VERSION greeting in time. A hung
    /// process accepts (the kernel does) but never greets.
    async fn probe_once(&self, target: SocketAddr) -> bool {
        let attempt = async {
            let io = self.connect(target).await.ok()?;
            let mut framed = Framed::new(io, LineCodec::new(MAX_LINE));
            match framed.next().await {
                Some(Ok(Ok(fields))) => Version::from_fields(&fields).ok(),
                _ => None,
            }
        };
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, attempt).await,
            Ok(Some(_))
        )
    }

    async fn probe(&self, target: SocketAddr) -> bool {
        for i in 0..PROBES {
            if self.probe_once(target).await {
                return true;
            }
            if i + 1 < PROBES {
                tokio::time::sleep(PROBE_GAP).await;
            }
        }
        false
    }

    /// Resolves the seeds: literal addresses as they are, host names every
    /// time (every address but our own). A seed without a port uses ours.
    async fn seed_targets(&self) -> Vec<SocketAddr> {
        let me = self.settings.me;
        let mut out = Vec::new();
        for seed in &self.settings.peers {
            if let Ok(a) = seed.parse::<SocketAddr>() {
                out.push(a);
                continue;
            }
            let (host, port) = match seed.rsplit_once(':') {
                Some((h, p)) => match p.parse::<u16>() {
                    Ok(p) => (h.trim_matches(['[', ']']).to_string(), p),
                    Err(_) => {
                        warn!(%seed, "director_service.peers entry has a bad port");
                        continue;
                    }
                },
                None => (seed.clone(), me.port()),
            };
            let resolved = tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host((host.as_str(), port)),
            )
            .await;
            match resolved {
                Ok(Ok(addrs)) => out.extend(addrs),
                Ok(Err(e)) => debug!(%seed, error = %e, "seed did not resolve"),
                Err(_) => debug!(%seed, "seed resolution timed out"),
            }
        }
        out.sort();
        out.dedup();
        out.retain(|a| *a != me);
        out
    }

    /// Polls one seed: its member list through the same merge. Returns
    /// whether the dial landed on ourselves.
    async fn poll_one(self: &Arc<Self>, shared: &Arc<Shared>, target: SocketAddr) -> bool {
        let (mut framed, _, _) = match self.dial(target, JoinMode::Poll).await {
            Ok(c) => c,
            Err(DialError::SelfDial) => return true,
            Err(e) => {
                debug!(%target, error = %e, "seed poll failed");
                return false;
            }
        };
        let read = async {
            for _ in 0..POLL_MAX_LINES {
                match framed.next().await {
                    Some(Ok(Ok(fields))) => match RingMsg::parse(&fields) {
                        Ok(RingMsg::SyncDone) | Ok(RingMsg::Quit { .. }) => return,
                        Ok(m @ (RingMsg::Add { .. } | RingMsg::Remove { .. })) => {
                            self.merge_member(shared, &m, None)
                        }
                        _ => {}
                    },
                    Some(Ok(Err(_))) => {}
                    _ => return,
                }
            }
        };
        let _ = tokio::time::timeout(POLL_TIMEOUT, read).await;
        false
    }

    /// One poll round over every seed target. Returns whether any dial
    /// landed on ourselves (a load-balanced seed).
    async fn poll_round(self: Arc<Self>, shared: Arc<Shared>) -> bool {
        let targets = self.seed_targets().await;
        let polls = targets.into_iter().map(|t| {
            let core = self.clone();
            let shared = shared.clone();
            async move { core.poll_one(&shared, t).await }
        });
        futures::future::join_all(polls)
            .await
            .into_iter()
            .any(|s| s)
    }

    // ---- the main loop -----------------------------------------------------

    /// Runs the ring until `shutdown` turns true, then leaves gracefully.
    pub async fn run(self: Arc<Self>, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
        let Some(notes) = lock(&self.notes_rx).take() else {
            return;
        };
        info!(me = %self.settings.me, incarnation = self.settings.incarnation, seeds = ?self.settings.peers, "director ring starting");
        let mut main = MainLoop {
            core: self.clone(),
            shared: shared.clone(),
            tasks: JoinSet::new(),
            dial: None,
            gen: 0,
            probing: HashSet::new(),
            not_before: HashMap::new(),
            next_poll: (!self.settings.peers.is_empty()).then(Instant::now),
        };
        main.run(notes, &mut shutdown).await;
        self.leave(&shared).await;
        main.tasks.abort_all();
    }

    /// Graceful leave: announce our own removal, QUIT every connection,
    /// refuse new joins; bounded by `leave_timeout`.
    pub async fn leave(&self, shared: &Shared) {
        if *self.leaving.borrow() {
            return;
        }
        let now = self.now(shared);
        let (inc, ttl) = {
            let mut m = lock(&self.membership);
            let inc = m.leave(now);
            let ttl = m
                .tomb_list(now)
                .into_iter()
                .find(|(a, _, _)| *a == self.settings.me)
                .and_then(|t| t.2);
            (inc, ttl)
        };
        self.broadcast(
            &RingMsg::Remove {
                addr: self.settings.me,
                inc,
                ttl_ms: ttl,
            },
            None,
        );
        let _ = self.leaving.send(true);
        let deadline = Instant::now() + self.settings.leave_timeout;
        loop {
            let changed = self.links_changed.notified();
            if lock(&self.links).map.is_empty() {
                break;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        info!("left the director ring");
    }
}

struct Dial {
    peer: SocketAddr,
    gen: u64,
    cancel: watch::Sender<bool>,
}

struct MainLoop {
    core: Arc<RingCore>,
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    dial: Option<Dial>,
    gen: u64,
    probing: HashSet<SocketAddr>,
    not_before: HashMap<SocketAddr, Instant>,
    /// None: no (more) seed polls.
    next_poll: Option<Instant>,
}

type PollFuture = Pin<Box<dyn Future<Output = bool> + Send>>;

impl MainLoop {
    async fn run(
        &mut self,
        mut notes: mpsc::UnboundedReceiver<Note>,
        shutdown: &mut watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ae_every = self.core.settings.anti_entropy;
        let mut next_ae = ae_every.map(|d| Instant::now() + d);
        let mut poll: Option<PollFuture> = None;
        loop {
            let poll_due = self.next_poll.filter(|_| poll.is_none());
            tokio::select! {
                _ = until_true(shutdown) => return,
                note = notes.recv() => match note {
                    Some(n) => self.handle(n),
                    None => return,
                },
                _ = tick.tick() => {
                    let now = self.shared.now();
                    lock(&self.core.membership).expire(now);
                    self.reconcile();
                }
                _ = sleep_until_opt(next_ae) => {
                    let now = self.shared.now();
                    let lines: Vec<Line> = self
                        .core
                        .member_lines(now)
                        .iter()
                        .map(|m| Arc::new(m.to_fields()))
                        .collect();
                    self.core.broadcast_lines(&lines, None);
                    next_ae = ae_every.map(|d| Instant::now() + d);
                }
                _ = sleep_until_opt(poll_due) => {
                    poll = Some(Box::pin(self.core.clone().poll_round(self.shared.clone())));
                }
                self_dial = async { match poll.as_mut() { Some(p) => p.await, None => std::future::pending().await } } => {
                    poll = None;
                    self.next_poll = self.poll_after(self_dial);
                    self.reconcile();
                }
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
            }
        }
    }

    /// When the next seed poll is due: `seed_poll_interval` below
    /// `min_members`, `seed_poll_idle_interval` at it, 500 ms after a
    /// self-dial; None when polling once.
    fn poll_after(&self, self_dial: bool) -> Option<Instant> {
        let s = &self.core.settings;
        if s.peers.is_empty() {
            return None;
        }
        let now = Instant::now();
        if self_dial {
            return Some(now + SELF_DIAL_RETRY);
        }
        let every = s.seed_poll?;
        let members = lock(&self.core.membership).len();
        Some(
            now + if members >= s.min_members {
                s.seed_poll_idle
            } else {
                every
            },
        )
    }

    fn handle(&mut self, note: Note) {
        let now = Instant::now();
        match note {
            Note::LinkDown { peer, gen, end } => {
                if gen.is_some() && self.dial.as_ref().map(|d| d.gen) == gen {
                    self.dial = None;
                }
                match end {
                    End::Ours => {}
                    End::PeerQuit => {
                        self.not_before.insert(peer, now + QUIT_RETRY);
                    }
                    End::Lost => self.suspect(peer),
                }
            }
            Note::DialFailed { peer, gen, err } => {
                if self.dial.as_ref().map(|d| d.gen) == Some(gen) {
                    self.dial = None;
                }
                match err {
                    DialError::Unreachable(why) => {
                        debug!(%peer, %why, "ring dial failed");
                        self.not_before.insert(peer, now + QUIT_RETRY);
                        self.suspect(peer);
                    }
                    other => {
                        warn!(%peer, error = %other, "ring dial refused");
                        self.not_before.insert(peer, now + JOIN_RETRY);
                    }
                }
            }
            Note::Changed => {
                let s = &self.core.settings;
                if let (Some(every), Some(next)) = (s.seed_poll, self.next_poll) {
                    if lock(&self.core.membership).len() < s.min_members && next > now + every {
                        self.next_poll = Some(now + every);
                    }
                }
            }
            Note::Probed { peer, inc, alive } => {
                self.probing.remove(&peer);
                if alive {
                    self.not_before.remove(&peer);
                } else {
                    self.declare_dead(peer, inc);
                }
            }
        }
        self.reconcile();
    }

    /// A connection to `peer` was lost: if it is a neighbour, confirm with
    /// probes before declaring it dead.
    fn suspect(&mut self, peer: SocketAddr) {
        let inc = {
            let m = lock(&self.core.membership);
            if !m.is_neighbour(peer) {
                return;
            }
            match m.inc_of(peer) {
                Some(inc) => inc,
                None => return,
            }
        };
        if !self.probing.insert(peer) {
            return;
        }
        let core = self.core.clone();
        self.tasks.spawn(async move {
            let alive = core.probe(peer).await;
            core.note(Note::Probed { peer, inc, alive });
        });
    }

    fn declare_dead(&mut self, peer: SocketAddr, inc: u64) {
        let now = self.shared.now();
        let removed = {
            let mut m = lock(&self.core.membership);
            if m.inc_of(peer) != Some(inc) {
                None
            } else {
                m.declare_dead(peer, now).map(|inc| {
                    let ttl = m
                        .tomb_list(now)
                        .into_iter()
                        .find(|(a, _, _)| *a == peer)
                        .and_then(|t| t.2);
                    (inc, ttl)
                })
            }
        };
        if let Some((inc, ttl_ms)) = removed {
            info!(member = %peer, "director declared dead by its neighbour");
            self.core
                .stats
                .deaths_declared
                .fetch_add(1, Ordering::Relaxed);
            // Over the current connections, before the neighbours change.
            self.core.broadcast(
                &RingMsg::Remove {
                    addr: peer,
                    inc,
                    ttl_ms,
                },
                None,
            );
        }
    }

    /// Points the one outgoing ring connection at the right neighbour.
    fn reconcile(&mut self) {
        if *self.core.leaving.borrow() {
            return;
        }
        let target = lock(&self.core.membership).dial_target();
        if let Some(d) = &self.dial {
            if Some(d.peer) == target {
                return;
            }
            debug!(from = %d.peer, to = ?target, "ring dial re-targeted");
            let _ = d.cancel.send(true);
            self.dial = None;
        }
        let Some(target) = target else {
            return;
        };
        if self.probing.contains(&target)
            || self
                .not_before
                .get(&target)
                .is_some_and(|t| Instant::now() < *t)
        {
            return;
        }
        self.gen += 1;
        let gen = self.gen;
        let (cancel, cancel_rx) = watch::channel(false);
        self.dial = Some(Dial {
            peer: target,
            gen,
            cancel,
        });
        let core = self.core.clone();
        let shared = self.shared.clone();
        self.tasks.spawn(async move {
            let mut stop = cancel_rx.clone();
            let dialed = tokio::select! {
                r = core.dial(target, JoinMode::Ring) => r,
                _ = until_true(&mut stop) => return,
            };
            match dialed {
                Ok((framed, addr, _)) if addr == target => {
                    let end = core
                        .run_link(&shared, framed, target, true, Some(cancel_rx))
                        .await;
                    core.note(Note::LinkDown {
                        peer: target,
                        gen: Some(gen),
                        end,
                    });
                }
                Ok((mut framed, addr, _)) => {
                    core.quit(&mut framed, "wrong member").await;
                    core.note(Note::DialFailed {
                        peer: target,
                        gen,
                        err: DialError::Protocol(format!("{target} answers as {addr}")),
                    });
                }
                Err(err) => core.note(Note::DialFailed {
                    peer: target,
                    gen,
                    err,
                }),
            }
        });
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
