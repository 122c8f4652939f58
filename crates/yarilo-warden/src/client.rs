//! The warden client for login proxies and session processes.
//!
//! Invariants: the client remembers every connection and session it
//! registered and replays them on each new connection, so a warden restart
//! (or a failover to another replica) keeps the counts right without the
//! caller doing anything; the kick subscription redials and re-subscribes
//! by itself; when warden cannot be reached, admissions follow
//! `fail_open` (default: admit) and never wait longer than the request
//! timeout.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter, ReadHalf, WriteHalf};
use tokio::sync::{broadcast, Mutex};
use tokio_util::codec::FramedRead;
use yarilo_config::WardenClient as WardenClientConfig;
use yarilo_wire::{join_line, LineCodec, Version};

use crate::protocol::{Refusal, Reply, Request, MAJOR, MAX_LINE, MINOR, SERVICE};
use crate::state::Kick;

/// Why a request got no usable answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WardenClientError {
    /// No endpoint answered, or the connection broke; nothing is known
    /// about whether the request was applied.
    #[error("warden unavailable: {0}")]
    Unavailable(String),
    /// Warden answered something unexpected (bug or version mismatch).
    #[error("warden protocol error: {0}")]
    Protocol(String),
}

/// The answer to an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Admitted; `penalty` is the IP's recent auth failures (CONNECT only)
    /// for a login proxy that delays answers as failures pile up.
    Admitted {
        penalty: u64,
    },
    Refused(Refusal),
}

/// mTLS for warden connections (`internal_tls.*`), pinned to
/// `internal_tls.server_name`.
pub type WardenTls = yarilo_tls::internal::InternalTls;

#[derive(Clone)]
pub struct WardenClientOptions {
    pub endpoints: Vec<String>,
    pub tls: Option<WardenTls>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub fail_open: bool,
}

impl WardenClientOptions {
    /// `warden_client` with the internal mTLS of `internal_tls` when enabled.
    pub fn from_full_config(config: &yarilo_config::Config) -> Result<Self, WardenClientError> {
        let tls = WardenTls::from_config(&config.internal_tls)
            .map_err(|e| WardenClientError::Unavailable(format!("internal_tls: {e}")))?;
        Ok(Self::from_config(&config.warden_client, tls))
    }

    pub fn from_config(cfg: &WardenClientConfig, tls: Option<WardenTls>) -> Self {
        WardenClientOptions {
            endpoints: cfg.endpoints.clone(),
            tls,
            connect_timeout: Duration::from_millis(cfg.connect_timeout_ms),
            request_timeout: Duration::from_millis(cfg.request_timeout_ms),
            fail_open: cfg.fail_open,
        }
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}
type BoxStream = Pin<Box<dyn Stream>>;

struct Conn {
    reader: FramedRead<ReadHalf<BoxStream>, LineCodec>,
    writer: BufWriter<WriteHalf<BoxStream>>,
}

impl Conn {
    async fn call(&mut self, req: &Request) -> Result<Reply, WardenClientError> {
        let io = |e: std::io::Error| WardenClientError::Unavailable(e.to_string());
        self.writer
            .write_all(join_line(&req.to_fields()).as_bytes())
            .await
            .map_err(io)?;
        self.writer.flush().await.map_err(io)?;
        match self.reader.next().await {
            None => Err(WardenClientError::Unavailable("connection closed".into())),
            Some(Err(e)) => Err(WardenClientError::Unavailable(e.to_string())),
            Some(Ok(Err(e))) => Err(WardenClientError::Protocol(e.to_string())),
            Some(Ok(Ok(f))) => Reply::parse(&f)
                .ok_or_else(|| WardenClientError::Protocol(format!("unparsable reply {f:?}"))),
        }
    }
}

#[derive(Default)]
struct Registered {
    conns: HashMap<String, IpAddr>,
    sessions: HashMap<String, (String, IpAddr)>,
    deliveries: HashMap<String, String>,
}

struct Inner {
    opts: WardenClientOptions,
    conn: Mutex<Option<Conn>>,
    next: AtomicUsize,
    registered: std::sync::Mutex<Registered>,
}

/// A warden client. Cheap to clone; clones share the connection and the
/// registrations.
#[derive(Clone)]
pub struct WardenClient {
    inner: Arc<Inner>,
}

impl WardenClient {
    pub fn new(opts: WardenClientOptions) -> WardenClient {
        WardenClient {
            inner: Arc::new(Inner {
                opts,
                conn: Mutex::new(None),
                next: AtomicUsize::new(0),
                registered: std::sync::Mutex::new(Registered::default()),
            }),
        }
    }

