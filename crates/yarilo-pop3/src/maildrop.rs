//! The maildrop of one POP3 session: the INBOX as it was at login
//! (RFC 1939 §4: numbers and sizes do not change during a session), the
//! deletion marks, and the UPDATE step that applies them at QUIT.
//!
//! Invariant: the store is written only by [`Maildrop::commit`]. Other
//! sessions (IMAP, LMTP, another POP3) may change the INBOX meanwhile;
//! a message they expunge reads as [`MessageError::Expunged`].

use std::sync::Arc;

use yarilo_store::{FlagOp, Flags, Mailbox, MailboxView, StoreError};

use crate::uidl::{saved_uidls, UidlFormat, UidlInput};

/// Why a message number cannot be used. State unchanged; the client gets
/// `-ERR`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("There's no message {0}.")]
    NoSuchMessage(u32),
    #[error("Message is deleted.")]
    Deleted,
    /// Another session expunged it after our login.
    #[error("Message {0} was expunged by another session.")]
    Expunged(u32),
}

#[derive(Debug, Clone)]
struct Entry {
    uid: u32,
    /// Size with CRLF line ends (RFC 1939 §5: exact octets as sent).
    size: u64,
    uidl: String,
    deleted: bool,
    retrieved: bool,
}

/// What QUIT did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitResult {
    /// Messages we removed (those already gone are not counted).
    pub deleted: usize,
}

/// One session's view of the INBOX.
pub struct Maildrop {
    mailbox: Mailbox,
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Maildrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maildrop")
            .field("mailbox", &self.mailbox.name())
            .field("messages", &self.entries.len())
            .finish()
    }
}

impl Maildrop {
    /// Takes the snapshot: refreshes the mailbox (so changes made by
    /// other processes, Dovecot included, are seen) and computes every
    /// UIDL once.
    pub async fn open(mailbox: Mailbox, format: &UidlFormat) -> Result<Maildrop, StoreError> {
        let view = mailbox.refresh().await?;
        let dir = mailbox.dir();
        let saved = tokio::task::spawn_blocking(move || saved_uidls(&dir))
            .await
            .map_err(|e| StoreError::Internal(format!("uidlist reader failed: {e}")))?;
        Ok(Maildrop {
            entries: entries(&view, format, &saved),
            mailbox,
        })
    }

    /// Messages in the maildrop, deleted ones included (the highest
    /// valid message number).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// STAT: messages not marked deleted, and their total size.
    pub fn stat(&self) -> (usize, u64) {
        self.entries
            .iter()
            .filter(|e| !e.deleted)
            .fold((0, 0), |(n, s), e| (n + 1, s + e.size))
    }

    fn entry(&self, msg: u32) -> Result<&Entry, MessageError> {
        let e = (msg as usize)
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .ok_or(MessageError::NoSuchMessage(msg))?;
        if e.deleted {
            return Err(MessageError::Deleted);
        }
        Ok(e)
    }

    fn entry_mut(&mut self, msg: u32) -> Result<&mut Entry, MessageError> {
        self.entry(msg)?;
        let i = (msg as usize).saturating_sub(1);
        self.entries
            .get_mut(i)
            .ok_or(MessageError::NoSuchMessage(msg))
    }

    pub fn size(&self, msg: u32) -> Result<u64, MessageError> {
        self.entry(msg).map(|e| e.size)
    }

    pub fn uidl(&self, msg: u32) -> Result<&str, MessageError> {
        self.entry(msg).map(|e| e.uidl.as_str())
    }

    /// (number, size) of every message not marked deleted.
    pub fn list(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.numbered().map(|(n, e)| (n, e.size))
    }

    /// (number, UIDL) of every message not marked deleted.
    pub fn uidls(&self) -> impl Iterator<Item = (u32, &str)> + '_ {
        self.numbered().map(|(n, e)| (n, e.uidl.as_str()))
    }

    fn numbered(&self) -> impl Iterator<Item = (u32, &Entry)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.deleted)
            .map(|(i, e)| (i as u32 + 1, e))
    }

    /// The whole message as stored. `retrieved` marks it for `\Seen`.
    pub async fn read(&mut self, msg: u32, retrieved: bool) -> Result<Vec<u8>, ReadError> {
        let uid = self.entry(msg)?.uid;
        let data = match self.mailbox.read_message(uid).await {
            Ok(d) => d,
            Err(StoreError::NoMessage(_)) => return Err(MessageError::Expunged(msg).into()),
            Err(e) => return Err(ReadError::Store(e)),
        };
        if retrieved {
            if let Ok(e) = self.entry_mut(msg) {
                e.retrieved = true;
            }
        }
        Ok(data)
    }

    /// DELE: marks a message (RFC 1939 §5).
    pub fn delete(&mut self, msg: u32) -> Result<(), MessageError> {
        self.entry_mut(msg)?.deleted = true;
        Ok(())
    }

    /// RSET: unmarks every message.
    pub fn reset(&mut self) {
        for e in &mut self.entries {
            e.deleted = false;
        }
    }

    /// The UPDATE state (RFC 1939 §6): expunges the marked messages and,
    /// unless `no_flag_updates`, marks retrieved ones `\Seen` (as Dovecot
    /// does). Messages already gone are skipped, not an error.
    pub async fn commit(&self, no_flag_updates: bool) -> Result<CommitResult, StoreError> {
        let doomed: Vec<u32> = self
            .entries
            .iter()
            .filter(|e| e.deleted)
            .map(|e| e.uid)
            .collect();
        let seen: Vec<u32> = self
            .entries
            .iter()
            .filter(|e| e.retrieved && !e.deleted)
            .map(|e| e.uid)
            .collect();
        if !no_flag_updates && !seen.is_empty() {
            let view = self.mailbox.view();
            let present: Vec<u32> = seen
                .into_iter()
                .filter(|u| view.by_uid(*u).is_some())
                .collect();
            if !present.is_empty() {
                // \Seen is a courtesy to IMAP clients; failing to set it
                // must not keep the client's deletions from happening.
                if let Err(e) = self
                    .mailbox
                    .store_flags(&present, FlagOp::Add, Flags::SEEN, &[], None)
                    .await
                {
                    tracing::warn!(error = %e, "could not mark retrieved messages \\Seen");
                }
            }
        }
        let deleted = if doomed.is_empty() {
            0
        } else {
            self.mailbox.expunge(&doomed).await?.len()
        };
        Ok(CommitResult { deleted })
    }
}

/// Why RETR/TOP could not read a message.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Message(#[from] MessageError),
    #[error(transparent)]
    Store(StoreError),
}

fn entries(
    view: &Arc<MailboxView>,
    format: &UidlFormat,
    saved: &std::collections::HashMap<u32, String>,
) -> Vec<Entry> {
    let uidvalidity = view.uidvalidity();
    view.records()
        .map(|r| {
            let base = yarilo_store::filename::base_of(&r.filename);
            let uidl = match saved.get(&r.uid) {
                Some(s) => s.clone(),
                None => format.expand(&UidlInput {
                    uid: r.uid,
                    uidvalidity,
                    filename: base,
                    guid: base,
                }),
            };
            Entry {
                uid: r.uid,
                size: r.vsize,
                uidl,
                deleted: false,
                retrieved: false,
            }
        })
        .collect()
}
