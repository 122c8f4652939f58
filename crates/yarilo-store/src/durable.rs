//! Durable file writes: temp file → fsync → rename → fsync directory.
//!
//! Invariant: a reader (or a restart after a crash) sees either the old
//! or the new content of a file, never a mix, and a rename the caller was
//! told succeeded is on stable storage (on NFS this needs a `sync` export;
//! a directory fsync is a no-op there, see docs/store.md).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Flushes a directory entry change (create, rename, unlink) to disk.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        // Some filesystems refuse fsync on a directory; there is nothing
        // more we can do there.
        Err(e) if e.raw_os_error() == Some(22) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `data` atomically and durably, through a temp
/// name unique to this process and call (`<name>.yarilo-tmp.<pid>.<rand>`),
/// so concurrent writers never share a temp file.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic_mode(path, data, None)
}

/// [`write_atomic`] for a secret (a key): the file is owner-only (0600)
/// from its creation, whatever the umask.
pub fn write_atomic_private(path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic_mode(path, data, Some(0o600))
}

fn write_atomic_mode(path: &Path, data: &[u8], mode: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        "{name}.yarilo-tmp.{}.{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let written = (|| {
        let mut open = OpenOptions::new();
        open.write(true).create_new(true);
        if let Some(m) = mode {
            open.mode(m);
        }
        let mut f = open.open(&tmp)?;
        if let Some(m) = mode {
            f.set_permissions(std::fs::Permissions::from_mode(m))?;
        }
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    fsync_dir(dir)
}

/// Creates a directory (and parents) and makes the new entries durable.
pub fn create_dir_durable(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    if let Some(parent) = path.parent() {
        fsync_dir(parent)?;
    }
    Ok(())
}
