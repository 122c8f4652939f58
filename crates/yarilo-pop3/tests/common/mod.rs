#![allow(dead_code)]
//! Shared harness: a POP3 server in this process on 127.0.0.1:0 over a
//! temporary Maildir store and a passwd-file user, plus a tiny line client
//! and runners for the real clients (python3 poplib, fetchmail, Dovecot).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use yarilo_auth::db::{Db, PasswdFile, PasswdLine};
use yarilo_auth::sasl::Mechanism;
use yarilo_auth::{AuthHandle, AuthSettings, Authenticator, Scheme};
use yarilo_config::{Service, SslMode};
use yarilo_listener::{Accepted, Lifecycle, Listener, ListenerMetrics};
use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_pop3::uidl::UidlFormat;
use yarilo_pop3::{Pop3Server, Pop3Settings};
use yarilo_store::{AppendOptions, Mailbox, Store, StoreSettings, UserInfo};

pub const USER: &str = "alice";
pub const PASSWORD: &str = "s3cret pass";

pub struct Options {
    pub uidl_format: &'static str,
    /// Offer STLS with a self-signed certificate.
    pub starttls: bool,
    /// Implicit TLS (pop3s).
    pub implicit_tls: bool,
    pub disable_plaintext_auth: bool,
    pub max_bad_commands: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            uidl_format: "%08Xu%08Xv",
            starttls: false,
            implicit_tls: false,
            disable_plaintext_auth: true,
            max_bad_commands: 20,
        }
    }
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub store: Store,
    pub server: Arc<Pop3Server>,
    pub registry: Arc<Mutex<Registry>>,
    pub life: Lifecycle,
    /// The self-signed certificate, when TLS is on.
    pub cert: Option<PathBuf>,
}

pub fn auth_settings(disable_plaintext_auth: bool) -> AuthSettings {
    AuthSettings {
        mechanisms: vec![Mechanism::Plain, Mechanism::Login, Mechanism::ScramSha256],
        failure_delay: Duration::ZERO,
        penalty_max: Duration::ZERO,
        disable_plaintext_auth,
        ..AuthSettings::default()
    }
}

impl Harness {
    pub async fn start(opts: Options) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home").join(USER);
        std::fs::create_dir_all(&home).unwrap();
        let users = PasswdFile::new(dir.path().join("users"), Scheme::Plain);
        users
            .add_blocking(PasswdLine {
                user: USER.into(),
                password: format!("{{PLAIN}}{PASSWORD}"),
                home: home.display().to_string(),
                ..Default::default()
            })
            .unwrap();
        let auth = Arc::new(Authenticator::new(
            auth_settings(opts.disable_plaintext_auth),
            vec![Db::PasswdFile(users.clone())],
            vec![Db::PasswdFile(users)],
        ));
        let store = Store::new(
            StoreSettings::new("maildir:~/Maildir"),
            Arc::new(MemoryLocker::new()),
            Arc::new(MemoryEventBus::default()),
        )
        .unwrap();
        let (acceptor, cert) = if opts.starttls || opts.implicit_tls {
            let tls_dir = dir.path().join("tls");
            std::fs::create_dir_all(&tls_dir).unwrap();
            let (c, k, _) = yarilo_tls::ensure_self_signed(&tls_dir, "localhost").unwrap();
            let certs = yarilo_tls::CertStore::load(vec![(c.clone(), k)]).unwrap();
            (Some(certs.acceptor("1.2").unwrap()), Some(c))
        } else {
            (None, None)
        };
        let settings = Pop3Settings {
            uidl_format: UidlFormat::parse(opts.uidl_format).unwrap(),
            max_bad_commands: opts.max_bad_commands,
            ..Pop3Settings::default()
        };
        let mut registry = Registry::default();
        let server = Pop3Server::new(
            settings,
            store.clone(),
            AuthHandle::Local(auth),
            if opts.starttls {
                acceptor.clone()
            } else {
                None
            },
            &mut registry,
        );
        let service = Service {
            enabled: true,
            port: 0,
            address: "127.0.0.1".into(),
            ssl_mode: if opts.implicit_tls {
                SslMode::Ssl
            } else if opts.starttls {
                SslMode::Starttls
            } else {
                SslMode::No
            },
            haproxy_protocol: false,
            xclient_protocol: false,
        };
        let implicit = if opts.implicit_tls { acceptor } else { None };
        let listener = Listener::bind("pop3", &service, implicit, 100)
            .await
            .unwrap();
        let addr = listener.local_addr();
        let life = Lifecycle::new();
        let (srv, l2) = (server.clone(), life.clone());
        tokio::spawn(listener.serve(
            life.clone(),
            ListenerMetrics::default(),
            move |acc: Accepted| {
                let server = srv.clone();
                let stop = l2.stopped();
                async move {
                    if let Ok(conn) = acc.establish(Duration::from_secs(10)).await {
                        server.handle(conn, stop).await;
                    }
                }
            },
        ));
        Harness {
            dir,
            addr,
            store,
            server,
            registry: Arc::new(Mutex::new(registry)),
            life,
            cert,
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home").join(USER)
    }

    /// The user's INBOX Maildir.
    pub fn maildir(&self) -> PathBuf {
        self.home().join("Maildir")
    }

