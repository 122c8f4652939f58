//! The auth service over real TCP with the client library: AUTH → token →
//! VERIFY, allow_nets and nologin with the real client IP, plaintext
//! rules, multi-step mechanisms, USER lookups, passwd-file reload and
//! client reconnect.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use yarilo_auth::db::{Db, PasswdFile, PasswdLine};
use yarilo_auth::{hash_password, AuthReply, Authenticator, FailureKind, Scheme};

struct Fixture {
    _dir: tempfile::TempDir,
    users: PasswdFile,
    auth: Arc<Authenticator>,
}

fn fixture(tweak: impl FnOnce(&mut yarilo_auth::AuthSettings)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users");
    let line = |user: &str, scheme: Scheme, pw: &str, extra: &str| {
        format!(
            "{user}:{}::::/home/{user}::{extra}\n",
            hash_password(scheme, pw).unwrap()
        )
    };
    let mut text = String::from("# test users\n");
    text += &line("alice", Scheme::Sha512Crypt, "alice pw", "");
    text += &line(
        "bob",
        Scheme::Argon2id,
        "bob pw",
        "userdb_mail=maildir:~/Maildir",
    );
    text += &line(
        "carol",
        Scheme::Ssha256,
        "carol pw",
        "allow_nets=10.0.0.0/8,192.0.2.77",
    );
    text += &line(
        "dave",
        Scheme::Plain,
        "dave pw",
        "nologin reason=Account_moved_to_mx2",
    );
    text += &line(
        "eve@example.org",
        Scheme::BlfCrypt,
        "eve pw",
        "director_tag=shard-b userdb_quota_rule=*:storage=1G",
    );
    text += &line("scram", Scheme::ScramSha256, "scram pw", "");
    std::fs::write(&path, text).unwrap();
    let users = PasswdFile::new(&path, Scheme::Plain);
    let mut settings = common::settings();
    tweak(&mut settings);
    let auth = Arc::new(Authenticator::new(
        settings,
        vec![Db::PasswdFile(users.clone())],
        vec![Db::PasswdFile(users.clone())],
    ));
    Fixture {
        _dir: dir,
        users,
        auth,
    }
}

fn success(reply: AuthReply) -> yarilo_auth::AuthSuccess {
    match reply {
        AuthReply::Success(s) => s,
        other => panic!("expected success, got {other:?}"),
    }
}

