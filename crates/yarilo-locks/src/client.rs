//! The locks client: a [`Locker`] and an [`EventBus`] that talk to the
//! locks service, over the embedded unix socket or a list of remote
//! endpoints with failover.
//!
//! Invariants: one pipelined connection carries every request of the
//! process (replies come back in request order, so a FIFO of waiters
//! matches them); a connection that fails or stops answering within the
//! request timeout is dropped and the next request dials again, starting
//! with the endpoint after the one that failed; no request is ever retried
//! after it was sent (a LOCK whose answer was lost expires by its TTL);
//! the event subscription redials and re-subscribes by itself.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{broadcast, mpsc, oneshot, Mutex};
use tokio_util::codec::FramedRead;
use yarilo_config::{LocksClient as LocksClientConfig, LocksMode};
use yarilo_wire::{join_line, LineCodec};

use crate::protocol::{ErrorClass, Reply, Request, MAX_LINE, PROTOCOL_VERSION};
use crate::redis_pubsub::resync_event;
use crate::{Acquire, BoxFuture, Event, EventBus, LockError, LockOptions, Locker};

/// Where the service is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    /// `host:port`.
    Tcp(String),
}

/// Internal mTLS for TCP endpoints (`internal_tls.*`): the client
/// certificate, and the one pinned name every server certificate is
/// verified against (`internal_tls.server_name`), whatever was dialled.
pub type ClientTls = yarilo_tls::internal::InternalTls;

/// Everything the client needs; [`ClientOptions::from_config`] reads it
/// from `locks_client`.
#[derive(Clone)]
pub struct ClientOptions {
    pub endpoints: Vec<Endpoint>,
    pub tls: Option<ClientTls>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

impl ClientOptions {
    pub fn from_config(cfg: &LocksClientConfig, tls: Option<ClientTls>) -> ClientOptions {
        let endpoints = match cfg.mode {
            LocksMode::Embedded => vec![Endpoint::Unix(PathBuf::from(&cfg.socket))],
            LocksMode::Remote => cfg.endpoints.iter().cloned().map(Endpoint::Tcp).collect(),
        };
        ClientOptions {
            endpoints,
            tls: match cfg.mode {
                LocksMode::Remote => tls,
                LocksMode::Embedded => None,
            },
            connect_timeout: Duration::from_millis(cfg.connect_timeout_ms),
            request_timeout: Duration::from_millis(cfg.request_timeout_ms),
        }
    }

    /// `locks_client` with the internal mTLS of `internal_tls` (remote
    /// mode, when enabled).
    pub fn from_full_config(config: &yarilo_config::Config) -> Result<ClientOptions, LockError> {
        let tls = match config.locks_client.mode {
            LocksMode::Remote => ClientTls::from_config(&config.internal_tls)
                .map_err(|e| LockError::Unavailable(format!("internal_tls: {e}")))?,
            LocksMode::Embedded => None,
        };
        Ok(Self::from_config(&config.locks_client, tls))
    }

