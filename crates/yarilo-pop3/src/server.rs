//! The tokio driver: reads lines, feeds the [`Session`], writes its
//! outbox, runs STLS, enforces the idle timeouts and the shutdown signal.
//!
//! Invariants: replies to pipelined commands are sent together, once no
//! complete line is waiting (RFC 2449 §6.6 PIPELINING) or the outbox
//! reaches 64 KiB, so memory per session stays bounded; input buffered
//! after STLS is dropped (RFC 2595 §3.1, no plaintext injection into the
//! TLS session); shutdown is noticed only between commands, so a RETR in
//! progress completes.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;
use yarilo_auth::{AuthHandle, ExtraFields};
use yarilo_listener::{ClientConn, MailStream};
use yarilo_store::Store;

use crate::codec::LineReader;
use crate::session::{Action, Connection, Session, StateKind};
use crate::{Pop3Metrics, Pop3Settings};

/// A stream a POP3 session can run on: plain or TLS, upgradable by STLS.
pub trait Pop3Stream: AsyncRead + AsyncWrite + Unpin + Send {
    fn is_tls(&self) -> bool;
    /// Runs the server side of a TLS handshake in place.
    fn start_tls<'a>(
        &'a mut self,
        acceptor: &'a TlsAcceptor,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'a>>;
}

impl Pop3Stream for MailStream {
    fn is_tls(&self) -> bool {
        MailStream::is_tls(self)
    }
    fn start_tls<'a>(
        &'a mut self,
        acceptor: &'a TlsAcceptor,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'a>> {
        Box::pin(self.upgrade(acceptor))
    }
}

/// An in-memory pipe (tests, embedding): never TLS; STLS fails.
impl Pop3Stream for tokio::io::DuplexStream {
    fn is_tls(&self) -> bool {
        false
    }
    fn start_tls<'a>(
        &'a mut self,
        _acceptor: &'a TlsAcceptor,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'a>> {
        Box::pin(async {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "TLS over an in-memory pipe",
            ))
        })
    }
}

/// The POP3 service of one process: settings, the store, the auth engine
/// and the STLS certificate, shared by every session.
pub struct Pop3Server {
    pub(crate) settings: Pop3Settings,
    pub(crate) store: Store,
    pub(crate) auth: AuthHandle,
    pub(crate) starttls: Option<TlsAcceptor>,
    pub(crate) metrics: Pop3Metrics,
}

/// Decrements `sessions_open` however the session ends.
struct OpenSession(Pop3Metrics);

impl Drop for OpenSession {
    fn drop(&mut self) {
        self.0.sessions_open.dec();
    }
}

/// Outbox size that is sent even while pipelined commands wait.
const FLUSH_BYTES: usize = 64 * 1024;

/// A random session id (12 URL-safe base64 characters, like Dovecot's).
fn session_id() -> String {
    let bytes: [u8; 9] = rand::random();
    B64URL.encode(bytes)
}

/// Why the read loop stopped.
enum Stop {
    Closed(&'static str),
    Io(io::Error),
}

impl Pop3Server {
    /// `starttls`: offer STLS with this acceptor (None without a
    /// certificate). Registers the `yarilo_pop3_*` metrics, so make one
    /// per process and hand it both `services.pop3` and `services.pop3s`
    /// connections: STLS is never offered on a connection already in TLS.
    pub fn new(
        settings: Pop3Settings,
        store: Store,
        auth: AuthHandle,
        starttls: Option<TlsAcceptor>,
        registry: &mut Registry,
    ) -> Arc<Self> {
        let metrics = Pop3Metrics::default();
        metrics.register(registry);
        Arc::new(Pop3Server {
            settings,
            store,
            auth,
            starttls,
            metrics,
        })
    }

    pub fn settings(&self) -> &Pop3Settings {
        &self.settings
    }

    pub fn metrics(&self) -> &Pop3Metrics {
        &self.metrics
    }

    /// Runs one session to the end; `shutdown` resolves when the process
    /// is stopping (answer "-ERR [SYS/TEMP] server shutting down" and
    /// close at the next command boundary).
    pub async fn handle(
        self: Arc<Self>,
        mut conn: ClientConn,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        let (peer, local) = (conn.peer, conn.local);
        self.serve(&mut conn.stream, peer, local, shutdown).await;
    }

    /// Runs a connection a login proxy handed over after the client's
    /// USER/PASS or AUTH succeeded there (the caller verified the
    /// preamble; `conn.peer` is the real client). Instead of a greeting
    /// the first line answers that login: `+OK Logged in.` once the
    /// maildrop is open, in the TRANSACTION state, or `-ERR [IN-USE]` /
    /// `-ERR [SYS/TEMP]` and close when it cannot be opened.
    pub async fn handle_proxied(
        self: Arc<Self>,
        mut conn: ClientConn,
        user: String,
        fields: ExtraFields,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        let (peer, local) = (conn.peer, conn.local);
        self.serve_with(
            &mut conn.stream,
            peer,
            local,
            Some((user, fields)),
            shutdown,
        )
        .await;
    }

