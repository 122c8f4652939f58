//! `submission-login`: SMTP submission (RFC 6409) up to AUTH (RFC 4954),
//! with STARTTLS (RFC 3207) and implicit TLS (RFC 8314), then the
//! hand-off to `yarilo submission`.
//!
//! Answered here: EHLO, HELO, STARTTLS, AUTH (initial response,
//! continuations, `*` cancel), NOOP, RSET, VRFY (252), HELP, QUIT. MAIL,
//! RCPT, DATA and BDAT are `530 5.7.0 Authentication required`.
//!
//! Hand-off: the preamble carries `HELO=<the client's EHLO domain>`. The
//! backend starts as if EHLO and AUTH had happened on its own connection
//! and its first line is `235 2.7.0 Logged in.`, which is relayed as the
//! answer to AUTH. The client goes on with MAIL (or a new EHLO, which the
//! backend answers with its post-AUTH list). Because RFC 4954 does not
//! make clients repeat EHLO after AUTH, the pre-AUTH EHLO here lists the
//! backend's extensions (from the same `submission.*` keys) besides AUTH
//! and STARTTLS. A backend that cannot be reached or refuses gives
//! `454 4.7.0` (or its own 4xx/5xx line); the client stays unauthenticated.
//!
//! Warden ([`crate::warden`]): a connection refused by CONNECT gets
//! `421 4.7.0 <host> Too many connections` (or `Too many failed logins`)
//! instead of the 220 greeting (RFC 5321 §3.1 allows 421 in its place); an
//! AUTH refused by SESSION_START gets `454 4.7.0 Too many sessions for
//! this user` (RFC 4954 §6: temporary failure) and the client stays
//! unauthenticated; a kick closes the piped connection.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use prometheus_client::registry::Registry;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;
use yarilo_auth::{AuthFailure, AuthHandle, AuthReply, AuthSuccess, FailureKind};
use yarilo_listener::{ClientConn, MailStream};
use yarilo_smtp::command::{self, Command};
use yarilo_smtp::reply::{EnhancedCode, Reply};
use yarilo_tls::internal::InternalTls;
use yarilo_wire::Preamble;

use crate::handoff::{self, session_id};
use crate::lines::{Line, LineConn, LineError};
use crate::preamble::{valid_helo, HopPreamble};
use crate::route::Router;
use crate::warden::{ConnectionGuard, WardenRefusal};
use crate::{LoginMetrics, LoginSettings, LoginWarden};
use yarilo_warden::Refusal;

const PROTO: &str = "submission";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn r(code: u16, e: (u8, u16, u16), text: impl Into<String>) -> Reply {
    Reply::new(code, EnhancedCode::new(e.0, e.1, e.2), text)
}

/// What every `submission-login` session of the process shares.
pub struct SubmissionLoginServer {
    settings: LoginSettings,
    auth: AuthHandle,
    router: Router,
    hop_tls: Option<InternalTls>,
    starttls: Option<TlsAcceptor>,
    metrics: LoginMetrics,
    warden: LoginWarden,
    xclient: crate::xclient::XclientPolicy,
}

impl SubmissionLoginServer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: LoginSettings,
        auth: AuthHandle,
        router: Router,
        hop_tls: Option<InternalTls>,
        starttls: Option<TlsAcceptor>,
        warden: LoginWarden,
        xclient: crate::xclient::XclientPolicy,
        registry: &mut Registry,
    ) -> Arc<SubmissionLoginServer> {
        Arc::new(SubmissionLoginServer {
            settings,
            auth,
            router,
            hop_tls,
            starttls,
            metrics: LoginMetrics::register(registry),
            warden,
            xclient,
        })
    }

    /// Serves one client connection until QUIT, a hand-off whose pipe
    /// ends, or a broken limit.
    pub async fn handle(self: Arc<Self>, conn: ClientConn) {
        let id = session_id();
        let span = tracing::info_span!("submission-login", session = %id, ip = %conn.peer.ip());
        let xclient = self.xclient.allows(&conn.service, conn.peer.ip());
        let mut s = Session {
            xclient,
            loopback: conn.peer.ip().is_loopback(),
            conn: LineConn::new(
                conn.stream,
                self.settings.max_line,
                self.settings.login_timeout,
            ),
            peer: conn.peer,
            local: conn.local,
            id,
            helo: None,
            failures: 0,
            bad: 0,
            counted: None,
            server: self,
        };
        async move {
            if let Err(e) = s.serve().await {
                tracing::debug!(error = %e, "connection ended");
            }
        }
        .instrument(span)
        .await;
    }
}

enum Step {
    Continue,
    Close,
}

