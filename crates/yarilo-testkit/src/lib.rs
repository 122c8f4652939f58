//! Test support shared by yarilo's crates. Never used outside tests.
//!
//! - [`RedisServer`]: a real `redis-server` with its own port and temp
//!   dir, killed on drop; a missing binary fails the test with the fix.
//! - [`eventually`]: poll a condition with a bound instead of sleeping.
//! - [`rerun`]: re-run the current test in a child process (a server to
//!   SIGKILL, a private network namespace) without a second test entry.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: failing loudly is the point

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod rerun;

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    // Bind port 0, read the port, release it for redis-server.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RedisServer {
            child: None,
            port: free_port(),
            dir,
        };
        s.spawn();
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn spawn(&mut self) {
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir.path().to_str().unwrap(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-server ({e}); install it with scripts/setup-dev")
            });
        // Wait for the "Ready to accept connections" log line (bounded).
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = false;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if !ready && line.contains("Ready to accept connections") {
                    ready = true;
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("redis-server did not become ready within 10s");
        self.child = Some(child);
    }

    /// Kills the server (state is lost, like a crash).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The port may linger briefly; retry the bind check.
            if TcpListener::bind(("127.0.0.1", self.port)).is_ok() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Polls `cond` every 50 ms until true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
