//! The login side of the login → backend hop: dial (plain TCP or internal
//! mTLS pinned to `internal_tls.server_name`), send the preamble, wait for
//! the backend's first line.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use yarilo_tls::internal::InternalTls;

use crate::preamble::HopPreamble;
use crate::HopError;

/// Longest first line a backend may send (an IMAP tagged OK with a long
/// CAPABILITY list fits many times over).
pub const MAX_FIRST_LINE: usize = 16 * 1024;

/// A connection to a backend (or a director): plain or internal mTLS.
pub enum UpstreamStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Dials `addr` within `timeout`, with the TLS handshake when `tls` is
/// set.
pub async fn dial(
    addr: &str,
    tls: Option<&InternalTls>,
    timeout: Duration,
) -> Result<UpstreamStream, HopError> {
    let err = |message: String, unreachable: bool| HopError::Connect {
        addr: addr.to_string(),
        message,
        unreachable,
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let tcp = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
        .await
        .map_err(|_| err(format!("no connection within {timeout:?}"), true))?
        .map_err(|e| err(e.to_string(), true))?;
    let _ = tcp.set_nodelay(true);
    match tls {
        None => Ok(UpstreamStream::Plain(tcp)),
        Some(t) => tokio::time::timeout_at(deadline, t.connect(tcp))
            .await
            .map_err(|_| err(format!("no TLS handshake within {timeout:?}"), false))?
            .map(|s| UpstreamStream::Tls(Box::new(s)))
            .map_err(|e| err(format!("internal TLS: {e}"), false)),
    }
}

/// What the backend said first, and anything it sent after that line in
/// the same read (to be relayed before piping starts).
#[derive(Debug)]
pub struct FirstLine {
    pub line: Vec<u8>,
    pub rest: Vec<u8>,
}

/// Sends the preamble and reads the backend's first line (LF included),
/// bounded by [`MAX_FIRST_LINE`] and `timeout`.
pub async fn send_preamble(
    stream: &mut UpstreamStream,
    addr: &str,
    preamble: &HopPreamble,
    timeout: Duration,
) -> Result<FirstLine, HopError> {
    let no_answer = |message: String| HopError::NoAnswer {
        addr: addr.to_string(),
        message,
    };
    let work = async {
        stream
            .write_all(preamble.encode().as_bytes())
            .await
            .map_err(|e| no_answer(format!("writing the preamble: {e}")))?;
        stream
            .flush()
            .await
            .map_err(|e| no_answer(format!("writing the preamble: {e}")))?;
        let mut buf = Vec::with_capacity(512);
        let mut chunk = [0u8; 2048];
        loop {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| no_answer(e.to_string()))?;
            if n == 0 {
                return Err(no_answer("closed the connection".into()));
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
            if let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let rest = buf.split_off(pos + 1);
                return Ok(FirstLine { line: buf, rest });
            }
            if buf.len() > MAX_FIRST_LINE {
                return Err(no_answer("first line too long".into()));
            }
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| no_answer(format!("nothing within {timeout:?}")))?
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_flush(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
