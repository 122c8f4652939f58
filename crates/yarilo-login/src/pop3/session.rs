//! One `pop3-login` connection: the AUTHORIZATION state and its driver.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;
use yarilo_auth::{AuthFailure, AuthReply, AuthRequest, AuthSuccess, FailureKind};
use yarilo_listener::{ClientConn, MailStream};
use yarilo_pop3::command::{self, Command, ParseError};
use yarilo_wire::Preamble;

use super::Pop3LoginServer;
use crate::handoff::{self, session_id};
use crate::lines::{Line, Lines};
use crate::preamble::HopPreamble;
use crate::warden::{ConnectionGuard, WardenRefusal};
use yarilo_warden::Refusal;

const PROTO: &str = "pop3";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const READ_CHUNK: usize = 4096;
const PLAINTEXT_DISABLED: &str =
    "-ERR [AUTH] Plaintext authentication disallowed on non-secure (SSL/TLS) connections.";
const UNAVAILABLE: &str = "-ERR [SYS/TEMP] Account is temporarily unavailable.";

/// What a command left the connection in.
enum Step {
    Continue,
    Close,
}

pub(super) struct Session {
    server: Arc<Pop3LoginServer>,
    stream: MailStream,
    peer: SocketAddr,
    local: SocketAddr,
    id: String,
    lines: Lines,
    out: Vec<u8>,
    /// From USER, for PASS (forgotten at STLS, RFC 2595 §4).
    user: Option<String>,
    failures: u32,
    bad: u32,
    /// Warden's count of this pre-auth connection; released at the
    /// hand-off (the session is counted instead) or when it ends.
    counted: Option<ConnectionGuard>,
    /// The peer may forward the client address (XCLIENT).
    xclient: bool,
}

/// The arguments of an `XCLIENT …` line, if it is one.
fn xclient_args(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes)
        .ok()?
        .trim_end_matches(['\r', '\n']);
    let (cmd, args) = text.split_once(' ').unwrap_or((text, ""));
    cmd.eq_ignore_ascii_case("XCLIENT")
        .then(|| args.to_string())
}

impl Session {
    pub fn new(server: Arc<Pop3LoginServer>, conn: ClientConn) -> Session {
        let xclient = server.xclient.allows(&conn.service, conn.peer.ip());
        Session {
            xclient,
            lines: Lines::new(server.settings.max_line),
            stream: conn.stream,
            peer: conn.peer,
            local: conn.local,
            id: session_id(),
            out: Vec::new(),
            user: None,
            failures: 0,
            bad: 0,
            counted: None,
            server,
        }
    }

    pub async fn run(mut self) {
        let span = tracing::info_span!("pop3-login", session = %self.id, ip = %self.peer.ip());
        async move {
            if let Err(e) = self.serve().await {
                tracing::debug!(error = %e, "connection ended");
            }
        }
        .instrument(span)
        .await;
    }

