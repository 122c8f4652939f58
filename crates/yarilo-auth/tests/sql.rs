//! The sql passdb/userdb against real SQLite, PostgreSQL and MariaDB
//! servers started by the test: logins, extra columns as fields,
//! allow_nets / nologin, hostile user names bound (never spliced), and
//! the admin queries `yarctl user` uses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use yarilo_auth::db::sql::QueryTexts;
use yarilo_auth::db::{Db, LookupRequest, SqlDb};
use yarilo_auth::{hash_password, AuthReply, Authenticator, FailureKind, Scheme};

#[path = "common/sqlservers.rs"]
mod sqlservers;

const SCHEMA: &str = "CREATE TABLE users (
    username VARCHAR(255) PRIMARY KEY,
    password VARCHAR(255) NOT NULL,
    home VARCHAR(255),
    uid INTEGER,
    gid INTEGER,
    allow_nets VARCHAR(255),
    nologin VARCHAR(8),
    reason VARCHAR(255),
    director_tag VARCHAR(64)
)";

const PASSDB: &str =
    "SELECT username AS user, password, allow_nets, nologin, reason, director_tag \
                      FROM users WHERE username = '%u'";
const USERDB: &str = "SELECT home, uid, gid FROM users WHERE username = '%u'";

fn texts() -> QueryTexts<'static> {
    QueryTexts {
        passdb: PASSDB,
        userdb: USERDB,
        ..QueryTexts::default()
    }
}

async fn scenario(url: &str) {
    let db = SqlDb::connect(url, 2, Scheme::Plain, &texts()).unwrap();
    db.execute_raw(SCHEMA).await.unwrap();
    db.add_user(
        "alice",
        &hash_password(Scheme::Sha512Crypt, "alice pw").unwrap(),
    )
    .await
    .unwrap();
    db.add_user("bob", &hash_password(Scheme::Ssha512, "bob pw").unwrap())
        .await
        .unwrap();
    db.add_user("carol", "{PLAIN}carol pw").await.unwrap();
    db.add_user("dave", "{PLAIN}dave pw").await.unwrap();
    db.execute_raw(
        "UPDATE users SET home = '/srv/mail/alice', uid = 5000, gid = 5000, director_tag = 'tag-a' \
         WHERE username = 'alice'",
    )
    .await
    .unwrap();
    db.execute_raw("UPDATE users SET allow_nets = '10.0.0.0/8' WHERE username = 'carol'")
        .await
        .unwrap();
    db.execute_raw("UPDATE users SET nologin = 'y', reason = 'Moved' WHERE username = 'dave'")
        .await
        .unwrap();

    // No name filter: hostile names must reach SQL and still be harmless.
    let mut settings = common::settings();
    settings.username_chars = None;
    settings.max_username_length = 64 * 1024;
    let auth = Arc::new(Authenticator::new(
        settings,
        vec![Db::Sql(db.clone())],
        vec![Db::Sql(db.clone())],
    ));
    let r = common::request("192.0.2.1", "imap", "s");

    match auth.login_plain(r.clone(), "alice", "alice pw").await {
        AuthReply::Success(s) => {
            assert_eq!(s.user, "alice");
            assert_eq!(s.fields.get("director_tag"), Some("tag-a"));
            assert_eq!(s.fields.get("home"), Some("/srv/mail/alice"));
            assert_eq!(s.fields.get("uid"), Some("5000"));
            assert!(
                !s.fields.contains("allow_nets"),
                "NULL columns are not fields"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        auth.login_plain(r.clone(), "bob", "bob pw").await,
        AuthReply::Success(_)
    ));
    let kind = |reply: AuthReply| match reply {
        AuthReply::Failure(f) => f.kind,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        kind(auth.login_plain(r.clone(), "alice", "wrong").await),
        FailureKind::BadCredentials
    );
    assert_eq!(
        kind(auth.login_plain(r.clone(), "carol", "carol pw").await),
        FailureKind::NotAllowedNet
    );
    let inside = common::request("10.9.8.7", "imap", "s");
    assert!(matches!(
        auth.login_plain(inside, "carol", "carol pw").await,
        AuthReply::Success(_)
    ));
    assert_eq!(
        kind(auth.login_plain(r.clone(), "dave", "dave pw").await),
        FailureKind::Nologin
    );

    let hostile = [
        "' OR 1=1 --".to_string(),
        "' OR '1'='1".to_string(),
        "alice' --".to_string(),
        "alice'; DROP TABLE users; --".to_string(),
        "\\' OR 1=1 #".to_string(),
        "a".repeat(10 * 1024),
    ];
    for name in &hostile {
        // With the password of a real user: an injection would log in.
        // (Over 8 KB the SASL message bound refuses it before any lookup;
        // the driver-level lookup below still gets all 10 KB.)
        let expected = if name.len() > 8000 {
            FailureKind::Malformed
        } else {
            FailureKind::BadCredentials
        };
        assert_eq!(
            kind(auth.login_plain(r.clone(), name, "alice pw").await),
            expected
        );
        let found = db
            .passdb_lookup(&LookupRequest {
                user: name,
                service: "imap",
                remote_ip: None,
                local_ip: None,
            })
            .await
            .unwrap();
        assert!(found.is_none());
    }
    // NUL straight into the driver (the authenticator refuses it earlier).
    for name in ["alice\0", "\0' OR 1=1 --"] {
        let found = db
            .passdb_lookup(&LookupRequest {
                user: name,
                service: "imap",
                remote_ip: None,
                local_ip: None,
            })
            .await
            .unwrap();
        assert!(found.is_none());
    }
    let mut users = db.list_users().await.unwrap();
    users.sort();
    assert_eq!(users, ["alice", "bob", "carol", "dave"], "table intact");

    // Admin queries.
    db.set_password("bob", &hash_password(Scheme::Argon2id, "new pw").unwrap())
        .await
        .unwrap();
    assert!(matches!(
        auth.login_plain(r.clone(), "bob", "new pw").await,
        AuthReply::Success(_)
    ));
    db.delete_user("bob").await.unwrap();
    assert!(db.delete_user("bob").await.is_err());
    assert_eq!(
        kind(auth.login_plain(r.clone(), "bob", "new pw").await),
        FailureKind::BadCredentials
    );
    let (user, fields) = auth.lookup_user("alice", "lmtp").await.unwrap().unwrap();
    assert_eq!(user, "alice");
    assert_eq!(fields.get("gid"), Some("5000"));
    assert!(auth.lookup_user("nobody", "lmtp").await.unwrap().is_none());
}

#[tokio::test]
async fn sqlite_passdb_and_userdb() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("users.db").display()
    );
    scenario(&url).await;
}

#[tokio::test]
async fn postgresql_passdb_and_userdb() {
    let server = sqlservers::postgres().await;
    scenario(&server.url).await;
}

#[tokio::test]
async fn mariadb_passdb_and_userdb() {
    let server = sqlservers::mariadb().await;
    scenario(&server.url).await;
}

#[tokio::test]
async fn an_unreachable_database_is_a_temporary_failure() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "postgres://postgres@localhost/postgres?host={}&port=5999",
        dir.path().display()
    );
    let db = SqlDb::connect(&url, 1, Scheme::Plain, &texts()).unwrap();
    let auth = Arc::new(Authenticator::new(
        common::settings(),
        vec![Db::Sql(db)],
        vec![],
    ));
    match auth
        .login_plain(common::request("192.0.2.1", "imap", "s"), "alice", "pw")
        .await
    {
        AuthReply::Failure(f) => assert_eq!(f.kind, FailureKind::Temporary),
        other => panic!("{other:?}"),
    }
}
