//! IMAP METADATA (RFC 5464) storage: per user, for the server (`""`) and
//! for each mailbox, in `<mail root>/yarilo-metadata`, one entry per line
//! (`<mailbox hex> <entry> <value hex>`), rewritten durably under the
//! user's `idx:` lock. Entry names are kept lower-case (they compare
//! case-insensitively). The limits keep one user's file small.
//!
//! Every successful change is published on the event bus (resource
//! `meta:<user>:<mailbox>`, kind [`EVENT_KIND`], payload the entry names)
//! so that NOTIFY sessions in any process hear of it (RFC 5465 §5.8-5.9).

use std::collections::BTreeMap;
use std::path::Path;

use yarilo_locks::Event;

use crate::durable::write_atomic;
use crate::error::StoreError;

/// File name under the mail root.
pub const FILE: &str = "yarilo-metadata";
/// Largest value in bytes.
pub const MAX_VALUE: usize = 64 * 1024;
/// Most entries per user (server and mailboxes together).
pub const MAX_ENTRIES: usize = 1000;
/// Most bytes of values per user.
pub const MAX_TOTAL: usize = 1024 * 1024;

/// (mailbox, entry) → value; mailbox `""` is the server.
pub type Entries = BTreeMap<(String, String), Vec<u8>>;

/// Why SETMETADATA is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MetadataError {
    #[error("invalid entry name {0:?}")]
    BadEntry(String),
    #[error("value larger than {MAX_VALUE} bytes")]
    TooLarge,
    #[error("too many entries")]
    TooMany,
}

/// Checks and normalises an entry name: `/private/…` or `/shared/…`,
/// printable ASCII without wildcards, no empty components.
pub fn entry_name(name: &str) -> Result<String, MetadataError> {
    let lower = name.to_ascii_lowercase();
    let ok = name.len() <= 1024
        && (lower.starts_with("/private/") || lower.starts_with("/shared/"))
        && !lower.ends_with('/')
        && !lower.contains("//")
        && lower
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'*' && b != b'%');
    if ok {
        Ok(lower)
    } else {
        Err(MetadataError::BadEntry(name.to_string()))
    }
}

pub(crate) fn load(root: &Path) -> Entries {
    let mut out = Entries::new();
    let Ok(text) = std::fs::read_to_string(root.join(FILE)) else {
        return out;
    };
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (Some(m), Some(e), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(m), Ok(v)) = (hex::decode(m), hex::decode(v)) else {
            continue;
        };
        let Ok(m) = String::from_utf8(m) else {
            continue;
        };
        out.insert((m, e.to_string()), v);
    }
    out
}

pub(crate) fn save(root: &Path, entries: &Entries) -> Result<(), StoreError> {
    let mut text = String::new();
    for ((m, e), v) in entries {
        text.push_str(&hex::encode(m.as_bytes()));
        text.push(' ');
        text.push_str(e);
        text.push(' ');
        text.push_str(&hex::encode(v));
        text.push('\n');
    }
    let path = root.join(FILE);
    write_atomic(&path, text.as_bytes())
        .map_err(|e| StoreError::io(format!("write {}", path.display()), e))
}

/// The kind of the event published after entries of a user changed.
pub const EVENT_KIND: &str = "metadata";

/// The event announcing that `entries` (normalised names) of `mailbox`
/// (`""`: the server) changed. Names hold no spaces, so the payload is
/// them joined by one.
pub fn event(user: &str, mailbox: &str, entries: &[String]) -> Event {
    Event {
        resource: format!("meta:{user}:{mailbox}"),
        kind: EVENT_KIND.to_string(),
        payload: entries.join(" "),
    }
}

/// Reads a metadata event of `user`: (mailbox, entry names), or `None`
/// for any other event.
pub fn parse_event<'e>(e: &'e Event, user: &str) -> Option<(&'e str, Vec<String>)> {
    if e.kind != EVENT_KIND {
        return None;
    }
    let mailbox = e
        .resource
        .strip_prefix("meta:")?
        .strip_prefix(user)?
        .strip_prefix(':')?;
    let names = e
        .payload
        .split(' ')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    Some((mailbox, names))
}

/// Applies a SETMETADATA to `entries` (all or nothing).
pub(crate) fn apply(
    entries: &mut Entries,
    mailbox: &str,
    changes: &[(String, Option<Vec<u8>>)],
) -> Result<(), MetadataError> {
    let mut next = entries.clone();
    for (name, value) in changes {
        let name = entry_name(name)?;
        match value {
            Some(v) if v.len() > MAX_VALUE => return Err(MetadataError::TooLarge),
            Some(v) => {
                next.insert((mailbox.to_string(), name), v.clone());
            }
            None => {
                next.remove(&(mailbox.to_string(), name));
            }
        }
    }
    let total: usize = next.values().map(Vec::len).sum();
    if next.len() > MAX_ENTRIES || total > MAX_TOTAL {
        return Err(MetadataError::TooMany);
    }
    *entries = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_per_user() {
        let e = event("ann", "Work/Q1", &["/private/a".into(), "/shared/b".into()]);
        assert_eq!(e.resource, "meta:ann:Work/Q1");
        assert_eq!(
            parse_event(&e, "ann"),
            Some(("Work/Q1", vec!["/private/a".into(), "/shared/b".into()]))
        );
        assert_eq!(parse_event(&e, "an"), None);
        assert_eq!(
            parse_event(&event("ann", "", &[]), "ann"),
            Some(("", vec![]))
        );
        let other = Event {
            kind: "append".into(),
            ..e
        };
        assert_eq!(parse_event(&other, "ann"), None);
    }

    #[test]
    fn names_and_limits() {
        assert_eq!(entry_name("/Private/Comment").unwrap(), "/private/comment");
        assert!(entry_name("/other/x").is_err());
        assert!(entry_name("/private/a//b").is_err());
        assert!(entry_name("/private/*").is_err());
        let mut e = Entries::new();
        apply(&mut e, "", &[("/private/a".into(), Some(b"1".to_vec()))]).unwrap();
        assert_eq!(
            apply(
                &mut e,
                "",
                &[("/private/b".into(), Some(vec![0; MAX_VALUE + 1]))]
            ),
            Err(MetadataError::TooLarge)
        );
        apply(&mut e, "", &[("/private/a".into(), None)]).unwrap();
        assert!(e.is_empty());
        let dir = tempfile::tempdir().unwrap();
        apply(
            &mut e,
            "Work",
            &[("/shared/x y".into(), Some(b"\x00bin".to_vec()))],
        )
        .unwrap_err();
        apply(
            &mut e,
            "Wörk",
            &[("/shared/x".into(), Some(b"\x00bin".to_vec()))],
        )
        .unwrap();
        save(dir.path(), &e).unwrap();
        assert_eq!(load(dir.path()), e);
    }
}
