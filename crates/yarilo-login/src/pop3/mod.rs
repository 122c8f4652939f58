//! `pop3-login`: POP3 up to authentication (RFC 1939 §4–7, RFC 2449 CAPA
//! and response codes, RFC 5034 SASL AUTH, RFC 2595 §4 STLS), then the
//! hand-off to `yarilo pop3`.
//!
//! Answered here, in the AUTHORIZATION state: CAPA, USER, PASS, AUTH
//! (with and without an initial response, continuations, `*` cancel),
//! STLS, QUIT. APOP is not offered (no timestamp in the greeting).
//! TRANSACTION commands are `-ERR` and counted as bad commands.
//!
//! The login never answers a successful PASS/AUTH itself: the backend's
//! first line after the preamble is `+OK Logged in.` once it has opened
//! the maildrop (RFC 1939 §7: the server must lock the maildrop before
//! `+OK`), and that line is relayed. When the backend cannot be reached
//! or answers `-ERR` (mailbox locked, store down), the client gets that
//! `-ERR` (or `-ERR [SYS/TEMP]`) and stays in AUTHORIZATION.
//!
//! Warden ([`crate::warden`]): a connection refused by CONNECT gets
//! `-ERR [SYS/TEMP] Too many connections` (or `Too many failed logins`)
//! instead of the greeting; a login refused by SESSION_START gets `-ERR
//! [IN-USE] Too many sessions for this user.` (RFC 2449 §8.1.2: the
//! maildrop is busy with other sessions) and stays in AUTHORIZATION; a
//! kick closes the piped connection.

mod session;

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio_rustls::TlsAcceptor;
use yarilo_auth::AuthHandle;
use yarilo_listener::ClientConn;
use yarilo_tls::internal::InternalTls;

use crate::route::Router;
use crate::{LoginMetrics, LoginSettings, LoginWarden};

/// What every `pop3-login` session of the process shares.
pub struct Pop3LoginServer {
    pub(crate) settings: LoginSettings,
    pub(crate) auth: AuthHandle,
    pub(crate) router: Router,
    pub(crate) hop_tls: Option<InternalTls>,
    /// STLS certificate; `None`: not offered.
    pub(crate) starttls: Option<TlsAcceptor>,
    pub(crate) metrics: LoginMetrics,
    /// Connection and session limits, penalty, kicks (`warden_client`).
    pub(crate) warden: LoginWarden,
    /// Who may forward the client address (XCLIENT).
    pub(crate) xclient: crate::xclient::XclientPolicy,
}

impl Pop3LoginServer {
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
    ) -> Arc<Pop3LoginServer> {
        Arc::new(Pop3LoginServer {
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

    /// Serves one client connection until QUIT, a hand-off whose pipe
    /// ends, or a broken limit.
    pub async fn handle(self: Arc<Self>, conn: ClientConn) {
        session::Session::new(self, conn).run().await;
    }
}
