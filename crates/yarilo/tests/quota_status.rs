#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `yarilo quota-status` side by side with Debian's Dovecot 2.3
//! `quota-status -p postfix`: the same users (one passwd-file, the same
//! `quota_rule`s), the same messages in each server's own copy of the
//! mailboxes, the same requests on one persistent connection each, and the
//! replies compared byte for byte. yarilo runs as in production: `yarilo
//! auth`, `yarilo locks` on a real redis-server, `yarilo quota-status`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Process, BIN};

const DOVECOT: &str = "/usr/sbin/dovecot";

const USERS: &str = "\
roomy@example.org:{PLAIN}pw::::::userdb_quota_rule=*:storage=10M
full@example.org:{PLAIN}pw::::::userdb_quota_rule=*:storage=1K
counted@example.org:{PLAIN}pw::::::userdb_quota_rule=*:messages=1
free@example.org:{PLAIN}pw::::::
";

/// The replies both servers are configured with beyond their defaults
/// (success, nouser and overquota keep Dovecot's built-in ones).
const TOOLARGE: &str = "552 5.3.4 Message is larger than the mailbox can ever hold";

/// (user, message sizes) put into both servers' INBOX.
const MAIL: &[(&str, &[usize])] = &[
    ("roomy@example.org", &[500]),
    ("full@example.org", &[700, 700]),
    ("counted@example.org", &[300]),
];

/// The requests, in order on one connection.
fn requests() -> Vec<Vec<u8>> {
    let rcpt = |r: &str, size: &str| {
        format!(
            "request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n\
             client_address=192.0.2.1\nsender=s@example.net\nrecipient={r}\nsize={size}\n\n"
        )
        .into_bytes()
    };
    vec![
        // under quota, with and without a detail, brackets, no size
        rcpt("roomy@example.org", "100"),
        rcpt("roomy+list@example.org", "100"),
        rcpt("<roomy@example.org>", ""),
        rcpt("free@example.org", "999999999"),
        // over quota: bytes, then messages
        rcpt("full@example.org", "10"),
        rcpt("counted@example.org", "1"),
        // too large: the message alone exceeds the limit
        rcpt("roomy@example.org", "20000000"),
        // unknown users, a bad but parsable local part
        rcpt("nobody@example.org", "10"),
        rcpt("a b@@example.org", "10"),
        // states that are not RCPT
        b"protocol_state=DATA\nrecipient=roomy@example.org\n\n".to_vec(),
        b"protocol_state=END-OF-MESSAGE\nsize=10\n\n".to_vec(),
        b"protocol_state=END-OF-MESSAGE\nrecipient=full@example.org\nsize=10\n\n".to_vec(),
        // unparsable recipients and garbage
        rcpt("roomy@", "1"),
        rcpt("<>", "1"),
        rcpt("roomy@exa mple.org", "1"),
        b"garbage without equals\n\x01\x02\n\n".to_vec(),
        b"\n".to_vec(),
        b"recipient=\nrecipient=roomy@example.org\n\n".to_vec(),
        b"protocol_state=RCPT\r\nrecipient=full@example.org\r\nsize=junk\r\n\r\n".to_vec(),
    ]
}

/// Sends every request on one connection; the reply to each (up to its
/// empty line).
fn ask(addr: &str, reqs: &[Vec<u8>]) -> Vec<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    for r in reqs {
        s.write_all(r).unwrap();
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !reply.ends_with(b"\n\n") {
            assert_eq!(s.read(&mut byte).unwrap(), 1, "EOF from {addr}");
            reply.push(byte[0]);
        }
        out.push(String::from_utf8(reply).unwrap());
    }
    out
}

fn put_mail(root: &Path) {
    for (user, sizes) in MAIL {
        let cur = root.join(user).join("cur");
        std::fs::create_dir_all(root.join(user).join("new")).unwrap();
        std::fs::create_dir_all(root.join(user).join("tmp")).unwrap();
        std::fs::create_dir_all(&cur).unwrap();
        for (i, size) in sizes.iter().enumerate() {
            let head = format!("Subject: m{i}\r\n\r\n");
            let body = "x".repeat(size - head.len());
            std::fs::write(
                cur.join(format!("170000000{i}.M{i}P1.test:2,S")),
                format!("{head}{body}"),
            )
            .unwrap();
        }
    }
}

/// Dovecot's master in the foreground with only the quota-status service;
/// killed (by its own pid) when dropped.
struct Dovecot(Child);