    fn registered(&self) -> std::sync::MutexGuard<'_, Registered> {
        self.inner
            .registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    async fn request(&self, req: &Request) -> Result<Reply, WardenClientError> {
        let timeout = self.inner.opts.request_timeout;
        match tokio::time::timeout(timeout, self.request_inner(req)).await {
            Ok(r) => r,
            Err(_) => {
                // The connection may be mid-reply: drop it. (The guard was
                // released when the timed-out future was dropped.)
                *self.inner.conn.lock().await = None;
                self.inner.next.fetch_add(1, Ordering::Relaxed);
                Err(WardenClientError::Unavailable(format!(
                    "no answer within {timeout:?}"
                )))
            }
        }
    }

    async fn request_inner(&self, req: &Request) -> Result<Reply, WardenClientError> {
        let mut slot = self.inner.conn.lock().await;
        if slot.is_none() {
            let stream = dial_any(&self.inner.opts, &self.inner.next).await?;
            let (r, w) = tokio::io::split(stream);
            let mut conn = Conn {
                reader: FramedRead::new(r, LineCodec::new(MAX_LINE)),
                writer: BufWriter::new(w),
            };
            self.replay(&mut conn).await?;
            *slot = Some(conn);
        }
        let Some(conn) = slot.as_mut() else {
            return Err(WardenClientError::Unavailable("no connection".into()));
        };
        match conn.call(req).await {
            Ok(r) => Ok(r),
            Err(e) => {
                *slot = None;
                self.inner.next.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Re-registers what this process holds on a fresh connection: the
    /// replica it reaches may be new, or may have released them when the
    /// old connection closed.
    async fn replay(&self, conn: &mut Conn) -> Result<(), WardenClientError> {
        let (conns, sessions, deliveries) = {
            let r = self.registered();
            (
                r.conns
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect::<Vec<_>>(),
                r.sessions
                    .iter()
                    .map(|(k, (u, ip))| (k.clone(), u.clone(), *ip))
                    .collect::<Vec<_>>(),
                r.deliveries
                    .iter()
                    .map(|(k, u)| (k.clone(), u.clone()))
                    .collect::<Vec<_>>(),
            )
        };
        for (id, user) in deliveries {
            conn.call(&Request::DeliveryStart { id, user }).await?;
        }
        for (id, ip) in conns {
            conn.call(&Request::Connect { id, ip }).await?;
        }
        for (id, user, ip) in sessions {
            conn.call(&Request::SessionStart { id, user, ip }).await?;
        }
        Ok(())
    }

    fn fail_open(&self, e: WardenClientError) -> Result<Admission, WardenClientError> {
        if self.inner.opts.fail_open {
            tracing::warn!(error = %e, "warden unreachable; admitting (fail-open)");
            Ok(Admission::Admitted { penalty: 0 })
        } else {
            Err(e)
        }
    }

    /// A login proxy accepted a client connection from `ip`.
    pub async fn connect(&self, id: &str, ip: IpAddr) -> Result<Admission, WardenClientError> {
        let req = Request::Connect {
            id: id.to_string(),
            ip,
        };
        match self.request(&req).await {
            Ok(Reply::Ok(v)) => {
                self.registered().conns.insert(id.to_string(), ip);
                Ok(Admission::Admitted {
                    penalty: v.and_then(|v| v.parse().ok()).unwrap_or(0),
                })
            }
            Ok(Reply::Refused(why)) => Ok(Admission::Refused(why)),
            Ok(other) => Err(WardenClientError::Protocol(format!("{other:?}"))),
            Err(e) => {
                // Remember it anyway: the replay registers it once warden
                // is back, so the count stays right.
                self.registered().conns.insert(id.to_string(), ip);
                self.fail_open(e)
            }
        }
    }

    pub async fn disconnect(&self, id: &str, ip: IpAddr) -> Result<(), WardenClientError> {
        self.registered().conns.remove(id);
        self.expect_ok(&Request::Disconnect {
            id: id.to_string(),
            ip,
        })
        .await
        .map(|_| ())
    }

    /// Whether a session of `user` from `ip` would be admitted now.
    pub async fn check(&self, user: &str, ip: IpAddr) -> Result<Admission, WardenClientError> {
        let req = Request::Check {
            user: user.to_string(),
            ip,
        };
        match self.request(&req).await {
            Ok(Reply::Ok(_)) => Ok(Admission::Admitted { penalty: 0 }),
            Ok(Reply::Refused(why)) => Ok(Admission::Refused(why)),
            Ok(other) => Err(WardenClientError::Protocol(format!("{other:?}"))),
            Err(e) => self.fail_open(e),
        }
    }

    /// An LMTP delivery to `user` starts (per recipient, `lmtp-login`).
    pub async fn delivery_start(
        &self,
        id: &str,
        user: &str,
    ) -> Result<Admission, WardenClientError> {
        let req = Request::DeliveryStart {
            id: id.to_string(),
            user: user.to_string(),
        };
        match self.request(&req).await {
            Ok(Reply::Ok(_)) => {
                self.registered()
                    .deliveries
                    .insert(id.to_string(), user.to_string());
                Ok(Admission::Admitted { penalty: 0 })
            }
            Ok(Reply::Refused(why)) => Ok(Admission::Refused(why)),
            Ok(other) => Err(WardenClientError::Protocol(format!("{other:?}"))),
            Err(e) => {
                self.registered()
                    .deliveries
                    .insert(id.to_string(), user.to_string());
                self.fail_open(e)
            }
        }
    }

    /// The delivery `id` ended.
    pub async fn delivery_end(&self, id: &str, user: &str) -> Result<(), WardenClientError> {
        self.registered().deliveries.remove(id);
        self.expect_ok(&Request::DeliveryEnd {
            id: id.to_string(),
            user: user.to_string(),
        })
        .await
        .map(|_| ())
    }

    /// A backend session for `user` from `ip` started.
    pub async fn session_start(
        &self,
        id: &str,
        user: &str,
        ip: IpAddr,
    ) -> Result<Admission, WardenClientError> {
        let req = Request::SessionStart {
            id: id.to_string(),
            user: user.to_string(),
            ip,
        };
        match self.request(&req).await {
            Ok(Reply::Ok(_)) => {
                self.registered()
                    .sessions
                    .insert(id.to_string(), (user.to_string(), ip));
                Ok(Admission::Admitted { penalty: 0 })
            }
            Ok(Reply::Refused(why)) => Ok(Admission::Refused(why)),
            Ok(other) => Err(WardenClientError::Protocol(format!("{other:?}"))),
            Err(e) => {
                self.registered()
                    .sessions
                    .insert(id.to_string(), (user.to_string(), ip));
                self.fail_open(e)
            }
        }
    }

    pub async fn session_end(
        &self,
        id: &str,
        user: &str,
        ip: IpAddr,
    ) -> Result<(), WardenClientError> {
        self.registered().sessions.remove(id);
        self.expect_ok(&Request::SessionEnd {
            id: id.to_string(),
            user: user.to_string(),
            ip,
        })
        .await
        .map(|_| ())
    }

    /// Counts an auth failure from `ip`; returns the failures so far.
    pub async fn auth_fail(&self, ip: IpAddr) -> Result<u64, WardenClientError> {
        self.number(&Request::AuthFail { ip }).await
    }

    /// Clears `ip`'s failures after a successful login.
    pub async fn auth_ok(&self, ip: IpAddr) -> Result<(), WardenClientError> {
        self.expect_ok(&Request::AuthOk { ip }).await.map(|_| ())
    }

    pub async fn penalty(&self, ip: IpAddr) -> Result<u64, WardenClientError> {
        self.number(&Request::Penalty { ip }).await
    }

    /// Sessions of `user` across every backend.
    pub async fn sessions(&self, user: &str) -> Result<u64, WardenClientError> {
        self.number(&Request::Sessions {
            user: user.to_string(),
        })
        .await
    }

    /// Publishes a kick of `user` on the kick bus (every replica).
    pub async fn emit(&self, user: &str, reason: &str) -> Result<(), WardenClientError> {
        self.expect_ok(&Request::Emit {
            user: user.to_string(),
            reason: reason.to_string(),
        })
        .await
        .map(|_| ())
    }

    async fn expect_ok(&self, req: &Request) -> Result<Option<String>, WardenClientError> {
        match self.request(req).await? {
            Reply::Ok(v) => Ok(v),
            Reply::Error(e) => Err(WardenClientError::Unavailable(e)),
            other => Err(WardenClientError::Protocol(format!("{other:?}"))),
        }
    }

    async fn number(&self, req: &Request) -> Result<u64, WardenClientError> {
        let v = self.expect_ok(req).await?;
        v.and_then(|v| v.parse().ok())
            .ok_or_else(|| WardenClientError::Protocol("OK without a number".into()))
    }

    /// Subscribes to the kick bus on its own connection, redialled and
    /// re-subscribed for as long as the returned handle lives.
    pub fn kicks(&self) -> KickSubscription {
        let (tx, _) = broadcast::channel(1024);
        let (sub_tx, sub_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(kick_loop(self.inner.opts.clone(), tx.clone(), sub_tx));
        KickSubscription {
            tx,
            subscribed: sub_rx,
            task,
        }
    }
}

/// A live kick subscription; dropping it ends the subscription.
pub struct KickSubscription {
    tx: broadcast::Sender<Kick>,
    subscribed: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl KickSubscription {
    pub fn receiver(&self) -> broadcast::Receiver<Kick> {
        self.tx.subscribe()
    }

    pub fn is_subscribed(&self) -> bool {
        *self.subscribed.borrow()
    }

    pub async fn wait_subscribed(&self) {
        let mut s = self.subscribed.clone();
        let _ = s.wait_for(|v| *v).await;
    }
}

impl Drop for KickSubscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn kick_loop(
    opts: WardenClientOptions,
    tx: broadcast::Sender<Kick>,
    subscribed: tokio::sync::watch::Sender<bool>,
) {
    let next = AtomicUsize::new(0);
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Ok(mut stream) = dial_any(&opts, &next).await {
            let sub = join_line(&Request::Subscribe.to_fields());
            if stream.write_all(sub.as_bytes()).await.is_ok() && stream.flush().await.is_ok() {
                let mut reader = FramedRead::new(stream, LineCodec::new(MAX_LINE));
                if let Some(Ok(Ok(f))) = reader.next().await {
                    if Reply::parse(&f) == Some(Reply::Ok(None)) {
                        backoff = Duration::from_millis(50);
                        let _ = subscribed.send(true);
                        while let Some(Ok(Ok(f))) = reader.next().await {
                            if let Some(Reply::Kick { user, reason }) = Reply::parse(&f) {
                                let _ = tx.send(Kick { user, reason });
                            }
                        }
                        let _ = subscribed.send(false);
                        tracing::warn!("kick subscription lost; redialling");
                    }
                }
            }
        }
        next.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn dial_any(
    opts: &WardenClientOptions,
    next: &AtomicUsize,
) -> Result<BoxStream, WardenClientError> {
    let n = opts.endpoints.len();
    if n == 0 {
        return Err(WardenClientError::Unavailable("no endpoints".into()));
    }
    let start = next.load(Ordering::Relaxed);
    let mut errors = Vec::new();
    for i in 0..n {
        let idx = (start + i) % n;
        let ep = &opts.endpoints[idx];
        match tokio::time::timeout(opts.connect_timeout, dial(ep, opts.tls.as_ref())).await {
            Ok(Ok(s)) => {
                next.store(idx, Ordering::Relaxed);
                return Ok(s);
            }
            Ok(Err(e)) => errors.push(format!("{ep}: {e}")),
            Err(_) => errors.push(format!("{ep}: timed out")),
        }
    }
    Err(WardenClientError::Unavailable(errors.join("; ")))
}

async fn dial(addr: &str, tls: Option<&WardenTls>) -> Result<BoxStream, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let mut stream: BoxStream = match tls {
        None => Box::pin(tcp),
        Some(t) => Box::pin(t.connect(tcp).await.map_err(|e| format!("TLS: {e}"))?),
    };
    let fields = yarilo_wire::handshake(
        &mut stream,
        &Version::new(SERVICE, MAJOR, MINOR).to_fields(),
        256,
    )
    .await
    .map_err(|e| e.to_string())?;
    let theirs = Version::from_fields(&fields).map_err(|e| e.to_string())?;
    if !Version::new(SERVICE, MAJOR, MINOR).compatible_with(&theirs) {
        return Err(format!("incompatible warden {theirs:?}"));
    }
    Ok(stream)
}
