//! The engine without the wire: passdb chain fall-through, userdb chain,
//! static templates, the lookup cache, the per-IP failure penalty.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use yarilo_auth::db::{Db, PasswdFile, PasswdLine, StaticDb};
use yarilo_auth::penalty::LocalPenalty;
use yarilo_auth::token::MemoryTokenStore;
use yarilo_auth::{AuthReply, Authenticator, FailureKind, Scheme};

fn kind(r: AuthReply) -> Option<FailureKind> {
    match r {
        AuthReply::Failure(f) => Some(f.kind),
        AuthReply::Success(_) => None,
        AuthReply::Continue(_) => panic!("unexpected continue"),
    }
}

#[tokio::test]
async fn the_passdb_chain_falls_through_and_static_userdb_expands() {
    let dir = tempfile::tempdir().unwrap();
    let file = PasswdFile::new(dir.path().join("users"), Scheme::Plain);
    file.add_blocking(PasswdLine {
        user: "bob@example.org".into(),
        password: "{PLAIN}two".into(),
        ..Default::default()
    })
    .unwrap();
    let auth = Arc::new(Authenticator::new(
        common::settings(),
        vec![
            Db::Static(StaticDb::new(
                "password=one allow_nets=192.0.2.0/24",
                Scheme::Plain,
            )),
            Db::PasswdFile(file),
        ],
        vec![Db::Static(StaticDb::new(
            "uid=vmail home=/srv/mail/%d/%n",
            Scheme::Plain,
        ))],
    ));
    let r = common::request("192.0.2.1", "imap", "s");
    match auth.login_plain(r.clone(), "bob@example.org", "two").await {
        AuthReply::Success(s) => {
            assert_eq!(s.fields.get("home"), Some("/srv/mail/example.org/bob"));
            assert_eq!(s.fields.get("uid"), Some("vmail"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        kind(auth.login_plain(r.clone(), "bob@example.org", "one").await),
        None
    );
    assert_eq!(
        kind(auth.login_plain(r, "bob@example.org", "three").await),
        Some(FailureKind::BadCredentials)
    );
}

#[tokio::test]
async fn a_user_unknown_to_every_userdb_cannot_log_in() {
    let dir = tempfile::tempdir().unwrap();
    let auth = Arc::new(Authenticator::new(
        common::settings(),
        vec![Db::Static(StaticDb::new("nopassword", Scheme::Plain))],
        vec![Db::PasswdFile(PasswdFile::new(
            dir.path().join("none"),
            Scheme::Plain,
        ))],
    ));
    let r = common::request("192.0.2.1", "imap", "s");
    assert_eq!(
        kind(auth.login_plain(r, "ghost", "x").await),
        Some(FailureKind::BadCredentials)
    );
}

#[tokio::test]
async fn the_cache_keeps_lookups_for_its_ttl_only_when_enabled() {
    for cache_size in [0usize, 100] {
        let dir = tempfile::tempdir().unwrap();
        let file = PasswdFile::new(dir.path().join("users"), Scheme::Plain);
        file.add_blocking(PasswdLine {
            user: "carol".into(),
            password: "{PLAIN}pw".into(),
            ..Default::default()
        })
        .unwrap();
        let mut settings = common::settings();
        settings.cache_size = cache_size;
        let auth = Arc::new(Authenticator::new(
            settings,
            vec![Db::PasswdFile(file.clone())],
            vec![],
        ));
        let r = common::request("192.0.2.1", "imap", "s");
        assert_eq!(kind(auth.login_plain(r.clone(), "carol", "pw").await), None);
        // Negative entry for an unknown user.
        assert!(kind(auth.login_plain(r.clone(), "dan", "pw").await).is_some());
        file.delete_blocking("carol").unwrap();
        file.add_blocking(PasswdLine {
            user: "dan".into(),
            password: "{PLAIN}pw".into(),
            ..Default::default()
        })
        .unwrap();
        let carol = kind(auth.login_plain(r.clone(), "carol", "pw").await);
        let dan = kind(auth.login_plain(r.clone(), "dan", "pw").await);
        if cache_size == 0 {
            assert_eq!(carol, Some(FailureKind::BadCredentials));
            assert_eq!(dan, None);
        } else {
            assert_eq!(carol, None, "cached positive entry");
            assert_eq!(
                dan,
                Some(FailureKind::BadCredentials),
                "cached negative entry"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn failures_are_counted_per_real_client_ip_and_reset_on_success() {
    let penalty = Arc::new(LocalPenalty::new(
        Duration::from_secs(15),
        Duration::from_secs(3600),
    ));
    let mut settings = common::settings();
    settings.failure_delay = Duration::from_secs(2);
    settings.penalty_max = Duration::from_secs(15);
    let auth = Arc::new(Authenticator::with_parts(
        settings,
        vec![Db::Static(StaticDb::new("password=right", Scheme::Plain))],
        vec![],
        penalty.clone(),
        Arc::new(MemoryTokenStore::new()),
    ));
    let remote: IpAddr = "198.51.100.7".parse().unwrap();
    let r = common::request("198.51.100.7", "imap", "s");
    for _ in 0..3 {
        assert!(kind(auth.login_plain(r.clone(), "u", "wrong").await).is_some());
    }
    assert_eq!(penalty.failures(remote), 3);
    assert_eq!(kind(auth.login_plain(r.clone(), "u", "right").await), None);
    assert_eq!(penalty.failures(remote), 0);
    // Loopback is exempt.
    let local = common::request("127.0.0.1", "imap", "s");
    assert!(kind(auth.login_plain(local, "u", "wrong").await).is_some());
    assert_eq!(penalty.failures("127.0.0.1".parse().unwrap()), 0);
}

#[tokio::test]
async fn yarctl_user_add_is_seen_by_a_running_single_default_setup() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "general:\n  data_dir: {}\nauth:\n  auth_failure_delay_seconds: 0\n",
        dir.path().display()
    );
    let config = yarilo_config::Config::from_yaml(&yaml, "t.yaml").unwrap();
    // No passdb/userdb configured: <data_dir>/users, which does not exist yet.
    let auth = Arc::new(Authenticator::from_config(&config).unwrap());
    let r = common::request("127.0.0.1", "imap", "s");
    assert!(kind(auth.login_plain(r.clone(), "newbie", "pw 1").await).is_some());

    let store = yarilo_auth::admin::UserStore::open(Some(dir.path()), None).unwrap();
    store.add("newbie", "pw 1", None).await.unwrap();
    assert_eq!(
        kind(auth.login_plain(r.clone(), "newbie", "pw 1").await),
        None
    );
    store
        .set_password("newbie", "pw 2", Some("SHA512-CRYPT"))
        .await
        .unwrap();
    assert!(kind(auth.login_plain(r.clone(), "newbie", "pw 1").await).is_some());
    assert_eq!(
        kind(auth.login_plain(r.clone(), "newbie", "pw 2").await),
        None
    );
    store.delete("newbie").await.unwrap();
    assert!(kind(auth.login_plain(r, "newbie", "pw 2").await).is_some());
}

#[tokio::test]
async fn scram_does_not_reveal_unknown_users_at_its_first_step() {
    let auth = Arc::new(Authenticator::new(
        common::settings(),
        vec![Db::Static(StaticDb::new("password=pw", Scheme::Plain))],
        vec![],
    ));
    let dir = tempfile::tempdir().unwrap();
    let file = PasswdFile::new(dir.path().join("users"), Scheme::Plain);
    let only_file = Arc::new(Authenticator::new(
        common::settings(),
        vec![Db::PasswdFile(file)],
        vec![],
    ));
    let r = common::request("192.0.2.1", "imap", "s");
    // Known (static answers everyone) and unknown users both get a
    // server-first; the unknown one has a stable salt across probes.
    for a in [&auth, &only_file] {
        let mut ex = a.exchange(r.clone(), "SCRAM-SHA-256");
        let AuthReply::Continue(first) = ex.begin(Some(b"n,,n=ghost,r=abcdef")).await else {
            panic!("expected a server-first message");
        };
        assert!(String::from_utf8(first).unwrap().starts_with("r=abcdef"));
    }
    let salt = |first: Vec<u8>| {
        String::from_utf8(first)
            .unwrap()
            .split(',')
            .find(|p| p.starts_with("s="))
            .unwrap()
            .to_string()
    };
    let mut one = only_file.exchange(r.clone(), "SCRAM-SHA-256");
    let mut two = only_file.exchange(r.clone(), "SCRAM-SHA-256");
    let (AuthReply::Continue(a), AuthReply::Continue(b)) = (
        one.begin(Some(b"n,,n=ghost,r=x")).await,
        two.begin(Some(b"n,,n=ghost,r=y")).await,
    ) else {
        panic!("expected server-first messages");
    };
    assert_eq!(salt(a), salt(b));
    // Whatever the client proves, the decoy exchange fails at the end.
    let reply = one.step(Some(b"c=biws,r=x,p=AAAA")).await;
    assert!(matches!(reply, AuthReply::Failure(_)));
}

#[tokio::test]
async fn yarctl_user_init_db_creates_the_table_the_default_queries_use() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("users.db");
    let yaml = format!(
        "general:\n  data_dir: {d}\nauth:\n  auth_failure_delay_seconds: 0\n\
         passdb:\n  - driver: sql\n    connect: sqlite://{db}?mode=rwc\n\
         userdb:\n  - driver: sql\n    connect: sqlite://{db}?mode=rwc\n",
        d = dir.path().display(),
        db = db.display()
    );
    let path = dir.path().join("yarilo.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let store = yarilo_auth::admin::UserStore::open(None, Some(&path)).unwrap();
    assert!(
        store.add("early", "pw", None).await.is_err(),
        "no table yet"
    );
    assert!(store.init_db().await.unwrap());
    assert!(
        store.init_db().await.unwrap(),
        "a second run changes nothing"
    );
    store.add("alice", "a-long-secret", None).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["alice"]);
    let config = yarilo_config::Config::from_yaml(&yaml, "t.yaml").unwrap();
    let auth = Arc::new(Authenticator::from_config(&config).unwrap());
    let r = common::request("127.0.0.1", "imap", "s");
    assert_eq!(
        kind(auth.login_plain(r, "alice", "a-long-secret").await),
        None
    );
    // A passwd-file needs nothing.
    let file = yarilo_auth::admin::UserStore::open(Some(dir.path()), None).unwrap();
    assert!(!file.init_db().await.unwrap());
}
