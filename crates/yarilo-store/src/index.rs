//! yarilo's own per-mailbox index: a snapshot file plus an append-only
//! log, both in a compact little-endian binary format with CRC32 checks.
//!
//! Why this format: opening a mailbox is one sequential read and a linear
//! decode (no per-message syscalls), and every change (append, flag,
//! expunge) costs one small appended, fsynced log record regardless of
//! mailbox size. The snapshot is rewritten (temp → fsync → rename) only
//! when the log has grown past a threshold. Nothing here is a source of
//! truth for *which* messages exist or their UIDs — `dovecot-uidlist` and
//! the Maildir files are — so a damaged or missing index is rebuilt from
//! them; what the index adds is MODSEQs, the expunge history, and cached
//! sizes, dates and header locations.
//!
//! Files (in the mailbox's index directory):
//! * `yarilo-index`: `YRLIDX01`, crc32(body), body = header, records,
//!   expunge history. Names the log generation (`log_id`) it absorbed.
//! * `yarilo-index.log`: `YRLLOG01`, `log_id`, then frames
//!   `len u32 | crc32 u32 | kind u8 | payload`. A torn final frame (crash
//!   mid-append) ends the log; writers cut it off before appending.
//!   A log whose `log_id` differs from the snapshot's is stale (written
//!   before the last compaction) and ignored.
//! * `yarilo-cache`: header sections of messages, append-only; the index
//!   records their offsets.

use crate::flags::Flags;
use crate::records::MessageRecord;

pub const SNAPSHOT_FILE: &str = "yarilo-index";
pub const LOG_FILE: &str = "yarilo-index.log";
pub const CACHE_FILE: &str = "yarilo-cache";
const SNAP_MAGIC: &[u8; 8] = b"YRLIDX01";
const LOG_MAGIC: &[u8; 8] = b"YRLLOG01";
pub const LOG_HEADER_LEN: u64 = 16;

/// Identity of a file or directory for change detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileStamp {
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

/// The state of the Maildir after a writer finished: if the directories
/// and uid list still look like this, nothing unlogged has changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStamp {
    pub uidlist: FileStamp,
    pub keywords: FileStamp,
    pub new_dir: FileStamp,
    pub cur_dir: FileStamp,
    /// Wall clock (ns) when the stamp was taken.
    pub taken_ns: i128,
}

/// Mailbox-wide counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexHeader {
    pub uidvalidity: u32,
    pub uidnext: u32,
    pub highest_modseq: u64,
    /// Expunges with a modseq above this are all in the history; a client
    /// asking for changes since an older modseq gets "all unknown UIDs".
    pub history_start_modseq: u64,
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    Header(IndexHeader),
    Upsert(MessageRecord),
    Expunge { uid: u32, modseq: u64 },
    Stamp(SyncStamp),
}

/// A decoded snapshot.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub log_id: u64,
    pub header: IndexHeader,
    pub records: Vec<MessageRecord>,
    /// (uid, modseq) in modseq order.
    pub expunged: Vec<(u32, u64)>,
    pub stamp: Option<SyncStamp>,
}

/// The index could not be decoded: it will be rebuilt from the Maildir.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("index damaged: {0}")]
pub struct Damaged(pub &'static str);

struct W(Vec<u8>);
impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v)
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn i128(&mut self, v: i128) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
}

