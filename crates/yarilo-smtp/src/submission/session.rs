//! One submission session: states, commands, and the relay hand-off.
//!
//! States: `Greeted` (before EHLO) → `Ready` (after EHLO, not
//! authenticated) → `Authed` (may send mail) with an optional open
//! transaction. STARTTLS returns to `Greeted` (RFC 3207 §4.2).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::time::Instant;

use base64::Engine;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use yarilo_auth::{AuthReply, AuthRequest, FailureKind};
use yarilo_listener::MailStream;

use super::sender::AllowedSenders;
use super::SubmissionServer;
use crate::address::Path;
use crate::command::{self, is_xtext, Command, Param};
use crate::data::Body;
use crate::error::SmtpError;
use crate::io::{Conn, Input};
use crate::metrics::label;
use crate::relay::{Relay, RelayError};
use crate::reply::{EnhancedCode, Reply};

/// A client stream that can be upgraded to TLS in place (STARTTLS).
pub trait StartTls: AsyncRead + AsyncWrite + Unpin + Send {
    fn is_tls(&self) -> bool;
    fn start_tls(
        &mut self,
        acceptor: &TlsAcceptor,
    ) -> impl Future<Output = std::io::Result<()>> + Send;
}

impl StartTls for MailStream {
    fn is_tls(&self) -> bool {
        MailStream::is_tls(self)
    }

    fn start_tls(
        &mut self,
        acceptor: &TlsAcceptor,
    ) -> impl Future<Output = std::io::Result<()>> + Send {
        self.upgrade(acceptor)
    }
}

const B64: base64::engine::general_purpose::GeneralPurpose =
    base64::engine::general_purpose::STANDARD;

fn r(code: u16, e: (u8, u16, u16), text: impl Into<String>) -> Reply {
    Reply::new(code, EnhancedCode::new(e.0, e.1, e.2), text)
}

/// The authenticated user.
struct Login {
    user: String,
    senders: AllowedSenders,
}

struct Transaction {
    rcpts: usize,
    chunks: Option<Body>,
}

struct Session<'a> {
    server: &'a SubmissionServer,
    id: String,
    peer: SocketAddr,
    local: SocketAddr,
    helo: Option<String>,
    login: Option<Login>,
    tx: Option<Transaction>,
    relay: Option<Relay>,
    bad_commands: u32,
    tls: bool,
}

enum Next {
    Continue,
    Quit,
}

/// A session a login proxy authenticated (`yarilo submission` behind
/// `submission-login`): the user, its userdb fields and the client's EHLO
/// domain.
pub(super) struct Proxied {
    pub user: String,
    pub fields: yarilo_auth::ExtraFields,
    pub helo: String,
}

