//! Shared test support: a temp data dir with a passwd-file user db, a
//! store, servers on 127.0.0.1:0, a raw SMTP line client, Python runners.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use yarilo_auth::{AuthHandle, Authenticator};
use yarilo_config::{Config, Service, SslMode};
use yarilo_listener::{Lifecycle, Listener, ListenerMetrics};
use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_smtp::{LmtpServer, LmtpSettings, SubmissionServer, SubmissionSettings};
use yarilo_store::{Store, StoreSettings, UserInfo};

pub struct Env {
    _dir: Option<tempfile::TempDir>,
    pub path: std::path::PathBuf,
    pub config: Config,
    pub store: Store,
    pub auth: AuthHandle,
}

/// `users`: passwd-file lines; `yaml`: extra config (may be empty). The
/// data dir and the maildir location are filled in.
pub fn env(users: &str, yaml: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("users"), users).unwrap();
    let mut e = env_at(dir.path(), yaml);
    e._dir = Some(dir);
    e
}

/// An environment over an existing data dir (its `users` file written).
pub fn env_at(path: &std::path::Path, yaml: &str) -> Env {
    let text = format!(
        "general:\n  hostname: mx.test\n  data_dir: {}\nauth:\n  auth_failure_delay_seconds: 0\n{yaml}",
        path.display()
    );
    let config = Config::from_yaml(&text, "test.yaml").unwrap();
    let store = store_at(path);
    let auth = AuthHandle::Local(Arc::new(Authenticator::from_config(&config).unwrap()));
    Env {
        _dir: None,
        path: path.to_path_buf(),
        config,
        store,
        auth,
    }
}

pub fn location(dir: &std::path::Path) -> String {
    format!("maildir:{}/mail/%d/%n", dir.display())
}

/// A fresh store over the same maildir (as a restarted process sees it).
pub fn store_at(dir: &std::path::Path) -> Store {
    Store::new(
        StoreSettings::new(&location(dir)),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap()
}

fn service() -> Service {
    Service {
        enabled: true,
        port: 0,
        address: "127.0.0.1".into(),
        ssl_mode: SslMode::No,
        haproxy_protocol: false,
        xclient_protocol: false,
    }
}

pub struct Running {
    pub addr: SocketAddr,
    pub life: Lifecycle,
    pub registry: Arc<std::sync::Mutex<prometheus_client::registry::Registry>>,
}

impl Running {
    pub fn metrics(&self) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry.lock().unwrap()).unwrap();
        s
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.life.token.cancel();
    }
}

pub async fn start_lmtp(env: &Env, settings: LmtpSettings) -> Running {
    let mut registry = prometheus_client::registry::Registry::default();
    let server = LmtpServer::new(settings, env.store.clone(), env.auth.clone(), &mut registry);
    let listener = Listener::bind("lmtp", &service(), None, 64).await.unwrap();
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
    Running {
        addr,
        life,
        registry: Arc::new(std::sync::Mutex::new(registry)),
    }
}

pub async fn start_submission(env: &Env, settings: SubmissionSettings) -> Running {
    start_submission_tls(env, settings, None).await
}

/// A submission server offering STARTTLS with `starttls`.
pub async fn start_submission_tls(
    env: &Env,
    settings: SubmissionSettings,
    starttls: Option<tokio_rustls::TlsAcceptor>,
) -> Running {
    let mut registry = prometheus_client::registry::Registry::default();
    let server = SubmissionServer::new(settings, env.auth.clone(), starttls, &mut registry);
    let listener = Listener::bind("submission", &service(), None, 64)
        .await
        .unwrap();
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
    Running {
        addr,
        life,
        registry: Arc::new(std::sync::Mutex::new(registry)),
    }
}

/// All messages of `user`'s `mailbox`, oldest first.
pub async fn messages(store: &Store, user: &str, mailbox: &str) -> Vec<String> {
    let us = store
        .user(&UserInfo {
            user: user.into(),
            home: String::new(),
        })
        .await
        .unwrap();
    let mb = us.open(mailbox).await.unwrap();
    let view = mb.refresh().await.unwrap();
    let mut out = Vec::new();
    for uid in view.uids() {
        let m = mb.read_message(uid).await.unwrap();
        out.push(String::from_utf8_lossy(&m).into_owned());
    }
    out
}

/// Runs `python3 -c script args…`; returns (success, stdout, stderr).
pub async fn python(script: &str, args: Vec<String>) -> (bool, String, String) {
    let script = script.to_string();
    tokio::task::spawn_blocking(move || {
        let out = Command::new("python3")
            .arg("-c")
            .arg(&script)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}); run scripts/setup-dev"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// Runs a program; panics with the fix when it is missing.
pub async fn run(program: &str, args: Vec<String>) -> (bool, String, String) {
    let program = program.to_string();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(&program)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program} ({e}); run scripts/setup-dev"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// A raw line client, for pipelining and BDAT tests.
pub struct Client {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    /// Reads and drops what the server sends until it closes the
    /// connection; false if it is still open after `limit`.
    pub async fn closed_within(&mut self, limit: Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let drain = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match self.reader.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(limit, drain).await.is_ok()
    }

    pub async fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).await.unwrap();
        let (r, w) = s.into_split();
        let mut c = Client {
            reader: BufReader::new(r),
            writer: w,
        };
        let (code, _) = c.reply().await;
        assert_eq!(code, 220);
        c
    }

    pub async fn send(&mut self, data: &[u8]) {
        self.writer.write_all(data).await.unwrap();
    }

    /// One (possibly multi-line) reply: code and the full lines.
    pub async fn reply(&mut self) -> (u16, Vec<String>) {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(Duration::from_secs(20), self.reader.read_line(&mut line))
                .await
                .expect("reply timed out")
                .unwrap();
            assert!(n > 0, "connection closed; got {lines:?}");
            let line = line.trim_end().to_string();
            let last = line.as_bytes().get(3) != Some(&b'-');
            lines.push(line);
            if last {
                break;
            }
        }
        (lines[0][..3].parse().unwrap(), lines)
    }

    /// Sends a command line and returns its reply.
    pub async fn cmd(&mut self, line: &str) -> (u16, Vec<String>) {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }
}
