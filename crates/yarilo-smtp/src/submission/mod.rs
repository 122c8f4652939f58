//! Message submission (RFC 6409) on `submission` (STARTTLS, RFC 3207) and
//! `submissions` (implicit TLS, RFC 8314), relayed to the site's MTA.
//!
//! Extensions: AUTH (RFC 4954, SASL through `yarilo-auth`), STARTTLS,
//! SIZE (RFC 1870), PIPELINING (RFC 2920), 8BITMIME (RFC 6152), SMTPUTF8
//! (RFC 6531), ENHANCEDSTATUSCODES (RFC 2034), DSN (RFC 3461: RET, ENVID,
//! NOTIFY, ORCPT passed through when the relay offers DSN), CHUNKING
//! (RFC 3030; relayed as DATA).
//!
//! Invariants:
//! * no MAIL before AUTH (530 5.7.0); plaintext mechanisms only over TLS
//!   or from loopback (the authenticator decides from `secured`);
//! * MAIL FROM must be one of the user's addresses ([`sender`]);
//!   anything else is 553 5.7.1 and never reaches the relay;
//! * the relay connection is opened at the first MAIL and MAIL / RCPT are
//!   forwarded as they come, so a relay refusal reaches the client for the
//!   recipient it concerns; any failure to talk to the relay is a 4xx;
//!   250 to DATA is the relay's own 250 — nothing is queued here, so
//!   nothing can be silently dropped.

pub mod sender;
mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;
use yarilo_auth::AuthHandle;
use yarilo_listener::{ClientConn, MailStream};

use crate::metrics::{label, SubmissionMetrics};
use crate::relay::{RelayConnector, RelaySettings};

pub use session::StartTls;

/// Everything Submission needs from the configuration.
#[derive(Debug, Clone)]
pub struct SubmissionSettings {
    pub hostname: String,
    pub relay: RelaySettings,
    /// Domain for login names without `@`.
    pub default_domain: String,
    /// 0 = no limit.
    pub max_message_size: u64,
    pub max_recipients: usize,
    pub max_line_length: usize,
    pub timeout: Duration,
    /// Bound on the TLS handshake after STARTTLS.
    pub starttls_timeout: Duration,
    pub max_bad_commands: u32,
}

impl SubmissionSettings {
    pub fn from_config(c: &yarilo_config::Config) -> SubmissionSettings {
        let s = &c.submission;
        let hostname = if s.hostname.is_empty() {
            c.general.hostname.clone()
        } else {
            s.hostname.clone()
        };
        SubmissionSettings {
            relay: RelaySettings {
                host: s.relay_host.clone(),
                port: s.relay_port,
                ssl: s.relay_ssl,
                ssl_verify: s.relay_ssl_verify,
                ssl_ca_file: s.relay_ssl_ca_file.clone(),
                user: s.relay_user.clone(),
                password: s.relay_password.clone(),
                connect_timeout: Duration::from_secs(s.relay_connect_timeout_seconds.max(1)),
                command_timeout: Duration::from_secs(s.relay_command_timeout_seconds.max(1)),
                helo_name: hostname.clone(),
            },
            default_domain: if s.default_domain.is_empty() {
                hostname.clone()
            } else {
                s.default_domain.clone()
            },
            hostname,
            max_message_size: s.max_message_size,
            max_recipients: s.max_recipients.max(1),
            max_line_length: s.max_line_length.max(512),
            timeout: Duration::from_secs(s.timeout_seconds.max(1)),
            starttls_timeout: Duration::from_secs(s.starttls_timeout_seconds.max(1)),
            max_bad_commands: s.max_bad_commands,
        }
    }
}

impl Default for SubmissionSettings {
    fn default() -> Self {
        SubmissionSettings::from_config(&yarilo_config::Config::default())
    }
}

/// The submission service: one per process.
pub struct SubmissionServer {
    settings: SubmissionSettings,
    auth: AuthHandle,
    starttls: Option<TlsAcceptor>,
    relay: RelayConnector,
    metrics: SubmissionMetrics,
}

impl SubmissionServer {
    /// `starttls`: the acceptor offered as STARTTLS on plain connections
    /// (`None` on `submissions`, where the listener did implicit TLS).
    pub fn new(
        settings: SubmissionSettings,
        auth: AuthHandle,
        starttls: Option<TlsAcceptor>,
        registry: &mut Registry,
    ) -> Arc<Self> {
        let relay = RelayConnector::new(settings.relay.clone());
        Arc::new(SubmissionServer {
            settings,
            auth,
            starttls,
            relay,
            metrics: SubmissionMetrics::register(registry),
        })
    }

    pub fn settings(&self) -> &SubmissionSettings {
        &self.settings
    }

    /// Serves one connection until QUIT, error, timeout or `shutdown`.
    pub async fn handle(
        self: Arc<Self>,
        conn: ClientConn,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let id = crate::received::session_id();
        let span = tracing::info_span!("submission", session = %id, peer = %conn.peer);
        self.serve::<MailStream>(conn.stream, conn.peer, conn.local, id, shutdown)
            .instrument(span)
            .await
    }

    /// [`SubmissionServer::handle`] over any stream that can start TLS.
    pub async fn serve<S: StartTls>(
        self: Arc<Self>,
        stream: S,
        peer: SocketAddr,
        local: SocketAddr,
        id: String,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        self.serve_session(stream, peer, local, id, None, shutdown)
            .await
    }

    /// Runs a connection a login proxy handed over after the client's
    /// EHLO and AUTH succeeded there (the caller verified the preamble;
    /// `conn.peer` is the real client): no greeting, the first line is
    /// `235 2.7.0 Logged in.` and the session is authenticated as `user`
    /// with `helo` as its EHLO domain. STARTTLS is not offered (the hop
    /// is not the client's transport).
    pub async fn handle_proxied(
        self: Arc<Self>,
        conn: ClientConn,
        user: String,
        fields: yarilo_auth::ExtraFields,
        helo: String,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let id = crate::received::session_id();
        let span = tracing::info_span!("submission", session = %id, peer = %conn.peer);
        let proxied = session::Proxied { user, fields, helo };
        self.serve_session::<MailStream>(
            conn.stream,
            conn.peer,
            conn.local,
            id,
            Some(proxied),
            shutdown,
        )
        .instrument(span)
        .await
    }

    async fn serve_session<S: StartTls>(
        self: Arc<Self>,
        stream: S,
        peer: SocketAddr,
        local: SocketAddr,
        id: String,
        proxied: Option<session::Proxied>,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let result = session::run(&self, stream, peer, local, id, proxied, shutdown).await;
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
