//! The POP3 state machine (RFC 1939 §3): `AUTHORIZATION` → `TRANSACTION`
//! → `UPDATE` (the last one is [`Maildrop::commit`] inside QUIT).
//!
//! The session is fed complete lines ([`Session::handle_line`]) and writes
//! replies into an outbox the driver sends; it never touches a socket. It
//! returns an [`Action`] telling the driver what to do next (go on, start
//! TLS, close). What each state allows is the pure function [`allowed`].
//!
//! Replies carry RFC 2449 / RFC 3206 response codes: `[AUTH]` for a
//! credentials problem, `[SYS/TEMP]` for a server fault worth retrying,
//! `[IN-USE]` when the mailbox lock is held elsewhere.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use yarilo_auth::{
    AuthFailure, AuthReply, AuthRequest, AuthSuccess, ExtraFields, FailureKind, HandleExchange,
};
use yarilo_store::{StoreError, UserInfo};

use crate::codec::{write_multiline, Line};
use crate::command::{self, Command, CommandName, ParseError};
use crate::maildrop::{Maildrop, MessageError, ReadError};
use crate::metrics::CommandResult;
use crate::server::Pop3Server;

/// What the driver does after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send the outbox and read the next line.
    Continue,
    /// Send the outbox, drop any buffered input, run the TLS handshake,
    /// then call [`Session::tls_started`].
    StartTls,
    /// Send the outbox and close the connection.
    Close,
}

/// The RFC 1939 states a client can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    Authorization,
    Transaction,
}

/// Whether `cmd` may be used in `state` (RFC 1939 §4–6, RFC 2449 §5:
/// CAPA in both; RFC 2595 §4: STLS before login only).
pub fn allowed(state: StateKind, cmd: CommandName) -> bool {
    use CommandName as C;
    match state {
        StateKind::Authorization => matches!(
            cmd,
            C::User | C::Pass | C::Apop | C::Auth | C::Capa | C::Stls | C::Quit
        ),
        StateKind::Transaction => matches!(
            cmd,
            C::Capa
                | C::Stat
                | C::List
                | C::Retr
                | C::Top
                | C::Dele
                | C::Rset
                | C::Uidl
                | C::Noop
                | C::Quit
        ),
    }
}

/// The connection a session runs on.
#[derive(Debug, Clone)]
pub struct Connection {
    /// Session id for logs and the auth token.
    pub id: String,
    /// The real client (after a PROXY header).
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// TLS is on (implicit, or after STLS).
    pub tls: bool,
}

/// A SASL exchange between `AUTH` and its outcome.
enum Sasl {
    Exchange(HandleExchange),
    /// Success with additional data sent as a last challenge (RFC 5034
    /// §4: POP3 has no room for it in `+OK`); waiting for the empty line.
    Final(AuthSuccess),
}

enum State {
    Authorization {
        /// From USER, for PASS.
        user: Option<String>,
        sasl: Option<Sasl>,
    },
    Transaction {
        user: String,
        maildrop: Box<Maildrop>,
    },
    /// After QUIT or a fatal error: every further line is ignored.
    Done,
}

/// Per-session counters for the logout line (Dovecot's
/// `pop3_logout_format`: top, retr, del, size).
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    top: u64,
    top_bytes: u64,
    retr: u64,
    retr_bytes: u64,
    deleted: u64,
}

/// One client's session.
pub struct Session {
    server: Arc<Pop3Server>,
    conn: Connection,
    state: State,
    bad_commands: u32,
    auth_failures: u32,
    out: Vec<u8>,
    stats: Stats,
    /// Why the session ended, once it has.
    close_reason: Option<&'static str>,
}

const INTERNAL: &str =
    "-ERR [SYS/TEMP] Internal error occurred. Refer to server log for more information.";
const PLAINTEXT_DISABLED: &str =
    "-ERR [AUTH] Plaintext authentication disallowed on non-secure (SSL/TLS) connections.";

impl Session {
    pub fn new(server: Arc<Pop3Server>, conn: Connection) -> Session {
        Session {
            server,
            conn,
            state: State::Authorization {
                user: None,
                sasl: None,
            },
            bad_commands: 0,
            auth_failures: 0,
            out: Vec::new(),
            stats: Stats::default(),
            close_reason: None,
        }
    }

    /// The outbox, emptied.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Bytes waiting in the outbox.
    pub fn output_len(&self) -> usize {
        self.out.len()
    }

