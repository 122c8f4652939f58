//! `lmtp-login`: an LMTP (RFC 2033) proxy in front of `yarilo lmtp`
//! backends. There are no credentials: each RCPT is looked up in the
//! userdb (auth service `lookup_user`, `service=lmtp`, the
//! `lmtp.recipient_delimiter` detail stripped as the backend does) and
//! routed like a login (`login.lmtp.backend_addr` or a director LOOKUP
//! with the user's `director_tag`).
//!
//! Per backend the proxy opens one LMTP connection at the first RCPT
//! routed to it: LHLO, `XCLIENT ADDR=<client ip>` when the backend offers
//! XCLIENT (it trusts `general.xclient.trusted_nets`), MAIL FROM as the
//! client sent it, then each RCPT; the backend's RCPT reply is the
//! client's. At DATA the body is read once (bounded by
//! `lmtp.max_message_size`, 64 MiB when that is 0), sent to each backend
//! in turn, and the per-recipient replies are returned in RCPT order
//! (RFC 2033 §4.2). A backend that breaks answers 451 4.4.0 for its own
//! recipients only.
//!
//! Extensions offered: PIPELINING, ENHANCEDSTATUSCODES, 8BITMIME, SIZE.
//! Not offered: CHUNKING (BDAT), SMTPUTF8, XCLIENT towards lmtp-login.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tracing::Instrument;
use yarilo_auth::AuthHandle;
use yarilo_listener::{ClientConn, MailStream};
use yarilo_smtp::address::strip_detail;
use yarilo_smtp::command::{self, Command, Param};
use yarilo_smtp::reply::{EnhancedCode, Reply, ReplyParser};
use yarilo_tls::internal::InternalTls;

use crate::handoff::session_id;
use crate::hop::{dial, UpstreamStream};
use crate::lines::{Line, LineConn, LineError};
use crate::route::Router;
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
    metrics: LoginMetrics,
}

impl LmtpLoginServer {
    pub fn new(
        settings: LoginSettings,
        auth: AuthHandle,
        router: Router,
        hop_tls: Option<InternalTls>,
        delimiter: String,
        registry: &mut Registry,
    ) -> Arc<LmtpLoginServer> {
        Arc::new(LmtpLoginServer {
            settings,
            auth,
            router,
            hop_tls,
            delimiter,
            metrics: LoginMetrics::register(registry),
        })
    }

    /// Serves one LMTP client until QUIT, EOF or a broken limit.
    pub async fn handle(self: Arc<Self>, conn: ClientConn) {
        let id = session_id();
        let span = tracing::info_span!("lmtp-login", session = %id, ip = %conn.peer.ip());
        let mut s = Session {
            conn: LineConn::new(
                conn.stream,
                self.settings.max_line,
                self.settings.login_timeout,
            ),
            peer: conn.peer,
            helo: None,
            mail: None,
            rcpts: Vec::new(),
            backends: Vec::new(),
            by_addr: HashMap::new(),
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
    /// Accepted recipients on this backend, in order.
    accepted: usize,
    /// The connection broke: its recipients get 451.
    broken: bool,
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
    peer: SocketAddr,
    helo: Option<String>,
    /// The client's MAIL command, forwarded as sent.
    mail: Option<String>,
    /// Accepted recipients in order: index into `backends`.
    rcpts: Vec<usize>,
    backends: Vec<Upstream>,
    by_addr: HashMap<String, usize>,
    bad: u32,
}

fn xclient_addr(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => format!("IPV6:{v6}"),
        },
    }
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
                let lines = vec![
                    s.hostname.clone(),
                    "8BITMIME".into(),
                    "ENHANCEDSTATUSCODES".into(),
                    "PIPELINING".into(),
                    size,
                ];
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