    pub fn single(endpoint: Endpoint) -> ClientOptions {
        ClientOptions {
            endpoints: vec![endpoint],
            tls: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// The [`LockOptions`] `locks_client` asks for (lease and wait).
pub fn lock_options(cfg: &LocksClientConfig, owner: impl Into<String>) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(cfg.ttl_ms),
        wait: Duration::from_millis(cfg.wait_ms),
        owner: owner.into(),
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}
type BoxStream = Pin<Box<dyn Stream>>;

struct Outgoing {
    line: String,
    reply: Option<oneshot::Sender<Result<Reply, LockError>>>,
}

#[derive(Clone)]
struct ConnHandle {
    tx: mpsc::Sender<Outgoing>,
}

impl ConnHandle {
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

struct Inner {
    opts: ClientOptions,
    conn: Mutex<Option<ConnHandle>>,
    /// Endpoint tried first on the next dial.
    next: AtomicUsize,
}

/// A [`Locker`] backed by the locks service. Cheap to clone; clones share
/// one connection.
#[derive(Clone)]
pub struct LocksClient {
    inner: Arc<Inner>,
}

impl LocksClient {
    /// Does not dial; the first request does.
    pub fn new(opts: ClientOptions) -> LocksClient {
        LocksClient {
            inner: Arc::new(Inner {
                opts,
                conn: Mutex::new(None),
                next: AtomicUsize::new(0),
            }),
        }
    }

    /// The client `locks_client` (+ `internal_tls`) describes. `single`
    /// does not use it: it takes an in-process [`crate::MemoryLocker`].
    pub fn from_config(config: &yarilo_config::Config) -> Result<LocksClient, LockError> {
        Ok(Self::new(ClientOptions::from_full_config(config)?))
    }

    /// Dials now, to fail early at startup. Later failures are handled per
    /// request.
    pub async fn connect(&self) -> Result<(), LockError> {
        self.connection().await.map(|_| ())
    }

    async fn connection(&self) -> Result<ConnHandle, LockError> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        *slot = None;
        let stream = dial_any(&self.inner.opts, &self.inner.next).await?;
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(connection_task(stream, rx));
        let handle = ConnHandle { tx };
        *slot = Some(handle.clone());
        Ok(handle)
    }

    async fn drop_connection(&self, failed: &ConnHandle) {
        let mut slot = self.inner.conn.lock().await;
        if slot.as_ref().is_some_and(|c| c.tx.same_channel(&failed.tx)) {
            *slot = None;
            // Fail over: the next dial starts with the next endpoint.
            self.inner.next.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn request(&self, req: &Request) -> Result<Reply, LockError> {
        let conn = self.connection().await?;
        let line = join_line(&req.to_fields());
        if !req.expects_reply() {
            return match conn.tx.send(Outgoing { line, reply: None }).await {
                Ok(()) => Ok(Reply::Ok(None)),
                Err(_) => Err(LockError::Unavailable("locks connection closed".into())),
            };
        }
        let (tx, rx) = oneshot::channel();
        if conn
            .tx
            .send(Outgoing {
                line,
                reply: Some(tx),
            })
            .await
            .is_err()
        {
            self.drop_connection(&conn).await;
            return Err(LockError::Unavailable("locks connection closed".into()));
        }
        match tokio::time::timeout(self.inner.opts.request_timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => {
                self.drop_connection(&conn).await;
                Err(LockError::Unavailable("locks connection closed".into()))
            }
            Err(_) => {
                // A server that stops answering is as good as gone; a new
                // connection (maybe another replica) gets the next request.
                self.drop_connection(&conn).await;
                Err(LockError::Unavailable(format!(
                    "no answer from the locks service within {:?}",
                    self.inner.opts.request_timeout
                )))
            }
        }
    }

    /// An [`EventBus`] over this service: `publish` sends EVENT, a
    /// subscription holds its own connection and follows the service
    /// (and, in remote mode, every replica through Redis).
    pub fn event_bus(&self) -> ClientEventBus {
        ClientEventBus::new(self.clone())
    }
}

fn unexpected(r: Reply) -> LockError {
    match r {
        Reply::Error(ErrorClass::Unavailable, m) => LockError::Unavailable(m),
        Reply::Error(_, m) => LockError::Protocol(m),
        other => LockError::Protocol(format!("unexpected reply {other:?}")),
    }
}

impl Locker for LocksClient {
    fn try_acquire<'a>(
        &'a self,
        resource: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        Box::pin(async move {
            let req = Request::Lock {
                resource: resource.to_string(),
                owner: owner.to_string(),
                ttl,
            };
            match self.request(&req).await? {
                Reply::Ok(Some(lock_id)) => Ok(Acquire::Acquired { lock_id }),
                Reply::Busy(owner) => Ok(Acquire::Busy { owner }),
                other => Err(unexpected(other)),
            }
        })
    }

    fn release<'a>(&'a self, lock_id: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let req = Request::Unlock {
                lock_id: lock_id.to_string(),
            };
            match self.request(&req).await? {
                Reply::Ok(None) => Ok(true),
                Reply::NotFound => Ok(false),
                other => Err(unexpected(other)),
            }
        })
    }

