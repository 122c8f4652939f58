#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Probes and the backend-reg sidecar's signals, through real processes:
//!
//! - `/startupz` waits for a component's dependencies (a login whose auth
//!   service is not up yet);
//! - `/readyz` of a protocol backend goes stale when its request path is
//!   broken (the mail store base gone) although its listener still
//!   accepts, and the sidecar's heartbeat gate takes the pod out of the
//!   ring;
//! - a backend whose listeners fill up is drained with BACKEND-FLUSH (no
//!   rehash) and taken back with BACKEND-UP once the load falls.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, get, Process, BIN};

const TOKEN: &str = "seed-probes-token";

fn config(dir: &Path, data: &Path) -> String {
    format!(
        "general:\n  data_dir: {data}\n  hostname: test.invalid\n\
         telemetry:\n  readiness:\n    freshness_interval_seconds: 1\n    freshness_max_age_seconds: 3\n\
         locks_service:\n  mode: embedded\n  socket: {d}/locks.sock\n\
         locks_client:\n  mode: embedded\n  socket: {d}/locks.sock\n",
        d = dir.display(),
        data = data.display(),
    )
}

fn start_in(dir: &Path, data: &Path, file: &str, command: &str, extra: &str) -> Process {
    let path = dir.join(format!("{file}.yaml"));
    std::fs::write(&path, format!("{}{extra}", config(dir, data))).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([command, "--config", path.to_str().unwrap()]);
    Process::start_logged(cmd, &dir.join(format!("{file}.log")))
}

fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn backends(api: &str) -> serde_json::Value {
    let body = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            reqwest::Client::new()
                .get(format!("{api}/api/director/backends"))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        });
    serde_json::from_str(&body).unwrap()
}

fn find_backend<'a>(list: &'a serde_json::Value, ip: &str) -> Option<&'a serde_json::Value> {
    list.as_array().unwrap().iter().find(|b| b["ip"] == ip)
}

#[test]
fn startup_waits_for_dependencies_and_readiness_for_a_fresh_request_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), "alice:{PLAIN}secret::::::\n").unwrap();

    // A login whose auth service is not there yet: started, not "started".
    let auth_addr = format!("127.0.0.1:{}", free_port());
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let mut login = start_in(
        d,
        d,
        "imap-login",
        "imap-login",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {}\n  imaps:\n    enabled: false\n\
             login:\n  imap:\n    backend_addr: 127.0.0.1:1\n",
            free_port()
        ),
    );
    login.announced("imap        ");
    let (status, body) = get(&format!("{}/startupz", login.telemetry));
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("auth: "), "{body}");
    let auth = start_in(
        d,
        d,
        "auth",
        "auth",
        &format!("auth_service:\n  listen: {auth_addr}\n"),
    );
    assert!(auth.becomes_ready());
    wait_for("the login's startup probe", Duration::from_secs(10), || {
        get(&format!("{}/startupz", login.telemetry)).0 == 200
    });

    // A backend with its own store base, registered by a sidecar whose
    // gate is the backend's /readyz. A static pod keeps the tag non-empty.
    let locks = start_in(d, d, "locks", "locks", "");
    assert!(locks.becomes_ready());
    let mut director = start_in(
        d,
        d,
        "director",
        "director",
        &format!(
            "director_service:\n  listen: 127.0.0.1:0\n  backend_expire: 3\n  \
             mail_servers:\n    - host: 127.0.0.82\n      port: 143\n  \
             api:\n    listen: 127.0.0.1:0\n    token: {TOKEN}\n"
        ),
    );
    let director_addr = director.announced("director    ").trim().to_string();
    let api = format!(
        "http://{}",
        director.announced("admin api   http://").trim()
    );
    let store = d.join("store-81");
    std::fs::create_dir(&store).unwrap();
    let mut backend = start_in(
        d,
        &store,
        "imap-81",
        "imap",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.81\n    port: {}\n  imaps:\n    enabled: false\n",
            free_port()
        ),
    );
    backend.announced("imap        ");
    assert!(backend.becomes_ready(), "backend ready");
    assert_eq!(get(&format!("{}/startupz", backend.telemetry)).0, 200);
    let _reg = start_in(
        d,
        d,
        "reg-81",
        "backend-reg",
        &format!(
            "backend_register:\n  director_addr: {director_addr}\n  register_interval: 1\n  \
             address: 127.0.0.81\n  readyz_urls: [\"{}/readyz\"]\n",
            backend.telemetry
        ),
    );
    wait_for("the registration", Duration::from_secs(20), || {
        find_backend(&backends(&api), "127.0.0.81").is_some()
    });

    // The store base disappears: the listener still accepts, but the
    // request path is broken. Readiness says so, and the pod leaves the
    // ring once its withheld heartbeats let the lease lapse.
    std::fs::rename(&store, d.join("store-81.gone")).unwrap();
    wait_for("the backend to go unready", Duration::from_secs(15), || {
        let (status, body) = get(&format!("{}/readyz", backend.telemetry));
        status == 503 && body.contains("fresh: ")
    });
    let (_, body) = get(&format!("{}/readyz", backend.telemetry));
    assert!(
        !body.contains("listener"),
        "the listener itself is still accepting: {body}"
    );
    wait_for("the pod's eviction", Duration::from_secs(20), || {
        find_backend(&backends(&api), "127.0.0.81").is_none()
    });
    drop(director);
}

