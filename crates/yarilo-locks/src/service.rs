//! The yarilo-locks service: the wire protocol of [`crate::protocol`] in
//! front of a [`Locker`] and an [`EventBus`].
//!
//! Embedded mode: unix socket, [`MemoryLocker`] with a TTL sweeper,
//! [`MemoryEventBus`]. Remote mode: TCP (wrapped in mTLS when an acceptor is
//! given), [`RedisLocker`], [`RedisEventBus`].
//!
//! Invariants: the grant path is parse → `Locker` → reply, with no queue,
//! cache or lock of its own in remote mode (that is why there is no
//! liveness self-check; readiness is the Redis ping — see the design's
//! "Liveness vs readiness"); replies go out in request order; nothing a
//! client sends can panic the service or grow a buffer past `MAX_LINE`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::future::Future;
use std::pin::Pin;

use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{broadcast, watch, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::codec::FramedRead;
use yarilo_config::{LocksMode, LocksService as LocksServiceConfig};
use yarilo_wire::{join_line, LineCodec};

use crate::protocol::{ErrorClass, Reply, Request, MAX_LINE, PROTOCOL_VERSION};
use crate::redis_conn::RedisConn;
use crate::redis_locker::RedisLocker;
use crate::redis_pubsub::{resync_event, RedisChannel, RedisEventBus};
use crate::{Acquire, EventBus, LockError, Locker, MemoryEventBus, MemoryLocker};

/// The handshake must arrive this soon after accept.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for open connections before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the service could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The configuration cannot be used; nothing was bound.
    #[error("locks_service: {0}")]
    Config(String),
    /// Bind failed (address in use, permissions); nothing is served.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The accept loop failed; the process should exit (design: crash →
    /// exit, not a probe).
    #[error("accept failed: {0}")]
    Accept(std::io::Error),
}

/// The `/readyz` answer for this component.
#[derive(Clone)]
pub enum Readiness {
    /// Embedded: ready whenever the process is up.
    Always,
    /// Remote: ready while Redis answers PING within the timeout.
    Redis(RedisConn),
}

impl Readiness {
    pub async fn ready(&self) -> bool {
        match self {
            Readiness::Always => true,
            Readiness::Redis(c) => c.ping().await,
        }
    }

    /// The same, as a closure a telemetry server can hold.
    pub fn probe(
        &self,
    ) -> Arc<dyn Fn() -> crate::BoxFuture<'static, bool> + Send + Sync + 'static> {
        let this = self.clone();
        Arc::new(move || {
            let this = this.clone();
            Box::pin(async move { this.ready().await })
        })
    }
}

type Labels = Vec<(&'static str, &'static str)>;

/// Metrics of the locks service (`yarilo_locks_*`).
#[derive(Clone)]
pub struct ServiceMetrics {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    connections: Gauge,
    events: Counter,
}

fn duration_histogram() -> Histogram {
    // 25 µs .. ~400 ms: embedded answers in tens of µs, Redis in ~1 ms.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        25e-6, 2.0, 15,
    ))
}

impl Default for ServiceMetrics {
    fn default() -> Self {
        ServiceMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            connections: Gauge::default(),
            events: Counter::default(),
        }
    }
}

impl ServiceMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "yarilo_locks_requests",
            "Requests answered, by command and result",
            self.requests.clone(),
        );
        registry.register(
            "yarilo_locks_request_duration_seconds",
            "Time from request line to reply, by command",
            self.duration.clone(),
        );
        registry.register(
            "yarilo_locks_connections",
            "Client connections open",
            self.connections.clone(),
        );
        registry.register(
            "yarilo_locks_events",
            "EVENT lines received from clients",
            self.events.clone(),
        );
    }
}

/// What every connection shares.
struct Shared {
    locker: Arc<dyn Locker>,
    bus: Arc<dyn EventBus>,
    max_ttl: Duration,
    metrics: ServiceMetrics,
}

