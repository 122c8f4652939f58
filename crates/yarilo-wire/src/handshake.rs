use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::{join_line, split_line, WireError};

/// Sends `hello` (the VERSION line) and reads the peer's one-line answer,
/// at most `max_line` bytes. The answer is read byte by byte so that
/// nothing after it is consumed: the caller hands the stream on to a framed
/// reader afterwards.
pub async fn handshake<S>(
    stream: &mut S,
    hello: &[String],
    max_line: usize,
) -> Result<Vec<String>, WireError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream.write_all(join_line(hello).as_bytes()).await?;
    stream.flush().await?;
    let mut line = Vec::with_capacity(32);
    loop {
        let mut b = [0u8; 1];
        if stream.read(&mut b).await? == 0 {
            return Err(WireError::Io("closed during VERSION handshake".into()));
        }
        if b[0] == b'\n' {
            break;
        }
        if line.len() >= max_line {
            return Err(WireError::LineTooLong { limit: max_line });
        }
        line.push(b[0]);
    }
    let text = std::str::from_utf8(&line).map_err(|_| WireError::NotUtf8)?;
    split_line(text.strip_suffix('\r').unwrap_or(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_exactly_the_answer_line_and_nothing_after_it() {
        let (mut client, mut server) = tokio::io::duplex(256);
        let peer = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let n = server.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"VERSION\tx\t1\t0\n");
            server.write_all(b"VERSION\tx\t1\t2\nNEXT\n").await.unwrap();
            server
        });
        let hello = vec!["VERSION".to_string(), "x".into(), "1".into(), "0".into()];
        let answer = handshake(&mut client, &hello, 64).await.unwrap();
        assert_eq!(answer, ["VERSION", "x", "1", "2"]);
        let _server = peer.await.unwrap();
        let mut rest = [0u8; 5];
        client.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"NEXT\n");
    }

    #[tokio::test]
    async fn an_endless_answer_is_refused() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        tokio::spawn(async move {
            let _ = server.write_all(&[b'a'; 600]).await;
            let mut sink = [0u8; 64];
            let _ = server.read(&mut sink).await;
        });
        let err = handshake(&mut client, &["VERSION".to_string()], 256).await;
        assert_eq!(err, Err(WireError::LineTooLong { limit: 256 }));
    }
}
