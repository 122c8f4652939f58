//! yarilo's SMTP family: LMTP delivery (RFC 2033) and message submission
//! (RFC 6409, RFC 8314).
//!
//! Layers, as in every yarilo protocol crate:
//!
//! * the grammar, sans-I/O: [`command`] (bounded command lines → typed
//!   commands), [`reply`] (single- and multi-line replies with RFC 3463
//!   enhanced status codes), [`data`] (DATA dot-unstuffing, streaming,
//!   with a size cap) and [`address`] (paths and `+detail`);
//! * the driver: [`io`], a buffered connection over any
//!   `AsyncRead + AsyncWrite` that answers pipelined commands in one write
//!   (RFC 2920) and reads DATA / BDAT bodies (RFC 3030);
//! * the sessions: [`lmtp`] (delivery into `yarilo-store`, per-recipient
//!   replies, quota, the [`lmtp::DeliveryFilter`] hook for Sieve) and
//!   [`submission`] (SASL AUTH, sender authorization, the [`relay`] to the
//!   site's MTA).
//!
//! Invariants: nothing a client sends can panic the process; every line and
//! every message is bounded; LMTP answers 250 for a recipient only after its
//! copy is durable in the store; Submission never answers 250 to DATA before
//! the relay did.

pub mod address;
pub mod command;
pub mod data;
pub mod error;
pub mod io;
pub mod lmtp;
mod metrics;
mod received;
pub mod relay;
pub mod reply;
pub mod submission;

pub use error::SmtpError;
pub use lmtp::{DeliveryFilter, KeepFilter, LmtpServer, LmtpSettings};
pub use submission::{SubmissionServer, SubmissionSettings};
