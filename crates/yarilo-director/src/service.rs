//! The tokio driver of the LOOKUP service on `director_service.listen`.
//!
//! Thin by design: it frames lines (yarilo-wire `LineCodec`), feeds them
//! to [`crate::protocol::handle`] under a mutex held for microseconds, and
//! runs [`Director::tick`] once a second. Time is `tokio::time`, so tests
//! may pause it.
//!
//! Invariants: every read is bounded (line length, keepalive deadline),
//! every write is bounded by `write_timeout`; a peer that stops answering
//! PING within `ping_timeout` is closed; replies are flushed when the
//! peer's pipelined input runs dry, never held longer.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tracing::{debug, info, warn};
use yarilo_config::{AssignmentPolicy, DirectorService};
use yarilo_wire::{LineCodec, Version};

use crate::cluster::node::Input;
use crate::cluster::{RingCore, RingSettings};
use crate::director::{BackendOutcome, Confirmed, Kick, Removal, Settings, UpOutcome};
use crate::directory::{DirectorId, UserKey};
use crate::metrics::Metrics;
use crate::protocol::{self, permitted, Effect, PeerRoles, MAX_LINE};
use crate::{Director, DirectorError, Tick};

/// Timers of the connection loop.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub ping_interval: Duration,
    pub ping_timeout: Duration,
    /// `None`: writes are not bounded.
    pub write_timeout: Option<Duration>,
    /// After shutdown starts: the bound on the ring leave and on held
    /// LOOKUPs still being answered (`session_grace_period`).
    pub shutdown_grace: Duration,
}

impl Timeouts {
    pub fn from_config(c: &DirectorService) -> Timeouts {
        Timeouts {
            ping_interval: Duration::from_secs(c.ping_interval.max(1)),
            ping_timeout: Duration::from_secs(c.ping_timeout.max(1)),
            write_timeout: (c.write_timeout > 0).then(|| Duration::from_secs(c.write_timeout)),
            shutdown_grace: Duration::from_secs(c.session_grace_period.max(1)),
        }
    }
}

/// How kicks are paced (deployment seed, "Kick pacing").
#[derive(Debug, Clone, Copy)]
pub struct KickPacing {
    /// Delay of an admin kick (`user_kick_delay`); `None` = immediate.
    pub user_kick_delay: Option<Duration>,
    /// Backend-down kicks per batch (`max_parallel_kicks`); `None` = all.
    pub max_parallel_kicks: Option<usize>,
    /// Pause between batches.
    pub batch_pause: Duration,
    /// Kicks per window of a graceful admin flush (`max_parallel_moves`).
    pub max_parallel_moves: usize,
}

impl Default for KickPacing {
    fn default() -> Self {
        KickPacing::from_config(&DirectorService::default())
    }
}

impl KickPacing {
    pub fn from_config(c: &DirectorService) -> KickPacing {
        KickPacing {
            user_kick_delay: (c.user_kick_delay >= 0)
                .then(|| Duration::from_secs(c.user_kick_delay as u64)),
            max_parallel_kicks: (c.max_parallel_kicks >= 0)
                .then(|| (c.max_parallel_kicks as usize).max(1)),
            batch_pause: Duration::from_millis(100),
            max_parallel_moves: (c.max_parallel_moves as usize).max(1),
        }
    }
}

/// Kick orders in flight to watching login connections.
const KICK_QUEUE: usize = 16 * 1024;

/// State shared by the connections of one director.
#[derive(Debug)]
pub struct Shared {
    director: Mutex<Director>,
    start: Instant,
    timeouts: Timeouts,
    pacing: KickPacing,
    kicks: broadcast::Sender<Arc<Kick>>,
    /// Woken whenever a confirmed-kill hold is released.
    released: Notify,
    flush_program: Option<FlushProgram>,
    metrics: Metrics,
    policy: &'static str,
    /// The director ring, when `ring_secret` is set.
    ring: OnceLock<Arc<RingCore>>,
}

/// The state machine under its lock. Dropping it hands the changes the
/// ring must learn (the state machine's event outbox) to the ring, under
/// the same lock, so they leave in the order they were made.
pub struct DirectorGuard<'a> {
    guard: MutexGuard<'a, Director>,
    ring: Option<&'a Arc<RingCore>>,
    shared: &'a Shared,
}

