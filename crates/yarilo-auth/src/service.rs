//! `yarilo auth`: the [`Authenticator`] served on the internal line
//! protocol ([`crate::protocol`]) to login pods (AUTH, CONT, MECHS) and
//! backends (VERIFY, USER).
//!
//! Invariants: requests on one connection run concurrently (a slow hash
//! never holds up a VERIFY behind it); at most [`MAX_INFLIGHT`] per
//! connection and `max_connections` connections; the first line must be a
//! compatible VERSION within [`HANDSHAKE_TIMEOUT`]; a connection silent
//! for `idle_timeout` is closed; a malformed line is answered with ERROR,
//! never fatal; an over-long line closes the connection (the framing is
//! lost).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use futures::StreamExt as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Mutex, Semaphore};
use tokio_util::codec::FramedRead;
use yarilo_wire::{join_line, LineCodec, Version};

use crate::authenticator::{AuthReply, AuthRequest, Authenticator, Exchange};
use crate::protocol::{self, push_fields, Request};

/// Requests one connection may have in flight.
pub const MAX_INFLIGHT: usize = 256;
/// Open SASL exchanges one connection may hold.
pub const MAX_EXCHANGES: usize = 1024;
/// Time allowed for the VERSION line.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Listener limits, normally from `auth_service.*`.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    pub max_connections: usize,
    pub idle_timeout: Duration,
}

impl ServiceSettings {
    pub fn from_config(c: &yarilo_config::AuthService) -> ServiceSettings {
        ServiceSettings {
            max_connections: c.max_connections,
            idle_timeout: Duration::from_secs(c.idle_timeout_seconds),
        }
    }
}

impl Default for ServiceSettings {
    fn default() -> Self {
        ServiceSettings::from_config(&yarilo_config::AuthService::default())
    }
}

/// Serves `listener` until `shutdown` resolves; `tls` wraps every
/// connection (internal mTLS, `internal_tls.enabled`). Open connections are
/// dropped at shutdown: clients reconnect to another replica.
pub async fn run(
    listener: TcpListener,
    auth: Arc<Authenticator>,
    settings: ServiceSettings,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let limit = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = Arc::clone(&limit).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "auth service accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let auth = Arc::clone(&auth);
        let settings = settings.clone();
        let tls = tls.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let result = match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => serve_connection(s, peer, auth, settings).await,
                        Ok(Err(e)) => Err(ConnectionError::Tls(e.to_string())),
                        Err(_) => Err(ConnectionError::Tls("handshake timed out".into())),
                    }
                }
                None => serve_connection(stream, peer, auth, settings).await,
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "auth connection ended");
            }
        });
        // Reap finished connection tasks so the set does not grow.
        while tasks.try_join_next().is_some() {}
    }
    tasks.abort_all();
    Ok(())
}

/// `yarilo auth`: builds the authenticator from `config`, registers its
/// metrics, binds `auth_service.listen` (mTLS when `internal_tls.enabled`)
/// and serves until `shutdown`.
pub async fn run_from_config(
    config: &yarilo_config::Config,
    registry: Option<&mut prometheus_client::registry::Registry>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let tls =
        yarilo_tls::internal::InternalTls::from_config(&config.internal_tls)?.map(|t| t.acceptor());
    let auth = Arc::new(Authenticator::from_config(config)?);
    if let Some(r) = registry {
        auth.register_metrics(r);
    }
    let addr = yarilo_config::parse_listen(&config.auth_service.listen)
        .map_err(|m| anyhow::anyhow!("auth_service.listen: {m}"))?;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(%addr, ?auth, "auth service listening");
    run(
        listener,
        auth,
        ServiceSettings::from_config(&config.auth_service),
        tls,
        shutdown,
    )
    .await?;
    Ok(())
}

/// How a connection ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("tls: {0}")]
    Tls(String),
    #[error("handshake: {0}")]
    Handshake(String),
    #[error("idle timeout")]
    Idle,
    #[error("wire: {0}")]
    Wire(#[from] yarilo_wire::WireError),
}

type Exchanges = Arc<Mutex<HashMap<String, Exchange>>>;

