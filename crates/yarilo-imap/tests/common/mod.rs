//! An in-process IMAP server for tests: a temp data dir, a passwd-file
//! user, the real listener on 127.0.0.1:0 with STARTTLS, and helpers to
//! run real clients (Python's imaplib, mbsync) against it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use yarilo_config::{Config, Service, SslMode};
use yarilo_listener::{Lifecycle, Listener, ListenerMetrics};
use yarilo_store::{Store, StoreSettings};

pub const USER: &str = "alice";
pub const PASS: &str = "a-long-secret";

pub struct Server {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub store: Store,
    life: Lifecycle,
    registry: Arc<std::sync::Mutex<prometheus_client::registry::Registry>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.life.token.cancel();
    }
}

impl Server {
    pub fn data(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
    /// The Maildir root of a user (default `mail_location`).
    pub fn maildir(&self, user: &str) -> PathBuf {
        self.data().join("mail").join(user)
    }

    /// The process metrics in the Prometheus text format.
    pub fn metrics(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    /// Waits (polling, at most `limit`) until the metrics hold `line`.
    pub async fn metric_reaches(&self, line: &str, limit: Duration) -> bool {
        let until = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < until {
            if self.metrics().lines().any(|l| l == line) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

pub async fn start() -> Server {
    start_with(|_| {}).await
}

pub async fn start_with(tune: impl FnOnce(&mut Config)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let mut config = Config::from_yaml(
        &format!("general: {{ data_dir: '{data}', hostname: test.invalid }}\nimap: {{ idle_check_interval_seconds: 1, auth_failure_delay_seconds: 0 }}\n"),
        "test",
    )
    .unwrap();
    tune(&mut config);
    let users = yarilo_auth::admin::UserStore::passwd_file(dir.path().join("users"));
    users.add(USER, PASS, None).await.unwrap();
    users.add("bob", PASS, None).await.unwrap();
    let store = Store::new(
        StoreSettings::from_config(&config.store, &data),
        Arc::new(yarilo_locks::MemoryLocker::new()),
        Arc::new(yarilo_locks::MemoryEventBus::default()),
    )
    .unwrap();
    let auth = Arc::new(yarilo_auth::Authenticator::from_config(&config).unwrap());
    let (cert, key, _) =
        yarilo_tls::ensure_self_signed(&dir.path().join("tls"), "test.invalid").unwrap();
    let certs = yarilo_tls::CertStore::load(vec![(cert, key)]).unwrap();
    let acceptor = certs.acceptor("1.2").unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let server = yarilo_imap::ImapServer::new(
        yarilo_imap::ImapSettings::from_config(&config),
        store.clone(),
        yarilo_auth::AuthHandle::Local(auth),
        Some(acceptor),
        &mut registry,
    );
    let service = Service {
        enabled: true,
        port: 0,
        address: "127.0.0.1".into(),
        ssl_mode: SslMode::Starttls,
        haproxy_protocol: false,
        xclient_protocol: false,
    };
    let listener = Listener::bind("imap", &service, None, 1000).await.unwrap();
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
    Server {
        addr,
        dir,
        store,
        life,
        registry: Arc::new(std::sync::Mutex::new(registry)),
    }
}

/// Runs a Python script from tests/clients with the port as argument;
/// panics with its output unless it exits 0.
pub async fn python(script: &str, args: &[String]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(script);
    let args: Vec<String> = args.to_vec();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(&path)
            .args(&args)
            .output()
            .expect("python3 not found: run scripts/setup-dev")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{script} failed:\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// A raw line-oriented client for exact-response tests.
pub struct Raw {
    r: BufReader<tokio::io::ReadHalf<TcpStream>>,
    w: tokio::io::WriteHalf<TcpStream>,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).await.unwrap();
        let (r, w) = tokio::io::split(s);
        let mut raw = Raw {
            r: BufReader::new(r),
            w,
        };
        let greeting = raw.line().await;
        assert!(greeting.starts_with("* OK"), "{greeting}");
        raw
    }

    pub async fn login(addr: SocketAddr, user: &str) -> Raw {
        let mut c = Raw::connect(addr).await;
        let r = c.cmd(&format!("l LOGIN {user} {PASS}")).await;
        assert!(r.last().unwrap().starts_with("l OK"), "{r:?}");
        c
    }

    pub async fn send(&mut self, s: &str) {
        self.w.write_all(s.as_bytes()).await.unwrap();
        self.w.write_all(b"\r\n").await.unwrap();
    }

    pub async fn line(&mut self) -> String {
        let mut l = String::new();
        tokio::time::timeout(Duration::from_secs(10), self.r.read_line(&mut l))
            .await
            .expect("timed out waiting for a line")
            .unwrap();
        l.trim_end_matches("\r\n").to_string()
    }

    /// The next line, or `None` once the connection is closed or reset.
    pub async fn try_line(&mut self) -> Option<String> {
        let mut l = String::new();
        match tokio::time::timeout(Duration::from_secs(10), self.r.read_line(&mut l))
            .await
            .expect("timed out waiting for a line")
        {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end_matches("\r\n").to_string()),
        }
    }

    /// Sends raw bytes (CRLF added) and returns everything up to and
    /// including the tagged reply, as bytes (literal8 data may hold NUL
    /// and bytes that are not UTF-8).
    pub async fn cmd_bytes(&mut self, tag: &str, s: &[u8]) -> Vec<u8> {
        self.w.write_all(s).await.unwrap();
        self.w.write_all(b"\r\n").await.unwrap();
        let mut out = Vec::new();
        loop {
            let mut l = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), self.r.read_until(b'\n', &mut l))
                .await
                .expect("timed out waiting for a line")
                .unwrap();
            let done = l.is_empty() || l.starts_with(format!("{tag} ").as_bytes());
            out.extend_from_slice(&l);
            if done {
                return out;
            }
        }
    }

    /// Writes bytes as they are (no CRLF added).
    pub async fn write_raw(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.w.write_all(b).await
    }

    /// Reads and drops whatever the server sends until it closes the
    /// connection; false if it is still open after `limit`.
    pub async fn closed_within(&mut self, limit: Duration) -> bool {
        let drain = async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match self.r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(limit, drain).await.is_ok()
    }

    /// Sends a tagged command, returns every line up to the tagged reply.
    pub async fn cmd(&mut self, s: &str) -> Vec<String> {
        let tag = s.split(' ').next().unwrap().to_string();
        self.send(s).await;
        let mut lines = Vec::new();
        loop {
            let l = self.line().await;
            let done = l.starts_with(&format!("{tag} "));
            lines.push(l);
            if done {
                return lines;
            }
        }
    }
}
