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

mod session;

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio_rustls::TlsAcceptor;
use yarilo_auth::AuthHandle;
use yarilo_listener::ClientConn;
use yarilo_tls::internal::InternalTls;

use crate::route::Router;
use crate::{LoginMetrics, LoginSettings};

/// What every `pop3-login` session of the process shares.
pub struct Pop3LoginServer {
    pub(crate) settings: LoginSettings,
    pub(crate) auth: AuthHandle,
    pub(crate) router: Router,
    pub(crate) hop_tls: Option<InternalTls>,
    /// STLS certificate; `None`: not offered.
    pub(crate) starttls: Option<TlsAcceptor>,
    /// `IMPLEMENTATION` in CAPA (`pop3.implementation`); empty hides it.
    pub(crate) implementation: String,
    pub(crate) metrics: LoginMetrics,
}

impl Pop3LoginServer {
    pub fn new(
        settings: LoginSettings,
        auth: AuthHandle,
        router: Router,
        hop_tls: Option<InternalTls>,
        starttls: Option<TlsAcceptor>,
        implementation: String,
        registry: &mut Registry,
    ) -> Arc<Pop3LoginServer> {
        Arc::new(Pop3LoginServer {
            settings,
            auth,
            router,
            hop_tls,
            starttls,
            implementation,
            metrics: LoginMetrics::register(registry),
        })
    }

    /// Serves one client connection until QUIT, a hand-off whose pipe
    /// ends, or a broken limit.
    pub async fn handle(self: Arc<Self>, conn: ClientConn) {
        session::Session::new(self, conn).run().await;
    }
}
