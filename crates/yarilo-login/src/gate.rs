//! The backend's side of the hop: who may hand it a session, and the
//! proof that the session was authenticated.
//!
//! A connection is admitted when (1) the peer is a login process — its
//! internal mTLS certificate carries the `login` role, or, with internal
//! TLS off, its address is in `general.xclient.trusted_nets`; (2) its
//! first line is a well-formed preamble, read within
//! `login.preamble_timeout_ms` and at most [`MAX_HOP_PREAMBLE`] bytes;
//! (3) the auth service VERIFYs the token for that session, user and this
//! backend's service (tokens are single-use, so a replay fails). Anything
//! else is closed without a byte written: the client behind a login proxy
//! then gets `NO [UNAVAILABLE]` from the proxy.
//!
//! [`MAX_HOP_PREAMBLE`]: crate::preamble::MAX_HOP_PREAMBLE

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use yarilo_auth::{AuthHandle, ExtraFields};
use yarilo_listener::{ClientConn, MailStream};
use yarilo_tls::Role;

use crate::preamble::{read_preamble, ReadPreambleError};

/// How a backend decides whom to trust.
#[derive(Debug, Clone)]
pub struct GateSettings {
    /// `imap`, `pop3`, …: the `service=` VERIFY enforces.
    pub service: &'static str,
    /// Internal mTLS is on: trust is the peer certificate's `login` role.
    pub mtls: bool,
    /// With mTLS off: peers allowed to send a preamble.
    pub trusted_nets: Vec<IpNet>,
    pub preamble_timeout: Duration,
}

impl GateSettings {
    /// From `general.xclient.trusted_nets`, `internal_tls.enabled` and
    /// `login.preamble_timeout_ms`. Fails when nobody could ever connect
    /// (mTLS off and no trusted network).
    pub fn from_config(
        c: &yarilo_config::Config,
        service: &'static str,
    ) -> Result<GateSettings, yarilo_config::ConfigError> {
        let mtls = c.internal_tls.enabled;
        if !mtls && c.general.xclient.trusted_nets.is_empty() {
            return Err(yarilo_config::ConfigError::invalid(
                "general.xclient.trusted_nets",
                "a backend needs internal_tls.enabled or the login proxies' networks here; \
                 as configured no login proxy could hand it a session",
            ));
        }
        Ok(GateSettings {
            service,
            mtls,
            trusted_nets: c.general.xclient.trusted_nets.clone(),
            preamble_timeout: Duration::from_millis(c.login.preamble_timeout_ms),
        })
    }
}

/// A session handed over by a login process.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub user: String,
    /// userdb fields from the auth service (`home`, …).
    pub fields: ExtraFields,
    /// The real client, as the login process saw it.
    pub client_ip: IpAddr,
    /// The login's session id (the warden id).
    pub session: String,
    /// IMAP: the tag of the client's login command.
    pub tag: Option<String>,
    /// SMTP submission: the client's EHLO domain.
    pub helo: Option<String>,
}

/// Why a connection was refused; it is closed.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Not a login process. Client (peer) fault.
    #[error("untrusted peer {0}")]
    Untrusted(String),
    /// No usable preamble. Peer fault.
    #[error("preamble: {0}")]
    Preamble(#[from] ReadPreambleError),
    /// The auth service did not confirm the token (unknown, replayed,
    /// for another user/session/service) or was unreachable.
    #[error("token not verified: {0}")]
    Verify(String),
}

impl GateError {
    fn label(&self) -> &'static str {
        match self {
            GateError::Untrusted(_) => "untrusted",
            GateError::Preamble(ReadPreambleError::Timeout) => "timeout",
            GateError::Preamble(_) => "malformed",
            GateError::Verify(_) => "verify_failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabels {
    service: &'static str,
    result: &'static str,
}

/// Admits sessions on a backend.
#[derive(Clone)]
pub struct PreambleGate {
    settings: GateSettings,
    auth: AuthHandle,
    outcomes: Family<GateLabels, Counter>,
}

impl PreambleGate {
    pub fn new(settings: GateSettings, auth: AuthHandle, registry: &mut Registry) -> PreambleGate {
        let outcomes = Family::<GateLabels, Counter>::default();
        registry.register(
            "yarilo_backend_preambles",
            "Connections from login proxies by outcome (ok, untrusted, malformed, timeout, verify_failed)",
            outcomes.clone(),
        );
        PreambleGate {
            settings,
            auth,
            outcomes,
        }
    }

    /// The service this gate admits for (`imap`, `pop3`, …).
    pub fn service(&self) -> &'static str {
        self.settings.service
    }

    /// Checks the peer, reads and VERIFYs the preamble. On success
    /// `conn.peer` is the real client (port 0: the login does not forward
    /// it), so the session logs and limits by the right address.
    pub async fn admit(&self, conn: &mut ClientConn) -> Result<Admitted, GateError> {
        let r = self.admit_inner(conn).await;
        let result = match &r {
            Ok(_) => "ok",
            Err(e) => e.label(),
        };
        self.outcomes
            .get_or_create(&GateLabels {
                service: self.settings.service,
                result,
            })
            .inc();
        match &r {
            Ok(a) => tracing::info!(
                service = self.settings.service,
                login_peer = %conn.peer,
                client_ip = %a.client_ip,
                session = %a.session,
                user = %a.user,
                "preamble accepted"
            ),
            Err(e) => tracing::warn!(
                service = self.settings.service,
                peer = %conn.peer,
                error = %e,
                "connection refused before the session"
            ),
        }
        if let Ok(a) = &r {
            conn.peer = std::net::SocketAddr::new(a.client_ip, 0);
        }
        r
    }

    async fn admit_inner(&self, conn: &mut ClientConn) -> Result<Admitted, GateError> {
        self.check_peer(conn)?;
        let hop = read_preamble(&mut conn.stream, self.settings.preamble_timeout).await?;
        let p = hop.preamble;
        let verified = self
            .auth
            .verify(&p.token, &p.session, self.settings.service, &p.user)
            .await
            .map_err(GateError::Verify)?;
        Ok(Admitted {
            user: verified.user,
            fields: verified.fields,
            client_ip: p.addr,
            session: p.session,
            tag: hop.tag,
            helo: hop.helo,
        })
    }

    fn check_peer(&self, conn: &ClientConn) -> Result<(), GateError> {
        if self.settings.mtls {
            let MailStream::Tls(tls) = &conn.stream else {
                return Err(GateError::Untrusted(format!("{} without TLS", conn.peer)));
            };
            let roles = yarilo_tls::internal::peer_roles(tls.get_ref().1.peer_certificates());
            if roles.contains(&Role::Login) {
                return Ok(());
            }
            return Err(GateError::Untrusted(format!(
                "{}: certificate has no login role",
                conn.peer
            )));
        }
        let ip = conn.peer.ip();
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        if self.settings.trusted_nets.iter().any(|n| n.contains(&ip)) {
            Ok(())
        } else {
            Err(GateError::Untrusted(format!(
                "{ip} is not in general.xclient.trusted_nets"
            )))
        }
    }
}
