//! AUTH throughput per password scheme over the real auth service, and
//! proof that slow hashes (BLF-CRYPT, ARGON2ID, …) run off the async
//! threads: PLAIN logins keep their latency while an ARGON2ID flood runs.
//!
//! `cargo run --release -p yarilo-auth --example auth_bench [-- SECONDS]`
//! Loopback only; bounded in time; stops by itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use yarilo_auth::client::{AuthClient, ClientSettings};
use yarilo_auth::db::{Db, PasswdFile};
use yarilo_auth::sasl::Mechanism;
use yarilo_auth::service::{self, ServiceSettings};
use yarilo_auth::{hash_password, AuthReply, AuthRequest, AuthSettings, Authenticator, Scheme};

const SCHEMES: &[Scheme] = &[
    Scheme::Plain,
    Scheme::Sha512,
    Scheme::Ssha512,
    Scheme::Pbkdf2,
    Scheme::Md5Crypt,
    Scheme::Sha512Crypt,
    Scheme::BlfCrypt,
    Scheme::Argon2id,
];

fn user_for(s: Scheme) -> String {
    format!("u-{}", s.name().to_ascii_lowercase())
}

fn client(addr: SocketAddr) -> AuthClient {
    AuthClient::new(ClientSettings {
        address: addr.to_string(),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(60),
        tls: None,
    })
}

fn request(i: usize) -> AuthRequest {
    AuthRequest {
        service: "imap".into(),
        client_ip: "192.0.2.1"
            .parse()
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
        local_ip: None,
        session: format!("bench-{i}"),
        secured: true,
    }
}

/// Runs logins for `user` with `concurrency` workers over `clients` for
/// `duration`; returns (logins, elapsed, per-login latencies).
async fn drive(
    clients: &[AuthClient],
    user: &str,
    concurrency: usize,
    duration: Duration,
) -> (usize, Duration, Vec<Duration>) {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let c = clients[w % clients.len()].clone();
        let user = user.to_string();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline {
                let t = Instant::now();
                match c
                    .login_plain(&request(w * 1_000_000 + i), &user, "bench pw")
                    .await
                {
                    Ok(AuthReply::Success(_)) => lat.push(t.elapsed()),
                    other => eprintln!("unexpected: {other:?}"),
                }
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        if let Ok(l) = t.await {
            all.extend(l);
        }
    }
    let n = all.len();
    (n, start.elapsed(), all)
}

fn pct(lat: &mut [Duration], p: f64) -> Duration {
    if lat.is_empty() {
        return Duration::ZERO;
    }
    lat.sort();
    let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
    lat[i.min(lat.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let per = Duration::from_secs(seconds);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("users");
        let mut text = String::new();
        for s in SCHEMES {
            text += &format!("{}:{}\n", user_for(*s), hash_password(*s, "bench pw")?);
        }
        std::fs::write(&path, text)?;
        let db = Db::PasswdFile(PasswdFile::new(&path, Scheme::Plain));
        let settings = AuthSettings {
            mechanisms: Mechanism::ALL.to_vec(),
            failure_delay: Duration::ZERO,
            penalty_max: Duration::ZERO,
            ..AuthSettings::default()
        };
        let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        let auth = Arc::new(Authenticator::new(settings, vec![db], vec![]));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(service::run(listener, auth, ServiceSettings::default(), None, async {
            let _ = stopped.await;
        }));
        let clients: Vec<AuthClient> = (0..4).map(|_| client(addr)).collect();

        println!("# AUTH PLAIN over the auth service, loopback, {workers} CPUs, 2 async threads, {workers} hash workers");
        println!("{:<14} {:>10} {:>12} {:>12}", "scheme", "logins/s", "p50 ms", "p99 ms");
        for s in SCHEMES {
            let (n, took, mut lat) = drive(&clients, &user_for(*s), 16, per).await;
            println!(
                "{:<14} {:>10.1} {:>12.2} {:>12.2}",
                s.name(),
                n as f64 / took.as_secs_f64(),
                pct(&mut lat, 0.5).as_secs_f64() * 1000.0,
                pct(&mut lat, 0.99).as_secs_f64() * 1000.0
            );
        }

        println!();
        println!("# PLAIN logins (4 workers) alone, then beside an ARGON2ID flood (32 workers)");
        let (n_alone, t_alone, mut lat_alone) = drive(&clients, &user_for(Scheme::Plain), 4, per).await;
        let flood_clients = clients.clone();
        let flood = tokio::spawn(async move {
            drive(&flood_clients, &user_for(Scheme::Argon2id), 32, per).await
        });
        let (n_mixed, t_mixed, mut lat_mixed) = drive(&clients, &user_for(Scheme::Plain), 4, per).await;
        let (n_argon, t_argon, _) = flood.await?;
        println!(
            "PLAIN alone:        {:>8.1} logins/s  p50 {:.2} ms  p99 {:.2} ms",
            n_alone as f64 / t_alone.as_secs_f64(),
            pct(&mut lat_alone, 0.5).as_secs_f64() * 1000.0,
            pct(&mut lat_alone, 0.99).as_secs_f64() * 1000.0
        );
        println!(
            "PLAIN under flood:  {:>8.1} logins/s  p50 {:.2} ms  p99 {:.2} ms",
            n_mixed as f64 / t_mixed.as_secs_f64(),
            pct(&mut lat_mixed, 0.5).as_secs_f64() * 1000.0,
            pct(&mut lat_mixed, 0.99).as_secs_f64() * 1000.0
        );
        println!(
            "ARGON2ID flood:     {:>8.1} logins/s (32 concurrent)",
            n_argon as f64 / t_argon.as_secs_f64()
        );
        let _ = stop.send(());
        let _ = server.await;
        anyhow::Ok(())
    })
}
