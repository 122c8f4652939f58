//! The internal line protocols (director LOOKUP and ring, locks, auth,
//! warden, fts, backend registration) share one framing:
//!
//! - a line is fields separated by TAB and terminated by LF;
//! - inside a field, byte 0x01 escapes: `\x01` → `\x01 1`, TAB → `\x01 t`,
//!   LF → `\x01 n`, CR → `\x01 r` (the escape Dovecot's internal protocols
//!   use, so nothing in a user name or a reason can split a line);
//! - every line is bounded; an over-long line is an error, never a buffer
//!   that grows with what a peer sends;
//! - the first line each side sends is `VERSION\t<service>\t<major>\t<minor>`;
//!   peers with different majors refuse each other.
//!
//! Invariant: `split_line(&join_line(fields)) == fields` for every list of
//! fields (property-tested below).

mod codec;
mod escape;
mod handshake;
mod preamble;
mod version;

pub use codec::LineCodec;
pub use escape::{escape, join_line, split_line, unescape};
pub use handshake::handshake;
pub use preamble::Preamble;
pub use version::Version;

/// The longest line any internal protocol accepts by default, LF included.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024;

/// Why a line could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// The peer sent more than the limit without an LF; the connection
    /// must close (its framing can no longer be trusted).
    #[error("line longer than {limit} bytes")]
    LineTooLong { limit: usize },
    /// A field holds `\x01` followed by something other than 1, t, n, r.
    /// The line is rejected; the connection may go on.
    #[error("bad escape sequence in field")]
    BadEscape,
    /// The line is not UTF-8. The line is rejected; the connection may go on.
    #[error("line is not UTF-8")]
    NotUtf8,
    /// A structured line (VERSION, preamble) lacks a part or has a bad one.
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    /// Framing I/O error; the connection is gone.
    #[error("i/o: {0}")]
    Io(String),
}

impl From<std::io::Error> for WireError {
    fn from(e: std::io::Error) -> Self {
        WireError::Io(e.to_string())
    }
}
