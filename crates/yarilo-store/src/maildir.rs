//! The blocking core of one mailbox: keeps yarilo's index in step with the
//! Maildir, `dovecot-uidlist` and `dovecot-keywords`, and performs writes.
//!
//! Invariants:
//! * Every method that writes is called with the `mbox:` lock (from the
//!   [`yarilo_locks::Locker`]) held by the caller, and takes the Maildir's
//!   dotlock itself around the uid list, so Dovecot and other yarilo
//!   processes are serialized too.
//! * Append order: message → `tmp/` + fsync → rename into `cur/` + fsync
//!   dir → uid list record + fsync → index log. A crash leaves at worst a
//!   file without a UID (it gets a fresh one at the next sync); the uid
//!   list never names a file that was not already durable, and `N`/the
//!   last record only grow, so a UID is never handed out twice.
//! * Expunge order: unlink → fsync dir → uid list rewritten without the
//!   records. A crash in between leaves records without files, which every
//!   reader (Dovecot included) treats as expunged — the same state Dovecot
//!   itself produces; the opposite order could resurrect a deleted message
//!   under a new UID.
//! * Flag changes are a rename inside `cur/`; the index log then records
//!   the new MODSEQ. A crash in between is found by the next sync (the
//!   directory mtime no longer matches the stamp) and gets a new MODSEQ.
//! * MODSEQ and UIDNEXT never go backwards: a rebuilt index starts its
//!   MODSEQs at the wall clock in milliseconds, above any value a
//!   previous index can have handed out at one change per millisecond.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::dotlock::{Dotlock, DotlockHolder};
use crate::durable::{create_dir_durable, fsync_dir, write_atomic};
use crate::error::{IoContext, StoreError};
use crate::filename::{base_of, new_base, virtual_size, with_info, MaildirName};
use crate::flags::{Flags, KeywordMask, MaildirInfo};
use crate::index::{
    decode_log, encode_log_record, log_header, parse_log_header, FileStamp, IndexHeader, LogRecord,
    Snapshot, SyncStamp, CACHE_FILE, LOG_FILE, LOG_HEADER_LEN, SNAPSHOT_FILE,
};
use crate::keywords::Keywords;
use crate::records::{MessageRecord, Records};
use crate::uidlist::{record_line, UidList, UidRecord};
use crate::view::MailboxView;

pub const UIDLIST: &str = "dovecot-uidlist";
pub const KEYWORDS: &str = "dovecot-keywords";
/// Directory mtimes closer than this to the moment a stamp was taken may
/// hide a later change in the same timestamp tick (Dovecot uses the same
/// one-second rule), so such a stamp does not prove "unchanged".
const MTIME_TRUST: i128 = 1_000_000_000;

/// The same window on a filesystem whose timestamps carry sub-second
/// parts (ext4, xfs, btrfs, and NFS served from them): there an mtime
/// advances with the kernel's clock tick (at most 10 ms), so a stamp taken
/// this long after the mtime proves "unchanged". The margin covers clock
/// skew between an NFS client and its server.
const FINE_MTIME_TRUST: i128 = 100_000_000;

/// The distrust window for a directory whose mtime is `mtime_ns`. A whole
/// second (no fraction) means coarse timestamps, or a one-in-a-billion
/// coincidence; either way the safe window applies.
fn trust_window(mtime_ns: i128) -> i128 {
    if mtime_ns % 1_000_000_000 != 0 {
        FINE_MTIME_TRUST
    } else {
        MTIME_TRUST
    }
}

/// Tunables from the `store` config section.
#[derive(Debug, Clone)]
pub struct CoreOptions {
    /// Dovecot's `maildir_very_dirty_syncs`: trust our own stamps for
    /// `cur/` regardless of timestamp granularity (only yarilo and
    /// Dovecot change this Maildir, both leave traces we read).
    pub very_dirty_syncs: bool,
    /// Rewrite the snapshot when the log is larger than this.
    pub log_compact_bytes: u64,
    /// How long to wait for another process's dotlock.
    pub dotlock_wait: Duration,
    /// Host name for file names and the dotlock.
    pub hostname: String,
}

impl Default for CoreOptions {
    fn default() -> Self {
        CoreOptions {
            very_dirty_syncs: false,
            log_compact_bytes: 4 << 20,
            dotlock_wait: Duration::from_secs(30),
            hostname: crate::dotlock::hostname(),
        }
    }
}

/// Where one mailbox lives.
#[derive(Debug, Clone)]
pub struct MailboxPaths {
    pub name: String,
    /// The Maildir (holds cur/ new/ tmp/ and dovecot-uidlist).
    pub dir: PathBuf,
    /// The user's Maildir root (for `dovecot-uidvalidity`).
    pub root: PathBuf,
    /// yarilo index files; `None` = in memory only.
    pub index_dir: Option<PathBuf>,
}

impl MailboxPaths {
    fn uidlist(&self) -> PathBuf {
        self.dir.join(UIDLIST)
    }
    fn keywords(&self) -> PathBuf {
        self.dir.join(KEYWORDS)
    }
    fn sub(&self, s: &str) -> PathBuf {
        self.dir.join(s)
    }
    fn index_file(&self, f: &str) -> Option<PathBuf> {
        self.index_dir.as_ref().map(|d| d.join(f))
    }
}

/// A message written to `tmp/`, ready to get a UID.
#[derive(Debug)]
pub struct Prepared {
    tmp: PathBuf,
    base: String,
    size: u64,
    vsize: u64,
    internal_date: i64,
    flags: Flags,
    keywords: Vec<String>,
    header: Vec<u8>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // Not delivered (error or crash of the batch): do not leave it.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Moves the files of a failed batch from `cur/` back to their temp names
/// (the [`Prepared`] then removes them), so none of them gets a UID.
fn unplace(cur: &Path, batch: &[Prepared], placed: &[(String, KeywordMask)]) {
    for (p, (name, _)) in batch.iter().zip(placed) {
        if let Err(e) = std::fs::rename(cur.join(name), &p.tmp) {
            tracing::error!(file = %name, error = %e, "a message of a failed append could not be taken back from cur/");
        }
    }
    let _ = fsync_dir(cur);
}

/// How to change flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagOp {
    Add,
    Remove,
    Replace,
}

/// The outcome of a flag update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagResult {
    /// UIDs whose flags changed, with their new MODSEQ.
    pub changed: Vec<u32>,
    /// UIDs skipped because their MODSEQ was above `unchanged_since`
    /// (RFC 7162 §3.2 MODIFIED response).
    pub modified: Vec<u32>,
    pub modseq: u64,
}

struct LogState {
    applied: u64,
    ino: u64,
    /// The file on disk belongs to our snapshot's generation.
    valid: bool,
}

/// How far the index is behind the Maildir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Nothing changed that the index does not know.
    Clean,
    /// Only `new/` changed (an MTA delivered): a scan of `new/` suffices.
    NewDir,
    /// Something else changed: rescan `new/` and `cur/`.
    Full,
}

