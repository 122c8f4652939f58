//! The backend-reg sidecar against a real director over TCP: it
//! registers, heartbeats, is evicted when killed (lease), leaves at once
//! on shutdown (BACKEND-DOWN), and withholds heartbeats while unready.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use yarilo_config::{DirectorService, MailServer};
use yarilo_director::backend_reg::{self, RegSettings};
use yarilo_wire::LineCodec;

const T: Duration = Duration::from_secs(10);

struct Client(Framed<TcpStream, LineCodec>);

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let mut f = Framed::new(
            TcpStream::connect(addr).await.unwrap(),
            LineCodec::default(),
        );
        tokio::time::timeout(T, f.next()).await.unwrap();
        f.send(&["VERSION", "director", "1", "0"][..])
            .await
            .unwrap();
        Client(f)
    }
    async fn lookup(&mut self, user: &str) -> String {
        self.0.send(&["LOOKUP", user, ""][..]).await.unwrap();
        let r = tokio::time::timeout(T, self.0.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(r[0], "OK", "{r:?}");
        r[1].clone()
    }
    /// Polls fresh users until one lands on `ip` (true) or `limit` passes.
    async fn some_user_on(&mut self, ip: &str, round: &mut u32, limit: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            *round += 1;
            for i in 0..64 {
                let u = format!("probe{round}-{i}@d.test");
                if self.lookup(&u).await == ip {
                    return Some(u);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

async fn director(backend_expire: u64) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let config = DirectorService {
        backend_expire,
        mail_servers: vec![MailServer {
            host: "127.0.0.11".into(),
            port: 143,
            tag: String::new(),
            vhosts: 100,
        }],
        ..DirectorService::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        yarilo_director::run(&config, listener, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    (addr, tx)
}

/// A readiness endpoint answering 200 or 503 per `ready`.
async fn readyz(ready: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let ready = ready.load(Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let status = if ready { "200 OK" } else { "503 Unavailable" };
                let _ = s
                    .write_all(format!("HTTP/1.0 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            });
        }
    });
    format!("http://{addr}/readyz")
}

fn reg(director: SocketAddr, ip: &str, readyz: Vec<String>) -> RegSettings {
    RegSettings {
        director_addr: director.to_string(),
        interval: Duration::from_secs(1),
        ip: ip.parse().unwrap(),
        port: 143,
        tag: String::new(),
        vhosts: 100,
        readyz_urls: readyz,
        overload_percent: 0,
        overload_clear_percent: 0,
        tls: None,
    }
}

#[tokio::test]
async fn killed_sidecar_is_evicted_by_lease_and_stopped_one_leaves_at_once() {
    let (addr, _stop) = director(3).await;
    let ready = Arc::new(AtomicBool::new(true));
    let url = readyz(ready.clone()).await;
    let mut c = Client::connect(addr).await;
    let mut round = 0;

    // A registers and gets users.
    let a = tokio::spawn(backend_reg::run(
        reg(addr, "127.0.0.31", vec![url.clone()]),
        std::future::pending(),
    ));
    let pinned_a = c
        .some_user_on("127.0.0.31", &mut round, T)
        .await
        .expect("registered backend receives users");

    // SIGKILL-like: the sidecar vanishes without BACKEND-DOWN. Its lease
    // expires and its pinned user re-routes.
    a.abort();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        if c.lookup(&pinned_a).await == "127.0.0.11" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // B registers; on shutdown it sends BACKEND-DOWN and is gone at once.
    let (b_stop_tx, b_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let b = tokio::spawn(backend_reg::run(
        reg(addr, "127.0.0.32", vec![url.clone()]),
        async {
            let _ = b_stop_rx.await;
        },
    ));
    let pinned_b = c
        .some_user_on("127.0.0.32", &mut round, T)
        .await
        .expect("second backend receives users");
    b_stop_tx.send(()).unwrap();
    tokio::time::timeout(T, b).await.unwrap().unwrap();
    assert_eq!(c.lookup(&pinned_b).await, "127.0.0.11");
}

#[tokio::test]
async fn an_unready_pod_is_never_registered() {
    let (addr, _stop) = director(3).await;
    let ready = Arc::new(AtomicBool::new(false));
    let url = readyz(ready.clone()).await;
    assert!(!backend_reg::all_ready(std::slice::from_ref(&url), T).await);
    ready.store(true, Ordering::SeqCst);
    assert!(backend_reg::all_ready(std::slice::from_ref(&url), T).await);
    ready.store(false, Ordering::SeqCst);
    let task = tokio::spawn(backend_reg::run(
        reg(addr, "127.0.0.33", vec![url]),
        std::future::pending(),
    ));
    // Heartbeats are withheld: three intervals later nobody lands there.
    let mut c = Client::connect(addr).await;
    let mut round = 0;
    assert!(c
        .some_user_on("127.0.0.33", &mut round, Duration::from_secs(3))
        .await
        .is_none());
    // Ready: it registers.
    ready.store(true, Ordering::SeqCst);
    assert!(c.some_user_on("127.0.0.33", &mut round, T).await.is_some());
    task.abort();
}
