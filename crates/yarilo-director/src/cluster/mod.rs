//! The director ring: several directors that share membership, the
//! backend set and the sticky assignments (director seed, "Ring
//! formation"; issue 11).
//!
//! - [`membership`]: the member list and tombstones, pure.
//! - [`wire`]: the ring lines and the join proof, sans-I/O.
//! - [`node`]: one director's ring as a pure state machine (timers,
//!   neighbour dial, probes, forwarding, merges, leave); the simulator in
//!   `tests/ring_sim.rs` runs it on an in-memory network.
//! - this module: the thin tokio driver — the join handshake and I/O of
//!   dials, probes and seed polls, one task per ring connection, and a
//!   main task that ticks the state machine and spawns what it asks for.
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
pub mod node;
pub mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use futures::stream::SplitStream;
use futures::{Sink, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tokio_util::codec::{Decoder, Encoder};
use tracing::{debug, info, warn};
use yarilo_config::DirectorService;
use yarilo_tls::internal::InternalTls;
use yarilo_wire::WireError;
use yarilo_wire::{LineCodec, Version};

use crate::director::Director;
use crate::protocol::{self, PeerRoles, MAX_LINE};
use crate::service::Shared;
use crate::{DirectorError, Tick};

use membership::Membership;
use node::{DialFailure, End, Input, LinkId, NodeConfig, Output, RingNode};
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
/// Batches of lines queued to one connection; a connection that falls
/// this far behind is closed (`QUIT resync`) and re-synchronises by
/// snapshot.
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
    /// Bound on the graceful leave (`session_grace_period`).
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
        let name = c.ring_tls_server_name.as_deref().filter(|n| !n.is_empty());
        let tls = match (tls, name) {
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
            leave_timeout: secs(c.session_grace_period.max(1)),
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

/// Counters and gauges of one director's ring (status, tests, and the
/// `yarilo_director_ring_*` metrics; clones share the values).
#[derive(Debug, Default)]
pub struct RingStats {
    /// Joins (ring or poll) that passed the proof.
    pub joins_accepted: Counter,
    /// Joins refused (bad proof, not allowed, shutting down, self, role).
    pub joins_refused: Counter,
    /// Join proofs that failed, on either side (a peer with another
    /// `ring_secret`, or an impostor).
    pub proofs_failed: Counter,
    /// Members this director declared dead after its probes failed.
    pub deaths_declared: Counter,
    /// Ring connections established (both directions).
    pub links_up: Counter,
    /// Ring connections closed because they fell too far behind.
    pub links_behind: Counter,
    /// Sessions kicked because a ring merge moved their user.
    pub merge_kicks: Counter,
    /// Members in this director's view (itself included).
    pub members: Gauge,
    /// Live ring connections.
    pub links: Gauge,
}

impl RingStats {
    /// Registers the ring's metrics (`yarilo_director_ring_*`).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("yarilo_director_ring");
        r.register(
            "joins_accepted",
            "Ring and poll joins that passed the proof",
            self.joins_accepted.clone(),
        );
        r.register(
            "joins_refused",
            "Joins refused (proof, allowed nets, shutting down, role)",
            self.joins_refused.clone(),
        );
        r.register(
            "proofs_failed",
            "Join proofs that failed on either side",
            self.proofs_failed.clone(),
        );
        r.register(
            "deaths_declared",
            "Members this director declared dead",
            self.deaths_declared.clone(),
        );
        r.register(
            "links_established",
            "Ring connections established",
            self.links_up.clone(),
        );
        r.register(
            "links_behind",
            "Ring connections closed for falling behind",
            self.links_behind.clone(),
        );
        r.register(
            "merge_kicks",
            "Sessions kicked because a ring merge moved their user",
            self.merge_kicks.clone(),
        );
        r.register(
            "members",
            "Members in this director's view",
            self.members.clone(),
        );
        r.register("links", "Live ring connections", self.links.clone());
    }
}

/// What a connection task is told to do, in order.
enum LinkCmd {
    Msgs(Vec<RingMsg>),
    Close(&'static str),
    Drop,
}

/// Work the main loop spawns (it owns the task set).
enum Action {
    Dial { peer: SocketAddr, gen: u64 },
    Probe { peer: SocketAddr, inc: u64 },
    Poll,
}

/// One director's ring: the state machine behind a lock, the connection
/// queues, the main loop.
pub struct RingCore {
    stats: RingStats,
    settings: RingSettings,
    /// Lock order: the director lock first, then this one.
    node: Mutex<RingNode>,
    links: Mutex<HashMap<LinkId, mpsc::Sender<LinkCmd>>>,
    next_link: AtomicU64,
    links_changed: Notify,
    actions: mpsc::UnboundedSender<Action>,
    actions_rx: Mutex<Option<mpsc::UnboundedReceiver<Action>>>,
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

async fn write<S>(
    framed: &mut Framed<S, LineCodec>,
    fields: &[String],
    flush: bool,
    limit: Option<Duration>,
) -> Result<(), ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    put(framed, fields, flush, limit).await
}

/// One line into a sink (flushed or only buffered), bounded by `limit`.
async fn put<W, I>(sink: &mut W, item: I, flush: bool, limit: Option<Duration>) -> Result<(), ()>
where
    W: Sink<I> + Unpin,
{
    let op = async {
        if flush {
            sink.send(item).await
        } else {
            sink.feed(item).await
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

async fn until_true_opt(rx: &mut Option<watch::Receiver<bool>>) {
    match rx {
        Some(rx) => {
            if rx.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// The line codec with owned lines, so a connection can be split into a
/// reader and a writer that run at once.
struct OwnedLines(LineCodec);

impl Decoder for OwnedLines {
    type Item = <LineCodec as Decoder>::Item;
    type Error = WireError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, WireError> {
        self.0.decode(src)
    }
    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, WireError> {
        self.0.decode_eof(src)
    }
}

impl Encoder<Vec<String>> for OwnedLines {
    type Error = WireError;
    fn encode(&mut self, fields: Vec<String>, dst: &mut BytesMut) -> Result<(), WireError> {
        self.0.encode(&fields[..], dst)
    }
}

/// Writes what the state machine queues for one connection until it is
/// closed. Each write is bounded by `write_timeout`.
async fn write_loop<W>(
    sink: &mut W,
    rx: &mut mpsc::Receiver<LinkCmd>,
    limit: Option<Duration>,
) -> End
where
    W: Sink<Vec<String>> + Unpin,
{
    let quit = |reason: &str| {
        RingMsg::Quit {
            reason: reason.into(),
        }
        .to_fields()
    };
    let one_second = Some(Duration::from_secs(1));
    loop {
        match rx.recv().await {
            Some(LinkCmd::Msgs(msgs)) => {
                let n = msgs.len();
                for (i, m) in msgs.iter().enumerate() {
                    let flush = i + 1 == n && rx.is_empty();
                    if put(sink, m.to_fields(), flush, limit).await.is_err() {
                        return End::Lost;
                    }
                }
            }
            Some(LinkCmd::Close(reason)) => {
                let _ = put(sink, quit(reason), true, one_second).await;
                return End::Ours;
            }
            Some(LinkCmd::Drop) => return End::Ours,
            None => {
                let _ = put(sink, quit("resync"), true, one_second).await;
                return End::Ours;
            }
        }
    }
}

fn ms(d: Duration) -> Tick {
    d.as_millis() as Tick
}

impl RingCore {
    pub fn new(settings: RingSettings) -> Arc<RingCore> {
        RingCore::starting_at(settings, 0)
    }

    /// A ring whose clock (the director's) reads `now`.
    pub fn starting_at(settings: RingSettings, now: Tick) -> Arc<RingCore> {
        let (actions, actions_rx) = mpsc::unbounded_channel();
        let cfg = NodeConfig {
            me: settings.me,
            incarnation: settings.incarnation,
            has_seeds: !settings.peers.is_empty(),
            seed_poll: settings.seed_poll.map(ms),
            seed_poll_idle: ms(settings.seed_poll_idle),
            min_members: settings.min_members,
            ping_interval: ms(settings.ping_interval),
            ping_timeout: ms(settings.ping_timeout),
            anti_entropy: settings.anti_entropy.map(ms),
            tombstone_ttl: settings.tombstone_ttl.map(ms),
        };
        Arc::new(RingCore {
            stats: RingStats::default(),
            node: Mutex::new(RingNode::new(cfg, now)),
            settings,
            links: Mutex::new(HashMap::new()),
            next_link: AtomicU64::new(1),
            links_changed: Notify::new(),
            actions,
            actions_rx: Mutex::new(Some(actions_rx)),
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
        lock(&self.node).members()
    }

    /// A copy of the membership view (status, tests).
    pub fn membership(&self) -> Membership {
        lock(&self.node).membership().clone()
    }

    /// Our current incarnation.
    pub fn incarnation(&self) -> u64 {
        lock(&self.node).incarnation()
    }

    /// Live ring connections: (peer, whether we dialled it).
    pub fn links(&self) -> Vec<(SocketAddr, bool)> {
        let mut v: Vec<_> = lock(&self.node)
            .links()
            .into_iter()
            .map(|(_, peer, dialed)| (peer, dialed))
            .collect();
        v.sort();
        v
    }

    // ---- the state machine ------------------------------------------------

    /// Feeds one input to the state machine with the director already
    /// locked by the caller, and carries out what it asks, in order and
    /// under both locks (so lines keep their order on every connection).
    pub(crate) fn handle_locked(
        &self,
        shared: Option<&Arc<Shared>>,
        d: &mut Director,
        now: Tick,
        input: Input,
    ) {
        let mut out = Vec::new();
        let mut node = lock(&self.node);
        node.handle(now, input, d, &mut out);
        self.stats.members.set(node.membership().len() as i64);
        self.stats.links.set(node.link_count() as i64);
        self.carry_out(shared, out);
    }

    /// Locks the director and feeds one input.
    fn step(&self, shared: &Arc<Shared>, input: Input) {
        let now = shared.now();
        let mut d = shared.director_unreplicated();
        self.handle_locked(Some(shared), &mut d, now, input);
    }

    fn carry_out(&self, shared: Option<&Arc<Shared>>, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { link, msgs } => self.queue(link, LinkCmd::Msgs(msgs)),
                Output::Close { link, reason } => self.queue(link, LinkCmd::Close(reason)),
                Output::Drop { link } => self.queue(link, LinkCmd::Drop),
                Output::Dial { peer, gen } => {
                    let _ = self.actions.send(Action::Dial { peer, gen });
                }
                Output::Probe { peer, inc } => {
                    let _ = self.actions.send(Action::Probe { peer, inc });
                }
                Output::Poll => {
                    let _ = self.actions.send(Action::Poll);
                }
                Output::Kick(kicks) => {
                    info!(
                        kicks = kicks.len(),
                        "a ring merge moved a user; kicking its sessions on the old backend"
                    );
                    self.stats.merge_kicks.inc_by(kicks.len() as u64);
                    if let Some(s) = shared {
                        s.kick_now(kicks);
                    }
                }
                Output::AdminKick(kicks) => {
                    if let Some(s) = shared {
                        s.kick_admin(kicks);
                    }
                }
                Output::Released(c) => {
                    if let Some(s) = shared {
                        s.released(c);
                    }
                }
                Output::Removed(r) => {
                    info!(ip = %r.ip, users_unpinned = r.users_unpinned, "backend removed (ring)");
                    if let Some(s) = shared {
                        s.kick_removed(&r);
                    }
                }
                Output::MemberJoined(addr) => info!(member = %addr, "director joined the ring"),
                Output::MemberLeft(addr) => info!(member = %addr, "director left the ring"),
                Output::DeclaredDead(addr) => {
                    info!(member = %addr, "director declared dead by its neighbour");
                    self.stats.deaths_declared.inc();
                }
                Output::Refuted(inc) => warn!(
                    incarnation = inc,
                    "this director was removed from the ring while running; rejoining"
                ),
            }
        }
    }

    /// Queues to a connection; one that fell too far behind is closed
    /// (its task says `QUIT resync`) and re-synchronises by snapshot.
    fn queue(&self, link: LinkId, cmd: LinkCmd) {
        let mut links = lock(&self.links);
        let Some(tx) = links.get(&link) else {
            return;
        };
        if tx.try_send(cmd).is_err() {
            warn!(
                link,
                "ring connection too far behind; closing it to re-synchronise"
            );
            self.stats.links_behind.inc();
            links.remove(&link);
        }
    }

    fn register(&self) -> (LinkId, mpsc::Receiver<LinkCmd>) {
        self.stats.links_up.inc();
        let (tx, rx) = mpsc::channel(LINK_QUEUE);
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        lock(&self.links).insert(id, tx);
        (id, rx)
    }

    fn unregister(&self, id: LinkId) {
        lock(&self.links).remove(&id);
        self.links_changed.notify_waiters();
    }

    // ---- connections -------------------------------------------------------

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

    /// Runs an authenticated ring connection: tells the state machine it
    /// is up, then moves lines both ways until either side ends it. The
    /// reader and the writer run at once: both ends start by writing a
    /// snapshot that may be far larger than the socket buffers, and two
    /// ends that each finish writing before reading would wait on each
    /// other for ever.
    async fn run_link<S>(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        framed: Framed<S, LineCodec>,
        peer: SocketAddr,
        dial: Option<u64>,
        mut stop: Option<watch::Receiver<bool>>,
    ) where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (id, mut rx) = self.register();
        struct Unregister<'a>(&'a RingCore, LinkId);
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                self.0.unregister(self.1);
            }
        }
        let _unregister = Unregister(self, id);
        debug!(%peer, dialed = dial.is_some(), link = id, "ring connection up");
        self.step(
            shared,
            Input::LinkUp {
                link: id,
                peer,
                dial,
            },
        );
        let limit = self.settings.write_timeout;
        let (mut sink, mut stream) = framed.map_codec(OwnedLines).split();
        let mut stopped = false;
        let end = {
            let writer = write_loop(&mut sink, &mut rx, limit);
            let reader = self.read_loop(shared, &mut stream, id, peer);
            tokio::pin!(writer, reader);
            tokio::select! {
                _ = until_true_opt(&mut stop) => {
                    stopped = true;
                    End::Ours
                }
                end = &mut writer => end,
                end = &mut reader => end,
            }
        };
        if stopped {
            let quit = RingMsg::Quit {
                reason: "shutting down".into(),
            };
            let _ = put(
                &mut sink,
                quit.to_fields(),
                true,
                Some(Duration::from_secs(1)),
            )
            .await;
        }
        self.step(shared, Input::LinkDown { link: id, end });
    }

    /// Feeds every line the peer sends to the state machine.
    async fn read_loop<S>(
        &self,
        shared: &Arc<Shared>,
        stream: &mut SplitStream<Framed<S, OwnedLines>>,
        id: LinkId,
        peer: SocketAddr,
    ) -> End
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        loop {
            let fields = match stream.next().await {
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
                Ok(msg) => {
                    let quit = matches!(msg, RingMsg::Quit { .. });
                    self.step(shared, Input::Line { link: id, msg });
                    if quit {
                        debug!(%peer, "ring peer closed the connection");
                        return End::PeerQuit;
                    }
                }
                Err(e) => debug!(%peer, error = %e, "ring line ignored"),
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
        } else if !self.allowed(from.ip()) || !self.allowed(addr.ip()) {
            warn!(%from, claimed = %addr, "ring join from outside join_allowed_nets refused");
            Some("address not allowed")
        } else {
            lock(&self.node).join_refusal(addr)
        };
        if let Some(reason) = reason {
            self.stats.joins_refused.inc();
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
                self.stats.joins_refused.inc();
                self.stats.proofs_failed.inc();
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
        let refusal = lock(&self.node).join_refusal(addr);
        if let Some(reason) = refusal {
            let _ = write(&mut framed, &refuse(reason).to_fields(), true, limit).await;
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
        self.stats.joins_accepted.inc();
        {
            let now = shared.now();
            let mut out = Vec::new();
            let mut node = lock(&self.node);
            node.joined(now, addr, inc, &mut out);
            self.carry_out(Some(shared), out);
        }
        match mode {
            JoinMode::Poll => {
                let mut msgs = { lock(&self.node).member_msgs(shared.now()) };
                msgs.push(RingMsg::SyncDone { digest: None });
                for m in &msgs {
                    if write(&mut framed, &m.to_fields(), false, limit)
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                self.quit(&mut framed, "poll done").await;
            }
            JoinMode::Ring => {
                self.run_link(shared, framed, addr, None, Some(stop)).await;
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
                    self.stats.proofs_failed.inc();
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

    /// Polls one seed: its member lines, whether the dial landed on
    /// ourselves, and whether nobody answered.
    async fn poll_one(&self, target: SocketAddr) -> (Vec<RingMsg>, bool, bool) {
        let (mut framed, _, _) = match self.dial(target, JoinMode::Poll).await {
            Ok(c) => c,
            Err(DialError::SelfDial) => return (Vec::new(), true, false),
            Err(e) => {
                debug!(%target, error = %e, "seed poll failed");
                let unreachable = matches!(e, DialError::Unreachable(_));
                return (Vec::new(), false, unreachable);
            }
        };
        let mut lines = Vec::new();
        let read = async {
            for _ in 0..POLL_MAX_LINES {
                match framed.next().await {
                    Some(Ok(Ok(fields))) => match RingMsg::parse(&fields) {
                        Ok(RingMsg::SyncDone { .. }) | Ok(RingMsg::Quit { .. }) => return,
                        Ok(m @ (RingMsg::Add { .. } | RingMsg::Remove { .. })) => lines.push(m),
                        _ => {}
                    },
                    Some(Ok(Err(_))) => {}
                    _ => return,
                }
            }
        };
        let _ = tokio::time::timeout(POLL_TIMEOUT, read).await;
        (lines, false, false)
    }

    /// One poll round over every seed target.
    async fn poll_round(self: Arc<Self>, shared: Arc<Shared>) {
        let targets = self.seed_targets().await;
        let polls = targets.into_iter().map(|t| {
            let core = self.clone();
            async move { (t, core.poll_one(t).await) }
        });
        let mut lines = Vec::new();
        let mut self_dial = false;
        let mut unreachable = Vec::new();
        for (t, (l, s, u)) in futures::future::join_all(polls).await {
            lines.extend(l);
            self_dial |= s;
            if u {
                unreachable.push(t);
            }
        }
        self.step(
            &shared,
            Input::PollDone {
                self_dial,
                lines,
                unreachable,
            },
        );
    }

    async fn dial_task(self: Arc<Self>, shared: Arc<Shared>, target: SocketAddr, gen: u64) {
        let failure = match self.dial(target, JoinMode::Ring).await {
            Ok((framed, addr, _)) if addr == target => {
                self.run_link(&shared, framed, target, Some(gen), None)
                    .await;
                return;
            }
            Ok((mut framed, addr, _)) => {
                self.quit(&mut framed, "wrong member").await;
                warn!(%target, answers_as = %addr, "ring dial reached another member");
                DialFailure::Refused
            }
            Err(DialError::Unreachable(why)) => {
                debug!(%target, %why, "ring dial failed");
                DialFailure::Unreachable
            }
            Err(other) => {
                warn!(%target, error = %other, "ring dial refused");
                DialFailure::Refused
            }
        };
        self.step(&shared, Input::DialFailed { gen, failure });
    }

    // ---- the main loop -----------------------------------------------------

    /// Runs the ring until `shutdown` turns true, then leaves gracefully.
    pub async fn run(self: Arc<Self>, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
        let Some(mut actions) = lock(&self.actions_rx).take() else {
            return;
        };
        info!(me = %self.settings.me, incarnation = self.settings.incarnation, seeds = ?self.settings.peers, "director ring starting");
        let mut tasks = JoinSet::new();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = shutdown.wait_for(|v| *v) => {
                    let _ = r;
                    break;
                }
                action = actions.recv() => {
                    let Some(action) = action else { break };
                    let core = self.clone();
                    let shared = shared.clone();
                    match action {
                        Action::Dial { peer, gen } => {
                            tasks.spawn(core.dial_task(shared, peer, gen));
                        }
                        Action::Probe { peer, inc } => {
                            tasks.spawn(async move {
                                let alive = core.probe(peer).await;
                                core.step(&shared, Input::Probed { peer, inc, alive });
                            });
                        }
                        Action::Poll => {
                            tasks.spawn(core.poll_round(shared));
                        }
                    }
                }
                _ = tick.tick() => self.step(&shared, Input::Tick),
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        self.leave(&shared).await;
        tasks.abort_all();
    }

    /// Graceful leave: announce our own removal, QUIT every connection,
    /// refuse new joins; bounded by `leave_timeout`.
    pub async fn leave(&self, shared: &Arc<Shared>) {
        if lock(&self.node).is_leaving() {
            return;
        }
        self.step(shared, Input::Leave);
        let deadline = Instant::now() + self.settings.leave_timeout;
        loop {
            let changed = self.links_changed.notified();
            if lock(&self.links).is_empty() {
                break;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        info!("left the director ring");
    }
}
