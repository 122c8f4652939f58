//! COMPRESS=DEFLATE (RFC 4978): raw deflate (no zlib header) both ways,
//! each burst of output ended with a sync flush so the client can decode
//! it at once. The state lives in the session layer, so it works the same
//! behind a login proxy (which only pipes bytes).

use std::io;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Largest inflated size of one read: a decompression bomb is cut off
/// here (the receiver's own line and literal limits apply after it).
const MAX_INFLATE_PER_READ: usize = 16 * 1024 * 1024;

pub(crate) struct Deflate {
    out: Compress,
    inp: Decompress,
}

impl Default for Deflate {
    fn default() -> Self {
        Deflate {
            // Level 6 (zlib's default); raw deflate (`false`: no header).
            out: Compress::new(Compression::new(6), false),
            inp: Decompress::new(false),
        }
    }
}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("deflate: {e}"))
}

impl Deflate {
    /// Compresses `data` and sync-flushes.
    pub fn deflate(&mut self, data: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(data.len() / 2 + 64);
        let mut input = data;
        loop {
            out.reserve(4096);
            let before_in = self.out.total_in();
            let status = self
                .out
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(bad)?;
            let used = (self.out.total_in() - before_in) as usize;
            input = input.get(used..).unwrap_or_default();
            // Done when all input is consumed and the flush fit.
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
            if status == Status::StreamEnd {
                return Ok(out);
            }
        }
    }

    /// Inflates what arrived.
    pub fn inflate(&mut self, data: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(data.len() * 3 + 64);
        let mut input = data;
        loop {
            out.reserve(8192);
            let before_in = self.inp.total_in();
            let before_out = out.len();
            self.inp
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
                .map_err(bad)?;
            let used = (self.inp.total_in() - before_in) as usize;
            input = input.get(used..).unwrap_or_default();
            if out.len() > MAX_INFLATE_PER_READ {
                return Err(bad("too much data at once"));
            }
            let progressed = used > 0 || out.len() > before_out;
            if (input.is_empty() && out.len() < out.capacity()) || !progressed {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_pieces() {
        let mut a = Deflate::default();
        let mut b = Deflate::default();
        let msg = b"a1 FETCH 1:* (FLAGS)\r\n".repeat(500);
        let packed = a.deflate(&msg).unwrap();
        assert!(packed.len() < msg.len() / 10);
        let mut got = Vec::new();
        for piece in packed.chunks(7) {
            got.extend(b.inflate(piece).unwrap());
        }
        assert_eq!(got, msg);
        // A second burst decodes on its own (sync flush).
        let packed = a.deflate(b"a2 NOOP\r\n").unwrap();
        assert_eq!(b.inflate(&packed).unwrap(), b"a2 NOOP\r\n");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut d = Deflate::default();
        assert!(d.inflate(&[0xff; 64]).is_err());
    }
}