struct R<'a>(&'a [u8]);
impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Damaged> {
        if self.0.len() < n {
            return Err(Damaged("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Damaged> {
        Ok(self.take(1)?[0])
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], Damaged> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, Damaged> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, Damaged> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn i64(&mut self) -> Result<i64, Damaged> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    fn i128(&mut self) -> Result<i128, Damaged> {
        Ok(i128::from_le_bytes(self.arr()?))
    }
    fn bytes(&mut self) -> Result<&'a [u8], Damaged> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn put_header(w: &mut W, h: &IndexHeader) {
    w.u32(h.uidvalidity);
    w.u32(h.uidnext);
    w.u64(h.highest_modseq);
    w.u64(h.history_start_modseq);
}

fn get_header(r: &mut R) -> Result<IndexHeader, Damaged> {
    Ok(IndexHeader {
        uidvalidity: r.u32()?,
        uidnext: r.u32()?,
        highest_modseq: r.u64()?,
        history_start_modseq: r.u64()?,
    })
}

fn put_record(w: &mut W, m: &MessageRecord) {
    w.u32(m.uid);
    w.u8(m.flags.0);
    w.u32(m.keywords);
    w.u64(m.modseq);
    w.u64(m.size);
    w.u64(m.vsize);
    w.i64(m.internal_date);
    w.u8(m.in_new as u8);
    let (off, len) = m.cache.unwrap_or((0, 0));
    w.u64(off);
    w.u32(len);
    w.bytes(m.filename.as_bytes());
}

fn get_record(r: &mut R) -> Result<MessageRecord, Damaged> {
    let uid = r.u32()?;
    let flags = Flags(r.u8()?);
    let keywords = r.u32()?;
    let modseq = r.u64()?;
    let size = r.u64()?;
    let vsize = r.u64()?;
    let internal_date = r.i64()?;
    let in_new = r.u8()? != 0;
    let off = r.u64()?;
    let len = r.u32()?;
    let name = std::str::from_utf8(r.bytes()?).map_err(|_| Damaged("file name not UTF-8"))?;
    if uid == 0 || name.is_empty() || name.contains('/') {
        return Err(Damaged("bad record"));
    }
    Ok(MessageRecord {
        uid,
        flags,
        keywords,
        modseq,
        size,
        vsize,
        internal_date,
        in_new,
        filename: name.into(),
        cache: (len > 0).then_some((off, len)),
    })
}

fn put_file_stamp(w: &mut W, s: &FileStamp) {
    w.u64(s.ino);
    w.u64(s.size);
    w.i128(s.mtime_ns);
}

fn get_file_stamp(r: &mut R) -> Result<FileStamp, Damaged> {
    Ok(FileStamp {
        ino: r.u64()?,
        size: r.u64()?,
        mtime_ns: r.i128()?,
    })
}

fn put_stamp(w: &mut W, s: &SyncStamp) {
    put_file_stamp(w, &s.uidlist);
    put_file_stamp(w, &s.keywords);
    put_file_stamp(w, &s.new_dir);
    put_file_stamp(w, &s.cur_dir);
    w.i128(s.taken_ns);
}

fn get_stamp(r: &mut R) -> Result<SyncStamp, Damaged> {
    Ok(SyncStamp {
        uidlist: get_file_stamp(r)?,
        keywords: get_file_stamp(r)?,
        new_dir: get_file_stamp(r)?,
        cur_dir: get_file_stamp(r)?,
        taken_ns: r.i128()?,
    })
}

impl Snapshot {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(64 + self.records.len() * 96));
        w.u64(self.log_id);
        put_header(&mut w, &self.header);
        w.u32(self.records.len() as u32);
        for m in &self.records {
            put_record(&mut w, m);
        }
        w.u32(self.expunged.len() as u32);
        for (uid, modseq) in &self.expunged {
            w.u32(*uid);
            w.u64(*modseq);
        }
        match &self.stamp {
            Some(s) => {
                w.u8(1);
                put_stamp(&mut w, s);
            }
            None => w.u8(0),
        }
        let mut out = Vec::with_capacity(w.0.len() + 12);
        out.extend_from_slice(SNAP_MAGIC);
        out.extend_from_slice(&crc32fast::hash(&w.0).to_le_bytes());
        out.extend_from_slice(&w.0);
        out
    }

    pub fn decode(data: &[u8]) -> Result<Snapshot, Damaged> {
        let mut r = R(data);
        if r.take(8)? != SNAP_MAGIC {
            return Err(Damaged("bad snapshot magic"));
        }
        let crc = r.u32()?;
        if crc32fast::hash(r.0) != crc {
            return Err(Damaged("snapshot checksum"));
        }
        let log_id = r.u64()?;
        let header = get_header(&mut r)?;
        let n = r.u32()? as usize;
        let mut records = Vec::with_capacity(n.min(r.0.len() / 40));
        for _ in 0..n {
            let m = get_record(&mut r)?;
            if records
                .last()
                .is_some_and(|l: &MessageRecord| l.uid >= m.uid)
            {
                return Err(Damaged("records out of order"));
            }
            records.push(m);
        }
        let n = r.u32()? as usize;
        let mut expunged = Vec::with_capacity(n.min(r.0.len() / 12));
        for _ in 0..n {
            expunged.push((r.u32()?, r.u64()?));
        }
        let stamp = match r.u8()? {
            1 => Some(get_stamp(&mut r)?),
            _ => None,
        };
        Ok(Snapshot {
            log_id,
            header,
            records,
            expunged,
            stamp,
        })
    }
}

