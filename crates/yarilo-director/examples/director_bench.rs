//! Director benchmark: LOOKUPs per second on one replica and memory for
//! 1M active users.
//!
//! cargo run --release -p yarilo-director --example director_bench -- [users] [seconds] [connections] [depth]
//!
//! Three figures:
//! 1. state machine: `Director::lookup` on one thread (no I/O);
//! 2. service: LOOKUPs over TCP on 127.0.0.1 through the real driver,
//!    `connections` clients each pipelining batches of `depth` (128);
//! 3. memory: bytes per pinned user (table estimate and RSS growth).

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark measures wall time; the clock ban is for the state machine.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use yarilo_director::service::{serve, Shared, Timeouts};
use yarilo_director::{Director, DirectorId, Settings};
use yarilo_wire::LineCodec;

fn rss_bytes() -> u64 {
    // Resident pages × page size, from /proc (Linux).
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn user(i: u64) -> String {
    format!("user{i}@example{}.test", i % 97)
}

fn director(backends: u32) -> Director {
    let mut d = Director::new(Settings::defaults(), DirectorId(1));
    for i in 0..backends {
        let ip = format!("10.0.{}.{}", i / 250, i % 250 + 1).parse().unwrap();
        d.add_static(0, ip, 143, "", 100);
    }
    d
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let users: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let conns: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    let depth: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(128);

    // 3. Memory: pin `users` users.
    let rss0 = rss_bytes();
    let mut d = director(5);
    let t = Instant::now();
    for i in 0..users {
        d.lookup(0, &user(i), "", None).expect("backend");
    }
    let pin_secs = t.elapsed().as_secs_f64();
    let rss1 = rss_bytes();
    println!(
        "memory: {users} pinned users: table {:.1} B/user (estimate), RSS growth {:.1} B/user; pinning took {:.2}s ({:.0}/s)",
        d.users().table_bytes() as f64 / users as f64,
        rss1.saturating_sub(rss0) as f64 / users as f64,
        pin_secs,
        users as f64 / pin_secs
    );

    // 1. State machine: repeated LOOKUPs of pinned users.
    let names: Vec<String> = (0..users.min(200_000)).map(user).collect();
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < Duration::from_secs(seconds.min(3)) {
        for name in &names[..10_000.min(names.len())] {
            d.lookup(1000, name, "", Some(yarilo_director::Proto::Imap))
                .expect("backend");
        }
        n += 10_000.min(names.len()) as u64;
    }
    println!(
        "state machine: {:.0} LOOKUPs/s (one thread, {} users pinned)",
        n as f64 / t.elapsed().as_secs_f64(),
        d.users().len()
    );

    // 2. Service over TCP.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let shared = Shared::new(
            d,
            Timeouts {
                ping_interval: Duration::from_secs(30),
                ping_timeout: Duration::from_secs(10),
                write_timeout: Some(Duration::from_secs(10)),
                shutdown_grace: Duration::from_secs(30),
            },
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(shared, listener, async {
            let _ = stop_rx.await;
        }));
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut clients = Vec::new();
        for c in 0..conns {
            let names: Vec<String> = (0..20_000u64).map(|i| user(i * conns as u64 + c as u64)).collect();
            clients.push(tokio::spawn(async move {
                let stream = TcpStream::connect(addr).await.expect("connect");
                stream.set_nodelay(true).ok();
                let mut f = Framed::new(stream, LineCodec::default());
                f.next().await;
                f.send(&["VERSION", "director", "1", "0"][..]).await.expect("send");
                let mut done = 0u64;
                let mut i = 0usize;
                while Instant::now() < deadline {
                    for _ in 0..depth {
                        let name = names[i % names.len()].as_str();
                        i += 1;
                        f.feed(&["LOOKUP", name, "", "imap"][..]).await.expect("feed");
                    }
                    SinkExt::<&[&str]>::flush(&mut f).await.expect("flush");
                    for _ in 0..depth {
                        match f.next().await {
                            Some(Ok(Ok(r))) if r[0] == "OK" => done += 1,
                            other => panic!("bad reply {other:?}"),
                        }
                    }
                }
                done
            }));
        }
        let start = Instant::now();
        let mut total = 0;
        for c in clients {
            total += c.await.expect("client");
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "service: {:.0} LOOKUPs/s over TCP ({conns} connections, pipelined {depth}, {total} in {secs:.1}s)",
            total as f64 / secs
        );
        let _ = stop_tx.send(());
        let _ = server.await;
    });
}
