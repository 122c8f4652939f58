//! One LMTP session: the state machine and its driver loop.
//!
//! States: `Greeted` (before LHLO) → `Ready` (after LHLO) → `Mail` (after
//! MAIL, carrying the transaction) → back to `Ready` after the data, RSET
//! or LHLO. The state is an enum whose variants carry only what is valid
//! in them.

use std::net::{IpAddr, SocketAddr};
use std::pin::pin;

use tokio::io::{AsyncRead, AsyncWrite};

use super::deliver::{normalise, open_user, quota_reply, Deliverer, Envelope, Recipient};
use super::LmtpServer;
use crate::address::{strip_detail, Path};
use crate::command::{self, Command, Param};
use crate::data::Body;
use crate::error::SmtpError;
use crate::io::{Conn, Input};
use crate::metrics::label;
use crate::reply::{EnhancedCode, Reply};
use yarilo_store::QuotaLimits;

/// A mail transaction (RFC 5321 §3.3).
struct Transaction {
    from: Path,
    rcpts: Vec<Recipient>,
    /// BDAT chunks so far (RFC 3030); `None` until the first BDAT.
    chunks: Option<Body>,
}

enum State {
    Greeted,
    Ready { helo: String },
    Mail { helo: String, tx: Transaction },
}

struct Session<'a> {
    server: &'a LmtpServer,
    id: String,
    /// The client address (from XCLIENT when a trusted peer sent one).
    client_ip: IpAddr,
    /// The TCP peer, which XCLIENT trust is decided on.
    peer: SocketAddr,
    /// Behind `lmtp-login`: the one user the hop's preamble was verified
    /// for; every RCPT must resolve to it.
    bound: Option<String>,
    state: State,
    bad_commands: u32,
}

fn r(code: u16, e: (u8, u16, u16), text: impl Into<String>) -> Reply {
    Reply::new(code, EnhancedCode::new(e.0, e.1, e.2), text)
}

/// What the loop does after a command.
enum Next {
    Continue,
    Quit,
}

/// A session behind `lmtp-login`: the client address and the verified
/// user from the preamble.
pub(super) struct Proxied {
    pub client_ip: IpAddr,
    pub user: String,
}

pub(super) async fn run<S>(
    server: &LmtpServer,
    stream: S,
    peer: SocketAddr,
    id: String,
    proxied: Option<Proxied>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), SmtpError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let settings = &server.settings;
    let mut conn = Conn::new(stream, settings.max_line_length, settings.timeout);
    let mut shutdown = pin!(shutdown);
    let (client_ip, bound) = match proxied {
        Some(p) => (p.client_ip, Some(p.user)),
        None => (peer.ip(), None),
    };
    let mut s = Session {
        server,
        id,
        client_ip,
        peer,
        bound,
        state: State::Greeted,
        bad_commands: 0,
    };
    conn.queue(&Reply::plain(
        220,
        format!("{} yarilo LMTP ready", settings.hostname),
    ));
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
    match &result {
        Err(SmtpError::Timeout) => {
            conn.queue(&r(421, (4, 4, 2), format!("{} Timeout", settings.hostname)))
        }
        Err(SmtpError::Shutdown) => conn.queue(&r(
            421,
            (4, 3, 2),
            format!("{} Server shutting down", settings.hostname),
        )),
        Err(SmtpError::TooManyErrors) => conn.queue(&r(
            421,
            (4, 7, 0),
            format!("{} Too many invalid commands", settings.hostname),
        )),
        _ => {}
    }
    conn.close().await;
    result
}

