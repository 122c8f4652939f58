//! yarilo's POP3 server: RFC 1939 (POP3), RFC 2449 (CAPA and response
//! codes), RFC 5034 (SASL AUTH), RFC 2595 §4 (STLS).
//!
//! Three layers, as every yarilo protocol:
//! * [`codec`] — sans-I/O: bounded CRLF/LF line splitting, and the
//!   multi-line writer (CRLF line ends, dot-stuffing, `TOP` cutting);
//! * [`command`] and [`session`] — the grammar and the state machine
//!   (`AUTHORIZATION → TRANSACTION → UPDATE`, RFC 1939 §3), which never
//!   touches a socket: it is fed lines and fills an outbox;
//! * [`server`] — the tokio driver over any [`Pop3Stream`] with idle
//!   timeouts, STLS and the shutdown signal.
//!
//! Invariants:
//! * a session sees the INBOX as it was at login (RFC 1939 §4: message
//!   numbers never change during a session); a message expunged by IMAP
//!   meanwhile answers `-ERR` and never stops the session;
//! * nothing is deleted before `QUIT` (RFC 1939 §6): `DELE` marks, `RSET`
//!   unmarks, a dropped connection deletes nothing;
//! * UIDLs are Dovecot 2.3's for the same Maildir ([`uidl`]), so users
//!   moved from Dovecot do not download their mail again;
//! * input is hostile: lines are bounded, bad commands are counted and
//!   end the session, nothing a client sends can panic the process.

pub mod codec;
pub mod command;
mod error;
pub mod maildrop;
mod metrics;
mod server;
pub mod session;
mod settings;
pub mod uidl;

pub use error::Pop3Error;
pub use metrics::Pop3Metrics;
pub use server::{Pop3Server, Pop3Stream};
pub use settings::Pop3Settings;
