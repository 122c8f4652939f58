//! A message rewritten with its leaf parts in another transfer encoding,
//! each rewritten part's header saying so:
//! - [`Target::SevenBit`]: `binary` parts become base64, so BODY[...] never
//!   carries NUL or bare line ends (RFC 3516 §4.3 leaves BODY of a binary
//!   part to the server; Dovecot converts to base64 the same way);
//! - [`Target::Binary`]: base64 and quoted-printable parts are decoded and
//!   marked `binary` (URLFETCH with BINARY, RFC 5524 §4.2).
//!
//! Parts with an unknown encoding and non-leaf parts are copied as they
//! are; everything between parts (boundaries, preambles) is kept byte for
//! byte.

use crate::decode;
use crate::header;
use crate::part::{Kind, Part};

/// Which form the leaf parts are put in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    SevenBit,
    Binary,
}

/// The rewritten message, or `None` when no part needs rewriting.
pub(crate) fn recode(raw: &[u8], target: Target) -> Option<Vec<u8>> {
    if target == Target::SevenBit && !mentions_binary(raw) {
        // The common case, without parsing the MIME tree.
        return None;
    }
    let root = Part::parse(raw);
    let mut leaves = Vec::new();
    collect(&root, target, &mut leaves);
    if leaves.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 3);
    let mut pos = 0;
    for p in leaves {
        let body = raw.get(p.body.clone()).unwrap_or_default();
        let (cte, data) = match target {
            Target::SevenBit => ("base64", base64_lines(body)),
            Target::Binary => match decode::transfer(body, &p.content.encoding_lower()) {
                Ok(d) => ("binary", d),
                // collect() only picks decodable encodings; left as is.
                Err(_) => continue,
            },
        };
        out.extend_from_slice(raw.get(pos..p.header.start).unwrap_or_default());
        let head = raw.get(p.header.clone()).unwrap_or_default();
        for f in header::fields(head) {
            if !f.is("Content-Transfer-Encoding") {
                out.extend_from_slice(f.raw);
                if !f.raw.ends_with(b"\n") {
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
        out.extend_from_slice(format!("Content-Transfer-Encoding: {cte}\r\n\r\n").as_bytes());
        out.extend_from_slice(&data);
        pos = p.body.end;
    }
    out.extend_from_slice(raw.get(pos..).unwrap_or_default());
    Some(out)
}

/// Could any header say `binary`? (A cheap pre-check; false positives
/// only cost a parse.)
fn mentions_binary(raw: &[u8]) -> bool {
    raw.windows(6).any(|w| w.eq_ignore_ascii_case(b"binary"))
}

/// The leaf parts to rewrite, in message order.
fn collect<'p>(part: &'p Part, target: Target, out: &mut Vec<&'p Part>) {
    match &part.kind {
        Kind::Multi(children) => children.iter().for_each(|c| collect(c, target, out)),
        Kind::Message(inner) => collect(inner, target, out),
        Kind::Leaf => {
            let cte = part.content.encoding_lower();
            let rewrite = match target {
                Target::SevenBit => cte == b"binary",
                Target::Binary => cte == b"base64" || cte == b"quoted-printable",
            };
            if rewrite {
                out.push(part);
            }
        }
    }
}

/// Base64 in lines of 76 characters, each ending in CRLF (RFC 2045 §6.8).
fn base64_lines(data: &[u8]) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(data.len() / 3 * 4 + data.len() / 57 * 2 + 6);
    for line in data.chunks(57) {
        for group in line.chunks(3) {
            let b = [
                group.first().copied().unwrap_or(0),
                group.get(1).copied().unwrap_or(0),
                group.get(2).copied().unwrap_or(0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= group.len() {
                    out.push(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]);
                } else {
                    out.push(b'=');
                }
            }
        }
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_lines_round_trip() {
        assert_eq!(base64_lines(b"a\0b\xffc\n\r"), b"YQBi/2MKDQ==\r\n");
        assert_eq!(base64_lines(b""), b"");
        let data: Vec<u8> = (0..=255u8).collect();
        let enc = base64_lines(&data);
        assert!(enc.split(|&b| b == b'\n').all(|l| l.len() <= 77));
        assert_eq!(decode::base64(&enc), data);
    }

    #[test]
    fn binary_parts_become_base64_and_back() {
        let m = b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nplain\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\n\r\na\0b\xffc\n\r\n--b--\r\n";
        let seven = recode(m, Target::SevenBit).unwrap();
        let want: &[u8] = b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nplain\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\nYQBi/2MK\r\n\r\n--b--\r\n";
        assert_eq!(seven, want);
        assert_eq!(recode(&seven, Target::SevenBit), None);
        let back = recode(&seven, Target::Binary).unwrap();
        assert_eq!(back, m.to_vec());
    }
}