pub(super) async fn run<S: StartTls>(
    server: &SubmissionServer,
    stream: S,
    peer: SocketAddr,
    local: SocketAddr,
    id: String,
    proxied: Option<Proxied>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SmtpError> {
    let settings = &server.settings;
    let tls = stream.is_tls();
    let mut conn = Conn::new(stream, settings.max_line_length, settings.timeout);
    let mut shutdown = pin!(shutdown);
    let mut s = Session {
        server,
        id,
        peer,
        local,
        helo: None,
        login: None,
        tx: None,
        relay: None,
        bad_commands: 0,
        tls,
    };
    match proxied {
        None => conn.queue(&Reply::plain(
            220,
            format!("{} yarilo ESMTP ready", settings.hostname),
        )),
        // EHLO and AUTH happened at the login proxy: the first line
        // answers the client's AUTH (RFC 4954 §4).
        Some(p) => {
            tracing::info!(user = %p.user, helo = %p.helo, "authenticated by the login proxy");
            s.login = Some(Login {
                senders: AllowedSenders::for_user(&p.user, &p.fields, &settings.default_domain),
                user: p.user,
            });
            s.helo = Some(p.helo);
            conn.queue(&r(235, (2, 7, 0), "Logged in."));
        }
    }
    let result = loop {
        let input = match conn.next_input(shutdown.as_mut()).await {
            Ok(i) => i,
            Err(e) => break Err(e),
        };
        let step = match input {
            Input::TooLong => {
                conn.queue(&r(500, (5, 5, 2), "Line too long"));
                s.bad()
            }
            Input::Line(line) => s.handle_line(&mut conn, &line).await,
        };
        match step {
            Ok(Next::Continue) => {}
            Ok(Next::Quit) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let host = &settings.hostname;
    match &result {
        Err(SmtpError::Timeout) => conn.queue(&r(421, (4, 4, 2), format!("{host} Timeout"))),
        Err(SmtpError::Shutdown) => {
            conn.queue(&r(421, (4, 3, 2), format!("{host} Server shutting down")))
        }
        Err(SmtpError::TooManyErrors) => {
            conn.queue(&r(421, (4, 7, 0), format!("{host} Too many errors")))
        }
        _ => {}
    }
    if let Some(relay) = s.relay.take() {
        relay.quit().await;
    }
    conn.close().await;
    result
}

impl Session<'_> {
    fn bad(&mut self) -> Result<Next, SmtpError> {
        self.bad_commands += 1;
        let max = self.server.settings.max_bad_commands;
        if max > 0 && self.bad_commands >= max {
            return Err(SmtpError::TooManyErrors);
        }
        Ok(Next::Continue)
    }

    /// TLS, or a loopback client (Dovecot's rule for plaintext auth).
    fn secured(&self) -> bool {
        self.tls || self.peer.ip().is_loopback()
    }

    async fn handle_line<S: StartTls>(
        &mut self,
        conn: &mut Conn<S>,
        line: &[u8],
    ) -> Result<Next, SmtpError> {
        let cmd = match command::parse(line) {
            Ok(c) => c,
            Err(e) => {
                conn.queue(&e.reply());
                return self.bad();
            }
        };
        match cmd {
            Command::Ehlo(helo) => {
                self.reset_tx().await;
                let reply = self.ehlo_reply().await;
                conn.queue(&reply);
                self.helo = Some(helo);
            }
            Command::Helo(helo) => {
                self.reset_tx().await;
                conn.queue(&Reply::plain(250, self.server.settings.hostname.clone()));
                self.helo = Some(helo);
            }
            Command::Lhlo(_) | Command::Xclient(_) => {
                conn.queue(&r(500, (5, 5, 1), "Unknown command"));
                return self.bad();
            }
            Command::StartTls => return self.handle_starttls(conn).await,
            Command::Auth { mechanism, initial } => {
                return self.handle_auth(conn, &mechanism, initial).await
            }
            Command::Mail { from, params } => {
                let reply = self.handle_mail(from, &params).await;
                if reply.code == 553 {
                    conn.queue(&reply);
                    return self.bad();
                }
                conn.queue(&reply);
            }
            Command::Rcpt { to, params } => {
                let reply = self.handle_rcpt(to, &params).await;
                conn.queue(&reply);
            }
            Command::Data => self.handle_data(conn).await?,
            Command::Bdat { size, last } => self.handle_bdat(conn, size, last).await?,
            Command::Rset => {
                self.reset_tx().await;
                conn.queue(&r(250, (2, 0, 0), "OK"));
            }
            Command::Noop => conn.queue(&r(250, (2, 0, 0), "OK")),
            Command::Quit => {
                conn.queue(&r(
                    221,
                    (2, 0, 0),
                    format!("{} Bye", self.server.settings.hostname),
                ));
                return Ok(Next::Quit);
            }
            Command::Vrfy(_) => conn.queue(&r(252, (2, 3, 3), "Try RCPT instead")),
            Command::Help => conn.queue(&r(
                214,
                (2, 0, 0),
                "Commands: EHLO STARTTLS AUTH MAIL RCPT DATA BDAT RSET NOOP VRFY QUIT",
            )),
        }
        Ok(Next::Continue)
    }

    async fn ehlo_reply(&self) -> Reply {
        let s = &self.server.settings;
        let mut lines = vec![s.hostname.clone(), "8BITMIME".to_string()];
        if self.login.is_none() {
            let mechs = self
                .server
                .auth
                .mechanisms(self.secured(), self.peer.ip())
                .await;
            if !mechs.is_empty() {
                lines.push(format!("AUTH {}", mechs.join(" ")));
            }
        }
        lines.extend([
            "CHUNKING".to_string(),
            "DSN".to_string(),
            "ENHANCEDSTATUSCODES".to_string(),
            "PIPELINING".to_string(),
            if s.max_message_size > 0 {
                format!("SIZE {}", s.max_message_size)
            } else {
                "SIZE".to_string()
            },
            "SMTPUTF8".to_string(),
        ]);
        if self.server.starttls.is_some() && !self.tls {
            lines.push("STARTTLS".to_string());
        }
        Reply::multi(250, lines)
    }

    /// RFC 3207: 220, handshake, forget everything learnt before.
    async fn handle_starttls<S: StartTls>(
        &mut self,
        conn: &mut Conn<S>,
    ) -> Result<Next, SmtpError> {
        let Some(acceptor) = self.server.starttls.clone() else {
            conn.queue(&r(502, (5, 5, 1), "STARTTLS not available"));
            return self.bad();
        };
        if self.tls {
            conn.queue(&r(503, (5, 5, 1), "TLS already active"));
            return self.bad();
        }
        conn.send(&r(220, (2, 0, 0), "Ready to start TLS")).await?;
        // RFC 3207 §4.2 / CVE-2011-0411: nothing sent before the handshake
        // may be taken as a command afterwards.
        conn.discard_input();
        // A client that stalls the handshake must not hold the connection.
        let within = self.server.settings.starttls_timeout;
        match tokio::time::timeout(within, conn.stream_mut().start_tls(&acceptor)).await {
            Ok(r) => r.map_err(SmtpError::Tls)?,
            Err(_) => {
                tracing::info!("STARTTLS handshake timed out");
                return Err(SmtpError::Tls(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                )));
            }
        }
        self.tls = true;
        self.helo = None;
        self.login = None;
        self.reset_tx().await;
        Ok(Next::Continue)
    }

    async fn read_sasl_line<S: StartTls>(
        &mut self,
        conn: &mut Conn<S>,
    ) -> Result<Option<Vec<u8>>, SmtpError> {
        // Nothing to shut down on inside an exchange; the timeout bounds it.
        let never = std::future::pending::<()>();
        let mut never = pin!(never);
        match conn.next_input(never.as_mut()).await? {
            Input::Line(l) => Ok(Some(l)),
            Input::TooLong => Ok(None),
        }
    }

    /// RFC 4954 §4.
    async fn handle_auth<S: StartTls>(
        &mut self,
        conn: &mut Conn<S>,
        mechanism: &str,
        initial: Option<String>,
    ) -> Result<Next, SmtpError> {
        if self.helo.is_none() {
            conn.queue(&r(503, (5, 5, 1), "Send EHLO first"));
            return self.bad();
        }
        if self.login.is_some() {
            conn.queue(&r(503, (5, 5, 1), "Already authenticated"));
            return self.bad();
        }
        if self.tx.is_some() {
            conn.queue(&r(503, (5, 5, 1), "AUTH not allowed during a transaction"));
            return self.bad();
        }
        let initial = match initial.as_deref() {
            None => None,
            Some("=") => Some(Vec::new()),
            Some(b) => match B64.decode(b) {
                Ok(v) => Some(v),
                Err(_) => {
                    conn.queue(&r(501, (5, 5, 2), "Invalid base64 data"));
                    return self.bad();
                }
            },
        };
        let request = AuthRequest {
            service: "submission".to_string(),
            client_ip: self.peer.ip(),
            local_ip: Some(self.local.ip()),
            session: self.id.clone(),
            secured: self.secured(),
        };
        let (mut exchange, mut reply) = self
            .server
            .auth
            .begin(request, mechanism, initial.as_deref())
            .await;
        loop {
            match reply {
                AuthReply::Continue(challenge) => {
                    conn.send(&Reply::plain(334, B64.encode(&challenge)))
                        .await?;
                    let response = match self.read_sasl_line(conn).await? {
                        None => {
                            exchange.step(None).await;
                            conn.queue(&r(500, (5, 5, 6), "Authentication line too long"));
                            return self.bad();
                        }
                        Some(l) if l == b"*" => None,
                        Some(l) => match B64.decode(&l) {
                            Ok(v) => Some(v),
                            Err(_) => {
                                exchange.step(None).await;
                                conn.queue(&r(501, (5, 5, 2), "Invalid base64 data"));
                                return self.bad();
                            }
                        },
                    };
                    reply = exchange.step(response.as_deref()).await;
                }
                AuthReply::Success(ok) => {
                    if let Some(extra) = &ok.additional {
                        // RFC 4954 §4: additional data goes in a 334, the
                        // client answers with an empty line.
                        conn.send(&Reply::plain(334, B64.encode(extra))).await?;
                        let _ = self.read_sasl_line(conn).await?;
                    }
                    self.server.metrics.auth.get_or_create(&label("ok")).inc();
                    tracing::info!(user = %ok.user, mechanism, "authenticated");
                    self.login = Some(Login {
                        senders: AllowedSenders::for_user(
                            &ok.user,
                            &ok.fields,
                            &self.server.settings.default_domain,
                        ),
                        user: ok.user,
                    });
                    conn.queue(&r(235, (2, 7, 0), "Logged in."));
                    return Ok(Next::Continue);
                }
                AuthReply::Failure(f) => {
                    self.server
                        .metrics
                        .auth
                        .get_or_create(&label(f.kind.as_str()))
                        .inc();
                    tracing::info!(user = ?f.user, kind = f.kind.as_str(), "authentication failed");
                    let reply = match f.kind {
                        FailureKind::Temporary => r(454, (4, 7, 0), f.message),
                        FailureKind::PlaintextDisabled => r(538, (5, 7, 11), f.message),
                        FailureKind::UnsupportedMechanism => r(504, (5, 5, 4), f.message),
                        FailureKind::Malformed => r(501, (5, 5, 2), f.message),
                        FailureKind::Aborted => r(501, (5, 0, 0), f.message),
                        FailureKind::BadCredentials
                        | FailureKind::NotAllowedNet
                        | FailureKind::Nologin => r(535, (5, 7, 8), f.message),
                    };
                    conn.queue(&reply);
                    return if f.kind == FailureKind::Temporary {
                        Ok(Next::Continue)
                    } else {
                        self.bad()
                    };
                }
            }
        }
    }

    async fn reset_tx(&mut self) {
        if self.tx.take().is_some() {
            if let Some(relay) = self.relay.as_mut() {
                if !relay.reset().await {
                    self.relay = None;
                }
            }
        }
    }

    /// The relay, connected on first use.
    async fn relay(&mut self) -> Result<&mut Relay, RelayError> {
        if self.relay.is_none() {
            let relay = self.server.relay.connect().await?;
            self.relay = Some(relay);
        }
        self.relay
            .as_mut()
            .ok_or(RelayError::Protocol("relay vanished".into()))
    }

    fn relay_failed(&mut self, e: &RelayError) -> Reply {
        tracing::warn!(error = %e, "relay failed");
        self.relay = None;
        self.tx = None;
        e.client_reply()
    }

    async fn handle_mail(&mut self, from: Path, params: &[Param]) -> Reply {
        if self.helo.is_none() {
            return r(503, (5, 5, 1), "Send EHLO first");
        }
        let Some(login) = &self.login else {
            return r(530, (5, 7, 0), "Authentication required");
        };
        if self.tx.is_some() {
            return r(503, (5, 5, 1), "MAIL already given");
        }
        // RFC 6409 §6.1.
        if !login.senders.allows(from.as_str()) {
            self.server
                .metrics
                .senders
                .get_or_create(&label("forged"))
                .inc();
            tracing::warn!(user = %login.user, from = %from.as_str(), "MAIL FROM not owned by user");
            return r(
                553,
                (5, 7, 1),
                format!(
                    "Sender address {} not owned by user {}",
                    from.bracketed(),
                    login.user
                ),
            );
        }
        let max = self.server.settings.max_message_size;
        let mut wanted: Vec<&Param> = Vec::new();
        for p in params {
            match (p.keyword.as_str(), p.value.as_deref()) {
                ("SIZE", Some(v)) => match v.parse::<u64>() {
                    Ok(n) if max > 0 && n > max => {
                        return r(552, (5, 3, 4), "Message too big for system")
                    }
                    Ok(_) => wanted.push(p),
                    Err(_) => return r(501, (5, 5, 4), "Invalid SIZE"),
                },
                ("BODY", Some(v))
                    if v.eq_ignore_ascii_case("7BIT") || v.eq_ignore_ascii_case("8BITMIME") =>
                {
                    wanted.push(p)
                }
                ("SMTPUTF8", None) => wanted.push(p),
                ("RET", Some(v))
                    if v.eq_ignore_ascii_case("FULL") || v.eq_ignore_ascii_case("HDRS") =>
                {
                    wanted.push(p)
                }
                // RFC 3461 §4.4: xtext, at most 100 characters.
                ("ENVID", Some(v)) if v.len() <= 100 && is_xtext(v) => wanted.push(p),
                ("AUTH", Some(_)) => {}
                _ => {
                    return r(
                        555,
                        (5, 5, 4),
                        format!("Unsupported parameter {}", p.keyword),
                    )
                }
            }
        }
        let relay = match self.relay().await {
            Ok(r) => r,
            Err(e) => return self.relay_failed(&e),
        };
        let ext = relay.extensions;
        let mut line = format!("MAIL FROM:{}", from.bracketed());
        for p in wanted {
            let pass = match p.keyword.as_str() {
                "SIZE" => ext.size,
                "BODY" => ext.eightbitmime,
                "SMTPUTF8" => {
                    if !ext.smtputf8 {
                        return r(555, (5, 6, 7), "The relay does not support SMTPUTF8");
                    }
                    true
                }
                "RET" | "ENVID" => ext.dsn,
                _ => false,
            };
            if pass {
                line.push(' ');
                line.push_str(&p.to_wire());
            }
        }
        match relay.command(&line, "MAIL").await {
            Ok(reply) => {
                if reply.is_positive() {
                    self.server
                        .metrics
                        .senders
                        .get_or_create(&label("ok"))
                        .inc();
                    self.tx = Some(Transaction {
                        rcpts: 0,
                        chunks: None,
                    });
                }
                reply
            }
            Err(e) => self.relay_failed(&e),
        }
    }

    async fn handle_rcpt(&mut self, to: Path, params: &[Param]) -> Reply {
        let max = self.server.settings.max_recipients;
        let Some(tx) = &self.tx else {
            return r(503, (5, 5, 1), "MAIL needed first");
        };
        if tx.chunks.is_some() {
            return r(503, (5, 5, 1), "RCPT not allowed after BDAT");
        }
        if tx.rcpts >= max {
            self.server
                .metrics
                .recipients
                .get_or_create(&label("limit"))
                .inc();
            return r(452, (4, 5, 3), "Too many recipients");
        }
        let mut wanted = Vec::new();
        for p in params {
            match (p.keyword.as_str(), p.value.as_deref()) {
                ("NOTIFY", Some(v)) if valid_notify(v) => wanted.push(p),
                ("ORCPT", Some(v)) if valid_orcpt(v) => wanted.push(p),
                _ => {
                    return r(
                        555,
                        (5, 5, 4),
                        format!("Unsupported parameter {}", p.keyword),
                    )
                }
            }
        }
        let relay = match self.relay().await {
            Ok(r) => r,
            Err(e) => return self.relay_failed(&e),
        };
        let mut line = format!("RCPT TO:{}", to.bracketed());
        if relay.extensions.dsn {
            for p in wanted {
                line.push(' ');
                line.push_str(&p.to_wire());
            }
        }
        match relay.command(&line, "RCPT").await {
            Ok(reply) => {
                let result = if reply.is_positive() {
                    if let Some(tx) = self.tx.as_mut() {
                        tx.rcpts += 1;
                    }
                    "ok"
                } else if reply.is_transient() {
                    "relay_tempfail"
                } else {
                    "relay_rejected"
                };
                self.server
                    .metrics
                    .recipients
                    .get_or_create(&label(result))
                    .inc();
                reply
            }
            Err(e) => self.relay_failed(&e),
        }
    }

    fn data_refusal(&self) -> Option<Reply> {
        match &self.tx {
            None if self.login.is_none() => Some(r(530, (5, 7, 0), "Authentication required")),
            None => Some(r(503, (5, 5, 1), "MAIL needed first")),
            Some(tx) if tx.rcpts == 0 => Some(r(554, (5, 5, 1), "No valid recipients")),
            Some(_) => None,
        }
    }

    async fn handle_data<S: StartTls>(&mut self, conn: &mut Conn<S>) -> Result<(), SmtpError> {
        if let Some(reply) = self.data_refusal() {
            conn.queue(&reply);
            return Ok(());
        }
        if self.tx.as_ref().is_some_and(|t| t.chunks.is_some()) {
            conn.queue(&r(503, (5, 5, 1), "DATA not allowed after BDAT"));
            return Ok(());
        }
        conn.send(&Reply::plain(354, "OK")).await?;
        let mut body = Body::new(self.server.settings.max_message_size);
        conn.read_data(&mut body).await?;
        let reply = self.finish(body).await;
        conn.queue(&reply);
        Ok(())
    }

    async fn handle_bdat<S: StartTls>(
        &mut self,
        conn: &mut Conn<S>,
        size: u64,
        last: bool,
    ) -> Result<(), SmtpError> {
        if let Some(reply) = self.data_refusal() {
            let mut sink = Body::new(1);
            conn.read_chunk(size, &mut sink).await?;
            conn.queue(&reply);
            return Ok(());
        }
        let max = self.server.settings.max_message_size;
        let Some(tx) = self.tx.as_mut() else {
            return Ok(());
        };
        let body = tx.chunks.get_or_insert_with(|| Body::new(max));
        conn.read_chunk(size, body).await?;
        if !last {
            conn.queue(&r(250, (2, 0, 0), format!("{size} octets received")));
            return Ok(());
        }
        let body = tx.chunks.take().unwrap_or_default();
        let reply = self.finish(body).await;
        conn.queue(&reply);
        Ok(())
    }

    /// Hands the message to the relay; the relay's final reply is ours.
    async fn finish(&mut self, body: Body) -> Reply {
        let metrics = self.server.metrics.clone();
        if body.overflowed() {
            self.reset_tx().await;
            metrics.messages.get_or_create(&label("too_large")).inc();
            return r(552, (5, 3, 4), "Message too big for system");
        }
        let message = self.with_received(&body.data);
        self.tx = None;
        let started = Instant::now();
        let relay = match self.relay().await {
            Ok(r) => r,
            Err(e) => return self.relay_failed(&e),
        };
        match relay.data(&message).await {
            Ok(reply) => {
                let result = if reply.is_positive() {
                    metrics
                        .relay_seconds
                        .observe(started.elapsed().as_secs_f64());
                    "ok"
                } else if reply.is_transient() {
                    "relay_tempfail"
                } else {
                    "relay_rejected"
                };
                metrics.messages.get_or_create(&label(result)).inc();
                if !reply.is_positive() && !relay.reset().await {
                    // A refused DATA may leave the relay mid-transaction.
                    self.relay = None;
                }
                let user = self.login.as_ref().map(|l| l.user.as_str()).unwrap_or("");
                tracing::info!(%user, size = body.data.len(), result, reply = %reply, "submitted");
                reply
            }
            Err(e) => {
                metrics
                    .messages
                    .get_or_create(&label("relay_tempfail"))
                    .inc();
                self.relay_failed(&e)
            }
        }
    }

    /// RFC 5321 §4.4 trace header; `with` per RFC 3848.
    fn with_received(&self, message: &[u8]) -> Vec<u8> {
        let with = match (self.tls, self.login.is_some()) {
            (true, true) => "ESMTPSA",
            (true, false) => "ESMTPS",
            (false, true) => "ESMTPA",
            (false, false) => "ESMTP",
        };
        let helo: String = self
            .helo
            .as_deref()
            .unwrap_or("unknown")
            .chars()
            .filter(|c| !c.is_control())
            .take(255)
            .collect();
        let ip: IpAddr = self.peer.ip();
        let h = format!(
            "Received: from {helo} ([{ip}])\r\n\tby {} with {with} id {};\r\n\t{}\r\n",
            self.server.settings.hostname,
            self.id,
            crate::received::rfc5322_now()
        );
        let mut out = Vec::with_capacity(h.len() + message.len());
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(message);
        out
    }
}

/// RFC 3461 §4.1: `NEVER` or a comma list of SUCCESS, FAILURE, DELAY.
fn valid_notify(v: &str) -> bool {
    if v.eq_ignore_ascii_case("NEVER") {
        return true;
    }
    v.split(',').all(|w| {
        ["SUCCESS", "FAILURE", "DELAY"]
            .iter()
            .any(|k| w.eq_ignore_ascii_case(k))
    })
}

/// RFC 3461 §4.2: `addr-type ";" xtext`.
fn valid_orcpt(v: &str) -> bool {
    match v.split_once(';') {
        Some((t, a)) => {
            !t.is_empty()
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !a.is_empty()
                && a.len() <= 500
                && (is_xtext(a) || t.eq_ignore_ascii_case("utf-8"))
        }
        None => false,
    }
}
