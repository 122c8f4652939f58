//! One IMAP connection: the command loop, the state machine and the
//! dispatch to the command modules.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use tracing::Instrument;
use yarilo_auth::ExtraFields;
use yarilo_imap_proto::command::Command;
use yarilo_imap_proto::response::{Code, Data, Response, StatusKind};
use yarilo_imap_proto::{BadReason, Limits, Outcome, ParseOptions};
use yarilo_listener::ClientConn;
use yarilo_store::{MailboxView, UserStore};

use crate::append::AppendInProgress;
use crate::capability;
use crate::conn::{Conn, Read};
use crate::metrics::CommandLabels;
use crate::names::Names;
use crate::selected::{Selected, SyncMode};
use crate::server::ImapServer;

/// The logged-in user.
pub(crate) struct UserCtx {
    pub name: String,
    pub store: UserStore,
    /// From the userdb's `quota_rule` fields.
    pub limits: yarilo_store::QuotaLimits,
}

/// Extensions the client turned on with ENABLE (or implicitly).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Enabled {
    pub condstore: bool,
    pub qresync: bool,
    pub rev2: bool,
    pub utf8: bool,
}

pub(crate) struct Session {
    pub server: Arc<ImapServer>,
    pub conn: Conn,
    pub id: String,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub user: Option<UserCtx>,
    pub selected: Option<Selected>,
    pub enabled: Enabled,
    pub names: Names,
    pub bad_in_row: u32,
    pub auth_failures: u32,
    pub append: Option<AppendInProgress>,
    /// Set by LOGOUT or a fatal condition: end after flushing.
    pub closing: bool,
    /// Resolves when the process stops.
    pub shutdown: Option<Shutdown>,
    pub stopping: bool,
    /// Set by a login proxy's hand-off: the tag of the client's
    /// LOGIN/AUTHENTICATE, answered instead of a PREAUTH greeting.
    pub login_tag: Option<String>,
    /// NOTIFY SET in force.
    pub notify: Option<crate::notify::NotifyState>,
    /// `delay-newmail` holds EXISTS back during the current command.
    pub hold_new_mail: bool,
    /// When an unauthenticated connection is closed however busy it is
    /// (`imap.preauth_timeout_seconds`); set from the greeting.
    pub preauth_deadline: tokio::time::Instant,
}

/// [`Session::enable_condstore`] for a handler that holds the selected
/// mailbox borrowed.
pub(crate) fn condstore_on(enabled: &mut Enabled, conn: &mut Conn, selected: Option<&Selected>) {
    if std::mem::replace(&mut enabled.condstore, true) {
        return;
    }
    if let Some(sel) = selected {
        conn.send(&Response::Status {
            tag: None,
            kind: StatusKind::Ok,
            code: Some(Code::HighestModSeq(sel.view.highest_modseq())),
            text: "Highest".into(),
        });
    }
}

/// The "reply" of a command that already sent its tagged response
/// (STARTTLS, a login failure ending the connection, IDLE).
pub(crate) fn answered() -> Response {
    Response::Continue(String::new())
}

fn is_answered(r: &Response) -> bool {
    matches!(r, Response::Continue(s) if s.is_empty())
}

/// Waits for the process to stop (never, once it has been seen).
pub(crate) async fn stopped(f: &mut Option<Shutdown>) {
    match f.as_mut() {
        Some(fut) => {
            fut.await;
            *f = None;
        }
        None => std::future::pending().await,
    }
}

/// The process-stop future, shareable so the session stays `Sync`.
pub(crate) type Shutdown =
    futures::future::Shared<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>;

fn session_id() -> String {
    use rand::Rng;
    let n: u64 = rand::thread_rng().gen();
    format!("{n:016x}")
}

