//! The concurrent-writer test through the remote `Locker`: two writer
//! processes, each talking to its own locks service replica, both replicas
//! sharing one real `redis-server`. Afterwards no UID is doubled, no
//! acknowledged message is lost, and the replicas did grant the locks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Arc;

use common::torture_bin;
use prometheus_client::registry::Registry;
use yarilo_config::{LocksMode, LocksService as ServiceConfig, Secret};
use yarilo_locks::{LocksService, MemoryEventBus, MemoryLocker};
use yarilo_store::{Store, StoreSettings, UserInfo};
use yarilo_testkit::RedisServer;

async fn replica(
    redis: &RedisServer,
    registry: &mut Registry,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let cfg = ServiceConfig {
        mode: LocksMode::Remote,
        listen: "127.0.0.1:0".into(),
        redis: Secret::new(redis.url()),
        ..ServiceConfig::default()
    };
    let svc = LocksService::bind(&cfg, None).await.unwrap();
    svc.register_metrics(registry);
    let addr = svc.local_addr().unwrap().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(svc.serve(async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_through_two_locks_replicas_on_one_redis_stay_consistent() {
    let redis = RedisServer::start();
    let mut reg_a = Registry::default();
    let mut reg_b = Registry::default();
    let (a, _stop_a) = replica(&redis, &mut reg_a).await;
    let (b, _stop_b) = replica(&redis, &mut reg_b).await;
    let dir = tempfile::tempdir().unwrap();
    let loc = format!("maildir:{}/%u", dir.path().display());
    let spawn = |endpoints: String, seed: &str| {
        tokio::process::Command::new(torture_bin())
            .args([loc.as_str(), "remote", "INBOX", "append-flag", "100", seed])
            .env("YARILO_TORTURE_LOCKS", endpoints)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output()
    };
    let (out_a, out_b) = tokio::time::timeout(std::time::Duration::from_secs(240), async {
        tokio::join!(
            spawn(format!("{a},{b}"), "5"),
            spawn(format!("{b},{a}"), "9")
        )
    })
    .await
    .expect("writers did not finish in 240 s");
    let mut acked = Vec::new();
    for out in [out_a.unwrap(), out_b.unwrap()] {
        assert!(
            out.status.success(),
            "writer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut p = line.split_whitespace();
            if p.next() == Some("ACK") {
                let uid: u32 = p.next().unwrap().parse().unwrap();
                acked.push((uid, p.next().unwrap().to_string()));
            }
        }
    }
    assert_eq!(acked.len(), 200);
    let mut uids = HashSet::new();
    for (uid, _) in &acked {
        assert!(uids.insert(*uid), "uid {uid} acknowledged twice");
    }

    let store = Store::new(
        StoreSettings::new(&loc),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap();
    let user = store
        .user(&UserInfo {
            user: "remote".into(),
            home: String::new(),
        })
        .await
        .unwrap();
    let mb = user.open("INBOX").await.unwrap();
    assert_eq!(mb.view().len(), 200);
    for (uid, id) in &acked {
        let data = mb
            .read_message(*uid)
            .await
            .unwrap_or_else(|e| panic!("uid {uid} lost: {e}"));
        assert!(String::from_utf8_lossy(&data).contains(&format!("X-Torture-Id: {id}\r\n")));
    }

    // Both replicas granted locks: the writers really serialized through them.
    for reg in [&reg_a, &reg_b] {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, reg).unwrap();
        let granted: f64 = text
            .lines()
            .filter(|l| {
                l.starts_with("yarilo_locks_requests_total")
                    && l.contains("command=\"LOCK\"")
                    && l.contains("result=\"ok\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(granted > 0.0, "a replica granted no lock:\n{text}");
    }
}
