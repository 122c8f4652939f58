#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Dovecot 2.3 (Debian's `/usr/lib/dovecot/pop3`, run pre-authenticated
//! on the same Maildir) and yarilo answer the same POP3 transcript —
//! UIDL above all, so users moved between the two download nothing twice.
//! Both directions: a Maildir yarilo wrote, and one Dovecot indexed first.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{is_root, Harness, LineClient, Options};

const DOVECOT_POP3: &str = "/usr/lib/dovecot/pop3";

/// Runs Dovecot's pop3 process as a logged-in user on `maildir` with
/// `commands` on stdin; returns everything it wrote.
async fn dovecot(work: &Path, maildir: &Path, uidl_format: &str, commands: &str) -> String {
    assert!(
        Path::new(DOVECOT_POP3).exists(),
        "{DOVECOT_POP3} missing: install dovecot-pop3d with scripts/setup-dev"
    );
    // Dovecot refuses to access mail as root: run as nobody then.
    let (uid, gid) = if is_root() {
        common::chown_recursive(maildir, "65534:65534");
        ("65534".to_string(), "65534".to_string())
    } else {
        let id = |f: &str| {
            let o = Command::new("id").arg(f).output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        (id("-u"), id("-g"))
    };
    for d in ["run", "state"] {
        std::fs::create_dir_all(work.join(d)).unwrap();
    }
    let conf = work.join("dovecot.conf");
    std::fs::write(
        &conf,
        format!(
            "mail_location = maildir:{maildir}\n\
             pop3_uidl_format = {uidl_format}\n\
             log_path = {work}/dovecot.log\n\
             ssl = no\n\
             base_dir = {work}/run\n\
             state_dir = {work}/state\n\
             mail_uid = {uid}\n\
             mail_gid = {gid}\n\
             first_valid_uid = 0\n\
             first_valid_gid = 0\n",
            maildir = maildir.display(),
            work = work.display(),
        ),
    )
    .unwrap();
    let commands = commands.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new(DOVECOT_POP3)
            .arg("-c")
            .arg(&conf)
            .env_clear()
            .env("USER", "alice")
            .env("HOME", "/nonexistent")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(commands.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.contains("+OK Logging out."),
            "dovecot failed: {stdout}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(conf.with_file_name("dovecot.log")).unwrap_or_default()
        );
        stdout
    })
    .await
    .unwrap()
}

/// yarilo's answer to the same commands, after logging in.
async fn yarilo(h: &Harness, commands: &str) -> String {
    let (mut c, _) = LineClient::connect(h.addr).await;
    c.login().await;
    c.send(commands).await;
    let mut out = String::new();
    while let Some(l) = c.try_line().await {
        out.push_str(&l);
        out.push_str("\r\n");
    }
    out
}

/// World-readable path down to the Maildir, so Dovecot (as nobody) can
/// reach it inside a root-owned temp dir.
fn open_up(h: &Harness) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let mut p = h.maildir();
    std::fs::create_dir_all(&p).unwrap();
    while p.starts_with(h.dir.path()) {
        let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
        if !p.pop() {
            break;
        }
    }
    h.maildir()
}

fn script(n: usize) -> String {
    let mut s = String::from("STAT\r\nUIDL\r\nLIST\r\n");
    for i in 1..=n {
        s.push_str(&format!(
            "UIDL {i}\r\nLIST {i}\r\nRETR {i}\r\nTOP {i} 1\r\n"
        ));
    }
    s.push_str("QUIT\r\n");
    s
}

/// Messages exercising sizes and stuffing: LF and CRLF line ends, lines
/// that start with a dot, no final newline, an empty body.
fn corpus() -> Vec<Vec<u8>> {
    vec![
        common::message("plain", 3),
        b"Subject: crlf\r\n\r\n.dotted\r\nbody\r\n".to_vec(),
        b"Subject: no final newline\n\nlast line".to_vec(),
        b"Subject: header only\n".to_vec(),
        b"Subject: empty body\n\n".to_vec(),
    ]
}

#[tokio::test]
async fn dovecot_reads_a_maildir_yarilo_wrote_and_answers_the_same() {
    let h = Harness::start(Options::default()).await;
    let msgs = corpus();
    let uids = h
        .deliver(&msgs.iter().map(|m| m.as_slice()).collect::<Vec<_>>())
        .await;
    assert_eq!(uids.len(), msgs.len());
    let commands = script(msgs.len());
    let ours = yarilo(&h, &commands).await;
    let maildir = open_up(&h);
    let work = tempfile::tempdir().unwrap();
    let theirs = dovecot(work.path(), &maildir, "%08Xu%08Xv", &commands).await;
    // yarilo's transcript after login equals Dovecot's pre-authenticated one.
    assert_eq!(ours, theirs);
    let uidvalidity = h.inbox().await.view().uidvalidity();
    assert!(
        ours.contains(&format!("+OK 1 {:08x}{uidvalidity:08x}", uids[0])),
        "{ours}"
    );
}

