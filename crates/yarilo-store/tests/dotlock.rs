//! The uid list dotlock between processes: a holder whose lock another
//! process declared stale and broke (as Dovecot does after two minutes
//! without a touch) must notice before it writes and must not remove the
//! new holder's lock; a held lock is kept fresh so that this does not
//! happen to a live holder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use yarilo_store::dotlock::{hostname, Dotlock, DotlockError, STALE_TIMEOUT};
use yarilo_testkit::rerun;

const DIR_ENV: &str = "YARILO_DOTLOCK_TEST_DIR";

fn lock_path(dir: &Path) -> PathBuf {
    dir.join("dovecot-uidlist.lock")
}

/// Makes the lock look untouched for ten minutes.
fn age(lock: &Path) {
    let f = std::fs::OpenOptions::new().write(true).open(lock).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(600))
        .unwrap();
}

fn mtime_age(lock: &Path) -> Duration {
    let m = std::fs::metadata(lock).unwrap().modified().unwrap();
    SystemTime::now().duration_since(m).unwrap_or_default()
}

/// The second process: breaks the (stale) lock, holds it until its stdin
/// closes, releases it.
fn breaker(dir: &Path) {
    let lock = Dotlock::acquire(&dir.join("dovecot-uidlist"), Duration::from_secs(10)).unwrap();
    println!("HELD");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    lock.verify().unwrap();
    lock.release().unwrap();
    println!("RELEASED");
}

#[test]
fn a_lock_broken_mid_hold_by_another_process_is_neither_written_under_nor_removed() {
    if rerun::role().as_deref() == Some("breaker") {
        return breaker(Path::new(&std::env::var(DIR_ENV).unwrap()));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dovecot-uidlist");
    // Held without the keeper, as by a holder stuck on slow NFS.
    let ours = Dotlock::acquire_with(&file, Duration::from_secs(1), Duration::ZERO).unwrap();
    ours.verify().unwrap();
    let mine = format!("{}:{}", std::process::id(), hostname());
    assert_eq!(
        std::fs::read_to_string(lock_path(dir.path())).unwrap(),
        mine
    );
    age(&lock_path(dir.path()));
    assert!(mtime_age(&lock_path(dir.path())) > STALE_TIMEOUT);

    let mut kid = rerun::child(
        "a_lock_broken_mid_hold_by_another_process_is_neither_written_under_nor_removed",
        "breaker",
    )
    .env(DIR_ENV, dir.path())
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut out = BufReader::new(kid.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HELD") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the second process exited without taking the lock"
        );
    }
    let theirs = format!("{}:{}", kid.id(), hostname());
    assert_eq!(
        std::fs::read_to_string(lock_path(dir.path())).unwrap(),
        theirs
    );

    // We notice before writing, and say who holds it now.
    match ours.verify() {
        Err(DotlockError::Lost { holder, .. }) => assert_eq!(holder, theirs),
        other => panic!("a broken lock verified as {other:?}"),
    }
    let holder = ours.holder();
    assert!(holder.verify().is_err());
    // Releasing (or dropping) ours leaves theirs in place.
    assert!(matches!(ours.release(), Err(DotlockError::Lost { .. })));
    assert_eq!(
        std::fs::read_to_string(lock_path(dir.path())).unwrap(),
        theirs
    );

    // The second process still owns it and releases it itself.
    drop(kid.stdin.take());
    let mut rest = String::new();
    while out.read_line(&mut rest).unwrap() > 0 {}
    assert!(kid.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("RELEASED"), "{rest}");
    assert!(!lock_path(dir.path()).exists());
}

#[test]
fn a_held_lock_is_kept_fresh_and_so_never_taken_for_a_dead_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dovecot-uidlist");
    let ours =
        Dotlock::acquire_with(&file, Duration::from_secs(1), Duration::from_millis(50)).unwrap();
    age(&lock_path(dir.path()));
    // The keeper touches it again (bounded wait, no fixed sleep).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while mtime_age(&lock_path(dir.path())) > Duration::from_secs(60) {
        assert!(
            std::time::Instant::now() < deadline,
            "the held lock was never touched"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Fresh: a contender waits and gives up instead of breaking it.
    let err = Dotlock::acquire(&file, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, DotlockError::Timeout { .. }), "{err}");
    ours.verify().unwrap();
    ours.release().unwrap();
    assert!(!lock_path(dir.path()).exists());
}

#[test]
fn a_lock_removed_under_its_holder_is_lost_and_nothing_is_removed_twice() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dovecot-uidlist");
    let ours = Dotlock::acquire(&file, Duration::from_secs(1)).unwrap();
    std::fs::remove_file(lock_path(dir.path())).unwrap();
    assert!(matches!(ours.verify(), Err(DotlockError::Lost { .. })));
    // Someone else (in this process even: same pid and host in the file)
    // takes it; only the inode tells the two apart.
    let next = Dotlock::acquire(&file, Duration::from_secs(1)).unwrap();
    assert!(matches!(ours.verify(), Err(DotlockError::Lost { .. })));
    drop(ours);
    next.verify().unwrap();
    next.release().unwrap();
}
