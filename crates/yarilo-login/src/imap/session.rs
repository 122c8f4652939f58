//! One `imap-login` connection: the not-authenticated state machine and
//! its driver.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;
use yarilo_auth::{AuthFailure, AuthReply, AuthRequest, AuthSuccess, FailureKind};
use yarilo_imap_proto::command::Command;
use yarilo_imap_proto::response::{Code, Data, EncodeOptions, Response, StatusKind};
use yarilo_imap_proto::{parse_command, ParseOptions};
use yarilo_listener::{ClientConn, MailStream};
use yarilo_wire::Preamble;

use super::framer::{Frame, Framer};
use super::ImapLoginServer;
use crate::handoff;
use crate::preamble::HopPreamble;
use crate::warden::{ConnectionGuard, WardenRefusal};
use yarilo_warden::Refusal;

const PROTO: &str = "imap";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// Read chunk before login.
const READ_CHUNK: usize = 4096;
/// BAD commands in a row before the connection is closed.
const MAX_BAD: u32 = 10;

/// What a command left the connection in.
enum Step {
    Continue,
    Close,
}

/// Why reading stopped.
enum ReadEnd {
    Eof,
    Timeout,
}

pub(super) struct Session {
    server: Arc<ImapLoginServer>,
    stream: MailStream,
    peer: SocketAddr,
    local: SocketAddr,
    id: String,
    framer: Framer,
    out: Vec<u8>,
    failures: u32,
    bad_in_row: u32,
    /// Warden's count of this pre-auth connection; released at the
    /// hand-off (the session is counted instead) or when it ends.
    counted: Option<ConnectionGuard>,
    /// The peer may forward the client address (XCLIENT, ID).
    xclient: bool,
}

fn session_id() -> String {
    use rand::Rng;
    let n: u64 = rand::thread_rng().gen();
    format!("{n:016x}")
}

impl Session {
    pub fn new(server: Arc<ImapLoginServer>, conn: ClientConn) -> Session {
        let framer = Framer::new(server.settings.max_line, server.settings.max_literal);
        let xclient = server.xclient.allows(&conn.service, conn.peer.ip());
        Session {
            xclient,
            stream: conn.stream,
            peer: conn.peer,
            local: conn.local,
            id: session_id(),
            framer,
            out: Vec::new(),
            failures: 0,
            bad_in_row: 0,
            counted: None,
            server,
        }
    }

    pub async fn run(mut self) {
        let span = tracing::info_span!("imap-login", session = %self.id, ip = %self.peer.ip());
        async move {
            if let Err(e) = self.serve().await {
                tracing::debug!(error = %e, "connection ended");
            }
        }
        .instrument(span)
        .await;
    }

