//! `dovecot-uidlist`, version 3, as Dovecot 2.3 reads and writes it.
//!
//! ```text
//! 3 V<uidvalidity> N<nextuid> G<guid> [other header fields]
//! <uid> [<ext fields>] :<file name>
//! ```
//!
//! Invariants kept here:
//! * fields we do not understand (header keys other than V/N, and every
//!   per-record extension field such as `W`, `S`, `G`) are preserved
//!   byte for byte when the file is rewritten;
//! * the next UID is `max(N, last uid + 1)`: Dovecot appends records to
//!   the file without rewriting the header, so `N` may lag behind;
//! * a trailing line without LF is a write in progress (or one cut by a
//!   crash) and is not part of the list.

use std::fmt::Write as _;

/// Why a uid list could not be read. The file is left untouched; the
/// mailbox is not opened for writing until the list parses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UidListError {
    #[error("dovecot-uidlist: unsupported version {0}")]
    Version(String),
    #[error("dovecot-uidlist: bad header: {0}")]
    Header(String),
    #[error("dovecot-uidlist line {line}: {message}")]
    Record { line: usize, message: String },
}

/// One message: its UID, extension fields, and stored file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidRecord {
    pub uid: u32,
    /// Raw extension fields (`W1234 S1200`), without leading/trailing space.
    pub ext: String,
    /// The file name as stored (usually the base, sometimes with info).
    pub name: String,
}

/// The parsed list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidList {
    pub uidvalidity: u32,
    /// `N` as written in the header.
    pub header_next_uid: u32,
    /// Header fields other than V and N, in order, as (key, value).
    pub header_extra: Vec<(char, String)>,
    pub records: Vec<UidRecord>,
}

impl UidList {
    pub fn new(uidvalidity: u32) -> UidList {
        UidList {
            uidvalidity,
            header_next_uid: 1,
            header_extra: Vec::new(),
            records: Vec::new(),
        }
    }

    /// The next UID to hand out.
    pub fn next_uid(&self) -> u32 {
        let last = self.records.last().map(|r| r.uid + 1).unwrap_or(1);
        self.header_next_uid.max(last)
    }

    /// Parses a whole file. Returns the list and how many bytes of `data`
    /// were complete lines (the offset to continue from with
    /// [`UidList::parse_tail`]).
    pub fn parse(data: &[u8]) -> Result<(UidList, usize), UidListError> {
        let Some(nl) = data.iter().position(|&b| b == b'\n') else {
            return Err(UidListError::Header("no complete header line".into()));
        };
        let header = String::from_utf8_lossy(&data[..nl]);
        let mut parts = header.split(' ');
        let version = parts.next().unwrap_or("");
        if version != "3" {
            return Err(UidListError::Version(version.to_string()));
        }
        let mut list = UidList::new(0);
        for field in parts.filter(|f| !f.is_empty()) {
            let mut chars = field.chars();
            let Some(key) = chars.next() else { continue };
            let value = chars.as_str();
            match key {
                'V' => {
                    list.uidvalidity = value
                        .parse()
                        .map_err(|_| UidListError::Header(format!("bad V{value}")))?
                }
                'N' => {
                    list.header_next_uid = value
                        .parse()
                        .map_err(|_| UidListError::Header(format!("bad N{value}")))?
                }
                _ => list.header_extra.push((key, value.to_string())),
            }
        }
        if list.uidvalidity == 0 {
            return Err(UidListError::Header("missing uidvalidity".into()));
        }
        let consumed = nl + 1 + list.parse_tail(&data[nl + 1..], 2)?;
        Ok((list, consumed))
    }