/// One open mailbox: index state plus what we last read from disk.
pub struct Core {
    paths: MailboxPaths,
    opts: CoreOptions,
    hdr: IndexHeader,
    records: Records,
    bytes: u64,
    keywords: Arc<Keywords>,
    keywords_stamp: FileStamp,
    expunged: Arc<Vec<(u32, u64)>>,
    uidlist: Option<UidList>,
    uidlist_stamp: FileStamp,
    uidlist_consumed: usize,
    log: Option<LogState>,
    last_stamp: Option<SyncStamp>,
    /// The dotlock the current write runs under, checked before the uid
    /// list is written.
    dotlock: Option<DotlockHolder>,
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

fn stamp_of(path: &Path) -> FileStamp {
    match std::fs::metadata(path) {
        Ok(m) => FileStamp {
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        },
        Err(_) => FileStamp::default(),
    }
}

fn stamp_of_file(f: &File) -> FileStamp {
    match f.metadata() {
        Ok(m) => FileStamp {
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        },
        Err(_) => FileStamp::default(),
    }
}

/// The header section (through the first empty line).
pub fn header_section(data: &[u8]) -> &[u8] {
    let mut i = 0;
    while let Some(nl) = data[i..].iter().position(|&b| b == b'\n') {
        let line_end = i + nl + 1;
        let line = &data[i..line_end];
        if line == b"\n" || line == b"\r\n" {
            return &data[..line_end];
        }
        i = line_end;
    }
    data
}

/// Allocates a UIDVALIDITY for a new mailbox: `dovecot-uidvalidity` at the
/// root holds the next value in hex, as Dovecot keeps it; we take
/// `max(now, stored)` so values stay unique even if that file is lost.
pub fn allocate_uidvalidity(root: &Path) -> Result<u32, StoreError> {
    let path = root.join("dovecot-uidvalidity");
    let stored = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim(), 16).ok())
        .unwrap_or(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(1);
    let v = stored.max(now).max(1);
    create_dir_durable(root).ctx(|| format!("create {}", root.display()))?;
    write_atomic(&path, format!("{:08x}", v.wrapping_add(1)).as_bytes())
        .ctx(|| format!("write {}", path.display()))?;
    Ok(v)
}

/// Creates the Maildir for a new mailbox (cur/ new/ tmp/, uid list,
/// `maildirfolder` for non-INBOX folders).
pub fn create_maildir(paths: &MailboxPaths, is_inbox: bool) -> Result<(), StoreError> {
    for sub in ["tmp", "new", "cur"] {
        create_dir_durable(&paths.dir.join(sub))
            .ctx(|| format!("create {}", paths.dir.join(sub).display()))?;
    }
    if !is_inbox {
        let mf = paths.dir.join("maildirfolder");
        if !mf.exists() {
            File::create(&mf).ctx(|| format!("create {}", mf.display()))?;
        }
    }
    if !paths.uidlist().exists() {
        // Another process (yarilo or Dovecot) may be creating it too.
        let _lock = Dotlock::acquire(&paths.uidlist(), Duration::from_secs(30))?;
        if !paths.uidlist().exists() {
            let uv = allocate_uidvalidity(&paths.root)?;
            let list = UidList::new(uv);
            write_atomic(&paths.uidlist(), &list.serialize())
                .ctx(|| format!("write {}", paths.uidlist().display()))?;
        }
    }
    fsync_dir(&paths.dir).ctx(|| format!("fsync {}", paths.dir.display()))?;
    Ok(())
}

/// Writes a message to `tmp/` durably (no lock needed: the name is unique).
pub fn prepare(
    paths: &MailboxPaths,
    host: &str,
    data: &[u8],
    flags: Flags,
    keywords: Vec<String>,
    internal_date: Option<i64>,
) -> Result<Prepared, StoreError> {
    let size = data.len() as u64;
    let vsize = virtual_size(data);
    let base = new_base(host, size, vsize);
    let tmp = paths.sub("tmp").join(&base);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .ctx(|| format!("create {}", tmp.display()))?;
    // From here on `prepared` owns the temp file and removes it on error.
    let mut prepared = Prepared {
        tmp,
        base,
        size,
        vsize,
        internal_date: 0,
        flags,
        keywords,
        header: header_section(data).to_vec(),
    };
    f.write_all(data)
        .ctx(|| format!("write {}", prepared.tmp.display()))?;
    let date = match internal_date {
        Some(d) => {
            let t = if d >= 0 {
                UNIX_EPOCH + Duration::from_secs(d as u64)
            } else {
                UNIX_EPOCH
            };
            f.set_modified(t)
                .ctx(|| format!("utime {}", prepared.tmp.display()))?;
            d
        }
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0),
    };
    prepared.internal_date = date;
    f.sync_all()
        .ctx(|| format!("fsync {}", prepared.tmp.display()))?;
    Ok(prepared)
}

/// Hard-links (or copies) an existing message into `tmp/` of another
/// mailbox, for COPY/MOVE.
pub fn prepare_copy(
    paths: &MailboxPaths,
    host: &str,
    src: &Path,
    rec: &MessageRecord,
    keywords: Vec<String>,
) -> Result<Prepared, StoreError> {
    let base = new_base(host, rec.size, rec.vsize);
    let tmp = paths.sub("tmp").join(&base);
    if std::fs::hard_link(src, &tmp).is_err() {
        std::fs::copy(src, &tmp).ctx(|| format!("copy {}", src.display()))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .ctx(|| format!("fsync {}", tmp.display()))?;
    }
    let mut header = Vec::new();
    if let Ok(mut f) = File::open(&tmp) {
        let mut buf = vec![0u8; 64 * 1024];
        let n = f.read(&mut buf).unwrap_or(0);
        header = header_section(&buf[..n]).to_vec();
    }
    Ok(Prepared {
        tmp,
        base,
        size: rec.size,
        vsize: rec.vsize,
        internal_date: rec.internal_date,
        flags: rec.flags,
        keywords,
        header,
    })
}

impl Core {
    /// Opens a mailbox that exists on disk. Reads the index (rebuilding it
    /// from scratch if missing or damaged) but does not sync; call
    /// [`Core::is_clean`] / [`Core::sync`] next.
    pub fn open(paths: MailboxPaths, opts: CoreOptions) -> Result<Core, StoreError> {
        if !paths.dir.join("cur").is_dir() {
            return Err(StoreError::NoMailbox(paths.name.clone()));
        }
        for sub in ["new", "tmp"] {
            create_dir_durable(&paths.dir.join(sub))
                .ctx(|| format!("create {}", paths.dir.join(sub).display()))?;
        }
        let mut core = Core {
            paths,
            opts,
            hdr: IndexHeader::default(),
            records: Records::default(),
            bytes: 0,
            keywords: Arc::new(Keywords::default()),
            keywords_stamp: FileStamp::default(),
            expunged: Arc::new(Vec::new()),
            uidlist: None,
            uidlist_stamp: FileStamp::default(),
            uidlist_consumed: 0,
            log: None,
            last_stamp: None,
            dotlock: None,
        };
        core.load_index();
        core.read_keywords();
        core.read_uidlist()?;
        if let Some(list) = &core.uidlist {
            if core.hdr.uidvalidity != 0 && list.uidvalidity != core.hdr.uidvalidity {
                tracing::warn!(mailbox = %core.paths.name, "UIDVALIDITY changed on disk; rebuilding index");
                core.reset_index();
            }
        }
        Ok(core)
    }

