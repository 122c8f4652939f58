//! URLAUTH access keys (RFC 4467 §3): one random key per mailbox of a user,
//! in `<mail root>/yarilo-urlauth-keys` (`<mailbox hex> <key hex>` lines),
//! written durably under the user's `idx:` lock. Resetting a key revokes
//! every URL authorised with it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::durable::write_atomic_private;
use crate::error::StoreError;

pub const FILE: &str = "yarilo-urlauth-keys";

/// The keys. A key file others can read is refused (its keys may have
/// leaked; as ssh refuses an unprotected key): URLAUTH fails until an
/// operator makes it owner-only, and RESETKEY (all mailboxes) replaces it.
pub(crate) fn load(root: &Path) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let path = root.join(FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(out);
    };
    let mode = std::fs::metadata(&path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0);
    if mode & 0o007 != 0 {
        return Err(StoreError::InsecureKeyFile {
            path: path.display().to_string(),
            mode,
        });
    }
    for line in text.lines() {
        let Some((m, k)) = line.split_once(' ') else {
            continue;
        };
        let (Ok(m), Ok(k)) = (hex::decode(m), hex::decode(k)) else {
            continue;
        };
        if let Ok(m) = String::from_utf8(m) {
            out.insert(m, k);
        }
    }
    Ok(out)
}

pub(crate) fn save(root: &Path, keys: &BTreeMap<String, Vec<u8>>) -> Result<(), StoreError> {
    let mut text = String::new();
    for (m, k) in keys {
        text.push_str(&hex::encode(m.as_bytes()));
        text.push(' ');
        text.push_str(&hex::encode(k));
        text.push('\n');
    }
    let path = root.join(FILE);
    write_atomic_private(&path, text.as_bytes())
        .map_err(|e| StoreError::io(format!("write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn keys_are_written_owner_only_and_an_exposed_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut keys = BTreeMap::new();
        keys.insert("INBOX".to_string(), vec![7u8; 32]);
        save(dir.path(), &keys).unwrap();
        let path = dir.path().join(FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load(dir.path()).unwrap(), keys);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("too open"), "{err}");
        // A rewrite (RESETKEY) makes it private again.
        save(dir.path(), &BTreeMap::new()).unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
    }
}
