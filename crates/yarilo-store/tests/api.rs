//! The store API end to end on a temp Maildir (no Dovecot needed).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::sync::Arc;

use yarilo_locks::{EventBus, MemoryEventBus, MemoryLocker};
use yarilo_store::{
    AppendOptions, FlagOp, Flags, SpecialUse, Store, StoreSettings, UserInfo, UserStore,
};

fn store(location: &str) -> (Store, Arc<MemoryEventBus>) {
    let bus = Arc::new(MemoryEventBus::default());
    let s = Store::new(
        StoreSettings::new(location),
        Arc::new(MemoryLocker::new()),
        bus.clone(),
    )
    .unwrap();
    (s, bus)
}

async fn user(s: &Store) -> UserStore {
    s.user(&UserInfo {
        user: "alice@example.org".into(),
        home: String::new(),
    })
    .await
    .unwrap()
}

fn msg(n: u32) -> Vec<u8> {
    format!("From: a@example.org\r\nSubject: m{n}\r\n\r\nbody {n}\r\n").into_bytes()
}

#[tokio::test]
async fn append_flag_expunge_and_modseq_history() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%d/%n", dir.path().display());
    let (s, bus) = store(&loc);
    let u = user(&s).await;
    let mb = u.open("INBOX").await.unwrap();
    let mut events = bus.subscribe();
    let v0 = mb.view();
    assert_eq!(v0.len(), 0);
    assert!(v0.uidvalidity() > 0);
    let uid1 = mb.append(msg(1), AppendOptions::default()).await.unwrap();
    let uid2 = mb
        .append(
            msg(2),
            AppendOptions {
                flags: Flags::SEEN,
                keywords: vec!["$Label1".into()],
                internal_date: Some(1_000_000_000),
            },
        )
        .await
        .unwrap();
    assert_eq!((uid1, uid2), (1, 2));
    let ev = events.recv().await.unwrap();
    assert_eq!(ev.kind, "append");
    assert_eq!(ev.resource, "mbox:alice@example.org:INBOX");
    let v = mb.view();
    assert_eq!(v.len(), 2);
    assert_eq!(v.uidnext(), 3);
    let info = v.info(v.by_uid(2).unwrap());
    assert_eq!(info.flags, Flags::SEEN);
    assert_eq!(info.keywords, vec!["$Label1"]);
    assert_eq!(info.internal_date, 1_000_000_000);
    assert_eq!(info.size, msg(2).len() as u64);
    let before = v.highest_modseq();

    let r = mb
        .store_flags(&[1, 2], FlagOp::Add, Flags::FLAGGED, &[], None)
        .await
        .unwrap();
    assert_eq!(r.changed, vec![1, 2]);
    assert!(r.modseq > before);
    // UNCHANGEDSINCE below the current modseq: refused, reported.
    let r2 = mb
        .store_flags(&[1], FlagOp::Remove, Flags::FLAGGED, &[], Some(before))
        .await
        .unwrap();
    assert_eq!(r2.modified, vec![1]);
    let v = mb.view();
    assert_eq!(v.changed_since(before).len(), 2);
    assert!(v.by_uid(1).unwrap().flags.contains(Flags::FLAGGED));

    let mid = v.highest_modseq();
    assert_eq!(mb.expunge(&[1]).await.unwrap(), vec![1]);
    let v = mb.view();
    assert_eq!(v.len(), 1);
    assert_eq!(v.expunged_since(mid), Some(vec![1]));
    assert_eq!(v.expunged_since(v.highest_modseq()), Some(vec![]));
    assert_eq!(mb.read_message(2).await.unwrap(), msg(2));
    assert_eq!(
        mb.read_header(2).await.unwrap(),
        b"From: a@example.org\r\nSubject: m2\r\n\r\n".to_vec()
    );
    assert!(mb.read_message(1).await.is_err());

    // A new process (fresh Store) sees the same state from the index.
    let (s2, _) = store(&loc);
    let mb2 = user(&s2).await.open("inbox").await.unwrap();
    let v2 = mb2.view();
    assert_eq!(v2.uids(), vec![2]);
    assert_eq!(v2.highest_modseq(), v.highest_modseq());
    assert_eq!(v2.uidnext(), 3);
    assert_eq!(v2.expunged_since(mid), Some(vec![1]));
}

