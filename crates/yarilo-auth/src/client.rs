//! Client of `yarilo auth` for login pods (AUTH/CONT/MECHS) and backends
//! (VERIFY/USER).
//!
//! One multiplexed connection, opened on first use and re-opened on the
//! next request after it breaks (reconnect is lazy, so a restarting auth
//! replica costs one failed request at most). Every request has a
//! timeout. A request that failed before it was written is retried once on
//! a fresh connection; one that may have reached the server is not
//! (VERIFY consumes its token).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use futures::StreamExt as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_util::codec::FramedRead;
use yarilo_wire::{join_line, LineCodec, Version};

use crate::authenticator::{
    AuthFailure, AuthReply, AuthRequest, AuthSuccess, FailureKind, VerifiedLogin,
};
use crate::fields::ExtraFields;
use crate::protocol::{self, parse_fields};

/// Where and how to reach the service.
#[derive(Clone)]
pub struct ClientSettings {
    /// `host:port`.
    pub address: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Internal mTLS (pinned `internal_tls.server_name`), when enabled.
    pub tls: Option<yarilo_tls::internal::InternalTls>,
}

impl ClientSettings {
    /// From `auth_client.*`, with mTLS from `internal_tls.*` when enabled.
    pub fn from_config(
        config: &yarilo_config::Config,
    ) -> Result<ClientSettings, yarilo_tls::TlsError> {
        let c = &config.auth_client;
        Ok(ClientSettings {
            address: c.address.clone(),
            connect_timeout: Duration::from_secs(c.connect_timeout_seconds),
            request_timeout: Duration::from_secs(c.request_timeout_seconds),
            tls: yarilo_tls::internal::InternalTls::from_config(&config.internal_tls)?,
        })
    }
}

/// Why a request got no answer. The login must fail as "temporary".
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The service could not be reached (nothing was sent).
    #[error("cannot connect to auth service {address}: {message}")]
    Connect { address: String, message: String },
    /// The connection broke before the answer came.
    #[error("auth service connection lost")]
    Disconnected,
    /// No answer within the request timeout.
    #[error("auth service did not answer in time")]
    Timeout,
    /// The service answered something we do not understand (ERROR, …).
    #[error("auth service protocol error: {0}")]
    Protocol(String),
}

struct Conn {
    tx: mpsc::Sender<Vec<String>>,
    pending: StdMutex<HashMap<String, oneshot::Sender<Vec<String>>>>,
    alive: AtomicBool,
}

impl Conn {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

struct Inner {
    settings: ClientSettings,
    conn: Mutex<Option<Arc<Conn>>>,
    next_id: AtomicU64,
}

/// A handle to the auth service; clones share the connection.
#[derive(Clone)]
pub struct AuthClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthClient")
            .field("address", &self.inner.settings.address)
            .finish()
    }
}

enum SendError {
    /// Not written: safe to retry elsewhere.
    NotSent(ClientError),
    /// Maybe processed.
    Sent(ClientError),
}

