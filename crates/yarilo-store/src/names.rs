//! Mailbox names ↔ directories.
//!
//! On disk Dovecot 2.3 stores folder names in modified UTF-7 (RFC 3501
//! §5.1.3); the API speaks UTF-8. Maildir++: `Foo.Bar` ↔ `<root>/.Foo.Bar`;
//! `LAYOUT=fs`: `Foo/Bar` ↔ `<root>/Foo/Bar`. `INBOX` is case-insensitive
//! and lives where the location says.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::cleanup::Leftovers;
use crate::location::{Layout, UserLocation};

/// Why a mailbox name is refused (nothing on disk is touched).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid mailbox name {name:?}: {reason}")]
pub struct NameError {
    pub name: String,
    pub reason: &'static str,
}

/// Normalizes `INBOX` case and checks a name is safe to map to a path.
pub fn normalize(name: &str, layout: Layout) -> Result<String, NameError> {
    let err = |reason| NameError {
        name: name.to_string(),
        reason,
    };
    if name.eq_ignore_ascii_case("INBOX") {
        return Ok("INBOX".to_string());
    }
    if name.is_empty() || name.len() > 1024 {
        return Err(err("empty or too long"));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(err("control characters"));
    }
    let sep = layout.separator();
    if layout == Layout::MaildirPlusPlus && name.contains('/') {
        return Err(err("'/' is not allowed"));
    }
    for part in name.split(sep) {
        if part.is_empty() {
            return Err(err("empty hierarchy level"));
        }
        if part == "." || part == ".." || (layout == Layout::Fs && part.starts_with('.')) {
            return Err(err("dot component"));
        }
    }
    if name.starts_with('~') {
        return Err(err("leading '~'"));
    }
    // Dovecot's DELETE renames into `.DOVECOT-TRASHED`; it is never a
    // mailbox (see crate::cleanup).
    if layout == Layout::MaildirPlusPlus && name == "DOVECOT-TRASHED" {
        return Err(err("reserved for Dovecot's DELETE"));
    }
    let mut normalized = name.to_string();
    // `INBOX.x` children keep the canonical INBOX spelling.
    if let Some(rest) = name.get(5..) {
        if name[..5].eq_ignore_ascii_case("INBOX") && rest.starts_with(sep) {
            normalized = format!("INBOX{rest}");
        }
    }
    Ok(normalized)
}

/// The Maildir directory of a (normalized) mailbox.
pub fn mailbox_dir(loc: &UserLocation, name: &str) -> PathBuf {
    if name == "INBOX" {
        return loc.inbox.clone();
    }
    let encoded = mutf7_encode(name);
    match loc.layout {
        Layout::MaildirPlusPlus => loc.root.join(format!(".{encoded}")),
        Layout::Fs => loc.root.join(encoded),
    }
}

/// The index directory of a mailbox, mirroring its Maildir path under
/// the index root.
pub fn index_dir(loc: &UserLocation, name: &str) -> Option<PathBuf> {
    let root = loc.index_root.as_ref()?;
    let dir = mailbox_dir(loc, name);
    if name == "INBOX" && loc.inbox != loc.root {
        return Some(root.join("INBOX"));
    }
    match dir.strip_prefix(&loc.root) {
        Ok(rel) => Some(root.join(rel)),
        Err(_) => Some(root.join(format!(".{}", mutf7_encode(name)))),
    }
}

/// Lists the mailbox names under the root (INBOX included). Directories
/// without `cur/` are hierarchy-only and skipped, and so are what crashed
/// writers left (see [`crate::cleanup`]).
pub fn list_mailboxes(loc: &UserLocation) -> std::io::Result<Vec<String>> {
    scan_root(loc, SystemTime::now()).map(|(names, _)| names)
}

/// [`list_mailboxes`], plus the leftovers found in the root on the way.
pub fn scan_root(loc: &UserLocation, now: SystemTime) -> std::io::Result<(Vec<String>, Leftovers)> {
    let mut out = vec!["INBOX".to_string()];
    let mut leftovers = Leftovers::default();
    match loc.layout {
        Layout::MaildirPlusPlus => {
            let rd = match std::fs::read_dir(&loc.root) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((out, leftovers)),
                Err(e) => return Err(e),
            };
            for entry in rd {
                let entry = entry?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                leftovers.consider(name, &entry.path(), now);
                if crate::cleanup::is_trash(name) {
                    continue;
                }
                let Some(folder) = name.strip_prefix('.') else {
                    continue;
                };
                if folder.is_empty() || folder == "." || !entry.path().join("cur").is_dir() {
                    continue;
                }
                if let Some(decoded) = mutf7_decode(folder) {
                    if !decoded.eq_ignore_ascii_case("INBOX") {
                        out.push(decoded);
                    }
                }
            }
        }
        Layout::Fs => {
            if let Ok(rd) = std::fs::read_dir(&loc.root) {
                for entry in rd.flatten() {
                    if let Some(name) = entry.file_name().to_str() {
                        leftovers.consider(name, &entry.path(), now);
                    }
                }
            }
            walk_fs(&loc.root, &loc.root, &mut out)?
        }
    }
    out.sort();
    out.dedup();
    Ok((out, leftovers))
}