fn failure(reply: AuthReply) -> yarilo_auth::AuthFailure {
    match reply {
        AuthReply::Failure(f) => f,
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn token_round_trip_succeeds_once_and_only_for_its_service() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let login = common::client(server.addr);
    let backend = common::client(server.addr);

    let ok = success(
        login
            .login_plain(
                &common::request("192.0.2.10", "imap", "sess-1"),
                "alice",
                "alice pw",
            )
            .await
            .unwrap(),
    );
    assert_eq!(ok.user, "alice");
    assert_eq!(ok.token.len(), 64);
    assert!(ok.token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(ok.fields.get("home"), Some("/home/alice"));

    let v = backend
        .verify(&ok.token, "sess-1", "imap", "alice")
        .await
        .unwrap();
    assert_eq!(v.unwrap().user, "alice");
    let again = backend
        .verify(&ok.token, "sess-1", "imap", "alice")
        .await
        .unwrap();
    assert!(again.is_err(), "a token must verify only once");

    let ok = success(
        login
            .login_plain(
                &common::request("192.0.2.10", "imap", "sess-2"),
                "alice",
                "alice pw",
            )
            .await
            .unwrap(),
    );
    let other = backend
        .verify(&ok.token, "sess-2", "pop3", "alice")
        .await
        .unwrap();
    assert!(other.unwrap_err().contains("service"));
    let ok = success(
        login
            .login_plain(
                &common::request("192.0.2.10", "imap", "sess-3"),
                "alice",
                "alice pw",
            )
            .await
            .unwrap(),
    );
    let wrong_session = backend
        .verify(&ok.token, "sess-X", "imap", "alice")
        .await
        .unwrap();
    assert!(wrong_session.is_err());
    let garbage = backend
        .verify(&"0".repeat(64), "sess-3", "imap", "")
        .await
        .unwrap();
    assert!(garbage.is_err());
}

#[tokio::test]
async fn expired_tokens_fail_verify() {
    let f = fixture(|s| s.token_ttl = Duration::ZERO);
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    let ok = success(
        c.login_plain(
            &common::request("192.0.2.10", "imap", "s"),
            "alice",
            "alice pw",
        )
        .await
        .unwrap(),
    );
    assert!(c
        .verify(&ok.token, "s", "imap", "alice")
        .await
        .unwrap()
        .is_err());
}

#[tokio::test]
async fn wrong_passwords_unknown_and_hostile_users_fail_alike() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    let r = common::request("192.0.2.10", "imap", "s");
    for (user, pw) in [
        ("alice", "wrong"),
        ("alice", ""),
        ("bob", "alice pw"),
        ("nobody", "x"),
        ("' OR 1=1 --", "x"),
        ("alice\0", "alice pw"),
        (&"a".repeat(10 * 1024), "x"),
        ("alice:x", "alice pw"),
    ] {
        let fail = failure(c.login_plain(&r, user, pw).await.unwrap());
        let shown: String = user.chars().take(20).collect();
        if user.contains('\0') || user.len() > 8192 {
            // A NUL inside PLAIN breaks the mechanism's grammar; 10 KB
            // exceeds the SASL message bound.
            assert_eq!(fail.kind, FailureKind::Malformed, "{shown:?}");
        } else {
            assert_eq!(fail.kind, FailureKind::BadCredentials, "{shown:?}");
            assert_eq!(fail.message, "Authentication failed.");
        }
    }
    // A NUL reaching the name through LOGIN is refused by the name check.
    let (mut ex, _) = c.begin(&r, "LOGIN", None).await.unwrap();
    ex.step(Some(b"alice\0")).await.unwrap();
    let fail = failure(ex.step(Some(b"alice pw")).await.unwrap());
    assert_eq!(fail.kind, FailureKind::BadCredentials);
    // 10 KB through LOGIN reaches the name check, which refuses it.
    let (mut ex, _) = c.begin(&r, "LOGIN", None).await.unwrap();
    ex.step(Some("b".repeat(8000).as_bytes())).await.unwrap();
    let fail = failure(ex.step(Some(b"x")).await.unwrap());
    assert_eq!(fail.kind, FailureKind::BadCredentials);
    // The service is still healthy.
    success(c.login_plain(&r, "bob", "bob pw").await.unwrap());
}

#[tokio::test]
async fn allow_nets_is_checked_against_the_real_client_ip() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    for ip in ["10.20.30.40", "192.0.2.77", "::ffff:10.0.0.1"] {
        success(
            c.login_plain(&common::request(ip, "imap", "s"), "carol", "carol pw")
                .await
                .unwrap(),
        );
    }
    for ip in ["192.0.2.78", "172.16.0.1", "2001:db8::1"] {
        let fail = failure(
            c.login_plain(&common::request(ip, "imap", "s"), "carol", "carol pw")
                .await
                .unwrap(),
        );
        assert_eq!(fail.kind, FailureKind::NotAllowedNet, "{ip}");
        assert_eq!(fail.message, "Authentication failed.");
    }
}

#[tokio::test]
async fn nologin_refuses_a_correct_password_with_its_reason() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    let r = common::request("192.0.2.10", "imap", "s");
    let fail = failure(c.login_plain(&r, "dave", "dave pw").await.unwrap());
    assert_eq!(fail.kind, FailureKind::Nologin);
    assert_eq!(fail.message, "Account_moved_to_mx2");
    let fail = failure(c.login_plain(&r, "dave", "wrong").await.unwrap());
    assert_eq!(fail.kind, FailureKind::BadCredentials);
}

#[tokio::test]
async fn passdb_and_userdb_fields_come_back_with_the_token() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    let ok = success(
        c.login_plain(
            &common::request("192.0.2.10", "imap", "s"),
            "EVE@example.org",
            "eve pw",
        )
        .await
        .unwrap(),
    );
    assert_eq!(ok.user, "eve@example.org");
    assert_eq!(ok.fields.get("director_tag"), Some("shard-b"));
    assert_eq!(ok.fields.get("quota_rule"), Some("*:storage=1G"));
    let v = c.verify(&ok.token, "s", "imap", "").await.unwrap().unwrap();
    assert_eq!(v.fields.get("director_tag"), Some("shard-b"));
    assert_eq!(v.fields.get("home"), Some("/home/eve@example.org"));

    let (user, fields) = c.lookup_user("bob", "lmtp").await.unwrap().unwrap();
    assert_eq!(user, "bob");
    assert_eq!(fields.get("mail"), Some("maildir:~/Maildir"));
    assert!(c.lookup_user("nobody", "lmtp").await.unwrap().is_none());
}

#[tokio::test]
async fn plaintext_needs_tls_except_from_loopback() {
    let f = fixture(|s| s.disable_plaintext_auth = true);
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    let mut insecure = common::request("192.0.2.10", "imap", "s");
    insecure.secured = false;
    let fail = failure(c.login_plain(&insecure, "alice", "alice pw").await.unwrap());
    assert_eq!(fail.kind, FailureKind::PlaintextDisabled);
    let mechs = c
        .mechanisms(false, "192.0.2.10".parse().unwrap())
        .await
        .unwrap();
    assert!(!mechs.contains(&"PLAIN".to_string()));
    assert!(mechs.contains(&"SCRAM-SHA-256".to_string()));
    let mechs = c
        .mechanisms(true, "192.0.2.10".parse().unwrap())
        .await
        .unwrap();
    assert!(mechs.contains(&"PLAIN".to_string()));

    let mut local = common::request("127.0.0.1", "imap", "s");
    local.secured = false;
    success(c.login_plain(&local, "alice", "alice pw").await.unwrap());
}

