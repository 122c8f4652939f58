//! Session-ending errors. Everything else a client can cause is a reply,
//! not an error: the session state machine answers it and goes on.

/// Why a session ended early. Every variant closes the connection; none
/// changes anything stored (LMTP appends are all-or-nothing per recipient).
#[derive(Debug, thiserror::Error)]
pub enum SmtpError {
    /// The socket failed (client fault or network); nothing more is sent.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The client closed the connection without QUIT.
    #[error("connection closed by client")]
    Closed,
    /// The client was silent past the timeout; answered 421 4.4.2.
    #[error("client timed out")]
    Timeout,
    /// The server is stopping; answered 421 4.3.2.
    #[error("server shutting down")]
    Shutdown,
    /// Too many bad commands or failed AUTHs; answered 421 4.7.0.
    #[error("too many errors")]
    TooManyErrors,
    /// The STARTTLS handshake failed; the connection is unusable.
    #[error("TLS handshake: {0}")]
    Tls(std::io::Error),
}

impl SmtpError {
    /// The `result` label for session metrics.
    pub fn label(&self) -> &'static str {
        match self {
            SmtpError::Io(_) => "io",
            SmtpError::Closed => "closed",
            SmtpError::Timeout => "timeout",
            SmtpError::Shutdown => "shutdown",
            SmtpError::TooManyErrors => "errors",
            SmtpError::Tls(_) => "tls",
        }
    }
}