#[tokio::test]
async fn lost_or_damaged_index_is_rebuilt_without_renumbering() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%n", dir.path().display());
    let (s, _) = store(&loc);
    let mb = user(&s).await.open("INBOX").await.unwrap();
    for i in 0..5 {
        mb.append(msg(i), AppendOptions::default()).await.unwrap();
    }
    mb.expunge(&[2]).await.unwrap();
    mb.store_flags(&[4], FlagOp::Add, Flags::ANSWERED, &["work".into()], None)
        .await
        .unwrap();
    let before = mb.view();
    let root = dir.path().join("alice@example.org");
    let root = if root.exists() {
        root
    } else {
        dir.path().join("alice")
    };
    for damage in [0, 1] {
        if damage == 0 {
            let _ = std::fs::remove_file(root.join("yarilo-index"));
            let _ = std::fs::remove_file(root.join("yarilo-index.log"));
        } else {
            std::fs::write(root.join("yarilo-index"), b"garbage").unwrap();
        }
        let (s2, _) = store(&loc);
        let v = user(&s2).await.open("INBOX").await.unwrap().view();
        assert_eq!(v.uids(), before.uids());
        assert_eq!(v.uidvalidity(), before.uidvalidity());
        assert_eq!(v.uidnext(), before.uidnext());
        assert!(v.highest_modseq() >= before.highest_modseq());
        let r = v.by_uid(4).unwrap();
        assert!(r.flags.contains(Flags::ANSWERED));
        assert_eq!(v.info(r).keywords, vec!["work"]);
        // History before the rebuild is unknown, and says so.
        assert_eq!(v.expunged_since(1), None);
    }
}

#[tokio::test]
async fn mail_dropped_into_new_is_picked_up_by_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%n", dir.path().display());
    let (s, _) = store(&loc);
    let mb = user(&s).await.open("INBOX").await.unwrap();
    mb.append(msg(1), AppendOptions::default()).await.unwrap();
    let new = mb.dir().join("new").join("1700000000.M1P1.mta,S=10:2,");
    std::fs::write(&new, b"Subject: x\n\nhello\n").unwrap();
    let v = mb.refresh().await.unwrap();
    assert_eq!(v.uids(), vec![1, 2]);
    assert_eq!(v.by_uid(2).unwrap().vsize, 18 + 3);
    assert_eq!(mb.read_message(2).await.unwrap(), b"Subject: x\n\nhello\n");
    // A flag change done "by another program" (rename in cur/).
    let rec = v.by_uid(1).unwrap().clone();
    let from = v.path_of(&rec);
    let base = yarilo_store::filename::base_of(&rec.filename).to_string();
    std::fs::rename(&from, mb.dir().join("cur").join(format!("{base}:2,ST"))).unwrap();
    let v = mb.refresh().await.unwrap();
    let r = v.by_uid(1).unwrap();
    assert_eq!(r.flags, Flags::SEEN.union(Flags::DELETED));
    assert!(r.modseq > rec.modseq);
}