    fn reply(&mut self, line: &str) {
        self.out.extend_from_slice(line.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let io = async {
            self.stream.write_all(&self.out).await?;
            self.stream.flush().await
        };
        tokio::time::timeout(self.server.settings.login_timeout, io)
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        self.out.clear();
        Ok(())
    }

    /// The next line; `None` at EOF or after the idle timeout (answered).
    async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            if let Some(l) = self.lines.next_line() {
                return Ok(Some(l));
            }
            self.flush().await?;
            let mut chunk = [0u8; READ_CHUNK];
            match tokio::time::timeout(
                self.server.settings.login_timeout,
                self.stream.read(&mut chunk),
            )
            .await
            {
                Err(_) => {
                    self.reply("-ERR Disconnected for inactivity.");
                    self.flush().await?;
                    return Ok(None);
                }
                Ok(Ok(0)) => return Ok(None),
                Ok(Ok(n)) => self.lines.feed(chunk.get(..n).unwrap_or_default()),
                Ok(Err(e)) => return Err(e),
            }
        }
    }

    async fn serve(&mut self) -> std::io::Result<()> {
        match self.server.warden.connect(&self.id, self.peer.ip()).await {
            Ok(guard) => self.counted = Some(guard),
            Err(why) => {
                tracing::info!(refusal = ?why, "connection refused by warden");
                self.reply(match why {
                    WardenRefusal::Limit(Refusal::Penalty) => {
                        "-ERR [SYS/TEMP] Too many failed logins"
                    }
                    WardenRefusal::Limit(_) => "-ERR [SYS/TEMP] Too many connections",
                    WardenRefusal::Unavailable => "-ERR [SYS/TEMP] Server temporarily unavailable",
                });
                return self.flush().await;
            }
        }
        let greeting = format!("+OK {}", self.server.settings.greeting);
        self.reply(&greeting);
        while let Some(line) = self.next_line().await? {
            let step = match line {
                Line::TooLong => {
                    self.reply("-ERR Line too long.");
                    self.bad_command()
                }
                Line::Complete(bytes) => self.command(&bytes).await?,
            };
            if let Step::Close = step {
                return self.flush().await;
            }
        }
        Ok(())
    }

    fn bad_command(&mut self) -> Step {
        self.bad += 1;
        if self.bad >= self.server.settings.max_bad_commands {
            self.reply("-ERR Too many bad commands.");
            return Step::Close;
        }
        Step::Continue
    }

    fn secured(&self) -> bool {
        self.stream.is_tls()
    }

    async fn mechanisms(&self) -> Vec<String> {
        self.server
            .auth
            .mechanisms(self.secured(), self.peer.ip())
            .await
    }

    /// `XCLIENT ADDR=<ip>` (earlier director seed: `+OK XCLIENT
    /// accepted`), before login, from a trusted peer only.
    async fn xclient_command(&mut self, args: &str) -> Step {
        if !self.xclient {
            self.reply("-ERR XCLIENT not permitted.");
            return self.bad_command();
        }
        match crate::xclient::args_addr(args) {
            Ok(Some(ip)) if ip != self.peer.ip() => {
                tracing::info!(proxy = %self.peer.ip(), client = %ip, "client address forwarded");
                self.peer = SocketAddr::new(ip, 0);
                self.counted = None;
                match self.server.warden.connect(&self.id, ip).await {
                    Ok(guard) => self.counted = Some(guard),
                    Err(why) => {
                        tracing::info!(refusal = ?why, "forwarded client refused by warden");
                        self.reply("-ERR [SYS/TEMP] Too many connections");
                        return Step::Close;
                    }
                }
                self.reply("+OK XCLIENT accepted");
            }
            Ok(_) => self.reply("+OK XCLIENT accepted"),
            Err(crate::xclient::BadAddr) => {
                self.reply("-ERR Invalid XCLIENT ADDR.");
                return self.bad_command();
            }
        }
        Step::Continue
    }

    async fn command(&mut self, bytes: &[u8]) -> std::io::Result<Step> {
        if let Some(args) = xclient_args(bytes) {
            return Ok(self.xclient_command(&args).await);
        }
        let cmd = match command::parse(bytes) {
            Ok((_, cmd)) => cmd,
            Err((_, e)) => {
                let msg = match e {
                    ParseError::Unknown => "-ERR Unknown command.".to_string(),
                    ParseError::Syntax(m) => format!("-ERR {m}"),
                };
                self.reply(&msg);
                return Ok(self.bad_command());
            }
        };
        match cmd {
            Command::Capa => self.capa().await,
            Command::Quit => {
                self.reply("+OK Logging out.");
                return Ok(Step::Close);
            }
            Command::Stls => return self.stls().await,
            Command::User(name) => {
                if self.plaintext_allowed().await {
                    self.user = Some(name);
                    self.reply("+OK");
                } else {
                    self.server.metrics.login(PROTO, "plaintext_disabled");
                    self.reply(PLAINTEXT_DISABLED);
                }
            }
            Command::Pass(password) => {
                let Some(user) = self.user.take() else {
                    self.reply("-ERR No username given.");
                    return Ok(self.bad_command());
                };
                let mut ir = Vec::with_capacity(user.len() + password.len() + 2);
                ir.push(0);
                ir.extend_from_slice(user.as_bytes());
                ir.push(0);
                ir.extend_from_slice(password.as_bytes());
                let (_, reply) = self
                    .server
                    .auth
                    .begin(self.request(), "PLAIN", Some(&ir))
                    .await;
                return self.finish_auth(reply).await;
            }
            Command::Auth { mechanism, initial } => return self.auth(mechanism, initial).await,
            Command::Apop { .. } => {
                self.reply("-ERR APOP is not enabled.");
                return Ok(self.bad_command());
            }
            _ => {
                // RFC 1939 §5: TRANSACTION commands need a login.
                self.reply("-ERR Command not allowed in this state.");
                return Ok(self.bad_command());
            }
        }
        Ok(Step::Continue)
    }

    /// USER/PASS is PLAIN underneath: allowed where the auth service
    /// offers PLAIN on this connection.
    async fn plaintext_allowed(&self) -> bool {
        self.mechanisms()
            .await
            .iter()
            .any(|m| m.eq_ignore_ascii_case("PLAIN"))
    }

    /// RFC 2449 §5: the pre-login list. The backend's own CAPA answers
    /// after login (the pipe reaches it).
    async fn capa(&mut self) {
        let mut lines: Vec<String> = [
            "+OK",
            "CAPA",
            "TOP",
            "UIDL",
            "RESP-CODES",
            "PIPELINING",
            "AUTH-RESP-CODE",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mechs = self.mechanisms().await;
        if mechs.iter().any(|m| m.eq_ignore_ascii_case("PLAIN")) {
            lines.push("USER".into());
        }
        if !mechs.is_empty() {
            lines.push(format!("SASL {}", mechs.join(" ")));
        }
        if self.server.starttls.is_some() && !self.secured() {
            lines.push("STLS".into());
        }
        if !self.server.settings.implementation.is_empty() {
            lines.push(format!(
                "IMPLEMENTATION {}",
                self.server.settings.implementation
            ));
        }
        lines.push(".".into());
        for l in lines {
            self.reply(&l);
        }
    }

    // RFC 2595 §4
    async fn stls(&mut self) -> std::io::Result<Step> {
        let acceptor = match (&self.server.starttls, self.secured()) {
            (_, true) => {
                self.reply("-ERR TLS is already active.");
                return Ok(Step::Continue);
            }
            (None, false) => {
                self.reply("-ERR STLS is not available.");
                return Ok(Step::Continue);
            }
            (Some(a), false) => a.clone(),
        };
        self.reply("+OK Begin TLS negotiation now.");
        self.flush().await?;
        // RFC 2595 §3.1: nothing sent before the handshake counts after.
        self.lines.clear();
        self.user = None;
        crate::client::upgrade_tls(
            &mut self.stream,
            &acceptor,
            self.server.settings.handshake_timeout,
        )
        .await?;
        Ok(Step::Continue)
    }

    fn request(&self) -> AuthRequest {
        crate::client::auth_request(PROTO, self.peer, self.local, &self.id, self.secured())
    }

    /// One SASL response line; `None` when the client cancelled (`*`) or
    /// the line was too long, `Err` at EOF.
    async fn sasl_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        match self.next_line().await? {
            None => Err(std::io::ErrorKind::UnexpectedEof.into()),
            Some(Line::TooLong) => Ok(None),
            Some(Line::Complete(l)) if l == b"*" => Ok(None),
            Some(Line::Complete(l)) => Ok(Some(l)),
        }
    }

    // RFC 5034 §4
    async fn auth(
        &mut self,
        mechanism: Option<String>,
        initial: Option<String>,
    ) -> std::io::Result<Step> {
        let Some(mechanism) = mechanism else {
            let mechs = self.mechanisms().await;
            self.reply("+OK");
            for m in mechs {
                self.reply(&m);
            }
            self.reply(".");
            return Ok(Step::Continue);
        };
        let initial = match initial.as_deref() {
            None => None,
            Some("=") => Some(Vec::new()),
            Some(b) => match B64.decode(b) {
                Ok(v) => Some(v),
                Err(_) => {
                    self.reply("-ERR Invalid base64 data in initial response.");
                    return Ok(self.bad_command());
                }
            },
        };
        let (mut ex, mut reply) = self
            .server
            .auth
            .begin(self.request(), &mechanism, initial.as_deref())
            .await;
        loop {
            let challenge = match reply {
                AuthReply::Continue(c) => c,
                other => return self.finish_auth(other).await,
            };
            self.reply(&format!("+ {}", B64.encode(challenge)));
            self.flush().await?;
            let Some(line) = self.sasl_line().await? else {
                let _ = ex.step(None).await;
                self.reply("-ERR Authentication aborted.");
                return Ok(Step::Continue);
            };
            let Ok(decoded) = B64.decode(&line) else {
                let _ = ex.step(None).await;
                self.reply("-ERR Invalid base64 data in continued response.");
                return Ok(self.bad_command());
            };
            reply = ex.step(Some(&decoded)).await;
        }
    }

    async fn finish_auth(&mut self, reply: AuthReply) -> std::io::Result<Step> {
        match reply {
            AuthReply::Success(ok) => {
                self.server.metrics.login(PROTO, "ok");
                self.server.warden.auth_succeeded(self.peer.ip());
                // RFC 5034 §4: additional data with success goes in a
                // last challenge the client answers with an empty line.
                if let Some(data) = &ok.additional {
                    self.reply(&format!("+ {}", B64.encode(data)));
                    self.flush().await?;
                    match self.sasl_line().await? {
                        Some(l) if l.is_empty() => {}
                        _ => {
                            self.reply("-ERR Authentication aborted.");
                            return Ok(Step::Continue);
                        }
                    }
                }
                self.hand_off(ok).await
            }
            AuthReply::Failure(f) => self.auth_failed(f).await,
            AuthReply::Continue(_) => {
                self.auth_failed(AuthFailure {
                    kind: FailureKind::Malformed,
                    message: "Authentication failed.".into(),
                    user: None,
                })
                .await
            }
        }
    }

    /// Same replies as the POP3 service's own (RFC 3206 codes), after
    /// warden's penalty delay for a wrong password.
    async fn auth_failed(&mut self, f: AuthFailure) -> std::io::Result<Step> {
        self.server.metrics.login(PROTO, f.kind.as_str());
        if f.kind == FailureKind::BadCredentials {
            let delay = self.server.warden.auth_failed(self.peer.ip()).await;
            if !delay.is_zero() {
                self.flush().await?;
                tokio::time::sleep(delay).await;
            }
        }
        tracing::info!(reason = f.kind.as_str(), user = ?f.user, "login failed");
        let (line, counts) = match f.kind {
            FailureKind::Temporary => (format!("-ERR [SYS/TEMP] {}", f.message), false),
            FailureKind::PlaintextDisabled => (PLAINTEXT_DISABLED.to_string(), true),
            FailureKind::Aborted => (format!("-ERR {}", f.message), false),
            FailureKind::UnsupportedMechanism | FailureKind::Malformed => {
                (format!("-ERR {}", f.message), true)
            }
            FailureKind::BadCredentials | FailureKind::NotAllowedNet | FailureKind::Nologin => {
                (format!("-ERR [AUTH] {}", f.message), true)
            }
        };
        self.reply(&line);
        if counts {
            self.failures += 1;
            if self.failures >= self.server.settings.max_auth_failures {
                self.reply("-ERR Too many invalid authentication attempts.");
                return Ok(Step::Close);
            }
        }
        Ok(Step::Continue)
    }

    /// Dials the backend; when its first line is `+OK`, relays it and
    /// pipes until the end. Otherwise the client stays in AUTHORIZATION.
    async fn hand_off(&mut self, ok: AuthSuccess) -> std::io::Result<Step> {
        let server = self.server.clone();
        let session = match server
            .warden
            .start_session(&self.id, &ok.user, self.peer.ip())
            .await
        {
            Ok(s) => s,
            Err(why) => {
                tracing::info!(user = %ok.user, refusal = ?why, "session refused by warden");
                self.reply(match why {
                    WardenRefusal::Limit(_) => "-ERR [IN-USE] Too many sessions for this user.",
                    WardenRefusal::Unavailable => UNAVAILABLE,
                });
                return Ok(Step::Continue);
            }
        };
        let hop = HopPreamble {
            preamble: Preamble {
                addr: self.peer.ip(),
                session: self.id.clone(),
                user: ok.user.clone(),
                token: ok.token.clone(),
            },
            tag: None,
            helo: None,
        };
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
                self.reply(UNAVAILABLE);
                return Ok(Step::Continue);
            }
        };
        if !backend.first.line.starts_with(b"+OK") {
            handoff::refused(PROTO, &server.metrics, &ok.user, &backend);
            if backend.first.line.starts_with(b"-ERR ") {
                // The backend's own answer (mailbox locked, store down).
                self.out.extend_from_slice(&backend.first.line);
            } else {
                self.reply(UNAVAILABLE);
            }
            return Ok(Step::Continue);
        }
        tracing::info!(user = %ok.user, "logged in");
        if let Some(counted) = self.counted.take() {
            counted.release();
        }
        self.flush().await?;
        let pipelined = self.lines.take_rest();
        handoff::proxy(
            PROTO,
            &server.metrics,
            &mut self.stream,
            backend,
            pipelined,
            &session,
        )
        .await?;
        Ok(Step::Close)
    }
}
