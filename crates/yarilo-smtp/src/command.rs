//! SMTP / LMTP commands (RFC 5321 §4.1, RFC 2033 §4.1, RFC 3030, RFC 4954,
//! RFC 3207, Postfix's XCLIENT), parsed from one line without its CRLF.
//! Parsing never touches a socket and never panics.

use crate::address::{Path, PathError};
use crate::reply::{EnhancedCode, Reply};

/// An ESMTP parameter `KEYWORD[=value]` (RFC 5321 §4.1.2); the keyword is
/// upper-cased, the value kept as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub keyword: String,
    pub value: Option<String>,
}

impl Param {
    /// The wire form.
    pub fn to_wire(&self) -> String {
        match &self.value {
            Some(v) => format!("{}={}", self.keyword, v),
            None => self.keyword.clone(),
        }
    }
}

/// One command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Helo(String),
    Ehlo(String),
    /// RFC 2033 §4.1: LMTP's only greeting command.
    Lhlo(String),
    Mail {
        from: Path,
        params: Vec<Param>,
    },
    Rcpt {
        to: Path,
        params: Vec<Param>,
    },
    Data,
    /// RFC 3030: `BDAT <size> [LAST]`.
    Bdat {
        size: u64,
        last: bool,
    },
    Rset,
    Noop,
    Quit,
    Vrfy(String),
    Help,
    StartTls,
    /// RFC 4954: `AUTH <mechanism> [initial-response]`.
    Auth {
        mechanism: String,
        initial: Option<String>,
    },
    /// Postfix XCLIENT: `XCLIENT ATTR=value ...`.
    Xclient(Vec<Param>),
}

impl Command {
    /// The verb for logs and metrics labels.
    pub fn verb(&self) -> &'static str {
        match self {
            Command::Helo(_) => "HELO",
            Command::Ehlo(_) => "EHLO",
            Command::Lhlo(_) => "LHLO",
            Command::Mail { .. } => "MAIL",
            Command::Rcpt { .. } => "RCPT",
            Command::Data => "DATA",
            Command::Bdat { .. } => "BDAT",
            Command::Rset => "RSET",
            Command::Noop => "NOOP",
            Command::Quit => "QUIT",
            Command::Vrfy(_) => "VRFY",
            Command::Help => "HELP",
            Command::StartTls => "STARTTLS",
            Command::Auth { .. } => "AUTH",
            Command::Xclient(_) => "XCLIENT",
        }
    }
}

