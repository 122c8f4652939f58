//! Support for the packaging tests: build the images with `images/build`,
//! drive the Docker engine with names unique to the run (removed again on
//! drop), and talk to a running server the way a mail client and an MTA
//! would (Python's imaplib and smtplib, as the other end-to-end tests do).
//!
//! A missing prerequisite (docker, skopeo, umoci, nix-instantiate, the Nix
//! linters) fails the test with the command that installs it; nothing is
//! skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: failing loudly is the point

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// A name part unique to this test process and call: safe as a Docker tag,
/// container, network, volume or Compose project name.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}{}x{nanos:x}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs a command; panics with its output unless it exits 0.
pub fn run(cmd: &mut Command) -> String {
    let out = output(cmd);
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command and returns its output whatever the exit status; panics
/// with the fix when the program is not installed.
pub fn output(cmd: &mut Command) -> Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}): install it with scripts/setup-dev"))
}

/// The cargo target directory the build uses (as scripts/test sets it).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/yarilo/target")
        })
}

/// `images/build OUT --tag TAG [--only IMAGE]...`, serialized between test
/// processes with flock so that only one drives cargo at a time (the
/// release build is shared; after the first it is a no-op).
pub fn build_images(out: &Path, tag: &str, only: &[&str]) -> BuiltImages {
    let lock = target_dir().join("image-build.lock");
    std::fs::create_dir_all(target_dir()).unwrap();
    let mut cmd = Command::new("flock");
    cmd.arg(&lock)
        .arg(repo_root().join("images/build"))
        .arg(out)
        .args(["--tag", tag, "--quiet"]);
    for o in only {
        cmd.args(["--only", o]);
    }
    run(&mut cmd);
    BuiltImages {
        dir: out.to_path_buf(),
        tag: tag.to_string(),
    }
}

pub struct BuiltImages {
    pub dir: PathBuf,
    pub tag: String,
}

impl BuiltImages {
    pub fn archive(&self, image: &str) -> PathBuf {
        self.dir.join(format!("{image}.tar"))
    }

    pub fn reference(&self, image: &str) -> String {
        format!("{image}:{}", self.tag)
    }

    /// `digests.txt` as written.
    pub fn digests(&self) -> String {
        std::fs::read_to_string(self.dir.join("digests.txt")).unwrap()
    }

    /// `images.json` as written.
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join("images.json")).unwrap())
            .unwrap()
    }
}

/// Docker objects this test created, removed on drop (also on panic).
#[derive(Default)]
pub struct Docker {
    containers: Vec<String>,
    networks: Vec<String>,
    volumes: Vec<String>,
    images: Vec<String>,
}

pub fn docker(args: &[&str]) -> String {
    run(Command::new("docker").args(args))
}

