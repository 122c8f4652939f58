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
//! Holders of long operations must [`Dotlock::touch`] it.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// A lock untouched for this long is broken (Dovecot: 120 s for the uid list).
pub const STALE_TIMEOUT: Duration = Duration::from_secs(120);
/// An empty lock can only come from a holder that died between create and
/// write, or from Dovecot writing the new uid list into it; either way a
/// live holder finishes long before this.
const EMPTY_STALE_TIMEOUT: Duration = Duration::from_secs(30);

/// A held dotlock; removed on drop.
#[derive(Debug)]
pub struct Dotlock {
    path: PathBuf,
    released: bool,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum DotlockError {
    /// Someone held the lock for longer than we were willing to wait.
    #[error("{path}: still locked after {waited:?} (held by {holder})")]
    Timeout {
        path: String,
        waited: Duration,
        holder: String,
    },
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
                Ok(true) => {
                    return Ok(Dotlock {
                        path,
                        released: false,
                    })
                }
                Ok(false) => {}
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

    /// Refreshes the mtime so others do not think we died.
    pub fn touch(&self) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(&self.path)?;
        f.set_modified(SystemTime::now())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the lock now.
    pub fn release(mut self) -> io::Result<()> {
        self.released = true;
        std::fs::remove_file(&self.path)
    }
}

impl Drop for Dotlock {
    fn drop(&mut self) {
        if !self.released {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One attempt. `Ok(false)`: the lock exists.
fn try_create(path: &Path, content: &str) -> io::Result<bool> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = dir.join(format!(
        ".dovecot-uidlist.lock.tmp.{}.{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(content.as_bytes())?;
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(_) => {
            // No hard links here: O_EXCL on the lock name itself.
            match OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut f) => {
                    f.write_all(content.as_bytes())?;
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
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
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

fn check_stale(path: &Path, host: &str) -> Stale {
    use std::os::unix::fs::MetadataExt;
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
    Stale::No(text.trim().chars().take(100).collect())
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
