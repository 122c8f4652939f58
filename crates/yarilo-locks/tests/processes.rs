//! Separate OS processes coordinating through two remote locks replicas:
//! the test binary re-runs itself as the child processes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use yarilo_config::{LocksMode, LocksService as ServiceConfig, Secret};
use yarilo_locks::{Acquire, ClientOptions, Endpoint, Locker, LocksClient, LocksService};
use yarilo_testkit::{eventually, RedisServer};

struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(mode: &str, addr: &str, file: &Path, rounds: u32) -> Kid {
    Kid(Command::new(env!("CARGO_BIN_EXE_yarilo-locks-child"))
        .env("LOCKS_CHILD_MODE", mode)
        .env("LOCKS_CHILD_ADDR", addr)
        .env("LOCKS_CHILD_FILE", file)
        .env("LOCKS_CHILD_ROUNDS", rounds.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap())
}

async fn start_replica(redis: &RedisServer) -> (String, tokio::sync::oneshot::Sender<()>) {
    let cfg = ServiceConfig {
        mode: LocksMode::Remote,
        listen: "127.0.0.1:0".into(),
        redis: Secret::new(redis.url()),
        ..ServiceConfig::default()
    };
    let svc = LocksService::bind(&cfg, None).await.unwrap();
    let addr = svc.local_addr().unwrap().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(svc.serve(async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

fn client(addr: &str) -> LocksClient {
    LocksClient::new(ClientOptions::single(Endpoint::Tcp(addr.to_string())))
}

fn wait_line(kid: &mut Kid, want: &str) {
    let out = kid.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = want.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // libtest prints "test <name> ... " without a newline first.
            if line.trim().ends_with(wanted.as_str()) {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("child did not print {want}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_two_replicas_serialize_writes_to_a_shared_file() {
    let redis = RedisServer::start();
    let (a, _sa) = start_replica(&redis).await;
    let (b, _sb) = start_replica(&redis).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter");
    std::fs::write(&file, "0\n").unwrap();
    let mut k1 = spawn_child("writer", &a, &file, 40);
    let mut k2 = spawn_child("writer", &b, &file, 40);
    tokio::task::spawn_blocking(move || {
        wait_line(&mut k1, "DONE");
        wait_line(&mut k2, "DONE");
    })
    .await
    .unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "80");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_loses_its_lock_after_the_ttl_despite_renewing() {
    let redis = RedisServer::start();
    let (a, _sa) = start_replica(&redis).await;
    let dir = tempfile::tempdir().unwrap();
    let mut kid = spawn_child("holder", &a, &dir.path().join("unused"), 0);
    let mut kid = tokio::task::spawn_blocking(move || {
        wait_line(&mut kid, "HELD");
        kid
    })
    .await
    .unwrap();
    let other = client(&a);
    let ttl = Duration::from_secs(5);
    // Held, and kept held past its 1.5 s TTL by the child's renewer.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(matches!(
        other.try_acquire("file:held", "me", ttl).await.unwrap(),
        Acquire::Busy { .. }
    ));
    kid.0.kill().unwrap();
    let _ = kid.0.wait();
    assert!(
        eventually(Duration::from_secs(10), || async {
            matches!(
                other.try_acquire("file:held", "me", ttl).await,
                Ok(Acquire::Acquired { .. })
            )
        })
        .await,
        "the TTL releases a killed holder's lock"
    );
}
