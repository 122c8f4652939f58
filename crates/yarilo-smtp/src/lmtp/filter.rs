//! The hook where a Sieve interpreter decides what happens to a message at
//! delivery. LMTP asks the [`DeliveryFilter`] once per recipient, after the
//! message was received and before anything is stored.

use std::future::Future;
use std::pin::Pin;

use yarilo_auth::ExtraFields;

/// What to do with one recipient's copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryAction {
    /// Store into the default mailbox (INBOX, or the `+detail` mailbox).
    Keep,
    /// Store into this mailbox (Sieve `fileinto`); falls back to the
    /// default mailbox when it does not exist and cannot be created, as
    /// Dovecot does.
    FileInto {
        mailbox: String,
        /// IMAP system flags (`\Seen`, `\Flagged`, …) and keywords.
        flags: Vec<String>,
    },
    /// Drop this copy; the recipient still gets 250 (Sieve `discard`).
    Discard,
    /// Refuse this recipient with 550 5.7.1 and this text (Sieve `reject`).
    Reject(String),
}

/// What the filter sees.
#[derive(Debug)]
pub struct DeliveryContext<'a> {
    /// The userdb user name.
    pub user: &'a str,
    /// Its userdb fields (`home`, `sieve`, …).
    pub fields: &'a ExtraFields,
    /// The envelope sender, empty for `<>`.
    pub sender: &'a str,
    /// The recipient as the MTA gave it (with any `+detail`).
    pub recipient: &'a str,
    /// The mailbox [`DeliveryAction::Keep`] stores into.
    pub default_mailbox: &'a str,
    /// The message as received (CRLF line endings, without the headers
    /// LMTP adds).
    pub message: &'a [u8],
}

/// A boxed future, so the trait stays object-safe.
pub type FilterFuture<'a> = Pin<Box<dyn Future<Output = Vec<DeliveryAction>> + Send + 'a>>;

/// Decides the actions for one recipient. An empty list means
/// [`DeliveryAction::Keep`] (Sieve's implicit keep). A filter that fails
/// should answer `Keep`, so mail is never lost to a broken script.
pub trait DeliveryFilter: Send + Sync + 'static {
    fn filter<'a>(&'a self, ctx: &'a DeliveryContext<'a>) -> FilterFuture<'a>;
}

/// The default: every message to its default mailbox.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeepFilter;

impl DeliveryFilter for KeepFilter {
    fn filter<'a>(&'a self, _ctx: &'a DeliveryContext<'a>) -> FilterFuture<'a> {
        Box::pin(async { vec![DeliveryAction::Keep] })
    }
}