impl Session {
    pub fn new(server: Arc<ImapServer>, conn: ClientConn) -> Session {
        let s = &server.settings;
        let limits = Limits {
            max_line: s.max_line_length,
            max_command: s.max_line_length.max(s.max_literal) + s.max_line_length,
            max_literal: s.max_literal as u64,
            // The session answers NO [TOOBIG] itself (RFC 7889).
            max_append: u64::MAX,
            max_nonsync: None,
        };
        let metrics = server.metrics.clone();
        let separator = s.separator;
        Session {
            conn: Conn::new(conn.stream, limits, metrics, s.write_timeout),
            id: session_id(),
            peer: conn.peer,
            local: conn.local,
            user: None,
            selected: None,
            enabled: Enabled::default(),
            names: Names {
                imap: separator,
                store: '.',
            },
            bad_in_row: 0,
            auth_failures: 0,
            append: None,
            closing: false,
            shutdown: None,
            stopping: false,
            login_tag: None,
            notify: None,
            hold_new_mail: false,
            preauth_deadline: tokio::time::Instant::now() + s.preauth_timeout,
            server,
        }
    }

    pub fn secured(&self) -> bool {
        self.conn.stream.is_tls()
    }

    pub async fn run(
        mut self,
        preauth: Option<(String, ExtraFields)>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let span = tracing::info_span!(
            "imap",
            session = %self.id,
            ip = %self.peer.ip(),
            user = tracing::field::Empty
        );
        let metrics = self.server.metrics.clone();
        metrics.sessions_open.inc();
        async {
            self.serve(preauth, shutdown).await;
        }
        .instrument(span)
        .await;
        metrics.sessions_open.dec();
        if self.user.is_some() {
            metrics.sessions_authenticated.dec();
        }
    }

    async fn serve(
        &mut self,
        preauth: Option<(String, ExtraFields)>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let boxed: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            Box::pin(shutdown);
        self.shutdown = Some(boxed.shared());
        match preauth {
            Some((user, fields)) => match self.log_in(&user, &fields).await {
                Ok(()) => {
                    let caps = self.capabilities().await;
                    let tag = self.login_tag.take();
                    let (kind, text) = match tag {
                        Some(_) => (StatusKind::Ok, "Logged in".to_string()),
                        None => (StatusKind::PreAuth, format!("Logged in as {user}")),
                    };
                    self.conn.send(&Response::Status {
                        tag,
                        kind,
                        code: Some(Code::Capability(caps)),
                        text,
                    });
                }
                Err(r) => {
                    let text = match r {
                        Response::Status { text, .. } => text,
                        _ => "Login failed.".into(),
                    };
                    if let Some(tag) = self.login_tag.take() {
                        // The client waits for its login's answer.
                        self.conn
                            .send(&Response::no(tag, Some(Code::Unavailable), text.clone()));
                    }
                    self.conn.send(&Response::Status {
                        tag: None,
                        kind: StatusKind::Bye,
                        code: Some(Code::Unavailable),
                        text,
                    });
                    let _ = self.conn.flush().await;
                    return;
                }
            },
            None => {
                let caps = self.capabilities().await;
                self.conn.send(&Response::Status {
                    tag: None,
                    kind: StatusKind::Ok,
                    code: Some(Code::Capability(caps)),
                    text: "yarilo ready.".into(),
                });
            }
        }
        loop {
            if self.closing {
                let _ = self.conn.flush().await;
                return;
            }
            // However busy the client keeps the connection, it is not
            // served unauthenticated past the deadline.
            if self.user.is_none() && tokio::time::Instant::now() >= self.preauth_deadline {
                self.read_timed_out();
                continue;
            }
            match self.conn.rx.next() {
                Outcome::Incomplete => {
                    if self.conn.flush().await.is_err() {
                        return;
                    }
                    let timeout = self.read_timeout();
                    let stop = stopped(&mut self.shutdown);
                    let read = tokio::select! {
                        _ = stop => {
                            self.stopping = true;
                            self.bye("Server shutting down.");
                            let _ = self.conn.flush().await;
                            return;
                        }
                        r = self.conn.fill(timeout) => r,
                    };
                    match read {
                        Ok(Read::Data) => {}
                        Ok(Read::Eof) | Err(_) => return,
                        Ok(Read::Timeout) => {
                            self.read_timed_out();
                            let _ = self.conn.flush().await;
                            return;
                        }
                    }
                }
                Outcome::NeedLiteral { sync, .. } => {
                    if sync {
                        self.conn.raw(b"+ OK\r\n");
                        if self.conn.flush().await.is_err() {
                            return;
                        }
                    }
                }
                Outcome::Command { tag, command } => {
                    self.bad_in_row = 0;
                    if self.command(tag, command).await.is_err() {
                        return;
                    }
                }
                Outcome::Append { tag, event } => {
                    if self.append_event(tag, event).await.is_err() {
                        return;
                    }
                }
                Outcome::Bad { tag, reason } => {
                    let cancelled = self.append.take().is_some();
                    if cancelled {
                        tracing::debug!("APPEND cancelled by a syntax error");
                    }
                    self.bad(tag, &reason);
                }
                Outcome::IdleDone | Outcome::SaslResponse(_) | Outcome::SaslCancel => {}
            }
        }
    }

