//! Undoing encodings: Content-Transfer-Encoding (RFC 2045 §6.7 quoted-
//! printable, §6.8 base64), charsets to UTF-8, and encoded-words in
//! header values (RFC 2047).
//!
//! All decoders are lenient, as mail readers must be: base64 skips bytes
//! outside its alphabet, quoted-printable passes a malformed `=` through,
//! an encoded-word that does not decode stays as written.

use mail_parser::decoders::charsets::map::charset_decoder;

/// An unknown Content-Transfer-Encoding (RFC 3516 §4.3: `[UNKNOWN-CTE]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown content-transfer-encoding")]
pub struct UnknownCte;

/// Decodes a body by its (lower-cased) transfer encoding.
pub(crate) fn transfer(body: &[u8], encoding: &[u8]) -> Result<Vec<u8>, UnknownCte> {
    match encoding {
        b"7bit" | b"8bit" | b"binary" => Ok(body.to_vec()),
        b"base64" => Ok(base64(body)),
        b"quoted-printable" => Ok(quoted_printable(body)),
        _ => Err(UnknownCte),
    }
}

/// Like [`transfer`], but an unknown encoding passes the bytes through
/// (for SEARCH, which must still look at the part).
pub(crate) fn transfer_lenient(body: &[u8], encoding: &[u8]) -> Vec<u8> {
    transfer(body, encoding).unwrap_or_else(|_| body.to_vec())
}