struct Session {
    server: Arc<SubmissionLoginServer>,
    conn: LineConn<MailStream>,
    peer: SocketAddr,
    local: SocketAddr,
    id: String,
    helo: Option<String>,
    failures: u32,
    bad: u32,
    /// Warden's count of this pre-auth connection; released at the
    /// hand-off (the session is counted instead) or when it ends.
    counted: Option<ConnectionGuard>,
    /// The peer may forward the client address (XCLIENT).
    xclient: bool,
    /// The TCP peer is on loopback (a secure transport, whatever client
    /// it forwards).
    loopback: bool,
}

impl Session {
    fn send(&mut self, reply: &Reply) {
        self.conn.queue(&reply.to_bytes());
    }

    async fn serve(&mut self) -> Result<(), LineError> {
        let host = self.server.settings.hostname.clone();
        match self.server.warden.connect(&self.id, self.peer.ip()).await {
            Ok(guard) => self.counted = Some(guard),
            Err(why) => {
                tracing::info!(refusal = ?why, "connection refused by warden");
                let reply = match why {
                    WardenRefusal::Limit(Refusal::Penalty) => {
                        r(421, (4, 7, 0), format!("{host} Too many failed logins"))
                    }
                    WardenRefusal::Limit(_) => {
                        r(421, (4, 7, 0), format!("{host} Too many connections"))
                    }
                    WardenRefusal::Unavailable => r(
                        421,
                        (4, 3, 0),
                        format!("{host} Service temporarily unavailable"),
                    ),
                };
                self.send(&reply);
                return self.conn.flush().await;
            }
        }
        self.send(&Reply::plain(220, format!("{host} yarilo ESMTP ready")));
        loop {
            let line = match self.conn.next_line().await {
                Ok(l) => l,
                Err(LineError::Timeout) => {
                    self.send(&r(421, (4, 4, 2), format!("{host} Timeout")));
                    return self.conn.flush().await;
                }
                Err(e) => return Err(e),
            };
            let step = match line {
                Line::TooLong => {
                    self.send(&r(500, (5, 5, 2), "Line too long"));
                    self.bad()
                }
                Line::Complete(l) => self.command(&l).await?,
            };
            if let Step::Close = step {
                return self.conn.flush().await;
            }
        }
    }

    fn bad(&mut self) -> Step {
        self.bad += 1;
        if self.bad >= self.server.settings.max_bad_commands {
            let host = &self.server.settings.hostname;
            let reply = r(421, (4, 7, 0), format!("{host} Too many errors"));
            self.send(&reply);
            return Step::Close;
        }
        Step::Continue
    }

    /// TLS, or a loopback client (the submission service's rule).
    fn secured(&self) -> bool {
        self.conn.stream.is_tls() || self.loopback
    }

    async fn command(&mut self, line: &[u8]) -> Result<Step, LineError> {
        let cmd = match command::parse(line) {
            Ok(c) => c,
            Err(e) => {
                self.send(&e.reply());
                return Ok(self.bad());
            }
        };
        match cmd {
            Command::Ehlo(helo) => {
                let reply = self.ehlo_reply().await;
                self.send(&reply);
                self.helo = Some(helo);
            }
            Command::Helo(helo) => {
                self.send(&Reply::plain(250, self.server.settings.hostname.clone()));
                self.helo = Some(helo);
            }
            Command::StartTls => return self.starttls().await,
            Command::Auth { mechanism, initial } => return self.auth(&mechanism, initial).await,
            Command::Mail { .. } | Command::Rcpt { .. } | Command::Data | Command::Bdat { .. } => {
                self.send(&r(530, (5, 7, 0), "Authentication required"));
                return Ok(self.bad());
            }
            Command::Rset | Command::Noop => self.send(&r(250, (2, 0, 0), "OK")),
            Command::Vrfy(_) => self.send(&r(252, (2, 3, 3), "Try RCPT instead")),
            Command::Help => self.send(&r(
                214,
                (2, 0, 0),
                "Commands: EHLO STARTTLS AUTH MAIL RCPT DATA BDAT RSET NOOP VRFY QUIT",
            )),
            Command::Quit => {
                let host = &self.server.settings.hostname;
                let reply = r(221, (2, 0, 0), format!("{host} Bye"));
                self.send(&reply);
                return Ok(Step::Close);
            }
            Command::Xclient(params) => return Ok(self.xclient(&params).await),
            Command::Lhlo(_) => {
                self.send(&r(500, (5, 5, 1), "Unknown command"));
                return Ok(self.bad());
            }
        }
        Ok(Step::Continue)
    }

