#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The driver over an in-memory stream: pipelined requests answered in
//! order on one connection, the read timeout, shutdown between and inside
//! requests. Time is paused, so the timeouts cost nothing.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use yarilo_auth::{AuthHandle, Authenticator};
use yarilo_config::Config;
use yarilo_locks::{MemoryEventBus, MemoryLocker};
use yarilo_quota_status::{QuotaStatusMetrics, QuotaStatusServer, QuotaStatusSettings};
use yarilo_store::{Store, StoreSettings};

struct Env {
    _dir: tempfile::TempDir,
    server: Arc<QuotaStatusServer>,
    registry: Registry,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("users"),
        "a@x.org:{PLAIN}pw::::::userdb_quota_rule=*:storage=1M\n",
    )
    .unwrap();
    let text = format!(
        "general:\n  data_dir: {}\nquota_status:\n  read_timeout_seconds: 60\n",
        dir.path().display()
    );
    let config = Config::from_yaml(&text, "t").unwrap();
    let store = Store::new(
        StoreSettings::new(&format!("maildir:{}/mail/%u", dir.path().display())),
        Arc::new(MemoryLocker::new()),
        Arc::new(MemoryEventBus::default()),
    )
    .unwrap();
    let auth = AuthHandle::Local(Arc::new(Authenticator::from_config(&config).unwrap()));
    let mut registry = Registry::default();
    let metrics = QuotaStatusMetrics::register(&mut registry);
    let server = QuotaStatusServer::new(
        QuotaStatusSettings::from_config(&config),
        auth,
        store,
        metrics,
    );
    Env {
        _dir: dir,
        server,
        registry,
    }
}

fn metrics(r: &Registry) -> String {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, r).unwrap();
    s
}

async fn read_all(c: &mut DuplexStream) -> String {
    let mut out = Vec::new();
    c.read_to_end(&mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test(start_paused = true)]
async fn pipelined_requests_are_answered_in_order_then_silence_times_out() {
    let e = env();
    let (mut client, conn) = tokio::io::duplex(1 << 16);
    let server = e.server.clone();
    let task = tokio::spawn(async move {
        server.handle(conn, std::future::pending::<()>()).await;
    });
    client
        .write_all(
            b"protocol_state=RCPT\nrecipient=a+d@x.org\nsize=10\n\n\
              protocol_state=RCPT\nrecipient=b@x.org\n\n\
              protocol_state=DATA\nrecipient=a@x.org\n\n\
              protocol_state=RCPT\nrecipient=a@x.org\nsize=2000000\n\n",
        )
        .await
        .unwrap();
    // No more input: after read_timeout_seconds (60) the server closes.
    let replies = read_all(&mut client).await;
    assert_eq!(
        replies,
        "action=OK\n\naction=REJECT Unknown user\n\naction=DUNNO\n\n\
         action=554 5.2.2 Quota exceeded (mailbox for user is full)\n\n"
    );
    task.await.unwrap();
    let m = metrics(&e.registry);
    for line in [
        "yarilo_quota_status_requests_total{result=\"ok\"} 1",
        "yarilo_quota_status_requests_total{result=\"nouser\"} 1",
        "yarilo_quota_status_requests_total{result=\"dunno\"} 1",
        "yarilo_quota_status_requests_total{result=\"toolarge\"} 1",
        "yarilo_quota_status_connections_total{result=\"timeout\"} 1",
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_closes_an_idle_connection_but_finishes_a_started_request() {
    let e = env();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (mut client, conn) = tokio::io::duplex(1 << 16);
    let server = e.server.clone();
    let task = tokio::spawn(async move {
        server
            .handle(conn, async move {
                let _ = stop_rx.await;
            })
            .await;
    });
    // Half a request, then the shutdown: the request is still answered.
    client
        .write_all(b"protocol_state=RCPT\nrecipient=a@x.org\n")
        .await
        .unwrap();
    tokio::task::yield_now().await;
    stop_tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    client.write_all(b"\n").await.unwrap();
    assert_eq!(read_all(&mut client).await, "action=OK\n\n");
    task.await.unwrap();
    let m = metrics(&e.registry);
    assert!(
        m.contains("yarilo_quota_status_connections_total{result=\"shutdown\"} 1"),
        "{m}"
    );
}
