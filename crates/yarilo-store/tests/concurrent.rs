//! Concurrent writers on one Maildir: two yarilo processes, and yarilo
//! beside Dovecot's doveadm, appending and flagging at the same time.
//! Afterwards: no UID twice, no acknowledged message lost, and yarilo and
//! Dovecot agree on every UID.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::collections::{HashMap, HashSet};
use std::process::{Output, Stdio};
use std::sync::Arc;

use common::{parse_fetch, torture_bin, Dovecot};
use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_store::{Store, StoreSettings, UserInfo};

fn acks(out: &Output) -> Vec<(u32, String)> {
    assert!(
        out.status.success(),
        "writer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            (p.next()? == "ACK").then_some(())?;
            Some((p.next()?.parse().ok()?, p.next()?.to_string()))
        })
        .collect()
}

async fn check(
    loc: &str,
    user: &str,
    all: &[(u32, String)],
    extra: usize,
) -> yarilo_store::Mailbox {
    let store = Store::new(
        StoreSettings::new(loc),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap();
    let u = store
        .user(&UserInfo {
            user: user.into(),
            home: String::new(),
        })
        .await
        .unwrap();
    let mb = u.open("INBOX").await.unwrap();
    let v = mb.view();
    let mut uids = HashSet::new();
    for (uid, _) in all {
        assert!(uids.insert(*uid), "uid {uid} acknowledged twice");
    }
    assert_eq!(v.len(), all.len() + extra, "message count");
    for (uid, id) in all {
        let data = mb
            .read_message(*uid)
            .await
            .unwrap_or_else(|e| panic!("uid {uid} lost: {e}"));
        assert!(
            String::from_utf8_lossy(&data).contains(&format!("X-Torture-Id: {id}\r\n")),
            "uid {uid} is not {id}"
        );
    }
    mb
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_yarilo_processes_append_and_flag_the_same_mailbox() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%u", dir.path().display());
    let spawn = |seed: &str| {
        tokio::process::Command::new(torture_bin())
            .args([loc.as_str(), "duo", "INBOX", "append-flag", "150", seed])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output()
    };
    let (a, b) = tokio::time::timeout(std::time::Duration::from_secs(240), async {
        tokio::join!(spawn("11"), spawn("23"))
    })
    .await
    .expect("writers did not finish in 240 s");
    let mut all = acks(&a.unwrap());
    all.extend(acks(&b.unwrap()));
    assert_eq!(all.len(), 300);
    check(&loc, "duo", &all, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yarilo_and_dovecot_write_the_same_mailbox_at_once() {
    let d = Dovecot::new("");
    let user = "both";
    // Let Dovecot create the Maildir so both sides can write it.
    d.doveadm(user, &["mailbox", "status", "messages", "INBOX"], None);
    let loc = d.location("");
    let mut writer = d.as_mail_user(&torture_bin());
    writer
        .args([loc.as_str(), user, "INBOX", "append-flag", "120", "7"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let writer = tokio::process::Command::from(writer)
        .kill_on_drop(true)
        .output();
    let dove = async {
        let mut n = 0;
        for i in 0..60 {
            let m = format!("From: d@example.org\nSubject: dovecot {i}\nX-Dovecot-Id: {i}\n\nhi\n");
            let d2 = &d;
            tokio::task::block_in_place(|| {
                d2.doveadm(user, &["save"], Some(m.as_bytes()));
                if i % 5 == 4 {
                    d2.doveadm(
                        user,
                        &["flags", "add", "\\Answered", "mailbox", "INBOX", "all"],
                        None,
                    );
                }
            });
            n += 1;
        }
        n
    };
    let (out, dove_count) = tokio::time::timeout(std::time::Duration::from_secs(240), async {
        tokio::join!(writer, dove)
    })
    .await
    .expect("writers did not finish in 240 s");
    let all = acks(&out.unwrap());
    assert_eq!(all.len(), 120);
    let mb = check(&loc, user, &all, dove_count).await;
    // Dovecot sees exactly the same UIDs (and flags) as yarilo.
    let v = mb.view();
    let fetched = parse_fetch(&d.doveadm(
        user,
        &["fetch", "uid flags", "mailbox", "INBOX", "all"],
        None,
    ));
    let ours: Vec<u32> = v.uids();
    let theirs: Vec<u32> = fetched.iter().map(|(u, _)| *u).collect();
    assert_eq!(ours, theirs);
    let dovecot_ids: HashMap<u32, String> =
        fetched.into_iter().map(|(u, f)| (u, f.join(" "))).collect();
    for r in v.records() {
        let mut f: Vec<String> = v
            .info(r)
            .flags
            .imap_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        f.extend(v.info(r).keywords);
        f.sort();
        assert_eq!(dovecot_ids[&r.uid], f.join(" "), "flags of uid {}", r.uid);
    }
}
