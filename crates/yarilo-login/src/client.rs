//! What every login session does the same way with its client
//! connection: upgrade it to TLS within a bound, and describe it to the
//! auth service.

use std::net::SocketAddr;
use std::time::Duration;

use tokio_rustls::TlsAcceptor;
use yarilo_auth::AuthRequest;
use yarilo_listener::MailStream;

/// STARTTLS / STLS: the handshake, bounded by `within`.
pub(crate) async fn upgrade_tls(
    stream: &mut MailStream,
    acceptor: &TlsAcceptor,
    within: Duration,
) -> std::io::Result<()> {
    stream.upgrade_within(acceptor, within).await
}

/// The auth request for a client of `proto` (the real client address:
/// after a PROXY header, not the load balancer's).
pub(crate) fn auth_request(
    proto: &str,
    peer: SocketAddr,
    local: SocketAddr,
    session: &str,
    secured: bool,
) -> AuthRequest {
    AuthRequest {
        service: proto.into(),
        client_ip: peer.ip(),
        local_ip: Some(local.ip()),
        session: session.to_string(),
        secured,
    }
}