enum Listener {
    Tcp(TcpListener, Option<TlsAcceptor>),
    Unix(UnixListener, PathBuf),
}

/// A bound locks service, ready to [`serve`](LocksService::serve).
pub struct LocksService {
    listener: Listener,
    shared: Arc<Shared>,
    readiness: Readiness,
    max_connections: usize,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl LocksService {
    /// Binds the listener and sets up the state backend for `cfg.mode`.
    /// Does not dial Redis: readiness reports it until it answers.
    /// `tls` wraps every TCP connection (remote mode with
    /// `internal_tls.enabled`).
    pub async fn bind(
        cfg: &LocksServiceConfig,
        tls: Option<TlsAcceptor>,
    ) -> Result<LocksService, ServiceError> {
        let max_ttl = Duration::from_millis(cfg.max_ttl_ms);
        let mut background = Vec::new();
        let (listener, locker, bus, readiness): (
            Listener,
            Arc<dyn Locker>,
            Arc<dyn EventBus>,
            Readiness,
        ) = match cfg.mode {
            LocksMode::Embedded => {
                let path = PathBuf::from(&cfg.socket);
                let listener = bind_unix(&path)?;
                let mem = MemoryLocker::new();
                let sweeper = mem.clone();
                let every = Duration::from_millis(cfg.sweep_interval_ms);
                background.push(tokio::spawn(async move {
                    let mut tick = tokio::time::interval(every);
                    loop {
                        tick.tick().await;
                        sweeper.sweep();
                    }
                }));
                (
                    Listener::Unix(listener, path),
                    Arc::new(mem),
                    Arc::new(MemoryEventBus::default()),
                    Readiness::Always,
                )
            }
            LocksMode::Remote => {
                let addr =
                    yarilo_config::parse_listen(&cfg.listen).map_err(ServiceError::Config)?;
                let listener =
                    TcpListener::bind(addr)
                        .await
                        .map_err(|source| ServiceError::Bind {
                            addr: addr.to_string(),
                            source,
                        })?;
                let conn = RedisConn::new(
                    cfg.redis.expose(),
                    Duration::from_millis(cfg.redis_timeout_ms),
                )
                .map_err(|e| ServiceError::Config(e.to_string()))?;
                let channel = RedisChannel::new(conn.clone(), &cfg.events_channel);
                (
                    Listener::Tcp(listener, tls),
                    Arc::new(RedisLocker::new(conn.clone())),
                    Arc::new(RedisEventBus::new(channel)),
                    Readiness::Redis(conn),
                )
            }
        };
        Ok(LocksService {
            listener,
            shared: Arc::new(Shared {
                locker,
                bus,
                max_ttl,
                metrics: ServiceMetrics::default(),
            }),
            readiness,
            max_connections: cfg.max_connections,
            background,
        })
    }

    /// The TCP address bound (remote mode), e.g. to learn an ephemeral port.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(l, _) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    pub fn metrics(&self) -> ServiceMetrics {
        self.shared.metrics.clone()
    }

    /// Registers `yarilo_locks_*` in `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.shared.metrics.register(registry);
    }

    /// Serves until `shutdown` completes, then closes connections (after a
    /// short grace) and removes the unix socket.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServiceError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let limit = Arc::new(Semaphore::new(self.max_connections));
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        let result = loop {
            let permit = tokio::select! {
                _ = &mut shutdown => break Ok(()),
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break Ok(()),
                },
            };
            let shared = self.shared.clone();
            let stop = stop_rx.clone();
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                accepted = accept(&self.listener) => match accepted {
                    Ok(Accepted::Tcp(stream, tls)) => {
                        let _ = stream.set_nodelay(true);
                        conns.spawn(async move {
                            let _permit = permit;
                            match tls {
                                None => serve_connection(stream, shared, stop).await,
                                Some(acceptor) => {
                                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                                        Ok(Ok(s)) => serve_connection(s, shared, stop).await,
                                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                                        Err(_) => tracing::debug!("TLS handshake timed out"),
                                    }
                                }
                            }
                        });
                    }
                    Ok(Accepted::Unix(stream)) => {
                        conns.spawn(async move {
                            let _permit = permit;
                            serve_connection(stream, shared, stop).await
                        });
                    }
                    Err(e) if is_transient_accept_error(&e) => {
                        tracing::warn!(error = %e, "accept failed; continuing");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => break Err(ServiceError::Accept(e)),
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        };
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while conns.join_next().await.is_some() {}
        })
        .await;
        conns.abort_all();
        for t in &self.background {
            t.abort();
        }
        if let Listener::Unix(_, path) = &self.listener {
            let _ = std::fs::remove_file(path);
        }
        result
    }
}

