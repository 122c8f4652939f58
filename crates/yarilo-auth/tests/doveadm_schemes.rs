//! Hashes made by Debian's `doveadm pw` verify in yarilo, and hashes made
//! by yarilo verify in `doveadm pw -t`. Needs doveadm (scripts/setup-dev).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use yarilo_auth::{hash_password, Scheme, StoredPassword};

const SCHEMES: &[&str] = &[
    "PLAIN",
    "PLAIN.B64",
    "PLAIN-MD5",
    "LDAP-MD5",
    "SMD5",
    "SHA",
    "SHA1",
    "SHA256",
    "SHA512",
    "SSHA",
    "SSHA256",
    "SSHA512",
    "SHA256.HEX",
    "SSHA.HEX",
    "SHA512.B64",
    "MD5",
    "MD5-CRYPT",
    "SHA256-CRYPT",
    "SHA512-CRYPT",
    "BLF-CRYPT",
    "ARGON2I",
    "ARGON2ID",
    "PBKDF2",
    "CRAM-MD5",
    "SCRAM-SHA-1",
    "SCRAM-SHA-256",
];

fn doveadm() -> Command {
    match which("doveadm") {
        Some(p) => Command::new(p),
        None => panic!("doveadm not found in PATH: run scripts/setup-dev (installs dovecot-core)"),
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

fn doveadm_hash(scheme: &str, password: &str) -> String {
    let out = doveadm()
        .args(["pw", "-s", scheme, "-p", password])
        .output()
        .expect("run doveadm pw");
    assert!(
        out.status.success(),
        "doveadm pw -s {scheme}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn doveadm_verifies(hash: &str, password: &str) -> bool {
    doveadm()
        .args(["pw", "-t", hash, "-p", password])
        .output()
        .expect("run doveadm pw -t")
        .status
        .success()
}

#[test]
fn doveadm_hashes_of_every_scheme_verify_and_wrong_passwords_fail() {
    for password in [
        "sécret pw",
        "x",
        "a much longer password with: colons, and $ signs",
    ] {
        for scheme in SCHEMES {
            let hash = doveadm_hash(scheme, password);
            let stored = StoredPassword::parse(&hash, Scheme::Plain)
                .unwrap_or_else(|e| panic!("{hash}: {e}"));
            assert!(
                stored.verify(password.as_bytes()),
                "{scheme}: {hash} should verify"
            );
            assert!(
                !stored.verify(b"wrong"),
                "{scheme}: {hash} accepted a wrong password"
            );
            let mut truncated = password.as_bytes().to_vec();
            truncated.pop();
            assert!(
                !stored.verify(&truncated),
                "{scheme}: accepted a truncated password"
            );
        }
    }
}

#[test]
fn yarilo_hashes_verify_in_doveadm() {
    for name in [
        "PLAIN",
        "PLAIN-MD5",
        "LDAP-MD5",
        "SMD5",
        "SHA",
        "SHA256",
        "SHA512",
        "SSHA",
        "SSHA256",
        "SSHA512",
        "MD5-CRYPT",
        "SHA256-CRYPT",
        "SHA512-CRYPT",
        "BLF-CRYPT",
        "ARGON2I",
        "ARGON2ID",
        "PBKDF2",
        "CRAM-MD5",
        "SCRAM-SHA-1",
        "SCRAM-SHA-256",
    ] {
        let (scheme, _) = Scheme::parse(name).unwrap();
        let hash = hash_password(scheme, "sécret pw").unwrap();
        assert!(
            doveadm_verifies(&hash, "sécret pw"),
            "doveadm refused our {hash}"
        );
        assert!(
            !doveadm_verifies(&hash, "secret pw"),
            "doveadm accepted a wrong password for {hash}"
        );
    }
}
