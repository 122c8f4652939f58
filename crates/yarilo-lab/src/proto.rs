//! Small clients for the workload and the checkers: IMAP (with literals,
//! UIDPLUS and CONDSTORE answers), LMTP, POP3 and the director's LOOKUP
//! protocol. Every read is bounded in size and time.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A client-side failure, with what the peer said when it said something.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("connect {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("timed out")]
    Timeout,
    #[error("closed by peer")]
    Closed,
    #[error("refused: {0}")]
    Refused(String),
    #[error("unexpected: {0}")]
    Unexpected(String),
}

pub type PResult<T> = Result<T, ProtoError>;

const MAX_LINE: usize = 1 << 20;
pub const OP_TIMEOUT: Duration = Duration::from_secs(15);

pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub async fn connect(addr: SocketAddr) -> PResult<TcpStream> {
    match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(ProtoError::Connect(addr, e)),
        Err(_) => Err(ProtoError::Timeout),
    }
}

struct Lines<S> {
    r: BufReader<S>,
}

impl<S: Stream> Lines<S> {
    async fn line(&mut self) -> PResult<String> {
        let mut buf = Vec::new();
        let n = tokio::time::timeout(
            OP_TIMEOUT,
            (&mut self.r)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut buf),
        )
        .await
        .map_err(|_| ProtoError::Timeout)??;
        if n == 0 {
            return Err(ProtoError::Closed);
        }
        while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            buf.pop();
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    async fn send(&mut self, data: &[u8]) -> PResult<()> {
        tokio::time::timeout(OP_TIMEOUT, async {
            self.r.get_mut().write_all(data).await?;
            self.r.get_mut().flush().await
        })
        .await
        .map_err(|_| ProtoError::Timeout)??;
        Ok(())
    }
}

// ---------------------------------------------------------------- IMAP

pub struct Imap<S> {
    io: Lines<S>,
    next: u32,
}

/// What SELECT said.
#[derive(Debug, Clone, Default)]
pub struct Selected {
    pub exists: u32,
    pub uidvalidity: u32,
    pub uidnext: u32,
    pub highestmodseq: u64,
}

impl<S: Stream> Imap<S> {
    pub async fn start(stream: S) -> PResult<Imap<S>> {
        let mut c = Imap {
            io: Lines {
                r: BufReader::new(stream),
            },
            next: 1,
        };
        let greeting = c.io.line().await?;
        if !greeting.starts_with("* OK") && !greeting.starts_with("* PREAUTH") {
            return Err(ProtoError::Refused(greeting));
        }
        Ok(c)
    }

    /// One response line with its literals inlined (`{n}` then n bytes).
    async fn response(&mut self) -> PResult<String> {
        let mut line = self.io.line().await?;
        while let Some(open) = line.rfind('{') {
            let Some(n) = line.strip_suffix('}').and_then(|_| {
                line[open + 1..line.len() - 1]
                    .trim_end_matches('+')
                    .parse::<usize>()
                    .ok()
            }) else {
                break;
            };
            if n > MAX_LINE {
                return Err(ProtoError::Unexpected("literal too large".into()));
            }
            let mut lit = vec![0u8; n];
            tokio::time::timeout(OP_TIMEOUT, self.io.r.read_exact(&mut lit))
                .await
                .map_err(|_| ProtoError::Timeout)??;
            line.truncate(open);
            line.push('"');
            line.push_str(
                &String::from_utf8_lossy(&lit)
                    .replace(['\r', '\n'], " ")
                    .replace('"', "'"),
            );
            line.push('"');
            let more = self.io.line().await?;
            line.push_str(&more);
        }
        Ok(line)
    }

    /// Sends a command; returns the untagged lines and the tagged status
    /// line (OK), or `Refused` with the NO/BAD line.
    pub async fn cmd(&mut self, command: &str) -> PResult<(Vec<String>, String)> {
        let tag = format!("a{}", self.next);
        self.next += 1;
        self.io
            .send(format!("{tag} {command}\r\n").as_bytes())
            .await?;
        self.collect(&tag).await
    }