    /// Inbound XCLIENT (Postfix's command; the earlier director seed's
    /// `220 2.0.0 OK`): from a trusted peer, before AUTH; the session then
    /// starts over (EHLO again) with the forwarded client address.
    async fn xclient(&mut self, params: &[yarilo_smtp::command::Param]) -> Step {
        if !self.xclient {
            self.send(&r(550, (5, 7, 0), "XCLIENT not permitted"));
            return self.bad();
        }
        let ip = match crate::xclient::smtp_addr(params) {
            Ok(ip) => ip,
            Err(crate::xclient::BadAddr) => {
                self.send(&r(501, (5, 5, 4), "Invalid ADDR"));
                return self.bad();
            }
        };
        if let Some(ip) = ip.filter(|ip| *ip != self.peer.ip()) {
            tracing::info!(proxy = %self.peer.ip(), client = %ip, "client address forwarded");
            self.peer = SocketAddr::new(ip, 0);
            self.counted = None;
            match self.server.warden.connect(&self.id, ip).await {
                Ok(guard) => self.counted = Some(guard),
                Err(why) => {
                    tracing::info!(refusal = ?why, "forwarded client refused by warden");
                    let reply = r(421, (4, 7, 0), "Too many connections");
                    self.send(&reply);
                    return Step::Close;
                }
            }
        }
        self.helo = None;
        self.send(&r(220, (2, 0, 0), "OK"));
        Step::Continue
    }

    /// The backend's extension list (yarilo-smtp's submission session)
    /// plus AUTH and STARTTLS.
    async fn ehlo_reply(&self) -> Reply {
        let s = &self.server.settings;
        let mut lines = vec![s.hostname.clone(), "8BITMIME".to_string()];
        let mechs = self
            .server
            .auth
            .mechanisms(self.secured(), self.peer.ip())
            .await;
        if !mechs.is_empty() {
            lines.push(format!("AUTH {}", mechs.join(" ")));
        }
        if self.xclient {
            lines.push("XCLIENT ADDR".to_string());
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
        if self.server.starttls.is_some() && !self.conn.stream.is_tls() {
            lines.push("STARTTLS".to_string());
        }
        Reply::multi(250, lines)
    }

    // RFC 3207 §4.2
    async fn starttls(&mut self) -> Result<Step, LineError> {
        let Some(acceptor) = self.server.starttls.clone() else {
            self.send(&r(502, (5, 5, 1), "STARTTLS not available"));
            return Ok(self.bad());
        };
        if self.conn.stream.is_tls() {
            self.send(&r(503, (5, 5, 1), "TLS already active"));
            return Ok(self.bad());
        }
        self.send(&r(220, (2, 0, 0), "Ready to start TLS"));
        self.conn.flush().await?;
        // CVE-2011-0411: nothing pipelined before the handshake counts.
        self.conn.lines.clear();
        self.helo = None;
        match crate::client::upgrade_tls(
            &mut self.conn.stream,
            &acceptor,
            self.server.settings.handshake_timeout,
        )
        .await
        {
            Ok(()) => Ok(Step::Continue),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(LineError::Timeout),
            Err(e) => Err(e.into()),
        }
    }

    /// One SASL response; `None` for `*` or an over-long line.
    async fn sasl_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        match self.conn.next_line().await? {
            Line::TooLong => Ok(None),
            Line::Complete(l) if l == b"*" => Ok(None),
            Line::Complete(l) => Ok(Some(l)),
        }
    }

    // RFC 4954 §4
    async fn auth(&mut self, mechanism: &str, initial: Option<String>) -> Result<Step, LineError> {
        let Some(helo) = self.helo.clone() else {
            self.send(&r(503, (5, 5, 1), "Send EHLO first"));
            return Ok(self.bad());
        };
        let initial = match initial.as_deref() {
            None => None,
            Some("=") => Some(Vec::new()),
            Some(b) => match B64.decode(b) {
                Ok(v) => Some(v),
                Err(_) => {
                    self.send(&r(501, (5, 5, 2), "Invalid base64 data"));
                    return Ok(self.bad());
                }
            },
        };
        let request =
            crate::client::auth_request(PROTO, self.peer, self.local, &self.id, self.secured());
        let (mut ex, mut reply) = self
            .server
            .auth
            .begin(request, mechanism, initial.as_deref())
            .await;
        loop {
            match reply {
                AuthReply::Continue(challenge) => {
                    self.send(&Reply::plain(334, B64.encode(&challenge)));
                    let Some(line) = self.sasl_line().await? else {
                        let _ = ex.step(None).await;
                        self.send(&r(501, (5, 0, 0), "Authentication aborted"));
                        return Ok(self.bad());
                    };
                    let Ok(decoded) = B64.decode(&line) else {
                        let _ = ex.step(None).await;
                        self.send(&r(501, (5, 5, 2), "Invalid base64 data"));
                        return Ok(self.bad());
                    };
                    reply = ex.step(Some(&decoded)).await;
                }
                AuthReply::Success(ok) => {
                    self.server.metrics.login(PROTO, "ok");
                    self.server.warden.auth_succeeded(self.peer.ip());
                    if let Some(extra) = &ok.additional {
                        // RFC 4954 §4: additional data in a 334, answered
                        // with an empty line.
                        self.send(&Reply::plain(334, B64.encode(extra)));
                        if self.sasl_line().await?.is_none() {
                            self.send(&r(501, (5, 0, 0), "Authentication aborted"));
                            return Ok(Step::Continue);
                        }
                    }
                    return self.hand_off(ok, helo).await;
                }
                AuthReply::Failure(f) => return self.auth_failed(f).await,
            }
        }
    }

