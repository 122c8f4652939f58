//! The warden service: the protocol of [`crate::protocol`] over TCP (mTLS
//! when an acceptor is given) in front of a [`WardenState`].
//!
//! Invariants: Redis trouble never refuses a client (fail-open, counted
//! in `yarilo_warden_redis_errors_total{op}`); whatever a client
//! registered is released when its connection closes; replies go out in
//! request order; a bad line is answered and the connection goes on.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::codec::FramedRead;
use tracing::Instrument;
use yarilo_config::{WardenLimits, WardenService as WardenConfig, WardenStateBackend};
use yarilo_locks::{Readiness, RedisConn};
use yarilo_wire::{join_line, LineCodec, Version};

use crate::metrics::WardenMetrics;
use crate::protocol::{Reply, Request, MAJOR, MAX_LINE, MINOR, SERVICE};
use crate::redis_state::RedisState;
use crate::state::{Admit, Kick, MemoryState, WardenState};

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// A replica refreshes its liveness mark this often; the mark lives three
/// times as long, so one missed beat does not orphan its sessions.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Why warden could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum WardenError {
    /// The configuration cannot be used; nothing was bound.
    #[error("warden_service: {0}")]
    Config(String),
    /// Bind failed; nothing is served.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The accept loop failed; the process should exit.
    #[error("accept failed: {0}")]
    Accept(std::io::Error),
}

struct Shared {
    state: Arc<dyn WardenState>,
    limits: WardenLimits,
    penalty_ttl: Duration,
    metrics: WardenMetrics,
    pod: String,
}

/// A bound warden replica.
pub struct WardenService {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    readiness: Readiness,
    max_connections: usize,
    background: Vec<tokio::task::JoinHandle<()>>,
}

fn pod_name(cfg: &WardenConfig) -> String {
    if !cfg.pod.is_empty() {
        return cfg.pod.clone();
    }
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "warden".into())
}

impl WardenService {
    /// Binds and sets up the state backend. Refuses `memory` with more
    /// than one replica (the config check, repeated here for callers that
    /// build the section in code).
    pub async fn bind(
        cfg: &WardenConfig,
        tls: Option<TlsAcceptor>,
    ) -> Result<WardenService, WardenError> {
        if cfg.state_backend == WardenStateBackend::Memory && cfg.replicas > 1 {
            return Err(WardenError::Config(format!(
                "state_backend memory cannot serve {} replicas: set state_backend: redis",
                cfg.replicas
            )));
        }
        let addr = yarilo_config::parse_listen(&cfg.listen).map_err(WardenError::Config)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| WardenError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        let metrics = WardenMetrics::default();
        let pod = pod_name(cfg);
        let mut background = Vec::new();
        let (state, readiness): (Arc<dyn WardenState>, Readiness) = match cfg.state_backend {
            WardenStateBackend::Memory => (Arc::new(MemoryState::new()), Readiness::Always),
            WardenStateBackend::Redis => {
                let conn = RedisConn::new(
                    cfg.redis.expose(),
                    Duration::from_millis(cfg.redis_timeout_ms),
                )
                .map_err(|e| WardenError::Config(e.to_string()))?;
                let replica = format!("{pod}-{:08x}", rand::random::<u32>());
                let st =
                    RedisState::new(conn.clone(), &cfg.redis_prefix, &replica, metrics.clone());
                background.push(tokio::spawn(heartbeat_loop(st.clone(), metrics.clone())));
                background.push(tokio::spawn(reconcile_loop(
                    st.clone(),
                    Duration::from_secs(cfg.reconcile_interval_s),
                    metrics.clone(),
                )));
                (Arc::new(st), Readiness::Redis(conn))
            }
        };
        Ok(WardenService {
            listener,
            tls,
            shared: Arc::new(Shared {
                state,
                limits: cfg.limits.clone(),
                penalty_ttl: Duration::from_secs(cfg.limits.penalty_ttl_s),
                metrics,
                pod,
            }),
            readiness,
            max_connections: cfg.max_connections,
            background,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    pub fn metrics(&self) -> WardenMetrics {
        self.shared.metrics.clone()
    }

    /// Registers `yarilo_warden_*` in `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        self.shared.metrics.register(registry);
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), WardenError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let limit = Arc::new(Semaphore::new(self.max_connections));
        let mut conns = JoinSet::new();
        let span = tracing::info_span!("warden", pod = %self.shared.pod);
        tokio::pin!(shutdown);
        let result = loop {
            let permit = tokio::select! {
                _ = &mut shutdown => break Ok(()),
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break Ok(()),
                },
            };
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _peer)) => {
                        let _ = stream.set_nodelay(true);
                        let shared = self.shared.clone();
                        let stop = stop_rx.clone();
                        let tls = self.tls.clone();
                        conns.spawn(async move {
                            let _permit = permit;
                            match tls {
                                None => serve_connection(stream, shared, stop).await,
                                Some(a) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, a.accept(stream)).await {
                                    Ok(Ok(s)) => serve_connection(s, shared, stop).await,
                                    _ => tracing::debug!("TLS handshake failed"),
                                },
                            }
                        }.instrument(span.clone()));
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::Interrupted) || e.raw_os_error() == Some(24) => {
                        tracing::warn!(error = %e, "accept failed; continuing");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => break Err(WardenError::Accept(e)),
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
        result
    }
}