    async fn collect(&mut self, tag: &str) -> PResult<(Vec<String>, String)> {
        let mut untagged = Vec::new();
        loop {
            let line = self.response().await?;
            if let Some(rest) = line.strip_prefix(&format!("{tag} ")) {
                if rest.starts_with("OK") {
                    return Ok((untagged, rest.to_string()));
                }
                return Err(ProtoError::Refused(rest.to_string()));
            }
            if line.starts_with("* BYE") {
                return Err(ProtoError::Refused(line));
            }
            untagged.push(line);
        }
    }

    pub async fn login(&mut self, user: &str, pass: &str) -> PResult<()> {
        self.cmd(&format!("LOGIN {} {}", quote(user), quote(pass)))
            .await
            .map(|_| ())
    }

    pub async fn select(&mut self, mailbox: &str) -> PResult<Selected> {
        let (lines, status) = self
            .cmd(&format!("SELECT {} (CONDSTORE)", quote(mailbox)))
            .await?;
        let mut s = Selected::default();
        for l in lines.iter().chain(std::iter::once(&status)) {
            if let Some(n) = l.strip_prefix("* ").and_then(|r| r.strip_suffix(" EXISTS")) {
                s.exists = n.parse().unwrap_or(0);
            }
            if let Some(v) = code_value(l, "UIDVALIDITY") {
                s.uidvalidity = v as u32;
            }
            if let Some(v) = code_value(l, "UIDNEXT") {
                s.uidnext = v as u32;
            }
            if let Some(v) = code_value(l, "HIGHESTMODSEQ") {
                s.highestmodseq = v;
            }
        }
        Ok(s)
    }

    /// APPEND; returns (uidvalidity, uid) from APPENDUID.
    pub async fn append(&mut self, mailbox: &str, message: &[u8]) -> PResult<Option<(u32, u32)>> {
        let tag = format!("a{}", self.next);
        self.next += 1;
        self.io
            .send(format!("{tag} APPEND {} {{{}}}\r\n", quote(mailbox), message.len()).as_bytes())
            .await?;
        let cont = self.response().await?;
        if !cont.starts_with('+') {
            if let Some(rest) = cont.strip_prefix(&format!("{tag} ")) {
                return Err(ProtoError::Refused(rest.to_string()));
            }
            return Err(ProtoError::Unexpected(cont));
        }
        self.io.send(message).await?;
        self.io.send(b"\r\n").await?;
        let (_, status) = self.collect(&tag).await?;
        Ok(appenduid(&status))
    }

    /// UID FETCH of the Message-IDs of UIDs `from:*`: (uid, message-id).
    pub async fn message_ids(&mut self, from: u32) -> PResult<Vec<(u32, String)>> {
        let (lines, _) = self
            .cmd(&format!(
                "UID FETCH {}:* (UID BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])",
                from.max(1)
            ))
            .await?;
        let mut out = Vec::new();
        for l in lines {
            let Some(uid) = fetch_item(&l, "UID") else {
                continue;
            };
            let mid = l
                .find("<")
                .and_then(|i| l[i..].find('>').map(|j| l[i..i + j + 1].to_string()))
                .unwrap_or_default();
            out.push((uid, mid));
        }
        Ok(out)
    }

    pub async fn store_seen(&mut self, uid: u32) -> PResult<Option<u64>> {
        let (lines, _) = self
            .cmd(&format!("UID STORE {uid} +FLAGS (\\Seen)"))
            .await?;
        Ok(lines
            .iter()
            .find_map(|l| fetch_item(l, "MODSEQ").map(u64::from)))
    }

