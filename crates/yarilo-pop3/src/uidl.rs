//! POP3 UIDLs as Dovecot 2.3 makes them (`pop3_uidl_format`, default
//! `%08Xu%08Xv`).
//!
//! The format is Dovecot's variable expansion: `%[-][0]N[.[0][-]M]` then
//! modifiers then a variable. Variables (Dovecot's `20-pop3.conf`):
//!
//! | short | long            | value                                        |
//! |-------|-----------------|----------------------------------------------|
//! | `%v`  | `%{uidvalidity}`| the mailbox's UIDVALIDITY, decimal           |
//! | `%u`  | `%{uid}`        | the message's UID, decimal                   |
//! | `%f`  | `%{filename}`   | the Maildir base name (before `:2,`)         |
//! | `%g`  | `%{guid}`       | the message GUID: for Maildir the base name  |
//! | `%m`  | `%{md5}`        | mbox only in Dovecot: refused here           |
//!
//! Modifiers, applied left to right: `L` lower case, `U` upper case, `E`
//! backslash-escape quotes and backslashes, `X` decimal → lower-case hex
//! (Dovecot prints `%llx`: the default format gives lower-case hex),
//! `R` reverse, `M` MD5 as hex, `T` trim trailing white space. Then the
//! substring: a positive offset skips bytes, a negative one counts from the
//! end; a width truncates (negative: drops that many from the end), a
//! width written with a leading `0` pads with zeros and never truncates.
//!
//! A UIDL that Dovecot saved in `dovecot-uidlist` (the `P` extension
//! field, written by `pop3_save_uidl` or a migration) wins over the
//! format, as in Dovecot; see [`saved_uidls`].

use std::collections::HashMap;
use std::path::Path;

use md5::{Digest, Md5};

/// Why a `pop3.uidl_format` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UidlFormatError {
    #[error("empty format")]
    Empty,
    #[error("unknown variable {0:?}")]
    UnknownVariable(String),
    #[error("%m (header MD5) exists only for mbox in Dovecot; Maildir has none")]
    HeaderMd5,
    #[error("modifier %{0} is not supported")]
    UnsupportedModifier(char),
    #[error("format ends inside a variable")]
    Truncated,
    #[error("a UIDL needs a per-message variable (%u, %f or %g)")]
    NotUnique,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Uidvalidity,
    Uid,
    Filename,
    Guid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Modifier {
    Lower,
    Upper,
    Escape,
    Hex,
    Reverse,
    Md5,
    Trim,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Literal(String),
    Var {
        var: Var,
        modifiers: Vec<Modifier>,
        offset: i64,
        width: i64,
        zero_padding: bool,
    },
}

/// A parsed `pop3.uidl_format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidlFormat {
    source: String,
    items: Vec<Item>,
}

/// What a UIDL is made from.
#[derive(Debug, Clone, Copy)]
pub struct UidlInput<'a> {
    pub uid: u32,
    pub uidvalidity: u32,
    /// The Maildir base name (file name before `:`).
    pub filename: &'a str,
    /// Dovecot's GUID for Maildir: the base name.
    pub guid: &'a str,
}

/// Dovecot's default.
pub const DEFAULT_FORMAT: &str = "%08Xu%08Xv";

impl Default for UidlFormat {
    fn default() -> Self {
        // The default is a constant that parses; spelled out so no
        // fallible call is needed.
        UidlFormat {
            source: DEFAULT_FORMAT.to_string(),
            items: vec![
                Item::Var {
                    var: Var::Uid,
                    modifiers: vec![Modifier::Hex],
                    offset: 0,
                    width: 8,
                    zero_padding: true,
                },
                Item::Var {
                    var: Var::Uidvalidity,
                    modifiers: vec![Modifier::Hex],
                    offset: 0,
                    width: 8,
                    zero_padding: true,
                },
            ],
        }
    }
}

