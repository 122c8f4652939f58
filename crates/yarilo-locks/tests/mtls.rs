//! Remote mode over internal mTLS: the pinned name is what is verified.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::time::Duration;

use yarilo_config::{LocksMode, LocksService as ServiceConfig, Secret};
use yarilo_locks::{
    Acquire, ClientOptions, ClientTls, Endpoint, Locker, LocksClient, LocksService,
};
use yarilo_testkit::RedisServer;
use yarilo_tls::ca::{write_pair, Authority};
use yarilo_tls::Role;

#[tokio::test]
async fn remote_mode_over_mtls_accepts_cluster_members_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::generate("test internal CA").unwrap();
    let ca_path = dir.path().join("ca.crt");
    std::fs::write(&ca_path, &ca.cert_pem).unwrap();
    let issued = ca
        .issue(&["yarilo-internal".to_string()], &[Role::Locks])
        .unwrap();
    let (cert, key) = write_pair(dir.path(), "locks", &issued).unwrap();
    let tls = ClientTls::build(&cert, &key, &ca_path, "yarilo-internal").unwrap();

    let redis = RedisServer::start();
    let cfg = ServiceConfig {
        mode: LocksMode::Remote,
        listen: "127.0.0.1:0".into(),
        redis: Secret::new(redis.url()),
        ..ServiceConfig::default()
    };
    let svc = LocksService::bind(&cfg, Some(tls.acceptor()))
        .await
        .unwrap();
    let addr = svc.local_addr().unwrap().to_string();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(svc.serve(async move {
        let _ = rx.await;
    }));

    let opts = |tls: Option<ClientTls>| {
        let mut o = ClientOptions::single(Endpoint::Tcp(addr.clone()));
        o.tls = tls;
        o.connect_timeout = Duration::from_secs(2);
        o
    };
    let ttl = Duration::from_secs(5);
    // Dialled by IP, verified against the pinned name.
    let good = LocksClient::new(opts(Some(tls.clone())));
    assert!(matches!(
        good.try_acquire("r", "o", ttl).await.unwrap(),
        Acquire::Acquired { .. }
    ));
    // Plain TCP is refused.
    let plain = LocksClient::new(opts(None));
    assert!(plain.try_acquire("r2", "o", ttl).await.is_err());
    // A name the certificate does not carry is refused by the client.
    let wrong = LocksClient::new(opts(Some(tls.with_server_name("someone-else").unwrap())));
    assert!(wrong.try_acquire("r3", "o", ttl).await.is_err());

    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}
