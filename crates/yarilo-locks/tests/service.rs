//! The locks service end to end: real sockets, real redis-server.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use yarilo_config::{LocksMode, LocksService as ServiceConfig, Secret};
use yarilo_locks::{
    lock, Acquire, ClientOptions, Endpoint, Event, EventBus, LockOptions, Locker, LocksClient,
    LocksService,
};
use yarilo_testkit::{eventually, RedisServer};

fn remote_config(redis: &RedisServer) -> ServiceConfig {
    ServiceConfig {
        mode: LocksMode::Remote,
        listen: "127.0.0.1:0".into(),
        redis: Secret::new(redis.url()),
        ..ServiceConfig::default()
    }
}

struct Running {
    addr: String,
    readiness: yarilo_locks::Readiness,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.abort();
    }
}

async fn start(cfg: ServiceConfig) -> Running {
    let service = LocksService::bind(&cfg, None).await.unwrap();
    let addr = service
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let readiness = service.readiness();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        service
            .serve(async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    Running {
        addr,
        readiness,
        stop: Some(tx),
        task,
    }
}

fn tcp_client(addrs: &[&str]) -> LocksClient {
    let mut o = ClientOptions::single(Endpoint::Tcp(addrs[0].to_string()));
    o.endpoints = addrs.iter().map(|a| Endpoint::Tcp(a.to_string())).collect();
    o.request_timeout = Duration::from_secs(3);
    o.connect_timeout = Duration::from_secs(1);
    LocksClient::new(o)
}

/// Sends raw lines, returns the raw reply lines.
async fn raw_exchange<S>(stream: S, lines: &[&str], replies: usize) -> Vec<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (r, mut w) = tokio::io::split(stream);
    for l in lines {
        w.write_all(l.as_bytes()).await.unwrap();
    }
    w.flush().await.unwrap();
    let mut r = BufReader::new(r);
    let mut out = Vec::new();
    for _ in 0..replies {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut line))
            .await
            .expect("reply within 5s")
            .unwrap();
        out.push(line);
    }
    out
}

#[tokio::test]
async fn embedded_unix_socket_speaks_the_design_protocol_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("locks.sock");
    let cfg = ServiceConfig {
        mode: LocksMode::Embedded,
        socket: socket.display().to_string(),
        ..ServiceConfig::default()
    };
    let _svc = start(cfg).await;
    let s = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let replies = raw_exchange(
        s,
        &[
            "VERSION\t1\n",
            "LOCK\tmbox:u:INBOX\timap-1\t30000\n",
            "LOCK\tmbox:u:INBOX\timap-2\t30000\n",
            "EVENT\tmbox:u:INBOX\tappend\t7\n",
            "BOGUS\n",
            "RENEW\tnope\t1000\n",
            "UNLOCK\tnope\n",
        ],
        6,
    )
    .await;
    assert_eq!(replies[0], "VERSION\t1\tOK\n");
    assert!(replies[1].starts_with("OK\t"), "{replies:?}");
    assert_eq!(replies[2], "BUSY\timap-1\n");
    // EVENT has no reply; the unknown command is answered and not fatal.
    assert!(replies[3].starts_with("ERROR\tsyntax\t"), "{replies:?}");
    assert_eq!(replies[4], "EXPIRED\n");
    assert_eq!(replies[5], "NOT_FOUND\n");

    // The client over the same socket: exclusive, then free after release.
    let client = LocksClient::new(ClientOptions::single(Endpoint::Unix(socket.clone())));
    let ttl = Duration::from_secs(5);
    let Acquire::Acquired { lock_id } = client.try_acquire("r", "a", ttl).await.unwrap() else {
        panic!("first acquire");
    };
    assert_eq!(
        client.try_acquire("r", "b", ttl).await.unwrap(),
        Acquire::Busy { owner: "a".into() }
    );
    assert!(client.renew(&lock_id, ttl).await.unwrap());
    assert!(client.release(&lock_id).await.unwrap());
    assert!(!client.release(&lock_id).await.unwrap());
}

#[tokio::test]
async fn a_client_must_say_version_first() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("l.sock");
    let cfg = ServiceConfig {
        socket: socket.display().to_string(),
        ..ServiceConfig::default()
    };
    let _svc = start(cfg).await;
    let s = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let r = raw_exchange(s, &["LOCK\tr\to\t100\n"], 1).await;
    assert!(r[0].starts_with("ERROR\tversion\t"), "{r:?}");
}