    fn renew<'a>(
        &'a self,
        lock_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let req = Request::Renew {
                lock_id: lock_id.to_string(),
                ttl,
            };
            match self.request(&req).await? {
                Reply::Ok(None) => Ok(true),
                Reply::Expired => Ok(false),
                other => Err(unexpected(other)),
            }
        })
    }
}

/// Tries every endpoint once, starting at `next`, and returns the first
/// that completes the VERSION handshake.
async fn dial_any(opts: &ClientOptions, next: &AtomicUsize) -> Result<BoxStream, LockError> {
    let n = opts.endpoints.len();
    if n == 0 {
        return Err(LockError::Unavailable(
            "no locks endpoints configured".into(),
        ));
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
            Ok(Err(e)) => errors.push(format!("{ep:?}: {e}")),
            Err(_) => errors.push(format!("{ep:?}: timed out")),
        }
    }
    Err(LockError::Unavailable(errors.join("; ")))
}

async fn dial(ep: &Endpoint, tls: Option<&ClientTls>) -> Result<BoxStream, String> {
    let mut stream: BoxStream = match ep {
        Endpoint::Unix(path) => Box::pin(
            tokio::net::UnixStream::connect(path)
                .await
                .map_err(|e| e.to_string())?,
        ),
        Endpoint::Tcp(addr) => {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())?;
            let _ = tcp.set_nodelay(true);
            match tls {
                None => Box::pin(tcp),
                Some(t) => Box::pin(t.connect(tcp).await.map_err(|e| format!("TLS: {e}"))?),
            }
        }
    };
    let fields = yarilo_wire::handshake(
        &mut stream,
        &Request::Version(PROTOCOL_VERSION.into()).to_fields(),
        256,
    )
    .await
    .map_err(|e| e.to_string())?;
    match Reply::parse(&fields) {
        Some(Reply::VersionOk) => Ok(stream),
        _ => Err(format!("VERSION refused: {fields:?}")),
    }
}

/// Owns one connection: writes queued requests, matches replies to
/// waiters in order. Ends (failing every waiter) when the stream breaks or
/// every handle is gone.
async fn connection_task(stream: BoxStream, mut rx: mpsc::Receiver<Outgoing>) {
    let (r, w) = tokio::io::split(stream);
    let mut reader = FramedRead::new(r, LineCodec::new(MAX_LINE));
    let mut writer = BufWriter::new(w);
    let mut waiting: VecDeque<oneshot::Sender<Result<Reply, LockError>>> = VecDeque::new();
    let reason = loop {
        tokio::select! {
            out = rx.recv() => {
                let Some(mut out) = out else { break "client dropped".to_string() };
                // Batch whatever else is queued into one write.
                let mut failed = None;
                loop {
                    if let Err(e) = writer.write_all(out.line.as_bytes()).await {
                        failed = Some(e.to_string());
                    }
                    if let Some(r) = out.reply.take() {
                        waiting.push_back(r);
                    }
                    match rx.try_recv() {
                        Ok(o) => out = o,
                        Err(_) => break,
                    }
                }
                if let Some(e) = failed {
                    break e;
                }
                if let Err(e) = writer.flush().await {
                    break e.to_string();
                }
            }
            line = reader.next() => {
                let reply = match line {
                    None => break "closed by the locks service".to_string(),
                    Some(Err(e)) => break e.to_string(),
                    Some(Ok(Err(e))) => Err(LockError::Protocol(e.to_string())),
                    Some(Ok(Ok(fields))) => Reply::parse(&fields)
                        .ok_or_else(|| LockError::Protocol(format!("unparsable reply {fields:?}"))),
                };
                match waiting.pop_front() {
                    Some(w) => { let _ = w.send(reply); }
                    None => break "reply without a request".to_string(),
                }
            }
        }
    };
    tracing::debug!(%reason, "locks connection ended");
    for w in waiting {
        let _ = w.send(Err(LockError::Unavailable(reason.clone())));
    }
}

