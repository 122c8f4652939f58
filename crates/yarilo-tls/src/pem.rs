use std::path::Path;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Every certificate in a PEM file, leaf first.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let data = read(path)?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut data.as_slice()).collect();
    let certs = certs.map_err(|e| TlsError::Pem {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.display().to_string(),
            message: "no CERTIFICATE block found".into(),
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let data = read(path)?;
    rustls_pemfile::private_key(&mut data.as_slice())
        .map_err(|e| TlsError::Pem {
            path: path.display().to_string(),
            message: e.to_string(),
        })?
        .ok_or_else(|| TlsError::Pem {
            path: path.display().to_string(),
            message: "no PRIVATE KEY block found".into(),
        })
}
