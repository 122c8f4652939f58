use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A client connection: plain, or TLS (implicit or after STARTTLS).
pub enum MailStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// Only between taking the plain stream and finishing a handshake; a
    /// stream left here by a failed handshake reads EOF and refuses writes.
    Closed,
}

impl MailStream {
    pub fn is_tls(&self) -> bool {
        matches!(self, MailStream::Tls(_))
    }

    /// Performs the TLS handshake on a plain stream (STARTTLS, or implicit
    /// TLS right after accept). On error the stream is closed.
    pub async fn upgrade(&mut self, acceptor: &TlsAcceptor) -> io::Result<()> {
        match std::mem::replace(self, MailStream::Closed) {
            MailStream::Plain(tcp) => {
                let tls = acceptor.accept(tcp).await?;
                *self = MailStream::Tls(Box::new(tls));
                Ok(())
            }
            other => {
                *self = other;
                Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "TLS is already active",
                ))
            }
        }
    }

    /// [`MailStream::upgrade`] bounded by `within`: a client that sends
    /// STARTTLS and then stalls the handshake must not hold the
    /// connection (and its slot) forever. Times out with
    /// [`io::ErrorKind::TimedOut`], the stream then closed.
    pub async fn upgrade_within(
        &mut self,
        acceptor: &TlsAcceptor,
        within: std::time::Duration,
    ) -> io::Result<()> {
        match tokio::time::timeout(within, self.upgrade(acceptor)).await {
            Ok(r) => r,
            Err(_) => {
                *self = MailStream::Closed;
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ))
            }
        }
    }

    /// The SNI name the client asked for, if any.
    pub fn sni(&self) -> Option<&str> {
        match self {
            MailStream::Tls(t) => t.get_ref().1.server_name(),
            _ => None,
        }
    }
}

impl AsyncRead for MailStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MailStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MailStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            MailStream::Closed => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for MailStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MailStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MailStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            MailStream::Closed => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MailStream::Plain(s) => Pin::new(s).poll_flush(cx),
            MailStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            MailStream::Closed => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MailStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MailStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            MailStream::Closed => Poll::Ready(Ok(())),
        }
    }
}
