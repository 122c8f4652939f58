//! `lmtp-login`: an LMTP (RFC 2033) proxy in front of `yarilo lmtp`
//! backends. There are no credentials: each RCPT is looked up in the
//! userdb (auth service `lookup_delivery`, `service=lmtp`, the
//! `lmtp.recipient_delimiter` detail stripped as the backend does), which
//! also issues a single-use token for that delivery, and routed like a
//! login (`login.lmtp.backend_addr` or a director LOOKUP with the user's
//! `director_tag`).
//!
//! Per recipient (deployment seed: "warden CONNECT per recipient, SESSION
//! token, preamble fan-out"):
//! 1. warden `DELIVERY_START <id> <user>` (with `warden_client.enabled`):
//!    a user at `max_deliveries_per_user` concurrent deliveries gets
//!    451 4.7.0 for that recipient only;
//! 2. one connection to the recipient's backend, opened with the `YARILO`
//!    preamble (`ADDR` the client, `SESSION` the delivery id, `USER`,
//!    `TOKEN`) — the backend VERIFYs it before it greets; then LHLO, MAIL
//!    FROM as the client sent it, and the RCPT, whose reply is the
//!    client's. A backend the director named that takes no connection is
//!    reported (BACKEND-UNREACHABLE).
//!
//! At DATA the body is read once (bounded by `lmtp.max_message_size`,
//! 64 MiB when that is 0), sent to every recipient's backend connection in
//! parallel, and the per-recipient replies are returned in RCPT order
//! (RFC 2033 §4.2). A backend that breaks answers 451 4.4.0 for its own
//! recipient only. The connections (and warden's counts) end with the
//! transaction.
//!
//! Extensions offered: PIPELINING, ENHANCEDSTATUSCODES, 8BITMIME, SIZE,
//! and XCLIENT ADDR to peers in `general.xclient.trusted_nets` when the
//! listener has `xclient_protocol` (with `general.xclient.enabled`).
//! Not offered: CHUNKING (BDAT), SMTPUTF8.

use std::net::IpAddr;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tracing::Instrument;
use yarilo_auth::AuthHandle;
use yarilo_listener::{ClientConn, MailStream};
use yarilo_smtp::address::strip_detail;
use yarilo_smtp::command::{self, Command, Param};
use yarilo_smtp::reply::{EnhancedCode, Reply, ReplyParser};
use yarilo_tls::internal::InternalTls;
use yarilo_wire::Preamble;

use crate::handoff::session_id;
use crate::hop::{dial, UpstreamStream};
use crate::lines::{Line, LineConn, LineError};
use crate::preamble::HopPreamble;
use crate::route::Router;
use crate::warden::{DeliveryGuard, LoginWarden, WardenRefusal};
use crate::xclient::XclientPolicy;
use crate::{LoginMetrics, LoginSettings};

const PROTO: &str = "lmtp";

fn r(code: u16, e: (u8, u16, u16), text: impl Into<String>) -> Reply {
    Reply::new(code, EnhancedCode::new(e.0, e.1, e.2), text)
}

/// What every `lmtp-login` session of the process shares.
pub struct LmtpLoginServer {
    settings: LoginSettings,
    auth: AuthHandle,
    router: Router,
    hop_tls: Option<InternalTls>,
    /// `lmtp.recipient_delimiter`.
    delimiter: String,
    warden: LoginWarden,
    xclient: XclientPolicy,
    metrics: LoginMetrics,
}

impl LmtpLoginServer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: LoginSettings,
        auth: AuthHandle,
        router: Router,
        hop_tls: Option<InternalTls>,
        delimiter: String,
        warden: LoginWarden,
        xclient: XclientPolicy,
        registry: &mut Registry,
    ) -> Arc<LmtpLoginServer> {
        Arc::new(LmtpLoginServer {
            settings,
            auth,
            router,
            hop_tls,
            delimiter,
            warden,
            xclient,
            metrics: LoginMetrics::register(registry),
        })
    }

    /// Serves one LMTP client until QUIT, EOF or a broken limit.
    pub async fn handle(self: Arc<Self>, conn: ClientConn) {
        let id = session_id();
        let span = tracing::info_span!("lmtp-login", session = %id, ip = %conn.peer.ip());
        let xclient = self.xclient.allows(&conn.service, conn.peer.ip());
        let mut s = Session {
            conn: LineConn::new(
                conn.stream,
                self.settings.max_line,
                self.settings.login_timeout,
            ),
            client_ip: conn.peer.ip(),
            xclient,
            helo: None,
            mail: None,
            deliveries: Vec::new(),
            bad: 0,
            server: self,
        };
        async move {
            if let Err(e) = s.serve().await {
                tracing::debug!(error = %e, "connection ended");
            }
            s.close_backends().await;
        }
        .instrument(span)
        .await;
    }
}

