//! Maildir file names as Dovecot 2.3 writes them:
//! `<secs>.M<usecs>P<pid>Q<n>.<host>,S=<size>,W=<vsize>[:2,<info>]`.
//!
//! The *base* (everything before `:`) identifies a message for its whole
//! life: the uid list maps UIDs to bases, and flag changes only rewrite
//! the info part.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::flags::MaildirInfo;

/// A parsed Maildir file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaildirName<'a> {
    pub base: &'a str,
    /// `S=`: the physical size, when the name carries it.
    pub size: Option<u64>,
    /// `W=`: the size with CRLF line ends (IMAP RFC822.SIZE).
    pub vsize: Option<u64>,
    /// The `:2,` info, if present.
    pub info: Option<&'a str>,
}

/// The part of a file name that identifies the message.
pub fn base_of(name: &str) -> &str {
    match name.find(':') {
        Some(i) => &name[..i],
        None => name,
    }
}

impl<'a> MaildirName<'a> {
    pub fn parse(name: &'a str) -> MaildirName<'a> {
        let (base, info) = match name.find(':') {
            Some(i) => {
                let rest = &name[i + 1..];
                (&name[..i], rest.strip_prefix("2,"))
            }
            None => (name, None),
        };
        let mut size = None;
        let mut vsize = None;
        for field in base.split(',').skip(1) {
            if let Some(v) = field.strip_prefix("S=") {
                size = v.parse().ok();
            } else if let Some(v) = field.strip_prefix("W=") {
                vsize = v.parse().ok();
            }
        }
        MaildirName {
            base,
            size,
            vsize,
            info,
        }
    }

    pub fn info(&self) -> MaildirInfo {
        MaildirInfo::parse(self.info.unwrap_or(""))
    }
}

/// The file name for `base` with `info`; `:2,` is always written, as
/// Dovecot does for messages in `cur/`.
pub fn with_info(base: &str, info: &MaildirInfo) -> String {
    format!("{base}:2,{}", info.letters())
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new unique base: time, microseconds, pid, a per-process counter and
/// the host name (with `/` and `:` escaped as Dovecot does), plus the sizes.
pub fn new_base(host: &str, size: u64, vsize: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let host = host.replace('/', "\\057").replace(':', "\\072");
    format!(
        "{}.M{}P{}Q{}R{:08x}.{},S={},W={}",
        now.as_secs(),
        now.subsec_micros(),
        std::process::id(),
        n,
        rand::random::<u32>(),
        host,
        size,
        vsize
    )
}

/// Is the message stored with LF line ends (as Dovecot writes Maildir
/// files)? Decided by its first line: a message that arrived with CRLF
/// (APPEND) keeps any bare LF inside its content as data (a `binary`
/// part, RFC 3516), which must not be turned into CRLF.
pub fn lf_line_ends(data: &[u8]) -> bool {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => i == 0 || data.get(i - 1) != Some(&b'\r'),
        None => false,
    }
}

/// RFC822.SIZE: the size with every bare LF counted as CRLF, for a
/// message stored with LF line ends ([`lf_line_ends`]).
pub fn virtual_size(data: &[u8]) -> u64 {
    if !lf_line_ends(data) {
        return data.len() as u64;
    }
    let mut extra = 0u64;
    let mut prev = 0u8;
    for &b in data {
        if b == b'\n' && prev != b'\r' {
            extra += 1;
        }
        prev = b;
    }
    data.len() as u64 + extra
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dovecot_names() {
        let n = MaildirName::parse("1795990854.M425110P15419.vm,S=28,W=32:2,Sab");
        assert_eq!(n.base, "1795990854.M425110P15419.vm,S=28,W=32");
        assert_eq!(n.size, Some(28));
        assert_eq!(n.vsize, Some(32));
        assert_eq!(n.info, Some("Sab"));
        let n = MaildirName::parse("123.abc");
        assert_eq!(n.info, None);
        assert_eq!(n.size, None);
    }

    #[test]
    fn vsize_counts_bare_lf() {
        assert_eq!(virtual_size(b"a\nb\r\n"), 6);
        // CRLF-stored: a bare LF inside (binary content) is data.
        assert_eq!(virtual_size(b"a\r\nb\nc\r\n"), 8);
    }
}
