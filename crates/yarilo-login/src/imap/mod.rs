//! `imap-login`: IMAP up to authentication (RFC 9051 §6.1–6.2, RFC 3501
//! for IMAP4rev1 clients), then the hand-off to `yarilo imap`.
//!
//! Implemented before login: CAPABILITY, NOOP, LOGOUT, ID (RFC 2971),
//! STARTTLS (§6.2.1), AUTHENTICATE with SASL-IR (§6.2.2, RFC 4959) and
//! LOGIN (§6.2.3); LITERAL+ (RFC 7888) in LOGIN arguments. Every other
//! command is BAD ("Please log in first").
//!
//! The login never answers a successful LOGIN/AUTHENTICATE itself: the
//! preamble carries the command's tag (`TAG=`) and the backend's first
//! line is `<tag> OK [CAPABILITY …] Logged in`, relayed to the client, so
//! the post-login capability list is the backend's. When the backend
//! cannot be reached or refuses, the client gets
//! `<tag> NO [UNAVAILABLE]` and stays not authenticated.
//!
//! Warden ([`crate::warden`]): a connection refused by CONNECT gets
//! `* BYE [UNAVAILABLE] Too many connections` (or `Too many failed
//! logins`) instead of the greeting; a login refused by SESSION_START gets
//! `<tag> NO [LIMIT] Too many sessions for this user.` (RFC 5530 §3) and
//! stays not authenticated; a kick closes the piped connection.

mod framer;
mod session;

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio_rustls::TlsAcceptor;
use yarilo_auth::AuthHandle;
use yarilo_listener::ClientConn;
use yarilo_tls::internal::InternalTls;

use crate::route::Router;
use crate::{LoginMetrics, LoginSettings, LoginWarden};

/// What every `imap-login` session of the process shares.
pub struct ImapLoginServer {
    pub(crate) settings: LoginSettings,
    pub(crate) auth: AuthHandle,
    pub(crate) router: Router,
    /// Internal mTLS for the hop, when enabled.
    pub(crate) hop_tls: Option<InternalTls>,
    /// Client certificates for STARTTLS; `None`: not offered.
    pub(crate) starttls: Option<TlsAcceptor>,
    pub(crate) metrics: LoginMetrics,
    /// Connection and session limits, penalty, kicks (`warden_client`).
    pub(crate) warden: LoginWarden,
    /// Who may forward the client address (XCLIENT, ID x-originating-ip).
    pub(crate) xclient: crate::xclient::XclientPolicy,
}

impl ImapLoginServer {
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
    ) -> Arc<ImapLoginServer> {
        Arc::new(ImapLoginServer {
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

    /// Serves one client connection until it logs out, is handed to a
    /// backend and that pipe ends, or breaks a limit.
    pub async fn handle(self: Arc<Self>, conn: ClientConn) {
        session::Session::new(self, conn).run().await;
    }
}