/// Serves one connection (any transport: TCP, TLS, an in-memory duplex).
pub async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    auth: Arc<Authenticator>,
    settings: ServiceSettings,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut stream = FramedRead::new(read, LineCodec::new(protocol::MAX_LINE));
    let hello = match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.next()).await {
        Ok(Some(Ok(Ok(fields)))) => fields,
        Ok(Some(Err(e))) => return Err(e.into()),
        Ok(Some(Ok(Err(e)))) => return Err(ConnectionError::Handshake(e.to_string())),
        Ok(None) => return Ok(()),
        Err(_) => return Err(ConnectionError::Handshake("no VERSION line".into())),
    };
    let ours = protocol::version();
    match Version::from_fields(&hello) {
        Ok(v) if v.compatible_with(&ours) => {}
        Ok(v) => {
            let line = join_line(&[
                "ERROR",
                "-",
                &format!("incompatible version {} {}", v.service, v.major),
            ]);
            let _ = write.write_all(line.as_bytes()).await;
            return Err(ConnectionError::Handshake("incompatible version".into()));
        }
        Err(e) => {
            let _ = write
                .write_all(join_line(&["ERROR", "-", "expected VERSION"]).as_bytes())
                .await;
            return Err(ConnectionError::Handshake(e.to_string()));
        }
    }
    write
        .write_all(join_line(&ours.to_fields()).as_bytes())
        .await
        .map_err(yarilo_wire::WireError::from)?;
    tracing::debug!(%peer, "auth client connected");

    let (tx, mut rx) = mpsc::channel::<Vec<String>>(MAX_INFLIGHT);
    let writer = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            if write.write_all(join_line(&line).as_bytes()).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    let inflight = Arc::new(Semaphore::new(MAX_INFLIGHT));
    let exchanges: Exchanges = Arc::new(Mutex::new(HashMap::new()));
    let result = loop {
        let next = match tokio::time::timeout(settings.idle_timeout, stream.next()).await {
            Err(_) => break Err(ConnectionError::Idle),
            Ok(None) => break Ok(()),
            Ok(Some(Err(e))) => break Err(e.into()),
            Ok(Some(Ok(item))) => item,
        };
        let fields = match next {
            Ok(f) => f,
            Err(e) => {
                let _ = tx
                    .send(vec!["ERROR".into(), "-".into(), e.to_string()])
                    .await;
                continue;
            }
        };
        let request = match Request::parse(&fields) {
            Ok(r) => r,
            Err(bad) => {
                let id = bad.id.unwrap_or_else(|| "-".into());
                let _ = tx.send(vec!["ERROR".into(), id, bad.message]).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&inflight).acquire_owned().await else {
            break Ok(());
        };
        let auth = Arc::clone(&auth);
        let tx = tx.clone();
        let exchanges = Arc::clone(&exchanges);
        tokio::spawn(async move {
            let _permit = permit;
            let reply = handle(request, &auth, &exchanges).await;
            let _ = tx.send(reply).await;
        });
    };
    drop(tx);
    // Let in-flight answers drain, then stop the writer.
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    result
}

