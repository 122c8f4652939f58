//! Dovecot's passwd-file:
//! `user:password:uid:gid:gecos:home:shell:extra_fields`, one user a line,
//! `#` comments, trailing fields optional. Extra fields are space-separated
//! `key=value`; `userdb_` ones belong to the userdb. Lines may be longer
//! than eight colons because extra fields may hold `:`
//! (`userdb_quota_rule=*:storage=1G`).
//!
//! Invariants: the file is re-read whenever its inode, size or mtime
//! changes (checked on every lookup, off the async threads), so
//! `yarctl user add` is seen by a running server without a restart.
//! Rewrites are atomic: temp file, fsync, rename, directory fsync.
//! Writers are serialized by the classic lock file `<file>.lock` (created
//! with `O_EXCL`, holding `<pid>:<host>`, as shadow-utils locks
//! `/etc/passwd` and Dovecot its dotlocks; Dovecot never writes a
//! passwd-file, so there is no lock of its to share) held across read,
//! edit and rename, so two `yarctl user add` at once both land. The rewritten file keeps the old
//! one's owner, group and mode without the bits for others (new files:
//! 0600): it holds password hashes.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{parse_password, DbError, LookupRequest, PassdbEntry};
use crate::fields::ExtraFields;
use crate::scheme::Scheme;

/// One user line, fields as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PasswdLine {
    pub user: String,
    pub password: String,
    pub uid: String,
    pub gid: String,
    pub gecos: String,
    pub home: String,
    pub shell: String,
    pub extra: String,
}

