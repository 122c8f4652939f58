//! The in-memory message table of one mailbox: records sorted by UID in
//! copy-on-write chunks, so a snapshot handed to readers is an `Arc` bump
//! and a change copies one chunk (≤ [`CHUNK`] records), not the mailbox.

use std::sync::Arc;

use crate::flags::{Flags, KeywordMask};

/// Records per chunk.
pub const CHUNK: usize = 512;

/// What the store knows about one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRecord {
    pub uid: u32,
    pub flags: Flags,
    pub keywords: KeywordMask,
    /// CONDSTORE mod-sequence of the last change (RFC 7162).
    pub modseq: u64,
    /// Physical size in bytes.
    pub size: u64,
    /// Size with CRLF line ends (RFC822.SIZE).
    pub vsize: u64,
    /// INTERNALDATE, unix seconds (the file's mtime, as in Dovecot).
    pub internal_date: i64,
    /// `true` while the file is in `new/`.
    pub in_new: bool,
    /// The current file name (base + `:2,` info).
    pub filename: Box<str>,
    /// Header section in the cache file: (offset, length).
    pub cache: Option<(u64, u32)>,
}

/// Sorted, chunked, copy-on-write records.
#[derive(Debug, Clone, Default)]
pub struct Records {
    chunks: Vec<Arc<Vec<MessageRecord>>>,
    len: usize,
}

impl Records {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn last(&self) -> Option<&MessageRecord> {
        self.chunks.last().and_then(|c| c.last())
    }

    /// The record at 0-based position `idx` (IMAP sequence number − 1).
    pub fn get(&self, mut idx: usize) -> Option<&MessageRecord> {
        for c in &self.chunks {
            if idx < c.len() {
                return c.get(idx);
            }
            idx -= c.len();
        }
        None
    }

    fn locate(&self, uid: u32) -> Result<(usize, usize), usize> {
        // First chunk whose last uid is >= uid.
        let ci = self
            .chunks
            .partition_point(|c| c.last().is_some_and(|r| r.uid < uid));
        let Some(chunk) = self.chunks.get(ci) else {
            return Err(ci);
        };
        match chunk.binary_search_by_key(&uid, |r| r.uid) {
            Ok(i) => Ok((ci, i)),
            Err(_) => Err(ci),
        }
    }

    pub fn find(&self, uid: u32) -> Option<&MessageRecord> {
        self.locate(uid).ok().map(|(c, i)| &self.chunks[c][i])
    }

    /// 0-based position of `uid`.
    pub fn position(&self, uid: u32) -> Option<usize> {
        let (c, i) = self.locate(uid).ok()?;
        Some(self.chunks[..c].iter().map(|c| c.len()).sum::<usize>() + i)
    }

    pub fn get_mut(&mut self, uid: u32) -> Option<&mut MessageRecord> {
        let (c, i) = self.locate(uid).ok()?;
        Arc::make_mut(&mut self.chunks[c]).get_mut(i)
    }

    /// Inserts or replaces by UID.
    pub fn upsert(&mut self, rec: MessageRecord) {
        if let Some(r) = self.get_mut(rec.uid) {
            *r = rec;
            return;
        }
        let after_last = self.last().is_none_or(|l| l.uid < rec.uid);
        if after_last {
            match self.chunks.last_mut() {
                Some(c) if c.len() < CHUNK => Arc::make_mut(c).push(rec),
                _ => self.chunks.push(Arc::new(vec![rec])),
            }
        } else {
            let ci = self
                .chunks
                .partition_point(|c| c.last().is_some_and(|r| r.uid < rec.uid))
                .min(self.chunks.len() - 1);
            let chunk = Arc::make_mut(&mut self.chunks[ci]);
            let pos = chunk.partition_point(|r| r.uid < rec.uid);
            chunk.insert(pos, rec);
            if chunk.len() > 2 * CHUNK {
                let tail = chunk.split_off(CHUNK);
                self.chunks.insert(ci + 1, Arc::new(tail));
            }
        }
        self.len += 1;
    }

    pub fn remove(&mut self, uid: u32) -> Option<MessageRecord> {
        let (c, i) = self.locate(uid).ok()?;
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        let rec = chunk.remove(i);
        if chunk.is_empty() {
            self.chunks.remove(c);
        }
        self.len -= 1;
        Some(rec)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &MessageRecord> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(uid: u32) -> MessageRecord {
        MessageRecord {
            uid,
            flags: Flags::EMPTY,
            keywords: 0,
            modseq: 1,
            size: 1,
            vsize: 1,
            internal_date: 0,
            in_new: false,
            filename: format!("{uid}").into(),
            cache: None,
        }
    }

    #[test]
    fn chunked_table_behaves_like_a_sorted_vec() {
        let mut r = Records::default();
        for uid in (1..3000).step_by(2) {
            r.upsert(rec(uid));
        }
        r.upsert(rec(1000));
        let snapshot = r.clone();
        assert!(r.remove(1).is_some());
        assert!(r.remove(1).is_none());
        assert_eq!(snapshot.len(), 1501);
        assert_eq!(r.len(), 1500);
        assert_eq!(r.get(0).unwrap().uid, 3);
        assert_eq!(r.position(1000), Some(499));
        assert!(r.iter().zip(r.iter().skip(1)).all(|(a, b)| a.uid < b.uid));
        assert_eq!(r.find(2999).unwrap().uid, 2999);
        assert!(r.find(2).is_none());
    }
}
