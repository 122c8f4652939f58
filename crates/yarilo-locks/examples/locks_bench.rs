//! LOCK+UNLOCK round trips per second and their latency, embedded (unix
//! socket, in-memory) and remote (TCP, Redis), through the real client and
//! service.
//!
//! ```text
//! cargo run --release -p yarilo-locks --example locks-bench -- [iterations] [clients]
//! ```
//!
//! Remote mode starts its own `redis-server` on a free loopback port
//! unless `REDIS_URL` is set. Each client runs `iterations` LOCK+UNLOCK
//! pairs on its own resource, sequentially; with several clients they run
//! concurrently over their own connections. The `-1c` rows run 4× as many
//! tasks sharing one client (one pipelined connection), as the sessions of
//! one process do.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use yarilo_config::{LocksMode, LocksService as ServiceConfig, Secret};
use yarilo_locks::{Acquire, ClientOptions, Endpoint, Locker, LocksClient, LocksService};

struct Redis(Child);
impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis(dir: &std::path::Path) -> Result<(Redis, String), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("redis-server: {e} (install it with scripts/setup-dev)"))?;
    let redis = Redis(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("redis-server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((redis, format!("redis://127.0.0.1:{port}/0")))
}

async fn run_clients(
    make: impl Fn() -> LocksClient,
    iterations: usize,
    clients: usize,
) -> Result<(f64, Vec<Duration>), String> {
    // Warm up the connections and Redis script cache.
    let mut handles = Vec::new();
    let start = Instant::now();
    for c in 0..clients {
        let client = Arc::new(make());
        handles.push(tokio::spawn(async move {
            let resource = format!("mbox:bench{c}:INBOX");
            let mut lat = Vec::with_capacity(iterations);
            for i in 0..iterations + 100 {
                let t = Instant::now();
                let Ok(Acquire::Acquired { lock_id }) = client
                    .try_acquire(&resource, "bench", Duration::from_secs(30))
                    .await
                else {
                    return Err("LOCK failed".to_string());
                };
                if !client.release(&lock_id).await.map_err(|e| e.to_string())? {
                    return Err("UNLOCK found nothing".into());
                }
                if i >= 100 {
                    lat.push(t.elapsed());
                }
            }
            Ok(lat)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.map_err(|e| e.to_string())??);
    }
    let secs = start.elapsed().as_secs_f64();
    all.sort();
    Ok((all.len() as f64 / secs, all))
}

fn pct(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn report(name: &str, clients: usize, (rate, lat): (f64, Vec<Duration>)) {
    println!(
        "{name:<9} clients={clients:<3} pairs={:<7} {:>9.0} LOCK+UNLOCK/s  p50={:>7.1}µs  p99={:>7.1}µs",
        lat.len(),
        rate,
        pct(&lat, 0.50).as_secs_f64() * 1e6,
        pct(&lat, 0.99).as_secs_f64() * 1e6,
    );
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let iterations: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let clients: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(4);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;

    // Embedded: unix socket, MemoryLocker.
    let socket = dir.path().join("locks.sock");
    let cfg = ServiceConfig {
        mode: LocksMode::Embedded,
        socket: socket.display().to_string(),
        ..ServiceConfig::default()
    };
    let svc = LocksService::bind(&cfg, None)
        .await
        .map_err(|e| e.to_string())?;
    let (stop_e, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(svc.serve(async move {
        let _ = stop_rx.await;
    }));
    let ep = Endpoint::Unix(socket.clone());
    let mk = || LocksClient::new(ClientOptions::single(ep.clone()));
    report("embedded", 1, run_clients(mk, iterations, 1).await?);
    report(
        "embedded",
        clients,
        run_clients(mk, iterations, clients).await?,
    );
    let shared = mk();
    report(
        "embed-1c",
        clients * 4,
        run_clients(|| shared.clone(), iterations / 4, clients * 4).await?,
    );
    let _ = stop_e.send(());

    // Remote: TCP, Redis.
    let (_redis, url) = match std::env::var("REDIS_URL") {
        Ok(u) => (None, u),
        Err(_) => {
            let (r, u) = start_redis(dir.path())?;
            (Some(r), u)
        }
    };
    let cfg = ServiceConfig {
        mode: LocksMode::Remote,
        listen: "127.0.0.1:0".into(),
        redis: Secret::new(url),
        ..ServiceConfig::default()
    };
    let svc = LocksService::bind(&cfg, None)
        .await
        .map_err(|e| e.to_string())?;
    let addr = svc.local_addr().ok_or("no address")?.to_string();
    let (stop_r, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(svc.serve(async move {
        let _ = stop_rx.await;
    }));
    let ep = Endpoint::Tcp(addr);
    let mk = || LocksClient::new(ClientOptions::single(ep.clone()));
    report("remote", 1, run_clients(mk, iterations, 1).await?);
    report(
        "remote",
        clients,
        run_clients(mk, iterations, clients).await?,
    );
    let shared = mk();
    report(
        "remote-1c",
        clients * 4,
        run_clients(|| shared.clone(), iterations / 4, clients * 4).await?,
    );
    let _ = stop_r.send(());
    Ok(())
}
