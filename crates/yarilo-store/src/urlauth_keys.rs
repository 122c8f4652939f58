//! URLAUTH access keys (RFC 4467 §3): one random key per mailbox of a user,
//! in `<mail root>/yarilo-urlauth-keys` (`<mailbox hex> <key hex>` lines),
//! written durably under the user's `idx:` lock. Resetting a key revokes
//! every URL authorised with it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::durable::write_atomic;
use crate::error::StoreError;

pub const FILE: &str = "yarilo-urlauth-keys";

pub(crate) fn load(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(root.join(FILE)) else {
        return out;
    };
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
    out
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
    write_atomic(&path, text.as_bytes())
        .map_err(|e| StoreError::io(format!("write {}", path.display()), e))
}
