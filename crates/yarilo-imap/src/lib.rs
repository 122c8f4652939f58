//! The IMAP server session (RFC 3501 IMAP4rev1 and RFC 9051 IMAP4rev2 with
//! the extensions listed in [`capability`]) over `yarilo-store`.
//!
//! Layering: `yarilo-imap-proto` frames and parses bytes and spells
//! responses; this crate holds the state machine (not authenticated →
//! authenticated → selected), the mailbox synchronisation that produces
//! untagged EXISTS/EXPUNGE/FETCH updates, and the command semantics. It
//! does not care how the connection arrived: a listener in `single`, or
//! (later) a login proxy's preamble, both hand it a `ClientConn`.
//!
//! Invariants: no input from the client panics; every buffer is bounded by
//! `imap.*` limits; the MSN ↔ UID map a client sees changes only through
//! EXISTS / EXPUNGE / VANISHED responses it has been sent.

mod append;
mod auth;
mod base_subject;
pub mod capability;
mod collation;
mod compress;
mod conn;
mod context;
mod dates;
mod fetch;
mod flags;
mod idle;
mod imap_url;
mod mailboxes;
mod messages;
mod metadata;
mod metrics;
mod names;
mod notify;
mod quota;
mod recent;
mod search;
mod selected;
mod server;
mod session;
mod sort;
mod sort_cache;
mod status;
mod thread;
mod urlauth;

pub use server::{ImapServer, ImapSettings};
