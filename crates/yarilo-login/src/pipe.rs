//! The byte pipe between a client (downstream) and its backend
//! (upstream). Back-pressure is the copy's own: a side is read only while
//! the other accepts writes, so memory per session is two fixed buffers.
//! Each direction is half-closed separately when its reader hits EOF.

use tokio::io::{AsyncRead, AsyncWrite};

/// Bytes moved by a finished pipe.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Piped {
    /// Client → backend.
    pub upstream: u64,
    /// Backend → client.
    pub downstream: u64,
}

/// Copies both ways until both directions have ended (or one failed).
pub async fn pipe<C, B>(client: &mut C, backend: &mut B) -> std::io::Result<Piped>
where
    C: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let (upstream, downstream) = tokio::io::copy_bidirectional(client, backend).await?;
    Ok(Piped {
        upstream,
        downstream,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_flow_both_ways_and_half_close_propagates() {
        let (mut client_far, mut client) = tokio::io::duplex(64);
        let (mut backend, mut backend_far) = tokio::io::duplex(64);
        let task = tokio::spawn(async move { pipe(&mut client, &mut backend).await.unwrap() });
        // More than the duplex buffers hold: back-pressure, not loss.
        let big = vec![7u8; 100_000];
        let writer = {
            let big = big.clone();
            tokio::spawn(async move {
                client_far.write_all(&big).await.unwrap();
                client_far.shutdown().await.unwrap();
                let mut back = Vec::new();
                client_far.read_to_end(&mut back).await.unwrap();
                back
            })
        };
        let mut got = Vec::new();
        backend_far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, big);
        backend_far.write_all(b"* BYE\r\n").await.unwrap();
        backend_far.shutdown().await.unwrap();
        assert_eq!(writer.await.unwrap(), b"* BYE\r\n");
        let piped = task.await.unwrap();
        assert_eq!(piped.upstream, 100_000);
        assert_eq!(piped.downstream, 7);
    }
}