    /// Parses records appended after the part already read. Returns the
    /// number of bytes consumed (complete lines only). `first_line` is
    /// for error messages.
    pub fn parse_tail(&mut self, data: &[u8], first_line: usize) -> Result<usize, UidListError> {
        let mut consumed = 0;
        let mut line_no = first_line;
        while let Some(nl) = data[consumed..].iter().position(|&b| b == b'\n') {
            let line = &data[consumed..consumed + nl];
            consumed += nl + 1;
            if !line.is_empty() {
                let rec = parse_record(line).map_err(|message| UidListError::Record {
                    line: line_no,
                    message,
                })?;
                if let Some(last) = self.records.last() {
                    if rec.uid <= last.uid {
                        return Err(UidListError::Record {
                            line: line_no,
                            message: format!("uid {} not after {}", rec.uid, last.uid),
                        });
                    }
                }
                self.records.push(rec);
            }
            line_no += 1;
        }
        Ok(consumed)
    }

    /// The whole file; `N` is written as the current next UID.
    pub fn serialize(&self) -> Vec<u8> {
        let mut s = String::with_capacity(64 + self.records.len() * 48);
        let _ = write!(s, "3 V{} N{}", self.uidvalidity, self.next_uid());
        for (k, v) in &self.header_extra {
            let _ = write!(s, " {k}{v}");
        }
        s.push('\n');
        for r in &self.records {
            push_record(&mut s, r);
        }
        s.into_bytes()
    }
}

/// One record line, LF-terminated, for appending to the file.
pub fn record_line(r: &UidRecord) -> String {
    let mut s = String::new();
    push_record(&mut s, r);
    s
}

fn push_record(s: &mut String, r: &UidRecord) {
    let _ = write!(s, "{}", r.uid);
    if !r.ext.is_empty() {
        s.push(' ');
        s.push_str(&r.ext);
    }
    s.push_str(" :");
    s.push_str(&r.name);
    s.push('\n');
}

fn parse_record(line: &[u8]) -> Result<UidRecord, String> {
    let line = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
    let (uid, rest) = line.split_once(' ').ok_or("no file name")?;
    let uid: u32 = uid.parse().map_err(|_| format!("bad uid {uid:?}"))?;
    if uid == 0 {
        return Err("uid 0".into());
    }
    // Extension fields come first; the file name starts at the first
    // field beginning with ':'.
    let (ext, name) = if let Some(name) = rest.strip_prefix(':') {
        ("", name)
    } else {
        let i = rest.find(" :").ok_or("no ' :' before the file name")?;
        (&rest[..i], &rest[i + 2..])
    };
    if name.is_empty() {
        return Err("empty file name".into());
    }
    Ok(UidRecord {
        uid,
        ext: ext.trim().to_string(),
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dovecot_file_round_trips_with_unknown_fields() {
        let text = "3 V1795990854 N1 Gc809521a46a50c6b3b3c000083ecc375 Xfoo\n\
                    1 :1795990854.M425110P15419.vm,S=28,W=32\n\
                    2 W32 S28 Gabc :1795990854.M489129P15423.vm,S=28,W=32\n";
        let (list, used) = UidList::parse(text.as_bytes()).unwrap();
        assert_eq!(used, text.len());
        assert_eq!(list.uidvalidity, 1795990854);
        assert_eq!(list.next_uid(), 3);
        assert_eq!(list.records[1].ext, "W32 S28 Gabc");
        let out = String::from_utf8(list.serialize()).unwrap();
        assert_eq!(out, text.replace("N1", "N3"));
    }

    #[test]
    fn partial_last_line_is_not_read() {
        let text = b"3 V5 N1\n1 :a\n2 :b";
        let (list, used) = UidList::parse(text).unwrap();
        assert_eq!(list.records.len(), 1);
        assert_eq!(used, 13);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for t in [
            &b""[..],
            b"3\n",
            b"2 V1 N1\n",
            b"3 V1\nx :a\n",
            b"3 V1\n2 :a\n1 :b\n",
        ] {
            assert!(
                UidList::parse(t).is_err(),
                "{:?}",
                String::from_utf8_lossy(t)
            );
        }
    }
}
