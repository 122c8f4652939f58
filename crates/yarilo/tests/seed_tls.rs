#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `ring_tls_server_name` checks at start-up, on a real `yarilo director`
//! with internal TLS (director seed, "mTLS"): an ERROR when ring peers are
//! set but the name is empty, a warning when the name is not in the
//! director's own certificate, neither when it is.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Process, BIN};
use yarilo_tls::ca::{write_pair, Authority};
use yarilo_tls::Role;

fn director_log(dir: &Path, name: &str, ring_name: Option<&str>) -> String {
    let line = ring_name
        .map(|n| format!("  ring_tls_server_name: {n}\n"))
        .unwrap_or_default();
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &config,
        format!(
            "general:\n  data_dir: {d}\n\
             internal_tls:\n  enabled: true\n  cert: {d}/director.crt\n  key: {d}/director.key\n  \
             ca: {d}/ca.crt\n  server_name: yarilo-internal\n\
             director_service:\n  listen: 127.0.0.1:0\n  ring_secret: s3cret\n  \
             peers: [\"127.0.0.1:9\"]\n{line}  api:\n    listen: \"\"\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let log = dir.join(format!("{name}.log"));
    let mut cmd = Command::new(BIN);
    cmd.args(["director", "--config", config.to_str().unwrap()]);
    let mut p = Process::start_logged(cmd, &log);
    p.announced("director    ");
    // The checks run before the listener is announced; give the log a
    // moment to reach the file.
    std::thread::sleep(Duration::from_millis(200));
    drop(p);
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn ring_tls_server_name_is_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Authority::generate("test CA").unwrap();
    std::fs::write(d.join("ca.crt"), &ca.cert_pem).unwrap();
    let issued = ca
        .issue(
            &["yarilo-internal".into(), "yarilo-director-ring".into()],
            &[Role::Director],
        )
        .unwrap();
    write_pair(d, "director", &issued).unwrap();

    let empty = director_log(d, "empty", None);
    let error = empty
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("ring_tls_server_name is empty"));
    assert!(error.is_some(), "an ERROR for the empty name:\n{empty}");

    let absent = director_log(d, "absent", Some("not-in-the-cert"));
    let warning = absent
        .lines()
        .find(|l| l.contains("WARN") && l.contains("not-in-the-cert"));
    assert!(
        warning.is_some(),
        "a warning for the absent name:\n{absent}"
    );
    assert!(!absent.contains("ERROR"), "{absent}");

    let good = director_log(d, "good", Some("yarilo-director-ring"));
    assert!(
        !good.contains("is not a DNS SAN") && !good.contains("ring_tls_server_name is empty"),
        "nothing to say when the name is in the certificate:\n{good}"
    );
}