/// Reads `locks_service` (and `internal_tls` in remote mode), binds, and
/// serves until `shutdown`. For `/readyz` and `/metrics`, build with
/// [`LocksService::from_config`], take [`LocksService::readiness`] and
/// [`LocksService::register_metrics`], then call [`LocksService::serve`].
pub async fn run(
    config: &yarilo_config::Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServiceError> {
    let service = LocksService::from_config(config).await?;
    tracing::info!(mode = ?config.locks_service.mode, "locks service listening");
    service.serve(shutdown).await
}

impl LocksService {
    /// [`LocksService::bind`] with the mTLS acceptor from `internal_tls`
    /// (remote mode only; the unix socket never carries TLS).
    pub async fn from_config(config: &yarilo_config::Config) -> Result<LocksService, ServiceError> {
        let tls = match config.locks_service.mode {
            LocksMode::Remote => {
                yarilo_tls::internal::InternalTls::from_config(&config.internal_tls)
                    .map_err(|e| ServiceError::Config(format!("internal_tls: {e}")))?
                    .map(|t| t.acceptor())
            }
            LocksMode::Embedded => None,
        };
        LocksService::bind(&config.locks_service, tls).await
    }
}

enum Accepted {
    Tcp(tokio::net::TcpStream, Option<TlsAcceptor>),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    match listener {
        Listener::Tcp(l, tls) => Ok(Accepted::Tcp(l.accept().await?.0, tls.clone())),
        Listener::Unix(l, _) => Ok(Accepted::Unix(l.accept().await?.0)),
    }
}

fn is_transient_accept_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e.raw_os_error() == Some(24) // EMFILE: wait for descriptors to free
}

