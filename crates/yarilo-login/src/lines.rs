//! Sans-I/O line splitting for the line-based logins (POP3, SMTP, LMTP):
//! CRLF (or bare LF) terminated, bounded. Unlike the session crates'
//! readers it hands back whatever the client pipelined after the line
//! that completed a login, which the login forwards to the backend.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What [`Lines::next_line`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its CRLF / LF.
    Complete(Vec<u8>),
    /// A line longer than the bound ended; its bytes were dropped.
    TooLong,
}

/// A bounded line buffer.
#[derive(Debug)]
pub struct Lines {
    buf: Vec<u8>,
    max: usize,
    /// Inside an over-long line: drop bytes until its LF.
    discarding: bool,
    /// [`Lines::take_dot_terminated`]: bytes already searched.
    scanned: usize,
}

impl Lines {
    /// `max`: the longest line accepted, line end excluded.
    pub fn new(max: usize) -> Lines {
        Lines {
            buf: Vec::new(),
            max: max.max(1),
            discarding: false,
            scanned: 0,
        }
    }

    /// Bytes buffered and not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// An SMTP DATA body as sent (still dot-stuffed, CRLF kept), up to and
    /// without the line holding only `.`; `None` while that line has not
    /// arrived. Each byte is searched once however the input is split.
    pub fn take_dot_terminated(&mut self) -> Option<Vec<u8>> {
        loop {
            let rest = self.buf.get(self.scanned..)?;
            let nl = rest.iter().position(|&b| b == b'\n')?;
            let line = rest.get(..nl).unwrap_or_default();
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line == b"." {
                let end = self.scanned;
                let mut body: Vec<u8> = self.buf.drain(..end + nl + 1).collect();
                body.truncate(end);
                self.scanned = 0;
                return Some(body);
            }
            self.scanned += nl + 1;
        }
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete line, or `None` when more input is needed.
    /// Memory stays below `max` + one read even for a line that never
    /// ends.
    pub fn next_line(&mut self) -> Option<Line> {
        let Some(nl) = self.buf.iter().position(|&b| b == b'\n') else {
            if self.discarding || self.buf.len() > self.max + 1 {
                self.buf.clear();
                self.discarding = true;
            }
            return None;
        };
        let mut line: Vec<u8> = self.buf.drain(..=nl).collect();
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if std::mem::take(&mut self.discarding) || line.len() > self.max {
            return Some(Line::TooLong);
        }
        Some(Line::Complete(line))
    }

    /// Everything buffered and not yet returned (pipelined input to
    /// forward after a hand-off).
    pub fn take_rest(&mut self) -> Vec<u8> {
        self.discarding = false;
        self.scanned = 0;
        std::mem::take(&mut self.buf)
    }

    /// While an over-large DATA body streams past: drops what is
    /// buffered but keeps enough of the current line that
    /// [`Lines::take_dot_terminated`] still finds the ending `.` line.
    pub fn drop_dot_body(&mut self) {
        let line_start = self
            .buf
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        let partial = self.buf.get(line_start..).unwrap_or_default();
        // A line start, then the current line if it could still be ".".
        let mut kept = vec![b'\n'];
        if partial.len() <= 2 {
            kept.extend_from_slice(partial);
        } else {
            kept.extend_from_slice(b"xxx");
        }
        self.buf = kept;
        self.scanned = 0;
    }

    /// Drops everything buffered (after a TLS upgrade: RFC 2595 §3.1,
    /// RFC 3207 §4.2, nothing sent in plaintext may count under TLS).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.discarding = false;
        self.scanned = 0;
    }
}

/// A line-based peer: a stream, its [`Lines`], an outbox, one timeout for
/// every read and write.
pub struct LineConn<S> {
    pub stream: S,
    pub lines: Lines,
    out: Vec<u8>,
    timeout: Duration,
}