impl std::ops::Deref for DirectorGuard<'_> {
    type Target = Director;
    fn deref(&self) -> &Director {
        &self.guard
    }
}

impl std::ops::DerefMut for DirectorGuard<'_> {
    fn deref_mut(&mut self) -> &mut Director {
        &mut self.guard
    }
}

impl Drop for DirectorGuard<'_> {
    fn drop(&mut self) {
        if let Some(ring) = self.ring {
            let events = self.guard.take_events();
            if !events.is_empty() {
                let now = self.shared.now();
                ring.handle_locked(None, &mut self.guard, now, Input::Local(events));
            }
        }
    }
}

/// `flush_program` and its time bound.
#[derive(Debug, Clone)]
pub struct FlushProgram {
    pub program: String,
    pub timeout: Duration,
}

impl Shared {
    /// Wraps a state machine built by the caller.
    pub fn new(director: Director, timeouts: Timeouts) -> Arc<Shared> {
        Shared::with_pacing(director, timeouts, KickPacing::default())
    }

    /// Wraps a state machine with explicit kick pacing.
    pub fn with_pacing(director: Director, timeouts: Timeouts, pacing: KickPacing) -> Arc<Shared> {
        let policy = match director.settings().policy {
            AssignmentPolicy::Hash => "hash",
            AssignmentPolicy::LeastSessions => "least_sessions",
            AssignmentPolicy::Domain => "domain",
        };
        Arc::new(Shared {
            director: Mutex::new(director),
            start: Instant::now(),
            timeouts,
            pacing,
            kicks: broadcast::channel(KICK_QUEUE).0,
            released: Notify::new(),
            flush_program: None,
            metrics: Metrics::default(),
            policy,
            ring: OnceLock::new(),
        })
    }

    /// Builds the director from configuration: parses the template (an
    /// invalid one is an error) and resolves every `mail_servers` host,
    /// adding each address it resolves to (a host that does not resolve is
    /// an error, as in the reference).
    pub async fn from_config(
        config: &DirectorService,
        me: DirectorId,
    ) -> Result<Arc<Shared>, DirectorError> {
        let settings = Settings::from_config(config)?;
        let mut director = Director::new(settings, me);
        for server in &config.mail_servers {
            for ip in resolve(&server.host).await? {
                if !director.add_static(0, ip, server.port, &server.tag, server.vhosts) {
                    warn!(host = %server.host, %ip, "mail_servers address listed twice; first entry kept");
                }
            }
        }
        let mut shared = Shared::with_pacing(
            director,
            Timeouts::from_config(config),
            KickPacing::from_config(config),
        );
        if !config.flush_program.is_empty() {
            let timeout = match config.flush_program_timeout {
                0 => 10,
                n => n,
            };
            if let Some(s) = Arc::get_mut(&mut shared) {
                s.flush_program = Some(FlushProgram {
                    program: config.flush_program.clone(),
                    timeout: Duration::from_secs(timeout),
                });
            }
        }
        Ok(shared)
    }

    /// Milliseconds since start-up: the state machine's clock.
    pub fn now(&self) -> Tick {
        self.start.elapsed().as_millis() as Tick
    }

    /// The state machine (for the admin API and tests). Changes made
    /// through the guard reach the ring when it drops.
    pub fn director(&self) -> DirectorGuard<'_> {
        self.lock_director(self.ring.get())
    }

    /// The state machine without the hand-off to the ring on drop (the
    /// ring's own driver, which forwards what it applies itself).
    pub(crate) fn director_unreplicated(&self) -> DirectorGuard<'_> {
        self.lock_director(None)
    }

    fn lock_director<'a>(&'a self, ring: Option<&'a Arc<RingCore>>) -> DirectorGuard<'a> {
        // A panic while holding the lock would be a bug; the state is still
        // consistent per-operation, so keep serving. A contended lock is
        // what the `mutex` profile samples.
        let guard = match self.director.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let waiting = Instant::now();
                let g = self
                    .director
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                yarilo_telemetry::profiling::record_contention(waiting.elapsed());
                g
            }
        };
        DirectorGuard {
            guard,
            ring,
            shared: self,
        }
    }

    /// Turns the director ring on (before serving). False if it already
    /// was.
    pub fn enable_ring(&self, settings: RingSettings) -> bool {
        let ring = RingCore::starting_at(settings, self.now());
        if self.ring.set(ring).is_err() {
            return false;
        }
        self.director().set_replicating(true);
        true
    }

    /// The director ring, when it runs.
    pub fn ring(&self) -> Option<&Arc<RingCore>> {
        self.ring.get()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Registers the metrics in `registry`.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.metrics.register(registry);
        if let Some(ring) = self.ring() {
            ring.stats().register(registry);
        }
    }

    /// Runs the timers once (the serve loop calls this every second).
    pub fn tick(self: &Arc<Self>) {
        let now = self.now();
        let mut d = self.director();
        let report = d.tick(now);
        self.metrics.observe(&d);
        drop(d);
        for r in &report.removed {
            self.metrics.removal(r);
            log_removal(r);
            self.kick_removed(r);
        }
        for c in report.released {
            self.released(c);
        }
        for ip in &report.kept_last {
            warn!(%ip, "backend lease expired but it is the last backend of its tag; kept");
        }
        if report.users_expired > 0 || report.domains_moved > 0 {
            debug!(
                users_expired = report.users_expired,
                pins_refreshed = report.pins_refreshed,
                domains_moved = report.domains_moved,
                "director timers"
            );
        }
    }
}