impl Drop for Dovecot {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn id(flag: &str) -> String {
    let out = Command::new("id").arg(flag).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn start_dovecot(d: &Path, port: u16) -> Dovecot {
    let root = id("-u") == "0";
    // As root, mail is accessed as `mail` (Dovecot refuses uid 0); as
    // anyone else, as that user, who also runs the internal processes.
    let (uid, gid) = if root {
        ("mail".to_string(), "mail".to_string())
    } else {
        (id("-u"), id("-g"))
    };
    let users = if root {
        String::new()
    } else {
        let me = id("-un");
        format!("default_internal_user = {me}\ndefault_login_user = {me}\n")
    };
    for sub in ["run", "state"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let conf = format!(
        "base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = {d}/dovecot.log\n\
         protocols =\nlisten = 127.0.0.1\nssl = no\n{users}\
         mail_location = maildir:{d}/dmail/%u\nfirst_valid_uid = 1\n\
         mail_uid = {uid}\nmail_gid = {gid}\nmail_plugins = quota\n\
         passdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
         userdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
         plugin {{\n  quota = count:User quota\n  quota_vsizes = yes\n\
           quota_status_toolarge = {TOOLARGE}\n}}\n\
         service quota-status {{\n  executable = quota-status -p postfix\n\
           inet_listener {{\n    address = 127.0.0.1\n    port = {port}\n  }}\n}}\n",
        d = d.display()
    );
    let path = d.join("dovecot.conf");
    std::fs::write(&path, conf).unwrap();
    if root {
        let status = Command::new("chown")
            .args(["-R", "mail:mail"])
            .arg(d.join("dmail"))
            .status()
            .unwrap();
        assert!(status.success());
    }
    let child = Command::new(DOVECOT)
        .arg("-F")
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .spawn()
        .expect("Debian's dovecot-core is required: run scripts/setup-dev");
    let dovecot = Dovecot(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "dovecot never listened: {}",
            std::fs::read_to_string(d.join("dovecot.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    dovecot
}

fn component(d: &Path, name: &str, extra: &str) -> Process {
    let path = d.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "general:\n  data_dir: {d}\n  hostname: test.invalid\n\
             store:\n  mail_location: maildir:{d}/ymail/%u\n{extra}",
            d = d.display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([name, "--config", path.to_str().unwrap()]);
    Process::start_logged(cmd, &d.join(format!("{name}.log")))
}

#[test]
fn replies_are_byte_identical_to_dovecots_quota_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), USERS).unwrap();
    put_mail(&d.join("dmail"));
    put_mail(&d.join("ymail"));

    let dovecot_port = free_port();
    let _dovecot = start_dovecot(d, dovecot_port);

    let redis = yarilo_testkit::RedisServer::start();
    let locks_addr = format!("127.0.0.1:{}", free_port());
    let locks_client = format!("locks_client:\n  mode: remote\n  endpoints: [{locks_addr}]\n");
    let mut auth = component(d, "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    let locks = component(
        d,
        "locks",
        &format!(
            "locks_service:\n  mode: remote\n  listen: {locks_addr}\n  redis: {}\n",
            redis.url()
        ),
    );
    assert!(locks.becomes_ready(), "locks ready");
    let mut qs = component(
        d,
        "quota-status",
        &format!(
            "auth_client:\n  address: {auth_addr}\n{locks_client}\
             quota_status:\n  listen: 127.0.0.1:0\n  quota_status_toolarge: {TOOLARGE}\n"
        ),
    );
    let qs_addr = qs.announced("quota-status ").trim().to_string();
    assert!(qs.becomes_ready(), "quota-status ready");

    let reqs = requests();
    let theirs = ask(&format!("127.0.0.1:{dovecot_port}"), &reqs);
    let ours = ask(&qs_addr, &reqs);
    for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(
            b,
            a,
            "request {i} {:?}: yarilo (left) differs from Dovecot (right)",
            String::from_utf8_lossy(&reqs[i])
        );
    }
    // The comparison is only worth something if every kind of answer was
    // in it: pin Dovecot's replies too.
    let over = "action=554 5.2.2 Quota exceeded (mailbox for user is full)\n\n";
    let large = format!("action={TOOLARGE}\n\n");
    let expected: Vec<&str> = vec![
        "action=OK\n\n",
        "action=OK\n\n",
        "action=OK\n\n",
        "action=OK\n\n",
        over,
        over,
        &large,
        "action=REJECT Unknown user\n\n",
        "action=REJECT Unknown user\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        "action=DUNNO\n\n",
        over,
    ];
    assert_eq!(theirs, expected);

    // A line over quota_status.max_line_length (8192) closes the
    // connection: there is no error reply in the protocol.
    let mut s = TcpStream::connect(&qs_addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut long = b"recipient=".to_vec();
    long.extend(std::iter::repeat_n(b'a', 9000));
    let _ = s.write_all(&long);
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert_eq!(rest, b"", "no reply, just EOF");
    assert_eq!(
        qs.metric("yarilo_quota_status_connections_total{result=\"line_too_long\"}"),
        1.0
    );

    for (result, n) in [
        ("ok", 4.0),
        ("overquota", 3.0),
        ("toolarge", 1.0),
        ("nouser", 2.0),
        ("dunno", 9.0),
    ] {
        assert_eq!(
            qs.metric(&format!(
                "yarilo_quota_status_requests_total{{result=\"{result}\"}}"
            )),
            n,
            "{result}"
        );
    }
}