/// The [`EventBus`] of a process that reaches the locks service as a
/// client. Subscribers get every EVENT any process sent (their own
/// included), and a `*`/`resync` event after a gap in the subscription.
#[derive(Clone)]
pub struct ClientEventBus {
    client: LocksClient,
    publish_tx: mpsc::Sender<Event>,
    local: broadcast::Sender<Event>,
    subscribed: tokio::sync::watch::Receiver<bool>,
    _tasks: Arc<AbortOnDrop>,
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

impl ClientEventBus {
    fn new(client: LocksClient) -> ClientEventBus {
        let (publish_tx, mut publish_rx) = mpsc::channel::<Event>(4096);
        let (local, _) = broadcast::channel(4096);
        let (sub_tx, subscribed) = tokio::sync::watch::channel(false);
        let publisher = {
            let client = client.clone();
            tokio::spawn(async move {
                while let Some(ev) = publish_rx.recv().await {
                    let req = Request::Event {
                        resource: ev.resource,
                        kind: ev.kind,
                        payload: ev.payload,
                    };
                    if let Err(e) = client.request(&req).await {
                        tracing::warn!(error = %e, "EVENT not sent");
                    }
                }
            })
        };
        let subscriber = tokio::spawn(subscribe_loop(
            client.inner.opts.clone(),
            local.clone(),
            sub_tx,
        ));
        ClientEventBus {
            client,
            publish_tx,
            local,
            subscribed,
            _tasks: Arc::new(AbortOnDrop(vec![publisher, subscriber])),
        }
    }

    pub fn client(&self) -> &LocksClient {
        &self.client
    }

    /// Waits until the subscription connection is established.
    pub async fn wait_subscribed(&self) {
        let mut s = self.subscribed.clone();
        let _ = s.wait_for(|v| *v).await;
    }
}

impl EventBus for ClientEventBus {
    fn publish(&self, event: Event) {
        if self.publish_tx.try_send(event).is_err() {
            tracing::warn!("event queue full; event dropped");
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.local.subscribe()
    }
}

async fn subscribe_loop(
    opts: ClientOptions,
    local: broadcast::Sender<Event>,
    subscribed: tokio::sync::watch::Sender<bool>,
) {
    let next = AtomicUsize::new(0);
    let mut backoff = Duration::from_millis(50);
    let mut first = true;
    loop {
        if let Ok(mut stream) = dial_any(&opts, &next).await {
            let sub = join_line(&Request::Subscribe.to_fields());
            if stream.write_all(sub.as_bytes()).await.is_ok() && stream.flush().await.is_ok() {
                let mut reader = FramedRead::new(stream, LineCodec::new(MAX_LINE));
                if let Some(Ok(Ok(f))) = reader.next().await {
                    if Reply::parse(&f) == Some(Reply::Ok(None)) {
                        backoff = Duration::from_millis(50);
                        let _ = subscribed.send(true);
                        if !first {
                            let _ = local.send(resync_event());
                        }
                        first = false;
                        while let Some(Ok(Ok(f))) = reader.next().await {
                            if let Some(Reply::Event {
                                resource,
                                kind,
                                payload,
                            }) = Reply::parse(&f)
                            {
                                let _ = local.send(Event {
                                    resource,
                                    kind,
                                    payload,
                                });
                            }
                        }
                        let _ = subscribed.send(false);
                    }
                }
            }
        }
        next.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}