/// Reads `warden_service` and `internal_tls`, binds and serves until
/// `shutdown`. For `/readyz` and `/metrics`, build with
/// [`WardenService::from_config`], take [`WardenService::readiness`] and
/// [`WardenService::register_metrics`], then call [`WardenService::serve`].
pub async fn run(
    config: &yarilo_config::Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), WardenError> {
    let service = WardenService::from_config(config).await?;
    tracing::info!(backend = ?config.warden_service.state_backend, "warden listening");
    service.serve(shutdown).await
}

impl WardenService {
    /// [`WardenService::bind`] with the mTLS acceptor from `internal_tls`.
    pub async fn from_config(config: &yarilo_config::Config) -> Result<WardenService, WardenError> {
        let tls = yarilo_tls::internal::InternalTls::from_config(&config.internal_tls)
            .map_err(|e| WardenError::Config(format!("internal_tls: {e}")))?
            .map(|t| t.acceptor());
        WardenService::bind(&config.warden_service, tls).await
    }
}

async fn heartbeat_loop(st: RedisState, metrics: WardenMetrics) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    loop {
        tick.tick().await;
        if let Err(e) = st.heartbeat(HEARTBEAT * 3).await {
            metrics.redis_error("heartbeat");
            tracing::warn!(error = %e, "warden heartbeat failed");
        }
    }
}

async fn reconcile_loop(st: RedisState, every: Duration, metrics: WardenMetrics) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        match st.reconcile().await {
            Ok(0) => {}
            Ok(n) => {
                metrics.reconcile_adjustments.inc_by(n);
                tracing::info!(adjustments = n, "warden counters reconciled");
            }
            Err(e) => {
                metrics.redis_error("reconcile");
                tracing::warn!(error = %e, "warden reconcile failed");
            }
        }
    }
}

/// What one client connection registered, released when it closes.
#[derive(Default)]
struct Registrations {
    conns: HashMap<String, IpAddr>,
    sessions: HashMap<String, (String, IpAddr)>,
    deliveries: HashMap<String, String>,
}