fn digits(s: &[u8], i: &mut usize) -> i64 {
    let mut n: i64 = 0;
    while let Some(&b) = s.get(*i) {
        if !b.is_ascii_digit() {
            break;
        }
        n = n.saturating_mul(10).saturating_add(i64::from(b - b'0'));
        *i += 1;
    }
    n
}

impl UidlFormat {
    pub fn parse(format: &str) -> Result<UidlFormat, UidlFormatError> {
        if format.is_empty() {
            return Err(UidlFormatError::Empty);
        }
        let s = format.as_bytes();
        let mut items = Vec::new();
        let mut lit = Vec::new();
        let mut i = 0;
        while i < s.len() {
            if s[i] != b'%' {
                lit.push(s[i]);
                i += 1;
                continue;
            }
            i += 1;
            if s.get(i) == Some(&b'%') {
                lit.push(b'%');
                i += 1;
                continue;
            }
            // [-][0]width[.[0][-]width]
            let mut sign = 1i64;
            let mut zero_padding = false;
            if s.get(i) == Some(&b'-') {
                sign = -1;
                i += 1;
            }
            if s.get(i) == Some(&b'0') {
                zero_padding = true;
                i += 1;
            }
            let mut width = digits(s, &mut i);
            let mut offset = 0;
            if s.get(i) == Some(&b'.') {
                i += 1;
                offset = sign * width;
                sign = 1;
                zero_padding = false;
                if s.get(i) == Some(&b'0') {
                    zero_padding = true;
                    i += 1;
                }
                if s.get(i) == Some(&b'-') {
                    sign = -1;
                    i += 1;
                }
                width = digits(s, &mut i);
            }
            width *= sign;
            let mut modifiers = Vec::new();
            loop {
                let m = match s.get(i) {
                    Some(b'L') => Modifier::Lower,
                    Some(b'U') => Modifier::Upper,
                    Some(b'E') => Modifier::Escape,
                    Some(b'X') => Modifier::Hex,
                    Some(b'R') => Modifier::Reverse,
                    Some(b'M') => Modifier::Md5,
                    Some(b'T') => Modifier::Trim,
                    Some(&c @ (b'H' | b'N' | b'D')) => {
                        return Err(UidlFormatError::UnsupportedModifier(char::from(c)))
                    }
                    _ => break,
                };
                modifiers.push(m);
                i += 1;
            }
            let var = match s.get(i) {
                None => return Err(UidlFormatError::Truncated),
                Some(b'{') => {
                    let rest = &format[i + 1..];
                    let Some(end) = rest.find('}') else {
                        return Err(UidlFormatError::Truncated);
                    };
                    let name = &rest[..end];
                    i += end + 2;
                    match name {
                        "uidvalidity" => Var::Uidvalidity,
                        "uid" => Var::Uid,
                        "filename" => Var::Filename,
                        "guid" => Var::Guid,
                        "md5" => return Err(UidlFormatError::HeaderMd5),
                        other => return Err(UidlFormatError::UnknownVariable(other.to_string())),
                    }
                }
                Some(&c) => {
                    i += 1;
                    match c {
                        b'v' => Var::Uidvalidity,
                        b'u' => Var::Uid,
                        b'f' => Var::Filename,
                        b'g' => Var::Guid,
                        b'm' => return Err(UidlFormatError::HeaderMd5),
                        _ => {
                            // Report the whole character, even non-ASCII.
                            let start = i - 1;
                            let ch = format[start..].chars().next().unwrap_or('?');
                            return Err(UidlFormatError::UnknownVariable(ch.to_string()));
                        }
                    }
                }
            };
            if !lit.is_empty() {
                items.push(Item::Literal(
                    String::from_utf8_lossy(&std::mem::take(&mut lit)).into_owned(),
                ));
            }
            items.push(Item::Var {
                var,
                modifiers,
                offset,
                width,
                zero_padding,
            });
        }
        if !lit.is_empty() {
            items.push(Item::Literal(String::from_utf8_lossy(&lit).into_owned()));
        }
        let unique = items.iter().any(|it| {
            matches!(
                it,
                Item::Var {
                    var: Var::Uid | Var::Filename | Var::Guid,
                    ..
                }
            )
        });
        if !unique {
            return Err(UidlFormatError::NotUnique);
        }
        Ok(UidlFormat {
            source: format.to_string(),
            items,
        })
    }

