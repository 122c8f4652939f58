//! `yarilo quota-status`: Postfix's policy delegation protocol
//! (<https://www.postfix.org/SMTPD_POLICY_README.html>) answered from the
//! users' quota state on the shared mail volume, with the replies and
//! setting names of Dovecot 2.3's `quota-status -p postfix`.
//!
//! Three layers: [`codec`] (sans-I/O: bytes in, requests out), [`decision`]
//! (pure: a request and a lookup outcome to a reply) and [`server`] (the
//! tokio driver: sockets, timeouts, the userdb and the store).
//!
//! Invariants: every request gets exactly one reply, in order, on a
//! persistent connection; a line or request beyond the configured bounds
//! closes the connection (the protocol has no error reply); nothing here
//! stores or changes messages (opening a user with no mail yet creates the
//! empty mailbox directories, as Dovecot does).

pub mod codec;
pub mod decision;
pub mod metrics;
pub mod server;

pub use codec::{CodecError, PolicyDecoder, PolicyRequest};
pub use decision::{Outcome, Replies, Verdict};
pub use metrics::QuotaStatusMetrics;
pub use server::{QuotaStatusServer, QuotaStatusSettings};
