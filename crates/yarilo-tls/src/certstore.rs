use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::{load_certs, load_key, provider, versions, TlsError};

/// The client-facing certificates. The first pair is the default; the
/// others are chosen when the client's SNI matches one of their DNS names
/// (`*.example.org` matches one label). Swapping in reloaded certificates
/// affects new handshakes only: running sessions keep theirs.
pub struct CertStore {
    pairs: Vec<(PathBuf, PathBuf)>,
    loaded: RwLock<Arc<Loaded>>,
}

struct Loaded {
    default: Arc<CertifiedKey>,
    by_name: HashMap<String, Arc<CertifiedKey>>,
    names: Vec<String>,
    stamps: Vec<Option<SystemTime>>,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("pairs", &self.pairs)
            .finish()
    }
}

impl CertStore {
    /// Loads every `(cert, key)` pair; the first is the default.
    pub fn load(pairs: Vec<(PathBuf, PathBuf)>) -> Result<Arc<CertStore>, TlsError> {
        let loaded = load_all(&pairs)?;
        Ok(Arc::new(CertStore {
            pairs,
            loaded: RwLock::new(Arc::new(loaded)),
        }))
    }

    fn current(&self) -> Arc<Loaded> {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the files again. On error the certificates in service stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = load_all(&self.pairs)?;
        tracing::info!(names = ?fresh.names, "TLS certificates reloaded");
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh);
        Ok(())
    }

    /// Reloads if any file's modification time changed since the last load.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        if stamps(&self.pairs) == self.current().stamps {
            return Ok(false);
        }
        self.reload().map(|()| true)
    }

    /// Polls the files every `interval` and reloads changed ones; the task
    /// ends when the store is dropped everywhere else.
    pub fn spawn_watch(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(store) = weak.upgrade() else { return };
                if let Err(e) = store.reload_if_changed() {
                    tracing::error!(error = %e, "TLS certificate reload failed; keeping the previous ones");
                }
            }
        })
    }

    /// The DNS names the loaded certificates answer for.
    pub fn names(&self) -> Vec<String> {
        self.current().names.clone()
    }

    /// A server configuration resolving certificates through this store.
    pub fn server_config(
        self: &Arc<Self>,
        min_version: &str,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions(min_version))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.clone())));
        Ok(Arc::new(config))
    }

    pub fn acceptor(self: &Arc<Self>, min_version: &str) -> Result<TlsAcceptor, TlsError> {
        Ok(TlsAcceptor::from(self.server_config(min_version)?))
    }

    fn resolve_name(&self, sni: Option<&str>) -> Arc<CertifiedKey> {
        let loaded = self.current();
        if let Some(name) = sni {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if let Some(k) = loaded.by_name.get(&name) {
                return k.clone();
            }
            if let Some((_, parent)) = name.split_once('.') {
                if let Some(k) = loaded.by_name.get(&format!("*.{parent}")) {
                    return k.clone();
                }
            }
        }
        loaded.default.clone()
    }
}

#[derive(Debug)]
struct Resolver(Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.resolve_name(hello.server_name()))
    }
}

fn stamps(pairs: &[(PathBuf, PathBuf)]) -> Vec<Option<SystemTime>> {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    pairs
        .iter()
        .flat_map(|(c, k)| [mtime(c), mtime(k)])
        .collect()
}

fn load_all(pairs: &[(PathBuf, PathBuf)]) -> Result<Loaded, TlsError> {
    let stamps = stamps(pairs);
    let mut keys = Vec::new();
    let mut by_name = HashMap::new();
    let mut names = Vec::new();
    for (cert_path, key_path) in pairs {
        let certs = load_certs(cert_path)?;
        let key = load_key(key_path)?;
        let signing = provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| TlsError::Pem {
                path: key_path.display().to_string(),
                message: e.to_string(),
            })?;
        let dns = dns_names(&certs[0]);
        let ck = Arc::new(CertifiedKey::new(certs, signing));
        ck.keys_match().map_err(|e| TlsError::Pem {
            path: key_path.display().to_string(),
            message: format!("key does not belong to {}: {e}", cert_path.display()),
        })?;
        for n in dns {
            let n = n.to_ascii_lowercase();
            names.push(n.clone());
            by_name.entry(n).or_insert_with(|| ck.clone());
        }
        keys.push(ck);
    }
    let default = keys
        .first()
        .cloned()
        .ok_or_else(|| TlsError::Config("no certificate configured".into()))?;
    Ok(Loaded {
        default,
        by_name,
        names,
        stamps,
    })
}