async fn handle(request: Request, auth: &Arc<Authenticator>, exchanges: &Exchanges) -> Vec<String> {
    match request {
        Request::Mechs { id, ip, secured } => {
            let ip = ip.unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
            let mut out = vec!["MECHS".to_string(), id];
            out.extend(
                auth.mechanisms(secured, ip)
                    .iter()
                    .map(|m| m.name().to_string()),
            );
            out
        }
        Request::Auth {
            id,
            mechanism,
            service,
            ip,
            local_ip,
            session,
            secured,
            initial,
        } => {
            if exchanges.lock().await.contains_key(&id) {
                return vec!["ERROR".into(), id, "request id already in use".into()];
            }
            let initial = match initial.as_deref().map(|s| B64.decode(s)) {
                None => None,
                Some(Ok(b)) => Some(b),
                Some(Err(_)) => {
                    return vec![
                        "FAIL".into(),
                        id,
                        "code=malformed".into(),
                        "reason=Invalid base64 data.".into(),
                    ]
                }
            };
            let mut exchange = auth.exchange(
                AuthRequest {
                    service,
                    client_ip: ip,
                    local_ip,
                    session,
                    secured,
                },
                &mechanism,
            );
            let reply = exchange.begin(initial.as_deref()).await;
            finish(id, reply, exchange, auth, exchanges).await
        }
        Request::Cont { id, response } => {
            let Some(mut exchange) = exchanges.lock().await.remove(&id) else {
                return vec![
                    "FAIL".into(),
                    id,
                    "code=malformed".into(),
                    "reason=No such exchange.".into(),
                ];
            };
            let reply = match response.as_deref().map(|s| B64.decode(s)) {
                None => exchange.step(None).await,
                Some(Ok(data)) => exchange.step(Some(&data)).await,
                Some(Err(_)) => {
                    return vec![
                        "FAIL".into(),
                        id,
                        "code=malformed".into(),
                        "reason=Invalid base64 data.".into(),
                    ]
                }
            };
            finish(id, reply, exchange, auth, exchanges).await
        }
        Request::Verify {
            id,
            token,
            session,
            service,
            user,
        } => match auth.verify_token(&token, &session, &service, &user).await {
            Ok(v) => {
                let mut out = vec!["OK".into(), id, format!("user={}", v.user)];
                push_fields(&mut out, &v.fields);
                out
            }
            Err(e) => vec![
                "FAIL".into(),
                id,
                "code=token".into(),
                format!("reason={e}"),
            ],
        },
        Request::User {
            id,
            user,
            service,
            session: Some(session),
        } if service == crate::authenticator::DELIVERY_SERVICE => {
            match auth.lookup_delivery(&user, &session).await {
                Ok(Some((user, fields, token))) => {
                    let mut out = vec![
                        "USER".into(),
                        id,
                        format!("user={user}"),
                        format!("token={token}"),
                    ];
                    push_fields(&mut out, &fields);
                    out
                }
                Ok(None) => vec!["NOTFOUND".into(), id],
                Err(e) => {
                    tracing::warn!(error = %e, "userdb lookup for a delivery failed");
                    vec![
                        "FAIL".into(),
                        id,
                        "code=temporary".into(),
                        "reason=Temporary lookup failure.".into(),
                    ]
                }
            }
        }
        Request::User {
            id, user, service, ..
        } => match auth.lookup_user(&user, &service).await {
            Ok(Some((user, fields))) => {
                let mut out = vec!["USER".into(), id, format!("user={user}")];
                push_fields(&mut out, &fields);
                out
            }
            Ok(None) => vec!["NOTFOUND".into(), id],
            Err(e) => {
                tracing::warn!(error = %e, "userdb lookup failed");
                vec![
                    "FAIL".into(),
                    id,
                    "code=temporary".into(),
                    "reason=Temporary lookup failure.".into(),
                ]
            }
        },
    }
}

async fn finish(
    id: String,
    reply: AuthReply,
    exchange: Exchange,
    _auth: &Arc<Authenticator>,
    exchanges: &Exchanges,
) -> Vec<String> {
    match reply {
        AuthReply::Continue(challenge) => {
            let mut map = exchanges.lock().await;
            if map.len() >= MAX_EXCHANGES {
                map.retain(|_, e| !e.is_expired());
            }
            if map.len() >= MAX_EXCHANGES {
                return vec![
                    "FAIL".into(),
                    id,
                    "code=temporary".into(),
                    "reason=Too many open exchanges.".into(),
                ];
            }
            map.insert(id.clone(), exchange);
            vec!["CONT".into(), id, B64.encode(challenge)]
        }
        AuthReply::Success(s) => {
            let mut out = vec![
                "OK".into(),
                id,
                format!("user={}", s.user),
                format!("token={}", s.token),
            ];
            if let Some(a) = s.additional {
                out.push(format!("resp={}", B64.encode(a)));
            }
            push_fields(&mut out, &s.fields);
            out
        }
        AuthReply::Failure(f) => {
            let mut out = vec![
                "FAIL".into(),
                id,
                format!("code={}", f.kind.as_str()),
                format!("reason={}", f.message),
            ];
            if let Some(u) = f.user {
                out.push(format!("user={u}"));
            }
            out
        }
    }
}