    fn reset_index(&mut self) {
        let base = (now_ns() / 1_000_000) as u64;
        let floor = self.hdr.highest_modseq + 1;
        self.hdr = IndexHeader {
            uidvalidity: 0,
            uidnext: 1,
            highest_modseq: base.max(floor),
            history_start_modseq: base.max(floor),
        };
        self.records = Records::default();
        self.bytes = 0;
        self.expunged = Arc::new(Vec::new());
        self.last_stamp = None;
        // A fresh log generation: the old log no longer applies.
        self.log = None;
    }

    /// Loads snapshot + log; anything damaged → empty index (rebuilt by
    /// the next sync).
    fn load_index(&mut self) {
        self.reset_index();
        let (Some(snap_path), Some(log_path)) = (
            self.paths.index_file(SNAPSHOT_FILE),
            self.paths.index_file(LOG_FILE),
        ) else {
            return;
        };
        let snap = match std::fs::read(&snap_path) {
            Ok(data) => match Snapshot::decode(&data) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(path = %snap_path.display(), error = %e, "index damaged; rebuilding");
                    return;
                }
            },
            Err(_) => return,
        };
        self.hdr = snap.header;
        let mut recs = Records::default();
        let mut bytes = 0;
        for r in snap.records {
            bytes += r.size;
            recs.upsert(r);
        }
        self.records = recs;
        self.bytes = bytes;
        self.expunged = Arc::new(snap.expunged);
        self.last_stamp = snap.stamp;
        self.log = Some(LogState {
            applied: LOG_HEADER_LEN,
            ino: 0,
            valid: false,
        });
        if let Ok(mut f) = File::open(&log_path) {
            let mut data = Vec::new();
            if f.read_to_end(&mut data).is_ok() {
                let ino = f.metadata().map(|m| m.ino()).unwrap_or(0);
                if parse_log_header(&data) == Some(snap.log_id) {
                    let (recs, used) = decode_log(&data[LOG_HEADER_LEN as usize..]);
                    for r in recs {
                        self.apply(r);
                    }
                    self.log = Some(LogState {
                        applied: LOG_HEADER_LEN + used as u64,
                        ino,
                        valid: true,
                    });
                } else {
                    // A generation older than the snapshot (crash during
                    // compaction): its content is in the snapshot already.
                    self.log = Some(LogState {
                        applied: data.len() as u64,
                        ino,
                        valid: false,
                    });
                }
            }
        }
    }

    fn apply(&mut self, rec: LogRecord) {
        match rec {
            LogRecord::Header(h) => {
                self.hdr.uidvalidity = h.uidvalidity;
                self.hdr.uidnext = self.hdr.uidnext.max(h.uidnext);
                self.hdr.highest_modseq = self.hdr.highest_modseq.max(h.highest_modseq);
                self.hdr.history_start_modseq = h.history_start_modseq;
            }
            LogRecord::Upsert(m) => {
                self.hdr.highest_modseq = self.hdr.highest_modseq.max(m.modseq);
                self.hdr.uidnext = self.hdr.uidnext.max(m.uid + 1);
                self.put(m);
            }
            LogRecord::Expunge { uid, modseq } => {
                self.hdr.highest_modseq = self.hdr.highest_modseq.max(modseq);
                self.del(uid, modseq);
            }
            LogRecord::Stamp(s) => self.last_stamp = Some(s),
        }
    }

    fn put(&mut self, m: MessageRecord) {
        if let Some(old) = self.records.find(m.uid) {
            self.bytes -= old.size;
        }
        self.bytes += m.size;
        self.records.upsert(m);
    }

    fn del(&mut self, uid: u32, modseq: u64) {
        if let Some(old) = self.records.remove(uid) {
            self.bytes -= old.size;
        }
        Arc::make_mut(&mut self.expunged).push((uid, modseq));
    }

    fn read_keywords(&mut self) {
        let st = stamp_of(&self.paths.keywords());
        if st == self.keywords_stamp {
            return;
        }
        let text = std::fs::read_to_string(self.paths.keywords()).unwrap_or_default();
        self.keywords = Arc::new(Keywords::parse(&text));
        self.keywords_stamp = st;
    }

    /// Reads the uid list: only the new tail if the same file grew.
    fn read_uidlist(&mut self) -> Result<(), StoreError> {
        let path = self.paths.uidlist();
        let mut f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.uidlist = None;
                self.uidlist_stamp = FileStamp::default();
                return Ok(());
            }
            Err(e) => return Err(StoreError::io(format!("open {}", path.display()), e)),
        };
        let st = stamp_of_file(&f);
        if st == self.uidlist_stamp && self.uidlist.is_some() {
            return Ok(());
        }
        let same_file = self.uidlist.is_some()
            && st.ino == self.uidlist_stamp.ino
            && st.size >= self.uidlist_consumed as u64;
        if same_file {
            let mut tail = Vec::new();
            f.seek(SeekFrom::Start(self.uidlist_consumed as u64))
                .and_then(|_| f.read_to_end(&mut tail))
                .ctx(|| format!("read {}", path.display()))?;
            if let Some(list) = self.uidlist.as_mut() {
                let used = list.parse_tail(&tail, 0)?;
                self.uidlist_consumed += used;
            }
        } else {
            let mut data = Vec::new();
            f.read_to_end(&mut data)
                .ctx(|| format!("read {}", path.display()))?;
            let (list, used) = UidList::parse(&data)?;
            self.uidlist = Some(list);
            self.uidlist_consumed = used;
        }
        self.uidlist_stamp = st;
        Ok(())
    }

    /// Applies index log records other processes appended.
    fn read_log_tail(&mut self) {
        let Some(path) = self.paths.index_file(LOG_FILE) else {
            return;
        };
        let st = stamp_of(&path);
        let Some(log) = &self.log else {
            return;
        };
        if st.ino != log.ino && st.ino != 0 {
            // Compacted by someone else: reload snapshot and new log.
            let keep_stamp = self.last_stamp;
            let hdr = self.hdr;
            self.load_index();
            if self.hdr.highest_modseq < hdr.highest_modseq {
                // The new generation is older than what we knew: impossible
                // unless damaged; keep counting upwards.
                self.hdr.highest_modseq = hdr.highest_modseq;
            }
            if self.last_stamp.is_none() {
                self.last_stamp = keep_stamp;
            }
            return;
        }
        if st.size <= log.applied || !log.valid {
            return;
        }
        let applied = log.applied;
        let Ok(mut f) = File::open(&path) else { return };
        let mut data = Vec::new();
        if f.seek(SeekFrom::Start(applied))
            .and_then(|_| f.read_to_end(&mut data))
            .is_err()
        {
            return;
        }
        let (recs, used) = decode_log(&data);
        for r in recs {
            self.apply(r);
        }
        if let Some(log) = self.log.as_mut() {
            log.applied += used as u64;
        }
    }

    fn current_stamp(&self) -> SyncStamp {
        SyncStamp {
            uidlist: stamp_of(&self.paths.uidlist()),
            keywords: stamp_of(&self.paths.keywords()),
            new_dir: stamp_of(&self.paths.sub("new")),
            cur_dir: stamp_of(&self.paths.sub("cur")),
            taken_ns: now_ns(),
        }
    }

    /// Catches up with logged changes and tells whether the Maildir still
    /// matches the index (no sync needed). Lock-free.
    pub fn is_clean(&mut self) -> Result<bool, StoreError> {
        Ok(self.freshness()? == Freshness::Clean)
    }

    /// Catches up with the index log, keywords and uid list, then compares
    /// the Maildir with the last stamp. Lock-free.
    pub fn freshness(&mut self) -> Result<Freshness, StoreError> {
        self.read_log_tail();
        self.read_keywords();
        self.read_uidlist()?;
        if !self.consistent_with_uidlist() {
            return Ok(Freshness::Full);
        }
        let Some(stamp) = self.last_stamp else {
            return Ok(Freshness::Full);
        };
        let now = self.current_stamp();
        let changed =
            |old: &FileStamp, new: &FileStamp| old.mtime_ns != new.mtime_ns || old.ino != new.ino;
        // A stamp taken inside the window after the directory's mtime does
        // not prove that nothing else changed in the same timestamp tick.
        let distrusted = |old: &FileStamp, dirty: bool| {
            !dirty && stamp.taken_ns - old.mtime_ns < trust_window(old.mtime_ns)
        };
        if stamp.uidlist != now.uidlist
            || stamp.keywords.mtime_ns != now.keywords.mtime_ns
            || changed(&stamp.cur_dir, &now.cur_dir)
        {
            return Ok(Freshness::Full);
        }
        if distrusted(&stamp.cur_dir, self.opts.very_dirty_syncs) {
            // Rescanning while still inside the window would only produce
            // another distrusted stamp, so a burst of commands after a
            // write would rescan on every one. Defer: once the window has
            // passed, one rescan takes a trusted stamp. A change hidden in
            // the same tick as ours is therefore seen at most one window
            // late, never lost.
            if now.taken_ns - stamp.cur_dir.mtime_ns >= trust_window(stamp.cur_dir.mtime_ns) {
                return Ok(Freshness::Full);
            }
        }
        if changed(&stamp.new_dir, &now.new_dir) || distrusted(&stamp.new_dir, false) {
            return Ok(Freshness::NewDir);
        }
        Ok(Freshness::Clean)
    }

    fn consistent_with_uidlist(&self) -> bool {
        let Some(list) = &self.uidlist else {
            return false;
        };
        list.uidvalidity == self.hdr.uidvalidity
            && list.records.len() == self.records.len()
            && list.records.last().map(|r| r.uid) == self.records.last().map(|r| r.uid)
    }

    /// The current view for readers.
    pub fn view(&self) -> MailboxView {
        MailboxView {
            name: self.paths.name.clone(),
            uidvalidity: self.hdr.uidvalidity,
            uidnext: self.hdr.uidnext,
            highest_modseq: self.hdr.highest_modseq,
            history_start_modseq: self.hdr.history_start_modseq,
            records: self.records.clone(),
            keywords: self.keywords.clone(),
            expunged: self.expunged.clone(),
            bytes: self.bytes,
            dir: self.paths.dir.clone(),
            cache_path: self.paths.index_file(CACHE_FILE),
        }
    }

    pub fn paths(&self) -> &MailboxPaths {
        &self.paths
    }

    fn dotlock(&mut self) -> Result<Dotlock, StoreError> {
        let lock = Dotlock::acquire(&self.paths.uidlist(), self.opts.dotlock_wait)?;
        self.dotlock = Some(lock.holder());
        Ok(lock)
    }

    /// Before the uid list is written: the dotlock is still ours. If
    /// another process broke it as stale (and may be writing now), the
    /// write is refused rather than risk handing out its UIDs twice.
    fn still_locked(&self) -> Result<(), StoreError> {
        match &self.dotlock {
            Some(h) => Ok(h.verify()?),
            None => Err(StoreError::Internal(
                "uid list written without the dotlock".into(),
            )),
        }
    }

    /// Under the dotlock, before a write: make sure UIDs can be handed out
    /// (the index matches the uid list) and pick up new mail in `new/`.
    /// Returns the records produced and whether the stamp written after
    /// the write may claim "nothing else changed" — only if we knew that
    /// before the write; otherwise the old stamp stays and the next reader
    /// rescans.
    fn prepare_write_locked(&mut self) -> Result<(Vec<LogRecord>, bool), StoreError> {
        match self.freshness()? {
            Freshness::Clean => Ok((Vec::new(), true)),
            Freshness::NewDir => Ok((self.sync_new_locked()?, true)),
            Freshness::Full if self.consistent_with_uidlist() => Ok((Vec::new(), false)),
            Freshness::Full => Ok((self.full_sync_locked()?, true)),
        }
    }

    /// Only `new/` changed: give UIDs to files there we do not know.
    /// Falls back to a full sync if a known file left `new/`.
    fn sync_new_locked(&mut self) -> Result<Vec<LogRecord>, StoreError> {
        let mut known: HashMap<String, u32> = self
            .records
            .iter()
            .filter(|r| r.in_new)
            .map(|r| (base_of(&r.filename).to_string(), r.uid))
            .collect();
        let dir = self.paths.sub("new");
        let mut fresh = Vec::new();
        let rd = std::fs::read_dir(&dir).ctx(|| format!("read {}", dir.display()))?;
        for entry in rd {
            let entry = entry.ctx(|| format!("read {}", dir.display()))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            match known.remove(base_of(&name)) {
                Some(uid) => {
                    if self.records.find(uid).is_some_and(|r| *r.filename != *name) {
                        return self.full_sync_locked();
                    }
                }
                None => fresh.push(name),
            }
        }
        if !known.is_empty() {
            return self.full_sync_locked();
        }
        fresh.sort();
        let Some(list) = self.uidlist.as_ref() else {
            return self.full_sync_locked();
        };
        let modseq = self.hdr.highest_modseq + 1;
        let first = list.next_uid().max(self.hdr.uidnext);
        let mut uid_recs = Vec::new();
        let mut out = Vec::new();
        for (i, name) in fresh.iter().enumerate() {
            let uid = first + i as u32;
            uid_recs.push(UidRecord {
                uid,
                ext: String::new(),
                name: base_of(name).to_string(),
            });
            out.push(LogRecord::Upsert(
                self.record_from_file(uid, name, true, modseq),
            ));
        }
        if !uid_recs.is_empty() {
            self.append_uidlist(&uid_recs)?;
            if let Some(list) = self.uidlist.as_mut() {
                list.records.extend(uid_recs);
            }
            self.hdr.highest_modseq = modseq;
            for r in out.iter().cloned() {
                self.apply(r);
            }
            out.push(LogRecord::Header(self.hdr));
        }
        Ok(out)
    }

    /// Scans `new/` and `cur/` and reconciles them with the uid list and
    /// the index. Returns the log records it produced (already applied).
    fn full_sync_locked(&mut self) -> Result<Vec<LogRecord>, StoreError> {
        self.read_log_tail();
        self.read_keywords();
        self.read_uidlist()?;
        let mut list = match self.uidlist.take() {
            Some(l) => l,
            None => {
                let uv = if self.hdr.uidvalidity != 0 {
                    self.hdr.uidvalidity
                } else {
                    allocate_uidvalidity(&self.paths.root)?
                };
                UidList::new(uv)
            }
        };
        if list.uidvalidity != self.hdr.uidvalidity && self.hdr.uidvalidity != 0 {
            self.reset_index();
        }
        let mut out = Vec::new();
        if self.hdr.uidvalidity != list.uidvalidity {
            self.hdr.uidvalidity = list.uidvalidity;
            out.push(LogRecord::Header(self.hdr));
        }
        self.clean_tmp();
        if self.hdr.uidvalidity == list.uidvalidity && self.unchanged_on_disk(&list)? {
            self.uidlist = Some(list);
            return Ok(vec![LogRecord::Header(self.hdr)]);
        }
        // What is on disk, by base name. cur/ wins over new/ for duplicates.
        let mut files: HashMap<String, (String, bool)> = HashMap::new();
        for (sub, in_new) in [("new", true), ("cur", false)] {
            let dir = self.paths.sub(sub);
            let rd = std::fs::read_dir(&dir).ctx(|| format!("read {}", dir.display()))?;
            for entry in rd {
                let entry = entry.ctx(|| format!("read {}", dir.display()))?;
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let base = base_of(&name).to_string();
                if let Some((_, prev_new)) = files.get(&base) {
                    if !*prev_new || in_new {
                        continue;
                    }
                }
                files.insert(base, (name, in_new));
            }
        }
        let modseq = self.hdr.highest_modseq + 1;
        let mut changed = false;
        let mut dropped = false;
        let mut kept = Vec::with_capacity(list.records.len());
        for rec in std::mem::take(&mut list.records) {
            let base = base_of(&rec.name).to_string();
            match files.remove(&base) {
                Some((name, in_new)) => {
                    let info = MaildirName::parse(&name).info();
                    match self.records.find(rec.uid) {
                        Some(old) => {
                            if *old.filename != *name || old.in_new != in_new {
                                let mut m = old.clone();
                                m.filename = name.as_str().into();
                                m.in_new = in_new;
                                if m.flags != info.flags || m.keywords != info.keywords {
                                    m.flags = info.flags;
                                    m.keywords = info.keywords;
                                    m.modseq = modseq;
                                    changed = true;
                                }
                                out.push(LogRecord::Upsert(m));
                            }
                        }
                        None => {
                            let m = self.record_from_file(rec.uid, &name, in_new, modseq);
                            changed = true;
                            out.push(LogRecord::Upsert(m));
                        }
                    }
                    kept.push(rec);
                }
                None => {
                    dropped = true;
                }
            }
        }
        list.records = kept;
        // Index records the uid list no longer has: expunged.
        let listed: std::collections::HashSet<u32> = list.records.iter().map(|r| r.uid).collect();
        for m in self.records.iter() {
            if !listed.contains(&m.uid) {
                out.push(LogRecord::Expunge { uid: m.uid, modseq });
                changed = true;
            }
        }
        // Files without a UID: new mail (delivered by an MTA, or an append
        // that crashed before its uid list record).
        let mut new_files: Vec<(String, (String, bool))> = files.into_iter().collect();
        new_files.sort_by(|a, b| a.0.cmp(&b.0));
        let mut added = Vec::new();
        for (base, (name, in_new)) in new_files {
            let uid = list.next_uid().max(self.hdr.uidnext);
            let rec = UidRecord {
                uid,
                ext: String::new(),
                name: base,
            };
            added.push(rec.clone());
            list.records.push(rec);
            out.push(LogRecord::Upsert(
                self.record_from_file(uid, &name, in_new, modseq),
            ));
            changed = true;
        }
        // Persist the uid list before the index claims anything.
        if dropped || self.uidlist_stamp == FileStamp::default() {
            self.write_uidlist_full(&list)?;
        } else if !added.is_empty() {
            self.append_uidlist(&added)?;
        }
        self.uidlist = Some(list);
        if changed {
            self.hdr.highest_modseq = modseq;
        }
        for r in out.iter().cloned() {
            self.apply(r);
        }
        if let Some(list) = &self.uidlist {
            self.hdr.uidnext = self.hdr.uidnext.max(list.next_uid());
        }
        out.push(LogRecord::Header(self.hdr));
        Ok(out)
    }

    /// The common case of a rescan (directory mtimes moved because of our
    /// own writes): every file on disk is exactly one the index knows and
    /// the uid list agrees. Checked without allocating per message.
    fn unchanged_on_disk(&self, list: &UidList) -> Result<bool, StoreError> {
        if list.records.len() != self.records.len()
            || list.records.last().map(|r| r.uid) != self.records.last().map(|r| r.uid)
        {
            return Ok(false);
        }
        let mut known: HashMap<&str, bool> = HashMap::with_capacity(self.records.len());
        for r in self.records.iter() {
            known.insert(&r.filename, r.in_new);
        }
        for (sub, in_new) in [("new", true), ("cur", false)] {
            let dir = self.paths.sub(sub);
            let rd = std::fs::read_dir(&dir).ctx(|| format!("read {}", dir.display()))?;
            for entry in rd {
                let entry = entry.ctx(|| format!("read {}", dir.display()))?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    return Ok(false);
                };
                if name.starts_with('.') {
                    continue;
                }
                if known.remove(name) != Some(in_new) {
                    return Ok(false);
                }
            }
        }
        Ok(known.is_empty())
    }

    /// Dovecot's `tmp/` cleanup (see [`crate::cleanup`]); when it runs,
    /// also the temp files of atomic rewrites that died in the mailbox and
    /// index directories.
    fn clean_tmp(&self) {
        let now = SystemTime::now();
        if crate::cleanup::clean_tmp_dir(&self.paths.sub("tmp"), now).is_some() {
            crate::cleanup::remove_stale_temps(&self.paths.dir, now);
            if let Some(idx) = &self.paths.index_dir {
                if *idx != self.paths.dir {
                    crate::cleanup::remove_stale_temps(idx, now);
                }
            }
        }
    }

    fn record_from_file(&self, uid: u32, name: &str, in_new: bool, modseq: u64) -> MessageRecord {
        let parsed = MaildirName::parse(name);
        let info = parsed.info();
        let path = self
            .paths
            .sub(if in_new { "new" } else { "cur" })
            .join(name);
        let meta = std::fs::metadata(&path).ok();
        let size = parsed
            .size
            .or_else(|| meta.as_ref().map(|m| m.size()))
            .unwrap_or(0);
        let vsize = parsed.vsize.unwrap_or_else(|| {
            std::fs::read(&path)
                .map(|d| virtual_size(&d))
                .unwrap_or(size)
        });
        MessageRecord {
            uid,
            flags: info.flags,
            keywords: info.keywords,
            modseq,
            size,
            vsize,
            internal_date: meta.map(|m| m.mtime()).unwrap_or(0),
            in_new,
            filename: name.into(),
            cache: None,
        }
    }

    fn write_uidlist_full(&mut self, list: &UidList) -> Result<(), StoreError> {
        self.still_locked()?;
        let path = self.paths.uidlist();
        let data = list.serialize();
        write_atomic(&path, &data).ctx(|| format!("write {}", path.display()))?;
        self.uidlist_consumed = data.len();
        self.uidlist_stamp = stamp_of(&path);
        Ok(())
    }

    /// Appends records to the uid list in place (as Dovecot does), after
    /// cutting off a torn line a crashed writer may have left.
    fn append_uidlist(&mut self, recs: &[UidRecord]) -> Result<(), StoreError> {
        self.still_locked()?;
        let path = self.paths.uidlist();
        let mut f = OpenOptions::new()
            .write(true)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        let len = f.metadata().map(|m| m.size()).unwrap_or(0);
        if len != self.uidlist_consumed as u64 {
            f.set_len(self.uidlist_consumed as u64)
                .ctx(|| format!("truncate {}", path.display()))?;
        }
        let mut data = String::new();
        for r in recs {
            data.push_str(&record_line(r));
        }
        f.seek(SeekFrom::Start(self.uidlist_consumed as u64))
            .and_then(|_| f.write_all(data.as_bytes()))
            .and_then(|_| f.sync_data())
            .ctx(|| format!("append {}", path.display()))?;
        self.uidlist_consumed += data.len();
        self.uidlist_stamp = stamp_of_file(&f);
        Ok(())
    }

    /// Appends to the index log (creating a new generation if needed),
    /// then the stamp of the Maildir as we leave it.
    fn log_append(&mut self, mut recs: Vec<LogRecord>, stamp_ok: bool) -> Result<(), StoreError> {
        if stamp_ok {
            let stamp = self.current_stamp();
            self.last_stamp = Some(stamp);
            recs.push(LogRecord::Stamp(stamp));
        }
        let Some(path) = self.paths.index_file(LOG_FILE) else {
            return Ok(());
        };
        let valid = self
            .log
            .as_ref()
            .is_some_and(|l| l.valid && l.ino != 0 && stamp_of(&path).ino == l.ino);
        if !valid {
            return self.compact();
        }
        let mut data = Vec::new();
        for r in &recs {
            data.extend(encode_log_record(r));
        }
        let Some(log) = self.log.as_mut() else {
            return self.compact();
        };
        let mut f = OpenOptions::new()
            .write(true)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        // Under the lock nobody else appends; anything past what we
        // applied is a torn frame from a crash.
        f.set_len(log.applied)
            .and_then(|_| f.seek(SeekFrom::Start(log.applied)))
            .and_then(|_| f.write_all(&data))
            .and_then(|_| f.sync_data())
            .ctx(|| format!("append {}", path.display()))?;
        log.applied += data.len() as u64;
        if log.applied > self.opts.log_compact_bytes {
            self.compact()?;
        }
        Ok(())
    }

    /// Writes a new snapshot and starts a new log generation.
    fn compact(&mut self) -> Result<(), StoreError> {
        let (Some(snap_path), Some(log_path), Some(dir)) = (
            self.paths.index_file(SNAPSHOT_FILE),
            self.paths.index_file(LOG_FILE),
            self.paths.index_dir.clone(),
        ) else {
            return Ok(());
        };
        create_dir_durable(&dir).ctx(|| format!("create {}", dir.display()))?;
        let log_id = rand::random::<u64>() | 1;
        let snap = Snapshot {
            log_id,
            header: self.hdr,
            records: self.records.iter().cloned().collect(),
            expunged: (*self.expunged).clone(),
            stamp: self.last_stamp,
        };
        write_atomic(&snap_path, &snap.encode())
            .ctx(|| format!("write {}", snap_path.display()))?;
        write_atomic(&log_path, &log_header(log_id))
            .ctx(|| format!("write {}", log_path.display()))?;
        self.log = Some(LogState {
            applied: LOG_HEADER_LEN,
            ino: stamp_of(&log_path).ino,
            valid: true,
        });
        Ok(())
    }

    /// Brings the index up to date under the dotlock (the caller holds the
    /// `mbox:` lock): a scan of `new/` or of everything, as needed, or of
    /// everything when `force_scan`. Returns whether anything changed.
    pub fn sync(&mut self, force_scan: bool) -> Result<bool, StoreError> {
        let _lock = self.dotlock()?;
        let recs = match (force_scan, self.freshness()?) {
            (false, Freshness::Clean) if self.last_stamp.is_some() => return Ok(false),
            (false, Freshness::NewDir) => self.sync_new_locked()?,
            _ => self.full_sync_locked()?,
        };
        let changed = recs.iter().any(|r| !matches!(r, LogRecord::Header(_)));
        self.log_append(recs, true)?;
        Ok(changed)
    }

    fn keyword_mask(&mut self, names: &[String]) -> Result<KeywordMask, StoreError> {
        let mut kw = (*self.keywords).clone();
        let mut mask = 0;
        for n in names {
            let i = kw.find_or_add(n).ok_or(StoreError::TooManyKeywords)?;
            mask |= 1 << i;
        }
        if kw != *self.keywords {
            let path = self.paths.keywords();
            write_atomic(&path, kw.serialize().as_bytes())
                .ctx(|| format!("write {}", path.display()))?;
            self.keywords = Arc::new(kw);
            self.keywords_stamp = stamp_of(&path);
        }
        Ok(mask)
    }

    /// Gives UIDs to prepared messages. Returns their UIDs in order.
    pub fn append(&mut self, batch: Vec<Prepared>) -> Result<Vec<u32>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let _lock = self.dotlock()?;
        let (mut out, stamp_ok) = self.prepare_write_locked()?;
        let modseq = self.hdr.highest_modseq + 1;
        let cur = self.paths.sub("cur");
        // Resolve every keyword first, so a failure (too many keywords)
        // happens before any file is moved into cur/.
        let mut masks = Vec::with_capacity(batch.len());
        for p in &batch {
            masks.push(self.keyword_mask(&p.keywords)?);
        }
        let mut placed = Vec::with_capacity(batch.len());
        for (p, mask) in batch.iter().zip(masks) {
            let info = MaildirInfo {
                flags: p.flags,
                keywords: mask,
                other: String::new(),
            };
            let name = with_info(&p.base, &info);
            if let Err(e) = std::fs::rename(&p.tmp, cur.join(&name)) {
                unplace(&cur, &batch, &placed);
                return Err(e).ctx(|| format!("rename into {}", cur.display()));
            }
            placed.push((name, mask));
        }
        // Until the uid list names them, the files in cur/ are taken back
        // on any failure: the batch is all or nothing (RFC 3502), and a
        // file left there would get a UID at the next sync although the
        // caller was told it failed.
        if let Err(e) = fsync_dir(&cur) {
            unplace(&cur, &batch, &placed);
            return Err(e).ctx(|| format!("fsync {}", cur.display()));
        }
        let Some(list) = self.uidlist.as_ref() else {
            unplace(&cur, &batch, &placed);
            return Err(StoreError::Internal("uid list missing after sync".into()));
        };
        let first = list.next_uid().max(self.hdr.uidnext);
        let mut uid_recs = Vec::with_capacity(batch.len());
        let mut msgs = Vec::with_capacity(batch.len());
        let cache = self.append_cache(&batch);
        for (i, (p, (name, mask))) in batch.iter().zip(placed).enumerate() {
            let uid = first + i as u32;
            uid_recs.push(UidRecord {
                uid,
                ext: String::new(),
                name: p.base.clone(),
            });
            msgs.push(MessageRecord {
                uid,
                flags: p.flags,
                keywords: mask,
                modseq,
                size: p.size,
                vsize: p.vsize,
                internal_date: p.internal_date,
                in_new: false,
                filename: name.into(),
                cache: cache.get(i).copied().flatten(),
            });
        }
        if let Err(e) = self.append_uidlist(&uid_recs) {
            // Records that did reach the file name files no longer in
            // cur/: every reader takes them as expunged, and the UIDs are
            // never handed out again (the next write starts past them).
            let names: Vec<(String, KeywordMask)> = msgs
                .iter()
                .map(|m| (m.filename.to_string(), m.keywords))
                .collect();
            unplace(&cur, &batch, &names);
            return Err(e);
        }
        // The uid list is the commit point (it is what Dovecot reads): from
        // here on the messages exist, and yarilo's own index is a cache
        // that a failed write only makes stale.
        if let Some(list) = self.uidlist.as_mut() {
            list.records.extend(uid_recs);
        }
        let uids: Vec<u32> = msgs.iter().map(|m| m.uid).collect();
        self.hdr.highest_modseq = modseq;
        for m in msgs {
            let r = LogRecord::Upsert(m);
            self.apply(r.clone());
            out.push(r);
        }
        out.push(LogRecord::Header(self.hdr));
        if let Err(e) = self.log_append(out, stamp_ok) {
            tracing::warn!(mailbox = %self.paths.name, error = %e, "index log not written after an append; it is rebuilt at the next write");
            if let Some(log) = self.log.as_mut() {
                log.valid = false;
            }
        }
        Ok(uids)
    }

    /// Appends header sections to the cache file. Not fsynced: a reader
    /// checks that cached bytes end a header section and otherwise reads
    /// the message file, so a lost cache write costs only speed.
    fn append_cache(&self, batch: &[Prepared]) -> Vec<Option<(u64, u32)>> {
        let Some(path) = self.paths.index_file(CACHE_FILE) else {
            return Vec::new();
        };
        let Ok(mut f) = OpenOptions::new().create(true).append(true).open(&path) else {
            return Vec::new();
        };
        let Ok(mut off) = f.seek(SeekFrom::End(0)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for p in batch {
            if p.header.is_empty()
                || p.header.len() > u32::MAX as usize
                || f.write_all(&p.header).is_err()
            {
                out.push(None);
                continue;
            }
            out.push(Some((off, p.header.len() as u32)));
            off += p.header.len() as u64;
        }
        out
    }

    /// Changes flags/keywords of `uids`. `unchanged_since`: CONDSTORE
    /// UNCHANGEDSINCE — messages with a higher MODSEQ are not changed.
    pub fn store_flags(
        &mut self,
        uids: &[u32],
        op: FlagOp,
        flags: Flags,
        keywords: &[String],
        unchanged_since: Option<u64>,
    ) -> Result<FlagResult, StoreError> {
        let _lock = self.dotlock()?;
        let (mut out, stamp_ok) = self.prepare_write_locked()?;
        let mask = self.keyword_mask(keywords)?;
        let modseq = self.hdr.highest_modseq + 1;
        let mut result = FlagResult {
            modseq,
            ..FlagResult::default()
        };
        let mut touched_dirs = false;
        for &uid in uids {
            let Some(old) = self.records.find(uid).cloned() else {
                continue;
            };
            if unchanged_since.is_some_and(|u| old.modseq > u) {
                result.modified.push(uid);
                continue;
            }
            let (nf, nk) = match op {
                FlagOp::Add => (old.flags.union(flags), old.keywords | mask),
                FlagOp::Remove => (old.flags.difference(flags), old.keywords & !mask),
                FlagOp::Replace => (flags, mask),
            };
            if nf == old.flags && nk == old.keywords {
                continue;
            }
            let mut info = MaildirName::parse(&old.filename).info();
            info.flags = nf;
            info.keywords = nk;
            let base = base_of(&old.filename).to_string();
            let new_name = with_info(&base, &info);
            let from = self
                .paths
                .sub(if old.in_new { "new" } else { "cur" })
                .join(&*old.filename);
            let to = self.paths.sub("cur").join(&new_name);
            match std::fs::rename(&from, &to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Renamed or expunged behind our back (Dovecot): rescan
                    // and let the caller retry on the new state.
                    if touched_dirs {
                        self.hdr.highest_modseq = modseq;
                    }
                    let recs = self.full_sync_locked()?;
                    out.extend(recs);
                    self.log_append(out, true)?;
                    return Err(StoreError::NoMessage(uid));
                }
                Err(e) => return Err(StoreError::io(format!("rename {}", from.display()), e)),
            }
            touched_dirs = true;
            let mut m = old;
            m.flags = nf;
            m.keywords = nk;
            m.modseq = modseq;
            m.filename = new_name.into();
            m.in_new = false;
            result.changed.push(uid);
            let r = LogRecord::Upsert(m);
            self.apply(r.clone());
            out.push(r);
        }
        if touched_dirs {
            let cur = self.paths.sub("cur");
            fsync_dir(&cur).ctx(|| format!("fsync {}", cur.display()))?;
            self.hdr.highest_modseq = modseq;
        } else {
            result.modseq = self.hdr.highest_modseq;
        }
        if !out.is_empty() {
            self.log_append(out, stamp_ok)?;
        }
        Ok(result)
    }

    /// Removes `uids`. Returns those actually expunged.
    pub fn expunge(&mut self, uids: &[u32]) -> Result<Vec<u32>, StoreError> {
        let _lock = self.dotlock()?;
        let (mut out, stamp_ok) = self.prepare_write_locked()?;
        let modseq = self.hdr.highest_modseq + 1;
        let mut gone = Vec::new();
        let mut dirs = [false, false];
        for &uid in uids {
            let Some(m) = self.records.find(uid) else {
                continue;
            };
            let path = self
                .paths
                .sub(if m.in_new { "new" } else { "cur" })
                .join(&*m.filename);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // Renamed by a flag change elsewhere: find it by base.
                    let base = base_of(&m.filename).to_string();
                    self.remove_by_base(&base)?;
                }
                Err(e) => return Err(StoreError::io(format!("unlink {}", path.display()), e)),
            }
            dirs[m.in_new as usize] = true;
            gone.push(uid);
        }
        if gone.is_empty() {
            if !out.is_empty() {
                self.log_append(out, stamp_ok)?;
            }
            return Ok(gone);
        }
        for (i, sub) in ["cur", "new"].iter().enumerate() {
            if dirs[i] {
                let d = self.paths.sub(sub);
                fsync_dir(&d).ctx(|| format!("fsync {}", d.display()))?;
            }
        }
        if let Some(mut list) = self.uidlist.take() {
            let set: std::collections::HashSet<u32> = gone.iter().copied().collect();
            list.records.retain(|r| !set.contains(&r.uid));
            // Keep N: expunged UIDs at the end must never come back.
            list.header_next_uid = list.header_next_uid.max(self.hdr.uidnext);
            let res = self.write_uidlist_full(&list);
            self.uidlist = Some(list);
            res?;
        }
        self.hdr.highest_modseq = modseq;
        for &uid in &gone {
            let r = LogRecord::Expunge { uid, modseq };
            self.apply(r.clone());
            out.push(r);
        }
        out.push(LogRecord::Header(self.hdr));
        self.log_append(out, stamp_ok)?;
        Ok(gone)
    }

    fn remove_by_base(&self, base: &str) -> Result<(), StoreError> {
        for sub in ["cur", "new"] {
            let dir = self.paths.sub(sub);
            let rd = std::fs::read_dir(&dir).ctx(|| format!("read {}", dir.display()))?;
            for e in rd.flatten() {
                if let Some(n) = e.file_name().to_str() {
                    if base_of(n) == base {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
        Ok(())
    }
}

/// Reads the cached header section of `rec`, falling back to the file.
pub fn read_header(view: &MailboxView, rec: &MessageRecord) -> std::io::Result<Vec<u8>> {
    if let (Some(path), Some((off, len))) = (&view.cache_path, rec.cache) {
        if let Ok(mut f) = File::open(path) {
            let mut buf = vec![0u8; len as usize];
            if f.seek(SeekFrom::Start(off)).is_ok() && f.read_exact(&mut buf).is_ok() {
                // Only trust bytes that end a header section.
                if buf.ends_with(b"\n\n") || buf.ends_with(b"\n\r\n") {
                    return Ok(buf);
                }
            }
        }
    }
    let mut f = File::open(view.path_of(rec))?;
    let mut data = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = f.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&chunk[..n]);
        let h = header_section(&data).len();
        if h < data.len() || data.ends_with(b"\n\n") || data.ends_with(b"\n\r\n") {
            data.truncate(h);
            return Ok(data);
        }
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dotlock::DotlockError;

    /// An INBOX maildir in a temporary directory, opened.
    fn fixture() -> (tempfile::TempDir, MailboxPaths, Core) {
        let dir = tempfile::tempdir().unwrap();
        let paths = MailboxPaths {
            name: "INBOX".into(),
            dir: dir.path().join("box"),
            root: dir.path().to_path_buf(),
            index_dir: None,
        };
        create_maildir(&paths, true).unwrap();
        let core = Core::open(paths.clone(), CoreOptions::default()).unwrap();
        (dir, paths, core)
    }

    /// Message `n`, prepared in tmp/.
    fn message(paths: &MailboxPaths, n: u32) -> Prepared {
        prepare(
            paths,
            "host",
            format!("Subject: {n}\r\n\r\nbody\r\n").as_bytes(),
            Flags::EMPTY,
            Vec::new(),
            None,
        )
        .unwrap()
    }

    #[test]
    fn nothing_is_appended_under_a_dotlock_another_process_broke() {
        let (dir, paths, mut core) = fixture();
        let msg = |n: u32| message(&paths, n);
        assert_eq!(core.append(vec![msg(1)]).unwrap(), vec![1]);
        let before = std::fs::read(paths.uidlist()).unwrap();

        // Mid-hold, someone declares our lock stale and takes it.
        let lock = core.dotlock().unwrap();
        std::fs::remove_file(lock.path()).unwrap();
        std::fs::write(lock.path(), "4000000:elsewhere").unwrap();
        let err = core.append_uidlist(&[]).unwrap_err();
        assert!(
            matches!(err, StoreError::Dotlock(DotlockError::Lost { ref holder, .. }) if holder == "4000000:elsewhere"),
            "{err}"
        );
        assert_eq!(std::fs::read(paths.uidlist()).unwrap(), before);
        drop(lock);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("box/dovecot-uidlist.lock")).unwrap(),
            "4000000:elsewhere",
            "the other holder's lock is left alone"
        );
    }

    #[test]
    fn a_batch_that_fails_halfway_leaves_none_of_its_messages() {
        let (_dir, paths, mut core) = fixture();
        let msg = |n: u32| message(&paths, n);
        let listing = |sub: &str| {
            let mut v: Vec<String> = std::fs::read_dir(paths.sub(sub))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        let uidlist = std::fs::read(paths.uidlist()).unwrap();
        // The second file of three vanishes before the commit: its rename
        // fails after the first one was already moved into cur/.
        let batch = vec![msg(1), msg(2), msg(3)];
        std::fs::remove_file(&batch[1].tmp).unwrap();
        assert!(core.append(batch).is_err());
        assert_eq!(listing("cur"), Vec::<String>::new());
        assert_eq!(listing("new"), Vec::<String>::new());
        assert_eq!(listing("tmp"), Vec::<String>::new());
        assert_eq!(std::fs::read(paths.uidlist()).unwrap(), uidlist);
        // A fresh process finds nothing to give a UID to.
        let mut other = Core::open(paths.clone(), CoreOptions::default()).unwrap();
        other.sync(true).unwrap();
        assert_eq!(other.records.len(), 0);
        assert_eq!(core.append(vec![msg(4)]).unwrap(), vec![1]);
    }
}
