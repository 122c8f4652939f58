//! Test helper for the multi-process tests in `tests/processes.rs`: a
//! separate OS process taking locks through a remote locks service.
//!
//! Environment: `LOCKS_CHILD_MODE` (`writer`: increment the counter file
//! `LOCKS_CHILD_ROUNDS` times under the lock, then print `DONE`; `holder`:
//! take a lock, print `HELD`, keep renewing until killed),
//! `LOCKS_CHILD_ADDR` (`host:port` of the service), `LOCKS_CHILD_FILE`.

use std::sync::Arc;
use std::time::Duration;

use yarilo_locks::{lock, ClientOptions, Endpoint, LockOptions, Locker, LocksClient};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("yarilo-locks-child: {name} is not set (this program is run by the locks tests)");
        std::process::exit(2)
    })
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("yarilo-locks-child: {what}: {e}");
    std::process::exit(1)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mode = var("LOCKS_CHILD_MODE");
    let addr = var("LOCKS_CHILD_ADDR");
    let file = std::path::PathBuf::from(var("LOCKS_CHILD_FILE"));
    let rounds: u32 = var("LOCKS_CHILD_ROUNDS").parse().unwrap_or(0);
    let locker: Arc<dyn Locker> =
        Arc::new(LocksClient::new(ClientOptions::single(Endpoint::Tcp(addr))));
    let opts = LockOptions {
        ttl: Duration::from_millis(1500),
        wait: Duration::from_secs(30),
        owner: format!("pid{}", std::process::id()),
    };
    match mode.as_str() {
        "writer" => {
            for _ in 0..rounds {
                let g = lock(locker.clone(), "file:counter", &opts)
                    .await
                    .unwrap_or_else(|e| fail("lock", e));
                // Read-modify-write of a shared file: loses updates unless
                // the lock serializes the processes.
                let text = std::fs::read_to_string(&file).unwrap_or_else(|e| fail("read", e));
                let n: u64 = text.trim().parse().unwrap_or_else(|e| fail("parse", e));
                tokio::time::sleep(Duration::from_millis(1)).await;
                let tmp = file.with_extension(format!("tmp{}", std::process::id()));
                std::fs::write(&tmp, format!("{}\n", n + 1)).unwrap_or_else(|e| fail("write", e));
                std::fs::rename(&tmp, &file).unwrap_or_else(|e| fail("rename", e));
                match g.release().await {
                    Ok(true) => {}
                    Ok(false) => fail("release", "lease had expired while held"),
                    Err(e) => fail("release", e),
                }
            }
            println!("DONE");
        }
        "holder" => {
            let _g = lock(locker, "file:held", &opts)
                .await
                .unwrap_or_else(|e| fail("lock", e));
            println!("HELD");
            // Renewing in the background until killed.
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        other => fail("LOCKS_CHILD_MODE", format!("unknown mode {other}")),
    }
}