#[tokio::test]
async fn yarilo_reads_a_maildir_dovecot_indexed_and_answers_the_same_for_every_format() {
    for format in [
        "%08Xu%08Xv",
        "%v.%u",
        "%f",
        "%g",
        "%Mf",
        "%08Xv%08Xu",
        "%04u-%Uf",
    ] {
        let h = Harness::start(Options {
            uidl_format: format,
            ..Options::default()
        })
        .await;
        let maildir = open_up(&h);
        for d in ["cur", "new", "tmp"] {
            std::fs::create_dir_all(maildir.join(d)).unwrap();
        }
        // As an MTA delivers: into new/, one with S=/W= in its name, one
        // already seen in cur/.
        std::fs::write(
            maildir.join("new/1700000000.M1P1.mx1"),
            common::message("first", 2),
        )
        .unwrap();
        let second = b"Subject: second\n\nbody\n";
        std::fs::write(
            maildir.join(format!(
                "new/1700000001.M2P2.mx1,S={},W={}",
                second.len(),
                common::crlf(second).len()
            )),
            second,
        )
        .unwrap();
        std::fs::write(
            maildir.join("cur/1700000002.M3P3.mx1:2,S"),
            b"Subject: third\n\n.x\n",
        )
        .unwrap();
        let commands = script(3);
        let work = tempfile::tempdir().unwrap();
        // Dovecot first: it assigns UIDs and writes dovecot-uidlist.
        let theirs = dovecot(work.path(), &maildir, format, &commands).await;
        let ours = yarilo(&h, &commands).await;
        assert_eq!(ours, theirs, "format {format}");
    }
}

#[tokio::test]
async fn a_uidl_saved_in_dovecot_uidlist_wins_in_both() {
    let h = Harness::start(Options::default()).await;
    h.deliver(&[&common::message("a", 1), &common::message("b", 1)])
        .await;
    let maildir = open_up(&h);
    // What pop3_save_uidl or a migration leaves: P<uidl> on record 2.
    let list = maildir.join("dovecot-uidlist");
    let text = std::fs::read_to_string(&list).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let rec = lines
        .iter_mut()
        .find(|l| l.starts_with("2 "))
        .expect("record for uid 2");
    *rec = rec.replacen("2 ", "2 Pmigrated-uidl-2 ", 1);
    // Dovecot rewrites the list by rename (a new inode), never in place.
    let tmp = maildir.join("dovecot-uidlist.tmp");
    std::fs::write(&tmp, lines.join("\n") + "\n").unwrap();
    std::fs::rename(&tmp, &list).unwrap();

    let commands = "UIDL\r\nUIDL 2\r\nQUIT\r\n";
    let ours = yarilo(&h, commands).await;
    assert!(ours.contains("+OK 2 migrated-uidl-2"), "{ours}");
    let work = tempfile::tempdir().unwrap();
    let theirs = dovecot(work.path(), &maildir, "%08Xu%08Xv", commands).await;
    assert_eq!(ours, theirs);
}

#[tokio::test]
async fn a_large_maildir_gets_the_same_uidls_and_sizes_from_both() {
    const N: usize = 2000;
    let h = Harness::start(Options::default()).await;
    let inbox = h.inbox().await;
    let batch: Vec<(Vec<u8>, yarilo_store::AppendOptions)> = (0..N)
        .map(|i| {
            (
                common::message(&format!("m{i}"), i % 50),
                yarilo_store::AppendOptions::default(),
            )
        })
        .collect();
    inbox.append_many(batch).await.unwrap();
    let commands = "STAT\r\nUIDL\r\nLIST\r\nQUIT\r\n";

    let t = std::time::Instant::now();
    let ours = yarilo(&h, commands).await;
    let ours_ms = t.elapsed().as_millis();

    let maildir = open_up(&h);
    let work = tempfile::tempdir().unwrap();
    // First Dovecot run builds its index (sizes from W= in file names).
    let t = std::time::Instant::now();
    let theirs = dovecot(work.path(), &maildir, "%08Xu%08Xv", commands).await;
    let theirs_ms = t.elapsed().as_millis();
    let t = std::time::Instant::now();
    let again = dovecot(work.path(), &maildir, "%08Xu%08Xv", commands).await;
    let again_ms = t.elapsed().as_millis();
    assert_eq!(ours, theirs);
    assert_eq!(theirs, again);
    assert_eq!(
        ours.lines()
            .filter(|l| l.ends_with(&format!("{:08x}", inbox.view().uidvalidity())))
            .count(),
        N
    );
    println!(
        "{N} messages, login+STAT+UIDL+LIST+QUIT: yarilo {ours_ms} ms (incl. login, debug build); \
         dovecot {theirs_ms} ms cold, {again_ms} ms warm (process start, preauth)"
    );

    // Every message retrieved, pipelined: the same bytes from both.
    let mut retr = String::new();
    for i in 1..=N {
        retr.push_str(&format!("RETR {i}\r\n"));
    }
    retr.push_str("QUIT\r\n");
    let t = std::time::Instant::now();
    let ours = yarilo(&h, &retr).await;
    let ours_ms = t.elapsed().as_millis();
    let t = std::time::Instant::now();
    let theirs = dovecot(work.path(), &maildir, "%08Xu%08Xv", &retr).await;
    let theirs_ms = t.elapsed().as_millis();
    assert!(ours == theirs, "RETR transcripts differ");
    println!(
        "{N} x RETR pipelined ({} bytes): yarilo {ours_ms} ms, dovecot {theirs_ms} ms",
        ours.len()
    );
}