async fn serve_connection<S>(stream: S, shared: Arc<Shared>, mut stop: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    shared.metrics.clients.inc();
    let (r, w) = tokio::io::split(stream);
    let mut reader = FramedRead::new(r, LineCodec::new(MAX_LINE));
    let mut writer = BufWriter::new(w);
    let mut regs = Registrations::default();
    let ours = Version::new(SERVICE, MAJOR, MINOR);
    // Handshake: the client's VERSION first, ours back.
    let hello = tokio::select! {
        h = tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()) => h,
        _ = stop.changed() => Ok(None),
    };
    let ok = match hello {
        Ok(Some(Ok(Ok(fields)))) => {
            Version::from_fields(&fields).is_ok_and(|v| ours.compatible_with(&v))
        }
        _ => false,
    };
    if !ok {
        let _ = writer
            .write_all(join_line(&["ERROR", "expected VERSION\twarden\t1\t<minor>"]).as_bytes())
            .await;
        let _ = writer.flush().await;
        shared.metrics.clients.dec();
        return;
    }
    if writer
        .write_all(join_line(&ours.to_fields()).as_bytes())
        .await
        .is_ok()
        && writer.flush().await.is_ok()
    {
        loop {
            let next = tokio::select! {
                n = reader.next() => n,
                _ = stop.changed() => break,
            };
            let reply = match next {
                None | Some(Err(_)) => break,
                Some(Ok(Err(e))) => Reply::Error(e.to_string()),
                Some(Ok(Ok(fields))) => match Request::parse(&fields) {
                    Err(e) => Reply::Error(e),
                    Ok(Request::Subscribe) => {
                        let rx = shared.state.subscribe();
                        if writer
                            .write_all(join_line(&Reply::Ok(None).to_fields()).as_bytes())
                            .await
                            .is_err()
                            || writer.flush().await.is_err()
                        {
                            break;
                        }
                        push_kicks(&mut reader, &mut writer, rx, &mut stop, &shared).await;
                        break;
                    }
                    Ok(req) => handle(req, &shared, &mut regs).await,
                },
            };
            if writer
                .write_all(join_line(&reply.to_fields()).as_bytes())
                .await
                .is_err()
            {
                break;
            }
            if !reader.read_buffer().contains(&b'\n') && writer.flush().await.is_err() {
                break;
            }
        }
    }
    let _ = writer.shutdown().await;
    release_all(regs, &shared).await;
    shared.metrics.clients.dec();
}

async fn release_all(regs: Registrations, shared: &Shared) {
    for (id, ip) in regs.conns {
        if shared.state.disconnect(&id, ip).await.is_err() {
            shared.metrics.redis_error("disconnect");
        }
    }
    for (id, user) in regs.deliveries {
        if shared.state.delivery_end(&id, &user).await.is_err() {
            shared.metrics.redis_error("delivery_end");
        }
    }
    for (id, (user, ip)) in regs.sessions {
        if shared.state.session_end(&id, &user, ip).await.is_err() {
            shared.metrics.redis_error("session_end");
        }
    }
}