/// Why a line is not a command; each maps to one reply and leaves the
/// session state unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// 500 5.5.1 (and counts as a bad command).
    #[error("unknown command")]
    Unknown,
    /// 501 5.5.4 / 5.5.2.
    #[error("{0}")]
    Syntax(&'static str),
    /// 553 5.1.3 / 501 5.1.7 for addresses.
    #[error("bad address: {0}")]
    Path(#[from] PathError),
    /// 500 5.5.6: a line that is not UTF-8.
    #[error("line is not valid UTF-8")]
    Encoding,
}

impl CommandError {
    /// The reply to a line that did not parse.
    pub fn reply(&self) -> Reply {
        let e = |a, b, c| EnhancedCode::new(a, b, c);
        match self {
            CommandError::Unknown => Reply::new(500, e(5, 5, 1), "Unknown command"),
            CommandError::Syntax(m) => Reply::new(501, e(5, 5, 4), *m),
            CommandError::Path(p) => Reply::new(501, e(5, 1, 3), format!("Invalid address: {p}")),
            CommandError::Encoding => Reply::new(500, e(5, 5, 6), "Invalid UTF-8 in command"),
        }
    }
}

/// Parses one command line (CRLF removed).
pub fn parse(line: &[u8]) -> Result<Command, CommandError> {
    let line = std::str::from_utf8(line).map_err(|_| CommandError::Encoding)?;
    let line = line.trim_end_matches([' ', '\t']);
    let (verb, args) = match line.find(' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, ""),
    };
    if verb.len() > 16 {
        return Err(CommandError::Unknown);
    }
    let verb = verb.to_ascii_uppercase();
    let no_args = |c: Command| {
        if args.trim().is_empty() {
            Ok(c)
        } else {
            Err(CommandError::Syntax("no parameters allowed"))
        }
    };
    match verb.as_str() {
        "HELO" | "EHLO" | "LHLO" => {
            let domain = args.trim();
            if domain.is_empty() {
                return Err(CommandError::Syntax("missing domain"));
            }
            let d = domain.to_string();
            Ok(match verb.as_str() {
                "HELO" => Command::Helo(d),
                "EHLO" => Command::Ehlo(d),
                _ => Command::Lhlo(d),
            })
        }
        "MAIL" => {
            let rest = strip_keyword(args, "FROM:").ok_or(CommandError::Syntax(
                "syntax is MAIL FROM:<address> [parameters]",
            ))?;
            let (from, rest) = Path::parse_prefix(rest)?;
            Ok(Command::Mail {
                from,
                params: parse_params(rest)?,
            })
        }
        "RCPT" => {
            let rest = strip_keyword(args, "TO:").ok_or(CommandError::Syntax(
                "syntax is RCPT TO:<address> [parameters]",
            ))?;
            let (to, rest) = Path::parse_prefix(rest)?;
            if to.is_null() {
                return Err(CommandError::Syntax("null recipient"));
            }
            Ok(Command::Rcpt {
                to,
                params: parse_params(rest)?,
            })
        }
        "DATA" => no_args(Command::Data),
        "BDAT" => {
            let mut it = args.split_ascii_whitespace();
            let size = it
                .next()
                .and_then(|s| {
                    if s.bytes().all(|b| b.is_ascii_digit()) && s.len() <= 18 {
                        s.parse::<u64>().ok()
                    } else {
                        None
                    }
                })
                .ok_or(CommandError::Syntax("syntax is BDAT <size> [LAST]"))?;
            let last = match it.next() {
                None => false,
                Some(l) if l.eq_ignore_ascii_case("LAST") => true,
                Some(_) => return Err(CommandError::Syntax("syntax is BDAT <size> [LAST]")),
            };
            if it.next().is_some() {
                return Err(CommandError::Syntax("syntax is BDAT <size> [LAST]"));
            }
            Ok(Command::Bdat { size, last })
        }
        "RSET" => no_args(Command::Rset),
        // RFC 5321 §4.1.1.9: NOOP may carry a string, ignored.
        "NOOP" => Ok(Command::Noop),
        "QUIT" => no_args(Command::Quit),
        "VRFY" => Ok(Command::Vrfy(args.trim().to_string())),
        "HELP" => Ok(Command::Help),
        "STARTTLS" => no_args(Command::StartTls),
        "AUTH" => {
            let mut it = args.split_ascii_whitespace();
            let mechanism = it
                .next()
                .ok_or(CommandError::Syntax(
                    "syntax is AUTH <mechanism> [initial-response]",
                ))?
                .to_ascii_uppercase();
            let initial = it.next().map(str::to_string);
            if it.next().is_some() {
                return Err(CommandError::Syntax("too many parameters"));
            }
            Ok(Command::Auth { mechanism, initial })
        }
        "XCLIENT" => {
            let params = parse_params(args)?;
            if params.is_empty() {
                return Err(CommandError::Syntax("syntax is XCLIENT ATTR=value ..."));
            }
            Ok(Command::Xclient(params))
        }
        _ => Err(CommandError::Unknown),
    }
}

/// `FROM:` / `TO:` case-insensitively, allowing spaces around the colon
/// as many clients send them.
fn strip_keyword<'a>(args: &'a str, keyword: &str) -> Option<&'a str> {
    let kw = keyword.trim_end_matches(':');
    let head = args.get(..kw.len())?;
    if !head.eq_ignore_ascii_case(kw) {
        return None;
    }
    let rest = args[kw.len()..].trim_start();
    rest.strip_prefix(':')
}

