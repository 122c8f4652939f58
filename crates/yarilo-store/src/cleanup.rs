//! What crashed writers leave behind, hidden from clients and removed.
//!
//! Dovecot's rules are the model: a message file in a Maildir's `tmp/`
//! whose ctime is more than 36 hours old belongs to a delivery that died,
//! and `tmp/` is scanned for such files at most every 8 hours, the time
//! of the last scan kept in the directory's atime so that every process
//! on every host shares it. ctime, not mtime: a writer may set a message's
//! mtime to its received date before the rename into `cur/`, but nobody
//! can set a ctime back.
//!
//! Yarilo's own leftovers follow the same rule:
//! - `<file>.yarilo-tmp.<pid>.<rand>` from an atomic rewrite (uid list,
//!   keywords, subscriptions, metadata, index snapshot) that died before
//!   its rename, and `.dovecot-uidlist.lock.tmp.*` from a dotlock attempt
//!   that died before its link: removed when older than 36 hours. (The
//!   writer holds them for milliseconds; the margin only guards against
//!   a clock-skewed NFS client.)
//! - `..yarilo-deleted.<rand>`: a mailbox that DELETE had already renamed
//!   out of the namespace (the DELETE took effect there) but not yet
//!   removed. Never listed; removed at once when found, since nobody can
//!   reach it any more and a second remover racing the first is harmless.
//!   Dovecot's own `.DOVECOT-TRASHED` is never listed either (Dovecot
//!   removes it itself on its next DELETE).

use std::fs::FileTimes;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Age (by ctime) after which a temp file is a crash leftover.
pub const TEMP_STALE: Duration = Duration::from_secs(36 * 3600);
/// `tmp/` is scanned at most this often (Dovecot: 8 hours).
pub const TMP_SCAN_INTERVAL: Duration = Duration::from_secs(8 * 3600);

/// Prefix of a mailbox directory that DELETE renamed away (Maildir++).
pub const TRASH_PREFIX: &str = "..yarilo-deleted.";
/// Dovecot's equivalent, in the Maildir++ root.
const DOVECOT_TRASH: &str = ".DOVECOT-TRASHED";

/// A Maildir++ root entry that is never a mailbox.
pub fn is_trash(name: &str) -> bool {
    name.starts_with(TRASH_PREFIX) || name == DOVECOT_TRASH
}

/// A temp file of an atomic write or a dotlock attempt.
pub fn is_temp(name: &str) -> bool {
    name.contains(".yarilo-tmp.") || name.starts_with(".dovecot-uidlist.lock.tmp.")
}

fn ctime(meta: &std::fs::Metadata) -> SystemTime {
    let secs = meta.ctime().max(0) as u64;
    UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_nanos(meta.ctime_nsec().max(0) as u64)
}

fn older_than(meta: &std::fs::Metadata, now: SystemTime, age: Duration) -> bool {
    now.duration_since(ctime(meta)).is_ok_and(|a| a >= age)
}

/// Removes leftover temp files (see [`is_temp`]) in `dir` older than
/// [`TEMP_STALE`] at `now`. Returns how many went.
pub fn remove_stale_temps(dir: &Path, now: SystemTime) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_temp(name) {
            continue;
        }
        let stale = e
            .metadata()
            .is_ok_and(|m| m.is_file() && older_than(&m, now, TEMP_STALE));
        if stale && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(dir = %dir.display(), removed, "removed temp files left by a crashed writer");
    }
    removed
}

/// Dovecot's `tmp/` cleanup: if the last scan (the directory's atime) is
/// more than [`TMP_SCAN_INTERVAL`] before `now`, marks this scan (atime :=
/// now, first, so that other processes skip theirs) and removes files
/// whose ctime is more than [`TEMP_STALE`] old. Returns how many went, or
/// `None` if the scan was not due.
pub fn clean_tmp_dir(tmp: &Path, now: SystemTime) -> Option<usize> {
    let meta = std::fs::metadata(tmp).ok()?;
    let last = meta.accessed().unwrap_or(UNIX_EPOCH);
    if now
        .duration_since(last)
        .is_ok_and(|d| d < TMP_SCAN_INTERVAL)
    {
        return None;
    }
    // atime only, mtime untouched: the directory's mtime is part of what
    // readers compare to decide whether to rescan.
    if let Ok(dir) = std::fs::File::open(tmp) {
        let _ = dir.set_times(FileTimes::new().set_accessed(now));
    }
    let rd = std::fs::read_dir(tmp).ok()?;
    let mut removed = 0;
    for e in rd.flatten() {
        let stale = e
            .metadata()
            .is_ok_and(|m| m.is_file() && older_than(&m, now, TEMP_STALE));
        if stale && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(dir = %tmp.display(), removed, "removed messages of deliveries that died");
    }
    Some(removed)
}

