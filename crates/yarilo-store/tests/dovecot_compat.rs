//! Compatibility both ways with Dovecot 2.3 (`doveadm` with a private
//! config; see common/mod.rs). Needs doveadm from scripts/setup-dev.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{parse_fetch, Dovecot};
use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_store::{AppendOptions, FlagOp, Flags, MailboxView, Store, StoreSettings, UserInfo};

fn store(loc: &str) -> Store {
    Store::new(
        StoreSettings::new(loc),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap()
}

fn info(user: &str) -> UserInfo {
    UserInfo {
        user: user.into(),
        home: String::new(),
    }
}

fn msg(n: u32) -> Vec<u8> {
    format!("From: a@example.org\nTo: b@example.org\nSubject: message {n}\nMessage-ID: <{n}@t>\n\nbody {n}\n")
        .into_bytes()
}

/// `key=value` pairs from `doveadm mailbox status`.
fn status(d: &Dovecot, user: &str, mailbox: &str) -> HashMap<String, u64> {
    let out = d.doveadm(
        user,
        &["mailbox", "status", "uidvalidity uidnext messages", mailbox],
        None,
    );
    out.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

/// Our view as (uid, sorted IMAP flag names + keywords), like doveadm prints.
fn our_flags(v: &MailboxView) -> Vec<(u32, Vec<String>)> {
    v.records()
        .map(|r| {
            let info = v.info(r);
            let mut f: Vec<String> = info
                .flags
                .imap_names()
                .iter()
                .map(|s| s.to_string())
                .collect();
            f.extend(info.keywords);
            f.sort();
            (r.uid, f)
        })
        .collect()
}

#[tokio::test]
async fn maildir_filled_by_dovecot_opens_in_yarilo_unchanged() {
    let d = Dovecot::new("");
    let user = "dovy";
    for n in 1..=4 {
        d.doveadm(user, &["save"], Some(&msg(n)));
    }
    d.doveadm(
        user,
        &["flags", "add", "\\Seen", "mailbox", "INBOX", "uid", "1"],
        None,
    );
    d.doveadm(
        user,
        &[
            "flags",
            "add",
            "\\Answered $Label1 foo",
            "mailbox",
            "INBOX",
            "uid",
            "2",
        ],
        None,
    );
    d.doveadm(
        user,
        &[
            "flags",
            "add",
            "\\Flagged \\Deleted \\Draft",
            "mailbox",
            "INBOX",
            "uid",
            "3",
        ],
        None,
    );
    d.doveadm(user, &["expunge", "mailbox", "INBOX", "uid", "4"], None);
    d.doveadm(user, &["save"], Some(&msg(5)));
    d.doveadm(user, &["mailbox", "create", "Sent", "Foo.Bar"], None);
    d.doveadm(user, &["mailbox", "subscribe", "Sent"], None);
    d.doveadm(user, &["save", "-m", "Foo.Bar"], Some(&msg(6)));
    let st = status(&d, user, "INBOX");
    let dove = parse_fetch(&d.doveadm(
        user,
        &["fetch", "uid flags", "mailbox", "INBOX", "all"],
        None,
    ));
    assert_eq!(dove.len(), 4, "{dove:?}");

    let s = store(&d.location(""));
    let u = s.user(&info(user)).await.unwrap();
    let inbox = u.open("INBOX").await.unwrap();
    let v = inbox.view();
    assert_eq!(v.uidvalidity() as u64, st["uidvalidity"]);
    assert_eq!(v.uidnext() as u64, st["uidnext"]);
    assert_eq!(v.len() as u64, st["messages"]);
    assert_eq!(our_flags(&v), dove);
    assert_eq!(v.uids(), vec![1, 2, 3, 5]);
    assert_eq!(inbox.read_message(5).await.unwrap(), msg(5));
    let names: Vec<String> = u
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(
        names.contains(&"Sent".to_string()) && names.contains(&"Foo.Bar".to_string()),
        "{names:?}"
    );
    assert!(u
        .subscriptions()
        .await
        .unwrap()
        .contains(&"Sent".to_string()));
    let fb = u.open("Foo.Bar").await.unwrap();
    assert_eq!(fb.view().uids(), vec![1]);
    assert_eq!(
        fb.view().uidvalidity() as u64,
        status(&d, user, "Foo.Bar")["uidvalidity"]
    );

    // And yarilo's writes on top go back to Dovecot with the next UIDs.
    let uid = inbox
        .append(
            msg(7),
            AppendOptions {
                flags: Flags::FLAGGED,
                keywords: vec!["foo".into()],
                internal_date: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(uid, 6);
    inbox
        .store_flags(&[1], FlagOp::Add, Flags::ANSWERED, &[], None)
        .await
        .unwrap();
    d.chown_all();
    let dove = parse_fetch(&d.doveadm(
        user,
        &["fetch", "uid flags", "mailbox", "INBOX", "all"],
        None,
    ));
    assert_eq!(our_flags(&inbox.view()), dove);
}

#[tokio::test]
async fn maildir_filled_by_yarilo_reads_back_in_dovecot() {
    let d = Dovecot::new("");
    let user = "yary";
    let s = store(&d.location(""));
    let u = s.user(&info(user)).await.unwrap();
    let inbox = u.open("INBOX").await.unwrap();
    let plan: Vec<(Flags, Vec<String>)> = vec![
        (Flags::SEEN, vec![]),
        (Flags::ANSWERED.union(Flags::SEEN), vec!["$Label1".into()]),
        (Flags::EMPTY, vec!["work".into(), "$Forwarded".into()]),
        (Flags::DRAFT.union(Flags::FLAGGED), vec![]),
        (Flags::DELETED, vec![]),
    ];
    for (i, (flags, kw)) in plan.iter().enumerate() {
        inbox
            .append(
                msg(i as u32),
                AppendOptions {
                    flags: *flags,
                    keywords: kw.clone(),
                    internal_date: Some(1_600_000_000 + i as i64),
                },
            )
            .await
            .unwrap();
    }
    inbox.expunge(&[3]).await.unwrap();
    inbox
        .store_flags(&[5], FlagOp::Remove, Flags::DELETED, &[], None)
        .await
        .unwrap();
    u.create("Archive.2024").await.unwrap();
    let arch = u.open("Archive.2024").await.unwrap();
    arch.append(msg(9), AppendOptions::default()).await.unwrap();
    d.chown_all();

    let v = inbox.view();
    let st = status(&d, user, "INBOX");
    assert_eq!(st["uidvalidity"], v.uidvalidity() as u64);
    assert_eq!(st["uidnext"], v.uidnext() as u64);
    assert_eq!(st["messages"], 4);
    let dove = parse_fetch(&d.doveadm(
        user,
        &["fetch", "uid flags", "mailbox", "INBOX", "all"],
        None,
    ));
    assert_eq!(dove, our_flags(&v));
    let seen = d.doveadm(user, &["search", "mailbox", "INBOX", "SEEN"], None);
    let seen_uids: Vec<u32> = seen
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert_eq!(seen_uids, vec![1, 2]);
    // uid 3 (the only "work" message) was expunged; uid 2 carries $Label1.
    let kw = d.doveadm(
        user,
        &["search", "mailbox", "INBOX", "KEYWORD", "work"],
        None,
    );
    assert!(kw.trim().is_empty(), "{kw}");
    let kw = d.doveadm(
        user,
        &["search", "mailbox", "INBOX", "KEYWORD", "$Label1"],
        None,
    );
    let kw_uids: Vec<&str> = kw
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(kw_uids, vec!["2"]);
    let dates = d.doveadm(
        user,
        &["fetch", "uid date.received", "mailbox", "INBOX", "uid", "1"],
        None,
    );
    assert!(dates.contains("2020-09-13"), "{dates}");
    let body = d.doveadm(
        user,
        &["fetch", "text", "mailbox", "INBOX", "uid", "4"],
        None,
    );
    assert!(body.contains("body 3"), "{body}");
    let lists = d.doveadm(user, &["mailbox", "list"], None);
    assert!(lists.lines().any(|l| l == "Archive.2024"), "{lists}");
    assert!(d
        .doveadm(user, &["mailbox", "list", "-s"], None)
        .lines()
        .any(|l| l == "Sent"));
    let arch_status = status(&d, user, "Archive.2024");
    assert_eq!(arch_status["messages"], 1);
    assert_eq!(arch_status["uidvalidity"], arch.view().uidvalidity() as u64);

    // Dovecot writes next; yarilo sees it without reopening.
    d.doveadm(user, &["save"], Some(&msg(10)));
    d.doveadm(
        user,
        &["flags", "add", "\\Flagged", "mailbox", "INBOX", "uid", "1"],
        None,
    );
    let v = inbox.refresh().await.unwrap();
    assert_eq!(v.uids(), vec![1, 2, 4, 5, 6]);
    assert!(v.by_uid(1).unwrap().flags.contains(Flags::FLAGGED));
    let dove = parse_fetch(&d.doveadm(
        user,
        &["fetch", "uid flags", "mailbox", "INBOX", "all"],
        None,
    ));
    assert_eq!(dove, our_flags(&v));
}

#[tokio::test]
async fn layout_fs_is_shared_with_dovecot() {
    let d = Dovecot::new(":LAYOUT=fs");
    let user = "fsuser";
    d.doveadm(user, &["save"], Some(&msg(1)));
    d.doveadm(user, &["mailbox", "create", "Foo/Bar"], None);
    d.doveadm(user, &["save", "-m", "Foo/Bar"], Some(&msg(2)));
    d.doveadm(
        user,
        &["flags", "add", "\\Seen", "mailbox", "Foo/Bar", "uid", "1"],
        None,
    );

    let s = store(&d.location(":LAYOUT=fs"));
    let u = s.user(&info(user)).await.unwrap();
    assert_eq!(u.separator(), '/');
    let names: Vec<String> = u
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&"Foo/Bar".to_string()), "{names:?}");
    assert_eq!(u.open("INBOX").await.unwrap().view().uids(), vec![1]);
    let fb = u.open("Foo/Bar").await.unwrap();
    let v = fb.view();
    assert_eq!(v.uids(), vec![1]);
    assert_eq!(v.by_uid(1).unwrap().flags, Flags::SEEN);
    assert_eq!(fb.read_message(1).await.unwrap(), msg(2));

    u.create("Work/2024").await.unwrap();
    let w = u.open("Work/2024").await.unwrap();
    w.append(
        msg(3),
        AppendOptions {
            flags: Flags::FLAGGED,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    d.chown_all();
    let lists = d.doveadm(user, &["mailbox", "list"], None);
    assert!(lists.lines().any(|l| l == "Work/2024"), "{lists}");
    let dove = parse_fetch(&d.doveadm(
        user,
        &["fetch", "uid flags", "mailbox", "Work/2024", "all"],
        None,
    ));
    assert_eq!(dove, vec![(1, vec!["\\Flagged".to_string()])]);
}
