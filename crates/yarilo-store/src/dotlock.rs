//! Dovecot's dotlock on `dovecot-uidlist` (`dovecot-uidlist.lock`): the
//! cross-process barrier that serializes writers of one Maildir between
//! yarilo processes and a running Dovecot.
//!
//! Acquire: write `<pid>:<host>` to a private temp file created with
//! `O_EXCL`, then `link()` it to the lock name (NFS-safe, and the lock is
//! never seen empty); where hard links are refused the lock name itself is
//! created with `O_EXCL`. Stale locks are broken as Dovecot does: a lock
//! whose pid is on this host and no longer runs is stale at once; any
//! other lock is stale when its mtime has not changed for
//! [`STALE_TIMEOUT`] (Dovecot's uid list stale timeout, 2 minutes).
//!
//! Ownership: a holder keeps the file it created open, so its inode stays
//! allocated (on NFS as a silly-renamed file) and cannot be reused while
//! held. "Still ours" is the lock name's inode and content being the ones
//! we created; a holder that finds otherwise has had its lock declared
//! stale and broken by someone else (a long sync on slow NFS, a process
//! stopped for minutes). Then it must not write (its caller checks
//! [`Dotlock::verify`] before committing the uid list) and must not remove
//! the new holder's lock on release. A background keeper touches every
//! held lock every [`TOUCH_INTERVAL`] so that a long hold is never taken
//! for a dead one. (Check-then-unlink on release leaves a window of one
//! `stat` between the check and the unlink; Dovecot has the same one, and
//! it only matters for a lock that was already stale for two minutes.)

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

/// A lock untouched for this long is broken (Dovecot: 120 s for the uid list).
pub const STALE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the keeper refreshes a held lock's mtime: well inside
/// [`STALE_TIMEOUT`], so that several touches can be slow or lost before
/// anyone may call the lock stale.
pub const TOUCH_INTERVAL: Duration = Duration::from_secs(30);
/// An empty lock can only come from a holder that died between create and
/// write, or from Dovecot writing the new uid list into it; either way a
/// live holder finishes long before this.
const EMPTY_STALE_TIMEOUT: Duration = Duration::from_secs(30);

/// A held dotlock; removed on drop if it is still ours.
#[derive(Debug)]
pub struct Dotlock {
    held: Arc<Held>,
}

/// What a holder knows about the lock it created.
#[derive(Debug)]
struct Held {
    path: PathBuf,
    /// The lock file as we created it, open for as long as we hold it.
    file: File,
    dev: u64,
    ino: u64,
    content: String,
    touch_interval: Duration,
    next_touch: Mutex<Instant>,
    released: AtomicBool,
    lost: AtomicBool,
}

/// A cheap handle on a held lock, for code that must check the lock is
/// still ours before it commits a write.
#[derive(Debug, Clone)]
pub struct DotlockHolder {
    held: Arc<Held>,
}

