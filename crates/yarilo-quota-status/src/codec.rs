//! The policy delegation wire format, sans-I/O.
//!
//! A request is `name=value` lines, each ended by LF (a CR before it is
//! dropped, as Dovecot's line reader does), closed by an empty line. Many
//! requests follow each other on one connection. Lines without `=` are
//! ignored, as Postfix's own servers and Dovecot do.
//!
//! Bounds: a line longer than `max_line` bytes (LF included) and a request
//! with more than `max_attributes` attributes are errors; the driver closes
//! the connection, since the protocol has no way to say "bad request".

/// Why the decoder gave up. Either way the connection must close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// A line did not end within the bound (client fault).
    #[error("request line longer than {0} bytes")]
    LineTooLong(usize),
    /// A request had too many attributes (client fault).
    #[error("request with more than {0} attributes")]
    TooManyAttributes(usize),
}

/// One request: its attributes in the order received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRequest {
    pub attributes: Vec<(String, String)>,
}

impl PolicyRequest {
    /// The first value of `name`.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The last value of `name`.
    pub fn last(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Feeds bytes, yields complete requests.
#[derive(Debug)]
pub struct PolicyDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for LF.
    scanned: usize,
    current: PolicyRequest,
    max_line: usize,
    max_attributes: usize,
}

impl PolicyDecoder {
    pub fn new(max_line: usize, max_attributes: usize) -> PolicyDecoder {
        PolicyDecoder {
            buf: Vec::new(),
            scanned: 0,
            current: PolicyRequest::default(),
            max_line,
            max_attributes,
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Whether a request has begun but not ended (bytes or attributes
    /// held). An EOF now cuts a request short.
    pub fn is_mid_request(&self) -> bool {
        !self.buf.is_empty() || !self.current.attributes.is_empty()
    }

    /// The next complete request; `Ok(None)` means more bytes are needed.
    pub fn next_request(&mut self) -> Result<Option<PolicyRequest>, CodecError> {
        loop {
            let Some(pos) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') else {
                self.scanned = self.buf.len();
                if self.buf.len() >= self.max_line {
                    return Err(CodecError::LineTooLong(self.max_line));
                }
                return Ok(None);
            };
            let end = self.scanned + pos;
            if end + 1 > self.max_line {
                return Err(CodecError::LineTooLong(self.max_line));
            }
            let mut line: Vec<u8> = self.buf.drain(..=end).collect();
            self.scanned = 0;
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.is_empty() {
                return Ok(Some(std::mem::take(&mut self.current)));
            }
            let line = String::from_utf8_lossy(&line);
            let Some((name, value)) = line.split_once('=') else {
                continue;
            };
            if self.current.attributes.len() >= self.max_attributes {
                return Err(CodecError::TooManyAttributes(self.max_attributes));
            }
            self.current
                .attributes
                .push((name.to_string(), value.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RCPT: &[u8] = b"request=smtpd_access_policy\nprotocol_state=RCPT\n\
        recipient=a@example.org\nsize=12\n\n";

    fn all(d: &mut PolicyDecoder) -> Vec<PolicyRequest> {
        let mut out = Vec::new();
        while let Some(r) = d.next_request().unwrap() {
            out.push(r);
        }
        out
    }

    #[test]
    fn request_ends_at_the_empty_line() {
        let mut d = PolicyDecoder::new(512, 16);
        d.feed(RCPT);
        let reqs = all(&mut d);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].first("recipient"), Some("a@example.org"));
        assert_eq!(reqs[0].first("size"), Some("12"));
        assert_eq!(reqs[0].attributes.len(), 4);
        assert!(!d.is_mid_request());
    }

    #[test]
    fn every_split_of_two_requests_gives_the_same_requests() {
        let mut input = RCPT.to_vec();
        input.extend_from_slice(b"protocol_state=DATA\r\nrecipient=b@x\r\n\r\n");
        let mut whole = PolicyDecoder::new(512, 16);
        whole.feed(&input);
        let expected = all(&mut whole);
        assert_eq!(expected.len(), 2);
        assert_eq!(expected[1].first("recipient"), Some("b@x"));
        for split in 0..=input.len() {
            let mut d = PolicyDecoder::new(512, 16);
            d.feed(&input[..split]);
            let mut got = all(&mut d);
            d.feed(&input[split..]);
            got.extend(all(&mut d));
            assert_eq!(got, expected, "split at {split}");
        }
    }

    #[test]
    fn lines_without_equals_are_ignored() {
        let mut d = PolicyDecoder::new(512, 16);
        d.feed(b"garbage\nrecipient=a@b\n\n");
        let r = all(&mut d);
        assert_eq!(r[0].attributes, [("recipient".into(), "a@b".into())]);
    }

    #[test]
    fn a_line_over_the_bound_is_an_error_even_before_its_lf() {
        let mut d = PolicyDecoder::new(512, 16);
        d.feed(&vec![b'a'; 600]);
        assert_eq!(d.next_request(), Err(CodecError::LineTooLong(512)));
        let mut d = PolicyDecoder::new(512, 16);
        let mut line = b"a=".to_vec();
        line.extend(vec![b'b'; 510]);
        line.push(b'\n');
        d.feed(&line);
        assert_eq!(d.next_request(), Err(CodecError::LineTooLong(512)));
        let mut d = PolicyDecoder::new(512, 16);
        d.feed(&line[..line.len() - 2]);
        d.feed(b"\n\n");
        assert_eq!(
            d.next_request().unwrap().unwrap().attributes[0].1.len(),
            509
        );
    }

    #[test]
    fn too_many_attributes_is_an_error() {
        let mut d = PolicyDecoder::new(512, 2);
        d.feed(b"a=1\nb=2\nc=3\n\n");
        assert_eq!(d.next_request(), Err(CodecError::TooManyAttributes(2)));
    }

    #[test]
    fn a_partial_request_is_reported_mid_request() {
        let mut d = PolicyDecoder::new(512, 16);
        d.feed(b"recipient=a@b\n");
        assert_eq!(d.next_request(), Ok(None));
        assert!(d.is_mid_request());
    }
}
