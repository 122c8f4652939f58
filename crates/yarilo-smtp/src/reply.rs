//! SMTP replies (RFC 5321 §4.2) with enhanced status codes (RFC 2034,
//! RFC 3463).
//!
//! A reply is a three-digit code, an optional enhanced code and one or more
//! text lines; every line but the last is written `code-text`, the last
//! `code text` (RFC 5321 §4.2.1). Text never carries CR or LF: they are
//! replaced so a value echoed from a client cannot inject a reply.

use std::fmt;

/// An RFC 3463 enhanced status code `class.subject.detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnhancedCode {
    pub class: u8,
    pub subject: u16,
    pub detail: u16,
}

impl EnhancedCode {
    pub const fn new(class: u8, subject: u16, detail: u16) -> Self {
        EnhancedCode {
            class,
            subject,
            detail,
        }
    }

    /// Parses `x.y.z` at the start of `text`; returns the code and the rest
    /// (leading space removed).
    pub fn split_prefix(text: &str) -> Option<(EnhancedCode, &str)> {
        let (word, rest) = match text.find(' ') {
            Some(i) => (&text[..i], &text[i + 1..]),
            None => (text, ""),
        };
        let mut parts = word.split('.');
        let class: u8 = parts.next()?.parse().ok()?;
        let subject: u16 = parts.next()?.parse().ok()?;
        let detail: u16 = parts.next()?.parse().ok()?;
        if parts.next().is_some() || !matches!(class, 2 | 4 | 5) {
            return None;
        }
        if subject > 999 || detail > 999 {
            return None;
        }
        Some((EnhancedCode::new(class, subject, detail), rest))
    }
}

impl fmt::Display for EnhancedCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.class, self.subject, self.detail)
    }
}

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    pub enhanced: Option<EnhancedCode>,
    /// At least one line (an empty text is written as the bare code).
    pub lines: Vec<String>,
}

impl Reply {
    /// A one-line reply with an enhanced code.
    pub fn new(code: u16, enhanced: EnhancedCode, text: impl Into<String>) -> Reply {
        Reply {
            code,
            enhanced: Some(enhanced),
            lines: vec![text.into()],
        }
    }

    /// A one-line reply without an enhanced code (greeting, 354, 334).
    pub fn plain(code: u16, text: impl Into<String>) -> Reply {
        Reply {
            code,
            enhanced: None,
            lines: vec![text.into()],
        }
    }

    /// A multi-line reply without enhanced codes (EHLO/LHLO).
    pub fn multi(code: u16, lines: Vec<String>) -> Reply {
        Reply {
            code,
            enhanced: None,
            lines,
        }
    }

    pub fn is_positive(&self) -> bool {
        (200..400).contains(&self.code)
    }

    pub fn is_transient(&self) -> bool {
        (400..500).contains(&self.code)
    }

    pub fn is_permanent(&self) -> bool {
        self.code >= 500
    }

    /// The text of all lines joined by a space (logs).
    pub fn text(&self) -> String {
        self.lines.join(" ")
    }

    /// Appends the wire form to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let code = self.code.clamp(200, 599);
        let n = self.lines.len().max(1);
        for i in 0..n {
            let text = self.lines.get(i).map(String::as_str).unwrap_or("");
            let sep = if i + 1 == n { ' ' } else { '-' };
            let mut line = format!("{code}{sep}");
            if let Some(e) = self.enhanced {
                line.push_str(&e.to_string());
                if !text.is_empty() {
                    line.push(' ');
                }
            }
            line.extend(
                text.chars()
                    .map(|c| if c == '\r' || c == '\n' { ' ' } else { c }),
            );
            if line.ends_with(' ') && text.is_empty() && self.enhanced.is_none() {
                line.pop();
            }
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }

    /// The wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v);
        v
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.enhanced {
            Some(e) => write!(f, "{} {} {}", self.code, e, self.text()),
            None => write!(f, "{} {}", self.code, self.text()),
        }
    }
}