/// Why the lock could not be taken, or is no longer held.
#[derive(Debug, thiserror::Error)]
pub enum DotlockError {
    /// Someone held the lock for longer than we were willing to wait.
    #[error("{path}: still locked after {waited:?} (held by {holder})")]
    Timeout {
        path: String,
        waited: Duration,
        holder: String,
    },
    /// Our lock was declared stale and broken by another process (or
    /// removed) while we held it. Nothing may be written under it; the
    /// operation may be retried with a fresh lock.
    #[error("{path}: our lock was broken while held (now: {holder})")]
    Lost { path: String, holder: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

impl Dotlock {
    /// Takes the lock for `file` (`<file>.lock`), waiting up to `wait`.
    pub fn acquire(file: &Path, wait: Duration) -> Result<Dotlock, DotlockError> {
        Dotlock::acquire_with(file, wait, TOUCH_INTERVAL)
    }

    /// [`Dotlock::acquire`], refreshed every `touch_interval` while held
    /// (`Duration::ZERO`: never, for tests of what others do to a lock
    /// that looks abandoned).
    pub fn acquire_with(
        file: &Path,
        wait: Duration,
        touch_interval: Duration,
    ) -> Result<Dotlock, DotlockError> {
        let mut lock_name = file.as_os_str().to_owned();
        lock_name.push(".lock");
        let path = PathBuf::from(lock_name);
        let host = hostname();
        let content = format!("{}:{}", std::process::id(), host);
        let start = Instant::now();
        let mut sleep = Duration::from_micros(100);
        let io_err = |source| DotlockError::Io {
            path: path.display().to_string(),
            source,
        };
        loop {
            match try_create(&path, &content) {
                Ok(Some(file)) => {
                    let meta = file.metadata().map_err(io_err)?;
                    let held = Arc::new(Held {
                        path,
                        file,
                        dev: meta.dev(),
                        ino: meta.ino(),
                        content,
                        touch_interval,
                        next_touch: Mutex::new(Instant::now() + touch_interval),
                        released: AtomicBool::new(false),
                        lost: AtomicBool::new(false),
                    });
                    if !touch_interval.is_zero() {
                        keeper().add(&held);
                    }
                    return Ok(Dotlock { held });
                }
                Ok(None) => {}
                Err(e) => return Err(io_err(e)),
            }
            match check_stale(&path, &host) {
                Stale::Yes(ino) => {
                    // Only remove the lock we examined, not one a faster
                    // contender created meanwhile.
                    if current_ino(&path) == Some(ino) {
                        tracing::warn!(path = %path.display(), "breaking stale dotlock");
                        let _ = std::fs::remove_file(&path);
                    }
                    continue;
                }
                Stale::Gone => continue,
                Stale::No(holder) => {
                    if start.elapsed() >= wait {
                        return Err(DotlockError::Timeout {
                            path: path.display().to_string(),
                            waited: start.elapsed(),
                            holder,
                        });
                    }
                }
            }
            let jitter = Duration::from_micros(rand::random::<u64>() % 200);
            std::thread::sleep(sleep + jitter);
            sleep = (sleep * 2).min(Duration::from_millis(20));
        }
    }

    /// Refreshes the mtime so others do not think we died (the keeper
    /// does this on its own; a holder may call it too).
    pub fn touch(&self) -> Result<(), DotlockError> {
        self.held.touch()
    }

    /// `Ok` while the lock name still holds the lock we created.
    pub fn verify(&self) -> Result<(), DotlockError> {
        self.held.verify()
    }

    /// A handle that can [`DotlockHolder::verify`] this lock.
    pub fn holder(&self) -> DotlockHolder {
        DotlockHolder {
            held: self.held.clone(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.held.path
    }

    /// Removes the lock now if it is still ours; [`DotlockError::Lost`]
    /// (and nothing removed) if someone else holds it now.
    pub fn release(self) -> Result<(), DotlockError> {
        self.held.release()
    }
}

impl DotlockHolder {
    /// `Ok` while the lock is held and still ours.
    pub fn verify(&self) -> Result<(), DotlockError> {
        if self.held.released.load(Ordering::SeqCst) {
            return Err(DotlockError::Lost {
                path: self.held.path.display().to_string(),
                holder: "nobody (released)".into(),
            });
        }
        self.held.verify()
    }
}

impl Held {
    fn lost(&self, holder: String) -> DotlockError {
        if !self.lost.swap(true, Ordering::SeqCst) {
            tracing::error!(
                path = %self.path.display(),
                now_held_by = %holder,
                "our dotlock was broken while we held it; writes under it are refused"
            );
        }
        DotlockError::Lost {
            path: self.path.display().to_string(),
            holder,
        }
    }

    fn verify(&self) -> Result<(), DotlockError> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(DotlockError::Lost {
                path: self.path.display().to_string(),
                holder: "another process".into(),
            });
        }
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(self.lost("nobody (removed)".into()))
            }
            Err(source) => {
                return Err(DotlockError::Io {
                    path: self.path.display().to_string(),
                    source,
                })
            }
        };
        if (meta.dev(), meta.ino()) != (self.dev, self.ino) {
            let now = std::fs::read(&self.path).unwrap_or_default();
            return Err(self.lost(holder_text(&now)));
        }
        // Same inode (it cannot have been reused: we keep it open), so the
        // content is what we wrote unless someone wrote into our lock.
        let now = std::fs::read(&self.path).unwrap_or_default();
        if now.trim_ascii() != self.content.as_bytes() {
            return Err(self.lost(holder_text(&now)));
        }
        Ok(())
    }

    fn touch(&self) -> Result<(), DotlockError> {
        self.verify()?;
        self.file
            .set_modified(SystemTime::now())
            .map_err(|source| DotlockError::Io {
                path: self.path.display().to_string(),
                source,
            })
    }

    fn release(&self) -> Result<(), DotlockError> {
        if self.released.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.verify()?;
        std::fs::remove_file(&self.path).map_err(|source| DotlockError::Io {
            path: self.path.display().to_string(),
            source,
        })
    }
}