#[tokio::test]
async fn login_and_cram_md5_run_over_several_steps() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    let r = common::request("192.0.2.10", "imap", "s");
    let (mut ex, reply) = c.begin(&r, "LOGIN", None).await.unwrap();
    assert_eq!(reply, AuthReply::Continue(b"Username:".to_vec()));
    assert_eq!(
        ex.step(Some(b"dave")).await.unwrap(),
        AuthReply::Continue(b"Password:".to_vec())
    );
    assert_eq!(
        failure(ex.step(Some(b"dave pw")).await.unwrap()).kind,
        FailureKind::Nologin
    );

    // CRAM-MD5 needs a PLAIN (or CRAM-MD5) stored password.
    f.users
        .add_blocking(PasswdLine {
            user: "tim".into(),
            password: "{PLAIN}tanstaaftanstaaf".into(),
            ..Default::default()
        })
        .unwrap();
    let (mut ex, reply) = c.begin(&r, "CRAM-MD5", None).await.unwrap();
    let AuthReply::Continue(challenge) = reply else {
        panic!("{reply:?}")
    };
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<md5::Md5>::new_from_slice(b"tanstaaftanstaaf").unwrap();
    mac.update(&challenge);
    let answer = format!("tim {}", hex::encode(mac.finalize().into_bytes()));
    let ok = success(ex.step(Some(answer.as_bytes())).await.unwrap());
    assert_eq!(ok.user, "tim");

    // Cancelling an exchange.
    let (mut ex, _) = c.begin(&r, "LOGIN", None).await.unwrap();
    assert_eq!(
        failure(ex.step(None).await.unwrap()).kind,
        FailureKind::Aborted
    );
    // Unknown mechanism.
    let (_, reply) = c.begin(&r, "GSSAPI", None).await.unwrap();
    assert_eq!(failure(reply).kind, FailureKind::UnsupportedMechanism);
}

#[tokio::test]
async fn a_user_added_to_the_passwd_file_logs_in_without_restart() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let c = common::client(server.addr);
    let r = common::request("192.0.2.10", "imap", "s");
    assert_eq!(
        failure(c.login_plain(&r, "frank", "frank pw").await.unwrap()).kind,
        FailureKind::BadCredentials
    );
    let users = f.users.clone();
    tokio::task::spawn_blocking(move || {
        users.add_blocking(PasswdLine {
            user: "frank".into(),
            password: hash_password(Scheme::Argon2id, "frank pw").unwrap(),
            ..Default::default()
        })
    })
    .await
    .unwrap()
    .unwrap();
    success(c.login_plain(&r, "frank", "frank pw").await.unwrap());
    let users = f.users.clone();
    tokio::task::spawn_blocking(move || users.delete_blocking("frank"))
        .await
        .unwrap()
        .unwrap();
    failure(c.login_plain(&r, "frank", "frank pw").await.unwrap());
}

#[tokio::test]
async fn the_client_reconnects_after_the_service_restarts() {
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let addr = server.addr;
    let c = common::client(addr);
    let r = common::request("192.0.2.10", "imap", "s");
    success(c.login_plain(&r, "alice", "alice pw").await.unwrap());
    server.stop().await;
    // Down: the request fails cleanly (connection refused or lost).
    let down = c.login_plain(&r, "alice", "alice pw").await;
    assert!(down.is_err(), "{down:?}");
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let _server = common::start_on(listener, Arc::clone(&f.auth)).await;
    success(c.login_plain(&r, "alice", "alice pw").await.unwrap());
}

#[tokio::test]
async fn protocol_errors_are_answered_and_the_connection_survives() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
    let f = fixture(|_| {});
    let server = common::start(Arc::clone(&f.auth)).await;
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"VERSION\tauth\t1\t0\nFOO\t1\nAUTH\t2\nCONT\t3\tAAAA\nMECHS\t4\tip=127.0.0.1\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(s).lines();
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        "VERSION\tauth\t1\t0"
    );
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(lines.next_line().await.unwrap().unwrap());
    }
    got.sort();
    assert!(got[0].starts_with("ERROR\t1\tunknown command"), "{got:?}");
    assert!(got[1].starts_with("ERROR\t2\t"), "{got:?}");
    assert!(got[2].starts_with("FAIL\t3\t"), "{got:?}");
    assert!(got[3].starts_with("MECHS\t4\tPLAIN"), "{got:?}");
}
