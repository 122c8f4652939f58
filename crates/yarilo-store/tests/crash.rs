//! Crash safety: a writer process is killed with SIGKILL at random points
//! of append / flag / expunge, many times over. After every kill each
//! acknowledged append is present (unless its expunge had started), UIDs
//! never repeat or go backwards, and the store opens cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::{torture_bin, ChildGuard};
use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_store::{Store, StoreSettings, UserInfo};

fn x_id(msg: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(msg);
    text.lines()
        .find_map(|l| l.strip_prefix("X-Torture-Id: "))
        .map(|s| s.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%u", dir.path().display());
    let rounds = 25;
    // uid -> torture id, for every acknowledged append still expected.
    let mut expected: HashMap<u32, String> = HashMap::new();
    let mut max_acked = 0u32;
    let mut last_uidnext = 0u32;
    let mut last_modseq = 0u64;
    for round in 0..rounds {
        let seed = 0x9e37_79b9u64.wrapping_mul(round + 1);
        let mut child = ChildGuard(
            Command::new(torture_bin())
                .args([&loc, "crash", "INBOX", "mixed", "0", &seed.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let stdout = child.0.stdout.take().unwrap();
        // Kill after a pseudo-random number of output lines: the process
        // is somewhere inside its next operation.
        let kill_after = 3 + (seed % 37) as usize;
        let lines = tokio::task::spawn_blocking(move || {
            let mut lines = Vec::new();
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            while lines.len() < kill_after {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => lines.push(line.trim().to_string()),
                }
            }
            (lines, r)
        });
        let (lines, reader) = tokio::time::timeout(std::time::Duration::from_secs(60), lines)
            .await
            .expect("torture writer produced no output in 60 s")
            .unwrap();
        // Then a pseudo-random few milliseconds more, so the kill lands in
        // different stages (temp file, rename, uid list, index log, flag
        // rename, unlink) from round to round.
        tokio::time::sleep(std::time::Duration::from_micros((seed >> 7) % 4000)).await;
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        // Lines written before the kill but not yet read.
        let mut lines = lines;
        for l in reader.lines().map_while(Result::ok) {
            lines.push(l.trim().to_string());
        }
        let mut expunge_started = HashSet::new();
        for l in &lines {
            let parts: Vec<&str> = l.split_whitespace().collect();
            match parts.as_slice() {
                ["ACK", uid, id] => {
                    let uid: u32 = uid.parse().unwrap();
                    assert!(
                        uid > max_acked,
                        "uid {uid} handed out again (max acked {max_acked})"
                    );
                    max_acked = uid;
                    expected.insert(uid, id.to_string());
                }
                ["EXPUNGE-START", uid] => {
                    expunge_started.insert(uid.parse::<u32>().unwrap());
                }
                ["EXPUNGED", uid] => {
                    expected.remove(&uid.parse::<u32>().unwrap());
                }
                _ => panic!("unexpected torture output {l:?}"),
            }
        }
        // A fresh process view: must open cleanly and contain everything.
        let store = Store::new(
            StoreSettings::new(&loc),
            Arc::new(MemoryLocker::new()),
            Arc::new(MemoryEventBus::default()),
        )
        .unwrap();
        let u = store
            .user(&UserInfo {
                user: "crash".into(),
                home: String::new(),
            })
            .await
            .unwrap();
        let mb = u.open("INBOX").await.unwrap();
        let v = mb.view();
        assert!(
            v.uidnext() > max_acked,
            "uidnext {} <= acked {max_acked}",
            v.uidnext()
        );
        assert!(v.uidnext() >= last_uidnext, "UIDNEXT went backwards");
        assert!(
            v.highest_modseq() >= last_modseq,
            "HIGHESTMODSEQ went backwards"
        );
        last_uidnext = v.uidnext();
        last_modseq = v.highest_modseq();
        let mut seen_ids = HashSet::new();
        for r in v.records() {
            let data = mb.read_message(r.uid).await.unwrap();
            let id = x_id(&data).expect("message without X-Torture-Id");
            assert!(seen_ids.insert(id.clone()), "message {id} stored twice");
            if let Some(want) = expected.get(&r.uid) {
                assert_eq!(&id, want, "uid {} holds the wrong message", r.uid);
            }
        }
        for (uid, id) in &expected {
            if v.by_uid(*uid).is_none() {
                assert!(
                    expunge_started.contains(uid),
                    "round {round}: acknowledged uid {uid} ({id}) is lost"
                );
            }
        }
        expected.retain(|uid, _| v.by_uid(*uid).is_some());
        // The uid list on disk is well-formed and strictly increasing.
        let raw = std::fs::read(dir.path().join("crash/dovecot-uidlist")).unwrap();
        let (list, _) = yarilo_store::uidlist::UidList::parse(&raw).unwrap();
        assert!(list.next_uid() >= v.uidnext());
        // No stale dotlock blocks the next writer for long (dead pid).
    }
    assert!(
        max_acked > rounds as u32,
        "too few appends acknowledged: {max_acked}"
    );
}