fn bind_unix(path: &std::path::Path) -> Result<UnixListener, ServiceError> {
    let err = |source| ServiceError::Bind {
        addr: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    // A socket left by a crashed run would make bind fail; a regular file
    // there is someone else's and stays.
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    UnixListener::bind(path).map_err(err)
}

static CONNECTION_SEQ: AtomicU64 = AtomicU64::new(0);

/// Requests of one connection executed at once. Their replies still go
/// out in request order.
const MAX_IN_FLIGHT: usize = 128;

type Pending = Pin<Box<dyn Future<Output = (&'static str, Instant, Reply)> + Send>>;

fn ready_reply(command: &'static str, reply: Reply) -> Pending {
    let started = Instant::now();
    Box::pin(std::future::ready((command, started, reply)))
}

/// Serves one client connection until it closes or `stop` turns true.
/// Generic over the stream so TLS, TCP, unix sockets and in-memory duplex
/// pipes all go through the same code.
///
/// A client that pipelines (one connection per process, shared by all its
/// sessions) gets its LOCK/UNLOCK/RENEW executed concurrently, up to
/// [`MAX_IN_FLIGHT`], so one slow Redis round trip does not hold up the
/// rest; replies are written in request order all the same. That is safe
/// because a client can only UNLOCK or RENEW a lock id it has already been
/// answered.
async fn serve_connection<S>(stream: S, shared: Arc<Shared>, mut stop: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let conn_id = CONNECTION_SEQ.fetch_add(1, Ordering::Relaxed);
    shared.metrics.connections.inc();
    let (r, w) = tokio::io::split(stream);
    let mut reader = FramedRead::new(r, LineCodec::new(MAX_LINE));
    let mut writer = BufWriter::new(w);
    let mut in_flight: FuturesOrdered<Pending> = FuturesOrdered::new();
    let mut reading = true;

    // Handshake: VERSION first, bounded in time.
    let hello = tokio::select! {
        n = tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()) => n.ok().flatten(),
        _ = stop.changed() => None,
    };
    let ok = matches!(
        hello.as_ref().map(|h| h.as_ref().map(|f| f.as_ref().map(|f| Request::parse(f, shared.max_ttl)))),
        Some(Ok(Ok(Ok(Request::Version(v))))) if v == PROTOCOL_VERSION
    );
    let reply = if ok {
        Reply::VersionOk
    } else {
        Reply::Error(
            ErrorClass::Version,
            format!("expected VERSION\t{PROTOCOL_VERSION} first"),
        )
    };
    if hello.is_none()
        || write_reply(&mut writer, &reply).await.is_err()
        || writer.flush().await.is_err()
        || !ok
    {
        reading = false;
    }

    let mut subscribe = false;
    while reading || !in_flight.is_empty() {
        tokio::select! {
            done = in_flight.next(), if !in_flight.is_empty() => {
                let Some(first) = done else { continue };
                // Write this reply and every other one already finished,
                // then flush once.
                let mut batch = vec![first];
                while let Some(Some(more)) = in_flight.next().now_or_never() {
                    batch.push(more);
                }
                let mut failed = false;
                for (command, started, reply) in batch {
                    record(&shared.metrics, command, started, &reply);
                    if write_reply(&mut writer, &reply).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed || writer.flush().await.is_err() {
                    break;
                }
            }
            next = reader.next(), if reading && !subscribe && in_flight.len() < MAX_IN_FLIGHT => {
                let fields = match next {
                    None => { reading = false; continue }
                    Some(Err(e)) => {
                        // Over-long line or I/O: the framing is gone.
                        in_flight.push_back(ready_reply("other", Reply::Error(ErrorClass::Syntax, e.to_string())));
                        reading = false;
                        continue;
                    }
                    Some(Ok(Err(e))) => {
                        in_flight.push_back(ready_reply("other", Reply::Error(ErrorClass::Syntax, e.to_string())));
                        continue;
                    }
                    Some(Ok(Ok(fields))) => fields,
                };
                match Request::parse(&fields, shared.max_ttl) {
                    Err(e) => {
                        // EVENT never answers, not even with an error: a
                        // pipelining client would lose count.
                        if fields.first().map(String::as_str) == Some("EVENT") {
                            tracing::debug!(conn_id, error = %e, "bad EVENT ignored");
                        } else {
                            in_flight.push_back(ready_reply("other", Reply::Error(ErrorClass::Syntax, e.0)));
                        }
                    }
                    Ok(Request::Event { resource, kind, payload }) => {
                        shared.metrics.events.inc();
                        shared.bus.publish(crate::Event { resource, kind, payload });
                    }
                    Ok(Request::Subscribe) => {
                        // Answered once everything before it is.
                        subscribe = true;
                        reading = false;
                    }
                    Ok(request) => in_flight.push_back(execute(request, shared.clone())),
                }
            }
            _ = stop.changed() => break,
        }
    }
    if subscribe {
        let rx = shared.bus.subscribe();
        if write_reply(&mut writer, &Reply::Ok(None)).await.is_ok() && writer.flush().await.is_ok()
        {
            push_events(&mut reader, &mut writer, rx, &mut stop).await;
        }
    }
    let _ = writer.flush().await;
    let _ = writer.shutdown().await;
    shared.metrics.connections.dec();
}

fn record(metrics: &ServiceMetrics, command: &'static str, started: Instant, reply: &Reply) {
    metrics
        .requests
        .get_or_create(&vec![("command", command), ("result", reply_label(reply))])
        .inc();
    if command != "other" {
        metrics
            .duration
            .get_or_create(&vec![("command", command)])
            .observe(started.elapsed().as_secs_f64());
    }
}

/// One LOCK/UNLOCK/RENEW (or a late VERSION) against the backend.
fn execute(request: Request, shared: Arc<Shared>) -> Pending {
    let started = Instant::now();
    let command = request.command();
    Box::pin(async move {
        let reply = match request {
            Request::Version(v) if v == PROTOCOL_VERSION => Reply::VersionOk,
            Request::Version(_) => {
                Reply::Error(ErrorClass::Version, "version cannot change".into())
            }
            Request::Lock {
                resource,
                owner,
                ttl,
            } => match shared.locker.try_acquire(&resource, &owner, ttl).await {
                Ok(Acquire::Acquired { lock_id }) => Reply::Ok(Some(lock_id)),
                Ok(Acquire::Busy { owner }) => Reply::Busy(owner),
                Err(e) => error_reply(e),
            },
            Request::Unlock { lock_id } => match shared.locker.release(&lock_id).await {
                Ok(true) => Reply::Ok(None),
                Ok(false) => Reply::NotFound,
                Err(e) => error_reply(e),
            },
            Request::Renew { lock_id, ttl } => match shared.locker.renew(&lock_id, ttl).await {
                Ok(true) => Reply::Ok(None),
                Ok(false) => Reply::Expired,
                Err(e) => error_reply(e),
            },
            Request::Event { .. } | Request::Subscribe => {
                Reply::Error(ErrorClass::Syntax, "not executable here".into())
            }
        };
        (command, started, reply)
    })
}

async fn push_events<R, W>(
    reader: &mut FramedRead<R, LineCodec>,
    writer: &mut BufWriter<W>,
    mut rx: broadcast::Receiver<crate::Event>,
    stop: &mut watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let event = tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => ev,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::debug!(lost = n, "subscriber lagged");
                    resync_event()
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            // A subscriber only listens; reading tells us when it goes away.
            line = reader.next() => match line {
                Some(Ok(_)) => continue,
                _ => return,
            },
            _ = stop.changed() => return,
        };
        let reply = Reply::Event {
            resource: event.resource,
            kind: event.kind,
            payload: event.payload,
        };
        if write_reply(writer, &reply).await.is_err() || writer.flush().await.is_err() {
            return;
        }
    }
}

