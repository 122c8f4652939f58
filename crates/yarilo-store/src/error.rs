use std::io;

use crate::dotlock::DotlockError;
use crate::location::LocationError;
use crate::names::NameError;
use crate::uidlist::UidListError;

/// Why a store operation failed. Unless a variant says otherwise, the
/// operation had no effect (writes are all-or-nothing per message; a batch
/// reports the UIDs it did complete through its return value only on
/// success).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The mailbox does not exist. State unchanged (IMAP: NO [NONEXISTENT]).
    #[error("mailbox {0:?} does not exist")]
    NoMailbox(String),
    /// Create/rename target exists. State unchanged (IMAP: NO [ALREADYEXISTS]).
    #[error("mailbox {0:?} already exists")]
    MailboxExists(String),
    /// The operation is not allowed on this mailbox (deleting INBOX, …).
    #[error("mailbox {0:?}: {1}")]
    NotAllowed(String, &'static str),
    /// The name cannot be a mailbox. State unchanged (IMAP: NO / BAD).
    #[error(transparent)]
    Name(#[from] NameError),
    /// `mail_location` does not work for this user.
    #[error(transparent)]
    Location(#[from] LocationError),
    /// A UID named by the caller is not (or no longer) in the mailbox.
    #[error("uid {0} does not exist (expunged?)")]
    NoMessage(u32),
    /// The mailbox already uses all 26 keyword letters Maildir offers.
    #[error("too many keywords in this mailbox (Maildir allows 26)")]
    TooManyKeywords,
    /// The message is larger than the configured limit.
    #[error("message of {0} bytes is too large")]
    TooLarge(u64),
    /// The lock service refused or timed out; nothing was written.
    #[error("lock: {0}")]
    Lock(#[from] yarilo_locks::LockError),
    /// Another process holds the Maildir's dotlock for too long, or broke
    /// ours as stale while we held it; nothing was written to the uid list
    /// (the operation may be retried).
    #[error(transparent)]
    Dotlock(#[from] DotlockError),
    /// `dovecot-uidlist` cannot be parsed. The mailbox is not written
    /// until an operator fixes or removes it (removing it renumbers, which
    /// we never do on our own).
    #[error(transparent)]
    UidList(#[from] UidListError),
    /// File system error; the mailbox is consistent on disk (every write is
    /// atomic), the operation may be retried.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A key file (URLAUTH keys) others can read or write: refused until
    /// an operator makes it owner-only. Nothing was written.
    #[error("permissions {mode:04o} for {path} are too open: keys must be owner-only (chmod 600)")]
    InsecureKeyFile { path: String, mode: u32 },
    /// A bug or a panicked worker.
    #[error("internal error: {0}")]
    Internal(String),
}

impl StoreError {
    pub(crate) fn io(context: impl std::fmt::Display, source: io::Error) -> StoreError {
        StoreError::Io {
            context: context.to_string(),
            source,
        }
    }
}

pub(crate) trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> IoContext<T> for Result<T, io::Error> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::io(what(), e))
    }
}
