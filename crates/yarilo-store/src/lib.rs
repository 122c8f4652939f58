//! yarilo's mail store: Dovecot 2.3-compatible Maildir++ with yarilo's own
//! per-mailbox index.
//!
//! On disk (shared with Dovecot, either may write at any time):
//! Maildir++ folders ([`names`]), file names with `S=`/`W=` sizes and
//! `:2,` flags ([`filename`], [`flags`]), `dovecot-uidlist` v3
//! ([`uidlist`]), `dovecot-keywords` ([`keywords`]), `subscriptions`
//! ([`subscriptions`]), and the uid list dotlock ([`dotlock`]) that
//! serializes writers across processes. yarilo adds a per-mailbox index
//! (snapshot + append-only log, [`index`]) holding MODSEQs, the expunge
//! history and a header cache; it is always rebuildable from the Maildir.
//!
//! The API for protocols is in [`store`]: [`Store`] → [`UserStore`] →
//! [`Mailbox`] → [`MailboxView`]. Readers use views without locks; writers
//! go through the `yarilo_locks` [`yarilo_locks::Locker`] (`idx:` →
//! `mbox:` → `deliver:`) and the dotlock. Every write is atomic and
//! durable (see [`maildir`] for the exact orders and why they are safe).

pub mod cleanup;
pub mod dotlock;
pub mod durable;
mod error;
pub mod filename;
pub mod flags;
pub mod index;
pub mod keywords;
pub mod location;
pub mod maildir;
pub mod meta;
pub mod metadata;
pub mod names;
pub mod quota_rules;
pub mod records;
pub mod store;
pub mod subscriptions;
pub mod uidlist;
pub mod urlauth_keys;
pub mod view;

pub use error::StoreError;
pub use flags::Flags;
pub use location::{MailLocation, UserInfo};
pub use maildir::{FlagOp, FlagResult};
pub use quota_rules::QuotaLimits;
pub use records::MessageRecord;
pub use store::{
    AppendOptions, AutoCreate, Mailbox, MailboxEntry, MailboxSetting, QuotaUsage, SpecialUse,
    Store, StoreSettings, UserStore,
};
pub use view::{MailboxView, MessageInfo};