    pub fn state(&self) -> Option<StateKind> {
        match self.state {
            State::Authorization { .. } => Some(StateKind::Authorization),
            State::Transaction { .. } => Some(StateKind::Transaction),
            State::Done => None,
        }
    }

    /// Why the session ended (`quit`, `bad_commands`, `auth_failures`,
    /// `mailbox_error`, `shutdown`, `timeout`), once it has.
    pub fn close_reason(&self) -> Option<&'static str> {
        self.close_reason
    }

    /// The logged-in user.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            State::Transaction { user, .. } => Some(user),
            _ => None,
        }
    }

    fn reply(&mut self, line: &str) {
        self.out.extend_from_slice(line.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    /// The greeting (RFC 1939 §4).
    pub fn greeting(&mut self) {
        let g = format!("+OK {}", self.server.settings.login_greeting);
        self.reply(&g);
    }

    /// A login proxy authenticated the client (`yarilo pop3` behind
    /// `pop3-login`): open the maildrop and answer the pending PASS/AUTH
    /// with `+OK Logged in.` (TRANSACTION state), or `-ERR` and close.
    pub async fn start_proxied(&mut self, user: String, fields: ExtraFields) -> Action {
        let success = AuthSuccess {
            user,
            token: String::new(),
            fields,
            additional: None,
        };
        self.login(success).await.1
    }

    /// The process is stopping: answer and close (between commands only).
    pub fn shutting_down(&mut self) {
        self.reply("-ERR [SYS/TEMP] server shutting down");
        self.state = State::Done;
        self.close_reason = Some("shutdown");
    }

    /// The client was silent too long.
    pub fn timed_out(&mut self) {
        self.reply("-ERR Disconnected for inactivity.");
        self.state = State::Done;
        self.close_reason = Some("timeout");
    }

    /// The handshake after STLS succeeded. RFC 2595 §4: forget what the
    /// client said before (a USER name).
    pub fn tls_started(&mut self) {
        self.conn.tls = true;
        self.state = State::Authorization {
            user: None,
            sasl: None,
        };
    }

    /// Logs the end of the session, Dovecot-style.
    pub fn log_logout(&self, reason: &str) {
        let s = self.stats;
        tracing::info!(
            reason,
            top = s.top,
            top_bytes = s.top_bytes,
            retr = s.retr,
            retr_bytes = s.retr_bytes,
            deleted = s.deleted,
            "disconnected"
        );
    }

    /// Handles one line from the client.
    pub async fn handle_line(&mut self, line: Line) -> Action {
        if matches!(self.state, State::Done) {
            return Action::Close;
        }
        if let State::Authorization {
            sasl: sasl @ Some(_),
            ..
        } = &mut self.state
        {
            let Some(sasl) = sasl.take() else {
                return Action::Continue;
            };
            return self.sasl_response(sasl, line).await;
        }
        let bytes = match line {
            Line::Complete(b) => b,
            Line::TooLong => {
                self.reply("-ERR Line too long.");
                self.server.metrics.command("unknown", CommandResult::Bad);
                return self.bad_command();
            }
        };
        let (name, cmd) = match command::parse(&bytes) {
            Ok(x) => x,
            Err((name, e)) => {
                let label = name.map(|n| n.as_str()).unwrap_or("unknown");
                let msg = match e {
                    ParseError::Unknown => "-ERR Unknown command.".to_string(),
                    ParseError::Syntax(m) => format!("-ERR {m}"),
                };
                self.reply(&msg);
                self.server.metrics.command(label, CommandResult::Bad);
                return self.bad_command();
            }
        };
        let Some(state) = self.state() else {
            return Action::Close;
        };
        if !allowed(state, name) {
            self.reply("-ERR Command not allowed in this state.");
            self.server
                .metrics
                .command(name.as_str(), CommandResult::Bad);
            return self.bad_command();
        }
        tracing::debug!(command = ?cmd, "command");
        let (result, action) = self.dispatch(cmd).await;
        // An AUTH that sent a challenge is counted when it ends.
        if !self.in_sasl() {
            self.server.metrics.command(name.as_str(), result);
        }
        if result == CommandResult::Bad && action == Action::Continue {
            return self.bad_command();
        }
        action
    }

    fn in_sasl(&self) -> bool {
        matches!(self.state, State::Authorization { sasl: Some(_), .. })
    }

    fn bad_command(&mut self) -> Action {
        self.bad_commands += 1;
        if self.bad_commands >= self.server.settings.max_bad_commands {
            self.reply("-ERR Too many bad commands.");
            self.close_reason = Some("bad_commands");
            self.state = State::Done;
            return Action::Close;
        }
        Action::Continue
    }

    async fn dispatch(&mut self, cmd: Command) -> (CommandResult, Action) {
        use CommandResult as R;
        let go = Action::Continue;
        match cmd {
            Command::Capa => {
                self.capa().await;
                (R::Ok, go)
            }
            Command::Quit => self.quit().await,
            Command::Stls => self.stls(),
            Command::User(u) => self.handle_user(u).await,
            Command::Pass(p) => self.handle_pass(p).await,
            Command::Apop { .. } => {
                // RFC 1939 §7: optional; not offered (no timestamp in the
                // greeting), so it is an unknown command to the client.
                self.reply("-ERR APOP is not enabled.");
                (R::Bad, go)
            }
            Command::Auth { mechanism, initial } => self.handle_auth(mechanism, initial).await,
            Command::Stat => {
                let (n, size) = match &self.state {
                    State::Transaction { maildrop, .. } => maildrop.stat(),
                    _ => (0, 0),
                };
                self.reply(&format!("+OK {n} {size}"));
                (R::Ok, go)
            }
            Command::List(msg) => self.handle_list(msg),
            Command::Uidl(msg) => self.handle_uidl(msg),
            Command::Retr(msg) => self.handle_retr(msg, None).await,
            Command::Top { msg, lines } => self.handle_retr(msg, Some(lines)).await,
            Command::Dele(msg) => {
                let r = match &mut self.state {
                    State::Transaction { maildrop, .. } => maildrop.delete(msg),
                    _ => Err(MessageError::NoSuchMessage(msg)),
                };
                match r {
                    Ok(()) => {
                        self.reply("+OK Marked to be deleted.");
                        (R::Ok, go)
                    }
                    Err(e) => {
                        self.reply(&format!("-ERR {e}"));
                        (R::No, go)
                    }
                }
            }
            Command::Rset => {
                if let State::Transaction { maildrop, .. } = &mut self.state {
                    maildrop.reset();
                }
                self.reply("+OK");
                (R::Ok, go)
            }
            Command::Noop => {
                self.reply("+OK");
                (R::Ok, go)
            }
        }
    }

    fn secured_for_auth(&self) -> bool {
        self.conn.tls
    }

    fn auth_request(&self) -> AuthRequest {
        AuthRequest {
            service: "pop3".to_string(),
            client_ip: self.conn.peer.ip(),
            local_ip: Some(self.conn.local.ip()),
            session: self.conn.id.clone(),
            secured: self.secured_for_auth(),
        }
    }

    async fn mechanisms(&self) -> Vec<String> {
        self.server
            .auth
            .mechanisms(self.secured_for_auth(), self.conn.peer.ip())
            .await
    }

    /// USER/PASS is PLAIN underneath: allowed where PLAIN is offered
    /// (Dovecot's `disable_plaintext_auth`: TLS, loopback, trusted nets).
    async fn plaintext_allowed(&self) -> bool {
        self.mechanisms()
            .await
            .iter()
            .any(|m| m.eq_ignore_ascii_case("PLAIN"))
    }

    fn starttls_available(&self) -> bool {
        self.server.starttls.is_some() && !self.conn.tls
    }

    async fn capa(&mut self) {
        let mut lines = vec![
            "+OK".to_string(),
            "CAPA".to_string(),
            "TOP".to_string(),
            "UIDL".to_string(),
            "RESP-CODES".to_string(),
            "PIPELINING".to_string(),
            "AUTH-RESP-CODE".to_string(),
        ];
        if matches!(self.state, State::Authorization { .. }) {
            let mechs = self.mechanisms().await;
            if mechs.iter().any(|m| m.eq_ignore_ascii_case("PLAIN")) {
                lines.push("USER".to_string());
            }
            if !mechs.is_empty() {
                lines.push(format!("SASL {}", mechs.join(" ")));
            }
            if self.starttls_available() {
                lines.push("STLS".to_string());
            }
            if !self.server.settings.implementation.is_empty() {
                lines.push(format!(
                    "IMPLEMENTATION {}",
                    self.server.settings.implementation
                ));
            }
        }
        lines.push(".".to_string());
        for l in lines {
            self.reply(&l);
        }
    }

    fn stls(&mut self) -> (CommandResult, Action) {
        if self.conn.tls {
            self.reply("-ERR TLS is already active.");
            return (CommandResult::No, Action::Continue);
        }
        if self.server.starttls.is_none() {
            self.reply("-ERR STLS is not available.");
            return (CommandResult::No, Action::Continue);
        }
        self.reply("+OK Begin TLS negotiation now.");
        (CommandResult::Ok, Action::StartTls)
    }

    async fn quit(&mut self) -> (CommandResult, Action) {
        let state = std::mem::replace(&mut self.state, State::Done);
        match state {
            State::Transaction { maildrop, .. } => {
                // RFC 1939 §6: the UPDATE state.
                match maildrop.commit(self.server.settings.no_flag_updates).await {
                    Ok(r) => {
                        self.stats.deleted = r.deleted as u64;
                        self.server
                            .metrics
                            .deleted_messages
                            .inc_by(r.deleted as u64);
                        self.reply("+OK Logging out.");
                        self.close_reason = Some("quit");
                        (CommandResult::Ok, Action::Close)
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "QUIT could not apply deletions");
                        // RFC 1939 §6: -ERR when some deleted messages
                        // could not be removed.
                        let line = match e {
                            StoreError::Lock(_) | StoreError::Dotlock(_) => {
                                "-ERR [IN-USE] Mailbox is locked; some messages were not deleted."
                            }
                            _ => "-ERR [SYS/TEMP] Some messages could not be deleted.",
                        };
                        self.reply(line);
                        self.close_reason = Some("quit");
                        (CommandResult::Error, Action::Close)
                    }
                }
            }
            _ => {
                self.reply("+OK Logging out.");
                self.close_reason = Some("quit");
                (CommandResult::Ok, Action::Close)
            }
        }
    }

    async fn handle_user(&mut self, name: String) -> (CommandResult, Action) {
        if !self.plaintext_allowed().await {
            self.reply(PLAINTEXT_DISABLED);
            self.server.metrics.login("plaintext_disabled");
            return (CommandResult::No, Action::Continue);
        }
        if let State::Authorization { user, .. } = &mut self.state {
            *user = Some(name);
        }
        self.reply("+OK");
        (CommandResult::Ok, Action::Continue)
    }

    async fn handle_pass(&mut self, password: String) -> (CommandResult, Action) {
        let user = match &mut self.state {
            State::Authorization { user, .. } => user.take(),
            _ => None,
        };
        let Some(user) = user else {
            self.reply("-ERR No username given.");
            return (CommandResult::Bad, Action::Continue);
        };
        let mut ir = Vec::with_capacity(user.len() + password.len() + 2);
        ir.push(0);
        ir.extend_from_slice(user.as_bytes());
        ir.push(0);
        ir.extend_from_slice(password.as_bytes());
        let (_, reply) = self
            .server
            .auth
            .begin(self.auth_request(), "PLAIN", Some(&ir))
            .await;
        match reply {
            AuthReply::Success(s) => self.login(s).await,
            AuthReply::Failure(f) => self.auth_failed(f),
            AuthReply::Continue(_) => self.auth_failed(AuthFailure {
                kind: FailureKind::Malformed,
                message: "Authentication failed.".into(),
                user: Some(user),
            }),
        }
    }

    async fn handle_auth(
        &mut self,
        mechanism: Option<String>,
        initial: Option<String>,
    ) -> (CommandResult, Action) {
        let Some(mechanism) = mechanism else {
            let mechs = self.mechanisms().await;
            self.reply("+OK");
            for m in mechs {
                self.reply(&m);
            }
            self.reply(".");
            return (CommandResult::Ok, Action::Continue);
        };
        // RFC 5034 §4: "=" is an empty initial response.
        let initial = match initial.as_deref() {
            None => None,
            Some("=") => Some(Vec::new()),
            Some(b) => match B64.decode(b) {
                Ok(v) => Some(v),
                Err(_) => {
                    self.reply("-ERR Invalid base64 data in initial response.");
                    return (CommandResult::Bad, Action::Continue);
                }
            },
        };
        let (exchange, reply) = self
            .server
            .auth
            .begin(self.auth_request(), &mechanism, initial.as_deref())
            .await;
        self.sasl_reply(exchange, reply).await
    }

    async fn sasl_reply(
        &mut self,
        exchange: HandleExchange,
        reply: AuthReply,
    ) -> (CommandResult, Action) {
        match reply {
            AuthReply::Continue(challenge) => {
                let line = format!("+ {}", B64.encode(challenge));
                self.reply(&line);
                if let State::Authorization { sasl, .. } = &mut self.state {
                    *sasl = Some(Sasl::Exchange(exchange));
                }
                (CommandResult::Ok, Action::Continue)
            }
            AuthReply::Success(s) => match &s.additional {
                Some(data) => {
                    let line = format!("+ {}", B64.encode(data));
                    self.reply(&line);
                    if let State::Authorization { sasl, .. } = &mut self.state {
                        *sasl = Some(Sasl::Final(s));
                    }
                    (CommandResult::Ok, Action::Continue)
                }
                None => self.login(s).await,
            },
            AuthReply::Failure(f) => self.auth_failed(f),
        }
    }

    async fn sasl_response(&mut self, sasl: Sasl, line: Line) -> Action {
        let (result, action) = match (sasl, line) {
            (Sasl::Final(s), Line::Complete(b)) if b.is_empty() => self.login(s).await,
            (Sasl::Final(s), _) => self.auth_failed(AuthFailure {
                kind: FailureKind::Malformed,
                message: "Invalid authentication data.".into(),
                user: Some(s.user),
            }),
            (Sasl::Exchange(mut ex), Line::Complete(b)) if b == b"*" => {
                // RFC 5034 §4: the client cancels; the server rejects.
                let reply = ex.step(None).await;
                match reply {
                    AuthReply::Failure(f) => self.auth_failed(f),
                    _ => self.auth_failed(AuthFailure {
                        kind: FailureKind::Aborted,
                        message: "Authentication aborted.".into(),
                        user: None,
                    }),
                }
            }
            (Sasl::Exchange(mut ex), Line::Complete(b)) => match B64.decode(&b) {
                Ok(data) => {
                    let reply = ex.step(Some(&data)).await;
                    self.sasl_reply(ex, reply).await
                }
                Err(_) => {
                    let _ = ex.step(None).await;
                    self.reply("-ERR Invalid base64 data in continued response.");
                    (CommandResult::Bad, Action::Continue)
                }
            },
            (Sasl::Exchange(mut ex), Line::TooLong) => {
                let _ = ex.step(None).await;
                self.reply("-ERR Line too long.");
                (CommandResult::Bad, Action::Continue)
            }
        };
        if !self.in_sasl() {
            // The AUTH command is over: count it once.
            self.server.metrics.command("AUTH", result);
        }
        if result == CommandResult::Bad && action == Action::Continue {
            return self.bad_command();
        }
        action
    }

    fn auth_failed(&mut self, f: AuthFailure) -> (CommandResult, Action) {
        self.server.metrics.login(f.kind.as_str());
        tracing::info!(
            user = f.user.as_deref().unwrap_or(""),
            result = f.kind.as_str(),
            "login failed"
        );
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
            self.auth_failures += 1;
            if self.auth_failures >= self.server.settings.max_auth_failures {
                self.reply("-ERR Too many invalid authentication attempts.");
                self.close_reason = Some("auth_failures");
                self.state = State::Done;
                return (CommandResult::No, Action::Close);
            }
        }
        let result = match f.kind {
            FailureKind::Temporary => CommandResult::Error,
            _ => CommandResult::No,
        };
        (result, Action::Continue)
    }

    /// Authenticated: open the user's INBOX and take the snapshot.
    async fn login(&mut self, success: AuthSuccess) -> (CommandResult, Action) {
        let info = UserInfo {
            user: success.user.clone(),
            home: success.fields.get("home").unwrap_or("").to_string(),
        };
        tracing::Span::current().record("user", success.user.as_str());
        let opened = async {
            let us = self.server.store.user(&info).await?;
            let inbox = us.open("INBOX").await?;
            Maildrop::open(inbox, &self.server.settings.uidl_format).await
        }
        .await;
        match opened {
            Ok(maildrop) => {
                self.server.metrics.login("ok");
                tracing::info!(user = %success.user, messages = maildrop.len(), "logged in");
                self.state = State::Transaction {
                    user: success.user,
                    maildrop: Box::new(maildrop),
                };
                self.reply("+OK Logged in.");
                (CommandResult::Ok, Action::Continue)
            }
            Err(e) => {
                self.server.metrics.login("mailbox_error");
                self.close_reason = Some("mailbox_error");
                tracing::error!(user = %success.user, error = %e, "cannot open INBOX");
                let line = match e {
                    StoreError::Lock(_) | StoreError::Dotlock(_) => {
                        "-ERR [IN-USE] Mailbox is locked by another session, try again later."
                    }
                    _ => INTERNAL,
                };
                self.reply(line);
                self.state = State::Done;
                (CommandResult::Error, Action::Close)
            }
        }
    }

    fn handle_list(&mut self, msg: Option<u32>) -> (CommandResult, Action) {
        let State::Transaction { maildrop, .. } = &self.state else {
            return (CommandResult::Bad, Action::Continue);
        };
        let mut out = Vec::new();
        let result = match msg {
            Some(n) => match maildrop.size(n) {
                Ok(size) => {
                    out.push(format!("+OK {n} {size}"));
                    CommandResult::Ok
                }
                Err(e) => {
                    out.push(format!("-ERR {e}"));
                    CommandResult::No
                }
            },
            None => {
                let (count, _) = maildrop.stat();
                out.push(format!("+OK {count} messages:"));
                out.extend(maildrop.list().map(|(n, s)| format!("{n} {s}")));
                out.push(".".to_string());
                CommandResult::Ok
            }
        };
        for l in out {
            self.reply(&l);
        }
        (result, Action::Continue)
    }

    fn handle_uidl(&mut self, msg: Option<u32>) -> (CommandResult, Action) {
        let State::Transaction { maildrop, .. } = &self.state else {
            return (CommandResult::Bad, Action::Continue);
        };
        let mut out = Vec::new();
        let result = match msg {
            Some(n) => match maildrop.uidl(n) {
                Ok(u) => {
                    out.push(format!("+OK {n} {u}"));
                    CommandResult::Ok
                }
                Err(e) => {
                    out.push(format!("-ERR {e}"));
                    CommandResult::No
                }
            },
            None => {
                out.push("+OK".to_string());
                out.extend(maildrop.uidls().map(|(n, u)| format!("{n} {u}")));
                out.push(".".to_string());
                CommandResult::Ok
            }
        };
        for l in out {
            self.reply(&l);
        }
        (result, Action::Continue)
    }

    /// RETR (`top = None`) and TOP.
    async fn handle_retr(&mut self, msg: u32, top: Option<u64>) -> (CommandResult, Action) {
        let read = match &mut self.state {
            State::Transaction { maildrop, .. } => match maildrop.size(msg) {
                Ok(size) => maildrop
                    .read(msg, top.is_none())
                    .await
                    .map(|data| (size, data)),
                Err(e) => Err(ReadError::Message(e)),
            },
            _ => return (CommandResult::Bad, Action::Continue),
        };
        match read {
            Ok((size, data)) => {
                let head = match top {
                    None => format!("+OK {size} octets"),
                    Some(_) => "+OK".to_string(),
                };
                self.reply(&head);
                let before = self.out.len();
                write_multiline(&mut self.out, &data, top);
                let sent = (self.out.len() - before) as u64;
                let label = if top.is_some() { "top" } else { "retr" };
                self.server.metrics.sent(label, sent);
                if top.is_some() {
                    self.stats.top += 1;
                    self.stats.top_bytes += sent;
                } else {
                    self.stats.retr += 1;
                    self.stats.retr_bytes += sent;
                }
                (CommandResult::Ok, Action::Continue)
            }
            Err(ReadError::Message(e)) => {
                if matches!(e, MessageError::Expunged(_)) {
                    tracing::info!(msg, "message expunged by another session");
                }
                self.reply(&format!("-ERR {e}"));
                (CommandResult::No, Action::Continue)
            }
            Err(ReadError::Store(e)) => {
                tracing::error!(msg, error = %e, "cannot read message");
                self.reply(INTERNAL);
                (CommandResult::Error, Action::Continue)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_state_allows() {
        use CommandName as C;
        let table: &[(C, bool, bool)] = &[
            // command, AUTHORIZATION, TRANSACTION
            (C::User, true, false),
            (C::Pass, true, false),
            (C::Apop, true, false),
            (C::Auth, true, false),
            (C::Capa, true, true),
            (C::Stls, true, false),
            (C::Stat, false, true),
            (C::List, false, true),
            (C::Retr, false, true),
            (C::Top, false, true),
            (C::Dele, false, true),
            (C::Rset, false, true),
            (C::Uidl, false, true),
            (C::Noop, false, true),
            (C::Quit, true, true),
        ];
        assert_eq!(table.len(), C::ALL.len());
        for &(c, a, t) in table {
            assert_eq!(
                allowed(StateKind::Authorization, c),
                a,
                "{c:?} in AUTHORIZATION"
            );
            assert_eq!(
                allowed(StateKind::Transaction, c),
                t,
                "{c:?} in TRANSACTION"
            );
        }
    }
}