impl AuthClient {
    pub fn new(settings: ClientSettings) -> AuthClient {
        AuthClient {
            inner: Arc::new(Inner {
                settings,
                conn: Mutex::new(None),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    fn next_id(&self) -> String {
        self.inner
            .next_id
            .fetch_add(1, Ordering::Relaxed)
            .to_string()
    }

    async fn connection(&self) -> Result<Arc<Conn>, ClientError> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if c.alive() {
                return Ok(Arc::clone(c));
            }
        }
        *slot = None;
        let s = &self.inner.settings;
        let connect_err = |message: String| ClientError::Connect {
            address: s.address.clone(),
            message,
        };
        let tcp = tokio::time::timeout(s.connect_timeout, TcpStream::connect(&s.address))
            .await
            .map_err(|_| connect_err("timed out".into()))?
            .map_err(|e| connect_err(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let conn = match &s.tls {
            Some(tls) => {
                let stream = tokio::time::timeout(s.connect_timeout, tls.connect(tcp))
                    .await
                    .map_err(|_| connect_err("TLS handshake timed out".into()))?
                    .map_err(|e| connect_err(format!("TLS: {e}")))?;
                start_connection(stream, s.connect_timeout).await
            }
            None => start_connection(tcp, s.connect_timeout).await,
        }
        .map_err(connect_err)?;
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    async fn send_on(
        &self,
        conn: &Conn,
        id: &str,
        line: Vec<String>,
    ) -> Result<Vec<String>, SendError> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = conn.pending.lock() {
            p.insert(id.to_string(), tx);
        }
        if conn.tx.send(line).await.is_err() {
            if let Ok(mut p) = conn.pending.lock() {
                p.remove(id);
            }
            return Err(SendError::NotSent(ClientError::Disconnected));
        }
        match tokio::time::timeout(self.inner.settings.request_timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(SendError::Sent(ClientError::Disconnected)),
            Err(_) => {
                if let Ok(mut p) = conn.pending.lock() {
                    p.remove(id);
                }
                Err(SendError::Sent(ClientError::Timeout))
            }
        }
    }

    /// Sends a one-line request and waits for its answer, retrying once on a
    /// new connection if it could not be written.
    async fn request(
        &self,
        build: impl Fn(&str) -> Vec<String>,
    ) -> Result<(Arc<Conn>, String, Vec<String>), ClientError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let conn = self.connection().await?;
            let id = self.next_id();
            match self.send_on(&conn, &id, build(&id)).await {
                Ok(answer) => return Ok((conn, id, answer)),
                Err(SendError::NotSent(e)) if attempt >= 2 => return Err(e),
                Err(SendError::NotSent(_)) => continue,
                Err(SendError::Sent(e)) => return Err(e),
            }
        }
    }

    /// Mechanisms to advertise for a client at `ip`.
    pub async fn mechanisms(&self, secured: bool, ip: IpAddr) -> Result<Vec<String>, ClientError> {
        let (_, _, answer) = self
            .request(|id| {
                let mut l = vec!["MECHS".to_string(), id.to_string(), format!("ip={ip}")];
                if secured {
                    l.push("secured".into());
                }
                l
            })
            .await?;
        match answer.first().map(String::as_str) {
            Some("MECHS") => Ok(answer[2..].to_vec()),
            _ => Err(ClientError::Protocol(answer.join(" "))),
        }
    }

    /// Starts an AUTH exchange; continue it with [`ClientExchange::step`]
    /// while the reply is [`AuthReply::Continue`].
    pub async fn begin(
        &self,
        request: &AuthRequest,
        mechanism: &str,
        initial: Option<&[u8]>,
    ) -> Result<(ClientExchange, AuthReply), ClientError> {
        let (conn, id, answer) = self
            .request(|id| {
                let mut l = vec![
                    "AUTH".to_string(),
                    id.to_string(),
                    mechanism.to_string(),
                    format!("service={}", request.service),
                    format!("ip={}", request.client_ip),
                    format!("session={}", request.session),
                ];
                if let Some(local) = request.local_ip {
                    l.push(format!("local_ip={local}"));
                }
                if request.secured {
                    l.push("secured".into());
                }
                if let Some(ir) = initial {
                    l.push(format!("resp={}", B64.encode(ir)));
                }
                l
            })
            .await?;
        let reply = parse_auth_reply(&answer)?;
        Ok((
            ClientExchange {
                client: self.clone(),
                conn,
                id,
            },
            reply,
        ))
    }

    /// A whole PLAIN login.
    pub async fn login_plain(
        &self,
        request: &AuthRequest,
        user: &str,
        password: &str,
    ) -> Result<AuthReply, ClientError> {
        let ir = format!("\0{user}\0{password}");
        Ok(self.begin(request, "PLAIN", Some(ir.as_bytes())).await?.1)
    }

    /// VERIFY a preamble's token. `Ok(Err(reason))` is a refusal.
    pub async fn verify(
        &self,
        token: &str,
        session: &str,
        service: &str,
        user: &str,
    ) -> Result<Result<VerifiedLogin, String>, ClientError> {
        let (_, _, answer) = self
            .request(|id| {
                vec![
                    "VERIFY".to_string(),
                    id.to_string(),
                    format!("token={token}"),
                    format!("session={session}"),
                    format!("service={service}"),
                    format!("user={user}"),
                ]
            })
            .await?;
        let (reserved, fields) = parse_fields(answer.get(2..).unwrap_or(&[]));
        let get = |k: &str| {
            reserved
                .iter()
                .find(|(rk, _)| rk == k)
                .map(|(_, v)| v.clone())
        };
        match answer.first().map(String::as_str) {
            Some("OK") => Ok(Ok(VerifiedLogin {
                user: get("user").unwrap_or_default(),
                fields,
            })),
            Some("FAIL") => Ok(Err(get("reason").unwrap_or_else(|| "refused".into()))),
            _ => Err(ClientError::Protocol(answer.join(" "))),
        }
    }

    /// userdb lookup (LMTP recipients): `Ok(None)` if unknown.
    pub async fn lookup_user(
        &self,
        user: &str,
        service: &str,
    ) -> Result<Option<(String, ExtraFields)>, ClientError> {
        let (_, _, answer) = self
            .request(|id| {
                vec![
                    "USER".to_string(),
                    id.to_string(),
                    format!("user={user}"),
                    format!("service={service}"),
                ]
            })
            .await?;
        let (reserved, fields) = parse_fields(answer.get(2..).unwrap_or(&[]));
        match answer.first().map(String::as_str) {
            Some("USER") => {
                let user = reserved
                    .into_iter()
                    .find(|(k, _)| k == "user")
                    .map(|(_, v)| v)
                    .unwrap_or_default();
                Ok(Some((user, fields)))
            }
            Some("NOTFOUND") => Ok(None),
            _ => Err(ClientError::Protocol(answer.join(" "))),
        }
    }
}

impl AuthClient {
    /// userdb lookup of an LMTP recipient for `lmtp-login`, with a
    /// single-use token for the hop's preamble (bound to the user,
    /// `session` and `lmtp`): `Ok(None)` if unknown.
    pub async fn lookup_delivery(
        &self,
        user: &str,
        session: &str,
    ) -> Result<Option<(String, ExtraFields, String)>, ClientError> {
        let (_, _, answer) = self
            .request(|id| {
                vec![
                    "USER".to_string(),
                    id.to_string(),
                    format!("user={user}"),
                    "service=lmtp".to_string(),
                    format!("session={session}"),
                ]
            })
            .await?;
        let (reserved, fields) = parse_fields(answer.get(2..).unwrap_or(&[]));
        let get = |k: &str| {
            reserved
                .iter()
                .find(|(rk, _)| rk == k)
                .map(|(_, v)| v.clone())
        };
        match answer.first().map(String::as_str) {
            Some("USER") => match get("token") {
                Some(token) => Ok(Some((get("user").unwrap_or_default(), fields, token))),
                None => Err(ClientError::Protocol(
                    "USER answer without token= (an auth service too old for lmtp-login)".into(),
                )),
            },
            Some("NOTFOUND") => Ok(None),
            _ => Err(ClientError::Protocol(answer.join(" "))),
        }
    }
}

/// An AUTH exchange in progress on one connection.
pub struct ClientExchange {
    client: AuthClient,
    conn: Arc<Conn>,
    id: String,
}

impl ClientExchange {
    /// Sends the client's next response (`None` cancels).
    pub async fn step(&mut self, response: Option<&[u8]>) -> Result<AuthReply, ClientError> {
        if !self.conn.alive() {
            return Err(ClientError::Disconnected);
        }
        let data = match response {
            Some(r) => B64.encode(r),
            None => "*".to_string(),
        };
        let line = vec!["CONT".to_string(), self.id.clone(), data];
        match self.client.send_on(&self.conn, &self.id, line).await {
            Ok(answer) => parse_auth_reply(&answer),
            Err(SendError::NotSent(e) | SendError::Sent(e)) => Err(e),
        }
    }
}

fn parse_auth_reply(answer: &[String]) -> Result<AuthReply, ClientError> {
    let rest = answer.get(2..).unwrap_or(&[]);
    match answer.first().map(String::as_str) {
        Some("CONT") => {
            let data = rest.first().map(String::as_str).unwrap_or("");
            B64.decode(data)
                .map(AuthReply::Continue)
                .map_err(|_| ClientError::Protocol("CONT with bad base64".into()))
        }
        Some("OK") => {
            let (reserved, fields) = parse_fields(rest);
            let get = |k: &str| {
                reserved
                    .iter()
                    .find(|(rk, _)| rk == k)
                    .map(|(_, v)| v.clone())
            };
            let additional = match get("resp") {
                Some(r) => Some(
                    B64.decode(r)
                        .map_err(|_| ClientError::Protocol("OK with bad resp".into()))?,
                ),
                None => None,
            };
            Ok(AuthReply::Success(AuthSuccess {
                user: get("user").unwrap_or_default(),
                token: get("token").unwrap_or_default(),
                fields,
                additional,
            }))
        }
        Some("FAIL") => {
            let (reserved, _) = parse_fields(rest);
            let get = |k: &str| {
                reserved
                    .iter()
                    .find(|(rk, _)| rk == k)
                    .map(|(_, v)| v.clone())
            };
            Ok(AuthReply::Failure(AuthFailure {
                kind: FailureKind::parse(&get("code").unwrap_or_default()),
                message: get("reason").unwrap_or_else(|| "Authentication failed.".into()),
                user: get("user"),
            }))
        }
        _ => Err(ClientError::Protocol(answer.join(" "))),
    }
}

/// Handshakes and spawns the reader and writer tasks of a connection.
async fn start_connection<S>(stream: S, timeout: Duration) -> Result<Arc<Conn>, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut lines = FramedRead::new(read, LineCodec::new(protocol::MAX_LINE));
    write
        .write_all(join_line(&protocol::version().to_fields()).as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, lines.next()).await {
        Ok(Some(Ok(Ok(fields)))) => match Version::from_fields(&fields) {
            Ok(v) if v.compatible_with(&protocol::version()) => {}
            _ => return Err(format!("VERSION refused: {}", fields.join(" "))),
        },
        Ok(_) => return Err("closed during VERSION handshake".into()),
        Err(_) => return Err("VERSION handshake timed out".into()),
    }
    let (tx, mut rx) = mpsc::channel::<Vec<String>>(256);
    let conn = Arc::new(Conn {
        tx,
        pending: StdMutex::new(HashMap::new()),
        alive: AtomicBool::new(true),
    });
    // The tasks hold weak references: dropping the last client handle
    // drops the sender, the writer then closes the socket, the reader ends.
    let writer_conn = Arc::downgrade(&conn);
    tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            if write.write_all(join_line(&line).as_bytes()).await.is_err() {
                if let Some(c) = writer_conn.upgrade() {
                    c.alive.store(false, Ordering::Release);
                }
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    let reader_conn = Arc::downgrade(&conn);
    tokio::spawn(async move {
        while let Some(item) = lines.next().await {
            let Ok(Ok(fields)) = item else {
                if item.is_err() {
                    break;
                }
                continue;
            };
            let Some(id) = fields.get(1).cloned() else {
                continue;
            };
            let Some(conn) = reader_conn.upgrade() else {
                break;
            };
            let waiter = conn.pending.lock().ok().and_then(|mut p| p.remove(&id));
            if let Some(w) = waiter {
                let _ = w.send(fields);
            }
        }
        if let Some(conn) = reader_conn.upgrade() {
            conn.alive.store(false, Ordering::Release);
            // Dropping the senders wakes every waiter with "disconnected".
            if let Ok(mut p) = conn.pending.lock() {
                p.clear();
            }
        }
    });
    Ok(conn)
}
