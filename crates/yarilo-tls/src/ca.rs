//! A small CA for development and tests, and certificate issuing.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use crate::{Role, TlsError};

/// A certificate and its key, both PEM.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA able to sign.
pub struct Authority {
    cert: rcgen::Certificate,
    key: KeyPair,
    pub cert_pem: String,
}

fn gen_err(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

impl Authority {
    /// A fresh CA named `common_name`, valid ten years.
    pub fn generate(common_name: &str) -> Result<Authority, TlsError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let key = KeyPair::generate().map_err(gen_err)?;
        let cert = params.self_signed(&key).map_err(gen_err)?;
        let cert_pem = cert.pem();
        Ok(Authority {
            cert,
            key,
            cert_pem,
        })
    }

    /// Loads a CA written by [`Authority::write`].
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Authority, TlsError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| TlsError::Io {
                path: p.display().to_string(),
                source,
            })
        };
        let cert_pem = read(cert_path)?;
        crate::check_key_permissions(key_path)?;
        let key = KeyPair::from_pem(&read(key_path)?).map_err(gen_err)?;
        let params = CertificateParams::from_ca_cert_pem(&cert_pem).map_err(gen_err)?;
        // Re-signing the same parameters with the same key yields an issuer
        // with the same name and key: what verification of issued
        // certificates depends on.
        let cert = params.self_signed(&key).map_err(gen_err)?;
        Ok(Authority {
            cert,
            key,
            cert_pem,
        })
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Issues a certificate usable as TLS server and client, with the given
    /// DNS names / IP addresses and role URIs as SANs.
    pub fn issue(&self, names: &[String], roles: &[Role]) -> Result<Issued, TlsError> {
        let mut params = leaf_params(names)?;
        for role in roles {
            params
                .subject_alt_names
                .push(SanType::URI(role.uri().try_into().map_err(gen_err)?));
        }
        let key = KeyPair::generate().map_err(gen_err)?;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(gen_err)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn leaf_params(names: &[String]) -> Result<CertificateParams, TlsError> {
    if names.is_empty() {
        return Err(TlsError::Config(
            "a certificate needs at least one name".into(),
        ));
    }
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, names[0].as_str());
    params.distinguished_name = dn;
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    for name in names {
        let san = match name.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(name.as_str().try_into().map_err(gen_err)?),
        };
        params.subject_alt_names.push(san);
    }
    Ok(params)
}

/// A self-signed server certificate for `names`.
pub fn issue_self_signed(names: &[String]) -> Result<Issued, TlsError> {
    let params = leaf_params(names)?;
    let key = KeyPair::generate().map_err(gen_err)?;
    let cert = params.self_signed(&key).map_err(gen_err)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Writes `<dir>/<stem>.crt` and `<dir>/<stem>.key` (the key mode 0600),
/// each atomically, and returns their paths.
pub fn write_pair(dir: &Path, stem: &str, issued: &Issued) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    write_file(&key, issued.key_pem.as_bytes(), 0o600)?;
    write_file(&cert, issued.cert_pem.as_bytes(), 0o644)?;
    Ok((cert, key))
}

/// Durable, atomic write: temp file, fsync, rename, fsync of the directory.
/// The file has exactly `mode` from its first byte on (set on the open
/// file, so neither the umask nor a leftover temp file can widen it): a
/// key is never readable by others, not even for a moment.
pub fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |source| TlsError::Io {
        path: path.display().to_string(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}.{:08x}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id(),
        rand_u32()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode & 0o700)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Ok(())
}

/// A random number for temp names (no `rand` dependency here).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}
