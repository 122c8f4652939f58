use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::{join_line, split_line, WireError, DEFAULT_MAX_LINE};

/// Bounded TAB/LF framing for `tokio_util::codec::Framed`.
///
/// Decodes to the unescaped fields of one line; encodes a list of fields.
/// A line over the limit is an error; a line with a bad escape or invalid
/// UTF-8 is reported as an error item the caller may answer and go on from
/// (the bytes up to its LF are consumed).
#[derive(Debug, Clone)]
pub struct LineCodec {
    max_line: usize,
    /// Bytes already scanned for LF, so a slow peer costs O(n) in total.
    scanned: usize,
}

impl LineCodec {
    pub fn new(max_line: usize) -> Self {
        LineCodec {
            max_line,
            scanned: 0,
        }
    }
}

impl Default for LineCodec {
    fn default() -> Self {
        LineCodec::new(DEFAULT_MAX_LINE)
    }
}

impl Decoder for LineCodec {
    type Item = Result<Vec<String>, WireError>;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, WireError> {
        let Some(offset) = src[self.scanned..].iter().position(|b| *b == b'\n') else {
            if src.len() >= self.max_line {
                return Err(WireError::LineTooLong {
                    limit: self.max_line,
                });
            }
            self.scanned = src.len();
            return Ok(None);
        };
        let end = self.scanned + offset;
        self.scanned = 0;
        if end + 1 > self.max_line {
            return Err(WireError::LineTooLong {
                limit: self.max_line,
            });
        }
        let line = src.split_to(end + 1);
        let text = &line[..end];
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        Ok(Some(match std::str::from_utf8(text) {
            Ok(s) => split_line(s),
            Err(_) => Err(WireError::NotUtf8),
        }))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, WireError> {
        match self.decode(src)? {
            Some(item) => Ok(Some(item)),
            None => {
                // A final line without LF is a truncated message: drop it.
                src.advance(src.len());
                self.scanned = 0;
                Ok(None)
            }
        }
    }
}

impl<S: AsRef<str>> Encoder<&[S]> for LineCodec {
    type Error = WireError;

    fn encode(&mut self, fields: &[S], dst: &mut BytesMut) -> Result<(), WireError> {
        let line = join_line(fields);
        if line.len() > self.max_line {
            return Err(WireError::LineTooLong {
                limit: self.max_line,
            });
        }
        dst.extend_from_slice(line.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_split(input: &[u8], at: usize) -> Vec<Vec<String>> {
        let mut codec = LineCodec::new(64);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in [&input[..at], &input[at..]] {
            buf.extend_from_slice(chunk);
            while let Some(item) = codec.decode(&mut buf).unwrap() {
                out.push(item.unwrap());
            }
        }
        out
    }

    #[test]
    fn lines_split_at_every_byte_are_reassembled() {
        let input = b"VERSION\tlocks\t1\t0\nLOCK\tmbox:u:INBOX\t30000\r\n";
        for at in 0..=input.len() {
            let lines = feed_split(input, at);
            assert_eq!(lines.len(), 2, "split at {at}");
            assert_eq!(lines[1], vec!["LOCK", "mbox:u:INBOX", "30000"]);
        }
    }

    #[test]
    fn over_long_line_is_an_error_not_a_growing_buffer() {
        let mut codec = LineCodec::new(16);
        let mut buf = BytesMut::from(&[b'a'; 40][..]);
        assert_eq!(
            codec.decode(&mut buf),
            Err(WireError::LineTooLong { limit: 16 })
        );
    }

    #[test]
    fn bad_line_is_reported_and_the_next_one_still_reads() {
        let mut codec = LineCodec::new(64);
        let mut buf = BytesMut::from(&b"\xff\xfe\nPING\n"[..]);
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Err(WireError::NotUtf8))
        );
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Ok(vec!["PING".to_string()]))
        );
    }
}