impl PasswdLine {
    pub fn parse(line: &str) -> Option<PasswdLine> {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            return None;
        }
        let mut it = line.splitn(8, ':');
        let mut next = || it.next().unwrap_or("").to_string();
        let l = PasswdLine {
            user: next(),
            password: next(),
            uid: next(),
            gid: next(),
            gecos: next(),
            home: next(),
            shell: next(),
            extra: next(),
        };
        (!l.user.is_empty()).then_some(l)
    }

    pub fn to_line(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}:{}:{}:{}",
            self.user,
            self.password,
            self.uid,
            self.gid,
            self.gecos,
            self.home,
            self.shell,
            self.extra
        )
    }

    /// userdb fields: uid, gid, home from their columns, plus `userdb_*`.
    pub fn userdb_fields(&self) -> ExtraFields {
        let mut f = ExtraFields::new();
        for (k, v) in [("uid", &self.uid), ("gid", &self.gid), ("home", &self.home)] {
            if !v.is_empty() {
                f.set(k, v.as_str());
            }
        }
        let (_, user) = ExtraFields::parse_dovecot(&self.extra).split_userdb();
        f.merge(&user);
        f
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

#[derive(Debug, Default)]
struct Loaded {
    stamp: Option<Stamp>,
    users: HashMap<String, PasswdLine>,
}

/// A passwd-file passdb/userdb.
#[derive(Debug, Clone)]
pub struct PasswdFile {
    path: PathBuf,
    default_scheme: Scheme,
    loaded: Arc<Mutex<Loaded>>,
}

impl PasswdFile {
    pub fn new(path: impl Into<PathBuf>, default_scheme: Scheme) -> PasswdFile {
        PasswdFile {
            path: path.into(),
            default_scheme,
            loaded: Arc::new(Mutex::new(Loaded::default())),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io_err(&self, source: std::io::Error) -> DbError {
        DbError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Reloads when changed and returns the user's line. Blocking.
    fn get_blocking(&self, user: &str) -> Result<Option<PasswdLine>, DbError> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            // A missing file is "no users yet", not an outage: a fresh
            // `yarilo single` starts before the first `yarctl user add`.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.io_err(e)),
        };
        let mut loaded = self
            .loaded
            .lock()
            .map_err(|_| DbError::Internal("passwd-file lock poisoned".into()))?;
        let stamp = meta.as_ref().map(Stamp::of);
        if stamp != loaded.stamp {
            let users = match meta {
                Some(_) => {
                    let text = std::fs::read_to_string(&self.path).map_err(|e| self.io_err(e))?;
                    let mut users = HashMap::new();
                    for line in text.lines().filter_map(PasswdLine::parse) {
                        // The first line for a user wins, as in Dovecot.
                        users.entry(line.user.clone()).or_insert(line);
                    }
                    tracing::debug!(path = %self.path.display(), users = users.len(), "passwd-file loaded");
                    users
                }
                None => HashMap::new(),
            };
            *loaded = Loaded { stamp, users };
        }
        Ok(loaded.users.get(user).cloned())
    }

    async fn get(&self, user: &str) -> Result<Option<PasswdLine>, DbError> {
        let this = self.clone();
        let user = user.to_string();
        tokio::task::spawn_blocking(move || this.get_blocking(&user))
            .await
            .map_err(|e| DbError::Internal(e.to_string()))?
    }

    pub async fn passdb_lookup(
        &self,
        req: &LookupRequest<'_>,
    ) -> Result<Option<PassdbEntry>, DbError> {
        let Some(line) = self.get(req.user).await? else {
            return Ok(None);
        };
        let (fields, userdb_fields) = ExtraFields::parse_dovecot(&line.extra).split_userdb();
        let nopassword = fields.contains("nopassword");
        let password = if line.password.is_empty() {
            None
        } else {
            Some(parse_password(
                &line.user,
                &line.password,
                self.default_scheme,
            )?)
        };
        Ok(Some(PassdbEntry {
            user: line.user,
            password,
            nopassword,
            fields,
            userdb_fields,
        }))
    }

    pub async fn userdb_lookup(
        &self,
        req: &LookupRequest<'_>,
    ) -> Result<Option<ExtraFields>, DbError> {
        Ok(self.get(req.user).await?.map(|l| l.userdb_fields()))
    }

    // ---- administration (yarctl user …); blocking, call from spawn_blocking or a CLI ----

    fn read_lines(&self) -> Result<Vec<String>, DbError> {
        match std::fs::read_to_string(&self.path) {
            Ok(t) => Ok(t.lines().map(str::to_string).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(self.io_err(e)),
        }
    }

    /// Every user line, in file order.
    pub fn list_blocking(&self) -> Result<Vec<PasswdLine>, DbError> {
        Ok(self
            .read_lines()?
            .iter()
            .filter_map(|l| PasswdLine::parse(l))
            .collect())
    }

    /// Applies `edit` to the file's lines and writes the result atomically,
    /// under the writers' lock. `edit` returns an error to leave the file
    /// untouched.
    pub fn rewrite_blocking(
        &self,
        edit: impl FnOnce(&mut Vec<String>) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        let _lock = self.lock_writers()?;
        let mut lines = self.read_lines()?;
        edit(&mut lines)?;
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        write_atomic(&self.path, text.as_bytes()).map_err(|e| self.io_err(e))
    }

    /// Takes the writers' lock, waiting up to [`WRITER_LOCK_WAIT`].
    fn lock_writers(&self) -> Result<WriterLock, DbError> {
        if let Some(dir) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.io_err(e))?;
        }
        let mut name = self.path.as_os_str().to_owned();
        name.push(".lock");
        WriterLock::acquire(PathBuf::from(name)).map_err(|e| self.io_err(e))
    }

    /// Adds a line; fails if the user exists.
    pub fn add_blocking(&self, line: PasswdLine) -> Result<(), DbError> {
        validate_field(&line.user, "user name")?;
        validate_field(&line.password, "password hash")?;
        self.rewrite_blocking(|lines| {
            if lines
                .iter()
                .filter_map(|l| PasswdLine::parse(l))
                .any(|l| l.user == line.user)
            {
                return Err(DbError::Unsupported(format!(
                    "user {} already exists",
                    line.user
                )));
            }
            lines.push(line.to_line());
            Ok(())
        })
    }

    /// Replaces a user's password; fails if the user is absent.
    pub fn set_password_blocking(&self, user: &str, stored: &str) -> Result<(), DbError> {
        validate_field(stored, "password hash")?;
        self.rewrite_blocking(|lines| {
            let mut found = false;
            for l in lines.iter_mut() {
                if let Some(mut p) = PasswdLine::parse(l) {
                    if p.user == user {
                        p.password = stored.to_string();
                        *l = p.to_line();
                        found = true;
                    }
                }
            }
            if found {
                Ok(())
            } else {
                Err(DbError::Unsupported(format!("no user {user}")))
            }
        })
    }

    /// Removes a user; fails if absent.
    pub fn delete_blocking(&self, user: &str) -> Result<(), DbError> {
        self.rewrite_blocking(|lines| {
            let before = lines.len();
            lines.retain(|l| PasswdLine::parse(l).is_none_or(|p| p.user != user));
            if lines.len() == before {
                Err(DbError::Unsupported(format!("no user {user}")))
            } else {
                Ok(())
            }
        })
    }
}

fn validate_field(value: &str, what: &str) -> Result<(), DbError> {
    if value.contains([':', '\n', '\r', '\0']) {
        return Err(DbError::Unsupported(format!(
            "{what} must not contain ':' or line breaks"
        )));
    }
    Ok(())
}

/// How long a passwd-file writer waits for another one.
pub const WRITER_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// A lock file older than this belongs to a writer that died (a rewrite
/// takes milliseconds).
const WRITER_LOCK_STALE: std::time::Duration = std::time::Duration::from_secs(60);

/// `<file>.lock`, held while a writer reads, edits and renames; removed on
/// drop if it is still the one this writer created.
struct WriterLock {
    path: PathBuf,
    ino: u64,
}

impl WriterLock {
    fn acquire(path: PathBuf) -> std::io::Result<WriterLock> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let me = format!("{}:{host}", std::process::id());
        let deadline = std::time::Instant::now() + WRITER_LOCK_WAIT;
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(mut f) => {
                    f.write_all(me.as_bytes())?;
                    let ino = f.metadata()?.ino();
                    return Ok(WriterLock { path, ino });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            if let Some(ino) = stale_lock(&path, &host) {
                // Only the lock we judged, not one a contender made since.
                if std::fs::metadata(&path).map(|m| m.ino()).ok() == Some(ino) {
                    tracing::warn!(path = %path.display(), "removing a stale passwd-file lock");
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if std::time::Instant::now() >= deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} held by another writer for {WRITER_LOCK_WAIT:?}",
                        path.display()
                    ),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(
                2 + rand::random::<u64>() % 8,
            ));
        }
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        if std::fs::metadata(&self.path).map(|m| m.ino()).ok() == Some(self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The lock's inode if it is stale: its pid is on this host and gone, or
/// it has not changed for [`WRITER_LOCK_STALE`].
fn stale_lock(path: &Path, host: &str) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if let Some((pid, lock_host)) = text.trim().split_once(':') {
        if lock_host == host
            && pid.parse::<u32>().is_ok()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            return Some(meta.ino());
        }
    }
    let age = meta.modified().ok()?.elapsed().unwrap_or_default();
    (age >= WRITER_LOCK_STALE).then_some(meta.ino())
}

