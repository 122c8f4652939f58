//! [`MailboxView`]: an immutable, consistent picture of one mailbox that
//! readers use without any lock. Cheap to clone (copy-on-write chunks).

use std::path::PathBuf;
use std::sync::Arc;

use crate::flags::Flags;
use crate::keywords::Keywords;
use crate::records::{MessageRecord, Records};

/// One mailbox at one moment. Sequence numbers are positions in this view
/// (1-based, as IMAP counts); UIDs are stable.
#[derive(Debug, Clone)]
pub struct MailboxView {
    pub(crate) name: String,
    pub(crate) uidvalidity: u32,
    pub(crate) uidnext: u32,
    pub(crate) highest_modseq: u64,
    pub(crate) history_start_modseq: u64,
    pub(crate) records: Records,
    pub(crate) keywords: Arc<Keywords>,
    pub(crate) expunged: Arc<Vec<(u32, u64)>>,
    pub(crate) bytes: u64,
    pub(crate) dir: PathBuf,
    pub(crate) cache_path: Option<PathBuf>,
}

/// A message as the protocols see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageInfo {
    pub uid: u32,
    pub flags: Flags,
    pub keywords: Vec<String>,
    pub modseq: u64,
    pub size: u64,
    /// RFC822.SIZE (CRLF line ends).
    pub vsize: u64,
    /// INTERNALDATE, unix seconds.
    pub internal_date: i64,
    /// Dovecot-compatible GUID (the Maildir base name).
    pub guid: String,
}

impl MailboxView {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn uidvalidity(&self) -> u32 {
        self.uidvalidity
    }
    pub fn uidnext(&self) -> u32 {
        self.uidnext
    }
    pub fn highest_modseq(&self) -> u64 {
        self.highest_modseq
    }
    /// Number of messages (EXISTS).
    pub fn len(&self) -> usize {
        self.records.len()
    }
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
    /// Sum of physical message sizes.
    pub fn total_bytes(&self) -> u64 {
        self.bytes
    }
    /// Keywords defined in this mailbox (for FLAGS / PERMANENTFLAGS).
    pub fn keyword_names(&self) -> Vec<String> {
        self.keywords.all()
    }

    /// The message with 1-based sequence number `seq`.
    pub fn by_seq(&self, seq: u32) -> Option<&MessageRecord> {
        let i = (seq as usize).checked_sub(1)?;
        self.records.get(i)
    }

    pub fn by_uid(&self, uid: u32) -> Option<&MessageRecord> {
        self.records.find(uid)
    }

    /// 1-based sequence number of `uid`.
    pub fn seq_of(&self, uid: u32) -> Option<u32> {
        self.records.position(uid).map(|p| p as u32 + 1)
    }

    pub fn records(&self) -> impl DoubleEndedIterator<Item = &MessageRecord> + '_ {
        self.records.iter()
    }

    pub fn uids(&self) -> Vec<u32> {
        self.records.iter().map(|r| r.uid).collect()
    }

    /// The public description of a record.
    pub fn info(&self, r: &MessageRecord) -> MessageInfo {
        MessageInfo {
            uid: r.uid,
            flags: r.flags,
            keywords: self.keywords.names_of(r.keywords),
            modseq: r.modseq,
            size: r.size,
            vsize: r.vsize,
            internal_date: r.internal_date,
            guid: crate::filename::base_of(&r.filename).to_string(),
        }
    }

    /// Messages whose MODSEQ is above `modseq` (CONDSTORE `CHANGEDSINCE`).
    pub fn changed_since(&self, modseq: u64) -> Vec<&MessageRecord> {
        self.records.iter().filter(|r| r.modseq > modseq).collect()
    }

    /// UIDs expunged after `modseq` (QRESYNC `VANISHED (EARLIER)`).
    /// `None`: the history does not reach back that far (index rebuilt);
    /// the caller must treat every UID it knows and we lack as vanished.
    pub fn expunged_since(&self, modseq: u64) -> Option<Vec<u32>> {
        if modseq < self.history_start_modseq {
            return None;
        }
        let start = self.expunged.partition_point(|(_, m)| *m <= modseq);
        let mut v: Vec<u32> = self.expunged[start..].iter().map(|(u, _)| *u).collect();
        v.sort_unstable();
        v.dedup();
        Some(v)
    }

    /// Where the message file is now (it moves when flags change).
    pub fn path_of(&self, r: &MessageRecord) -> PathBuf {
        self.dir
            .join(if r.in_new { "new" } else { "cur" })
            .join(&*r.filename)
    }
}
