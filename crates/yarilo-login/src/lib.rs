//! The login-proxy framework: everything between a mail client's first
//! byte and the byte pipe to the backend that serves the session, and the
//! backend's side of that hop.
//!
//! Flow of a login process (`yarilo imap-login`, …), as
//! `docs/login.md` describes for operators:
//!
//! 1. [`listen`]: bind `services.<name>`, read a PROXY v1/v2 header from
//!    `general.haproxy.trusted_nets` only, terminate implicit TLS;
//! 2. the protocol module ([`imap`]) greets, answers pre-login commands
//!    (CAPABILITY, ID, NOOP, LOGOUT, STARTTLS) and captures credentials
//!    (LOGIN, AUTHENTICATE with SASL-IR);
//! 3. the auth service decides (passdb, `allow_nets` and `nologin` against
//!    the real client IP); a failure is answered here and no backend is
//!    contacted;
//! 4. [`route`] picks the backend, [`hop`] dials it (plain or internal
//!    mTLS) and sends the [`preamble`]; the backend VERIFYs the token and
//!    speaks first — for IMAP the tagged OK of the client's login command
//!    with the backend's own CAPABILITY list;
//! 5. [`pipe`] copies bytes both ways until either side closes.
//!
//! With `warden_client.enabled`, [`warden`] adds CONNECT before the
//! greeting, the auth-failure penalty, a per-user SESSION_START before
//! step 4 and the kick bus that ends a piped session (`imap-login`,
//! `pop3-login`, `submission-login`).
//!
//! With director routing, [`director_link`] reports each piped session to
//! the director (SESSION-OPEN/CLOSE) and ends the sessions the director
//! kicks (KICK-WATCH → USER-KICKED).
//!
//! On the backend, [`gate`] admits a connection only from a trusted login
//! peer (internal mTLS role `login`, or `general.xclient.trusted_nets` when
//! mTLS is off), reads one bounded preamble with a timeout and VERIFYs it.
//!
//! Protocols: [`imap`], [`pop3`], [`submission`] (credential capture and
//! the first-line check of each), and [`lmtp`] (no credentials: a
//! per-recipient userdb lookup, routing and fan-out with XCLIENT).
//! Adding one (managesieve) means a module beside them; routing, the hop
//! ([`hop`], the shared hand-off), the gate and the pipe are shared.
//!
//! Invariants: nothing a client sends can panic a session or grow a buffer
//! past a configured bound; every wait on a peer has a timeout; the
//! backend is dialled only after the auth service accepted the
//! credentials; the login process never sends the protocol's
//! login-success reply itself (the backend does, so the capability list
//! is the backend's).

mod client;
pub mod director_link;
pub mod gate;
mod handoff;
pub mod hop;
pub mod imap;
pub mod lines;
pub mod listen;
pub mod lmtp;
mod metrics;
pub mod pipe;
pub mod pop3;
pub mod preamble;
pub mod route;
mod settings;
pub mod submission;
pub mod warden;
pub mod xclient;

pub use metrics::LoginMetrics;
pub use settings::LoginSettings;
pub use warden::LoginWarden;

/// Why a login could not be handed to a backend. Each variant says who is
/// at fault; all of them leave the client connection usable in the
/// not-authenticated state (the client sees `NO [UNAVAILABLE]`).
#[derive(Debug, thiserror::Error)]
pub enum HopError {
    /// Routing gave no backend (director unreachable or no backend for
    /// the user). Upstream fault; another attempt may work.
    #[error("no backend: {0}")]
    Route(String),
    /// The backend could not be dialled or the internal TLS handshake
    /// failed. Upstream fault; another backend may work. `unreachable`:
    /// no TCP connection at all (refused, timed out) — what a login
    /// reports to the director (BACKEND-UNREACHABLE); a failed TLS
    /// handshake is a configuration fault and is not reported.
    #[error("cannot reach backend {addr}: {message}")]
    Connect {
        addr: String,
        message: String,
        unreachable: bool,
    },
    /// The backend closed, timed out or sent garbage instead of its first
    /// line. Upstream fault; the token is spent, the client must log in
    /// again.
    #[error("backend {addr} did not answer: {message}")]
    NoAnswer { addr: String, message: String },
}

impl HopError {
    /// The `result` label of `yarilo_login_backend_dials_total`.
    pub fn label(&self) -> &'static str {
        match self {
            HopError::Route(_) => "no_route",
            HopError::Connect { .. } => "connect_failed",
            HopError::NoAnswer { .. } => "no_answer",
        }
    }
}
