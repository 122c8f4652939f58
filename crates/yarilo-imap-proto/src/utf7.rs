//! Modified UTF-7 for mailbox names (RFC 3501 §5.1.3, kept by RFC 9051 for
//! IMAP4rev1 clients).
//!
//! Invariants: `decode(&encode(s)) == Ok(s)` for every string (property
//! tested); `decode` accepts only the canonical form (no encoded printable
//! ASCII, no padding bits, no empty `&-` shift other than for `&`), so one
//! name has exactly one wire spelling.

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+,";

/// Why a mailbox name is not valid modified UTF-7. The command using it is
/// rejected; nothing else changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mailbox name is not valid modified UTF-7")]
pub struct Utf7Error;

fn b64_value(b: u8) -> Option<u32> {
    B64.iter().position(|&c| c == b).map(|p| p as u32)
}

/// Encodes a Unicode mailbox name into modified UTF-7.
pub fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut pending: Vec<u16> = Vec::new();
    let flush = |pending: &mut Vec<u16>, out: &mut String| {
        if pending.is_empty() {
            return;
        }
        out.push('&');
        let mut bits: u32 = 0;
        let mut nbits = 0;
        for unit in pending.drain(..) {
            bits = (bits << 16) | u32::from(unit);
            nbits += 16;
            while nbits >= 6 {
                nbits -= 6;
                out.push(B64[((bits >> nbits) & 0x3f) as usize] as char);
            }
            bits &= (1 << nbits) - 1;
        }
        if nbits > 0 {
            out.push(B64[((bits << (6 - nbits)) & 0x3f) as usize] as char);
        }
        out.push('-');
    };
    for ch in name.chars() {
        if (' '..='~').contains(&ch) {
            flush(&mut pending, &mut out);
            if ch == '&' {
                out.push_str("&-");
            } else {
                out.push(ch);
            }
        } else {
            let mut buf = [0u16; 2];
            pending.extend_from_slice(ch.encode_utf16(&mut buf));
        }
    }
    flush(&mut pending, &mut out);
    out
}

/// Decodes a modified UTF-7 mailbox name.
pub fn decode(wire: &[u8]) -> Result<String, Utf7Error> {
    let mut out = String::with_capacity(wire.len());
    let mut i = 0;
    while i < wire.len() {
        let b = wire[i];
        if b == b'&' {
            let end = wire[i + 1..]
                .iter()
                .position(|&c| c == b'-')
                .map(|p| i + 1 + p)
                .ok_or(Utf7Error)?;
            let run = &wire[i + 1..end];
            if run.is_empty() {
                out.push('&');
            } else {
                decode_run(run, &mut out)?;
                // Two adjacent shifted runs are not canonical.
                if wire.get(end + 1) == Some(&b'&') && wire.get(end + 2) != Some(&b'-') {
                    return Err(Utf7Error);
                }
            }
            i = end + 1;
        } else if (0x20..0x7f).contains(&b) {
            out.push(b as char);
            i += 1;
        } else {
            return Err(Utf7Error);
        }
    }
    Ok(out)
}

fn decode_run(run: &[u8], out: &mut String) -> Result<(), Utf7Error> {
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut units: Vec<u16> = Vec::with_capacity(run.len() * 6 / 16);
    for &c in run {
        bits = (bits << 6) | b64_value(c).ok_or(Utf7Error)?;
        nbits += 6;
        if nbits >= 16 {
            nbits -= 16;
            units.push(((bits >> nbits) & 0xffff) as u16);
            bits &= (1 << nbits) - 1;
        }
    }
    // Leftover bits must be padding zeros and fewer than one base64 digit.
    if nbits >= 6 || bits != 0 {
        return Err(Utf7Error);
    }
    let s = String::from_utf16(&units).map_err(|_| Utf7Error)?;
    if s.chars().any(|c| (' '..='~').contains(&c)) {
        return Err(Utf7Error);
    }
    out.push_str(&s);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc3501_example_round_trips() {
        // RFC 3501 §5.1.3
        let name = "~peter/mail/\u{53f0}\u{5317}/\u{65e5}\u{672c}\u{8a9e}";
        assert_eq!(encode(name), "~peter/mail/&U,BTFw-/&ZeVnLIqe-");
        assert_eq!(decode(b"~peter/mail/&U,BTFw-/&ZeVnLIqe-").unwrap(), name);
        assert_eq!(encode("a&b"), "a&-b");
        assert_eq!(decode(b"a&-b").unwrap(), "a&b");
    }

    #[test]
    fn non_canonical_forms_are_rejected() {
        assert!(decode(b"&AGE-").is_err()); // encoded "a"
        assert!(decode(b"&U,BTFw").is_err()); // unterminated
        assert!(decode(b"&U,BTF-").is_err()); // bad padding
        assert!(decode("caf\u{e9}".as_bytes()).is_err());
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_identity(s in "\\PC{0,20}") {
            prop_assert_eq!(decode(encode(&s).as_bytes()).unwrap(), s);
        }
    }
}
