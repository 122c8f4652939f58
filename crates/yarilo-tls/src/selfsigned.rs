use std::path::{Path, PathBuf};

use crate::ca::{issue_self_signed, write_pair};
use crate::TlsError;

/// Returns `<dir>/server.crt` and `<dir>/server.key`, generating a
/// self-signed pair for `hostname` (plus localhost and the loopback
/// addresses) when they do not exist yet. Later starts reuse them, so a
/// client that accepted the certificate once keeps trusting it.
pub fn ensure_self_signed(
    dir: &Path,
    hostname: &str,
) -> Result<(PathBuf, PathBuf, bool), TlsError> {
    let cert = dir.join("server.crt");
    let key = dir.join("server.key");
    if cert.exists() && key.exists() {
        return Ok((cert, key, false));
    }
    let mut names = vec![hostname.to_string()];
    for n in ["localhost", "127.0.0.1", "::1"] {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    }
    let issued = issue_self_signed(&names)?;
    let (cert, key) = write_pair(dir, "server", &issued)?;
    Ok((cert, key, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (c, _, fresh) = ensure_self_signed(dir.path(), "mx.test").unwrap();
        assert!(fresh);
        let first = std::fs::read(&c).unwrap();
        let (c2, _, fresh) = ensure_self_signed(dir.path(), "mx.test").unwrap();
        assert!(!fresh);
        assert_eq!(first, std::fs::read(c2).unwrap());
    }
}