/// Reads a (possibly multi-line) reply from an upstream server, sans-I/O:
/// feed it one line at a time (CRLF removed).
#[derive(Debug, Default)]
pub struct ReplyParser {
    code: Option<u16>,
    lines: Vec<String>,
    enhanced: Option<EnhancedCode>,
}

/// Why an upstream reply could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyParseError {
    #[error("malformed reply line {0:?}")]
    Malformed(String),
    #[error("reply code changed inside a multi-line reply")]
    CodeChanged,
    #[error("reply has more than 1000 lines")]
    TooLong,
}

impl ReplyParser {
    /// Feeds one line; returns the reply once its last line arrived.
    pub fn feed(&mut self, line: &str) -> Result<Option<Reply>, ReplyParseError> {
        let b = line.as_bytes();
        if b.len() < 3 || !b[..3].iter().all(u8::is_ascii_digit) {
            return Err(ReplyParseError::Malformed(line.chars().take(80).collect()));
        }
        let code: u16 = line[..3]
            .parse()
            .map_err(|_| ReplyParseError::Malformed(line.chars().take(80).collect()))?;
        if !(200..600).contains(&code) {
            return Err(ReplyParseError::Malformed(line.chars().take(80).collect()));
        }
        if let Some(c) = self.code {
            if c != code {
                return Err(ReplyParseError::CodeChanged);
            }
        }
        self.code = Some(code);
        let (last, text) = match b.get(3) {
            None => (true, ""),
            Some(b' ') => (true, &line[4..]),
            Some(b'-') => (false, &line[4..]),
            Some(_) => return Err(ReplyParseError::Malformed(line.chars().take(80).collect())),
        };
        let text = match EnhancedCode::split_prefix(text) {
            Some((e, rest)) if e.class as u16 == code / 100 => {
                if self.enhanced.is_none() {
                    self.enhanced = Some(e);
                }
                rest
            }
            _ => text,
        };
        if self.lines.len() >= 1000 {
            return Err(ReplyParseError::TooLong);
        }
        self.lines.push(text.to_string());
        if !last {
            return Ok(None);
        }
        let reply = Reply {
            code,
            enhanced: self.enhanced.take(),
            lines: std::mem::take(&mut self.lines),
        };
        self.code = None;
        Ok(Some(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_line_with_enhanced_code() {
        let r = Reply::new(250, EnhancedCode::new(2, 1, 0), "OK");
        assert_eq!(r.to_bytes(), b"250 2.1.0 OK\r\n");
    }

    #[test]
    fn multi_line_uses_dashes_except_last() {
        let r = Reply::multi(
            250,
            vec!["mx".into(), "PIPELINING".into(), "SIZE 10".into()],
        );
        assert_eq!(r.to_bytes(), b"250-mx\r\n250-PIPELINING\r\n250 SIZE 10\r\n");
    }

    #[test]
    fn crlf_in_text_cannot_inject_a_reply() {
        let r = Reply::new(550, EnhancedCode::new(5, 1, 1), "<a\r\n250 ok>");
        assert_eq!(r.to_bytes(), b"550 5.1.1 <a  250 ok>\r\n");
    }

    #[test]
    fn parser_reassembles_multi_line_and_strips_enhanced() {
        let mut p = ReplyParser::default();
        assert_eq!(p.feed("250-mx.example").unwrap(), None);
        assert_eq!(p.feed("250-DSN").unwrap(), None);
        let r = p.feed("250 SIZE 100").unwrap().unwrap();
        assert_eq!(r.lines, vec!["mx.example", "DSN", "SIZE 100"]);
        let r = p.feed("550 5.1.1 no such user").unwrap().unwrap();
        assert_eq!(r.code, 550);
        assert_eq!(r.enhanced, Some(EnhancedCode::new(5, 1, 1)));
        assert_eq!(r.lines, vec!["no such user"]);
        assert!(p.feed("25").is_err());
        assert!(p.feed("999 x").is_err());
    }
}