/// What a scan of a Maildir++ root found that must go: directories DELETE
/// renamed away, and stale temp files.
#[derive(Debug, Default)]
pub struct Leftovers {
    pub trash: Vec<PathBuf>,
    pub temps: Vec<PathBuf>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.trash.is_empty() && self.temps.is_empty()
    }

    /// Notes `entry` (a root entry named `name`) if it is a leftover.
    pub fn consider(&mut self, name: &str, path: &Path, now: SystemTime) {
        if name.starts_with(TRASH_PREFIX) {
            self.trash.push(path.to_path_buf());
        } else if is_temp(name)
            && std::fs::symlink_metadata(path)
                .is_ok_and(|m| m.is_file() && older_than(&m, now, TEMP_STALE))
        {
            self.temps.push(path.to_path_buf());
        }
    }

    /// Removes them on a thread of their own (a crashed DELETE may leave a
    /// whole mailbox behind, not to be removed on a client's time). A
    /// path already being removed by this process is skipped.
    pub fn remove_in_background(mut self) {
        static BUSY: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
        {
            let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
            self.trash.retain(|d| !busy.contains(d));
            self.temps.retain(|f| !busy.contains(f));
            if self.is_empty() {
                return;
            }
            busy.extend(self.trash.iter().chain(&self.temps).cloned());
        }
        let mine: Vec<PathBuf> = self.trash.iter().chain(&self.temps).cloned().collect();
        let spawned = std::thread::Builder::new()
            .name("store-cleanup".into())
            .spawn(move || {
                self.remove();
                let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
                busy.retain(|p| !mine.contains(p));
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the store cleanup thread");
        }
    }

    /// Removes them now (errors are logged: another process may be
    /// removing the same trash directory right now).
    pub fn remove(self) {
        for dir in self.trash {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "removed a mailbox whose DELETE was interrupted")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a deleted mailbox's directory")
                }
            }
        }
        for f in self.temps {
            let _ = std::fs::remove_file(&f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LATER: Duration = Duration::from_secs(37 * 3600);

    #[test]
    fn temp_files_go_after_36_hours_by_ctime_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("dovecot-uidlist.yarilo-tmp.12.0000abcd"), b"x").unwrap();
        std::fs::write(d.join(".dovecot-uidlist.lock.tmp.12.0000abcd"), b"x").unwrap();
        std::fs::write(d.join("dovecot-uidlist"), b"x").unwrap();
        std::fs::write(d.join("subscriptions"), b"x").unwrap();
        // A temp file's mtime set far back does not make it stale: ctime counts.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("dovecot-uidlist.yarilo-tmp.12.0000abcd"))
            .unwrap();
        f.set_modified(UNIX_EPOCH).unwrap();
        assert_eq!(remove_stale_temps(d, SystemTime::now()), 0);
        assert_eq!(remove_stale_temps(d, SystemTime::now() + LATER), 2);
        let mut left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["dovecot-uidlist", "subscriptions"]);
    }

    #[test]
    fn tmp_is_scanned_at_most_every_8_hours_and_the_scan_is_shared_through_atime() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::write(tmp.join("1700000000.M1P1.host"), b"msg").unwrap();
        let now = SystemTime::now();
        // Mark a scan as just done: nothing happens now.
        std::fs::File::open(&tmp)
            .unwrap()
            .set_times(FileTimes::new().set_accessed(now))
            .unwrap();
        assert_eq!(clean_tmp_dir(&tmp, now + Duration::from_secs(3600)), None);
        // 37 hours on: due, and the message is stale.
        assert_eq!(clean_tmp_dir(&tmp, now + LATER), Some(1));
        // The scan was recorded: not due again right after.
        assert_eq!(
            clean_tmp_dir(&tmp, now + LATER + Duration::from_secs(60)),
            None
        );
        assert!(std::fs::read_dir(&tmp).unwrap().next().is_none());
    }

    #[test]
    fn a_young_message_in_tmp_is_a_delivery_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::write(tmp.join("in-flight"), b"msg").unwrap();
        assert_eq!(
            clean_tmp_dir(&tmp, SystemTime::now() + TMP_SCAN_INTERVAL),
            Some(0)
        );
        assert!(tmp.join("in-flight").exists());
    }

    #[test]
    fn trash_names_are_recognized() {
        assert!(is_trash("..yarilo-deleted.0badf00d"));
        assert!(is_trash(".DOVECOT-TRASHED"));
        assert!(!is_trash(".Trash"));
        assert!(!is_trash(".Deleted Messages"));
    }
}