impl Shared {
    /// A confirmed-kill hold ended: wake held LOOKUPs and run the flush
    /// hook for a confirmed deliberate relocation.
    pub fn released(&self, c: Confirmed) {
        self.released.notify_waiters();
        if !c.confirmed {
            warn!(user = %c.user, old = %c.old, "old sessions still open after the kill timeout; user released");
            return;
        }
        debug!(user = %c.user, old = %c.old, "relocation confirmed");
        if let (true, Some(hook)) = (c.run_hook, self.flush_program.clone()) {
            tokio::spawn(run_flush_program(hook, c));
        }
    }

    /// The admin map's resolve: [`Director::assign_and_pin`] without a
    /// protocol, waiting out a confirmed-kill hold like a LOOKUP does.
    pub async fn resolve_user(
        self: &Arc<Self>,
        user: &str,
        tag: &str,
    ) -> Result<crate::director::Route, crate::director::LookupError> {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let now = self.now();
            let result = self.director().assign_and_pin(now, user, tag, None);
            match result {
                Err(crate::director::LookupError::Held { until }) => {
                    let wait = Duration::from_millis(until.saturating_sub(now).max(1));
                    tokio::select! {
                        _ = &mut released => {}
                        _ = tokio::time::sleep(wait) => self.tick(),
                    }
                }
                other => return other,
            }
        }
    }

    /// Subscribes to kick orders (what a KICK-WATCH connection gets).
    pub fn watch_kicks(&self) -> broadcast::Receiver<Arc<Kick>> {
        self.kicks.subscribe()
    }

    /// Kicks at once (a ring merge moved the user elsewhere).
    pub fn kick_now(&self, kicks: Vec<Kick>) {
        kicks.into_iter().for_each(|k| self.publish(k));
    }

    fn publish(&self, kick: Kick) {
        self.metrics.kicks.inc();
        // No watcher: nobody to tell; the login finds out on its next use.
        let _ = self.kicks.send(Arc::new(kick));
    }

    /// Kicks after an admin action, delayed by `user_kick_delay` so an
    /// in-flight command on the old backend can finish.
    pub fn kick_admin(self: &Arc<Self>, kicks: Vec<Kick>) {
        if kicks.is_empty() {
            return;
        }
        match self.pacing.user_kick_delay {
            None | Some(Duration::ZERO) => kicks.into_iter().for_each(|k| self.publish(k)),
            Some(delay) => {
                let me = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    kicks.into_iter().for_each(|k| me.publish(k));
                });
            }
        }
    }

    /// Kicks the sessions of a removed backend at once, in batches of
    /// `max_parallel_kicks` to spread the re-login stampede.
    pub fn kick_removed(self: &Arc<Self>, removal: &Removal) {
        let kicks = removal.kicks();
        if kicks.is_empty() {
            return;
        }
        let batch = self.pacing.max_parallel_kicks.unwrap_or(usize::MAX);
        if kicks.len() <= batch {
            kicks.into_iter().for_each(|k| self.publish(k));
            return;
        }
        let me = self.clone();
        let pause = self.pacing.batch_pause;
        tokio::spawn(async move {
            let mut kicks = kicks.into_iter().peekable();
            while kicks.peek().is_some() {
                kicks.by_ref().take(batch).for_each(|k| me.publish(k));
                if kicks.peek().is_some() {
                    tokio::time::sleep(pause).await;
                }
            }
        });
    }

    /// Drains the users of a flushed backend: with `force` all at once
    /// (no flush hook); otherwise in a self-clocked window of
    /// `max_parallel_moves` — a window's users are evicted and kicked, and
    /// the next window starts only when all of them are confirmed gone (or
    /// their holds time out).
    pub fn drain_flushed(self: &Arc<Self>, ip: IpAddr, users: Vec<(UserKey, String)>, force: bool) {
        let window = if force {
            usize::MAX
        } else {
            self.pacing.max_parallel_moves
        };
        let me = self.clone();
        tokio::spawn(async move {
            let mut users = users.into_iter().peekable();
            while users.peek().is_some() {
                let batch: Vec<(UserKey, String)> = users.by_ref().take(window).collect();
                let now = me.now();
                let kicks: Vec<Kick> = {
                    let mut d = me.director();
                    batch
                        .iter()
                        .map(|(key, user)| d.evict_flushed(now, *key, user, ip, !force))
                        .collect()
                };
                kicks.into_iter().for_each(|k| me.publish(k));
                // Self-clocking: wait for this window's confirmations.
                let hold = me.director().settings().user_kill_timeout_ms;
                let deadline = Instant::now() + Duration::from_millis(hold + 1000);
                loop {
                    let released = me.released.notified();
                    tokio::pin!(released);
                    released.as_mut().enable();
                    let pending = {
                        let d = me.director();
                        batch.iter().any(|(key, _)| d.is_held(*key))
                    };
                    if !pending || Instant::now() >= deadline {
                        break;
                    }
                    tokio::select! {
                        _ = &mut released => {}
                        _ = tokio::time::sleep(Duration::from_millis(500)) => me.tick(),
                    }
                }
            }
            info!(%ip, "flush drained");
        });
    }

    /// Admin USER-MOVE: pin `user` to `to` and kick the old sessions.
    pub fn move_user(
        self: &Arc<Self>,
        user: &str,
        tag: &str,
        to: IpAddr,
    ) -> Result<crate::director::Moved, crate::director::MoveError> {
        let now = self.now();
        let moved = self.director().move_user(now, user, tag, to)?;
        info!(%user, %tag, from = ?moved.from, to = %moved.to, "user moved");
        if let Some(from) = moved.from.filter(|f| *f != moved.to) {
            self.kick_admin(vec![Kick {
                user: user.to_string(),
                backend: from,
            }]);
        }
        Ok(moved)
    }

    /// Admin kick of every session of `user`.
    pub fn kick_user(self: &Arc<Self>, user: &str, tag: &str) -> usize {
        let now = self.now();
        let kicks = self.director().kicks_for_user(now, user, tag);
        let n = kicks.len();
        self.kick_admin(kicks);
        n
    }
}