    /// How long the next read may wait: the idle bound of the state,
    /// and before login no later than the pre-authentication deadline
    /// (which a client trickling bytes cannot push back).
    pub(crate) fn read_timeout(&self) -> std::time::Duration {
        if self.user.is_some() {
            return self.server.settings.autologout;
        }
        let left = self
            .preauth_deadline
            .saturating_duration_since(tokio::time::Instant::now());
        self.server.settings.login_timeout.min(left)
    }

    /// A read ran into [`Session::read_timeout`]: says BYE (sent by the
    /// caller's flush) and counts the kind.
    pub(crate) fn read_timed_out(&mut self) {
        if self.user.is_none() && tokio::time::Instant::now() >= self.preauth_deadline {
            self.server.metrics.timed_out("preauth");
            self.bye("Login timed out.");
        } else {
            self.server.metrics.timed_out("inactivity");
            self.bye("Disconnected for inactivity.");
        }
    }

    fn bye(&mut self, text: &str) {
        self.conn.send(&Response::Status {
            tag: None,
            kind: StatusKind::Bye,
            code: None,
            text: text.into(),
        });
        self.closing = true;
    }

    fn bad(&mut self, tag: Option<String>, reason: &BadReason) {
        self.bad_in_row += 1;
        let code = match reason {
            BadReason::LiteralTooLarge { .. } => Some(Code::TooBig),
            _ => None,
        };
        let text = format!("Error in IMAP command: {reason}");
        self.server
            .metrics
            .commands
            .get_or_create(&CommandLabels {
                command: "unparsed",
                result: "bad",
            })
            .inc();
        self.conn.send(&Response::bad(tag, code, text));
        if self.bad_in_row >= self.server.settings.max_bad_commands {
            self.bye("Too many invalid IMAP commands.");
        }
    }

    /// The capability list for the current state.
    pub async fn capabilities(&self) -> Vec<String> {
        if self.user.is_some() {
            return capability::post_login(
                self.server.settings.append_limit,
                &self.server.settings.capability_override,
            );
        }
        let mechs = self
            .server
            .auth
            .mechanisms(self.secured(), self.peer.ip())
            .await;
        let login_ok = mechs.iter().any(|m| m == "PLAIN");
        let starttls = !self.secured() && self.server.starttls.is_some();
        capability::pre_login(starttls, login_ok, &mechs)
    }

    pub fn sync_mode(&self, expunges: bool) -> SyncMode {
        SyncMode {
            expunges,
            qresync: self.enabled.qresync,
            condstore: self.enabled.condstore,
            rev2: self.enabled.rev2,
            new_mail: !self.hold_new_mail,
        }
    }