/// RFC 5321 §4.1.2: `esmtp-keyword ["=" esmtp-value]` separated by spaces.
pub fn parse_params(s: &str) -> Result<Vec<Param>, CommandError> {
    let mut out = Vec::new();
    for item in s.split_ascii_whitespace() {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        let key_ok = !k.is_empty()
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && k.as_bytes()[0].is_ascii_alphanumeric();
        if !key_ok {
            return Err(CommandError::Syntax("malformed parameter"));
        }
        if let Some(v) = v {
            // esmtp-value: %d33-60 / %d62-126 / UTF8-non-ascii
            if v.is_empty()
                || v.chars()
                    .any(|c| c == '=' || (c.is_ascii() && c.is_ascii_control()))
            {
                return Err(CommandError::Syntax("malformed parameter value"));
            }
        }
        if out.len() >= 32 {
            return Err(CommandError::Syntax("too many parameters"));
        }
        out.push(Param {
            keyword: k.to_ascii_uppercase(),
            value: v.map(str::to_string),
        });
    }
    Ok(out)
}

/// RFC 3461 §4 xtext: `+XX` hex escapes for bytes outside 33..126 and `+`
/// `=`. Returns whether `s` is well-formed.
pub fn is_xtext(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                let ok = b.len() > i + 2
                    && b[i + 1].is_ascii_hexdigit()
                    && b[i + 2].is_ascii_hexdigit()
                    && !b[i + 1].is_ascii_lowercase()
                    && !b[i + 2].is_ascii_lowercase();
                if !ok {
                    return false;
                }
                i += 3;
            }
            33..=126 if b[i] != b'=' => i += 1,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_and_rcpt_with_params() {
        let c = parse(b"MAIL FROM:<a@b> SIZE=100 BODY=8BITMIME").unwrap();
        let Command::Mail { from, params } = c else {
            panic!()
        };
        assert_eq!(from.as_str(), "a@b");
        assert_eq!(params[0].keyword, "SIZE");
        assert_eq!(params[1].value.as_deref(), Some("8BITMIME"));
        let c = parse(b"rcpt to: <u@d> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;u@d").unwrap();
        assert!(matches!(c, Command::Rcpt { ref params, .. } if params.len() == 2));
        assert!(
            matches!(parse(b"MAIL FROM:<>").unwrap(), Command::Mail { from, .. } if from.is_null())
        );
    }

    #[test]
    fn malformed_commands_are_errors_not_panics() {
        for l in [
            &b"MAIL"[..],
            b"MAIL TO:<a@b>",
            b"RCPT TO:<>",
            b"RCPT TO:<a@b> =x",
            b"BDAT",
            b"BDAT x",
            b"BDAT 99999999999999999999",
            b"BDAT 1 LAST x",
            b"DATA x",
            b"\xff\xfe",
            b"",
            b"LHLO",
            b"AUTH",
            b"XCLIENT",
        ] {
            assert!(parse(l).is_err(), "{:?}", String::from_utf8_lossy(l));
        }
        assert_eq!(parse(b"FOO bar"), Err(CommandError::Unknown));
    }

    #[test]
    fn bdat_and_auth() {
        assert_eq!(
            parse(b"BDAT 10 last").unwrap(),
            Command::Bdat {
                size: 10,
                last: true
            }
        );
        assert_eq!(
            parse(b"auth plain AGEAYg==").unwrap(),
            Command::Auth {
                mechanism: "PLAIN".into(),
                initial: Some("AGEAYg==".into())
            }
        );
    }

    #[test]
    fn every_prefix_of_a_command_parses_or_errors() {
        let line = b"RCPT TO:<\"q>x\"@d.example> NOTIFY=NEVER ORCPT=rfc822;x+2B@d";
        for i in 0..=line.len() {
            let _ = parse(&line[..i]);
        }
    }

    #[test]
    fn xtext() {
        assert!(is_xtext("abc+2Bdef"));
        assert!(!is_xtext("a+2"));
        assert!(!is_xtext("a=b"));
        assert!(!is_xtext("a b"));
    }
}
