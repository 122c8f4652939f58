//! Reading certificates and private keys from PEM files (with the PEM
//! parser of rustls' own `pki-types`), and the permission rule for keys.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn pem_error(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::Pem {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Every certificate in a PEM file, leaf first.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let data = read(path)?;
    let certs = parse_certs(&data).map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no CERTIFICATE block found"));
    }
    Ok(certs)
}

/// Every certificate in PEM text (none is not an error here).
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{e:?}"))
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file, which
/// must not be readable by others (see [`check_key_permissions`]).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    check_key_permissions(path)?;
    let data = read(path)?;
    PrivateKeyDer::from_pem_slice(&data).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            pem_error(path, "no PRIVATE KEY block found")
        }
        e => pem_error(path, format!("{e:?}")),
    })
}

/// Refuses a private key file (or any secret file) that others may read
/// or write, as ssh refuses an unprotected key: the key is as good as
/// published, and serving with it would hide that. Owner and group access
/// are fine (a key shared with an `ssl-cert` group is common). The mode
/// is that of the file a symlink points at (Kubernetes mounts secrets
/// through symlinks; set the volume's `defaultMode` to 0400 or 0440).
pub fn check_key_permissions(path: &Path) -> Result<(), TlsError> {
    let meta = std::fs::metadata(path).map_err(|source| TlsError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o007 != 0 {
        return Err(TlsError::KeyPermissions {
            path: path.display().to_string(),
            mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_others_can_read_is_refused_and_a_private_one_loads() {
        let dir = tempfile::tempdir().unwrap();
        let issued = crate::ca::issue_self_signed(&["localhost".into()]).unwrap();
        let key = dir.path().join("k.pem");
        std::fs::write(&key, issued.key_pem.as_bytes()).unwrap();
        for (mode, ok) in [
            (0o644, false),
            (0o604, false),
            (0o602, false),
            (0o640, true),
            (0o600, true),
            (0o400, true),
        ] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
            let got = load_key(&key);
            assert_eq!(got.is_ok(), ok, "mode {mode:o}: {:?}", got.err());
            if let Err(e) = got {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("{mode:04o}")) && text.contains("too open"),
                    "{text}"
                );
            }
        }
        // Through a symlink (as Kubernetes mounts it): the target's mode.
        let link = dir.path().join("link.pem");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_key(&link).is_err());
    }

    #[test]
    fn certificates_and_keys_parse_from_pem_and_garbage_is_refused() {
        let issued = crate::ca::issue_self_signed(&["localhost".into()]).unwrap();
        assert_eq!(parse_certs(issued.cert_pem.as_bytes()).unwrap().len(), 1);
        assert!(parse_certs(b"").unwrap().is_empty());
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.pem");
        std::fs::write(
            &bad,
            b"-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_key(&bad).is_err());
        std::fs::write(&bad, b"nothing here\n").unwrap();
        assert!(load_key(&bad)
            .unwrap_err()
            .to_string()
            .contains("no PRIVATE KEY"));
    }
}