fn error_reply(e: LockError) -> Reply {
    match e {
        LockError::Unavailable(m) => Reply::Error(ErrorClass::Unavailable, m),
        other => Reply::Error(ErrorClass::Unavailable, other.to_string()),
    }
}

fn reply_label(r: &Reply) -> &'static str {
    match r {
        Reply::VersionOk | Reply::Ok(_) => "ok",
        Reply::Busy(_) => "busy",
        Reply::NotFound => "not_found",
        Reply::Expired => "expired",
        Reply::Error(ErrorClass::Unavailable, _) => "unavailable",
        Reply::Error(..) => "error",
        Reply::Event { .. } => "event",
    }
}

async fn write_reply<W: AsyncWrite + Unpin>(
    w: &mut BufWriter<W>,
    reply: &Reply,
) -> std::io::Result<()> {
    w.write_all(join_line(&reply.to_fields()).as_bytes()).await
}

/// Serves one in-memory or otherwise pre-established stream against the
/// given backends: the entry point for tests and for `single`, which can
/// hand a duplex pipe instead of a socket.
pub async fn serve_stream<S>(
    stream: S,
    locker: Arc<dyn Locker>,
    bus: Arc<dyn EventBus>,
    max_ttl: Duration,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (_tx, rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        locker,
        bus,
        max_ttl,
        metrics: ServiceMetrics::default(),
    });
    serve_connection(stream, shared, rx).await
}