#[tokio::test]
async fn mailbox_management_and_special_use() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%n", dir.path().display());
    let (s, _) = store(&loc);
    let u = user(&s).await;
    let list = u.list().await.unwrap();
    let names: Vec<_> = list.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, vec!["Drafts", "INBOX", "Junk", "Sent", "Trash"]);
    let sent = list.iter().find(|e| e.name == "Sent").unwrap();
    assert_eq!(sent.special_use, Some(SpecialUse::Sent));
    assert!(sent.subscribed);
    assert!(dir.path().join("alice/.Sent/maildirfolder").exists());

    u.create("Work").await.unwrap();
    u.create("Work.Ünïcode & more").await.unwrap();
    assert!(dir
        .path()
        .join("alice/.Work.&ANw-n&AO8-code &- more/cur")
        .is_dir());
    assert!(u.create("Work").await.is_err());
    u.subscribe("Work", true).await.unwrap();
    let w = u.open("Work.Ünïcode & more").await.unwrap();
    w.append(msg(1), AppendOptions::default()).await.unwrap();

    u.rename("Work", "Projects").await.unwrap();
    let names: Vec<_> = u
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&"Projects".to_string()));
    assert!(names.contains(&"Projects.Ünïcode & more".to_string()));
    assert!(!names.contains(&"Work".to_string()));
    assert!(u
        .subscriptions()
        .await
        .unwrap()
        .contains(&"Projects".to_string()));
    let moved = u.open("Projects.Ünïcode & more").await.unwrap();
    assert_eq!(moved.view().len(), 1);

    // COPY and MOVE keep flags; quota counts everything.
    let inbox = u.open("INBOX").await.unwrap();
    let uid = inbox
        .append(
            msg(2),
            AppendOptions {
                flags: Flags::SEEN,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let pairs = inbox.copy_to(&[uid], &moved).await.unwrap();
    assert_eq!(pairs, vec![(uid, 2)]);
    assert_eq!(moved.view().by_uid(2).unwrap().flags, Flags::SEEN);
    let trash = u.open("Trash").await.unwrap();
    inbox.move_to(&[uid], &trash).await.unwrap();
    assert_eq!(inbox.view().len(), 0);
    assert_eq!(trash.view().len(), 1);
    let q = u.quota().await.unwrap();
    assert_eq!(q.messages, 3);
    assert_eq!(q.bytes, (msg(1).len() + 2 * msg(2).len()) as u64);

    u.delete("Projects").await.unwrap();
    let names: Vec<_> = u
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(!names.contains(&"Projects".to_string()));
    assert!(names.contains(&"Projects.Ünïcode & more".to_string()));
    assert!(u.delete("INBOX").await.is_err());
    assert!(u.open("Nope").await.is_err());
    assert!(u.create("a/b").await.is_err());
}

#[tokio::test]
async fn delivery_into_new_is_found_by_scanning_new_only() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%n", dir.path().display());
    let mut settings = StoreSettings::new(&loc);
    settings.core.very_dirty_syncs = true;
    let s = Store::new(
        settings,
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap();
    let mb = user(&s).await.open("INBOX").await.unwrap();
    mb.append(msg(1), AppendOptions::default()).await.unwrap();
    for i in 0..3 {
        let p = mb.dir().join("new").join(format!("1700000000.M{i}P9.mta"));
        std::fs::write(p, msg(10 + i)).unwrap();
    }
    let v = mb.refresh().await.unwrap();
    assert_eq!(v.uids(), vec![1, 2, 3, 4]);
    assert!(v.by_uid(2).unwrap().in_new);
    assert_eq!(mb.read_message(4).await.unwrap(), msg(12));
    // Flagging moves it to cur/ with its info, as Dovecot would.
    mb.store_flags(&[2], FlagOp::Add, Flags::SEEN, &[], None)
        .await
        .unwrap();
    let v = mb.view();
    let r = v.by_uid(2).unwrap();
    assert!(!r.in_new && r.filename.ends_with(":2,S"));
    // Another process sees the same through the index log.
    let (s2, _) = store(&loc);
    let v2 = user(&s2).await.open("INBOX").await.unwrap().view();
    assert_eq!(v2.uids(), v.uids());
    assert_eq!(v2.highest_modseq(), v.highest_modseq());
}

#[tokio::test]
async fn torn_uid_list_line_and_stale_dotlock_from_a_crash_are_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%n", dir.path().display());
    let (s, _) = store(&loc);
    let mb = user(&s).await.open("INBOX").await.unwrap();
    mb.append(msg(1), AppendOptions::default()).await.unwrap();
    let maildir = mb.dir();
    // A writer died mid-line, holding the lock (pid that cannot exist).
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(maildir.join("dovecot-uidlist"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"2 :half-writ").unwrap();
    std::fs::write(
        maildir.join("dovecot-uidlist.lock"),
        format!("{}:{}", u32::MAX - 7, yarilo_store::dotlock::hostname()),
    )
    .unwrap();
    let (s2, _) = store(&loc);
    let mb2 = user(&s2).await.open("INBOX").await.unwrap();
    let uid = mb2.append(msg(2), AppendOptions::default()).await.unwrap();
    assert_eq!(uid, 2);
    let raw = std::fs::read_to_string(maildir.join("dovecot-uidlist")).unwrap();
    assert!(!raw.contains("half-writ"), "{raw}");
    let (list, used) = yarilo_store::uidlist::UidList::parse(raw.as_bytes()).unwrap();
    assert_eq!(used, raw.len());
    assert_eq!(
        list.records.iter().map(|r| r.uid).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(!maildir.join("dovecot-uidlist.lock").exists());
}
