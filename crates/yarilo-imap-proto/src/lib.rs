//! yarilo's IMAP grammar: a streaming, bounded, sans-I/O command parser and
//! a typed response encoder.
//!
//! Implements the syntax of IMAP4rev1 (RFC 3501) and IMAP4rev2 (RFC 9051)
//! with IDLE (RFC 2177), NAMESPACE (RFC 2342), ID (RFC 2971), ENABLE
//! (RFC 5161), UIDPLUS (RFC 4315), MOVE (RFC 6851), LITERAL+/LITERAL-
//! (RFC 7888), SASL-IR (RFC 4959), UNSELECT (RFC 3691), LIST-EXTENDED
//! (RFC 5258), LIST-STATUS (RFC 5819), SPECIAL-USE (RFC 6154), ESEARCH
//! (RFC 4731), SEARCHRES (RFC 5182), CONDSTORE/QRESYNC (RFC 7162), BINARY
//! (RFC 3516), MULTIAPPEND (RFC 3502), STATUS=SIZE (RFC 8438), WITHIN
//! (RFC 5032), APPENDLIMIT (RFC 7889), UTF8=ACCEPT (RFC 6855), SAVEDATE
//! (RFC 8514), OBJECTID (RFC 8474), SORT/THREAD (RFC 5256), SORT=DISPLAY
//! (RFC 5957), ESORT/CONTEXT (RFC 5267), PARTIAL (RFC 9394), CATENATE
//! (RFC 4469), URLAUTH (RFC 4467, RFC 5524), NOTIFY (RFC 5465), METADATA
//! (RFC 5464), COMPRESS (RFC 4978) and QUOTA (RFC 9208).
//!
//! Layout: [`Receiver`] frames bytes into commands (literals, limits,
//! streamed APPEND); [`parse_command`] is the grammar over one complete
//! command; [`Command::encode`] spells a command as a client would;
//! [`response`] holds typed responses and their encoder. Operator and
//! driver documentation: `docs/imap-parser.md`.
//!
//! Invariants: no function panics on any input; memory held per connection
//! is bounded by [`Limits`]; the parse of a byte stream does not depend on
//! how it was split.

pub mod command;
mod datetime;
mod error;
mod flag;
mod lexer;
mod mailbox;
mod parse;
mod receiver;
pub mod response;
mod sequence;
pub mod utf7;

pub use command::{Command, Tag};
pub use datetime::{Date, DateTime};
pub use error::ParseError;
pub use flag::Flag;
pub use lexer::{LiteralAnnounce, MAX_DEPTH};
pub use mailbox::Mailbox;
pub use parse::{parse_command, AppendEvent, AppendKind, ParseOptions, MAX_APPEND_MESSAGES};
pub use receiver::{BadReason, Expect, Limits, Outcome, Receiver};
pub use sequence::{SeqItem, SeqNum, SequenceSet};
