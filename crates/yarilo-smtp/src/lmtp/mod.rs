//! LMTP (RFC 2033) delivery into the store.
//!
//! Implements: LHLO, MAIL, RCPT, DATA, BDAT (RFC 3030 CHUNKING), RSET,
//! NOOP, VRFY (252), HELP, QUIT, and XCLIENT ADDR/PORT from
//! `general.xclient.trusted_nets` where `services.lmtp.xclient_protocol`
//! and `general.xclient.enabled` ask for it (`yarilo single`, MTAs
//! delivering directly). Behind `lmtp-login` ([`LmtpServer::handle_proxied`])
//! the hop's verified preamble gives the client address and the one user
//! the connection may deliver to. Extensions: PIPELINING (RFC 2920),
//! ENHANCEDSTATUSCODES (RFC 2034), 8BITMIME (RFC 6152), SMTPUTF8
//! (RFC 6531), CHUNKING (RFC 3030), SIZE (RFC 1870).
//!
//! Invariants:
//! * one reply per accepted recipient after DATA / BDAT LAST, in RCPT
//!   order (RFC 2033 §4.2), and 250 only once that copy is durable;
//! * each recipient gets its own copy with its own `Delivered-To:`;
//! * the userdb is asked per RCPT: unknown → 550 5.1.1, lookup failure →
//!   451 4.3.0; a full mailbox → 552 5.2.2 (452 4.2.2 with
//!   `quota_full_tempfail`), at RCPT and again at DATA;
//! * the store serialises writers per mailbox itself (`mbox:` lock and
//!   Dovecot's uid list dotlock); LMTP takes no lock of its own.

mod deliver;
pub mod filter;
mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use prometheus_client::registry::Registry;
use tracing::Instrument;
use yarilo_auth::AuthHandle;
use yarilo_listener::ClientConn;
use yarilo_store::Store;

pub use filter::{DeliveryAction, DeliveryContext, DeliveryFilter, FilterFuture, KeepFilter};

use crate::metrics::{label, LmtpMetrics};

/// Everything LMTP needs from the configuration.
#[derive(Debug, Clone)]
pub struct LmtpSettings {
    /// Greeting / LHLO name.
    pub hostname: String,
    pub save_to_detail_mailbox: bool,
    pub recipient_delimiter: String,
    pub mailbox_autocreate: bool,
    /// 0 = no limit.
    pub max_message_size: u64,
    pub max_recipients: usize,
    pub rcpt_check_quota: bool,
    pub quota_full_tempfail: bool,
    pub add_received_header: bool,
    pub max_line_length: usize,
    pub timeout: Duration,
    pub max_bad_commands: u32,
    /// Peers allowed to send XCLIENT: `general.xclient.trusted_nets` when
    /// `general.xclient.enabled` and `services.lmtp.xclient_protocol`,
    /// else none.
    pub xclient_trusted_nets: Vec<IpNet>,
}

impl LmtpSettings {
    pub fn from_config(c: &yarilo_config::Config) -> LmtpSettings {
        let l = &c.lmtp;
        LmtpSettings {
            hostname: if l.hostname.is_empty() {
                c.general.hostname.clone()
            } else {
                l.hostname.clone()
            },
            save_to_detail_mailbox: l.save_to_detail_mailbox,
            recipient_delimiter: l.recipient_delimiter.clone(),
            mailbox_autocreate: l.mailbox_autocreate,
            max_message_size: l.max_message_size,
            max_recipients: l.max_recipients.max(1),
            rcpt_check_quota: l.rcpt_check_quota,
            quota_full_tempfail: l.quota_full_tempfail,
            add_received_header: l.add_received_header,
            max_line_length: l.max_line_length.max(512),
            timeout: Duration::from_secs(l.timeout_seconds.max(1)),
            max_bad_commands: l.max_bad_commands,
            // Inbound XCLIENT only where the listener asks for it.
            xclient_trusted_nets: if c.general.xclient.enabled && c.services.lmtp.xclient_protocol {
                c.general.xclient.trusted_nets.clone()
            } else {
                Vec::new()
            },
        }
    }
}

impl Default for LmtpSettings {
    fn default() -> Self {
        LmtpSettings::from_config(&yarilo_config::Config::default())
    }
}

/// The LMTP service: one per process, shared by every session.
pub struct LmtpServer {
    settings: LmtpSettings,
    store: Store,
    auth: AuthHandle,
    filter: Arc<dyn DeliveryFilter>,
    metrics: LmtpMetrics,
}

impl LmtpServer {
    /// A server that keeps every message (no Sieve).
    pub fn new(
        settings: LmtpSettings,
        store: Store,
        auth: AuthHandle,
        registry: &mut Registry,
    ) -> Arc<Self> {
        LmtpServer::with_filter(settings, store, auth, Arc::new(KeepFilter), registry)
    }

    /// A server whose deliveries go through `filter` (Sieve).
    pub fn with_filter(
        settings: LmtpSettings,
        store: Store,
        auth: AuthHandle,
        filter: Arc<dyn DeliveryFilter>,
        registry: &mut Registry,
    ) -> Arc<Self> {
        Arc::new(LmtpServer {
            settings,
            store,
            auth,
            filter,
            metrics: LmtpMetrics::register(registry),
        })
    }

    pub fn settings(&self) -> &LmtpSettings {
        &self.settings
    }

    /// Serves one connection until QUIT, error, timeout or `shutdown`.
    pub async fn handle(
        self: Arc<Self>,
        conn: ClientConn,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let id = crate::received::session_id();
        let span = tracing::info_span!("lmtp", session = %id, peer = %conn.peer);
        self.serve(conn.stream, conn.peer, id, shutdown)
            .instrument(span)
            .await
    }

    /// A connection from `lmtp-login` whose preamble the gate verified:
    /// `client_ip` and `user` from it (every RCPT must be that user; the
    /// `Received:` header names the real client).
    pub async fn handle_proxied(
        self: Arc<Self>,
        conn: ClientConn,
        user: String,
        client_ip: std::net::IpAddr,
        session: String,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let span = tracing::info_span!("lmtp", session = %session, peer = %conn.peer, %user);
        let proxied = session::Proxied { client_ip, user };
        self.serve_inner(conn.stream, conn.peer, session, Some(proxied), shutdown)
            .instrument(span)
            .await
    }

    /// [`LmtpServer::handle`] over any stream (tests, other transports).
    pub async fn serve<S>(
        self: Arc<Self>,
        stream: S,
        peer: SocketAddr,
        id: String,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
    {
        self.serve_inner(stream, peer, id, None, shutdown).await
    }

    async fn serve_inner<S>(
        self: Arc<Self>,
        stream: S,
        peer: SocketAddr,
        id: String,
        proxied: Option<session::Proxied>,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
    {
        let result = session::run(&self, stream, peer, id, proxied, shutdown).await;
        let outcome = match &result {
            Ok(()) => "quit",
            Err(e) => e.label(),
        };
        if let Err(e) = &result {
            tracing::debug!(error = %e, "session ended");
        }
        self.metrics.sessions.get_or_create(&label(outcome)).inc();
    }
}
