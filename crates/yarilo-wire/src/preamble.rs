use std::net::IpAddr;

use crate::{join_line, split_line, WireError};

/// The first line a login proxy sends a backend after the client has
/// authenticated:
/// `YARILO\tADDR=<client ip>\tSESSION=<id>\tUSER=<user>\tTOKEN=<64 hex>\n`.
/// The backend verifies the token with the auth service before it serves a
/// byte; the preamble alone proves nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preamble {
    pub addr: IpAddr,
    pub session: String,
    pub user: String,
    pub token: String,
}

/// The preamble is short; anything longer is not one.
pub const MAX_PREAMBLE: usize = 2048;

impl Preamble {
    pub fn encode(&self) -> String {
        join_line(&[
            "YARILO".to_string(),
            format!("ADDR={}", self.addr),
            format!("SESSION={}", self.session),
            format!("USER={}", self.user),
            format!("TOKEN={}", self.token),
        ])
    }

    /// Parses one preamble line (LF optional).
    pub fn parse(line: &str) -> Result<Preamble, WireError> {
        let bad = |detail: String| WireError::Malformed {
            what: "preamble",
            detail,
        };
        if line.len() > MAX_PREAMBLE {
            return Err(WireError::LineTooLong {
                limit: MAX_PREAMBLE,
            });
        }
        let fields = split_line(line)?;
        let Some((first, rest)) = fields.split_first() else {
            return Err(bad("empty".into()));
        };
        if first != "YARILO" {
            return Err(bad("does not start with YARILO".into()));
        }
        let (mut addr, mut session, mut user, mut token) = (None, None, None, None);
        for field in rest {
            let Some((key, value)) = field.split_once('=') else {
                return Err(bad(format!("field without '=': {field:?}")));
            };
            let slot = match key {
                "ADDR" => &mut addr,
                "SESSION" => &mut session,
                "USER" => &mut user,
                "TOKEN" => &mut token,
                // Unknown keys come from newer login proxies: ignore them.
                _ => continue,
            };
            *slot = Some(value.to_string());
        }
        let addr: IpAddr = addr
            .ok_or_else(|| bad("ADDR missing".into()))?
            .parse()
            .map_err(|_| bad("ADDR is not an IP address".into()))?;
        let token = token.ok_or_else(|| bad("TOKEN missing".into()))?;
        if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("TOKEN is not 64 hex digits".into()));
        }
        let user = user.ok_or_else(|| bad("USER missing".into()))?;
        if user.is_empty() {
            return Err(bad("USER is empty".into()));
        }
        Ok(Preamble {
            addr,
            session: session.ok_or_else(|| bad("SESSION missing".into()))?,
            user,
            token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preamble_round_trips() {
        let p = Preamble {
            addr: "203.0.113.42".parse().unwrap(),
            session: "s-1".into(),
            user: "alice@example.org".into(),
            token: "ab".repeat(32),
        };
        let line = p.encode();
        assert!(line
            .starts_with("YARILO\tADDR=203.0.113.42\tSESSION=s-1\tUSER=alice@example.org\tTOKEN="));
        assert_eq!(Preamble::parse(&line).unwrap(), p);
    }

    #[test]
    fn forged_or_broken_preambles_are_refused() {
        assert!(Preamble::parse("HELLO\tADDR=1.2.3.4\n").is_err());
        let short = "YARILO\tADDR=1.2.3.4\tSESSION=x\tUSER=u\tTOKEN=abc\n";
        assert!(Preamble::parse(short).is_err());
        let no_user = format!(
            "YARILO\tADDR=1.2.3.4\tSESSION=x\tTOKEN={}\n",
            "0".repeat(64)
        );
        assert!(Preamble::parse(&no_user).is_err());
        assert!(Preamble::parse(&"A".repeat(5000)).is_err());
    }
}