async fn handle(req: Request, shared: &Shared, regs: &mut Registrations) -> Reply {
    let m = &shared.metrics;
    let st = &shared.state;
    let limits = &shared.limits;
    match req {
        Request::Connect { id, ip } => {
            let penalty = st.penalty(ip).await.unwrap_or(0);
            match st.connect(&id, ip, limits).await {
                Ok(Admit::Yes) => {
                    WardenMetrics::result(&m.connect, "ok");
                    regs.conns.insert(id, ip);
                    Reply::Ok(Some(penalty.to_string()))
                }
                Ok(Admit::No(why)) => {
                    WardenMetrics::result(&m.connect, "refused");
                    Reply::Refused(why)
                }
                Err(e) => {
                    m.redis_error("connect");
                    WardenMetrics::result(&m.connect, "failopen");
                    tracing::warn!(error = %e, "CONNECT admitted without state (fail-open)");
                    Reply::Ok(Some("0".into()))
                }
            }
        }
        Request::Disconnect { id, ip } => {
            regs.conns.remove(&id);
            if let Err(e) = st.disconnect(&id, ip).await {
                m.redis_error("disconnect");
                tracing::warn!(error = %e, "DISCONNECT not recorded");
            }
            Reply::Ok(None)
        }
        Request::Check { user, ip } => match st.check(&user, ip, limits).await {
            Ok(Admit::Yes) => Reply::Ok(None),
            Ok(Admit::No(why)) => Reply::Refused(why),
            Err(e) => {
                m.redis_error("check");
                tracing::warn!(error = %e, "CHECK admitted without state (fail-open)");
                Reply::Ok(None)
            }
        },
        Request::SessionStart { id, user, ip } => {
            match st.session_start(&id, &user, ip, limits).await {
                Ok(Admit::Yes) => {
                    WardenMetrics::result(&m.session_start, "ok");
                    regs.sessions.insert(id, (user, ip));
                    Reply::Ok(None)
                }
                Ok(Admit::No(why)) => {
                    WardenMetrics::result(&m.session_start, "refused");
                    Reply::Refused(why)
                }
                Err(e) => {
                    m.redis_error("session_start");
                    WardenMetrics::result(&m.session_start, "failopen");
                    tracing::warn!(error = %e, "SESSION_START admitted without state (fail-open)");
                    Reply::Ok(None)
                }
            }
        }
        Request::SessionEnd { id, user, ip } => {
            regs.sessions.remove(&id);
            if let Err(e) = st.session_end(&id, &user, ip).await {
                m.redis_error("session_end");
                tracing::warn!(error = %e, "SESSION_END not recorded");
            }
            Reply::Ok(None)
        }
        Request::AuthFail { ip } => match st.auth_fail(ip, shared.penalty_ttl).await {
            Ok(n) => {
                WardenMetrics::result(&m.penalty_updates, "incremented");
                Reply::Ok(Some(n.to_string()))
            }
            Err(e) => {
                m.redis_error("auth_fail");
                WardenMetrics::result(&m.penalty_updates, "error");
                tracing::warn!(error = %e, "penalty not recorded");
                Reply::Ok(Some("0".into()))
            }
        },
        Request::AuthOk { ip } => match st.auth_ok(ip).await {
            Ok(()) => {
                WardenMetrics::result(&m.penalty_updates, "cleared");
                Reply::Ok(None)
            }
            Err(_) => {
                m.redis_error("auth_ok");
                WardenMetrics::result(&m.penalty_updates, "error");
                Reply::Ok(None)
            }
        },
        Request::Penalty { ip } => match st.penalty(ip).await {
            Ok(n) => Reply::Ok(Some(n.to_string())),
            Err(_) => {
                m.redis_error("penalty");
                Reply::Ok(Some("0".into()))
            }
        },
        Request::Sessions { user } => match st.sessions(&user).await {
            Ok(n) => Reply::Ok(Some(n.to_string())),
            Err(e) => {
                m.redis_error("sessions");
                Reply::Error(format!("unavailable: {e}"))
            }
        },
        Request::DeliveryStart { id, user } => match st.delivery_start(&id, &user, limits).await {
            Ok(Admit::Yes) => {
                regs.deliveries.insert(id, user);
                Reply::Ok(None)
            }
            Ok(Admit::No(why)) => Reply::Refused(why),
            Err(e) => {
                m.redis_error("delivery_start");
                tracing::warn!(error = %e, "DELIVERY_START admitted without state (fail-open)");
                Reply::Ok(None)
            }
        },
        Request::DeliveryEnd { id, user } => {
            regs.deliveries.remove(&id);
            if let Err(e) = st.delivery_end(&id, &user).await {
                m.redis_error("delivery_end");
                tracing::warn!(error = %e, "DELIVERY_END not recorded");
            }
            Reply::Ok(None)
        }
        Request::Emit { user, reason } => {
            m.kick_emitted.inc();
            tracing::info!(%user, %reason, "kick emitted");
            st.emit(Kick { user, reason });
            Reply::Ok(None)
        }
        Request::Subscribe => Reply::Error("SUBSCRIBE handled by the connection".into()),
    }
}

async fn push_kicks<R, W>(
    reader: &mut FramedRead<R, LineCodec>,
    writer: &mut BufWriter<W>,
    mut rx: broadcast::Receiver<Kick>,
    stop: &mut watch::Receiver<bool>,
    shared: &Shared,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let kick = tokio::select! {
            k = rx.recv() => match k {
                Ok(k) => k,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(lost = n, "kick subscriber lagged");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            line = reader.next() => match line {
                Some(Ok(_)) => continue,
                _ => return,
            },
            _ = stop.changed() => return,
        };
        let line = join_line(
            &Reply::Kick {
                user: kick.user.clone(),
                reason: kick.reason,
            }
            .to_fields(),
        );
        if writer.write_all(line.as_bytes()).await.is_err() || writer.flush().await.is_err() {
            return;
        }
        shared.metrics.kick_delivered.inc();
        tracing::info!(user = %kick.user, "kick delivered");
    }
}