impl Drop for Dotlock {
    fn drop(&mut self) {
        // A lost lock is left alone: it is someone else's now.
        let _ = self.held.release();
    }
}

fn holder_text(content: &[u8]) -> String {
    String::from_utf8_lossy(content)
        .trim()
        .chars()
        .take(100)
        .collect()
}

/// The one background thread that touches every held lock in the process.
struct Keeper {
    held: Mutex<Vec<Weak<Held>>>,
    wake: Condvar,
}

fn keeper() -> &'static Keeper {
    static KEEPER: OnceLock<&'static Keeper> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let k: &'static Keeper = Box::leak(Box::new(Keeper {
            held: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("dotlock-keeper".into())
            .spawn(move || k.run());
        if let Err(e) = spawned {
            // Locks then go untouched: a hold longer than STALE_TIMEOUT
            // may be broken, which verify() catches before any write.
            tracing::error!(error = %e, "cannot start the dotlock keeper thread");
        }
        k
    })
}

impl Keeper {
    fn add(&self, held: &Arc<Held>) {
        let mut list = self.held.lock().unwrap_or_else(|p| p.into_inner());
        list.push(Arc::downgrade(held));
        self.wake.notify_one();
    }

    fn run(&self) {
        let mut list = self.held.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            let mut due = Vec::new();
            list.retain(|w| {
                let Some(h) = w.upgrade() else { return false };
                if h.released.load(Ordering::SeqCst) || h.lost.load(Ordering::SeqCst) {
                    return false;
                }
                let mut at = h.next_touch.lock().unwrap_or_else(|p| p.into_inner());
                if *at <= now {
                    *at = now + h.touch_interval;
                    due.push(h.clone());
                }
                next = Some(next.map_or(*at, |n| n.min(*at)));
                true
            });
            if !due.is_empty() {
                // Touch outside the list lock: on slow NFS a touch may
                // take a while, and new holders must not wait for it.
                drop(list);
                for h in due {
                    if let Err(e) = h.touch() {
                        if !matches!(e, DotlockError::Lost { .. }) {
                            tracing::warn!(error = %e, "cannot refresh a held dotlock");
                        }
                    }
                }
                list = self.held.lock().unwrap_or_else(|p| p.into_inner());
                continue;
            }
            list = match next {
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.wake
                        .wait_timeout(list, wait)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0)
                }
                None => self.wake.wait(list).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// One attempt: the lock file as created (its inode is the lock's), or
/// `None` if the lock exists.
fn try_create(path: &Path, content: &str) -> io::Result<Option<File>> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = dir.join(format!(
        ".dovecot-uidlist.lock.tmp.{}.{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    if let Err(e) = f.write_all(content.as_bytes()) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(_) => {
            // No hard links here: O_EXCL on the lock name itself.
            match OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut f) => {
                    f.write_all(content.as_bytes())?;
                    Ok(Some(f))
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

enum Stale {
    Yes(u64),
    No(String),
    Gone,
}

fn current_ino(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

fn check_stale(path: &Path, host: &str) -> Stale {
    let Ok(meta) = std::fs::metadata(path) else {
        return Stale::Gone;
    };
    let content = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&content);
    let age = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or_default();
    if let Some((pid, lock_host)) = text.trim().split_once(':') {
        if let Ok(pid) = pid.parse::<u32>() {
            if lock_host == host && !Path::new(&format!("/proc/{pid}")).exists() {
                return Stale::Yes(meta.ino());
            }
        }
    }
    if age >= STALE_TIMEOUT || (content.is_empty() && age >= EMPTY_STALE_TIMEOUT) {
        return Stale::Yes(meta.ino());
    }
    Stale::No(holder_text(&content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_and_dead_holder_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("dovecot-uidlist");
        let a = Dotlock::acquire(&file, Duration::from_secs(1)).unwrap();
        let err = Dotlock::acquire(&file, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(err, DotlockError::Timeout { .. }));
        drop(a);
        let b = Dotlock::acquire(&file, Duration::from_secs(1)).unwrap();
        std::mem::forget(b);
        // Pretend a dead process on this host holds it.
        std::fs::write(
            dir.path().join("dovecot-uidlist.lock"),
            format!("{}:{}", u32::MAX - 1, hostname()),
        )
        .unwrap();
        let c = Dotlock::acquire(&file, Duration::from_secs(1)).unwrap();
        c.release().unwrap();
    }
}