/// The log file header.
pub fn log_header(log_id: u64) -> Vec<u8> {
    let mut v = LOG_MAGIC.to_vec();
    v.extend_from_slice(&log_id.to_le_bytes());
    v
}

/// The log id in a log file header, if it is one.
pub fn parse_log_header(data: &[u8]) -> Option<u64> {
    if data.len() < LOG_HEADER_LEN as usize || &data[..8] != LOG_MAGIC {
        return None;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&data[8..16]);
    Some(u64::from_le_bytes(id))
}

/// One framed log record.
pub fn encode_log_record(rec: &LogRecord) -> Vec<u8> {
    let mut w = W(Vec::with_capacity(128));
    match rec {
        LogRecord::Header(h) => {
            w.u8(1);
            put_header(&mut w, h);
        }
        LogRecord::Upsert(m) => {
            w.u8(2);
            put_record(&mut w, m);
        }
        LogRecord::Expunge { uid, modseq } => {
            w.u8(3);
            w.u32(*uid);
            w.u64(*modseq);
        }
        LogRecord::Stamp(s) => {
            w.u8(4);
            put_stamp(&mut w, s);
        }
    }
    let mut out = Vec::with_capacity(w.0.len() + 8);
    out.extend_from_slice(&(w.0.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&w.0).to_le_bytes());
    out.extend_from_slice(&w.0);
    out
}

/// Decodes frames from `data`; stops at the first torn or damaged frame.
/// Returns the records and the number of bytes they took.
pub fn decode_log(data: &[u8]) -> (Vec<LogRecord>, usize) {
    let mut out = Vec::new();
    let mut pos = 0;
    while data.len() - pos >= 8 {
        let len = u32::from_le_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]);
        let crc = u32::from_le_bytes([data[pos + 4], data[pos + 5], data[pos + 6], data[pos + 7]]);
        let len = len as usize;
        if len == 0 || data.len() - pos - 8 < len {
            break;
        }
        let body = &data[pos + 8..pos + 8 + len];
        if crc32fast::hash(body) != crc {
            break;
        }
        let mut r = R(body);
        let rec = match r.u8() {
            Ok(1) => get_header(&mut r).map(LogRecord::Header),
            Ok(2) => get_record(&mut r).map(LogRecord::Upsert),
            Ok(3) => (|| {
                Ok(LogRecord::Expunge {
                    uid: r.u32()?,
                    modseq: r.u64()?,
                })
            })(),
            Ok(4) => get_stamp(&mut r).map(LogRecord::Stamp),
            _ => Err(Damaged("unknown log record")),
        };
        match rec {
            Ok(rec) => out.push(rec),
            Err(_) => break,
        }
        pos += 8 + len;
    }
    (out, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(uid: u32) -> MessageRecord {
        MessageRecord {
            uid,
            flags: Flags::SEEN,
            keywords: 5,
            modseq: 7,
            size: 100,
            vsize: 104,
            internal_date: 1_700_000_000,
            in_new: false,
            filename: format!("1.M1P1.h,S=100,W=104:2,S{uid}").into(),
            cache: Some((10, 20)),
        }
    }

    #[test]
    fn snapshot_round_trips_and_detects_damage() {
        let s = Snapshot {
            log_id: 42,
            header: IndexHeader {
                uidvalidity: 9,
                uidnext: 4,
                highest_modseq: 8,
                history_start_modseq: 1,
            },
            records: vec![rec(1), rec(3)],
            expunged: vec![(2, 8)],
            stamp: Some(SyncStamp::default()),
        };
        let bytes = s.encode();
        let d = Snapshot::decode(&bytes).unwrap();
        assert_eq!(d.records, s.records);
        assert_eq!(d.expunged, s.expunged);
        assert_eq!(d.header, s.header);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(Snapshot::decode(&b).is_err());
            assert!(Snapshot::decode(&bytes[..i]).is_err());
        }
    }

    #[test]
    fn torn_log_tail_is_ignored() {
        let recs = vec![
            LogRecord::Upsert(rec(1)),
            LogRecord::Expunge { uid: 1, modseq: 9 },
            LogRecord::Stamp(SyncStamp::default()),
        ];
        let mut data = Vec::new();
        for r in &recs {
            data.extend(encode_log_record(r));
        }
        let (got, used) = decode_log(&data);
        assert_eq!(got, recs);
        assert_eq!(used, data.len());
        let (got, used) = decode_log(&data[..data.len() - 3]);
        assert_eq!(got.len(), 2);
        assert!(used < data.len());
    }
}