#[test]
fn a_full_backend_is_drained_with_flush_and_taken_back_with_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), "").unwrap();
    let mut auth = start_in(
        d,
        d,
        "auth",
        "auth",
        "auth_service:\n  listen: 127.0.0.1:0\n",
    );
    let auth_addr = auth.announced("auth        ").trim().to_string();
    let locks = start_in(d, d, "locks", "locks", "");
    assert!(locks.becomes_ready());
    let mut director = start_in(
        d,
        d,
        "director",
        "director",
        &format!(
            "director_service:\n  listen: 127.0.0.1:0\n  backend_expire: 30\n  \
             api:\n    listen: 127.0.0.1:0\n    token: {TOKEN}\n"
        ),
    );
    let director_addr = director.announced("director    ").trim().to_string();
    let api = format!(
        "http://{}",
        director.announced("admin api   http://").trim()
    );
    // Room for two connections; a peer that sends no preamble holds one.
    let mut backend = start_in(
        d,
        d,
        "imap-91",
        "imap",
        &format!(
            "auth_client:\n  address: {auth_addr}\nimap:\n  max_connections: 2\n\
             login:\n  preamble_timeout_ms: 60000\n\
             services:\n  imap:\n    address: 127.0.0.91\n    port: {}\n  imaps:\n    enabled: false\n",
            free_port()
        ),
    );
    let hop = backend.announced("imap        ").trim().to_string();
    assert!(backend.becomes_ready());
    let _reg = start_in(
        d,
        d,
        "reg-91",
        "backend-reg",
        &format!(
            "backend_register:\n  director_addr: {director_addr}\n  register_interval: 1\n  \
             address: 127.0.0.91\n  overload_percent: 90\n  overload_clear_percent: 60\n  \
             readyz_urls: [\"{}/readyz\"]\n",
            backend.telemetry
        ),
    );
    let draining =
        |api: &str| find_backend(&backends(api), "127.0.0.91").map(|b| b["draining"] == true);
    wait_for("the registration", Duration::from_secs(20), || {
        draining(&api) == Some(false)
    });
    let held: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(&hop).unwrap())
        .collect();
    wait_for("the load to show", Duration::from_secs(10), || {
        get(&format!("{}/loadz", backend.telemetry))
            .1
            .starts_with("100\n")
    });
    wait_for("BACKEND-FLUSH", Duration::from_secs(10), || {
        draining(&api) == Some(true)
    });
    let list = backends(&api);
    let b = find_backend(&list, "127.0.0.91").unwrap();
    assert_eq!(b["source"], "registered", "still in the ring: {b}");
    drop(held);
    wait_for("BACKEND-UP again", Duration::from_secs(10), || {
        draining(&api) == Some(false)
    });
    drop(director);
}
