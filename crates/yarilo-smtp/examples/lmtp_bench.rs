//! LMTP delivery benchmark: yarilo and Debian's Dovecot 2.3 LMTP side by
//! side, in one run, on the same machine, both durable (yarilo's store
//! fsyncs every append; Dovecot runs with `mail_fsync = always`).
//!
//! ```sh
//! CARGO_TARGET_DIR=$HOME/.cache/yarilo/target \
//!   cargo run --release -p yarilo-smtp --example lmtp_bench -- [messages] [users] [size]
//! ```
//!
//! For each server and each concurrency (1 and 8 connections) it delivers
//! `messages` messages (default 2000) of `size` bytes (default 4096) to
//! `users` recipients (default 8) round-robin, one recipient per
//! transaction, MAIL+RCPT+DATA pipelined, and prints deliveries per second
//! and the yarilo / Dovecot ratio. Every message is counted on disk after
//! each run. Dovecot is started from a generated config in a temp dir with
//! its own `base_dir` and killed by its pid afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: fail loudly

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use yarilo_auth::{AuthHandle, Authenticator};
use yarilo_config::{Config, Service, SslMode};
use yarilo_listener::{Lifecycle, Listener, ListenerMetrics};
use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_smtp::{LmtpServer, LmtpSettings};
use yarilo_store::{Store, StoreSettings};

const CONCURRENCY: [usize; 2] = [1, 8];

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn message(size: usize, n: usize) -> Vec<u8> {
    let mut m = format!(
        "From: bench@remote.example\r\nTo: user@example.org\r\nSubject: bench {n}\r\nMessage-ID: <{n}@bench>\r\n\r\n"
    )
    .into_bytes();
    let line = b"The quick brown fox jumps over the lazy dog, again and again and.\r\n";
    while m.len() + line.len() < size {
        m.extend_from_slice(line);
    }
    m
}

async fn reply(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> u16 {
    let mut code = 0;
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).await.unwrap();
        assert!(n > 0, "server closed the connection");
        code = line.get(..3).and_then(|c| c.parse().ok()).unwrap_or(code);
        if code >= 400 {
            eprintln!("server said: {}", line.trim_end());
        }
        if line.as_bytes().get(3) != Some(&b'-') {
            return code;
        }
    }
}

/// One connection delivering `count` messages; returns after the last 250.
async fn deliver(addr: SocketAddr, first: usize, count: usize, users: usize, size: usize) {
    let s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    assert_eq!(reply(&mut r).await, 220);
    w.write_all(b"LHLO bench.test\r\n").await.unwrap();
    assert_eq!(reply(&mut r).await, 250);
    for i in first..first + count {
        let rcpt = format!("bench{}@example.org", i % users);
        let cmds = format!("MAIL FROM:<bench@remote.example>\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n");
        w.write_all(cmds.as_bytes()).await.unwrap();
        assert_eq!(reply(&mut r).await, 250, "MAIL");
        assert_eq!(reply(&mut r).await, 250, "RCPT {rcpt}");
        assert_eq!(reply(&mut r).await, 354, "DATA");
        let mut body = message(size, i);
        body.extend_from_slice(b".\r\n");
        w.write_all(&body).await.unwrap();
        assert_eq!(reply(&mut r).await, 250, "delivery of {i}");
    }
    w.write_all(b"QUIT\r\n").await.unwrap();
    let _ = reply(&mut r).await;
}

async fn run_load(
    addr: SocketAddr,
    conns: usize,
    messages: usize,
    users: usize,
    size: usize,
) -> f64 {
    let per = messages / conns;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..conns {
        tasks.push(tokio::spawn(deliver(addr, c * per, per, users, size)));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (per * conns) as f64 / started.elapsed().as_secs_f64()
}

fn count_files(root: &Path) -> usize {
    let mut n = 0;
    let Ok(rd) = std::fs::read_dir(root) else {
        return 0;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            let name = p.file_name().and_then(|s| s.to_str()).unwrap_or("");
            if name == "new" || name == "cur" {
                n += std::fs::read_dir(&p).map(|d| d.count()).unwrap_or(0);
            } else if name != "tmp" {
                n += count_files(&p);
            }
        }
    }
    n
}

/// `id -u dovecot` / `id -g dovecot`.
fn id(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, "dovecot"])
        .output()
        .expect("cannot run id");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("no dovecot system user; install dovecot-lmtpd with scripts/setup-dev")
}

struct Dovecot {
    child: Child,
    port: u16,
    mail: PathBuf,
    log: PathBuf,
}

