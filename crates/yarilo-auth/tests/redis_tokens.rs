//! Tokens shared through Redis (`auth.token_store: redis`): a token issued
//! by one auth replica verifies on another, exactly once, only for its
//! service. Starts its own redis-server on a unix socket in a temp dir.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use yarilo_auth::db::{Db, StaticDb};
use yarilo_auth::penalty::LocalPenalty;
use yarilo_auth::token_redis::RedisTokenStore;
use yarilo_auth::{AuthReply, Authenticator, Scheme};

struct Redis {
    child: Child,
    _dir: tempfile::TempDir,
    url: String,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn redis() -> Redis {
    let bin = common::require("redis-server", "redis-server");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("redis.sock");
    let child = Command::new(bin)
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(&sock)
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("unix://{}", sock.display());
    let client = redis::Client::open(url.as_str()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            let pong: Result<String, _> = redis::cmd("PING").query_async(&mut c).await;
            if pong.is_ok() {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "redis-server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Redis {
        child,
        _dir: dir,
        url,
    }
}

fn replica(store: Arc<RedisTokenStore>) -> Arc<Authenticator> {
    let settings = common::settings();
    let penalty = Arc::new(LocalPenalty::new(Duration::ZERO, Duration::ZERO));
    Arc::new(Authenticator::with_parts(
        settings,
        vec![Db::Static(StaticDb::new(
            "password=pw director_tag=t7",
            Scheme::Plain,
        ))],
        vec![],
        penalty,
        store,
    ))
}

#[tokio::test]
async fn a_token_from_one_replica_verifies_once_on_another() {
    let server = redis().await;
    let store = |_| Arc::new(RedisTokenStore::new(&server.url, Duration::from_secs(2)).unwrap());
    let (a, b) = (replica(store(0)), replica(store(1)));
    let r = common::request("192.0.2.8", "imap", "sess-9");

    let AuthReply::Success(ok) = a.login_plain(r.clone(), "zoe", "pw").await else {
        panic!("login failed");
    };
    let probe = RedisTokenStore::new(&server.url, Duration::from_secs(2)).unwrap();
    let left = probe.remaining_ms(&ok.token).await.unwrap();
    assert!(left > 0 && left <= 30_000, "token TTL {left} ms");

    let v = b
        .verify_token(&ok.token, "sess-9", "imap", "zoe")
        .await
        .unwrap();
    assert_eq!(v.user, "zoe");
    assert_eq!(v.fields.get("director_tag"), Some("t7"));
    assert!(b
        .verify_token(&ok.token, "sess-9", "imap", "zoe")
        .await
        .is_err());
    assert!(a
        .verify_token(&ok.token, "sess-9", "imap", "zoe")
        .await
        .is_err());

    let AuthReply::Success(ok) = b.login_plain(r.clone(), "zoe", "pw").await else {
        panic!("login failed");
    };
    assert!(a
        .verify_token(&ok.token, "sess-9", "pop3", "zoe")
        .await
        .is_err());
    assert!(a
        .verify_token(&ok.token, "sess-9", "imap", "zoe")
        .await
        .is_err());
}

#[tokio::test]
async fn an_unreachable_token_store_fails_logins_as_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("unix://{}", dir.path().join("nothing.sock").display());
    let auth = replica(Arc::new(
        RedisTokenStore::new(&url, Duration::from_secs(1)).unwrap(),
    ));
    match auth
        .login_plain(common::request("192.0.2.8", "imap", "s"), "zoe", "pw")
        .await
    {
        AuthReply::Failure(f) => assert_eq!(f.kind, yarilo_auth::FailureKind::Temporary),
        other => panic!("{other:?}"),
    }
}
