//! The connection driver: a read buffer and a reply buffer over any
//! `AsyncRead + AsyncWrite`.
//!
//! RFC 2920 (PIPELINING): replies are queued and written only when the
//! session must wait for more input, so a pipelined group of commands is
//! answered in one write and no reply is ever held back while the server
//! waits for the client.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::data::{Body, DotUnstuffer, Line, LineFramer};
use crate::error::SmtpError;
use crate::reply::Reply;

const READ_CHUNK: usize = 64 * 1024;

/// What the client sent next.
#[derive(Debug)]
pub enum Input {
    Line(Vec<u8>),
    /// A command line over the limit (already skipped).
    TooLong,
}

/// A buffered client connection.
pub struct Conn<S> {
    stream: S,
    inbuf: BytesMut,
    out: Vec<u8>,
    framer: LineFramer,
    max_line: usize,
    timeout: Duration,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub fn new(stream: S, max_line: usize, timeout: Duration) -> Self {
        Conn {
            stream,
            inbuf: BytesMut::with_capacity(8192),
            out: Vec::with_capacity(1024),
            framer: LineFramer::default(),
            max_line,
            timeout,
        }
    }

    /// Queues a reply (written at the next flush).
    pub fn queue(&mut self, reply: &Reply) {
        reply.write_to(&mut self.out);
    }

    /// Writes queued replies.
    pub async fn flush(&mut self) -> Result<(), SmtpError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let out = std::mem::take(&mut self.out);
        match tokio::time::timeout(self.timeout, async {
            self.stream.write_all(&out).await?;
            self.stream.flush().await
        })
        .await
        {
            Ok(r) => r?,
            Err(_) => return Err(SmtpError::Timeout),
        }
        self.out = out;
        self.out.clear();
        Ok(())
    }

    /// Sends a reply now.
    pub async fn send(&mut self, reply: &Reply) -> Result<(), SmtpError> {
        self.queue(reply);
        self.flush().await
    }

    /// Whether the client already sent more than we consumed (pipelining).
    pub fn has_buffered_input(&self) -> bool {
        !self.inbuf.is_empty()
    }

    /// Drops buffered input (after STARTTLS, RFC 3207 §4.2, the client's
    /// pre-TLS bytes must not be taken as commands).
    pub fn discard_input(&mut self) {
        self.inbuf.clear();
    }

    async fn fill(&mut self) -> Result<(), SmtpError> {
        self.inbuf.reserve(READ_CHUNK);
        match tokio::time::timeout(self.timeout, self.stream.read_buf(&mut self.inbuf)).await {
            Ok(Ok(0)) => Err(SmtpError::Closed),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(SmtpError::Io(e)),
            Err(_) => Err(SmtpError::Timeout),
        }
    }

    /// The next command line. Flushes queued replies before it waits;
    /// while it waits, `shutdown` ends the session.
    pub async fn next_input<F>(&mut self, mut shutdown: Pin<&mut F>) -> Result<Input, SmtpError>
    where
        F: Future<Output = ()>,
    {
        loop {
            match self.framer.take_line(&mut self.inbuf, self.max_line) {
                Line::Complete(l) => return Ok(Input::Line(l)),
                Line::TooLong => return Ok(Input::TooLong),
                Line::Incomplete => {}
            }
            self.flush().await?;
            tokio::select! {
                r = self.fill() => r?,
                _ = shutdown.as_mut() => return Err(SmtpError::Shutdown),
            }
        }
    }

    /// Reads a DATA body up to `CRLF . CRLF` into `body`.
    pub async fn read_data(&mut self, body: &mut Body) -> Result<(), SmtpError> {
        let mut dots = DotUnstuffer::default();
        loop {
            if !self.inbuf.is_empty() {
                let n = dots.feed(&self.inbuf, body);
                let _ = self.inbuf.split_to(n);
                if dots.is_done() {
                    return Ok(());
                }
            }
            self.fill().await?;
        }
    }

    /// Reads exactly `size` octets of a BDAT chunk into `body`.
    pub async fn read_chunk(&mut self, size: u64, body: &mut Body) -> Result<(), SmtpError> {
        let mut left = size;
        loop {
            let take = (self.inbuf.len() as u64).min(left) as usize;
            if take > 0 {
                let chunk = self.inbuf.split_to(take);
                body.push(&chunk);
                left -= take as u64;
            }
            if left == 0 {
                return Ok(());
            }
            self.fill().await?;
        }
    }

    pub fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// Flushes and shuts the write side down (after QUIT or 421).
    pub async fn close(&mut self) {
        let _ = self.flush().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.stream.shutdown()).await;
    }
}
