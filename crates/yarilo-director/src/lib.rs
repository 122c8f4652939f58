//! yarilo-director: which backend serves each user.
//!
//! Login pods ask `LOOKUP <user> <tag> [proto]` and get a backend IP and
//! port; the director never touches client bytes. Layout:
//!
//! - [`template`]: the `username_hash` template (`%u %n %d`, `%L`, `%%`).
//! - [`ring`]: per-tag consistent-hash ring, yarilo and Dovecot 2.3 layouts.
//! - [`backend`]: the backend set (static, admin, self-registered with
//!   heartbeat leases).
//! - [`directory`]: sticky assignments, 16 bytes each, Lamport-stamped.
//! - [`session`]: the live session registry (SESSION-OPEN/CLOSE).
//! - [`director`]: the state machine tying them together — one
//!   [`Director::assign_and_pin`] for every caller. Pure: time comes in as
//!   a [`Tick`], nothing reads a clock or a socket, so the ring (issue 11)
//!   can replicate and simulate it.
//! - [`protocol`]: the LOOKUP line protocol, sans-I/O.
//! - [`service`]: the tokio driver, [`service::run`].
//! - [`component`]: `yarilo director` / `yarilo backend-reg` entry points.
//! - [`metrics`]: Prometheus metrics.
//! - [`api`]: the admin HTTP API.
//! - [`backend_reg`]: the `yarilo backend-reg` sidecar (registration +
//!   heartbeat gated on readiness, BACKEND-DOWN on shutdown).
//! - [`cluster`]: the director ring (several directors sharing members,
//!   backends and sticky assignments).

pub mod api;
pub mod backend;
pub mod backend_reg;
pub mod cluster;
pub mod component;
pub mod director;
pub mod directory;
pub mod metrics;
pub mod protocol;
pub mod ring;
pub mod service;
pub mod session;
pub mod template;

pub use backend::{Backend, BackendId, Source, TagId};
pub use component::{run_backend_reg, DirectorComponent};
pub use director::{Director, LookupError, Route, Settings};
pub use directory::{DirectorId, Stamp, UserKey};
pub use service::run;
pub use template::UsernameTemplate;

/// Milliseconds on the injected clock (the driver counts from start-up).
pub type Tick = u64;

/// The protocol of a session, for `least_sessions` accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    Imap,
    Pop3,
    Lmtp,
    Submission,
    Managesieve,
    Jmap,
    Other,
}

impl Proto {
    pub const COUNT: usize = 7;

    /// Parses a protocol name (case-insensitive); unknown names are
    /// `Other`, never an error.
    pub fn parse(s: &str) -> Proto {
        match s.to_ascii_lowercase().as_str() {
            "imap" | "imaps" => Proto::Imap,
            "pop3" | "pop3s" => Proto::Pop3,
            "lmtp" => Proto::Lmtp,
            "submission" | "submissions" | "smtp" => Proto::Submission,
            "managesieve" | "sieve" => Proto::Managesieve,
            "jmap" => Proto::Jmap,
            _ => Proto::Other,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The name [`Proto::parse`] reads back.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Imap => "imap",
            Proto::Pop3 => "pop3",
            Proto::Lmtp => "lmtp",
            Proto::Submission => "submission",
            Proto::Managesieve => "managesieve",
            Proto::Jmap => "jmap",
            Proto::Other => "other",
        }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum DirectorError {
    /// The `username_hash` template is invalid: start-up must abort.
    #[error("invalid username_hash template `{template}`: {why}")]
    Template { template: String, why: String },
    /// A static backend host did not resolve: start-up must abort.
    #[error("mail_servers host `{host}` did not resolve: {why}")]
    Resolve { host: String, why: String },
    /// Internal TLS material could not be loaded: start-up must abort.
    #[error("internal TLS: {0}")]
    Tls(String),
    /// A setting cannot be used: start-up must abort.
    #[error("{0}")]
    Config(String),
    /// The listener failed; the service stops.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}
