//! Where client connections come in.
//!
//! A [`Listener`] binds one `services.<name>` entry, accepts with a bound
//! on concurrent connections, spawns one task per session on the
//! [`Lifecycle`]'s tracker, and registers a readiness check ("bound and the
//! accept loop alive"). [`MailStream`] is the stream a session reads and
//! writes: plain TCP that can be upgraded in place by STARTTLS, or TLS from
//! the first byte.
//!
//! Invariants: the accept loop never does I/O on an accepted socket (a slow
//! TLS handshake cannot stall accepting); after shutdown starts nothing new
//! is accepted; a connection over the limit is closed at once and counted.

mod lifecycle;
mod listener;
pub mod proxy_protocol;
mod stream;

pub use lifecycle::Lifecycle;
pub use listener::{Accepted, ClientConn, EstablishError, Listener, ListenerMetrics};
pub use stream::MailStream;

/// Why a listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("services.{service}: cannot listen on {addr}: {source}")]
    Bind {
        service: String,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("services.{service}: {message}")]
    Config { service: String, message: String },
}