/// Temp file in the same directory, fsync, rename over, fsync the directory.
/// The new file has the old one's owner and group and its mode without the
/// bits for others (a new file: 0600), set on the open temp file before a
/// byte is written: it holds password hashes.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "users".into());
    let old = std::fs::metadata(path).ok();
    let mode = old
        .as_ref()
        .map(|m| m.permissions().mode() & 0o770)
        .unwrap_or(0o600);
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        if let Some(m) = &old {
            // Keep a group the auth process reads it through; as root
            // this may hand the file back to its owner.
            if std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid())).is_err() {
                tracing::debug!(path = %path.display(), "cannot keep the passwd-file's owner");
            }
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_writers_all_land_and_the_file_stays_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        let db = PasswdFile::new(&path, Scheme::Plain);
        std::thread::scope(|s| {
            for t in 0..8 {
                let db = db.clone();
                s.spawn(move || {
                    for i in 0..10 {
                        db.add_blocking(PasswdLine {
                            user: format!("u{t}-{i}"),
                            password: "{PLAIN}x".into(),
                            ..Default::default()
                        })
                        .unwrap();
                    }
                });
            }
        });
        assert_eq!(db.list_blocking().unwrap().len(), 80);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A group-readable file stays group-readable; others lose access.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        db.delete_blocking("u0-0").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn lines_with_colons_in_extra_fields_parse() {
        let l = PasswdLine::parse(
            "bob:{PLAIN}pw:1000:1000::/home/bob::allow_nets=10.0.0.0/8 userdb_quota_rule=*:storage=1G",
        )
        .unwrap();
        assert_eq!(l.user, "bob");
        assert_eq!(l.home, "/home/bob");
        let u = l.userdb_fields();
        assert_eq!(u.get("quota_rule"), Some("*:storage=1G"));
        assert_eq!(u.get("uid"), Some("1000"));
        assert_eq!(PasswdLine::parse("# c"), None);
        assert_eq!(PasswdLine::parse("short:pw").unwrap().password, "pw");
    }

    #[test]
    fn edits_are_atomic_and_keep_comments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        std::fs::write(&path, "# users\nalice:{PLAIN}a::::::\n").unwrap();
        let db = PasswdFile::new(&path, Scheme::Plain);
        db.add_blocking(PasswdLine {
            user: "bob".into(),
            password: "{PLAIN}b".into(),
            ..Default::default()
        })
        .unwrap();
        assert!(db
            .add_blocking(PasswdLine {
                user: "bob".into(),
                ..Default::default()
            })
            .is_err());
        db.set_password_blocking("alice", "{PLAIN}a2").unwrap();
        db.delete_blocking("bob").unwrap();
        assert!(db.delete_blocking("bob").is_err());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "# users\nalice:{PLAIN}a2::::::\n");
        assert!(db
            .add_blocking(PasswdLine {
                user: "x:y".into(),
                ..Default::default()
            })
            .is_err());
    }
}