fn walk_fs(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in rd {
        let entry = entry?;
        let name = entry.file_name();
        let Some(n) = name.to_str() else { continue };
        if n.starts_with('.') || matches!(n, "cur" | "new" | "tmp") || !entry.path().is_dir() {
            continue;
        }
        let path = entry.path();
        if path.join("cur").is_dir() {
            if let Some(rel) = path.strip_prefix(root).ok().and_then(|p| p.to_str()) {
                if let Some(decoded) = mutf7_decode(rel) {
                    out.push(decoded);
                }
            }
        }
        walk_fs(root, &path, out)?;
    }
    Ok(())
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+,";

/// UTF-8 → modified UTF-7.
pub fn mutf7_encode(s: &str) -> String {
    let mut out = String::new();
    let mut pending: Vec<u16> = Vec::new();
    let flush = |pending: &mut Vec<u16>, out: &mut String| {
        if pending.is_empty() {
            return;
        }
        out.push('&');
        let bytes: Vec<u8> = pending.iter().flat_map(|u| u.to_be_bytes()).collect();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let chars = chunk.len() + 1;
            for i in 0..chars {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out.push('-');
        pending.clear();
    };
    for c in s.chars() {
        if (' '..='~').contains(&c) {
            flush(&mut pending, &mut out);
            if c == '&' {
                out.push_str("&-");
            } else {
                out.push(c);
            }
        } else {
            let mut buf = [0u16; 2];
            pending.extend_from_slice(c.encode_utf16(&mut buf));
        }
    }
    flush(&mut pending, &mut out);
    out
}

/// Modified UTF-7 → UTF-8; `None` if malformed.
pub fn mutf7_decode(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut it = s.split('&');
    out.push_str(it.next()?);
    for part in it {
        let (enc, rest) = part.split_once('-')?;
        if enc.is_empty() {
            out.push('&');
        } else {
            let mut bits = 0u32;
            let mut nbits = 0;
            let mut units = Vec::new();
            let mut bytes = Vec::new();
            for c in enc.bytes() {
                let v = B64.iter().position(|&b| b == c)? as u32;
                bits = (bits << 6) | v;
                nbits += 6;
                if nbits >= 8 {
                    nbits -= 8;
                    bytes.push((bits >> nbits) as u8);
                    bits &= (1 << nbits) - 1;
                }
            }
            for pair in bytes.chunks(2) {
                if pair.len() == 2 {
                    units.push(u16::from_be_bytes([pair[0], pair[1]]));
                }
            }
            out.push_str(&String::from_utf16(&units).ok()?);
        }
        out.push_str(rest);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutf7_matches_rfc3501_examples() {
        assert_eq!(
            mutf7_encode("~peter/mail/台北/日本語"),
            "~peter/mail/&U,BTFw-/&ZeVnLIqe-"
        );
        assert_eq!(
            mutf7_decode("~peter/mail/&U,BTFw-/&ZeVnLIqe-").unwrap(),
            "~peter/mail/台北/日本語"
        );
        assert_eq!(mutf7_encode("A&B Ünï"), "A&-B &ANw-n&AO8-");
        assert_eq!(mutf7_decode("A&-B &ANw-n&AO8-").unwrap(), "A&B Ünï");
        assert_eq!(mutf7_decode("&bad"), None);
    }

    #[test]
    fn names_are_checked() {
        let l = Layout::MaildirPlusPlus;
        assert_eq!(normalize("inbox", l).unwrap(), "INBOX");
        assert_eq!(normalize("Inbox.Sub", l).unwrap(), "INBOX.Sub");
        for bad in ["", "a..b", ".a", "a/b", "a\nb", "~x"] {
            assert!(normalize(bad, l).is_err(), "{bad:?}");
        }
        assert!(normalize("a/../b", Layout::Fs).is_err());
    }
}