/// Fails loudly when the Docker engine does not answer.
pub fn require_docker() {
    let out = output(Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]));
    assert!(
        out.status.success(),
        "the Docker engine does not answer (`docker info`: {}); start it (dockerd) — scripts/setup-dev installs docker.io",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

impl Docker {
    pub fn new() -> Docker {
        require_docker();
        Docker::default()
    }

    /// `docker load -i ARCHIVE`; the reference is removed on drop.
    pub fn load(&mut self, images: &BuiltImages, image: &str) -> String {
        let out = docker(&["load", "-i", images.archive(image).to_str().unwrap()]);
        let reference = images.reference(image);
        assert!(
            out.contains(&format!("Loaded image: {reference}")),
            "docker load did not name {reference}: {out}"
        );
        self.images.push(reference.clone());
        reference
    }

    pub fn network(&mut self, name: &str) -> String {
        docker(&["network", "create", name]);
        self.networks.push(name.to_string());
        name.to_string()
    }

    pub fn volume(&mut self, name: &str) -> String {
        docker(&["volume", "create", name]);
        self.volumes.push(name.to_string());
        name.to_string()
    }

    /// `docker run -d --name NAME ARGS...`; removed on drop.
    pub fn run_detached(&mut self, name: &str, args: &[&str]) -> String {
        let mut all = vec!["run", "-d", "--name", name];
        all.extend_from_slice(args);
        self.containers.push(name.to_string());
        docker(&all);
        name.to_string()
    }

    /// Records a container created some other way (docker-compose).
    pub fn adopt_volume(&mut self, name: &str) {
        self.volumes.push(name.to_string());
    }

    /// The host address a container port is published on.
    pub fn published(&self, container: &str, port: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = output(Command::new("docker").args(["port", container, port]));
            let text = String::from_utf8_lossy(&out.stdout);
            if let Some(line) = text.lines().find(|l| l.starts_with("127.0.0.1:")) {
                return line.trim().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "{container} does not publish {port}: {text}\n{}",
                logs(container)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub fn logs(container: &str) -> String {
    let out = output(Command::new("docker").args(["logs", "--tail", "200", container]));
    format!(
        "--- logs of {container}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Drop for Docker {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new("docker")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        for c in &self.containers {
            quiet(&["rm", "-f", "-v", c]);
        }
        for n in &self.networks {
            quiet(&["network", "rm", n]);
        }
        for v in &self.volumes {
            quiet(&["volume", "rm", "-f", v]);
        }
        for i in &self.images {
            quiet(&["rmi", i]);
        }
    }
}

/// Polls `f` until it returns Some, at most `within`; panics with `what`
/// and the last error otherwise.
pub fn eventually<T>(what: &str, within: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what}: not within {within:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// Runs a Python script; Err with its output when it fails.
pub fn python(script: &str) -> Result<String, String> {
    let out = output(Command::new("python3").arg("-c").arg(script));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn host_port(addr: &str) -> (&str, &str) {
    addr.rsplit_once(':').unwrap()
}

/// Delivers one message over LMTP, as an MTA would; Err unless every
/// recipient was accepted.
pub fn lmtp_deliver(addr: &str, rcpt: &str, subject: &str) -> Result<String, String> {
    let (host, port) = host_port(addr);
    python(&format!(
        r#"
import smtplib
s = smtplib.LMTP("{host}", {port}, timeout=20)
refused = s.sendmail("sender@example.org", ["{rcpt}"],
    "From: sender@example.org\r\nTo: {rcpt}\r\nSubject: {subject}\r\n\r\nhello from the packaging tests\r\n")
s.quit()
assert not refused, refused
print("delivered")
"#
    ))
}

/// Logs in over IMAPS (self-signed certificate accepted) and returns the
/// Subject headers in INBOX.
pub fn imaps_subjects(addr: &str, user: &str, password: &str) -> Result<String, String> {
    let (host, port) = host_port(addr);
    python(&format!(
        r#"
import imaplib, ssl
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
m = imaplib.IMAP4_SSL("{host}", {port}, ssl_context=ctx, timeout=20)
m.login("{user}", "{password}")
typ, _ = m.select("INBOX")
assert typ == "OK", typ
typ, data = m.fetch("1:*", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
assert typ == "OK", (typ, data)
for part in data:
    if isinstance(part, tuple):
        print(part[1].decode().strip())
m.logout()
"#
    ))
}

/// Logs in over IMAP with STARTTLS and returns the Subject headers in INBOX.
pub fn imap_starttls_subjects(addr: &str, user: &str, password: &str) -> Result<String, String> {
    let (host, port) = host_port(addr);
    python(&format!(
        r#"
import imaplib, ssl
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
m = imaplib.IMAP4("{host}", {port}, timeout=20)
m.starttls(ssl_context=ctx)
m.login("{user}", "{password}")
typ, _ = m.select("INBOX")
assert typ == "OK", typ
typ, data = m.fetch("1:*", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
assert typ == "OK", (typ, data)
for part in data:
    if isinstance(part, tuple):
        print(part[1].decode().strip())
m.logout()
"#
    ))
}

/// The paths inside an image's layers (from the archive, no engine needed),
/// with their tar entry types and owners: `path type uid:gid mode [-> target]`.
pub fn image_listing(archive: &Path) -> Vec<String> {
    let script = format!(
        r#"
import json, tarfile
outer = tarfile.open("{}")
manifest = json.load(outer.extractfile("manifest.json"))[0]
for layer in manifest["Layers"]:
    inner = tarfile.open(fileobj=outer.extractfile(layer))
    for ti in inner:
        kind = {{tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink", tarfile.REGTYPE: "file"}}.get(ti.type, "other")
        line = f"/{{ti.name}} {{kind}} {{ti.uid}}:{{ti.gid}} {{ti.mode:o}}"
        if ti.issym():
            line += " -> " + ti.linkname
        print(line)
"#,
        archive.display()
    );
    python(&script)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}