async fn writers_serialize(clients: Vec<LocksClient>, rounds: u32) {
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let inside = inside.clone();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let locker: Arc<dyn Locker> = Arc::new(c);
            let opts = LockOptions {
                ttl: Duration::from_secs(10),
                wait: Duration::from_secs(20),
                owner: format!("writer-{i}"),
            };
            for _ in 0..rounds {
                let g = lock(locker.clone(), "mbox:alice:INBOX", &opts)
                    .await
                    .unwrap();
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two writers inside the lock at once"
                );
                // A read-modify-write that would lose updates if two
                // writers overlapped.
                let v = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_micros(200)).await;
                counter.store(v + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                assert!(g.release().await.unwrap(), "lease held until release");
            }
        }));
    }
    let n = tasks.len() as u64;
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), n * rounds as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_serialize_writers_from_several_clients() {
    let redis = RedisServer::start();
    let a = start(remote_config(&redis)).await;
    let b = start(remote_config(&redis)).await;
    // Three clients on each replica, each with its own connection.
    let clients = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                tcp_client(&[&a.addr])
            } else {
                tcp_client(&[&b.addr])
            }
        })
        .collect();
    writers_serialize(clients, 25).await;
}

#[tokio::test]
async fn a_lock_granted_by_one_replica_is_released_through_the_other() {
    let redis = RedisServer::start();
    let a = start(remote_config(&redis)).await;
    let b = start(remote_config(&redis)).await;
    let ca = tcp_client(&[&a.addr]);
    let cb = tcp_client(&[&b.addr]);
    let ttl = Duration::from_secs(10);
    let Acquire::Acquired { lock_id } = ca.try_acquire("idx:bob", "pod-a", ttl).await.unwrap()
    else {
        panic!("acquire");
    };
    assert_eq!(
        cb.try_acquire("idx:bob", "pod-b", ttl).await.unwrap(),
        Acquire::Busy {
            owner: "pod-a".into()
        }
    );
    // Redis holds the design's key and value shape.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let v: String = redis::cmd("GET")
        .arg("lock:idx:bob")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(v.starts_with("pod-a|"), "{v}");
    assert!(cb.renew(&lock_id, ttl).await.unwrap());
    assert!(cb.release(&lock_id).await.unwrap());
    assert!(matches!(
        cb.try_acquire("idx:bob", "pod-b", ttl).await.unwrap(),
        Acquire::Acquired { .. }
    ));
}

#[tokio::test]
async fn a_killed_client_loses_its_lock_after_the_ttl() {
    let redis = RedisServer::start();
    let svc = start(remote_config(&redis)).await;
    // The "killed" client: a raw connection that takes the lock and is
    // then torn down without UNLOCK, as the kernel does for a dead process.
    let s = tokio::net::TcpStream::connect(&svc.addr).await.unwrap();
    let r = raw_exchange(s, &["VERSION\t1\n", "LOCK\tmbox:u:Sent\tdoomed\t1500\n"], 2).await;
    assert!(r[1].starts_with("OK\t"), "{r:?}");
    // (the stream was dropped inside raw_exchange)
    let other = tcp_client(&[&svc.addr]);
    let ttl = Duration::from_secs(5);
    assert_eq!(
        other
            .try_acquire("mbox:u:Sent", "survivor", ttl)
            .await
            .unwrap(),
        Acquire::Busy {
            owner: "doomed".into()
        },
        "still held right after the crash"
    );
    let freed = eventually(Duration::from_secs(10), || async {
        matches!(
            other.try_acquire("mbox:u:Sent", "survivor", ttl).await,
            Ok(Acquire::Acquired { .. })
        )
    })
    .await;
    assert!(freed, "lock must expire by its TTL");
}

#[tokio::test]
async fn readiness_follows_redis_without_a_restart() {
    let mut redis = RedisServer::start();
    let svc = start(remote_config(&redis)).await;
    let client = tcp_client(&[&svc.addr]);
    assert!(svc.readiness.ready().await);
    redis.stop();
    let r = svc.readiness.clone();
    assert!(
        eventually(Duration::from_secs(5), || {
            let r = r.clone();
            async move { !r.ready().await }
        })
        .await,
        "not ready within seconds of Redis going away"
    );
    let err = client
        .try_acquire("r", "o", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, yarilo_locks::LockError::Unavailable(_)),
        "{err:?}"
    );
    redis.restart();
    assert!(
        eventually(Duration::from_secs(10), || {
            let r = r.clone();
            async move { r.ready().await }
        })
        .await,
        "ready again once Redis is back"
    );
    assert!(matches!(
        client
            .try_acquire("r", "o", Duration::from_secs(1))
            .await
            .unwrap(),
        Acquire::Acquired { .. }
    ));
}

#[tokio::test]
async fn events_sent_to_one_replica_reach_subscribers_of_the_other() {
    let redis = RedisServer::start();
    let a = start(remote_config(&redis)).await;
    let b = start(remote_config(&redis)).await;
    let bus_a = tcp_client(&[&a.addr]).event_bus();
    let bus_b = tcp_client(&[&b.addr]).event_bus();
    let mut rx = bus_a.subscribe();
    bus_a.wait_subscribed().await;
    let ev = Event {
        resource: "mbox:u:INBOX".into(),
        kind: "append".into(),
        payload: "uid=7\tx".into(),
    };
    // The replica's own Redis subscription may still be coming up: send
    // until one arrives (bounded).
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            bus_b.publish(ev.clone());
            match tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
                Ok(Ok(e)) if e.resource != "*" => return e,
                _ => continue,
            }
        }
    })
    .await
    .expect("event delivered across replicas");
    assert_eq!(got, ev);
}

