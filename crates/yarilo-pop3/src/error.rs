use crate::uidl::UidlFormatError;

/// Why a POP3 session or the server could not do something. Each variant
/// says who is at fault; the session maps them to `-ERR` replies with
/// RFC 2449 / RFC 3206 response codes and to the `result` metric label.
#[derive(Debug, thiserror::Error)]
pub enum Pop3Error {
    /// `pop3.*` settings that cannot work. The server does not start.
    #[error("pop3.{key}: {message}")]
    Config { key: &'static str, message: String },
    /// `pop3.uidl_format` does not parse. The server does not start.
    #[error("pop3.uidl_format: {0}")]
    UidlFormat(#[from] UidlFormatError),
    /// The mail store failed (server fault): `-ERR [SYS/TEMP]`, or
    /// `-ERR [IN-USE]` for a lock held elsewhere. Session state unchanged.
    #[error(transparent)]
    Store(#[from] yarilo_store::StoreError),
    /// Reading from or writing to the client failed: the connection must
    /// close.
    #[error("client connection: {0}")]
    Io(#[from] std::io::Error),
}
