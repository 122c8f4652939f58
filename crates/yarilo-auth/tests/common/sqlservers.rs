//! PostgreSQL and MariaDB servers started by a test in a temp dir, on a
//! unix socket inside it (no TCP port at all), killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::require;

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs `program` as `user` when we are root (PostgreSQL refuses root).
/// setpriv execs in place, so the child's pid is the server's own and
/// killing it on drop stops the server.
fn command_as(user: &str, program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new(require("setpriv", "util-linux"));
        c.args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--init-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn chown(user: &str, path: &Path) {
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", user])
            .arg(path)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "chown {user} {}", path.display());
    }
}

/// A child process killed (and reaped) on drop.
pub struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    /// sqlx URL of a database the test may use.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (bounded) until `url` accepts a connection.
pub async fn wait_ready(url: &str, child: &mut Child, log: &Path) {
    use sqlx::Connection as _;
    sqlx::any::install_default_drivers();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(c) = sqlx::AnyConnection::connect(url).await {
            let _ = c.close().await;
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "database server exited ({status}); log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "database server not ready after 60 s; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

pub async fn postgres() -> Server {
    let bin = PathBuf::from(PG_BIN);
    assert!(
        bin.join("initdb").is_file(),
        "PostgreSQL 15 server binaries missing in {PG_BIN}: run scripts/setup-dev (postgresql-15)"
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    chown("postgres", dir.path());
    let out = command_as("postgres", &bin.join("initdb"))
        .args(["-D"])
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = dir.path().join("pg.log");
    let log_file = std::fs::File::create(&log).unwrap();
    chown("postgres", &log);
    let mut child = command_as("postgres", &bin.join("postgres"))
        .arg("-D")
        .arg(&data)
        .args(["-c", "listen_addresses=", "-c", "fsync=off", "-p", "5432"])
        .arg("-c")
        .arg(format!("unix_socket_directories={}", dir.path().display()))
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .unwrap();
    let url = format!(
        "postgres://postgres@localhost/postgres?host={}&port=5432",
        dir.path().display()
    );
    wait_ready(&url, &mut child, &log).await;
    Server {
        child,
        _dir: dir,
        url,
    }
}

pub async fn mariadb() -> Server {
    let install = require("mariadb-install-db", "mariadb-server");
    let mariadbd = ["/usr/sbin/mariadbd", "/usr/sbin/mysqld"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("mariadbd missing: run scripts/setup-dev (mariadb-server)"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let user = if is_root() { "root" } else { "" };
    let mut cmd = Command::new(install);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
    if !user.is_empty() {
        cmd.arg(format!("--user={user}"));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "mariadb-install-db: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let sock = dir.path().join("mysql.sock");
    let log = dir.path().join("mariadb.log");
    let mut cmd = Command::new(mariadbd);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--socket={}", sock.display()))
        .arg(format!(
            "--pid-file={}",
            dir.path().join("mariadb.pid").display()
        ))
        .arg(format!("--log-error={}", log.display()))
        .args(["--skip-networking", "--innodb-flush-log-at-trx-commit=0"]);
    if !user.is_empty() {
        cmd.arg(format!("--user={user}"));
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let admin = format!("mysql://root@localhost/mysql?socket={}", sock.display());
    wait_ready(&admin, &mut child, &log).await;
    {
        use sqlx::Connection as _;
        let mut c = sqlx::AnyConnection::connect(&admin).await.unwrap();
        sqlx::raw_sql("CREATE DATABASE yarilo CHARACTER SET utf8mb4")
            .execute(&mut c)
            .await
            .unwrap();
    }
    let url = format!("mysql://root@localhost/yarilo?socket={}", sock.display());
    Server {
        child,
        _dir: dir,
        url,
    }
}