/// One backend connection of a transaction.
struct Upstream {
    addr: String,
    conn: LineConn<UpstreamStream>,
    /// The connection broke: its recipient gets 451.
    broken: bool,
}

/// One accepted recipient: its backend connection and its warden count.
struct Delivery {
    up: Upstream,
    _guard: DeliveryGuard,
}

impl Upstream {
    async fn read_reply(&mut self) -> Result<Reply, String> {
        let mut parser = ReplyParser::default();
        loop {
            let line = match self.conn.next_line().await {
                Ok(Line::Complete(l)) => l,
                Ok(Line::TooLong) => return Err("reply line too long".into()),
                Err(e) => return Err(e.to_string()),
            };
            let text = String::from_utf8_lossy(&line);
            match parser.feed(&text) {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    async fn command(&mut self, line: &str) -> Result<Reply, String> {
        self.conn.queue(line.as_bytes());
        self.conn.queue(b"\r\n");
        self.conn.flush().await.map_err(|e| e.to_string())?;
        self.read_reply().await
    }
}

enum Step {
    Continue,
    Close,
}

struct Session {
    server: Arc<LmtpLoginServer>,
    conn: LineConn<MailStream>,
    /// The real client: the TCP peer, or what a trusted peer's XCLIENT
    /// said.
    client_ip: IpAddr,
    /// The peer may send XCLIENT.
    xclient: bool,
    helo: Option<String>,
    /// The client's MAIL command, forwarded as sent.
    mail: Option<String>,
    /// Accepted recipients in RCPT order.
    deliveries: Vec<Delivery>,
    bad: u32,
}

fn params_wire(params: &[Param]) -> String {
    params.iter().map(|p| format!(" {}", p.to_wire())).collect()
}

impl Session {
    fn send(&mut self, reply: &Reply) {
        self.conn.queue(&reply.to_bytes());
    }

    async fn serve(&mut self) -> Result<(), LineError> {
        let host = self.server.settings.hostname.clone();
        self.send(&Reply::plain(220, format!("{host} yarilo LMTP ready")));
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

    async fn command(&mut self, line: &[u8]) -> Result<Step, LineError> {
        let cmd = match command::parse(line) {
            Ok(c) => c,
            Err(e) => {
                self.send(&e.reply());
                return Ok(self.bad());
            }
        };
        match cmd {
            Command::Lhlo(helo) => {
                self.reset().await;
                let s = &self.server.settings;
                let size = if s.max_message_size > 0 {
                    format!("SIZE {}", s.max_message_size)
                } else {
                    "SIZE".into()
                };
                let mut lines = vec![
                    s.hostname.clone(),
                    "8BITMIME".into(),
                    "ENHANCEDSTATUSCODES".into(),
                    "PIPELINING".into(),
                    size,
                ];
                if self.xclient {
                    lines.push("XCLIENT ADDR".into());
                }
                self.send(&Reply::multi(250, lines));
                self.helo = Some(helo);
            }
            Command::Mail { from, params } => {
                if self.helo.is_none() {
                    self.send(&r(503, (5, 5, 1), "Send LHLO first"));
                    return Ok(self.bad());
                }
                if self.mail.is_some() {
                    self.send(&r(503, (5, 5, 1), "MAIL already given"));
                    return Ok(self.bad());
                }
                self.mail = Some(format!(
                    "MAIL FROM:{}{}",
                    from.bracketed(),
                    params_wire(&params)
                ));
                self.send(&r(250, (2, 1, 0), "OK"));
            }
            Command::Rcpt { to, params } => {
                let reply = self.rcpt(to.as_str(), &params).await;
                self.send(&reply);
            }
            Command::Data => return self.data().await,
            Command::Rset => {
                self.reset().await;
                self.send(&r(250, (2, 0, 0), "OK"));
            }
            Command::Noop => self.send(&r(250, (2, 0, 0), "OK")),
            Command::Vrfy(_) => self.send(&r(252, (2, 3, 3), "Try RCPT instead")),
            Command::Xclient(params) => {
                let reply = self.xclient(&params).await;
                self.send(&reply);
            }
            Command::Quit => {
                let host = &self.server.settings.hostname;
                let reply = r(221, (2, 0, 0), format!("{host} Bye"));
                self.send(&reply);
                return Ok(Step::Close);
            }
            _ => {
                self.send(&r(502, (5, 5, 1), "Command not implemented"));
                return Ok(self.bad());
            }
        }
        Ok(Step::Continue)
    }

    /// Inbound XCLIENT (earlier director seed: `XCLIENT ADDR=<ip>` →
    /// `220 2.0.0 OK`): from a trusted peer only, outside a transaction;
    /// the new address is the client's from here on (the preambles carry
    /// it), and the session starts over as after a greeting (LHLO again).
    async fn xclient(&mut self, params: &[Param]) -> Reply {
        if !self.xclient {
            return r(550, (5, 7, 0), "XCLIENT not permitted");
        }
        if self.mail.is_some() {
            return r(503, (5, 5, 1), "XCLIENT not allowed inside a transaction");
        }
        match crate::xclient::smtp_addr(params) {
            Ok(Some(ip)) => self.client_ip = ip,
            Ok(None) => {}
            Err(crate::xclient::BadAddr) => return r(501, (5, 5, 4), "Invalid ADDR"),
        }
        self.reset().await;
        self.helo = None;
        tracing::info!(client = %self.client_ip, "XCLIENT: client address forwarded");
        r(220, (2, 0, 0), "OK")
    }

    /// Userdb lookup with a delivery token, warden, routing, the backend
    /// connection with its preamble, then the backend's own RCPT reply.
    async fn rcpt(&mut self, address: &str, params: &[Param]) -> Reply {
        let Some(mail) = self.mail.clone() else {
            return r(503, (5, 5, 1), "MAIL needed first");
        };
        if self.deliveries.len() >= self.server.settings.max_recipients {
            return r(452, (4, 5, 3), "Too many recipients");
        }
        let server = self.server.clone();
        let id = session_id();
        let (base, detail) = strip_detail(address, &server.delimiter);
        let found = match server.auth.lookup_delivery(&base, &id).await {
            Ok(None) if detail.is_some() => server.auth.lookup_delivery(address, &id).await,
            other => other,
        };
        let (user, fields, token) = match found {
            Ok(Some(x)) => x,
            Ok(None) => {
                server.metrics.login(PROTO, "unknown_user");
                return r(550, (5, 1, 1), format!("<{address}> User doesn't exist"));
            }
            Err(e) => {
                server.metrics.login(PROTO, "temporary");
                tracing::warn!(rcpt = %address, error = %e, "userdb lookup failed");
                return r(
                    451,
                    (4, 3, 0),
                    format!("<{address}> Temporary user lookup failure"),
                );
            }
        };
        server.metrics.login(PROTO, "ok");
        let guard = match server.warden.start_delivery(&id, &user).await {
            Ok(g) => g,
            Err(WardenRefusal::Limit(why)) => {
                tracing::info!(user = %user, limit = why.as_str(), "delivery refused by warden");
                return r(
                    451,
                    (4, 7, 0),
                    format!(
                        "<{address}> Too many concurrent deliveries for this user, try again later"
                    ),
                );
            }
            Err(WardenRefusal::Unavailable) => {
                return r(
                    451,
                    (4, 3, 0),
                    format!("<{address}> Temporary failure, try again later"),
                );
            }
        };
        let route = match server.router.route_for(&user, &fields).await {
            Ok(route) => route,
            Err(e) => {
                server.metrics.handoff(PROTO, e.label());
                tracing::warn!(user = %user, error = %e, "no backend");
                return r(451, (4, 4, 0), format!("<{address}> No backend available"));
            }
        };
        let hop = HopPreamble {
            preamble: Preamble {
                addr: self.client_ip,
                session: id,
                user: user.clone(),
                token,
            },
            tag: None,
            helo: None,
        };
        let mut up = match self.open_backend(&route, &hop, &mail).await {
            Ok(up) => up,
            Err((label, why)) => {
                server.metrics.handoff(PROTO, label);
                tracing::warn!(backend = %route.addr, user = %user, error = %why, "backend unavailable");
                return r(451, (4, 4, 0), format!("<{address}> Backend unavailable"));
            }
        };
        let line = format!("RCPT TO:<{address}>{}", params_wire(params));
        match up.command(&line).await {
            Ok(reply) => {
                if reply.is_positive() {
                    server.metrics.handoff(PROTO, "ok");
                    self.deliveries.push(Delivery { up, _guard: guard });
                } else {
                    server.metrics.handoff(PROTO, "refused");
                    close(up).await;
                }
                reply
            }
            Err(e) => {
                server.metrics.handoff(PROTO, "no_answer");
                tracing::warn!(backend = %up.addr, error = %e, "backend failed at RCPT");
                r(451, (4, 4, 0), format!("<{address}> Backend unavailable"))
            }
        }
    }

    /// Dial, preamble, greeting, LHLO, MAIL. Errors carry the hand-off
    /// label.
    async fn open_backend(
        &self,
        route: &crate::route::Route,
        hop: &HopPreamble,
        mail: &str,
    ) -> Result<Upstream, (&'static str, String)> {
        let s = &self.server.settings;
        let addr = &route.addr;
        let stream = dial(addr, self.server.hop_tls.as_ref(), s.connect_timeout)
            .await
            .map_err(|e| {
                route.report_if_unreachable(&e);
                (e.label(), e.to_string())
            })?;
        let mut up = Upstream {
            addr: addr.to_string(),
            conn: LineConn::new(stream, 16 * 1024, s.backend_answer_timeout),
            broken: false,
        };
        let expect = |reply: Result<Reply, String>, what: &str| match reply {
            Ok(r) if r.is_positive() => Ok(r),
            Ok(r) => Err(("refused", format!("{what}: {r}"))),
            Err(e) => Err(("no_answer", format!("{what}: {e}"))),
        };
        // The preamble alone; the backend VERIFYs it, then greets.
        up.conn.queue(hop.encode().as_bytes());
        up.conn
            .flush()
            .await
            .map_err(|e| ("no_answer", format!("preamble: {e}")))?;
        expect(up.read_reply().await, "greeting")?;
        expect(up.command(&format!("LHLO {}", s.hostname)).await, "LHLO")?;
        expect(up.command(mail).await, "MAIL")?;
        Ok(up)
    }

    async fn data(&mut self) -> Result<Step, LineError> {
        if self.mail.is_none() {
            self.send(&r(503, (5, 5, 1), "MAIL needed first"));
            return Ok(self.bad());
        }
        if self.deliveries.is_empty() {
            self.send(&r(503, (5, 5, 1), "No valid recipients"));
            return Ok(self.bad());
        }
        self.send(&Reply::plain(354, "OK"));
        let max = self.server.settings.max_message_size;
        let mut too_big = false;
        let body = loop {
            if let Some(body) = self.conn.lines.take_dot_terminated() {
                break body;
            }
            if max > 0 && self.conn.lines.buffered() as u64 > max + 1024 {
                // Read to the end of DATA, dropping what arrives.
                too_big = true;
                self.conn.lines.drop_dot_body();
            }
            self.conn.fill().await?;
        };
        let replies = if too_big {
            let reply = r(552, (5, 3, 4), "Message too big for system");
            vec![reply; self.deliveries.len()]
        } else {
            self.fan_out(&body).await
        };
        for reply in &replies {
            self.send(reply);
        }
        self.end_transaction().await;
        Ok(Step::Continue)
    }

    /// DATA on every recipient's backend connection at once; the replies
    /// in RCPT order.
    async fn fan_out(&mut self, body: &[u8]) -> Vec<Reply> {
        let sends = self.deliveries.iter_mut().map(|d| async move {
            if d.up.broken {
                return r(451, (4, 4, 0), "Backend unavailable, try again later");
            }
            match deliver(&mut d.up, body).await {
                Ok(reply) => reply,
                Err(e) => {
                    d.up.broken = true;
                    tracing::warn!(backend = %d.up.addr, error = %e, "backend failed at DATA");
                    r(451, (4, 4, 0), "Backend unavailable, try again later")
                }
            }
        });
        futures::future::join_all(sends).await
    }

    /// After DATA or RSET: the backend connections are closed (a new
    /// transaction routes anew) and warden's counts released.
    async fn end_transaction(&mut self) {
        self.close_backends().await;
        self.mail = None;
    }

    async fn reset(&mut self) {
        self.end_transaction().await;
    }

    async fn close_backends(&mut self) {
        let all = std::mem::take(&mut self.deliveries);
        futures::future::join_all(all.into_iter().map(|d| close(d.up))).await;
    }
}

/// QUIT on a connection that still works.
async fn close(mut up: Upstream) {
    if !up.broken {
        let _ = up.command("QUIT").await;
    }
}

/// DATA, the body, and the recipient's reply.
async fn deliver(up: &mut Upstream, body: &[u8]) -> Result<Reply, String> {
    let go = up.command("DATA").await?;
    if go.code != 354 {
        return Ok(go);
    }
    up.conn.queue(body);
    up.conn.queue(b".\r\n");
    up.conn.flush().await.map_err(|e| e.to_string())?;
    up.read_reply().await
}
