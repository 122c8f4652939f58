#![allow(clippy::unwrap_used, clippy::expect_used)]
//! deploy/compose/ as a user runs it: both profiles come up from their
//! compose files (the full profile with the lab stand-ins for the public
//! MariaDB and Redis images, through docker-compose.lab.yml), a user is
//! added with yarctl inside the deployment, a message delivered over LMTP
//! is read back over IMAP from the host.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use yarilo_packaging_tests::*;

/// One Compose project with a name of its own; `down -v` on drop.
struct Compose {
    project: String,
    dir: PathBuf,
    files: Vec<&'static str>,
    env: Vec<(String, String)>,
    started: bool,
}

impl Compose {
    fn new(profile: &str, files: &[&'static str], env: Vec<(String, String)>) -> Compose {
        Compose {
            project: unique("yc"),
            dir: repo_root().join("deploy/compose").join(profile),
            files: files.to_vec(),
            env,
            started: false,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("docker-compose");
        c.current_dir(&self.dir)
            .args(["--ansi", "never", "-p", &self.project]);
        for f in &self.files {
            c.args(["-f", f]);
        }
        c.args(args);
        // Publish on loopback, on ports the engine picks.
        c.env("YARILO_BIND", "127.0.0.1");
        for p in [
            "IMAP",
            "IMAPS",
            "POP3",
            "POP3S",
            "SUBMISSION",
            "SUBMISSIONS",
            "LMTP",
            "TELEMETRY",
        ] {
            c.env(format!("YARILO_{p}_PORT"), "");
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn up(&mut self) {
        self.started = true;
        self.run(&["up", "-d"]);
    }

    fn run(&self, args: &[&str]) -> String {
        run(&mut self.cmd(args))
    }

    /// `docker-compose port SERVICE PORT` → `127.0.0.1:NNNNN`.
    fn port(&self, service: &str, port: u16) -> String {
        let out = self.run(&["port", service, &port.to_string()]);
        let addr = out.trim().to_string();
        assert!(addr.starts_with("127.0.0.1:"), "{service} {port}: {addr:?}");
        addr
    }

    fn logs(&self) -> String {
        let out = output(&mut self.cmd(&["logs", "--no-color", "--tail", "60"]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        if !self.started {
            return;
        }
        let _ = output(&mut self.cmd(&["down", "-v", "--remove-orphans", "-t", "5"]));
    }
}

fn yarctl_add(c: &Compose, service: &str, config: &str, user: &str, password: &str) {
    eventually(
        &format!("yarctl user add {user} in {service}"),
        Duration::from_secs(60),
        || {
            let out = output(&mut c.cmd(&[
                "exec",
                "-T",
                service,
                "yarctl",
                "user",
                "add",
                user,
                "--password",
                password,
                "--config",
                config,
            ]));
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        },
    );
}

#[test]
fn compose_files_are_valid() {
    let env = vec![
        ("YARILO_DB_PASSWORD".to_string(), "x".to_string()),
        ("YARILO_DB_ROOT_PASSWORD".to_string(), "y".to_string()),
        ("YARILO_LAB_TAG".to_string(), "t".to_string()),
    ];
    for (profile, files) in [
        ("minimal", vec!["docker-compose.yml"]),
        ("full", vec!["docker-compose.yml"]),
        ("full", vec!["docker-compose.yml", "docker-compose.lab.yml"]),
    ] {
        let c = Compose::new(profile, &files, env.clone());
        let out = c.run(&["config"]);
        assert!(out.contains("services:"), "{profile}: {out}");
    }
    // The full profile refuses to start without its database passwords.
    let c = Compose::new("full", &["docker-compose.yml"], vec![]);
    let out = output(&mut c.cmd(&["config", "-q"]));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("YARILO_DB"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every yarilo configuration shipped with the profiles passes
    // `yarilo config check` (secrets from the environment set here).
    let bin = built_binary();
    for file in [
        "minimal/yarilo.yaml",
        "full/config/auth.yaml",
        "full/config/locks.yaml",
        "full/config/warden.yaml",
        "full/config/backend.yaml",
        "full/config/login.yaml",
    ] {
        let path = repo_root().join("deploy/compose").join(file);
        run(Command::new(&bin)
            .args(["config", "check", "--config"])
            .arg(&path)
            .env("YARILO_SQL_URL", "mysql://yarilo:x@mariadb/yarilo"));
    }
}

/// The release binary images/build made (built first if needed).
fn built_binary() -> PathBuf {
    let dir = tempfile::tempdir().unwrap();
    build_images(dir.path(), &unique("bin"), &["yarilo"]);
    target_dir().join("image-build/release/yarilo")
}

fn load(d: &mut Docker, images: &[&str]) -> (tempfile::TempDir, BuiltImages) {
    let dir = tempfile::tempdir().unwrap();
    let built = build_images(dir.path(), &unique("compose"), images);
    for i in images {
        d.load(&built, i);
    }
    (dir, built)
}

#[test]
fn minimal_profile_delivers_and_reads_back() {
    let mut d = Docker::new();
    let (_dir, built) = load(&mut d, &["yarilo"]);
    let mut c = Compose::new(
        "minimal",
        &["docker-compose.yml"],
        vec![("YARILO_IMAGE".into(), built.reference("yarilo"))],
    );
    c.up();
    yarctl_add(
        &c,
        "yarilo",
        "/etc/yarilo/yarilo.yaml",
        "alice",
        "a-long-secret",
    );
    let lmtp = c.port("yarilo", 2424);
    let imaps = c.port("yarilo", 1993);
    eventually("LMTP delivery", Duration::from_secs(30), || {
        lmtp_deliver(&lmtp, "alice", "minimal profile")
    });
    let subjects = eventually("IMAPS read", Duration::from_secs(30), || {
        imaps_subjects(&imaps, "alice", "a-long-secret")
    });
    assert!(
        subjects.contains("Subject: minimal profile"),
        "{subjects}\n{}",
        c.logs()
    );
    // The user is in SQLite on the volume.
    let users = c.run(&[
        "exec",
        "-T",
        "yarilo",
        "yarctl",
        "user",
        "list",
        "--config",
        "/etc/yarilo/yarilo.yaml",
    ]);
    assert_eq!(users.trim(), "alice");
}

#[test]
fn full_profile_delivers_through_the_logins_and_reads_back() {
    let mut d = Docker::new();
    let (_dir, built) = load(
        &mut d,
        &["yarilo", "yarilo-lab-redis", "yarilo-lab-mariadb"],
    );
    let mut c = Compose::new(
        "full",
        &["docker-compose.yml", "docker-compose.lab.yml"],
        vec![
            ("YARILO_IMAGE".into(), built.reference("yarilo")),
            ("YARILO_LAB_TAG".into(), built.tag.clone()),
            ("YARILO_DB_PASSWORD".into(), "db-secret".into()),
            ("YARILO_DB_ROOT_PASSWORD".into(), "root-secret".into()),
        ],
    );
    c.up();
    yarctl_add(
        &c,
        "yarilo-auth",
        "/etc/yarilo/auth.yaml",
        "alice",
        "a-long-secret",
    );
    let lmtp = c.port("yarilo-lmtp-login", 2424);
    let imaps = c.port("yarilo-imap-login", 1993);
    let imap = c.port("yarilo-imap-login", 1143);
    eventually(
        "LMTP delivery through lmtp-login",
        Duration::from_secs(60),
        || lmtp_deliver(&lmtp, "alice", "full profile"),
    );
    let subjects = eventually(
        "IMAPS read through imap-login",
        Duration::from_secs(60),
        || imaps_subjects(&imaps, "alice", "a-long-secret"),
    );
    assert!(
        subjects.contains("Subject: full profile"),
        "{subjects}\n{}",
        c.logs()
    );
    let subjects = eventually("IMAP STARTTLS read", Duration::from_secs(30), || {
        imap_starttls_subjects(&imap, "alice", "a-long-secret")
    });
    assert!(subjects.contains("Subject: full profile"), "{subjects}");
    // The user row is in MariaDB.
    let rows = c.run(&[
        "exec",
        "-T",
        "mariadb",
        "mariadb",
        "-h",
        "127.0.0.1",
        "-uyarilo",
        "-pdb-secret",
        "yarilo",
        "-N",
        "-e",
        "SELECT username FROM users",
    ]);
    assert_eq!(rows.trim(), "alice");
}