fn b64_value(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Base64 (RFC 2045 §6.8): characters outside the alphabet are ignored,
/// decoding stops at the first `=`; a trailing partial group yields the
/// whole octets it holds.
pub(crate) fn base64(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for &b in input {
        if b == b'=' {
            break;
        }
        let Some(v) = b64_value(b) else { continue };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Quoted-printable (RFC 2045 §6.7): `=XX` octets, `=` at line end is a
/// soft break, whitespace before a line end is dropped; line ends stay as
/// stored.
pub(crate) fn quoted_printable(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while let Some(&b) = input.get(i) {
        match b {
            b'=' => {
                // Soft line break: `=`, optional padding, line end.
                let mut j = i + 1;
                while matches!(input.get(j), Some(b' ' | b'\t')) {
                    j += 1;
                }
                match input.get(j) {
                    Some(b'\n') => {
                        i = j + 1;
                        continue;
                    }
                    Some(b'\r') if input.get(j + 1) == Some(&b'\n') => {
                        i = j + 2;
                        continue;
                    }
                    None => break,
                    _ => {}
                }
                match (
                    input.get(i + 1).copied().and_then(hex),
                    input.get(i + 2).copied().and_then(hex),
                ) {
                    (Some(h), Some(l)) => {
                        out.push(h << 4 | l);
                        i += 3;
                    }
                    _ => {
                        out.push(b'=');
                        i += 1;
                    }
                }
            }
            b' ' | b'\t' => {
                // Trailing whitespace of a line was added in transport.
                let mut j = i;
                while matches!(input.get(j), Some(b' ' | b'\t')) {
                    j += 1;
                }
                let at_eol = match input.get(j) {
                    None | Some(b'\n') => true,
                    Some(b'\r') => input.get(j + 1) == Some(&b'\n'),
                    _ => false,
                };
                if !at_eol {
                    out.extend_from_slice(input.get(i..j).unwrap_or_default());
                }
                i = j;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Text in a charset to UTF-8. UTF-8, US-ASCII and unknown charsets: the
/// bytes as UTF-8 when valid, otherwise as Latin-1.
pub(crate) fn to_utf8(bytes: &[u8], charset: Option<&[u8]>) -> String {
    let charset = charset.unwrap_or_default();
    // RFC 2231 §5: a language may follow the charset (`utf-8*en`).
    let charset = charset.split(|&b| b == b'*').next().unwrap_or_default();
    let is_utf8_or_ascii = charset.is_empty()
        || charset.eq_ignore_ascii_case(b"utf-8")
        || charset.eq_ignore_ascii_case(b"utf8")
        || charset.eq_ignore_ascii_case(b"us-ascii")
        || charset.eq_ignore_ascii_case(b"ascii");
    if !is_utf8_or_ascii {
        if let Some(decode) = charset_decoder(charset) {
            return decode(bytes);
        }
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.iter().map(|&b| char::from(b)).collect(),
    }
}

/// Decodes RFC 2047 encoded-words in an (unfolded) header value.
/// Whitespace between two adjacent encoded-words is dropped (§6.2).
pub(crate) fn header_value(value: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    // Whitespace seen since the last encoded-word, held back in case
    // another encoded-word follows.
    let mut pending_ws = String::new();
    let mut after_word = false;
    while i < value.len() {
        if value.get(i..i + 2) == Some(b"=?") {
            if let Some((text, next)) = encoded_word(value, i) {
                if !after_word {
                    out.push_str(&pending_ws);
                }
                pending_ws.clear();
                out.push_str(&text);
                after_word = true;
                i = next;
                continue;
            }
        }
        let Some(&b) = value.get(i) else { break };
        if b == b' ' || b == b'\t' {
            pending_ws.push(char::from(b));
            i += 1;
            continue;
        }
        out.push_str(&pending_ws);
        pending_ws.clear();
        after_word = false;
        // Copy the run of plain text up to the next whitespace or `=?`.
        let start = i;
        i += 1;
        while let Some(&c) = value.get(i) {
            if c == b' ' || c == b'\t' || value.get(i..i + 2) == Some(b"=?") {
                break;
            }
            i += 1;
        }
        out.push_str(&to_utf8(value.get(start..i).unwrap_or_default(), None));
    }
    out.push_str(&pending_ws);
    out
}

/// `=?charset?enc?text?=` at `start`: the decoded text and the index
/// after it.
fn encoded_word(v: &[u8], start: usize) -> Option<(String, usize)> {
    let rest = v.get(start + 2..)?;
    let q1 = rest.iter().position(|&b| b == b'?')?;
    let charset = rest.get(..q1)?;
    let enc = *rest.get(q1 + 1)?;
    if rest.get(q1 + 2) != Some(&b'?') {
        return None;
    }
    let text_start = q1 + 3;
    let text_len = rest
        .get(text_start..)?
        .windows(2)
        .position(|w| w == b"?=")?;
    let text = rest.get(text_start..text_start + text_len)?;
    if text.iter().any(|&b| b == b' ' || b == b'\t') {
        return None;
    }
    let bytes = match enc.to_ascii_lowercase() {
        b'b' => base64(text),
        b'q' => {
            let underscores: Vec<u8> = text
                .iter()
                .map(|&b| if b == b'_' { b' ' } else { b })
                .collect();
            quoted_printable(&underscores)
        }
        _ => return None,
    };
    Some((
        to_utf8(&bytes, Some(charset)),
        start + 2 + text_start + text_len + 2,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_ignores_line_breaks_and_stops_at_padding() {
        assert_eq!(base64(b"aGVs\r\nbG8=\r\n"), b"hello");
        assert_eq!(base64(b"aGVsbA"), b"hell");
    }

    #[test]
    fn quoted_printable_soft_breaks_and_hex() {
        assert_eq!(
            quoted_printable(b"caf=C3=A9 =\r\nbar  \r\nx=ZZ"),
            "café bar\r\nx=ZZ".as_bytes()
        );
    }

    #[test]
    fn encoded_words_join_without_space() {
        assert_eq!(
            header_value(b"=?utf-8?q?caf=C3=A9?= =?ISO-8859-1?B?4Q==?= x  y"),
            "caféá x  y"
        );
    }

    #[test]
    fn latin1_charset_converts() {
        assert_eq!(to_utf8(b"\xe9", Some(b"iso-8859-1")), "é");
        assert_eq!(to_utf8(b"\xe9", Some(b"x-unknown")), "é");
    }
}
