//! Warden end to end: real sockets, real redis-server.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::net::IpAddr;
use std::time::Duration;

use yarilo_config::{Secret, WardenLimits, WardenService as Cfg, WardenStateBackend};
use yarilo_testkit::{eventually, RedisServer};
use yarilo_warden::{
    Admission, Kick, Refusal, WardenClient, WardenClientOptions, WardenMetrics, WardenService,
};

struct Running {
    addr: String,
    metrics: WardenMetrics,
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

fn limits() -> WardenLimits {
    WardenLimits {
        max_connections_per_ip: 3,
        max_sessions_per_user: 0,
        max_sessions_per_user_ip: 2,
        max_auth_failures: 3,
        penalty_ttl_s: 60,
        max_deliveries_per_user: 10,
    }
}

fn memory_cfg() -> Cfg {
    Cfg {
        listen: "127.0.0.1:0".into(),
        limits: limits(),
        ..Cfg::default()
    }
}

fn redis_cfg(redis: &RedisServer, pod: &str) -> Cfg {
    Cfg {
        listen: "127.0.0.1:0".into(),
        state_backend: WardenStateBackend::Redis,
        replicas: 2,
        redis: Secret::new(redis.url()),
        pod: pod.into(),
        reconcile_interval_s: 1,
        limits: limits(),
        ..Cfg::default()
    }
}

async fn start(cfg: Cfg) -> Running {
    let svc = WardenService::bind(&cfg, None).await.unwrap();
    let addr = svc.local_addr().unwrap().to_string();
    let metrics = svc.metrics();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        svc.serve(async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    Running {
        addr,
        metrics,
        stop: Some(tx),
        task,
    }
}

fn client(addrs: &[&str]) -> WardenClient {
    WardenClient::new(WardenClientOptions {
        endpoints: addrs.iter().map(|s| s.to_string()).collect(),
        tls: None,
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(2),
        fail_open: true,
    })
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn metrics_text(m: &WardenMetrics) -> String {
    let mut reg = prometheus_client::registry::Registry::default();
    m.register(&mut reg);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
    out
}

#[tokio::test]
async fn memory_backend_refuses_to_start_with_two_replicas() {
    let cfg = Cfg {
        replicas: 2,
        ..memory_cfg()
    };
    assert!(WardenService::bind(&cfg, None).await.is_err());
}

#[tokio::test]
async fn memory_backend_enforces_limits_and_releases_on_client_exit() {
    let w = start(memory_cfg()).await;
    let a = client(&[&w.addr]);
    let u = ip("198.51.100.1");
    for id in ["s1", "s2"] {
        assert_eq!(
            a.session_start(id, "alice", u).await.unwrap(),
            Admission::Admitted { penalty: 0 }
        );
    }
    assert_eq!(
        a.check("alice", u).await.unwrap(),
        Admission::Refused(Refusal::UserIpSessions)
    );
    // A process that dies takes its sessions with it.
    drop(a);
    let b = client(&[&w.addr]);
    assert!(
        eventually(Duration::from_secs(5), || async {
            b.sessions("alice").await.ok() == Some(0)
        })
        .await
    );
    for n in 1..=3 {
        assert_eq!(b.auth_fail(u).await.unwrap(), n);
    }
    assert_eq!(
        b.connect("c1", u).await.unwrap(),
        Admission::Refused(Refusal::Penalty)
    );
    b.auth_ok(u).await.unwrap();
    assert_eq!(
        b.connect("c1", u).await.unwrap(),
        Admission::Admitted { penalty: 0 }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_enforce_limits_across_both() {
    let redis = RedisServer::start();
    let ra = start(redis_cfg(&redis, "pod-a")).await;
    let rb = start(redis_cfg(&redis, "pod-b")).await;
    let a = client(&[&ra.addr]);
    let b = client(&[&rb.addr]);
    let u = ip("203.0.113.9");
    assert_eq!(
        a.session_start("s1", "bob", u).await.unwrap(),
        Admission::Admitted { penalty: 0 }
    );
    assert_eq!(
        b.session_start("s2", "bob", u).await.unwrap(),
        Admission::Admitted { penalty: 0 }
    );
    assert_eq!(
        a.session_start("s3", "bob", u).await.unwrap(),
        Admission::Refused(Refusal::UserIpSessions)
    );
    assert_eq!(
        b.check("bob", u).await.unwrap(),
        Admission::Refused(Refusal::UserIpSessions)
    );
    assert_eq!(a.sessions("bob").await.unwrap(), 2);
    b.session_end("s2", "bob", u).await.unwrap();
    assert_eq!(a.sessions("bob").await.unwrap(), 1);

    // Connections per IP, split over both replicas.
    let c = ip("203.0.113.10");
    assert!(matches!(
        a.connect("k1", c).await.unwrap(),
        Admission::Admitted { .. }
    ));
    assert!(matches!(
        b.connect("k2", c).await.unwrap(),
        Admission::Admitted { .. }
    ));
    assert!(matches!(
        a.connect("k3", c).await.unwrap(),
        Admission::Admitted { .. }
    ));
    assert_eq!(
        b.connect("k4", c).await.unwrap(),
        Admission::Refused(Refusal::IpConnections)
    );
    // Penalty counted on one replica is seen by the other.
    for _ in 0..3 {
        a.auth_fail(ip("203.0.113.11")).await.unwrap();
    }
    assert_eq!(b.penalty(ip("203.0.113.11")).await.unwrap(), 3);
    assert_eq!(
        b.connect("k9", ip("203.0.113.11")).await.unwrap(),
        Admission::Refused(Refusal::Penalty)
    );
}

async fn kick_arrives(
    emitter: &WardenClient,
    rx: &mut tokio::sync::broadcast::Receiver<Kick>,
    user: &str,
) -> bool {
    // Kicks are at-most-once: a subscription that is still being set up
    // misses them, so emit until one lands (bounded).
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let _ = emitter.emit(user, "moved").await;
            if let Ok(Ok(k)) = tokio::time::timeout(Duration::from_millis(250), rx.recv()).await {
                if k.user == user {
                    return;
                }
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_emitted_on_one_replica_reaches_a_subscriber_of_the_other_even_after_redis_restarts()
{
    let mut redis = RedisServer::start();
    let ra = start(redis_cfg(&redis, "pod-a")).await;
    let rb = start(redis_cfg(&redis, "pod-b")).await;
    let on_a = client(&[&ra.addr]);
    let sub = client(&[&rb.addr]).kicks();
    let mut rx = sub.receiver();
    sub.wait_subscribed().await;
    assert!(
        kick_arrives(&on_a, &mut rx, "carol").await,
        "cross-replica kick"
    );
    assert!(metrics_text(&ra.metrics).contains("yarilo_warden_kick_emitted_total"));
    // B counts the delivery right after its write; the subscriber may see
    // the kick a moment before that.
    assert!(
        eventually(Duration::from_secs(5), || async {
            !metrics_text(&rb.metrics).contains("yarilo_warden_kick_delivered_total 0")
        })
        .await
    );

    redis.restart();
    assert!(
        kick_arrives(&on_a, &mut rx, "dave").await,
        "kicks flow again after a redis-server restart, without intervention"
    );
}

#[tokio::test]
async fn redis_trouble_fails_open_and_is_counted() {
    let mut redis = RedisServer::start();
    let w = start(redis_cfg(&redis, "pod-a")).await;
    let c = client(&[&w.addr]);
    redis.stop();
    assert!(matches!(
        c.connect("k1", ip("192.0.2.50")).await.unwrap(),
        Admission::Admitted { .. }
    ));
    assert!(matches!(
        c.session_start("s1", "erin", ip("192.0.2.50"))
            .await
            .unwrap(),
        Admission::Admitted { .. }
    ));
    let text = metrics_text(&w.metrics);
    assert!(
        text.contains("yarilo_warden_redis_errors_total{op=\"connect\"}"),
        "{text}"
    );
    assert!(
        text.contains("yarilo_warden_connect_total{result=\"failopen\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_client_replays_its_sessions_after_warden_restarts() {
    // Two memory wardens share nothing: the second can only learn of
    // frank's session from the client's replay.
    let first = start(memory_cfg()).await;
    let second = start(memory_cfg()).await;
    let c = client(&[&first.addr, &second.addr]);
    let u = ip("192.0.2.77");
    c.session_start("s1", "frank", u).await.unwrap();
    c.connect("k1", u).await.unwrap();
    // The warden the client talks to goes away; the client fails over to
    // the other one and replays what it holds there.
    drop(first);
    let other = client(&[&second.addr]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            // Any request makes the client notice and reconnect.
            let _ = c.penalty(u).await;
            other.sessions("frank").await.ok() == Some(1)
        })
        .await,
        "session re-registered on the surviving replica"
    );
}

#[tokio::test]
async fn the_sweep_drops_entries_of_dead_replicas_and_fixes_counters() {
    let redis = RedisServer::start();
    let client_r = redis::Client::open(redis.url()).unwrap();
    let mut conn = client_r.get_multiplexed_async_connection().await.unwrap();
    // A session left behind by a replica that no longer heartbeats, and a
    // counter that drifted.
    let _: () = redis::cmd("HSET")
        .arg("warden:sess:gina")
        .arg("s-ghost")
        .arg("192.0.2.1|ghost-replica")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("warden:sesscount:gina")
        .arg(5)
        .query_async(&mut conn)
        .await
        .unwrap();
    let w = start(redis_cfg(&redis, "pod-a")).await;
    let c = client(&[&w.addr]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            c.sessions("gina").await.ok() == Some(0)
        })
        .await,
        "reconciled"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            !metrics_text(&w.metrics).contains("yarilo_warden_reconcile_adjustments_total 0")
        })
        .await
    );
}
