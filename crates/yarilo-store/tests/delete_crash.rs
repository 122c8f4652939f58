//! A process killed in the middle of DELETE: the mailbox is gone for
//! clients at once (DELETE renamed it out of the namespace before removing
//! anything), it never shows up in LIST under its temporary name, and the
//! next LIST finishes the removal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_store::{Store, StoreSettings, UserInfo, UserStore};
use yarilo_testkit::rerun;

const TEST: &str = "a_kill_during_delete_leaves_nothing_listed_and_the_next_list_cleans_up";
const ROOT_ENV: &str = "YARILO_DELETE_CRASH_ROOT";
/// Enough files that removing them takes a while after the rename.
const FILES: usize = 20_000;

async fn user(root: &Path) -> UserStore {
    let s = Store::new(
        StoreSettings::new(&format!("maildir:{}", root.display())),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap();
    s.user(&UserInfo {
        user: "alice".into(),
        home: String::new(),
    })
    .await
    .unwrap()
}

fn trash_dirs(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("..yarilo-deleted."))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_delete_leaves_nothing_listed_and_the_next_list_cleans_up() {
    if rerun::role().as_deref() == Some("deleter") {
        let root = std::env::var(ROOT_ENV).unwrap();
        let u = user(Path::new(&root)).await;
        println!("DELETING");
        u.delete("Work").await.unwrap();
        println!("DELETED");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("alice");
    let mut caught = false;
    for attempt in 0..3 {
        let u = user(&root).await;
        u.create("Work").await.unwrap();
        u.create("Work.Projects").await.unwrap();
        let cur = root.join(".Work/cur");
        for i in 0..FILES * (attempt + 1) {
            std::fs::write(cur.join(format!("{i}.M{i}P1.host,S=4:2,S")), b"mail").unwrap();
        }
        drop(u);

        let mut kid = rerun::child(TEST, "deleter")
            .env(ROOT_ENV, &root)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(kid.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("DELETING") {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the deleter exited early"
            );
        }
        // SIGKILL the moment the rename has happened, while the removal runs.
        let deadline = Instant::now() + Duration::from_secs(60);
        while trash_dirs(&root).is_empty() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        kid.kill().unwrap();
        kid.wait().unwrap();
        if !trash_dirs(&root).is_empty() {
            caught = true;
            break;
        }
        // The delete finished before the kill landed: again, with more files.
        eprintln!("attempt {attempt}: DELETE finished before the kill; retrying larger");
    }
    assert!(
        caught,
        "never caught a DELETE between its rename and its end"
    );
    assert!(
        !root.join(".Work").exists(),
        "the mailbox left the namespace"
    );

    // A fresh process: the half-deleted mailbox is not listed under any
    // name, its child is still there, and LIST removes the leftover.
    let u = user(&root).await;
    let names: Vec<String> = u
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&"Work.Projects".to_string()), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n == "Work" || n.starts_with('.') || n.contains("deleted")),
        "{names:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !trash_dirs(&root).is_empty() {
        assert!(Instant::now() < deadline, "the leftover was never removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The name is free again, and the new mailbox starts empty.
    u.create("Work").await.unwrap();
    assert_eq!(u.open("Work").await.unwrap().view().len(), 0);
}
