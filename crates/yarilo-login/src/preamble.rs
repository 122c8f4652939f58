//! The first line of the login → backend hop:
//! `YARILO\tADDR=<ip>\tSESSION=<id>\tUSER=<user>\tTOKEN=<64 hex>[\tTAG=<tag>]\n`.
//!
//! The four standard fields are [`yarilo_wire::Preamble`] (escaping per
//! `yarilo-wire`: `\x01` escapes TAB, LF, CR and itself inside a field).
//! `TAG=` is this crate's addition for IMAP: the tag of the client's
//! LOGIN/AUTHENTICATE, which the backend answers with
//! `<tag> OK [CAPABILITY …] Logged in` instead of a greeting. `HELO=` is
//! the one for SMTP submission: the client's EHLO domain, so the backend
//! starts after EHLO and AUTH and answers `235 2.7.0` first. Backends that
//! do not know a field ignore it (unknown keys are skipped by the parser).
//!
//! Framing rule of the hop: after the preamble the login sends nothing
//! until the backend's first line has arrived, so a backend may read the
//! preamble with a buffered read and treat any byte after its LF as a
//! protocol violation.

use tokio::io::{AsyncRead, AsyncReadExt};
use yarilo_wire::{split_line, Preamble, WireError};

/// Longest preamble line accepted, LF included (standard fields, a TAG
/// and escaping headroom).
pub const MAX_HOP_PREAMBLE: usize = 4096;

/// A preamble with the hop's optional fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopPreamble {
    pub preamble: Preamble,
    /// IMAP: the tag the backend's first line answers.
    pub tag: Option<String>,
    /// SMTP submission: the client's EHLO domain.
    pub helo: Option<String>,
}

impl HopPreamble {
    /// The line, LF included.
    pub fn encode(&self) -> String {
        let mut line = self.preamble.encode();
        if let Some(tag) = &self.tag {
            line.pop();
            line.push_str("\tTAG=");
            line.push_str(&yarilo_wire::escape(tag));
            line.push('\n');
        }
        if let Some(helo) = &self.helo {
            line.pop();
            line.push_str("\tHELO=");
            line.push_str(&yarilo_wire::escape(helo));
            line.push('\n');
        }
        line
    }

    /// Parses one line (LF optional).
    pub fn parse(line: &str) -> Result<HopPreamble, WireError> {
        if line.len() > MAX_HOP_PREAMBLE {
            return Err(WireError::LineTooLong {
                limit: MAX_HOP_PREAMBLE,
            });
        }
        // Preamble::parse bounds the standard line at 2 KiB: give it the
        // line without TAG so a long IMAP tag cannot push it over.
        let fields = split_line(line)?;
        let mut tag = None;
        let mut helo = None;
        let mut rest = Vec::with_capacity(fields.len());
        for f in fields {
            if let Some(t) = f.strip_prefix("TAG=") {
                tag = Some(t.to_string());
            } else if let Some(h) = f.strip_prefix("HELO=") {
                helo = Some(h.to_string());
            } else {
                rest.push(f);
            }
        }
        if helo.as_deref().is_some_and(|h| !valid_helo(h)) {
            return Err(WireError::Malformed {
                what: "preamble",
                detail: "HELO is not an EHLO domain".into(),
            });
        }
        if tag.as_deref().is_some_and(|t| !valid_tag(t)) {
            return Err(WireError::Malformed {
                what: "preamble",
                detail: "TAG is not an IMAP tag".into(),
            });
        }
        let preamble = Preamble::parse(&yarilo_wire::join_line(&rest))?;
        Ok(HopPreamble {
            preamble,
            tag,
            helo,
        })
    }
}

/// An EHLO argument the backend may put in a `Received:` header: 1 to
/// 255 printable ASCII characters without spaces (RFC 5321 §4.1.1.1
/// domain or address literal; checked loosely, like the session does).
pub fn valid_helo(h: &str) -> bool {
    !h.is_empty() && h.len() <= 255 && h.bytes().all(|b| b.is_ascii_graphic())
}

/// RFC 9051 §9 `tag`: 1*<any ASTRING-CHAR except "+">. The backend writes
/// the tag back to the client verbatim, so nothing else may pass.
pub fn valid_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 256
        && t.bytes().all(|b| {
            b.is_ascii_graphic()
                && !matches!(b, b'(' | b')' | b'{' | b'%' | b'*' | b'"' | b'\\' | b'+')
        })
}