/// Runs `flush_program FLUSH <user> <hash> <old> <new>` (exec, no shell),
/// bounded by its timeout. Best effort: failures are logged, never
/// undo the move.
async fn run_flush_program(hook: FlushProgram, c: Confirmed) {
    let new = c.new.map(|ip| ip.to_string()).unwrap_or_default();
    let child = tokio::process::Command::new(&hook.program)
        .arg("FLUSH")
        .arg(&c.user)
        .arg(c.user_hash.to_string())
        .arg(c.old.to_string())
        .arg(new)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .status();
    match tokio::time::timeout(hook.timeout, child).await {
        Ok(Ok(status)) if status.success() => {
            debug!(user = %c.user, "flush hook done")
        }
        Ok(Ok(status)) => {
            warn!(user = %c.user, %status, "flush hook failed (best-effort, move already committed)")
        }
        Ok(Err(e)) => {
            warn!(user = %c.user, err = %e, "flush hook failed (best-effort, move already committed)")
        }
        Err(_) => warn!(
            user = %c.user,
            err = "killed: timeout",
            "flush hook failed (best-effort, move already committed)"
        ),
    }
}

async fn resolve(host: &str) -> Result<Vec<IpAddr>, DirectorError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let err = |why: String| DirectorError::Resolve {
        host: host.to_string(),
        why,
    };
    let addrs = tokio::time::timeout(Duration::from_secs(10), tokio::net::lookup_host((host, 0)))
        .await
        .map_err(|_| err("timed out".into()))?
        .map_err(|e| err(e.to_string()))?;
    let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        return Err(err("no addresses".into()));
    }
    Ok(ips)
}