    /// [`Pop3Server::handle`] over any stream (tests use in-memory pipes).
    pub async fn serve<S: Pop3Stream>(
        self: Arc<Self>,
        stream: &mut S,
        peer: SocketAddr,
        local: SocketAddr,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        self.serve_with(stream, peer, local, None, shutdown).await;
    }

    async fn serve_with<S: Pop3Stream>(
        self: Arc<Self>,
        stream: &mut S,
        peer: SocketAddr,
        local: SocketAddr,
        preauth: Option<(String, ExtraFields)>,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        let id = session_id();
        let span = tracing::info_span!(
            "pop3",
            session = %id,
            remote = %peer.ip(),
            user = tracing::field::Empty
        );
        self.metrics.sessions.inc();
        self.metrics.sessions_open.inc();
        let _open = OpenSession(self.metrics.clone());
        let conn = Connection {
            id,
            peer,
            local,
            tls: stream.is_tls(),
        };
        let mut session = Session::new(self.clone(), conn);
        async {
            let reason = match self.run(&mut session, stream, preauth, shutdown).await {
                Stop::Closed(r) => r,
                Stop::Io(e) => {
                    tracing::debug!(error = %e, "connection error");
                    "connection_error"
                }
            };
            self.metrics.disconnect(reason);
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.shutdown()).await;
            session.log_logout(reason);
        }
        .instrument(span)
        .await;
    }

    async fn write<S: Pop3Stream>(&self, stream: &mut S, data: &[u8]) -> Result<(), Stop> {
        if data.is_empty() {
            return Ok(());
        }
        let io = async {
            stream.write_all(data).await?;
            stream.flush().await
        };
        match tokio::time::timeout(self.settings.idle_timeout, io).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Stop::Io(e)),
            Err(_) => Err(Stop::Closed("write_timeout")),
        }
    }

    async fn run<S: Pop3Stream>(
        &self,
        session: &mut Session,
        stream: &mut S,
        preauth: Option<(String, ExtraFields)>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Stop {
        tokio::pin!(shutdown);
        let mut reader = LineReader::new(self.settings.max_line_length);
        let mut buf = vec![0u8; 16 * 1024];
        match preauth {
            None => session.greeting(),
            Some((user, fields)) => {
                if session.start_proxied(user, fields).await == Action::Close {
                    let _ = self.write(stream, &session.take_output()).await;
                    return Stop::Closed(session.close_reason().unwrap_or("closed"));
                }
            }
        }
        loop {
            // Pipelining: answer a batch once no complete line waits, or
            // sooner when it grows large (a pipelined RETR flood must not
            // pile messages up in memory).
            if !reader.has_line() || session.output_len() >= FLUSH_BYTES {
                if let Err(s) = self.write(stream, &session.take_output()).await {
                    return s;
                }
            }
            let line = match reader.next_line() {
                Some(line) => {
                    // A command boundary inside a pipelined batch.
                    let stopping = tokio::select! {
                        biased;
                        _ = &mut shutdown => true,
                        _ = std::future::ready(()) => false,
                    };
                    if stopping {
                        session.shutting_down();
                        let _ = self.write(stream, &session.take_output()).await;
                        return Stop::Closed("shutdown");
                    }
                    line
                }
                None => {
                    let idle = match session.state() {
                        Some(StateKind::Transaction) => self.settings.idle_timeout,
                        _ => self.settings.login_timeout,
                    };
                    tokio::select! {
                        biased;
                        _ = &mut shutdown => {
                            session.shutting_down();
                            let _ = self.write(stream, &session.take_output()).await;
                            return Stop::Closed("shutdown");
                        }
                        r = tokio::time::timeout(idle, stream.read(&mut buf)) => match r {
                            Err(_) => {
                                session.timed_out();
                                let _ = self.write(stream, &session.take_output()).await;
                                return Stop::Closed("timeout");
                            }
                            Ok(Ok(0)) => return Stop::Closed("eof"),
                            Ok(Ok(n)) => {
                                reader.feed(&buf[..n]);
                                continue;
                            }
                            Ok(Err(e)) => return Stop::Io(e),
                        }
                    }
                }
            };
            match session.handle_line(line).await {
                Action::Continue => {}
                Action::Close => {
                    if let Err(s) = self.write(stream, &session.take_output()).await {
                        return s;
                    }
                    return Stop::Closed(session.close_reason().unwrap_or("closed"));
                }
                Action::StartTls => {
                    if let Err(s) = self.write(stream, &session.take_output()).await {
                        return s;
                    }
                    // RFC 2595 §3.1: nothing sent before the handshake
                    // may be taken as sent under TLS.
                    reader.clear();
                    let Some(acceptor) = self.starttls.as_ref() else {
                        return Stop::Closed("tls_failed");
                    };
                    let hs = stream.start_tls(acceptor);
                    match tokio::time::timeout(self.settings.login_timeout, hs).await {
                        Ok(Ok(())) => session.tls_started(),
                        Ok(Err(e)) => {
                            tracing::info!(error = %e, "STLS handshake failed");
                            return Stop::Closed("tls_failed");
                        }
                        Err(_) => return Stop::Closed("tls_failed"),
                    }
                }
            }
        }
    }
}