    /// IDLE until an EXISTS arrives or `wait` passes; returns the EXISTS
    /// count seen (if any).
    pub async fn idle(&mut self, wait: Duration) -> PResult<Option<u32>> {
        let tag = format!("a{}", self.next);
        self.next += 1;
        self.io.send(format!("{tag} IDLE\r\n").as_bytes()).await?;
        let cont = self.response().await?;
        if !cont.starts_with('+') {
            return Err(ProtoError::Refused(cont));
        }
        let mut seen = None;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match tokio::time::timeout(left, self.io.line()).await {
                Ok(Ok(l)) => {
                    if let Some(n) = l.strip_prefix("* ").and_then(|r| r.strip_suffix(" EXISTS")) {
                        seen = n.parse().ok();
                        break;
                    }
                    if l.starts_with("* BYE") {
                        return Err(ProtoError::Refused(l));
                    }
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => break,
            }
        }
        self.io.send(b"DONE\r\n").await?;
        self.collect(&tag).await?;
        Ok(seen)
    }

    pub async fn logout(&mut self) -> PResult<()> {
        let _ = self.cmd("LOGOUT").await;
        Ok(())
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `[NAME n]` in a response line.
fn code_value(line: &str, name: &str) -> Option<u64> {
    let i = line.find(&format!("[{name} "))?;
    let rest = &line[i + name.len() + 2..];
    let end = rest.find(']')?;
    rest[..end].trim().parse().ok()
}

fn appenduid(status: &str) -> Option<(u32, u32)> {
    let i = status.find("[APPENDUID ")?;
    let rest = &status[i + 11..];
    let end = rest.find(']')?;
    let mut it = rest[..end].split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// `UID 7` (or `MODSEQ (12)`) inside a FETCH response.
fn fetch_item(line: &str, name: &str) -> Option<u32> {
    if !line.contains(" FETCH ") {
        return None;
    }
    let i = line.find(&format!("{name} "))?;
    let rest = line[i + name.len() + 1..].trim_start_matches('(');
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

// ---------------------------------------------------------------- LMTP

/// The last line of a (possibly multi-line) SMTP reply.
async fn smtp_reply<S: Stream>(io: &mut Lines<S>) -> PResult<String> {
    loop {
        let l = io.line().await?;
        if l.len() < 4 || l.as_bytes()[3] != b'-' {
            return Ok(l);
        }
    }
}

/// Delivers one message to one recipient; the recipient's final reply.
pub async fn lmtp_deliver<S: Stream>(
    stream: S,
    from: &str,
    rcpt: &str,
    message: &[u8],
) -> PResult<String> {
    let mut io = Lines {
        r: BufReader::new(stream),
    };
    let greet = smtp_reply(&mut io).await?;
    if !greet.starts_with("220") {
        return Err(ProtoError::Refused(greet));
    }
    io.send(b"LHLO lab.invalid\r\n").await?;
    let l = smtp_reply(&mut io).await?;
    if !l.starts_with("250") {
        return Err(ProtoError::Refused(l));
    }
    io.send(format!("MAIL FROM:<{from}>\r\n").as_bytes())
        .await?;
    let l = smtp_reply(&mut io).await?;
    if !l.starts_with("250") {
        return Err(ProtoError::Refused(l));
    }
    io.send(format!("RCPT TO:<{rcpt}>\r\n").as_bytes()).await?;
    let l = smtp_reply(&mut io).await?;
    if !l.starts_with("250") {
        return Err(ProtoError::Refused(l));
    }
    io.send(b"DATA\r\n").await?;
    let l = smtp_reply(&mut io).await?;
    if !l.starts_with("354") {
        return Err(ProtoError::Refused(l));
    }
    let mut body = Vec::with_capacity(message.len() + 8);
    for line in message.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.first() == Some(&b'.') {
            body.push(b'.');
        }
        body.extend_from_slice(line);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b".\r\n");
    io.send(&body).await?;
    let l = smtp_reply(&mut io).await?;
    let _ = io.send(b"QUIT\r\n").await;
    if !l.starts_with("250") {
        return Err(ProtoError::Refused(l));
    }
    Ok(l)
}

// ---------------------------------------------------------------- POP3

/// USER/PASS, STAT, UIDL; returns (count, uidls).
pub async fn pop3_session<S: Stream>(stream: S, user: &str, pass: &str) -> PResult<(u32, usize)> {
    let mut io = Lines {
        r: BufReader::new(stream),
    };
    let ok = |l: String| {
        if l.starts_with("+OK") {
            Ok(l)
        } else {
            Err(ProtoError::Refused(l))
        }
    };
    ok(io.line().await?)?;
    io.send(format!("USER {user}\r\n").as_bytes()).await?;
    ok(io.line().await?)?;
    io.send(format!("PASS {pass}\r\n").as_bytes()).await?;
    ok(io.line().await?)?;
    io.send(b"STAT\r\n").await?;
    let stat = ok(io.line().await?)?;
    let count: u32 = stat
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    io.send(b"UIDL\r\n").await?;
    ok(io.line().await?)?;
    let mut n = 0;
    loop {
        let l = io.line().await?;
        if l == "." {
            break;
        }
        n += 1;
    }
    if count > 0 {
        io.send(format!("RETR {count}\r\n").as_bytes()).await?;
        ok(io.line().await?)?;
        loop {
            if io.line().await? == "." {
                break;
            }
        }
    }
    io.send(b"QUIT\r\n").await?;
    let _ = io.line().await;
    Ok((count, n))
}

// ---------------------------------------------------------------- director

/// A connection to a director's LOOKUP port.
pub struct Director<S> {
    io: Lines<S>,
}

impl<S: Stream> Director<S> {
    pub async fn start(stream: S) -> PResult<Director<S>> {
        let mut io = Lines {
            r: BufReader::new(stream),
        };
        io.send(b"VERSION\tdirector\t1\t0\n").await?;
        let v = io.line().await?;
        if !v.starts_with("VERSION\tdirector\t1") {
            return Err(ProtoError::Refused(v));
        }
        Ok(Director { io })
    }

    /// `LOOKUP user tag imap` → the backend IP, or `Refused` with FAIL.
    pub async fn lookup(&mut self, user: &str, tag: &str) -> PResult<String> {
        let line = format!(
            "LOOKUP\t{}\t{}\timap\n",
            yarilo_wire::escape(user),
            yarilo_wire::escape(tag)
        );
        self.io.send(line.as_bytes()).await?;
        loop {
            let l = self.io.line().await?;
            if l == "PING" {
                self.io.send(b"PONG\n").await?;
                continue;
            }
            let fields: Vec<&str> = l.split('\t').collect();
            return match fields.first() {
                Some(&"OK") => Ok(fields.get(1).unwrap_or(&"").to_string()),
                _ => Err(ProtoError::Refused(l)),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_codes_parse() {
        assert_eq!(
            code_value("* OK [UIDVALIDITY 1700000000] UIDs valid", "UIDVALIDITY"),
            Some(1_700_000_000)
        );
        assert_eq!(
            code_value("* OK [HIGHESTMODSEQ 42] Highest", "HIGHESTMODSEQ"),
            Some(42)
        );
        assert_eq!(
            appenduid("OK [APPENDUID 38505 3955] APPEND completed"),
            Some((38505, 3955))
        );
        assert_eq!(fetch_item("* 3 FETCH (UID 17 MODSEQ (9))", "UID"), Some(17));
        assert_eq!(
            fetch_item("* 3 FETCH (UID 17 MODSEQ (9))", "MODSEQ"),
            Some(9)
        );
    }

    #[tokio::test]
    async fn imap_literals_are_read_whole() {
        let (a, mut b) = tokio::io::duplex(4096);
        let server = tokio::spawn(async move {
            b.write_all(b"* OK ready\r\n").await.unwrap();
            let mut buf = [0u8; 256];
            let _ = b.read(&mut buf).await.unwrap();
            b.write_all(b"* 1 FETCH (UID 4 BODY[HEADER.FIELDS (MESSAGE-ID)] {22}\r\nMessage-ID: <x@y>\r\n\r\n)\r\na1 OK done\r\n")
                .await
                .unwrap();
        });
        let mut c = Imap::start(a).await.unwrap();
        let ids = c.message_ids(1).await.unwrap();
        assert_eq!(ids, vec![(4, "<x@y>".to_string())]);
        server.await.unwrap();
    }
}