fn log_removal(r: &Removal) {
    info!(
        ip = %r.ip,
        tag = %r.tag,
        reason = r.reason.as_str(),
        users_unpinned = r.users_unpinned,
        sessions = r.sessions.len(),
        "backend removed; its users rehash on their next LOOKUP"
    );
}

fn log_effect(effect: &Effect, peer: &str) {
    match effect {
        Effect::BackendUp(UpOutcome::Added) => info!(%peer, "backend registered"),
        Effect::BackendUp(UpOutcome::Retagged(r)) => log_removal(r),
        Effect::Backend(BackendOutcome::Removed(r)) => log_removal(r),
        Effect::Backend(BackendOutcome::KeptLast) => {
            warn!(%peer, "backend reported unreachable but it is the last of its tag; kept")
        }
        Effect::Backend(BackendOutcome::Draining) => info!(%peer, "backend draining (FLUSH)"),
        _ => {}
    }
}

/// Like [`run`], with internal mTLS when `tls` is given (build it with
/// `yarilo_tls::internal::InternalTls::from_config(&config.internal_tls)`).
pub async fn run_with_tls(
    config: &DirectorService,
    tls: Option<yarilo_tls::internal::InternalTls>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DirectorError> {
    let shared = prepare(config, listener.local_addr()?, tls.as_ref()).await?;
    serve_inner(shared, listener, tls, shutdown).await
}

/// Builds the shared state for a director bound at `bound`: the state
/// machine (its id from the ring address, so ids differ between
/// directors even when all listen on `:9102`), and the ring when
/// `ring_secret` is set.
pub async fn prepare(
    config: &DirectorService,
    bound: SocketAddr,
    tls: Option<&yarilo_tls::internal::InternalTls>,
) -> Result<Arc<Shared>, DirectorError> {
    let me = crate::cluster::ring_address(config, bound)?;
    let shared = Shared::from_config(config, DirectorId::from_addr(me)).await?;
    if let Some(settings) =
        RingSettings::from_config(config, me, crate::cluster::new_incarnation(), tls)?
    {
        shared.enable_ring(settings);
    }
    Ok(shared)
}

/// Builds from `config` and serves on `listener` until `shutdown`
/// completes. The director id is derived from the listener's address.
pub async fn run(
    config: &DirectorService,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DirectorError> {
    let shared = prepare(config, listener.local_addr()?, None).await?;
    serve(shared, listener, shutdown).await
}

/// Serves LOOKUP connections on `listener` until `shutdown` completes,
/// then closes every connection and returns.
pub async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DirectorError> {
    serve_inner(shared, listener, None, shutdown).await
}

/// [`serve`] with internal mTLS: every peer must present a certificate
/// from the internal CA, and each command is checked against the role
/// SANs in it (registration only from `backend-reg`, lookups from
/// `login`, `director` or `admin`).
pub async fn serve_tls(
    shared: Arc<Shared>,
    listener: TcpListener,
    tls: yarilo_tls::internal::InternalTls,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DirectorError> {
    serve_inner(shared, listener, Some(tls), shutdown).await
}

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn roles_of(certs: Option<&[yarilo_tls::rustls::pki_types::CertificateDer<'_>]>) -> PeerRoles {
    let mut roles = PeerRoles::default();
    for role in yarilo_tls::internal::peer_roles(certs) {
        match role {
            yarilo_tls::Role::Login => roles.login = true,
            yarilo_tls::Role::BackendReg => roles.backend_reg = true,
            yarilo_tls::Role::Director => roles.director = true,
            yarilo_tls::Role::Admin => roles.admin = true,
            _ => {}
        }
    }
    roles
}

pub(crate) async fn serve_inner(
    shared: Arc<Shared>,
    listener: TcpListener,
    tls: Option<yarilo_tls::internal::InternalTls>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DirectorError> {
    let acceptor = tls.map(|t| t.acceptor());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    // The ring's main task dies with this future (a test's "kill -9").
    struct AbortOnDrop(tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let (ring_stop, ring_stop_rx) = watch::channel(false);
    let ring = shared.ring().cloned().map(|ring| {
        let leave = ring.settings().leave_timeout;
        let task = AbortOnDrop(tokio::spawn(ring.run(shared.clone(), ring_stop_rx)));
        (task, leave)
    });
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = ticker.tick() => shared.tick(),
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    let stop = stop_rx.clone();
                    let acceptor = acceptor.clone();
                    tasks.spawn(async move {
                        let Some(acceptor) = acceptor else {
                            serve_connection(shared, stream, peer, stop).await;
                            return;
                        };
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => {
                                let roles = roles_of(tls.get_ref().1.peer_certificates());
                                serve_connection_as(shared, tls, peer, roles, stop).await;
                            }
                            Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => debug!(%peer, "TLS handshake timed out"),
                        }
                    });
                }
                Err(e) => {
                    // Out of descriptors and the like: back off, keep going.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // `session_grace_period` from here: the graceful leave first
    // (DIRECTOR-REMOVE for ourselves, QUIT on every ring connection,
    // JOIN-FAIL to newcomers), then idle connections close (a login's
    // standing link redials another director) while a LOOKUP that is
    // being held is still answered; whatever is left at the deadline is
    // cut.
    let deadline = Instant::now() + shared.timeouts.shutdown_grace;
    info!(
        grace_seconds = shared.timeouts.shutdown_grace.as_secs(),
        "shutting down: leaving the ring, finishing held LOOKUPs"
    );
    let _ = ring_stop.send(true);
    if let Some((mut task, _)) = ring {
        let _ = tokio::time::timeout_at(deadline, &mut task.0).await;
    }
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout_at(deadline, drain).await.is_err() {
        warn!(
            connections = tasks.len(),
            "session_grace_period over; closing the remaining connections"
        );
        tasks.abort_all();
    }
    Ok(())
}

/// Serves one connection (any byte stream: plain TCP or TLS) until the
/// peer closes, breaks the protocol, goes silent, or `stop` turns true.
pub async fn serve_connection<S>(
    shared: Arc<Shared>,
    stream: S,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    serve_connection_as(shared, stream, peer, PeerRoles::ANY, stop).await
}

/// [`serve_connection`] for a peer whose certificate grants `roles`.
pub async fn serve_connection_as<S>(
    shared: Arc<Shared>,
    stream: S,
    peer: SocketAddr,
    roles: PeerRoles,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let peer_name = peer.to_string();
    let t = shared.timeouts;
    let mut framed = Framed::new(stream, LineCodec::new(MAX_LINE));
    let ours = Version::new(protocol::SERVICE, protocol::MAJOR, protocol::MINOR);
    if send(&mut framed, &ours.to_fields(), t, true).await.is_err() {
        return;
    }
    let mut handshaken = false;
    let mut awaiting_pong = false;
    let mut kicks: Option<broadcast::Receiver<Arc<Kick>>> = None;
    loop {
        let deadline = if awaiting_pong {
            t.ping_timeout
        } else {
            t.ping_interval
        };
        let item = tokio::select! {
            _ = stop.changed() => return,
            kick = next_kick(&mut kicks) => {
                match kick {
                    Ok(k) => {
                        let line = ["USER-KICKED", k.user.as_str(), &k.backend.to_string()];
                        if send(&mut framed, &line, t, true).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        warn!(peer = %peer_name, missed = n, "kick watcher too slow; kick orders lost");
                    }
                    Err(broadcast::error::RecvError::Closed) => kicks = None,
                }
                continue;
            }
            item = tokio::time::timeout(deadline, framed.next()) => item,
        };
        let fields = match item {
            Err(_) if awaiting_pong => {
                debug!(peer = %peer_name, "no PONG in time; closing");
                return;
            }
            Err(_) => {
                awaiting_pong = true;
                if send(&mut framed, &["PING"], t, true).await.is_err() {
                    return;
                }
                continue;
            }
            Ok(None) => return,
            Ok(Some(Err(e))) => {
                // Over-long line or broken stream: framing is lost.
                debug!(peer = %peer_name, error = %e, "closing connection");
                return;
            }
            Ok(Some(Ok(Err(e)))) => {
                awaiting_pong = false;
                let reply = ["FAIL", "SYNTAX", &e.to_string()];
                if send(&mut framed, &reply, t, false).await.is_err() {
                    return;
                }
                if flush_if_idle(&mut framed, t).await.is_err() {
                    return;
                }
                continue;
            }
            Ok(Some(Ok(Ok(fields)))) => fields,
        };
        awaiting_pong = false;
        if !handshaken {
            match Version::from_fields(&fields) {
                Ok(v) if v.compatible_with(&ours) => {
                    handshaken = true;
                    continue;
                }
                _ => {
                    let reply = [
                        "FAIL",
                        "VERSION",
                        "expected VERSION\tdirector\t1\t<minor> first",
                    ];
                    let _ = send(&mut framed, &reply, t, true).await;
                    return;
                }
            }
        }
        if fields.first().is_some_and(|c| c == "DIRECTOR-HELLO") {
            match shared.ring().cloned() {
                Some(ring) => {
                    ring.serve_accepted(&shared, framed, peer, &fields, roles, stop)
                        .await;
                    return;
                }
                None => {
                    let reply = ["JOIN-FAIL", "this director runs alone (no ring_secret)"];
                    if send(&mut framed, &reply, t, true).await.is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let reply = match protocol::parse(&fields) {
            Ok(request) if permitted(&request, roles).is_err() => {
                let role = permitted(&request, roles).err().unwrap_or("login");
                debug!(peer = %peer_name, role, "command refused for the peer's roles");
                Some(protocol::forbidden(&request, role))
            }
            Ok(_) => {
                let Some((reply, effect)) = handle_waiting(&shared, &peer_name, &fields).await
                else {
                    return;
                };
                shared.metrics.effect(&effect, shared.policy);
                log_effect(&effect, &peer_name);
                match effect {
                    Effect::Watch => kicks = Some(shared.watch_kicks()),
                    Effect::BackendUp(UpOutcome::Retagged(r))
                    | Effect::Backend(BackendOutcome::Removed(r)) => shared.kick_removed(&r),
                    Effect::Released(c) => shared.released(c),
                    _ => {}
                }
                reply
            }
            Err(e) => Some(e.reply()),
        };
        if let Some(reply) = reply {
            if send(&mut framed, &reply, t, false).await.is_err() {
                return;
            }
        }
        if flush_if_idle(&mut framed, t).await.is_err() {
            return;
        }
    }
}

/// Handles one request; a LOOKUP of a held user waits (without holding
/// the lock) until a hold is released or its deadline passes, then is
/// retried — also while the director shuts down (the grace period bounds
/// it from outside). `None`: the line is not a request.
async fn handle_waiting(
    shared: &Arc<Shared>,
    peer: &str,
    fields: &[String],
) -> Option<(Option<Vec<String>>, Effect)> {
    loop {
        let released = shared.released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let now = shared.now();
        let request = protocol::parse(fields).ok()?;
        let (reply, effect) = {
            let mut d = shared.director();
            protocol::handle(&mut d, now, peer, request)
        };
        let Effect::Held { until } = effect else {
            return Some((reply, effect));
        };
        let wait = Duration::from_millis(until.saturating_sub(now).max(1));
        tokio::select! {
            _ = &mut released => {}
            // The tick releases expired holds; retrying then finds it gone.
            _ = tokio::time::sleep(wait) => { shared.tick(); }
        }
    }
}

/// The next kick order, or never when the connection does not watch.
async fn next_kick(
    rx: &mut Option<broadcast::Receiver<Arc<Kick>>>,
) -> Result<Arc<Kick>, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

type Conn<S> = Framed<S, LineCodec>;

/// Queues a line; flushes it too when `flush`.
async fn send<S, F>(framed: &mut Conn<S>, fields: &[F], t: Timeouts, flush: bool) -> Result<(), ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: AsRef<str>,
{
    let write = async {
        if flush {
            framed.send(fields).await
        } else {
            framed.feed(fields).await
        }
    };
    bounded(write, t).await
}

/// Flushes queued replies unless another complete request is already
/// buffered (pipelined input is answered in one write).
async fn flush_if_idle<S>(framed: &mut Conn<S>, t: Timeouts) -> Result<(), ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if framed.read_buffer().contains(&b'\n') {
        return Ok(());
    }
    bounded(SinkExt::<&[&str]>::flush(framed), t).await
}

async fn bounded<E>(fut: impl Future<Output = Result<(), E>>, t: Timeouts) -> Result<(), ()> {
    match t.write_timeout {
        Some(limit) => match tokio::time::timeout(limit, fut).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        },
        None => fut.await.map_err(|_| ()),
    }
}