#[tokio::test]
async fn a_client_fails_over_to_the_next_endpoint() {
    let redis = RedisServer::start();
    let svc = start(remote_config(&redis)).await;
    // A port nobody listens on, first in the list.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let client = tcp_client(&[&dead, &svc.addr]);
    assert!(matches!(
        client
            .try_acquire("r", "o", Duration::from_secs(1))
            .await
            .unwrap(),
        Acquire::Acquired { .. }
    ));
}

#[tokio::test]
async fn an_over_long_line_is_refused_and_the_connection_closed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("l.sock");
    let cfg = ServiceConfig {
        socket: socket.display().to_string(),
        ..ServiceConfig::default()
    };
    let _svc = start(cfg).await;
    let mut s = tokio::net::UnixStream::connect(&socket).await.unwrap();
    s.write_all(b"VERSION\t1\n").await.unwrap();
    // No LF in sight: the service must not buffer this forever.
    let junk = vec![b'x'; 64 * 1024];
    let _ = s.write_all(&junk).await;
    let mut r = BufReader::new(s);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut line))
            .await
            .expect("the service answers and closes within 5s")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        lines.push(line);
    }
    assert_eq!(lines[0], "VERSION\t1\tOK\n");
    assert!(lines[1].starts_with("ERROR\tsyntax\t"), "{lines:?}");
}

#[tokio::test]
async fn a_writer_carries_on_through_a_replica_going_away() {
    let redis = RedisServer::start();
    let a = start(remote_config(&redis)).await;
    let b = start(remote_config(&redis)).await;
    let locker: Arc<dyn Locker> = Arc::new(tcp_client(&[&a.addr, &b.addr]));
    let opts = LockOptions {
        ttl: Duration::from_secs(10),
        wait: Duration::from_secs(10),
        owner: "writer".into(),
    };
    let g = lock(locker.clone(), "mbox:u:INBOX", &opts).await.unwrap();
    assert!(g.release().await.unwrap());
    drop(a); // replica A stops; the client's connection to it breaks
    for _ in 0..3 {
        let g = lock(locker.clone(), "mbox:u:INBOX", &opts).await.unwrap();
        assert!(g.release().await.unwrap());
    }
}

#[tokio::test]
async fn redis_waiting_line_keeps_a_tight_re_acquirer_from_starving_a_waiter() {
    use yarilo_locks::{RedisConn, RedisLocker};
    let redis = RedisServer::start();
    let locker = RedisLocker::new(RedisConn::new(&redis.url(), Duration::from_secs(2)).unwrap());
    let ttl = Duration::from_secs(30);
    let Acquire::Acquired { lock_id } = locker.try_acquire("r", "a", ttl).await.unwrap() else {
        panic!("first acquire")
    };
    // b is refused and takes the waiting place.
    assert!(matches!(
        locker.try_acquire("r", "b", ttl).await.unwrap(),
        Acquire::Busy { .. }
    ));
    assert!(locker.release(&lock_id).await.unwrap());
    // a comes straight back but b is next in line.
    assert!(matches!(
        locker.try_acquire("r", "a", ttl).await.unwrap(),
        Acquire::Busy { .. }
    ));
    let Acquire::Acquired { lock_id } = locker.try_acquire("r", "b", ttl).await.unwrap() else {
        panic!("the waiter gets the lock")
    };
    assert!(locker.release(&lock_id).await.unwrap());
    // A waiter that stops retrying loses its place after a short while.
    let Acquire::Acquired { lock_id } = locker.try_acquire("r", "a", ttl).await.unwrap() else {
        panic!()
    };
    assert!(matches!(
        locker.try_acquire("r", "c", ttl).await.unwrap(),
        Acquire::Busy { .. }
    ));
    assert!(locker.release(&lock_id).await.unwrap());
    // c's place is held by a Redis TTL alone (nobody clears it): it runs
    // out by itself, and a keeps being refused until it has.
    let ttl_ms: i64 = locker
        .conn()
        .query(redis::cmd("PTTL").arg("lockwait:r"))
        .await
        .unwrap();
    assert!(
        ttl_ms == -2 || (0..=500).contains(&ttl_ms),
        "the waiting place expires on its own (PTTL {ttl_ms})"
    );
    let got = yarilo_testkit::eventually(Duration::from_secs(10), || async {
        matches!(
            locker.try_acquire("r", "a", ttl).await.unwrap(),
            Acquire::Acquired { .. }
        )
    })
    .await;
    assert!(got, "the abandoned waiting place never ran out");
}
