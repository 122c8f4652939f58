//! mbsync (isync) two-way sync of a 1,000-message mailbox with folders,
//! flags and a change on each side: both sides converge, nothing is
//! duplicated, and a further sync changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{PASS, USER};

fn write_message(dir: &Path, name: &str, id: &str, subject: &str) {
    let body = format!(
        "From: sender@example.org\r\nTo: {USER}@example.org\r\nSubject: {subject}\r\nMessage-ID: {id}\r\nDate: Mon, 30 Nov 2026 10:00:00 +0000\r\n\r\nBody of {subject}.\r\n{}\r\n",
        "lorem ipsum ".repeat(20)
    );
    std::fs::write(dir.join(name), body).unwrap();
}

fn make_maildir(root: &Path) {
    for d in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
}

/// Files of a local Maildir folder (cur + new).
fn local_files(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for sub in ["cur", "new"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            v.push(e.unwrap().file_name().to_string_lossy().to_string());
        }
    }
    v
}

async fn mbsync(rc: &Path) {
    let rc = rc.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("mbsync")
            .arg("-c")
            .arg(&rc)
            .arg("-a")
            .output()
            .expect("mbsync not found: run scripts/setup-dev (isync)")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "mbsync failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn report(port: u16, actions: &[&str]) -> serde_json::Value {
    let mut args = vec![port.to_string(), USER.to_string(), PASS.to_string()];
    args.extend(actions.iter().map(|s| s.to_string()));
    let out = common::python("mailbox_report.py", &args).await;
    serde_json::from_str(out.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mbsync_two_way_sync_converges() {
    let s = common::start().await;
    let work = tempfile::tempdir().unwrap();
    let local = work.path().join("mail");
    let inbox = local.join("INBOX");
    let archive = local.join("Archive");
    let projects = local.join("Archive").join("Projects");
    make_maildir(&inbox);
    make_maildir(&archive);
    make_maildir(&projects);
    for i in 0..1000 {
        // Every tenth message read, every 50th flagged.
        let mut info = String::new();
        if i % 50 == 0 {
            info.push('F');
        }
        if i % 10 == 0 {
            info.push('S');
        }
        let name = format!("{}.M{i}P1.local:2,{info}", 1_700_000_000 + i);
        write_message(
            &inbox.join("cur"),
            &name,
            &format!("<in{i}@local>"),
            &format!("inbox {i}"),
        );
    }
    for i in 0..20 {
        write_message(
            &archive.join("cur"),
            &format!("1700000000.A{i}.local:2,S"),
            &format!("<ar{i}@local>"),
            &format!("archive {i}"),
        );
    }
    for i in 0..5 {
        write_message(
            &projects.join("new"),
            &format!("1700000000.P{i}.local"),
            &format!("<pr{i}@local>"),
            &format!("project {i}"),
        );
    }
    let rc = work.path().join("mbsyncrc");
    std::fs::write(
        &rc,
        format!(
            "IMAPAccount yarilo\nHost 127.0.0.1\nPort {port}\nUser {USER}\nPass {PASS}\nSSLType None\nAuthMechs LOGIN\n\n\
             IMAPStore remote\nAccount yarilo\n\n\
             MaildirStore local\nPath {path}/\nInbox {path}/INBOX\nSubFolders Verbatim\n\n\
             Channel sync\nFar :remote:\nNear :local:\nPatterns *\nCreate Both\nExpunge Both\nSyncState *\n",
            port = s.addr.port(),
            path = local.display()
        ),
    )
    .unwrap();

    // First sync: everything goes up.
    mbsync(&rc).await;
    let r = report(s.addr.port(), &[]).await;
    assert_eq!(r["INBOX"]["count"], 1000, "{r}");
    assert_eq!(r["Archive"]["count"], 20, "{r}");
    assert_eq!(r["Archive/Projects"]["count"], 5, "{r}");
    let flags = &r["INBOX"]["flags"];
    assert!(
        flags["<in50@local>"].to_string().contains("\\\\Flagged"),
        "{flags}"
    );
    assert!(
        flags["<in10@local>"].to_string().contains("\\\\Seen"),
        "{flags}"
    );

    // A change on each side: the server flags one message and gets a new
    // one; locally a message is marked read and a new one arrives.
    report(
        s.addr.port(),
        &[
            "--flag",
            "INBOX",
            "<in7@local>",
            "\\Flagged",
            "--append",
            "INBOX",
            "<server-new@remote>",
        ],
    )
    .await;
    let cur = inbox.join("cur");
    let seven_seen = local_files(&inbox)
        .into_iter()
        .find(|f| {
            std::fs::read_to_string(cur.join(f))
                .map(|t| t.contains("<in3@local>"))
                .unwrap_or(false)
        })
        .expect("local copy of message 3");
    let renamed = if seven_seen.contains(":2,") {
        format!("{seven_seen}S")
    } else {
        format!("{seven_seen}:2,S")
    };
    std::fs::rename(cur.join(&seven_seen), cur.join(&renamed)).unwrap();
    write_message(
        &inbox.join("new"),
        "1700009999.NEW.local",
        "<local-new@local>",
        "local new",
    );

    mbsync(&rc).await;
    let r = report(s.addr.port(), &[]).await;
    assert_eq!(r["INBOX"]["count"], 1002, "{r}");
    assert_eq!(r["INBOX"]["duplicates"], serde_json::json!([]), "{r}");
    assert!(r["INBOX"]["flags"]["<in3@local>"]
        .to_string()
        .contains("\\\\Seen"));
    assert_eq!(local_files(&inbox).len(), 1002);
    let flagged_locally = local_files(&inbox).into_iter().any(|f| {
        f.rsplit_once(":2,")
            .is_some_and(|(_, info)| info.contains('F'))
            && std::fs::read_to_string(
                inbox
                    .join(if inbox.join("cur").join(&f).exists() {
                        "cur"
                    } else {
                        "new"
                    })
                    .join(&f),
            )
            .map(|t| t.contains("<in7@local>"))
            .unwrap_or(false)
    });
    assert!(
        flagged_locally,
        "the server's \\Flagged did not reach the local copy"
    );

    // Converged: another sync changes nothing on either side.
    mbsync(&rc).await;
    let again = report(s.addr.port(), &[]).await;
    assert_eq!(again, r);
    assert_eq!(local_files(&inbox).len(), 1002);
}