    async fn auth_failed(&mut self, f: AuthFailure) -> Result<Step, LineError> {
        self.server.metrics.login(PROTO, f.kind.as_str());
        if f.kind == FailureKind::BadCredentials {
            let delay = self.server.warden.auth_failed(self.peer.ip()).await;
            if !delay.is_zero() {
                self.conn.flush().await?;
                tokio::time::sleep(delay).await;
            }
        }
        tracing::info!(reason = f.kind.as_str(), user = ?f.user, "login failed");
        let reply = match f.kind {
            FailureKind::Temporary => r(454, (4, 7, 0), f.message),
            FailureKind::PlaintextDisabled => r(538, (5, 7, 11), f.message),
            FailureKind::UnsupportedMechanism => r(504, (5, 5, 4), f.message),
            FailureKind::Malformed => r(501, (5, 5, 2), f.message),
            FailureKind::Aborted => r(501, (5, 0, 0), f.message),
            FailureKind::BadCredentials | FailureKind::NotAllowedNet | FailureKind::Nologin => {
                r(535, (5, 7, 8), f.message)
            }
        };
        self.send(&reply);
        if f.kind == FailureKind::Temporary {
            return Ok(Step::Continue);
        }
        self.failures += 1;
        if self.failures >= self.server.settings.max_auth_failures {
            let host = &self.server.settings.hostname;
            let reply = r(421, (4, 7, 0), format!("{host} Too many failed logins"));
            self.send(&reply);
            return Ok(Step::Close);
        }
        Ok(self.bad())
    }

    async fn hand_off(&mut self, ok: AuthSuccess, helo: String) -> Result<Step, LineError> {
        let server = self.server.clone();
        let session = match server
            .warden
            .start_session(&self.id, &ok.user, self.peer.ip())
            .await
        {
            Ok(s) => s,
            Err(why) => {
                tracing::info!(user = %ok.user, refusal = ?why, "session refused by warden");
                self.send(&match why {
                    WardenRefusal::Limit(_) => r(454, (4, 7, 0), "Too many sessions for this user"),
                    WardenRefusal::Unavailable => {
                        r(454, (4, 7, 0), "Account is temporarily unavailable")
                    }
                });
                return Ok(Step::Continue);
            }
        };
        // The backend refuses a preamble whose HELO could not be an EHLO
        // argument; the parser already bounds it, this keeps the rule in
        // one place.
        let helo = if valid_helo(&helo) {
            helo
        } else {
            "unknown".into()
        };
        let hop = HopPreamble {
            preamble: Preamble {
                addr: self.peer.ip(),
                session: self.id.clone(),
                user: ok.user.clone(),
                token: ok.token.clone(),
            },
            tag: None,
            helo: Some(helo),
        };
        let unavailable = r(454, (4, 7, 0), "Account is temporarily unavailable");
        let backend = match handoff::open(
            PROTO,
            &server.router,
            server.hop_tls.as_ref(),
            &server.settings,
            &server.metrics,
            &hop,
            &ok.fields,
        )
        .await
        {
            Ok(b) => b,
            Err(_) => {
                self.send(&unavailable);
                return Ok(Step::Continue);
            }
        };
        if !backend.first.line.starts_with(b"235 ") {
            handoff::refused(PROTO, &server.metrics, &ok.user, &backend);
            let own = backend.first.line.get(..4).is_some_and(|p| {
                matches!(p.first(), Some(b'4') | Some(b'5'))
                    && p.get(1..3)
                        .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
                    && p.get(3) == Some(&b' ')
            });
            if own {
                self.conn.queue(&backend.first.line);
            } else {
                self.send(&unavailable);
            }
            return Ok(Step::Continue);
        }
        tracing::info!(user = %ok.user, "logged in");
        if let Some(counted) = self.counted.take() {
            counted.release();
        }
        self.conn.flush().await?;
        let pipelined = self.conn.lines.take_rest();
        handoff::proxy(
            PROTO,
            &server.metrics,
            &mut self.conn.stream,
            backend,
            pipelined,
            &session,
        )
        .await?;
        Ok(Step::Close)
    }
}