fn dns_names(cert: &rustls::pki_types::CertificateDer<'_>) -> Vec<String> {
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
            GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::{issue_self_signed, write_pair};

    #[test]
    fn sni_picks_the_matching_certificate_and_reload_swaps_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = issue_self_signed(&["mail.example.org".into()]).unwrap();
        let b = issue_self_signed(&["*.example.net".into()]).unwrap();
        let (ac, ak) = write_pair(dir.path(), "a", &a).unwrap();
        let (bc, bk) = write_pair(dir.path(), "b", &b).unwrap();
        let store = CertStore::load(vec![(ac.clone(), ak.clone()), (bc, bk)]).unwrap();
        let default = store.resolve_name(None);
        assert!(Arc::ptr_eq(
            &default,
            &store.resolve_name(Some("mail.example.org"))
        ));
        let other = store.resolve_name(Some("imap.example.net"));
        assert!(!Arc::ptr_eq(&default, &other));
        assert!(Arc::ptr_eq(
            &default,
            &store.resolve_name(Some("unknown.test"))
        ));

        assert!(!store.reload_if_changed().unwrap());
        let c = issue_self_signed(&["mail.example.org".into()]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        write_pair(dir.path(), "a", &c).unwrap();
        assert!(store.reload_if_changed().unwrap());
        assert!(!Arc::ptr_eq(&default, &store.resolve_name(None)));

        // A broken file keeps the old certificates in service.
        std::fs::write(&ac, "garbage").unwrap();
        assert!(store.reload().is_err());
        assert_eq!(store.names()[0], "mail.example.org");
    }

    #[tokio::test]
    async fn reload_keeps_running_sessions_and_serves_new_ones_the_new_certificate() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let first = issue_self_signed(&["localhost".into()]).unwrap();
        let (c, k) = write_pair(dir.path(), "srv", &first).unwrap();
        let store = CertStore::load(vec![(c, k)]).unwrap();
        let acceptor = store.acceptor("1.2").unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // An echo server: every accepted session echoes until EOF.
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut s) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        // The client trusts both certificates, and reports which one it saw.
        let second = issue_self_signed(&["localhost".into()]).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for pem in [&first.cert_pem, &second.cert_pem] {
            for cert in crate::parse_certs(pem.as_bytes()).unwrap() {
                roots.add(cert).unwrap();
            }
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        // A resumed session would report the certificate of the first one.
        client.resumption = rustls::client::Resumption::disabled();
        let client = Arc::new(client);
        let connect = || async {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tokio_rustls::TlsConnector::from(client.clone())
                .connect("localhost".try_into().unwrap(), tcp)
                .await
                .unwrap()
        };
        let leaf = |s: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>| {
            s.get_ref().1.peer_certificates().unwrap()[0]
                .as_ref()
                .to_vec()
        };
        let mut old_session = connect().await;
        let old_leaf = leaf(&old_session);

        std::thread::sleep(Duration::from_millis(20));
        write_pair(dir.path(), "srv", &second).unwrap();
        assert!(store.reload_if_changed().unwrap());

        // The running session is untouched by the reload.
        old_session.write_all(b"still here").await.unwrap();
        let mut buf = [0u8; 10];
        old_session.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"still here");
        // A new session gets the new certificate.
        let new_session = connect().await;
        assert_ne!(leaf(&new_session), old_leaf);
    }
}