impl Session<'_> {
    fn bad(&mut self) -> Result<Next, SmtpError> {
        self.bad_commands += 1;
        if self.server.settings.max_bad_commands > 0
            && self.bad_commands >= self.server.settings.max_bad_commands
        {
            return Err(SmtpError::TooManyErrors);
        }
        Ok(Next::Continue)
    }

    async fn handle_line<S>(&mut self, conn: &mut Conn<S>, line: &[u8]) -> Result<Next, SmtpError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let cmd = match command::parse(line) {
            Ok(c) => c,
            Err(e) => {
                conn.queue(&e.reply());
                return self.bad();
            }
        };
        match cmd {
            Command::Lhlo(helo) => {
                conn.queue(&self.lhlo_reply());
                self.state = State::Ready { helo };
            }
            Command::Helo(_) | Command::Ehlo(_) => {
                conn.queue(&r(500, (5, 5, 1), "This is LMTP: use LHLO"));
                return self.bad();
            }
            Command::Mail { from, params } => conn.queue(&self.handle_mail(from, &params)),
            Command::Rcpt { to, params } => {
                let reply = self.handle_rcpt(to, &params).await;
                conn.queue(&reply);
            }
            Command::Data => self.handle_data(conn).await?,
            Command::Bdat { size, last } => self.handle_bdat(conn, size, last).await?,
            Command::Rset => {
                self.reset();
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
                "Commands: LHLO MAIL RCPT DATA BDAT RSET NOOP VRFY QUIT",
            )),
            Command::Xclient(params) => conn.queue(&self.handle_xclient(&params)),
            Command::StartTls | Command::Auth { .. } => {
                conn.queue(&r(502, (5, 5, 1), "Not supported in LMTP"));
                return self.bad();
            }
        }
        Ok(Next::Continue)
    }

    fn lhlo_reply(&self) -> Reply {
        let s = &self.server.settings;
        let mut lines = vec![
            s.hostname.clone(),
            "8BITMIME".to_string(),
            "CHUNKING".to_string(),
            "ENHANCEDSTATUSCODES".to_string(),
            "PIPELINING".to_string(),
            if s.max_message_size > 0 {
                format!("SIZE {}", s.max_message_size)
            } else {
                "SIZE".to_string()
            },
            "SMTPUTF8".to_string(),
        ];
        if self.xclient_allowed() {
            lines.push("XCLIENT ADDR PORT".to_string());
        }
        Reply::multi(250, lines)
    }

    fn xclient_allowed(&self) -> bool {
        // Behind lmtp-login the preamble carried the client address.
        self.bound.is_none()
            && self
                .server
                .settings
                .xclient_trusted_nets
                .iter()
                .any(|n| n.contains(&self.peer.ip()))
    }

    fn reset(&mut self) {
        self.state = match std::mem::replace(&mut self.state, State::Greeted) {
            State::Mail { helo, .. } => State::Ready { helo },
            other => other,
        };
    }

    /// XCLIENT (wire form from the director design): only from trusted
    /// peers, only outside a transaction; `ADDR` replaces the client
    /// address used in logs and `Received:`.
    fn handle_xclient(&mut self, params: &[Param]) -> Reply {
        if !self.xclient_allowed() {
            return r(550, (5, 7, 0), "XCLIENT not permitted");
        }
        if matches!(self.state, State::Mail { .. }) {
            return r(503, (5, 5, 1), "XCLIENT not allowed inside a transaction");
        }
        for p in params {
            if p.keyword == "ADDR" {
                let v = p.value.as_deref().unwrap_or("");
                let v = v.strip_prefix("IPV6:").unwrap_or(v);
                match v.parse::<IpAddr>() {
                    Ok(ip) => self.client_ip = ip,
                    Err(_) => return r(501, (5, 5, 4), "Invalid ADDR"),
                }
            }
        }
        tracing::debug!(client = %self.client_ip, "XCLIENT");
        r(220, (2, 0, 0), "OK")
    }

    fn handle_mail(&mut self, from: Path, params: &[Param]) -> Reply {
        let helo = match &self.state {
            State::Greeted => return r(503, (5, 5, 1), "Send LHLO first"),
            State::Mail { .. } => return r(503, (5, 5, 1), "MAIL already given"),
            State::Ready { helo } => helo.clone(),
        };
        let max = self.server.settings.max_message_size;
        for p in params {
            match (p.keyword.as_str(), p.value.as_deref()) {
                // RFC 1870 §6.
                ("SIZE", Some(v)) => match v.parse::<u64>() {
                    Ok(n) if max > 0 && n > max => {
                        return r(552, (5, 3, 4), "Message too big for system")
                    }
                    Ok(_) => {}
                    Err(_) => return r(501, (5, 5, 4), "Invalid SIZE"),
                },
                ("BODY", Some(v))
                    if v.eq_ignore_ascii_case("7BIT") || v.eq_ignore_ascii_case("8BITMIME") => {}
                ("SMTPUTF8", None) => {}
                // RFC 4954 §5: accepted and ignored by a non-relaying server.
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
        self.state = State::Mail {
            helo,
            tx: Transaction {
                from,
                rcpts: Vec::new(),
                chunks: None,
            },
        };
        r(250, (2, 1, 0), "OK")
    }

    async fn handle_rcpt(&mut self, to: Path, params: &[Param]) -> Reply {
        let settings = &self.server.settings;
        let State::Mail { tx, .. } = &mut self.state else {
            return r(503, (5, 5, 1), "MAIL needed first");
        };
        if tx.chunks.is_some() {
            return r(503, (5, 5, 1), "RCPT not allowed after BDAT");
        }
        if let Some(p) = params.first() {
            return r(
                555,
                (5, 5, 4),
                format!("Unsupported parameter {}", p.keyword),
            );
        }
        if tx.rcpts.len() >= settings.max_recipients {
            return r(452, (4, 5, 3), "Too many recipients");
        }
        let address = to.as_str().to_string();
        let (base, detail) = strip_detail(&address, &settings.recipient_delimiter);
        // RFC 5321 §4.5.1: postmaster without a domain is a valid recipient;
        // it is looked up like any other name.
        let lookup = match self.server.auth.lookup_user(&base, "lmtp").await {
            Ok(Some(found)) => Some(found),
            Ok(None) if detail.is_some() => {
                // The delimiter may be part of a real name (`a+b@x` exists).
                match self.server.auth.lookup_user(&address, "lmtp").await {
                    Ok(Some((u, f))) => {
                        return self.accept_rcpt(address, u, f, None).await;
                    }
                    Ok(None) => None,
                    Err(e) => return tempfail_lookup(&address, &e),
                }
            }
            Ok(None) => None,
            Err(e) => return tempfail_lookup(&address, &e),
        };
        match lookup {
            Some((user, fields)) => self.accept_rcpt(address, user, fields, detail).await,
            None => {
                self.server
                    .metrics
                    .deliveries
                    .get_or_create(&label("unknown_user"))
                    .inc();
                r(
                    550,
                    (5, 1, 1),
                    format!("<{address}> User doesn't exist: {address}"),
                )
            }
        }
    }

    async fn accept_rcpt(
        &mut self,
        address: String,
        user: String,
        fields: yarilo_auth::ExtraFields,
        detail: Option<String>,
    ) -> Reply {
        let settings = &self.server.settings;
        if self.bound.as_deref().is_some_and(|b| b != user) {
            tracing::warn!(%user, bound = ?self.bound, "RCPT for another user than the hop's preamble");
            return r(
                550,
                (5, 7, 1),
                format!("<{address}> not the recipient this connection was opened for"),
            );
        }
        let limits = QuotaLimits::from_fields(fields.iter());
        if settings.rcpt_check_quota && !limits.is_unlimited() {
            let usage = match open_user(&self.server.store, &user, &fields).await {
                Ok(us) => us.quota().await,
                Err(e) => Err(e),
            };
            match usage {
                Ok(u) if limits.is_full(&u) => {
                    self.server
                        .metrics
                        .deliveries
                        .get_or_create(&label("quota"))
                        .inc();
                    return quota_reply(settings, &address);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(%user, error = %e, "quota lookup failed");
                    return r(
                        451,
                        (4, 3, 0),
                        format!("<{address}> Temporary internal error"),
                    );
                }
            }
        }
        let State::Mail { tx, .. } = &mut self.state else {
            return r(503, (5, 5, 1), "MAIL needed first");
        };
        tx.rcpts.push(Recipient {
            address,
            user,
            fields,
            detail,
            limits,
        });
        r(250, (2, 1, 5), "OK")
    }

    /// DATA (RFC 5321 §4.1.1.4, RFC 2033 §4.2).
    async fn handle_data<S>(&mut self, conn: &mut Conn<S>) -> Result<(), SmtpError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        match &self.state {
            State::Mail { tx, .. } if tx.chunks.is_some() => {
                conn.queue(&r(503, (5, 5, 1), "DATA not allowed after BDAT"));
                return Ok(());
            }
            State::Mail { tx, .. } if !tx.rcpts.is_empty() => {}
            State::Mail { .. } => {
                conn.queue(&r(503, (5, 5, 1), "No valid recipients"));
                return Ok(());
            }
            _ => {
                conn.queue(&r(503, (5, 5, 1), "MAIL needed first"));
                return Ok(());
            }
        }
        conn.queue(&Reply::plain(354, "OK"));
        conn.flush().await?;
        let mut body = Body::new(self.server.settings.max_message_size);
        conn.read_data(&mut body).await?;
        self.finish(conn, body).await;
        Ok(())
    }

    /// BDAT (RFC 3030 §2): the chunk is always read, even when the command
    /// is refused, so the stream stays in sync.
    async fn handle_bdat<S>(
        &mut self,
        conn: &mut Conn<S>,
        size: u64,
        last: bool,
    ) -> Result<(), SmtpError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let max = self.server.settings.max_message_size;
        let refusal = match &self.state {
            State::Mail { tx, .. } if !tx.rcpts.is_empty() => None,
            State::Mail { .. } => Some(r(503, (5, 5, 1), "No valid recipients")),
            _ => Some(r(503, (5, 5, 1), "MAIL needed first")),
        };
        if let Some(reply) = refusal {
            let mut sink = Body::new(1);
            conn.read_chunk(size, &mut sink).await?;
            conn.queue(&reply);
            return Ok(());
        }
        let State::Mail { tx, .. } = &mut self.state else {
            return Ok(());
        };
        let body = tx.chunks.get_or_insert_with(|| Body::new(max));
        conn.read_chunk(size, body).await?;
        if !last {
            conn.queue(&r(250, (2, 0, 0), format!("{size} octets received")));
            return Ok(());
        }
        let body = tx.chunks.take().unwrap_or_default();
        self.finish(conn, body).await;
        Ok(())
    }

    /// After the last byte: one reply per recipient, then back to Ready.
    async fn finish<S>(&mut self, conn: &mut Conn<S>, body: Body)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (helo, tx) = match std::mem::replace(&mut self.state, State::Greeted) {
            State::Mail { helo, tx } => (helo, tx),
            other => {
                self.state = other;
                return;
            }
        };
        self.state = State::Ready { helo: helo.clone() };
        if body.overflowed() {
            for rcpt in &tx.rcpts {
                self.server
                    .metrics
                    .deliveries
                    .get_or_create(&label("too_large"))
                    .inc();
                conn.queue(&r(
                    552,
                    (5, 3, 4),
                    format!("<{}> Message too big for system", rcpt.address),
                ));
            }
            return;
        }
        let message_lf = normalise(&body.data);
        let env = Envelope {
            sender: tx.from.as_str(),
            helo: &helo,
            client_ip: self.client_ip,
            session: &self.id,
            message: &body.data,
            message_lf: &message_lf,
        };
        let deliverer = Deliverer {
            settings: &self.server.settings,
            store: &self.server.store,
            filter: self.server.filter.as_ref(),
            metrics: &self.server.metrics,
        };
        for rcpt in &tx.rcpts {
            let reply = deliverer.deliver(rcpt, &env).await;
            conn.queue(&reply);
        }
    }
}

fn tempfail_lookup(address: &str, e: &str) -> Reply {
    tracing::warn!(rcpt = %address, error = %e, "userdb lookup failed");
    r(
        451,
        (4, 3, 0),
        format!("<{address}> Temporary internal error"),
    )
}