/// Why no preamble could be read. The connection must close.
#[derive(Debug, thiserror::Error)]
pub enum ReadPreambleError {
    #[error("timed out")]
    Timeout,
    #[error("connection closed before the preamble ended")]
    Closed,
    #[error("bytes after the preamble before the backend spoke")]
    TrailingData,
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads exactly one preamble line, bounded by [`MAX_HOP_PREAMBLE`] and
/// `timeout`.
pub async fn read_preamble<S: AsyncRead + Unpin>(
    stream: &mut S,
    timeout: std::time::Duration,
) -> Result<HopPreamble, ReadPreambleError> {
    let line = tokio::time::timeout(timeout, read_line(stream))
        .await
        .map_err(|_| ReadPreambleError::Timeout)??;
    let text = std::str::from_utf8(&line).map_err(|_| WireError::NotUtf8)?;
    Ok(HopPreamble::parse(text)?)
}

async fn read_line<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Vec<u8>, ReadPreambleError> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(ReadPreambleError::Closed);
        }
        let got = chunk.get(..n).unwrap_or_default();
        let start = buf.len();
        buf.extend_from_slice(got);
        if let Some(pos) = got.iter().position(|&b| b == b'\n') {
            if start + pos + 1 != buf.len() {
                return Err(ReadPreambleError::TrailingData);
            }
            return Ok(buf);
        }
        if buf.len() > MAX_HOP_PREAMBLE {
            return Err(WireError::LineTooLong {
                limit: MAX_HOP_PREAMBLE,
            }
            .into());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn sample(tag: Option<&str>) -> HopPreamble {
        HopPreamble {
            preamble: Preamble {
                addr: "192.0.2.7".parse().unwrap(),
                session: "0123abcd".into(),
                user: "alice@example.org".into(),
                token: "ab".repeat(32),
            },
            tag: tag.map(str::to_string),
            helo: None,
        }
    }

    #[test]
    fn tag_rides_after_the_standard_fields_and_round_trips() {
        let p = sample(Some("a001"));
        let line = p.encode();
        assert!(line.starts_with(
            "YARILO\tADDR=192.0.2.7\tSESSION=0123abcd\tUSER=alice@example.org\tTOKEN="
        ));
        assert!(line.ends_with("\tTAG=a001\n"), "{line}");
        assert_eq!(HopPreamble::parse(&line).unwrap(), p);
        let plain = sample(None);
        assert_eq!(plain.encode(), plain.preamble.encode());
        assert_eq!(HopPreamble::parse(&plain.encode()).unwrap(), plain);
    }

    #[test]
    fn helo_round_trips_and_must_be_one_printable_word() {
        let mut p = sample(None);
        p.helo = Some("client.example".into());
        let line = p.encode();
        assert!(line.ends_with("\tHELO=client.example\n"), "{line}");
        assert_eq!(HopPreamble::parse(&line).unwrap(), p);
        let bad = line.replace("HELO=client.example", "HELO=a b");
        assert!(HopPreamble::parse(&bad).is_err());
        let bad = line.replace("HELO=client.example", "HELO=x\x01r\x01n250 OK");
        assert!(HopPreamble::parse(&bad).is_err());
    }

    #[test]
    fn a_tag_that_could_inject_a_response_is_refused() {
        let mut line = sample(Some("a1")).encode();
        line = line.replace("TAG=a1", "TAG=a1 OK\x01r\x01n* BYE");
        assert!(HopPreamble::parse(&line).is_err());
        assert!(!valid_tag("a+1"));
        assert!(valid_tag("A.0001"));
    }

    #[tokio::test]
    async fn read_is_bounded_and_strict() {
        let (mut a, mut b) = tokio::io::duplex(8192);
        let line = sample(Some("x")).encode();
        // Split across writes.
        let (head, tail) = line.split_at(10);
        a.write_all(head.as_bytes()).await.unwrap();
        let t = tail.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            a.write_all(t.as_bytes()).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        });
        let got = read_preamble(&mut b, std::time::Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(got.tag.as_deref(), Some("x"));

        let (mut a, mut b) = tokio::io::duplex(65536);
        a.write_all(&vec![b'A'; 10_000]).await.unwrap();
        assert!(matches!(
            read_preamble(&mut b, std::time::Duration::from_secs(2)).await,
            Err(ReadPreambleError::Wire(WireError::LineTooLong { .. }))
        ));

        let (mut a, mut b) = tokio::io::duplex(8192);
        a.write_all(format!("{line}a1 SELECT INBOX\r\n").as_bytes())
            .await
            .unwrap();
        assert!(matches!(
            read_preamble(&mut b, std::time::Duration::from_secs(2)).await,
            Err(ReadPreambleError::TrailingData)
        ));

        let (_a, mut b) = tokio::io::duplex(8192);
        assert!(matches!(
            read_preamble(&mut b, std::time::Duration::from_millis(50)).await,
            Err(ReadPreambleError::Timeout)
        ));
    }
}