    pub async fn inbox(&self) -> Mailbox {
        let us = self
            .store
            .user(&UserInfo {
                user: USER.into(),
                home: self.home().display().to_string(),
            })
            .await
            .unwrap();
        us.open("INBOX").await.unwrap()
    }

    /// Delivers messages through the store (as LMTP would); returns UIDs.
    pub async fn deliver(&self, messages: &[&[u8]]) -> Vec<u32> {
        let inbox = self.inbox().await;
        let mut uids = Vec::new();
        for m in messages {
            uids.push(
                inbox
                    .append(m.to_vec(), AppendOptions::default())
                    .await
                    .unwrap(),
            );
        }
        uids
    }

    pub fn metrics_text(&self) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry.lock().unwrap()).unwrap();
        s
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// A message with LF line ends, a line starting with a dot, and `n` body
/// lines.
pub fn message(subject: &str, body_lines: usize) -> Vec<u8> {
    let mut m = format!(
        "From: bob@example.org\nTo: alice@example.org\nSubject: {subject}\nMessage-ID: <{subject}@example.org>\n\n"
    );
    for i in 0..body_lines {
        m.push_str(&format!("line {i} of {subject}\n"));
    }
    m.push_str(".a line with a leading dot\n.\nend\n");
    m.into_bytes()
}

/// What a POP3 client receives for a stored message (CRLF, no stuffing).
pub fn crlf(m: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in m.split_inclusive(|&b| b == b'\n') {
        let l = line.strip_suffix(b"\n").unwrap_or(line);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        out.extend_from_slice(l);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A minimal POP3 line client for protocol-level assertions.
pub struct LineClient<S = TcpStream> {
    reader: BufReader<tokio::io::ReadHalf<S>>,
    writer: tokio::io::WriteHalf<S>,
    /// How long to wait for a line (longer under paused time).
    pub timeout: Duration,
}

impl LineClient<TcpStream> {
    pub async fn connect(addr: SocketAddr) -> (LineClient<TcpStream>, String) {
        let tcp = TcpStream::connect(addr).await.unwrap();
        LineClient::greeted(tcp).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> LineClient<S> {
    /// Wraps a stream whose greeting has not been read yet.
    pub async fn greeted(stream: S) -> (LineClient<S>, String) {
        let mut c = LineClient::over(stream);
        let greeting = c.line().await;
        (c, greeting)
    }

    /// Wraps a stream (no greeting expected).
    pub fn over(stream: S) -> LineClient<S> {
        let (r, w) = tokio::io::split(stream);
        LineClient {
            reader: BufReader::new(r),
            writer: w,
            timeout: Duration::from_secs(20),
        }
    }

    /// The stream back (for a TLS handshake); nothing may be buffered.
    pub fn into_inner(self) -> S {
        assert!(self.reader.buffer().is_empty(), "unread input before TLS");
        self.reader.into_inner().unsplit(self.writer)
    }

    /// One line without CRLF; `None` at EOF.
    pub async fn try_line(&mut self) -> Option<String> {
        let mut s = String::new();
        let n = tokio::time::timeout(self.timeout, self.reader.read_line(&mut s))
            .await
            .expect("server answered in time")
            .ok()?;
        (n > 0).then(|| s.trim_end_matches(['\r', '\n']).to_string())
    }

    /// One line without CRLF; panics at EOF.
    pub async fn line(&mut self) -> String {
        self.try_line().await.expect("a line, not EOF")
    }

    pub async fn send(&mut self, data: &str) {
        self.writer.write_all(data.as_bytes()).await.unwrap();
    }

    /// Sends a command, returns the status line.
    pub async fn cmd(&mut self, c: &str) -> String {
        self.send(&format!("{c}\r\n")).await;
        self.line().await
    }

    /// Reads a multi-line body up to the `.` line (unstuffed).
    pub async fn multiline(&mut self) -> Vec<String> {
        let mut v = Vec::new();
        loop {
            let l = self.line().await;
            if l == "." {
                return v;
            }
            v.push(l.strip_prefix('.').map(str::to_string).unwrap_or(l));
        }
    }

    pub async fn login(&mut self) {
        assert!(self.cmd(&format!("USER {USER}")).await.starts_with("+OK"));
        let r = self.cmd(&format!("PASS {PASSWORD}")).await;
        assert!(r.starts_with("+OK"), "{r}");
    }
}

/// Runs a python3 script (stdin) with arguments; returns stdout. A missing
/// python3 fails the test with the fix.
pub async fn python(script: &str, args: &[String]) -> String {
    let script = script.to_string();
    let args = args.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new("python3")
            .arg("-")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run python3 ({e}); install it with scripts/setup-dev")
            });
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(script.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "python failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    })
    .await
    .unwrap()
}

/// Runs a command to completion off the runtime; returns (success, stdout, stderr).
pub async fn run(mut cmd: Command) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = cmd.output().unwrap_or_else(|e| {
            panic!("cannot run {cmd:?} ({e}); install it with scripts/setup-dev")
        });
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// Whether this process runs as root (Dovecot refuses root mail access).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

pub fn chown_recursive(path: &Path, owner: &str) {
    let st = Command::new("chown")
        .args(["-R", owner])
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Polls `cond` until it holds (bounded; no fixed sleeps in tests).
pub async fn eventually<F, Fut>(mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not met within 10 s");
}