    /// Picks up changes (from the disk when `refresh`) and queues the
    /// untagged responses. `skip`: UIDs whose flags the command reported.
    pub async fn sync_selected(&mut self, expunges: bool, skip: &[u32]) {
        let Some(sel) = self.selected.as_mut() else {
            return;
        };
        sel.drain_events();
        let view = match sel.mailbox.refresh().await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "mailbox refresh failed; using the last known state");
                sel.mailbox.view()
            }
        };
        self.apply_view(view, expunges, skip);
        self.context_updates().await;
    }

    /// Tells the client what `view` changed against what it knows, and
    /// queues the untagged responses. `skip`: UIDs whose flags the current
    /// command already reported.
    pub fn apply_view(&mut self, view: Arc<MailboxView>, expunges: bool, skip: &[u32]) {
        let mode = self.sync_mode(expunges);
        let Some(sel) = self.selected.as_mut() else {
            return;
        };
        let user = self
            .user
            .as_ref()
            .map(|u| u.name.as_str())
            .unwrap_or_default();
        let recent = &self.server.recent;
        let store_name = sel.mailbox.name().to_string();
        let mut out = Vec::new();
        sel.sync(
            view,
            mode,
            skip,
            |highest| recent.claim(user, &store_name, highest, 0),
            &mut out,
        );
        for r in &out {
            self.conn.send(r);
        }
    }

    /// Runs one command: state check, handler, untagged updates, tagged
    /// reply, metrics. `Err` only when the connection is gone.
    async fn command(&mut self, tag: String, cmd: Command) -> std::io::Result<()> {
        let name = cmd.name();
        let started = Instant::now();
        // Expunges may not be reported while the client could be holding
        // MSNs in a pipeline of FETCH/STORE/SEARCH (RFC 9051 §7.5.1).
        let msn_bound = match &cmd {
            Command::Fetch { uid, .. } => !uid,
            Command::Store(s) => !s.uid,
            Command::Search(s) => !s.uid,
            _ => false,
        };
        // Workaround for clients that only look for new mail at NOOP.
        self.hold_new_mail = self.server.settings.delay_newmail
            && !matches!(cmd, Command::Noop | Command::Check | Command::Idle);
        let reply = if let Some(r) = self.state_check(&tag, &cmd) {
            r
        } else {
            self.dispatch(&tag, cmd).await?
        };
        let r = self.complete(name, reply, started, msn_bound).await;
        self.hold_new_mail = false;
        r
    }

    /// Ends a command that finished outside [`Session::command`] (a
    /// streamed APPEND).
    pub(crate) async fn finish_command(
        &mut self,
        name: &'static str,
        reply: Response,
        started: Instant,
    ) -> std::io::Result<()> {
        self.complete(name, reply, started, false).await
    }

    /// Untagged updates, the tagged reply, metrics.
    async fn complete(
        &mut self,
        name: &'static str,
        reply: Response,
        started: Instant,
        msn_bound: bool,
    ) -> std::io::Result<()> {
        if self.selected.is_some() && !self.closing {
            self.sync_selected(!msn_bound, &[]).await;
        }
        if self.notify.is_some() && !self.closing {
            self.deliver_notifications().await;
        }
        let already = is_answered(&reply);
        let result = match &reply {
            _ if already => "ok",
            Response::Status {
                kind: StatusKind::Ok,
                ..
            } => "ok",
            Response::Status {
                kind: StatusKind::No,
                ..
            } => "no",
            _ => "bad",
        };
        // A BAD for a command that parsed (wrong state, arguments the
        // command refuses) never counts towards `max_bad_commands`: only
        // input the grammar cannot read does ([`Session::bad`]), so a
        // client probing features never loses its connection.
        if !already {
            self.conn.send(&reply);
        }
        let labels = CommandLabels {
            command: name,
            result,
        };
        let m = &self.server.metrics;
        m.commands.get_or_create(&labels).inc();
        m.command_seconds
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.conn.maybe_flush().await
    }

    /// BAD for a command the state does not allow.
    fn state_check(&self, tag: &str, cmd: &Command) -> Option<Response> {
        use Command::*;
        let authed = self.user.is_some();
        let selected = self.selected.is_some();
        let need_auth = !matches!(
            cmd,
            Capability | Noop | Logout | Id(_) | StartTls | Authenticate { .. } | Login { .. }
        );
        if !authed && need_auth {
            return Some(Response::bad(
                Some(tag.to_string()),
                None,
                "Please log in first.",
            ));
        }
        if authed && matches!(cmd, StartTls | Authenticate { .. } | Login { .. }) {
            return Some(Response::bad(
                Some(tag.to_string()),
                None,
                "Already logged in.",
            ));
        }
        let need_selected = matches!(
            cmd,
            Check
                | Close
                | Unselect
                | Expunge
                | UidExpunge(_)
                | Search(_)
                | CancelUpdate(_)
                | Fetch { .. }
                | Store(_)
                | Copy { .. }
                | Move { .. }
        );
        if need_selected && !selected {
            return Some(Response::bad(
                Some(tag.to_string()),
                None,
                "No mailbox selected.",
            ));
        }
        None
    }

    async fn dispatch(&mut self, tag: &str, cmd: Command) -> std::io::Result<Response> {
        let ok = |text: &str| Response::ok(tag, None, text);
        Ok(match cmd {
            Command::Capability => {
                let caps = self.capabilities().await;
                self.conn.send(&Response::Data(Data::Capability(caps)));
                ok("Capability completed.")
            }
            Command::Noop => ok("NOOP completed."),
            Command::Check => ok("CHECK completed."),
            Command::Logout => {
                self.bye("Logging out");
                ok("Logout completed.")
            }
            Command::Id(_) => {
                self.conn.send(&Response::Data(Data::Id(Some(vec![
                    ("name".into(), Some("yarilo".into())),
                    ("version".into(), Some(env!("CARGO_PKG_VERSION").into())),
                ]))));
                ok("ID completed.")
            }
            Command::StartTls => return self.starttls(tag).await,
            Command::Login { username, password } => {
                return self.login(tag, &username, &password).await
            }
            Command::Authenticate { mechanism, initial } => {
                return self.authenticate(tag, &mechanism, initial).await
            }
            Command::Enable(caps) => self.enable(tag, &caps),
            Command::Namespace => {
                self.conn.send(&Response::Data(Data::Namespace {
                    personal: vec![yarilo_imap_proto::response::NamespaceDesc {
                        prefix: String::new(),
                        delimiter: Some(self.names.imap),
                    }],
                    other: Vec::new(),
                    shared: Vec::new(),
                }));
                ok("Namespace completed.")
            }
            Command::Select(s) => self.select(tag, s, false).await,
            Command::Examine(s) => self.select(tag, s, true).await,
            Command::Create {
                mailbox,
                special_use,
            } => self.create(tag, mailbox, special_use).await,
            Command::Delete(m) => self.delete(tag, m).await,
            Command::Rename { from, to } => self.rename(tag, from, to).await,
            Command::Subscribe(m) => self.subscribe(tag, m, true).await,
            Command::Unsubscribe(m) => self.subscribe(tag, m, false).await,
            Command::List(l) => self.list(tag, l).await,
            Command::Lsub { reference, pattern } => self.lsub(tag, &reference, &pattern).await,
            Command::Status { mailbox, items } => self.status(tag, mailbox, items).await,
            Command::Append { mailbox, messages } => {
                self.append_whole(tag, mailbox, messages).await
            }
            Command::Idle => return self.idle(tag).await,
            Command::Close => self.close(tag, true).await,
            Command::Unselect => self.close(tag, false).await,
            Command::Expunge => self.expunge(tag, None).await,
            Command::UidExpunge(set) => self.expunge(tag, Some(set)).await,
            Command::Search(s) => self.search(tag, s).await?,
            Command::CancelUpdate(tags) => self.cancel_update(tag, &tags),
            Command::Fetch {
                uid,
                set,
                attrs,
                modifiers,
            } => return self.fetch(tag, uid, set, attrs, modifiers).await,
            Command::Store(s) => self.store(tag, s).await,
            Command::Copy { uid, set, mailbox } => self.copy(tag, uid, set, mailbox, false).await,
            Command::Move { uid, set, mailbox } => self.copy(tag, uid, set, mailbox, true).await,
            Command::GetQuotaRoot(m) => self.get_quota_root(tag, m).await,
            Command::GetQuota(root) => self.get_quota(tag, &root).await,
            Command::SetQuota { .. } => Response::no(
                tag,
                Some(Code::NoPerm),
                "Quota limits are set in the userdb.",
            ),
            Command::Compress(mech) => return self.compress(tag, &mech).await,
            Command::Notify(set) => self.notify(tag, set).await,
            Command::GenUrlAuth(items) => self.genurlauth(tag, items).await,
            Command::ResetKey {
                mailbox,
                mechanisms,
            } => self.resetkey(tag, mailbox, mechanisms).await,
            Command::UrlFetch(items) => self.urlfetch(tag, items).await,
            Command::GetMetadata {
                max_size,
                depth,
                mailbox,
                entries,
            } => {
                self.get_metadata(tag, max_size, depth, mailbox, entries)
                    .await
            }
            Command::SetMetadata { mailbox, entries } => {
                self.set_metadata(tag, mailbox, entries).await
            }
            other => Response::bad(
                Some(tag.to_string()),
                None,
                format!("Unknown command {}", other.name()),
            ),
        })
    }

    async fn compress(&mut self, tag: &str, mechanism: &str) -> std::io::Result<Response> {
        if self.conn.compressing() {
            return Ok(Response::no(
                tag,
                Some(Code::CompressionActive),
                "Compression is already active.",
            ));
        }
        if !mechanism.eq_ignore_ascii_case("DEFLATE") {
            return Ok(Response::bad(
                Some(tag.to_string()),
                None,
                "Unknown compression mechanism.",
            ));
        }
        // Untagged updates first, then the OK uncompressed; everything
        // after it is deflated (RFC 4978 §3).
        self.sync_selected(true, &[]).await;
        self.conn
            .send(&Response::ok(tag, None, "Begin compression."));
        self.conn.flush().await?;
        self.conn.start_compression();
        Ok(answered())
    }

    /// Turns CONDSTORE on for a CONDSTORE-enabling command (RFC 7162
    /// §3.1); the first one while a mailbox is selected is answered with
    /// its `OK [HIGHESTMODSEQ]` before the tagged reply.
    pub(crate) fn enable_condstore(&mut self) {
        condstore_on(&mut self.enabled, &mut self.conn, self.selected.as_ref());
    }

    fn enable(&mut self, tag: &str, caps: &[String]) -> Response {
        let mut done = Vec::new();
        for c in caps {
            let c = c.to_ascii_uppercase();
            let newly = match c.as_str() {
                "CONDSTORE" => {
                    let was = self.enabled.condstore;
                    self.enable_condstore();
                    !was
                }
                "QRESYNC" => {
                    self.enable_condstore();
                    !std::mem::replace(&mut self.enabled.qresync, true)
                }
                "IMAP4REV2" => !std::mem::replace(&mut self.enabled.rev2, true),
                "UTF8=ACCEPT" => !std::mem::replace(&mut self.enabled.utf8, true),
                _ => false,
            };
            if newly {
                done.push(if c == "IMAP4REV2" {
                    "IMAP4rev2".to_string()
                } else {
                    c
                });
            }
        }
        if self.enabled.rev2 || self.enabled.utf8 {
            self.conn.enc.utf8 = true;
            self.conn.rx.set_options(ParseOptions { utf8_names: true });
        }
        self.conn.send(&Response::Data(Data::Enabled(done)));
        Response::ok(tag, None, "Enabled.")
    }

    /// After authentication: opens the user's store.
    pub async fn log_in(&mut self, user: &str, fields: &ExtraFields) -> Result<(), Response> {
        let info = yarilo_store::UserInfo {
            user: user.to_string(),
            home: fields.get("home").unwrap_or_default().to_string(),
        };
        match self.server.store.user(&info).await {
            Ok(store) => {
                self.names.store = store.separator();
                tracing::Span::current().record("user", user);
                tracing::info!("logged in");
                self.server.metrics.sessions_authenticated.inc();
                self.user = Some(UserCtx {
                    name: user.to_string(),
                    store,
                    limits: yarilo_store::QuotaLimits::from_fields(fields.iter()),
                });
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot open the user's mail store");
                Err(Response::no(
                    "*",
                    Some(Code::Unavailable),
                    "Mail storage is not available; try again later.",
                ))
            }
        }
    }

    pub fn user_store(&self) -> Option<UserStore> {
        self.user.as_ref().map(|u| u.store.clone())
    }
}