impl Dovecot {
    fn start(dir: &Path, users_file: &Path) -> Dovecot {
        let port = free_port();
        let base = dir.join("run");
        let mail = dir.join("mail");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&mail).unwrap();
        // Mail is written as the `dovecot` system user (Dovecot refuses
        // uid 0): let it reach and own the mail directory.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&mail, Some(id("-u")), Some(id("-g"))).unwrap();
        let conf = dir.join("dovecot.conf");
        std::fs::write(
            &conf,
            format!(
                r#"base_dir = {base}
state_dir = {state}
log_path = {dir}/dovecot.log
info_log_path = {dir}/dovecot.log
protocols = lmtp
listen = 127.0.0.1
ssl = no
mail_location = maildir:{mail}/%d/%n
mail_fsync = always
lmtp_rcpt_check_quota = no
first_valid_uid = {uid}
first_valid_gid = {gid}
passdb {{
  driver = passwd-file
  args = {users}
}}
userdb {{
  driver = passwd-file
  args = {users}
  default_fields = uid={uid} gid={gid} home={mail}/%d/%n
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {port}
  }}
}}
service anvil {{
  chroot =
}}
"#,
                base = base.display(),
                state = dir.join("state").display(),
                dir = dir.display(),
                mail = mail.display(),
                users = users_file.display(),
                uid = id("-u"),
                gid = id("-g"),
            ),
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let child = Command::new("dovecot")
            .args(["-F", "-c"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot run dovecot; install it with scripts/setup-dev");
        // Wait until the listener answers.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "dovecot did not listen; see {}/dovecot.log",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Dovecot {
            child,
            port,
            mail,
            log: dir.join("dovecot.log"),
        }
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- dovecot.log ---\n{log}");
        }
        // SIGTERM our own child (by pid) so it stops its helpers.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

async fn start_yarilo(dir: &Path) -> (SocketAddr, Lifecycle) {
    let text = format!(
        "general:\n  hostname: bench.test\n  data_dir: {}\n",
        dir.display()
    );
    let config = Config::from_yaml(&text, "bench.yaml").unwrap();
    let store = Store::new(
        StoreSettings::new(&format!("maildir:{}/mail/%d/%n", dir.display())),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap();
    let auth = AuthHandle::Local(Arc::new(Authenticator::from_config(&config).unwrap()));
    let mut registry = prometheus_client::registry::Registry::default();
    let server = LmtpServer::new(
        LmtpSettings::from_config(&config),
        store,
        auth,
        &mut registry,
    );
    let service = Service {
        enabled: true,
        port: 0,
        address: "127.0.0.1".into(),
        ssl_mode: SslMode::No,
        haproxy_protocol: false,
        xclient_protocol: false,
    };
    let listener = Listener::bind("lmtp", &service, None, 256).await.unwrap();
    let addr = listener.local_addr();
    let life = Lifecycle::new();
    let metrics = ListenerMetrics::register(&mut registry);
    let l2 = life.clone();
    tokio::spawn(listener.serve(life.clone(), metrics, move |acc| {
        let server = server.clone();
        let stop = l2.stopped();
        async move {
            if let Ok(conn) = acc.establish(Duration::from_secs(5)).await {
                server.handle(conn, stop).await;
            }
        }
    }));
    (addr, life)
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let messages = arg(1, 2000);
    let users = arg(2, 8).max(1);
    let size = arg(3, 4096);
    println!(
        "LMTP benchmark: {messages} messages of {size} bytes to {users} users, per run; durable (fsync) on both"
    );
    let mut results = Vec::new();
    for conns in CONCURRENCY {
        // Fresh directories per run so both start from empty mailboxes.
        let ydir = tempfile::tempdir().unwrap();
        let ddir = tempfile::Builder::new()
            .prefix("yarilo-bench-dovecot")
            .tempdir()
            .unwrap();
        for d in [ydir.path(), ddir.path()] {
            let mut users_file = String::new();
            for u in 0..users {
                users_file.push_str(&format!("bench{u}@example.org:{{PLAIN}}pw::::::\n"));
            }
            std::fs::write(d.join("users"), users_file).unwrap();
        }
        let (yaddr, life) = start_yarilo(ydir.path()).await;
        let dovecot = Dovecot::start(ddir.path(), &ddir.path().join("users"));
        let daddr: SocketAddr = ([127, 0, 0, 1], dovecot.port).into();
        // Warm both up (auth caches, mailbox creation) outside the timing.
        run_load(yaddr, 1, users, users, size).await;
        run_load(daddr, 1, users, users, size).await;
        let y = run_load(yaddr, conns, messages, users, size).await;
        let d = run_load(daddr, conns, messages, users, size).await;
        let per = messages / conns * conns + users;
        let ycount = count_files(&ydir.path().join("mail"));
        let dcount = count_files(&dovecot.mail);
        assert_eq!(ycount, per, "yarilo stored every acknowledged message");
        assert_eq!(dcount, per, "dovecot stored every acknowledged message");
        life.token.cancel();
        drop(dovecot);
        results.push((conns, y, d));
    }
    println!(
        "{:>12} {:>16} {:>16} {:>8}",
        "connections", "yarilo msg/s", "dovecot msg/s", "ratio"
    );
    for (c, y, d) in results {
        println!("{c:>12} {y:>16.1} {d:>16.1} {:>8.2}", y / d);
    }
}
