//! Mutual TLS between yarilo components.
//!
//! Every internal client verifies the server against one pinned name
//! (`internal_tls.server_name`), not the host it dialled: services are
//! reached by short name, FQDN or pod IP interchangeably, and one stable
//! SAN on the shared certificate is what makes that verifiable. Servers
//! require a client certificate chaining to the same CA; what the peer may
//! do is read from its role SANs with [`peer_roles`].

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{client, TlsAcceptor, TlsConnector};

use crate::roles::ROLE_URI_PREFIX;
use crate::{load_certs, load_key, provider, versions, Role, TlsError};

/// Both sides of internal mTLS, built once from `internal_tls.*`.
#[derive(Clone)]
pub struct InternalTls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    own_cert: CertificateDer<'static>,
}

impl std::fmt::Debug for InternalTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalTls")
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl InternalTls {
    /// `Ok(None)` when `internal_tls.enabled` is false (plain TCP).
    pub fn from_config(cfg: &yarilo_config::InternalTls) -> Result<Option<InternalTls>, TlsError> {
        if !cfg.enabled {
            return Ok(None);
        }
        if cfg.server_name.is_empty() {
            return Err(TlsError::Config(
                "internal_tls.enabled is true but internal_tls.server_name is empty: set it to \
                 the SAN every internal certificate carries (e.g. the one `yarctl certs init \
                 --server-name` wrote)"
                    .into(),
            ));
        }
        Self::build(
            Path::new(&cfg.cert),
            Path::new(&cfg.key),
            Path::new(&cfg.ca),
            &cfg.server_name,
        )
        .map(Some)
    }

    /// Builds from PEM files and the name clients pin.
    pub fn build(
        cert: &Path,
        key: &Path,
        ca: &Path,
        server_name: &str,
    ) -> Result<InternalTls, TlsError> {
        let chain = load_certs(cert)?;
        let own_cert = chain[0].clone();
        let mut roots = RootCertStore::empty();
        for c in load_certs(ca)? {
            roots.add(c).map_err(|e| TlsError::Pem {
                path: ca.display().to_string(),
                message: e.to_string(),
            })?;
        }
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Config(format!("client verifier: {e}")))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions("1.2"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), load_key(key)?)?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions("1.2"))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, load_key(key)?)?;
        let server_name = ServerName::try_from(server_name.to_string()).map_err(|_| {
            TlsError::Config(format!("`{server_name}` is not a valid TLS server name"))
        })?;
        Ok(InternalTls {
            server: Arc::new(server),
            client: Arc::new(client),
            server_name,
            own_cert,
        })
    }

    /// The same material pinning another name (the director ring pins
    /// `ring_tls_server_name`).
    pub fn with_server_name(&self, name: &str) -> Result<InternalTls, TlsError> {
        let mut copy = self.clone();
        copy.server_name = ServerName::try_from(name.to_string())
            .map_err(|_| TlsError::Config(format!("`{name}` is not a valid TLS server name")))?;
        Ok(copy)
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.server.clone())
    }

    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// Wraps a dialled stream, verifying the pinned name.
    pub async fn connect<IO>(&self, io: IO) -> std::io::Result<client::TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        TlsConnector::from(self.client.clone())
            .connect(self.server_name.clone(), io)
            .await
    }

    /// Whether our own certificate carries `name` as a DNS SAN (components
    /// warn at start-up when the name they will be verified against is
    /// missing).
    pub fn own_certificate_has_name(&self, name: &str) -> bool {
        san_entries(&self.own_cert)
            .iter()
            .any(|s| matches!(s, San::Dns(d) if d.eq_ignore_ascii_case(name)))
    }
}

enum San {
    Dns(String),
    Uri(String),
}

fn san_entries(cert: &CertificateDer<'_>) -> Vec<San> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some(San::Dns(d.to_string())),
            GeneralName::URI(u) => Some(San::Uri(u.to_string())),
            _ => None,
        })
        .collect()
}

/// The roles in a peer's leaf certificate (empty when it presented none):
/// URI SANs `yarilo-role:<role>` and DNS SANs `<role>.role.yarilo.internal`
/// alike, each role once, in order.
pub fn peer_roles(chain: Option<&[CertificateDer<'_>]>) -> Vec<Role> {
    let Some(leaf) = chain.and_then(|c| c.first()) else {
        return Vec::new();
    };
    let mut roles: Vec<Role> = san_entries(leaf)
        .into_iter()
        .filter_map(|s| match s {
            San::Uri(u) => u.strip_prefix(ROLE_URI_PREFIX).and_then(|r| r.parse().ok()),
            San::Dns(d) => Role::from_dns_name(&d),
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    roles
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::{write_pair, Authority};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn material(dir: &Path, roles: &[Role]) -> InternalTls {
        let ca = Authority::generate("test CA").unwrap();
        std::fs::write(dir.join("ca.crt"), &ca.cert_pem).unwrap();
        let issued = ca.issue(&["yarilo-internal".into()], roles).unwrap();
        let (c, k) = write_pair(dir, "tls", &issued).unwrap();
        InternalTls::build(&c, &k, &dir.join("ca.crt"), "yarilo-internal").unwrap()
    }

    #[tokio::test]
    async fn mutual_handshake_carries_roles_and_pins_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let tls = material(dir.path(), &[Role::Login, Role::Director]);
        assert!(tls.own_certificate_has_name("yarilo-internal"));
        assert!(!tls.own_certificate_has_name("other"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tls.acceptor();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = acceptor.accept(tcp).await.unwrap();
            let roles = peer_roles(s.get_ref().1.peer_certificates());
            s.write_all(b"ok").await.unwrap();
            s.shutdown().await.unwrap();
            roles
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut c = tls.connect(tcp).await.unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).await.unwrap();
        assert_eq!(buf, b"ok");
        assert_eq!(server.await.unwrap(), vec![Role::Login, Role::Director]);

        // Pinning a name the certificate lacks fails the handshake.
        let wrong = tls.with_server_name("not-the-name").unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tls.acceptor();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let _ = acceptor.accept(tcp).await;
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(wrong.connect(tcp).await.is_err());
    }

    #[tokio::test]
    async fn dns_role_sans_grant_roles_like_uri_ones() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::generate("test CA").unwrap();
        // What cert-manager issues from the charts: DNS names only.
        let issued = ca
            .issue(
                &[
                    "yarilo-internal".into(),
                    "director.role.yarilo.internal".into(),
                    "Backend-Reg.Role.Yarilo.Internal".into(),
                    "login.role.example.org".into(),
                ],
                &[Role::Director],
            )
            .unwrap();
        let (c, _) = write_pair(dir.path(), "tls", &issued).unwrap();
        let der = crate::load_certs(&c).unwrap();
        assert_eq!(
            peer_roles(Some(&der)),
            vec![Role::BackendReg, Role::Director]
        );
        assert_eq!(Role::from_dns_name("nosuch.role.yarilo.internal"), None);
        assert_eq!(Role::Fts.dns_name(), "fts.role.yarilo.internal");
    }

    #[tokio::test]
    async fn a_client_from_another_ca_is_refused() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let server_side = material(a.path(), &[Role::Locks]);
        let stranger = material(b.path(), &[Role::Admin]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = server_side.acceptor();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            acceptor.accept(tcp).await.is_ok()
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = stranger.connect(tcp).await;
        assert!(!server.await.unwrap());
    }
}
