//! TLS for yarilo.
//!
//! - [`CertStore`]: the certificates of the client-facing listeners (IMAPS,
//!   STARTTLS, …): several certificates chosen by SNI, reloaded from disk
//!   without dropping sessions (new handshakes use the new certificate).
//! - [`ensure_self_signed`]: the certificate `yarilo single` generates on
//!   first start and reuses afterwards.
//! - [`internal`]: mutual TLS between components; clients verify one pinned
//!   name (`internal_tls.server_name`), servers require a client certificate
//!   from the same CA and can read the peer's roles.
//! - [`ca`]: the dev CA and certificate issuing behind `yarctl certs`.
//!
//! Only TLS 1.2 and 1.3 with the ring provider are ever offered.

pub mod ca;
mod certstore;
pub mod internal;
mod pem;
mod roles;
mod selfsigned;

use std::sync::Arc;

pub use certstore::CertStore;
pub use pem::{check_key_permissions, load_certs, load_key, parse_certs};
pub use roles::Role;
pub use selfsigned::ensure_self_signed;
pub use tokio_rustls::{rustls, TlsAcceptor, TlsConnector};

/// Why TLS material could not be used. Raised at start-up or on reload; a
/// failed reload keeps the previous certificates in service.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Pem { path: String, message: String },
    /// A private key others may read: refused at start (and on reload).
    #[error("permissions {mode:04o} for {path} are too open: a private key must not be accessible by others (chmod 600, or 640 for a group)")]
    KeyPermissions { path: String, mode: u32 },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("certificate generation: {0}")]
    Generate(String),
    #[error("{0}")]
    Config(String),
}

/// The one crypto provider every config is built with.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Protocol versions allowed by `min_version` (`"1.2"` or `"1.3"`).
pub fn versions(min_version: &str) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static BOTH: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    static ONLY13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    if min_version == "1.3" {
        &ONLY13
    } else {
        &BOTH
    }
}