/// Why [`LineConn::next_line`] returned no line.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("connection closed")]
    Closed,
    #[error("no input within the timeout")]
    Timeout,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl<S: AsyncRead + AsyncWrite + Unpin> LineConn<S> {
    pub fn new(stream: S, max_line: usize, timeout: Duration) -> LineConn<S> {
        LineConn {
            stream,
            lines: Lines::new(max_line),
            out: Vec::new(),
            timeout,
        }
    }

    pub fn queue(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    pub async fn flush(&mut self) -> Result<(), LineError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let io = async {
            self.stream.write_all(&self.out).await?;
            self.stream.flush().await
        };
        tokio::time::timeout(self.timeout, io)
            .await
            .map_err(|_| LineError::Timeout)??;
        self.out.clear();
        Ok(())
    }

    /// Reads once more into the buffer (after flushing the outbox).
    pub async fn fill(&mut self) -> Result<(), LineError> {
        self.flush().await?;
        let mut chunk = [0u8; 8192];
        match tokio::time::timeout(self.timeout, self.stream.read(&mut chunk)).await {
            Err(_) => Err(LineError::Timeout),
            Ok(Ok(0)) => Err(LineError::Closed),
            Ok(Ok(n)) => {
                self.lines.feed(chunk.get(..n).unwrap_or_default());
                Ok(())
            }
            Ok(Err(e)) => Err(e.into()),
        }
    }

    /// The next line; the outbox is sent before waiting.
    pub async fn next_line(&mut self) -> Result<Line, LineError> {
        loop {
            if let Some(l) = self.lines.next_line() {
                return Ok(l);
            }
            self.fill().await?;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_split_of_pipelined_input_gives_the_same_lines() {
        let input = b"USER alice\r\nPASS secret\nSTAT\r\nLIST";
        for cut in 0..=input.len() {
            let mut l = Lines::new(64);
            let (a, b) = input.split_at(cut);
            let mut got = Vec::new();
            for part in [a, b] {
                l.feed(part);
                while let Some(line) = l.next_line() {
                    got.push(line);
                }
            }
            assert_eq!(
                got,
                vec![
                    Line::Complete(b"USER alice".to_vec()),
                    Line::Complete(b"PASS secret".to_vec()),
                    Line::Complete(b"STAT".to_vec()),
                ],
                "cut at {cut}"
            );
            assert_eq!(l.take_rest(), b"LIST");
        }
    }

    #[test]
    fn a_data_body_ends_at_the_lone_dot_on_every_split() {
        let input = b"Subject: x\r\n\r\n..dot\r\nbody.\r\n.\r\nQUIT\r\n";
        for cut in 0..=input.len() {
            let mut l = Lines::new(64);
            let (a, b) = input.split_at(cut);
            l.feed(a);
            let early = l.take_dot_terminated();
            l.feed(b);
            let body = early.or_else(|| l.take_dot_terminated()).unwrap();
            assert_eq!(
                body, b"Subject: x\r\n\r\n..dot\r\nbody.\r\n",
                "cut at {cut}"
            );
            assert_eq!(l.next_line(), Some(Line::Complete(b"QUIT".to_vec())));
        }
    }

    #[test]
    fn a_dropped_body_still_ends_at_its_dot_line_only() {
        let mut l = Lines::new(64);
        l.feed(b"aaaa\r\nbbb.");
        l.drop_dot_body();
        l.feed(b"\r\n");
        assert_eq!(l.take_dot_terminated(), None, "'bbb.' is not the end");
        l.feed(b"more\r\n.");
        l.drop_dot_body();
        l.feed(b"\r\nQUIT\r\n");
        assert!(l.take_dot_terminated().is_some());
        assert_eq!(l.next_line(), Some(Line::Complete(b"QUIT".to_vec())));
    }

    #[test]
    fn an_endless_line_is_bounded_and_reported_once() {
        let mut l = Lines::new(8);
        for _ in 0..100 {
            l.feed(&[b'x'; 100]);
            assert_eq!(l.next_line(), None);
            assert!(l.buf.len() <= 100);
        }
        l.feed(b"x\r\nNOOP\r\n");
        assert_eq!(l.next_line(), Some(Line::TooLong));
        assert_eq!(l.next_line(), Some(Line::Complete(b"NOOP".to_vec())));
    }
}
