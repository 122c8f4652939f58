//! Paths and addresses (RFC 5321 §4.1.2, RFC 6531 for UTF-8) and the
//! `user+detail` convention.

/// A reverse-path (MAIL FROM) or forward-path (RCPT TO) as the client wrote
/// it between `<` and `>`, source route removed (RFC 5321 §4.1.1.3 says to
/// ignore it). Empty for the null reverse-path `<>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path(String);

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path must be enclosed in <>")]
    Brackets,
    #[error("unterminated quoted local part")]
    Quote,
    #[error("invalid character in address")]
    Character,
    #[error("address is too long")]
    TooLong,
}

/// RFC 5321 §4.5.3.1.3: a path is at most 256 octets.
pub const MAX_PATH: usize = 256;

impl Path {
    pub fn null() -> Path {
        Path(String::new())
    }

    pub fn is_null(&self) -> bool {
        self.0.is_empty()
    }

    /// The address without brackets (empty for `<>`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `<address>` as it goes on the wire.
    pub fn bracketed(&self) -> String {
        format!("<{}>", self.0)
    }

    /// Parses a path at the start of `s`; returns it and the rest (the
    /// parameters). Lenient like Postfix and Dovecot about a missing
    /// bracket pair only when the address has no spaces.
    pub fn parse_prefix(s: &str) -> Result<(Path, &str), PathError> {
        let s = s.trim_start();
        let Some(body) = s.strip_prefix('<') else {
            // Bare address: up to the first space.
            let end = s.find(' ').unwrap_or(s.len());
            let addr = &s[..end];
            if addr.is_empty() {
                return Err(PathError::Brackets);
            }
            return Ok((Path::validate(addr)?, &s[end..]));
        };
        // Find the closing '>' outside a quoted string.
        let bytes = body.as_bytes();
        let mut i = 0;
        let mut quoted = false;
        let mut close = None;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if quoted => i += 1,
                b'"' => quoted = !quoted,
                b'>' if !quoted => {
                    close = Some(i);
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let Some(close) = close else {
            return Err(if quoted {
                PathError::Quote
            } else {
                PathError::Brackets
            });
        };
        let inner = &body[..close];
        let rest = &body[close + 1..];
        // Source route `@a,@b:user@c` — ignore the route.
        let inner = if inner.starts_with('@') {
            match inner.find(':') {
                Some(i) => &inner[i + 1..],
                None => return Err(PathError::Character),
            }
        } else {
            inner
        };
        Ok((Path::validate(inner)?, rest))
    }

    fn validate(addr: &str) -> Result<Path, PathError> {
        if addr.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        let mut quoted = false;
        let mut escaped = false;
        for c in addr.chars() {
            if escaped {
                escaped = false;
                continue;
            }
            match c {
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                c if c.is_control() => return Err(PathError::Character),
                ' ' | '<' | '>' | '(' | ')' | ',' | ';' if !quoted => {
                    return Err(PathError::Character)
                }
                _ => {}
            }
        }
        if quoted {
            return Err(PathError::Quote);
        }
        Ok(Path(addr.to_string()))
    }

    /// Local part and domain; the domain is empty when there is no `@`
    /// outside the quoted local part (`<postmaster>`).
    pub fn split(&self) -> (&str, &str) {
        split_address(&self.0)
    }
}

/// Splits at the last `@` (the local part may be quoted and hold `@`).
pub fn split_address(addr: &str) -> (&str, &str) {
    match addr.rfind('@') {
        Some(i) if !addr[i..].contains('"') => (&addr[..i], &addr[i + 1..]),
        _ => (addr, ""),
    }
}

/// Removes a `+detail` from the local part of `addr` (any of the
/// `delimiters`, Dovecot's `recipient_delimiter`): returns the address
/// without it and the detail.
pub fn strip_detail(addr: &str, delimiters: &str) -> (String, Option<String>) {
    if delimiters.is_empty() {
        return (addr.to_string(), None);
    }
    let (local, domain) = split_address(addr);
    if local.starts_with('"') {
        return (addr.to_string(), None);
    }
    match local.find(|c| delimiters.contains(c)) {
        Some(i) if i > 0 => {
            let user = &local[..i];
            let detail = &local[i + c_len(local, i)..];
            let base = if domain.is_empty() {
                user.to_string()
            } else {
                format!("{user}@{domain}")
            };
            (base, Some(detail.to_string()))
        }
        _ => (addr.to_string(), None),
    }
}

fn c_len(s: &str, i: usize) -> usize {
    s[i..].chars().next().map(char::len_utf8).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_with_params_and_routes() {
        let (p, rest) = Path::parse_prefix("<a@b.example> SIZE=10").unwrap();
        assert_eq!(p.as_str(), "a@b.example");
        assert_eq!(rest, " SIZE=10");
        let (p, _) = Path::parse_prefix("<@r1,@r2:u@d>").unwrap();
        assert_eq!(p.as_str(), "u@d");
        let (p, _) = Path::parse_prefix("<>").unwrap();
        assert!(p.is_null());
        let (p, _) = Path::parse_prefix("<\"a>b\"@d>").unwrap();
        assert_eq!(p.as_str(), "\"a>b\"@d");
        assert_eq!(p.split(), ("\"a>b\"", "d"));
        let (p, _) = Path::parse_prefix("<pelé@exämple.org>").unwrap();
        assert_eq!(p.split().1, "exämple.org");
        assert!(Path::parse_prefix("<a@b").is_err());
        assert!(Path::parse_prefix("<a b@c>").is_err());
        assert!(Path::parse_prefix("<\"ab@c>").is_err());
        assert!(Path::parse_prefix(&format!("<{}@d>", "x".repeat(300))).is_err());
    }

    #[test]
    fn detail_is_split_at_the_first_delimiter() {
        assert_eq!(
            strip_detail("bob+lists+x@ex.org", "+"),
            ("bob@ex.org".to_string(), Some("lists+x".to_string()))
        );
        assert_eq!(strip_detail("bob@ex.org", "+"), ("bob@ex.org".into(), None));
        assert_eq!(strip_detail("+x@ex.org", "+"), ("+x@ex.org".into(), None));
        assert_eq!(
            strip_detail("bob-y@ex.org", "+-"),
            ("bob@ex.org".into(), Some("y".into()))
        );
        assert_eq!(
            strip_detail("bob+y@ex.org", ""),
            ("bob+y@ex.org".into(), None)
        );
    }
}