    /// The format as configured.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn expand(&self, input: &UidlInput<'_>) -> String {
        let mut out: Vec<u8> = Vec::new();
        for item in &self.items {
            match item {
                Item::Literal(s) => out.extend_from_slice(s.as_bytes()),
                Item::Var {
                    var,
                    modifiers,
                    offset,
                    width,
                    zero_padding,
                } => {
                    let mut v: Vec<u8> = match var {
                        Var::Uidvalidity => input.uidvalidity.to_string().into_bytes(),
                        Var::Uid => input.uid.to_string().into_bytes(),
                        Var::Filename => input.filename.as_bytes().to_vec(),
                        Var::Guid => input.guid.as_bytes().to_vec(),
                    };
                    for m in modifiers {
                        v = apply(*m, v);
                    }
                    substring(&mut out, &v, *offset, *width, *zero_padding);
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

fn apply(m: Modifier, v: Vec<u8>) -> Vec<u8> {
    match m {
        Modifier::Lower => v.to_ascii_lowercase(),
        Modifier::Upper => v.to_ascii_uppercase(),
        Modifier::Escape => {
            let mut o = Vec::with_capacity(v.len());
            for b in v {
                if matches!(b, b'"' | b'\'' | b'\\') {
                    o.push(b'\\');
                }
                o.push(b);
            }
            o
        }
        Modifier::Hex => {
            // strtoull semantics: leading decimal digits, else 0.
            let mut n: u64 = 0;
            for b in v.iter().take_while(|b| b.is_ascii_digit()) {
                n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
            }
            format!("{n:x}").into_bytes()
        }
        Modifier::Reverse => v.into_iter().rev().collect(),
        Modifier::Md5 => hex::encode(Md5::digest(&v)).into_bytes(),
        Modifier::Trim => {
            let end = v
                .iter()
                .rposition(|b| !b.is_ascii_whitespace())
                .map(|p| p + 1)
                .unwrap_or(0);
            v[..end].to_vec()
        }
    }
}

fn substring(out: &mut Vec<u8>, v: &[u8], offset: i64, width: i64, zero_padding: bool) {
    let start = if offset < 0 {
        let from_end = offset.unsigned_abs() as usize;
        v.len().saturating_sub(from_end.min(v.len()))
    } else {
        (offset as usize).min(v.len())
    };
    let v = &v[start..];
    if zero_padding {
        let w = width.max(0) as usize;
        for _ in v.len()..w {
            out.push(b'0');
        }
        out.extend_from_slice(v);
    } else if width == 0 {
        out.extend_from_slice(v);
    } else if width < 0 {
        let cut = width.unsigned_abs() as usize;
        if v.len() > cut {
            out.extend_from_slice(&v[..v.len() - cut]);
        }
    } else {
        out.extend_from_slice(&v[..(width as usize).min(v.len())]);
    }
}

/// UIDLs saved in a Maildir's `dovecot-uidlist` (`P<uidl>` extension
/// fields), by UID. Empty when the file is missing or unreadable: the
/// format then applies to every message, as it does in Dovecot.
pub fn saved_uidls(maildir: &Path) -> HashMap<u32, String> {
    let mut map = HashMap::new();
    let Ok(data) = std::fs::read(maildir.join(yarilo_store::maildir::UIDLIST)) else {
        return map;
    };
    let Ok((list, _)) = yarilo_store::uidlist::UidList::parse(&data) else {
        return map;
    };
    for r in list.records {
        if let Some(p) = r
            .ext
            .split(' ')
            .find_map(|f| f.strip_prefix('P'))
            .filter(|p| !p.is_empty())
        {
            map.insert(r.uid, p.to_string());
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values observed from Dovecot 2.3.19's pop3 on a Maildir with
    // UIDVALIDITY 1796000533 (0x6b0ccb15).
    const INPUT: UidlInput<'static> = UidlInput {
        uid: 1,
        uidvalidity: 1796000533,
        filename: "1700000000.M1P1.host",
        guid: "1700000000.M1P1.host",
    };

    fn x(f: &str) -> String {
        UidlFormat::parse(f).unwrap().expand(&INPUT)
    }

    #[test]
    fn the_default_is_dovecots_lower_case_hex() {
        assert_eq!(x(DEFAULT_FORMAT), "000000016b0ccb15");
        assert_eq!(UidlFormat::default().expand(&INPUT), "000000016b0ccb15");
        assert_eq!(
            UidlFormat::default(),
            UidlFormat::parse(DEFAULT_FORMAT).unwrap()
        );
    }

    #[test]
    fn formats_match_what_dovecot_printed() {
        assert_eq!(x("%08Xv%08Xu"), "6b0ccb1500000001");
        assert_eq!(x("%v.%u"), "1796000533.1");
        assert_eq!(x("%f"), "1700000000.M1P1.host");
        assert_eq!(x("%g"), "1700000000.M1P1.host");
        assert_eq!(x("%Mf"), "3f678cf686be48bcc01c6bad0c61d570");
        assert_eq!(x("%04u-%Uf"), "0001-1700000000.M1P1.HOST");
        assert_eq!(x("%2.3f"), "000");
    }

    #[test]
    fn substrings_follow_dovecots_rules() {
        assert_eq!(x("%3f"), "170");
        assert_eq!(x("%-4.4f"), "host");
        assert_eq!(x("%0.-5f"), "1700000000.M1P1");
        assert_eq!(x("%02u"), "01");
        assert_eq!(x("%{uid}-%{uidvalidity}"), "1-1796000533");
        assert_eq!(x("a%%b%u"), "a%b1");
        assert_eq!(x("%Rf"), "tsoh.1P1M.0000000071");
    }

    #[test]
    fn bad_formats_are_refused_with_the_reason() {
        assert_eq!(UidlFormat::parse(""), Err(UidlFormatError::Empty));
        assert_eq!(UidlFormat::parse("%m"), Err(UidlFormatError::HeaderMd5));
        assert_eq!(UidlFormat::parse("%v"), Err(UidlFormatError::NotUnique));
        assert_eq!(UidlFormat::parse("%08X"), Err(UidlFormatError::Truncated));
        assert!(matches!(
            UidlFormat::parse("%q"),
            Err(UidlFormatError::UnknownVariable(_))
        ));
        assert!(matches!(
            UidlFormat::parse("%{nope}"),
            Err(UidlFormatError::UnknownVariable(_))
        ));
        assert_eq!(
            UidlFormat::parse("%Nu"),
            Err(UidlFormatError::UnsupportedModifier('N'))
        );
        // Non-ASCII after % must not panic.
        assert!(UidlFormat::parse("%é%u").is_err());
    }

    #[test]
    fn saved_uidls_come_from_the_p_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("dovecot-uidlist"),
            "3 V1 N3 Gabc\n1 W27 Pmigrated-abc :a\n2 W21 :b\n",
        )
        .unwrap();
        let m = saved_uidls(dir.path());
        assert_eq!(m.get(&1).map(String::as_str), Some("migrated-abc"));
        assert_eq!(m.get(&2), None);
        assert!(saved_uidls(&dir.path().join("missing")).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn parsing_arbitrary_formats_never_panics(s in "[%a-zA-Z0-9.{}\\-]{0,12}") {
            if let Ok(f) = UidlFormat::parse(&s) {
                let _ = f.expand(&INPUT);
            }
        }
    }
}
