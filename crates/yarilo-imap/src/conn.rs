//! The byte side of a session: the socket, the receiver that frames
//! commands, and the output buffer. Output is collected and written at
//! command boundaries (and in pieces during large FETCHes).
//!
//! Every write is bounded by `imap.write_timeout_seconds`: a client that
//! stops reading would otherwise pin the session, its buffers and a
//! connection slot forever. After a write timed out the connection is
//! dead: every later flush fails at once.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use yarilo_imap_proto::response::{EncodeOptions, Response};
use yarilo_imap_proto::{Limits, Receiver};
use yarilo_listener::MailStream;

use crate::metrics::Metrics;

/// Read chunk while commands flow; dropped while idle so an IDLE-ing
/// session holds no buffer.
const READ_CHUNK: usize = 16 * 1024;
/// Write out when this much output is pending inside one command.
pub(crate) const FLUSH_AT: usize = 256 * 1024;

pub(crate) struct Conn {
    pub stream: MailStream,
    pub rx: Receiver,
    pub out: Vec<u8>,
    pub enc: EncodeOptions,
    read_buf: Vec<u8>,
    metrics: Metrics,
    /// COMPRESS=DEFLATE (RFC 4978) once negotiated.
    deflate: Option<Box<crate::compress::Deflate>>,
    write_timeout: Duration,
    /// A write timed out: nothing more is sent.
    write_dead: bool,
}

/// What a read produced.
pub(crate) enum Read {
    Data,
    Eof,
    Timeout,
}

impl Conn {
    pub fn new(
        stream: MailStream,
        limits: Limits,
        metrics: Metrics,
        write_timeout: Duration,
    ) -> Conn {
        Conn {
            stream,
            rx: Receiver::new(limits),
            out: Vec::new(),
            enc: EncodeOptions::default(),
            read_buf: Vec::new(),
            metrics,
            deflate: None,
            write_timeout,
            write_dead: false,
        }
    }

    pub fn send(&mut self, r: &Response) {
        r.encode(&mut self.out, self.enc);
    }

    pub fn raw(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    pub fn compressing(&self) -> bool {
        self.deflate.is_some()
    }

    /// Everything written after this is deflated, everything read
    /// inflated. Call right after the tagged OK went out.
    pub fn start_compression(&mut self) {
        self.deflate = Some(Box::default());
    }

    /// Inflates (when compressing) and feeds the receiver.
    fn take_in(&mut self, data: &[u8]) -> io::Result<()> {
        match self.deflate.as_mut() {
            None => self.rx.feed(data),
            Some(d) => {
                let plain = d.inflate(data)?;
                self.rx.feed(&plain);
            }
        }
        Ok(())
    }

    pub async fn flush(&mut self) -> io::Result<()> {
        if self.write_dead {
            return Err(io::ErrorKind::TimedOut.into());
        }
        if self.out.is_empty() {
            return Ok(());
        }
        let packed;
        let bytes = match self.deflate.as_mut() {
            Some(d) => {
                packed = d.deflate(&self.out)?;
                &packed
            }
            None => &self.out,
        };
        let stream = &mut self.stream;
        let write = async {
            stream.write_all(bytes).await?;
            stream.flush().await
        };
        match tokio::time::timeout(self.write_timeout, write).await {
            Ok(r) => r?,
            Err(_) => {
                tracing::info!("client stopped reading; closing the connection");
                self.metrics.timed_out("write");
                self.write_dead = true;
                self.out = Vec::new();
                return Err(io::ErrorKind::TimedOut.into());
            }
        }
        self.metrics.bytes_out.inc_by(self.out.len() as u64);
        self.out.clear();
        if self.out.capacity() > 64 * 1024 {
            self.out = Vec::new();
        }
        Ok(())
    }

    /// Writes out if a lot is pending (inside long responses).
    pub async fn maybe_flush(&mut self) -> io::Result<()> {
        if self.out.len() >= FLUSH_AT {
            self.flush().await?;
        }
        Ok(())
    }

    /// Reads what is available into the receiver, waiting at most
    /// `timeout`.
    pub async fn fill(&mut self, timeout: Duration) -> io::Result<Read> {
        if self.read_buf.len() < READ_CHUNK {
            self.read_buf.resize(READ_CHUNK, 0);
        }
        let r = tokio::time::timeout(timeout, self.stream.read(&mut self.read_buf)).await;
        match r {
            Err(_) => Ok(Read::Timeout),
            Ok(Ok(0)) => Ok(Read::Eof),
            Ok(Ok(n)) => {
                self.metrics.bytes_in.inc_by(n as u64);
                let data = self.read_buf.get(..n).unwrap_or_default().to_vec();
                self.take_in(&data)?;
                Ok(Read::Data)
            }
            Ok(Err(e)) => Err(e),
        }
    }

    /// Reads a few bytes without the big buffer (IDLE: only `DONE` is
    /// expected). Cancel-safe.
    pub async fn fill_small(&mut self) -> io::Result<Read> {
        let mut small = [0u8; 64];
        match self.stream.read(&mut small).await {
            Ok(0) => Ok(Read::Eof),
            Ok(n) => {
                self.metrics.bytes_in.inc_by(n as u64);
                self.take_in(small.get(..n).unwrap_or_default())?;
                Ok(Read::Data)
            }
            Err(e) => Err(e),
        }
    }

    /// Drops buffer capacity while the session waits.
    pub fn shrink(&mut self) {
        self.read_buf = Vec::new();
        self.out = Vec::new();
        self.rx.shrink();
    }
}