    fn send(&mut self, r: &Response) {
        r.encode(&mut self.out, EncodeOptions::default());
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&self.out).await?;
        self.stream.flush().await?;
        self.out.clear();
        Ok(())
    }

    fn bye(&mut self, text: &str) {
        self.send(&Response::Status {
            tag: None,
            kind: StatusKind::Bye,
            code: None,
            text: text.into(),
        });
    }

    /// Reads more input into the framer within the login timeout.
    async fn fill(&mut self) -> std::io::Result<Result<(), ReadEnd>> {
        let mut chunk = [0u8; READ_CHUNK];
        match tokio::time::timeout(
            self.server.settings.login_timeout,
            self.stream.read(&mut chunk),
        )
        .await
        {
            Err(_) => Ok(Err(ReadEnd::Timeout)),
            Ok(Ok(0)) => Ok(Err(ReadEnd::Eof)),
            Ok(Ok(n)) => {
                self.framer.feed(chunk.get(..n).unwrap_or_default());
                Ok(Ok(()))
            }
            Ok(Err(e)) => Err(e),
        }
    }

    async fn serve(&mut self) -> std::io::Result<()> {
        match self.server.warden.connect(&self.id, self.peer.ip()).await {
            Ok(guard) => self.counted = Some(guard),
            Err(why) => {
                tracing::info!(refusal = ?why, "connection refused by warden");
                let text = match why {
                    WardenRefusal::Limit(Refusal::Penalty) => "Too many failed logins",
                    WardenRefusal::Limit(_) => "Too many connections",
                    WardenRefusal::Unavailable => "Server temporarily unavailable",
                };
                self.send(&Response::Status {
                    tag: None,
                    kind: StatusKind::Bye,
                    code: Some(Code::Unavailable),
                    text: text.into(),
                });
                return self.flush().await;
            }
        }
        let caps = self.capabilities().await;
        self.send(&Response::Status {
            tag: None,
            kind: StatusKind::Ok,
            code: Some(Code::Capability(caps)),
            text: format!("{} ready.", self.server.settings.hostname),
        });
        loop {
            match self.framer.next() {
                Frame::Incomplete => {
                    self.flush().await?;
                    match self.fill().await? {
                        Ok(()) => {}
                        Err(ReadEnd::Eof) => return Ok(()),
                        Err(ReadEnd::Timeout) => {
                            self.bye("Disconnected for inactivity.");
                            return self.flush().await;
                        }
                    }
                }
                Frame::Continue => {
                    self.send(&Response::Continue(String::new()));
                    self.flush().await?;
                }
                Frame::LiteralRefused { tag } => {
                    if self.bad(tag, "Literal too large.") {
                        return self.flush().await;
                    }
                }
                Frame::Fatal(why) => {
                    self.bye(&format!("Error in IMAP command: {why}."));
                    return self.flush().await;
                }
                Frame::Command(bytes) => {
                    if let Some((tag, args)) = crate::xclient::imap_xclient(&bytes) {
                        self.bad_in_row = 0;
                        if let Step::Close = self.xclient_command(tag, &args).await {
                            return self.flush().await;
                        }
                        continue;
                    }
                    let step = match parse_command(&bytes, ParseOptions::default()) {
                        Err((tag, e)) => {
                            if self.bad(tag, &format!("Error in IMAP command: {e}")) {
                                Step::Close
                            } else {
                                Step::Continue
                            }
                        }
                        Ok((tag, cmd)) => {
                            self.bad_in_row = 0;
                            self.command(tag, cmd).await?
                        }
                    };
                    if let Step::Close = step {
                        return self.flush().await;
                    }
                }
            }
        }
    }

    /// `<tag> XCLIENT ADDR=<ip>` from a trusted peer: the client address
    /// from now on.
    async fn xclient_command(&mut self, tag: String, args: &str) -> Step {
        if !self.xclient {
            self.send(&Response::no(tag, None, "XCLIENT not permitted."));
            return Step::Continue;
        }
        match crate::xclient::args_addr(args) {
            Ok(Some(ip)) => {
                if !self.forwarded_client(ip).await {
                    return Step::Close;
                }
                self.send(&Response::ok(tag, None, "XCLIENT"));
            }
            Ok(None) => self.send(&Response::ok(tag, None, "XCLIENT")),
            Err(crate::xclient::BadAddr) => {
                self.send(&Response::bad(Some(tag), None, "Invalid XCLIENT ADDR."))
            }
        }
        Step::Continue
    }

    /// A trusted peer forwarded the client's address: it replaces the TCP
    /// peer, and warden counts the connection under it (its per-IP limit
    /// and penalty apply to the real client). False when warden refuses
    /// it: a BYE is queued and the connection must close.
    async fn forwarded_client(&mut self, ip: IpAddr) -> bool {
        if ip == self.peer.ip() {
            return true;
        }
        tracing::info!(proxy = %self.peer.ip(), client = %ip, "client address forwarded");
        self.peer = SocketAddr::new(ip, 0);
        self.counted = None;
        match self.server.warden.connect(&self.id, ip).await {
            Ok(guard) => {
                self.counted = Some(guard);
                true
            }
            Err(why) => {
                tracing::info!(refusal = ?why, "forwarded client refused by warden");
                self.send(&Response::Status {
                    tag: None,
                    kind: StatusKind::Bye,
                    code: Some(Code::Unavailable),
                    text: "Too many connections".into(),
                });
                false
            }
        }
    }

    /// Queues a BAD; true when the connection must now close.
    fn bad(&mut self, tag: Option<String>, text: &str) -> bool {
        self.send(&Response::bad(tag, None, text));
        self.bad_in_row += 1;
        if self.bad_in_row >= MAX_BAD {
            self.bye("Too many invalid IMAP commands.");
            return true;
        }
        false
    }

    fn secured(&self) -> bool {
        self.stream.is_tls()
    }

    /// Pre-login capabilities (RFC 9051 §7.2.2): no ENABLE-able list, the
    /// SASL mechanisms the auth service allows on this connection.
    async fn capabilities(&self) -> Vec<String> {
        let mechs = self
            .server
            .auth
            .mechanisms(self.secured(), self.peer.ip())
            .await;
        let mut v: Vec<String> = [
            "IMAP4rev1",
            "IMAP4rev2",
            "SASL-IR",
            "LOGIN-REFERRALS",
            "ID",
            "ENABLE",
            "IDLE",
            "LITERAL+",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !self.secured() && self.server.starttls.is_some() {
            v.push("STARTTLS".into());
        }
        if !mechs.iter().any(|m| m == "PLAIN") {
            v.push("LOGINDISABLED".into());
        }
        v.extend(mechs.iter().map(|m| format!("AUTH={m}")));
        v
    }

    async fn command(&mut self, tag: String, cmd: Command) -> std::io::Result<Step> {
        match cmd {
            Command::Capability => {
                let caps = self.capabilities().await;
                self.send(&Response::Data(Data::Capability(caps)));
                self.send(&Response::ok(
                    tag,
                    None,
                    "Pre-login capabilities listed, post-login capabilities have more.",
                ));
            }
            Command::Noop => self.send(&Response::ok(tag, None, "NOOP completed.")),
            Command::Logout => {
                self.bye("Logging out");
                self.send(&Response::ok(tag, None, "Logout completed."));
                return Ok(Step::Close);
            }
            // RFC 2971: answer with our own identification. From a trusted
            // proxy, Dovecot's `x-originating-ip` field is the client.
            Command::Id(fields) => {
                let forwarded = fields
                    .as_deref()
                    .filter(|_| self.xclient)
                    .and_then(crate::xclient::id_originating_ip);
                if let Some(ip) = forwarded {
                    if !self.forwarded_client(ip).await {
                        return Ok(Step::Close);
                    }
                }
                self.send(&Response::Data(Data::Id(Some(vec![(
                    "name".into(),
                    Some("yarilo".into()),
                )]))));
                self.send(&Response::ok(tag, None, "ID completed."));
            }
            Command::StartTls => return self.starttls(tag).await,
            Command::Login { username, password } => {
                let mut ir = Vec::with_capacity(username.len() + password.len() + 2);
                ir.push(0);
                ir.extend_from_slice(&username);
                ir.push(0);
                ir.extend_from_slice(&password);
                let (_, reply) = self
                    .server
                    .auth
                    .begin(self.request(), "PLAIN", Some(&ir))
                    .await;
                return self.finish_auth(tag, reply).await;
            }
            Command::Authenticate { mechanism, initial } => {
                return self.authenticate(tag, &mechanism, initial).await
            }
            _ => {
                if self.bad(Some(tag), "Please log in first.") {
                    return Ok(Step::Close);
                }
            }
        }
        Ok(Step::Continue)
    }

    // RFC 9051 §6.2.1
    async fn starttls(&mut self, tag: String) -> std::io::Result<Step> {
        let acceptor = match (&self.server.starttls, self.secured()) {
            (Some(a), false) => a.clone(),
            (_, true) => {
                self.bad(Some(tag), "TLS is already active.");
                return Ok(Step::Continue);
            }
            (None, false) => {
                self.bad(Some(tag), "STARTTLS is not offered here.");
                return Ok(Step::Continue);
            }
        };
        self.framer.clear();
        self.send(&Response::ok(tag, None, "Begin TLS negotiation now."));
        self.flush().await?;
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

    /// Reads one SASL response line; `None` when the client cancelled
    /// (`*`), `Err` when the connection ended or the line was too long.
    async fn sasl_response(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            match self.framer.next_line() {
                Some(Ok(line)) if line == b"*" => return Ok(None),
                Some(Ok(line)) => return Ok(Some(line)),
                Some(Err(())) => {
                    self.bye("SASL response too long.");
                    self.flush().await?;
                    return Err(std::io::ErrorKind::InvalidData.into());
                }
                None => match self.fill().await? {
                    Ok(()) => {}
                    Err(_) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                },
            }
        }
    }

    // RFC 9051 §6.2.2, RFC 4959
    async fn authenticate(
        &mut self,
        tag: String,
        mechanism: &str,
        initial: Option<Vec<u8>>,
    ) -> std::io::Result<Step> {
        let initial = match initial {
            None => None,
            Some(b) if b.is_empty() => Some(Vec::new()),
            Some(b) => match B64.decode(&b) {
                Ok(d) => Some(d),
                Err(_) => {
                    self.bad(Some(tag), "Invalid base64 in the initial response.");
                    return Ok(Step::Continue);
                }
            },
        };
        let (mut ex, mut reply) = self
            .server
            .auth
            .begin(self.request(), mechanism, initial.as_deref())
            .await;
        loop {
            let challenge = match reply {
                AuthReply::Continue(c) => c,
                other => return self.finish_auth(tag, other).await,
            };
            self.send(&Response::Challenge(B64.encode(&challenge)));
            self.flush().await?;
            let Some(line) = self.sasl_response().await? else {
                let _ = ex.step(None).await;
                self.bad(Some(tag), "Authentication aborted by client.");
                return Ok(Step::Continue);
            };
            let Ok(decoded) = B64.decode(&line) else {
                let _ = ex.step(None).await;
                self.bad(Some(tag), "Invalid base64 in the SASL response.");
                return Ok(Step::Continue);
            };
            reply = ex.step(Some(&decoded)).await;
        }
    }

    async fn finish_auth(&mut self, tag: String, reply: AuthReply) -> std::io::Result<Step> {
        match reply {
            AuthReply::Success(ok) => {
                self.server.metrics.login(PROTO, "ok");
                self.server.warden.auth_succeeded(self.peer.ip());
                // SASL data with success (SCRAM server-final) goes in a
                // continuation the client answers with an empty line
                // (RFC 9051 §6.2.2).
                if let Some(data) = &ok.additional {
                    self.send(&Response::Challenge(B64.encode(data)));
                    self.flush().await?;
                    if self.sasl_response().await?.is_none() {
                        self.bad(Some(tag), "Authentication aborted by client.");
                        return Ok(Step::Continue);
                    }
                }
                self.hand_off(tag, ok).await
            }
            AuthReply::Failure(f) => self.auth_failed(tag, f).await,
            AuthReply::Continue(_) => {
                self.send(&Response::no(tag, None, "Authentication failed."));
                Ok(Step::Continue)
            }
        }
    }

    async fn auth_failed(&mut self, tag: String, f: AuthFailure) -> std::io::Result<Step> {
        self.server.metrics.login(PROTO, f.kind.as_str());
        tracing::info!(reason = f.kind.as_str(), user = ?f.user, "login failed");
        let (code, text) = match f.kind {
            FailureKind::Temporary => (Code::Unavailable, f.message),
            FailureKind::PlaintextDisabled => (
                Code::PrivacyRequired,
                "Plaintext authentication disallowed on non-secure connections.".into(),
            ),
            FailureKind::UnsupportedMechanism => {
                self.send(&Response::no(
                    tag,
                    None,
                    "Unsupported authentication mechanism.",
                ));
                return Ok(Step::Continue);
            }
            FailureKind::Aborted => {
                self.bad(Some(tag), "Authentication aborted.");
                return Ok(Step::Continue);
            }
            FailureKind::Nologin if !f.message.is_empty() => (Code::Unavailable, f.message),
            _ => (Code::AuthenticationFailed, "Authentication failed.".into()),
        };
        self.failures += 1;
        let mut delay = Duration::ZERO;
        if f.kind != FailureKind::Temporary {
            // Slow guessing on this connection; the auth service and
            // warden also penalise the address across connections.
            delay = self.server.settings.auth_failure_delay;
        }
        if f.kind == FailureKind::BadCredentials {
            delay = delay.max(self.server.warden.auth_failed(self.peer.ip()).await);
        }
        if !delay.is_zero() {
            self.flush().await?;
            tokio::time::sleep(delay).await;
        }
        self.send(&Response::no(tag, Some(code), text));
        if self.failures >= self.server.settings.max_auth_failures {
            self.bye("Too many invalid login attempts.");
            return Ok(Step::Close);
        }
        Ok(Step::Continue)
    }

    /// Asks warden for a session slot, routes, dials, sends the preamble
    /// and — when the backend's first line is the tagged OK — relays it
    /// and pipes until the end.
    async fn hand_off(&mut self, tag: String, ok: AuthSuccess) -> std::io::Result<Step> {
        let server = self.server.clone();
        let session = match server
            .warden
            .start_session(&self.id, &ok.user, self.peer.ip())
            .await
        {
            Ok(s) => s,
            Err(why) => {
                tracing::info!(user = %ok.user, refusal = ?why, "session refused by warden");
                let (code, text) = match why {
                    WardenRefusal::Limit(_) => (Code::Limit, "Too many sessions for this user."),
                    WardenRefusal::Unavailable => {
                        (Code::Unavailable, "Account is temporarily unavailable.")
                    }
                };
                self.send(&Response::no(tag, Some(code), text));
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
            tag: Some(tag.clone()),
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
                self.send(&Response::no(
                    tag,
                    Some(Code::Unavailable),
                    "Account is temporarily unavailable.",
                ));
                return Ok(Step::Continue);
            }
        };
        let expected = format!("{tag} OK");
        let line = &backend.first.line;
        let answered_ok = line.starts_with(expected.as_bytes())
            && matches!(line.get(expected.len()), Some(b' ') | Some(b'\r'));
        if !answered_ok {
            handoff::refused(PROTO, &server.metrics, &ok.user, &backend);
            if line.starts_with(format!("{tag} ").as_bytes()) {
                // The backend's own answer to the login (NO [UNAVAILABLE]…).
                self.out.extend_from_slice(line);
            } else {
                self.send(&Response::no(
                    tag,
                    Some(Code::Unavailable),
                    "Account is temporarily unavailable.",
                ));
            }
            return Ok(Step::Continue);
        }
        tracing::info!(user = %ok.user, "logged in");
        // From here on warden counts the session, not a pre-auth
        // connection.
        if let Some(counted) = self.counted.take() {
            counted.release();
        }
        self.flush().await?;
        let pipelined = self.framer.take_rest();
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