    /// Userdb lookup, routing, then the backend's own RCPT reply.
    async fn rcpt(&mut self, address: &str, params: &[Param]) -> Reply {
        let Some(mail) = self.mail.clone() else {
            return r(503, (5, 5, 1), "MAIL needed first");
        };
        if self.rcpts.len() >= self.server.settings.max_recipients {
            return r(452, (4, 5, 3), "Too many recipients");
        }
        let server = self.server.clone();
        let (base, detail) = strip_detail(address, &server.delimiter);
        let found = match server.auth.lookup_user(&base, PROTO).await {
            Ok(None) if detail.is_some() => server.auth.lookup_user(address, PROTO).await,
            other => other,
        };
        let (user, fields) = match found {
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
        let addr = match server.router.backend_for(&user, &fields).await {
            Ok(a) => a,
            Err(e) => {
                server.metrics.handoff(PROTO, e.label());
                tracing::warn!(user = %user, error = %e, "no backend");
                return r(451, (4, 4, 0), format!("<{address}> No backend available"));
            }
        };
        let idx = match self.by_addr.get(&addr) {
            Some(&i) => i,
            None => match self.open_backend(&addr, &mail).await {
                Ok(up) => {
                    server.metrics.handoff(PROTO, "ok");
                    self.backends.push(up);
                    let i = self.backends.len() - 1;
                    self.by_addr.insert(addr.clone(), i);
                    i
                }
                Err((label, why)) => {
                    server.metrics.handoff(PROTO, label);
                    tracing::warn!(backend = %addr, error = %why, "backend unavailable");
                    return r(451, (4, 4, 0), format!("<{address}> Backend unavailable"));
                }
            },
        };
        let Some(up) = self.backends.get_mut(idx) else {
            return r(451, (4, 3, 0), "Internal error");
        };
        if up.broken {
            return r(451, (4, 4, 0), format!("<{address}> Backend unavailable"));
        }
        let line = format!("RCPT TO:<{address}>{}", params_wire(params));
        match up.command(&line).await {
            Ok(reply) => {
                if reply.is_positive() {
                    up.accepted += 1;
                    self.rcpts.push(idx);
                }
                reply
            }
            Err(e) => {
                up.broken = true;
                tracing::warn!(backend = %up.addr, error = %e, "backend failed at RCPT");
                r(451, (4, 4, 0), format!("<{address}> Backend unavailable"))
            }
        }
    }

    /// Dial, LHLO, XCLIENT, MAIL. Errors carry the hand-off label.
    async fn open_backend(
        &self,
        addr: &str,
        mail: &str,
    ) -> Result<Upstream, (&'static str, String)> {
        let s = &self.server.settings;
        let stream = dial(addr, self.server.hop_tls.as_ref(), s.connect_timeout)
            .await
            .map_err(|e| (e.label(), e.to_string()))?;
        let mut up = Upstream {
            addr: addr.to_string(),
            conn: LineConn::new(stream, 16 * 1024, s.backend_answer_timeout),
            accepted: 0,
            broken: false,
        };
        let expect = |reply: Result<Reply, String>, what: &str| match reply {
            Ok(r) if r.is_positive() => Ok(r),
            Ok(r) => Err(("refused", format!("{what}: {r}"))),
            Err(e) => Err(("no_answer", format!("{what}: {e}"))),
        };
        expect(up.read_reply().await, "greeting")?;
        let lhlo = expect(up.command(&format!("LHLO {}", s.hostname)).await, "LHLO")?;
        let offers_xclient = lhlo
            .lines
            .iter()
            .any(|l| l.split_whitespace().next() == Some("XCLIENT"));
        if offers_xclient {
            let line = format!("XCLIENT ADDR={}", xclient_addr(self.peer.ip()));
            expect(up.command(&line).await, "XCLIENT")?;
        } else {
            tracing::warn!(backend = %addr, "backend does not offer XCLIENT to this proxy; it sees the proxy's address");
        }
        expect(up.command(mail).await, "MAIL")?;
        Ok(up)
    }

    async fn data(&mut self) -> Result<Step, LineError> {
        if self.mail.is_none() {
            self.send(&r(503, (5, 5, 1), "MAIL needed first"));
            return Ok(self.bad());
        }
        if self.rcpts.is_empty() {
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
            vec![reply; self.rcpts.len()]
        } else {
            self.fan_out(&body).await
        };
        for reply in &replies {
            self.send(reply);
        }
        self.end_transaction().await;
        Ok(Step::Continue)
    }

    /// DATA on every backend in turn; the replies in RCPT order.
    async fn fan_out(&mut self, body: &[u8]) -> Vec<Reply> {
        let mut per_backend: Vec<std::collections::VecDeque<Reply>> = Vec::new();
        for up in &mut self.backends {
            let mut replies = std::collections::VecDeque::new();
            if up.accepted > 0 && !up.broken {
                match deliver(up, body).await {
                    Ok(v) => replies.extend(v),
                    Err(e) => {
                        up.broken = true;
                        tracing::warn!(backend = %up.addr, error = %e, "backend failed at DATA");
                    }
                }
            }
            per_backend.push(replies);
        }
        self.rcpts
            .iter()
            .map(|&i| {
                per_backend
                    .get_mut(i)
                    .and_then(|q| q.pop_front())
                    .unwrap_or_else(|| r(451, (4, 4, 0), "Backend unavailable, try again later"))
            })
            .collect()
    }

    /// After DATA or RSET: the backends are closed (a new transaction
    /// may route elsewhere).
    async fn end_transaction(&mut self) {
        self.close_backends().await;
        self.mail = None;
        self.rcpts.clear();
    }

    async fn reset(&mut self) {
        self.end_transaction().await;
    }

    async fn close_backends(&mut self) {
        for mut up in self.backends.drain(..) {
            if !up.broken {
                let _ = up.command("QUIT").await;
            }
        }
        self.by_addr.clear();
    }
}

/// DATA, the body, and one reply per accepted recipient.
async fn deliver(up: &mut Upstream, body: &[u8]) -> Result<Vec<Reply>, String> {
    let go = up.command("DATA").await?;
    if go.code != 354 {
        return Ok(vec![go; up.accepted]);
    }
    up.conn.queue(body);
    up.conn.queue(b".\r\n");
    up.conn.flush().await.map_err(|e| e.to_string())?;
    let mut replies = Vec::with_capacity(up.accepted);
    for _ in 0..up.accepted {
        replies.push(up.read_reply().await?);
    }
    Ok(replies)
}
