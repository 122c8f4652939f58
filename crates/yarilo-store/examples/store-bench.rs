//! Store benchmark: `cargo run --release -p yarilo-store --example store-bench [N ...]`
//! (default N = 10000 100000). Set `BENCH_DOVECOT=0` to skip the Dovecot
//! side (needs `doveadm`, see scripts/setup-dev).
//!
//! For each size it fills a Maildir the way an MTA or Dovecot leaves it
//! (files in `cur/` plus `dovecot-uidlist`), then measures yarilo:
//! first open (index built from the Maildir), open cold (a new process
//! with the index on disk), open warm (already open in this process),
//! detect one new message dropped into `new/`, flag one message, and fetch
//! the header sections of the last 50. Then Dovecot (`doveadm`, one
//! process per command, so each figure includes process start and
//! Dovecot's own index open) on a copy of the same Maildir.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark tool

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_store::{FlagOp, Flags, Store, StoreSettings, UserInfo};

fn fill(dir: &Path, n: u32) {
    for d in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let mut uidlist = String::from("3 V1700000000 N1\n");
    for i in 1..=n {
        let body = format!(
            "Return-Path: <a{i}@example.org>\nFrom: Sender {i} <a{i}@example.org>\nTo: bench@example.org\n\
             Subject: benchmark message number {i}\nDate: Tue, 14 Nov 2023 12:00:00 +0000\n\
             Message-ID: <{i}@bench.example.org>\nContent-Type: text/plain; charset=utf-8\n\n{}\n",
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n".repeat(16)
        );
        let size = body.len();
        let vsize = size + body.matches('\n').count();
        let base = format!("1700000000.M{i}P1.bench,S={size},W={vsize}");
        let name = format!("{base}:2,{}", if i % 3 == 0 { "S" } else { "" });
        std::fs::write(dir.join("cur").join(&name), body).unwrap();
        uidlist.push_str(&format!("{i} :{base}\n"));
    }
    std::fs::write(dir.join("dovecot-uidlist"), uidlist).unwrap();
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn store(loc: &str) -> Store {
    Store::new(
        StoreSettings::new(loc),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap()
}

async fn bench_yarilo(root: &Path, n: u32) -> Vec<(String, Duration)> {
    let loc = format!("maildir:{}/%u", root.display());
    let user = UserInfo {
        user: "bench".into(),
        home: String::new(),
    };
    let mut out = Vec::new();

    let t = Instant::now();
    let s1 = store(&loc);
    let u1 = s1.user(&user).await.unwrap();
    out.push((
        "user init (autocreates 4 special-use mailboxes)".to_string(),
        t.elapsed(),
    ));
    let t = Instant::now();
    let mb = u1.open("INBOX").await.unwrap();
    out.push(("first open (builds index)".to_string(), t.elapsed()));
    assert_eq!(mb.view().len(), n as usize);

    // Let directory timestamps age past the 1 s trust window, as for any
    // mailbox that is not being written this very second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let _ = mb.refresh().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let t = Instant::now();
    let s2 = store(&loc);
    let u2 = s2.user(&user).await.unwrap();
    let mb2 = u2.open("INBOX").await.unwrap();
    out.push((
        "open cold (new process, index on disk)".to_string(),
        t.elapsed(),
    ));
    assert_eq!(mb2.view().len(), n as usize);

    let t = Instant::now();
    let mb3 = u2.open("INBOX").await.unwrap();
    out.push((
        "open warm (already open in process)".to_string(),
        t.elapsed(),
    ));

    let t = Instant::now();
    let v = mb3.refresh().await.unwrap();
    out.push(("refresh, nothing changed".to_string(), t.elapsed()));
    assert_eq!(v.len(), n as usize);

    // BENCH_SETTLE=1 steps outside the 1 s window in which directory mtimes
    // are not trusted (the same rule as Dovecot's), before each step: the
    // steady-state cost. Without it, a step right after a write pays one
    // rescan of cur/, which grows with the mailbox.
    let settle = std::env::var("BENCH_SETTLE").is_ok_and(|v| v != "0");
    let settle = || async move {
        if settle {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
    };
    // Single shots of fsync-bound steps are noisy: each is repeated and
    // the median reported.
    const REPS: usize = 9;
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let dir = mb3.dir();
    let mut times = Vec::new();
    let mut v = mb3.view();
    for i in 0..REPS {
        settle().await;
        std::fs::write(
            dir.join("new")
                .join(format!("18000000{i:02}.M1P2.mta,S=30")),
            b"Subject: new\n\nhello new mail\n",
        )
        .unwrap();
        let t = Instant::now();
        v = mb3.refresh().await.unwrap();
        times.push(t.elapsed());
        assert_eq!(v.len(), n as usize + 1 + i);
    }
    out.push(("detect one new message (median)".to_string(), median(times)));

    let last = v.by_seq(v.len() as u32 - 1).unwrap().uid;
    let mut times = Vec::new();
    for i in 0..REPS {
        settle().await;
        let op = if i % 2 == 0 {
            FlagOp::Add
        } else {
            FlagOp::Remove
        };
        let t = Instant::now();
        mb3.store_flags(&[last], op, Flags::FLAGGED, &[], None)
            .await
            .unwrap();
        times.push(t.elapsed());
    }
    out.push(("flag one message (median)".to_string(), median(times)));

    let uids: Vec<u32> = v.records().rev().take(50).map(|r| r.uid).collect();
    settle().await;
    let t = Instant::now();
    let mut bytes = 0;
    for u in &uids {
        bytes += mb3.read_header(*u).await.unwrap().len();
    }
    out.push(("fetch headers of last 50".to_string(), t.elapsed()));
    assert!(bytes > 50 * 100);

    settle().await;
    let t = Instant::now();
    mb3.append(b"Subject: appended\n\nbody\n".to_vec(), Default::default())
        .await
        .unwrap();
    out.push(("append one message (durable)".to_string(), t.elapsed()));

    // The first refresh after our own writes must rescan cur/ once
    // (directory mtime inside the 1 s window; Dovecot does the same).
    let t = Instant::now();
    mb3.refresh().await.unwrap();
    out.push((
        "refresh right after own write (rescan)".to_string(),
        t.elapsed(),
    ));

    // On a filesystem with sub-second timestamps the distrust window is
    // 100 ms: past it, a refresh after our own write is a few stats again.
    mb3.append(
        b"Subject: appended 2\n\nbody\n".to_vec(),
        Default::default(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let t = Instant::now();
    mb3.refresh().await.unwrap();
    out.push(("refresh 150 ms after own write".to_string(), t.elapsed()));
    out
}

fn doveadm(conf: &Path, home: &Path, args: &[&str], stdin: Option<&[u8]>) -> Duration {
    let t = Instant::now();
    let mut c = Command::new("doveadm");
    c.arg("-c")
        .arg(conf)
        .args(args)
        .env("USER", "bench")
        .env("HOME", home);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(d) = stdin {
        child.stdin.take().unwrap().write_all(d).unwrap();
    }
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "doveadm {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    t.elapsed()
}

fn bench_dovecot(base: &Path, src: &Path, n: u32) -> Vec<(String, Duration)> {
    let root = base.join("dovecot");
    std::fs::create_dir_all(root.join("mail")).unwrap();
    for d in ["", "mail", "run", "state", "home"] {
        let p = root.join(d);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(root.join("mail/bench"))
        .status()
        .unwrap();
    assert!(st.success());
    for f in ["yarilo-index", "yarilo-index.log", "yarilo-cache"] {
        let _ = std::fs::remove_file(root.join("mail/bench").join(f));
    }
    let root_is_root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    let (uid, gid) = if root_is_root { (65534, 65534) } else { (0, 0) };
    if root_is_root {
        Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(root.join("mail"))
            .status()
            .unwrap();
    }
    let r = root.display();
    let uid_line = if root_is_root {
        format!("mail_uid = {uid}\nmail_gid = {gid}\n")
    } else {
        String::new()
    };
    let conf = root.join("dovecot.conf");
    std::fs::write(
        &conf,
        format!(
            "base_dir = {r}/run\nstate_dir = {r}/state\nlog_path = {r}/dovecot.log\n\
             mail_location = maildir:{r}/mail/%u\n{uid_line}first_valid_uid = 0\nfirst_valid_gid = 0\nssl = no\n"
        ),
    )
    .unwrap();
    let home = root.join("home");
    let mut out = Vec::new();
    let q = |a: &[&str]| doveadm(&conf, &home, a, None);
    out.push(("doveadm: process start (help)".into(), {
        let t = Instant::now();
        let _ = Command::new("doveadm")
            .arg("-c")
            .arg(&conf)
            .arg("help")
            .output();
        t.elapsed()
    }));
    out.push((
        "doveadm: first open (builds index), status".into(),
        q(&["mailbox", "status", "messages", "INBOX"]),
    ));
    std::thread::sleep(Duration::from_millis(1100));
    out.push((
        "doveadm: open with index, status".into(),
        q(&["mailbox", "status", "messages", "INBOX"]),
    ));
    std::fs::write(
        root.join("mail/bench/new/1800000000.M1P2.mta,S=30"),
        b"Subject: new\n\nhello new mail\n",
    )
    .unwrap();
    out.push((
        "doveadm: detect one new message, status".into(),
        q(&["mailbox", "status", "messages", "INBOX"]),
    ));
    let last = n.to_string();
    out.push((
        "doveadm: flag one message".into(),
        q(&[
            "flags",
            "add",
            "\\Flagged",
            "mailbox",
            "INBOX",
            "uid",
            &last,
        ]),
    ));
    let range = format!("{}:{}", n.saturating_sub(48), n + 1);
    out.push((
        "doveadm: fetch headers of last 50".into(),
        q(&["fetch", "hdr", "mailbox", "INBOX", "uid", &range]),
    ));
    out.push((
        "doveadm: append one message".into(),
        doveadm(
            &conf,
            &home,
            &["save"],
            Some(b"Subject: appended\n\nbody\n"),
        ),
    ));
    out
}

#[tokio::main]
async fn main() {
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10_000, 100_000]
    } else {
        sizes
    };
    let with_dovecot = std::env::var("BENCH_DOVECOT")
        .map(|v| v != "0")
        .unwrap_or(true);
    for n in sizes {
        let tmp = tempfile::tempdir().unwrap();
        let maildir = tmp.path().join("yarilo/bench");
        let t = Instant::now();
        fill(&maildir, n);
        println!("== {n} messages (filled in {})", ms(t.elapsed()));
        let pristine = tmp.path().join("pristine");
        Command::new("cp")
            .arg("-a")
            .arg(&maildir)
            .arg(&pristine)
            .status()
            .unwrap();
        for (what, d) in bench_yarilo(&tmp.path().join("yarilo"), n).await {
            println!("{n:>7}  yarilo   {what:<45} {}", ms(d));
        }
        if with_dovecot {
            for (what, d) in bench_dovecot(tmp.path(), &pristine, n) {
                println!("{n:>7}  dovecot  {what:<45} {}", ms(d));
            }
        }
    }
}
