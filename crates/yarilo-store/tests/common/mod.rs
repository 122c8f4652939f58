//! Shared test support: a private Dovecot 2.3 (`doveadm -c <file>`, no
//! daemon) over a temp directory, and the torture writer binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Dovecot {
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
    /// uid:gid Dovecot runs mail access as (root is refused by Dovecot).
    pub uid: u32,
    pub gid: u32,
}

pub fn require(bin: &str) -> PathBuf {
    for d in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(d).join(bin);
        if p.is_file() {
            return p;
        }
    }
    panic!("{bin} not found in PATH: install it with scripts/setup-dev (dovecot-core)");
}

impl Dovecot {
    /// `layout` is appended to the mail_location (e.g. "" or ":LAYOUT=fs").
    pub fn new(layout: &str) -> Dovecot {
        require("doveadm");
        let dir = tempfile::tempdir().unwrap();
        // Dovecot drops to the mail uid; it must reach the temp tree.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let me = std::fs::metadata("/proc/self").unwrap();
        let (uid, gid) = if me.uid() == 0 {
            (65534, 65534)
        } else {
            (me.uid(), me.gid())
        };
        for d in ["mail", "home", "run", "state"] {
            let p = dir.path().join(d);
            std::fs::create_dir(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let root = dir.path().display().to_string();
        let conf = dir.path().join("dovecot.conf");
        std::fs::write(
            &conf,
            format!(
                "base_dir = {root}/run\nstate_dir = {root}/state\nlog_path = {root}/dovecot.log\n\
                 mail_location = maildir:{root}/mail/%u{layout}\n\
                 mail_uid = {uid}\nmail_gid = {gid}\nfirst_valid_uid = 0\nfirst_valid_gid = 0\n\
                 ssl = no\npassdb {{\n  driver = static\n  args = password=x\n}}\n\
                 userdb {{\n  driver = static\n  args = uid={uid} gid={gid} home={root}/home/%u\n}}\n"
            ),
        )
        .unwrap();
        Dovecot {
            dir,
            conf,
            uid,
            gid,
        }
    }

    pub fn mail_root(&self) -> PathBuf {
        self.dir.path().join("mail")
    }

    /// The yarilo mail_location that points at the same Maildirs.
    pub fn location(&self, layout: &str) -> String {
        format!("maildir:{}/%u{layout}", self.mail_root().display())
    }

    /// Runs `doveadm <args>` as `user`; panics with its stderr on failure.
    pub fn doveadm(&self, user: &str, args: &[&str], stdin: Option<&[u8]>) -> String {
        use std::io::Write;
        let mut cmd = Command::new("doveadm");
        cmd.arg("-c").arg(&self.conf).args(args);
        cmd.env("USER", user)
            .env("HOME", self.dir.path().join("home"));
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("spawn doveadm");
        if let Some(data) = stdin {
            child.stdin.take().unwrap().write_all(data).unwrap();
        } else {
            drop(child.stdin.take());
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // chdir to home warnings are harmless; real failures exit non-zero.
        assert!(out.status.success(), "doveadm {args:?} failed: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Gives the tree to Dovecot's mail uid (after yarilo wrote as root).
    pub fn chown_all(&self) {
        let st = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(self.mail_root())
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// A command that runs as Dovecot's mail user (so files both write
    /// stay accessible to both).
    pub fn as_mail_user(&self, program: &Path) -> Command {
        let me = std::fs::metadata("/proc/self").unwrap();
        if me.uid() == 0 {
            let mut c = Command::new(require("setpriv"));
            c.arg(format!("--reuid={}", self.uid))
                .arg(format!("--regid={}", self.gid))
                .arg("--clear-groups")
                .arg(program);
            c
        } else {
            Command::new(program)
        }
    }
}

/// Parses `doveadm fetch 'uid flags'` output into (uid, sorted flags).
pub fn parse_fetch(out: &str) -> Vec<(u32, Vec<String>)> {
    let mut v = Vec::new();
    let mut uid = None;
    for line in out.lines() {
        if let Some(u) = line.strip_prefix("uid: ") {
            uid = u.trim().parse().ok();
        } else if let Some(f) = line.strip_prefix("flags:") {
            let mut flags: Vec<String> = f
                .split_whitespace()
                .filter(|f| *f != "\\Recent")
                .map(str::to_string)
                .collect();
            flags.sort();
            if let Some(u) = uid.take() {
                v.push((u, flags));
            }
        }
    }
    v
}

/// Kills the child on drop so a failing test leaves no process behind.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn torture_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_yarilo-store-torture"))
}
