//! The LOOKUP service over real TCP on 127.0.0.1:0, and its keepalive over
//! an in-memory stream with paused time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use yarilo_config::{DirectorService, MailServer};
use yarilo_director::service::{serve_connection, Shared, Timeouts};
use yarilo_director::{Director, DirectorId, Settings};
use yarilo_wire::LineCodec;

type Client = Framed<TcpStream, LineCodec>;

const T: Duration = Duration::from_secs(10);

async fn recv<S>(c: &mut Framed<S, LineCodec>) -> Vec<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::time::timeout(T, c.next())
        .await
        .expect("reply in time")
        .expect("connection open")
        .expect("framing ok")
        .expect("valid line")
}

async fn call(c: &mut Client, line: &[&str]) -> Vec<String> {
    c.send(line).await.unwrap();
    recv(c).await
}

async fn connect(addr: std::net::SocketAddr) -> Client {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut c = Framed::new(stream, LineCodec::default());
    assert_eq!(recv(&mut c).await, ["VERSION", "director", "1", "0"]);
    c.send(&["VERSION", "director", "1", "0"][..])
        .await
        .unwrap();
    c
}

fn config() -> DirectorService {
    let server = |host: &str, tag: &str| MailServer {
        host: host.into(),
        port: 10143,
        tag: tag.into(),
        vhosts: 100,
    };
    DirectorService {
        mail_servers: vec![
            server("127.0.0.11", ""),
            server("127.0.0.12", ""),
            server("127.0.1.11", "blue"),
        ],
        ..DirectorService::default()
    }
}

struct Running {
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), yarilo_director::DirectorError>>,
}

impl Running {
    async fn start(config: DirectorService) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            yarilo_director::run(&config, listener, async {
                let _ = rx.await;
            })
            .await
        });
        Running {
            addr,
            stop: Some(tx),
            task,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(T, &mut self.task)
            .await
            .expect("service stops")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn lookup_routes_sticks_and_respects_tags() {
    let svc = Running::start(config()).await;
    let mut c = connect(svc.addr).await;

    let first = call(&mut c, &["LOOKUP", "alice@example.test", "", "imap"]).await;
    assert_eq!(first[0], "OK", "{first:?}");
    assert!(first[1] == "127.0.0.11" || first[1] == "127.0.0.12");
    assert_eq!(first[2], "10143");
    // Same user, another spelling and protocol: same backend.
    let again = call(&mut c, &["LOOKUP", "Alice@Example.TEST", "", "pop3"]).await;
    assert_eq!(again, first);
    // Tag scoping: blue has one backend; an unknown tag has none.
    let blue = call(&mut c, &["LOOKUP", "alice@example.test", "blue"]).await;
    assert_eq!(blue, ["OK", "127.0.1.11", "10143"]);
    let none = call(&mut c, &["LOOKUP", "alice@example.test", "green"]).await;
    assert_eq!(none[..2], ["FAIL", "NOBACKEND"]);
    // The tag is mandatory.
    let bad = call(&mut c, &["LOOKUP", "alice@example.test"]).await;
    assert_eq!(bad[..2], ["FAIL", "SYNTAX"]);
    // Unknown commands are answered, not fatal.
    let unknown = call(&mut c, &["FROB"]).await;
    assert_eq!(unknown[..2], ["FAIL", "UNKNOWN-COMMAND"]);
    assert_eq!(call(&mut c, &["PING"]).await, ["PONG"]);
    // Sessions.
    let open = call(
        &mut c,
        &[
            "SESSION-OPEN",
            "s1",
            "alice@example.test",
            "",
            &first[1],
            "imap",
        ],
    )
    .await;
    assert_eq!(open, ["OK"]);
    assert_eq!(call(&mut c, &["SESSION-CLOSE", "s1"]).await, ["OK"]);
    svc.stop().await;
}

#[tokio::test]
async fn registration_down_and_flush_over_the_wire() {
    let svc = Running::start(DirectorService::default()).await;
    let mut c = connect(svc.addr).await;
    // No backend at all yet.
    let none = call(&mut c, &["LOOKUP", "bob", ""]).await;
    assert_eq!(none[..2], ["FAIL", "NOBACKEND"]);
    assert_eq!(
        call(&mut c, &["BACKEND-UP", "127.0.0.21", "143", "", "100", "5"]).await,
        ["OK"]
    );
    assert_eq!(
        call(&mut c, &["BACKEND-UP", "127.0.0.22", "143", "", "100", "5"]).await,
        ["OK"]
    );
    assert_eq!(
        call(&mut c, &["BACKEND-UP", "127.0.0.21", "143", "", "100", "5"]).await,
        ["OK", "STALE"]
    );
    let r = call(&mut c, &["LOOKUP", "bob", ""]).await;
    assert_eq!(r[0], "OK");
    let (mine, other) = if r[1] == "127.0.0.21" {
        ("127.0.0.21", "127.0.0.22")
    } else {
        ("127.0.0.22", "127.0.0.21")
    };
    // FLUSH: bob stays (pinned), a new user avoids the draining backend.
    assert_eq!(call(&mut c, &["BACKEND-FLUSH", mine, "6"]).await, ["OK"]);
    assert_eq!(call(&mut c, &["LOOKUP", "bob", ""]).await[1], mine);
    for i in 0..20 {
        let u = format!("new{i}");
        assert_eq!(call(&mut c, &["LOOKUP", &u, ""]).await[1], other);
    }
    // DOWN: bob re-routes.
    assert_eq!(call(&mut c, &["BACKEND-DOWN", mine, "7"]).await, ["OK"]);
    assert_eq!(call(&mut c, &["LOOKUP", "bob", ""]).await[1], other);
    // A second connection sees the same state.
    let mut c2 = connect(svc.addr).await;
    assert_eq!(call(&mut c2, &["LOOKUP", "bob", ""]).await[1], other);
    let down = call(&mut c2, &["BACKEND-DOWN", "127.0.0.99"]).await;
    assert_eq!(down[..2], ["FAIL", "UNKNOWN-BACKEND"]);
    svc.stop().await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let svc = Running::start(config()).await;
    let mut c = connect(svc.addr).await;
    let users: Vec<String> = (0..500).map(|i| format!("p{i}@d.test")).collect();
    for u in &users {
        c.feed(&["LOOKUP", u.as_str(), ""][..]).await.unwrap();
    }
    SinkExt::<&[&str]>::flush(&mut c).await.unwrap();
    let mut first = Vec::new();
    for _ in &users {
        let r = recv(&mut c).await;
        assert_eq!(r[0], "OK");
        first.push(r[1].clone());
    }
    // Answers are per user: asking one by one gives the same sequence.
    for (u, want) in users.iter().zip(&first).take(50) {
        assert_eq!(&call(&mut c, &["LOOKUP", u, ""]).await[1], want);
    }
    svc.stop().await;
}

#[tokio::test]
async fn wrong_version_is_refused_and_closed() {
    let svc = Running::start(config()).await;
    let stream = TcpStream::connect(svc.addr).await.unwrap();
    let mut c = Framed::new(stream, LineCodec::default());
    recv(&mut c).await;
    c.send(&["VERSION", "director", "2", "0"][..])
        .await
        .unwrap();
    assert_eq!(recv(&mut c).await[..2], ["FAIL", "VERSION"]);
    let end = tokio::time::timeout(T, c.next()).await.unwrap();
    assert!(end.is_none(), "closed after refusing the version");
    svc.stop().await;
}

#[tokio::test]
async fn invalid_template_and_unresolvable_host_abort_start_up() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad = DirectorService {
        username_hash: "%Lq".into(),
        ..DirectorService::default()
    };
    let err = yarilo_director::run(&bad, listener, std::future::pending())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("username_hash"), "{err}");

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad = DirectorService {
        mail_servers: vec![MailServer {
            host: "no-such-host.invalid".into(),
            ..MailServer::default()
        }],
        ..DirectorService::default()
    };
    let err = yarilo_director::run(&bad, listener, std::future::pending())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
}

/// Keepalive: an idle peer gets PING; one that never answers is closed
/// after ping_timeout; one that answers stays. Paused time, no sleeping.
#[tokio::test(start_paused = true)]
async fn silent_peers_are_pinged_then_closed() {
    let mut d = Director::new(Settings::defaults(), DirectorId(1));
    d.add_static(0, "127.0.0.11".parse().unwrap(), 1, "", 100);
    let shared = Shared::new(
        d,
        Timeouts {
            ping_interval: Duration::from_secs(5),
            ping_timeout: Duration::from_secs(3),
            write_timeout: Some(Duration::from_secs(10)),
            shutdown_grace: Duration::from_secs(30),
        },
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (ours, theirs) = tokio::io::duplex(4096);
    let peer = "127.0.0.1:1".parse().unwrap();
    let task = tokio::spawn(serve_connection(shared, theirs, peer, stop_rx));
    let mut c = Framed::new(ours, LineCodec::default());
    recv(&mut c).await;
    c.send(&["VERSION", "director", "1", "0"][..])
        .await
        .unwrap();
    // Idle: the director pings; we answer and get pinged again later.
    assert_eq!(recv(&mut c).await, ["PING"]);
    c.send(&["PONG"][..]).await.unwrap();
    assert_eq!(recv(&mut c).await, ["PING"]);
    // Now stay silent: closed.
    let end = tokio::time::timeout(Duration::from_secs(60), c.next())
        .await
        .unwrap();
    assert!(end.is_none());
    task.await.unwrap();
    drop(stop_tx);
}

/// Kick orders reach watching login connections: for the sessions of a
/// backend that leaves, and for an admin move (after user_kick_delay).
#[tokio::test]
async fn kicks_reach_watchers_on_backend_down_and_admin_move() {
    let config = DirectorService {
        user_kick_delay: 0,
        ..DirectorService::default()
    };
    let shared = Shared::from_config(&config, DirectorId(1)).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(yarilo_director::service::serve(
        shared.clone(),
        listener,
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut watcher = connect(addr).await;
    assert_eq!(call(&mut watcher, &["KICK-WATCH"]).await, ["OK"]);
    let mut c = connect(addr).await;
    for ip in ["127.0.0.21", "127.0.0.22", "127.0.0.23"] {
        assert_eq!(
            call(&mut c, &["BACKEND-UP", ip, "143", "", "100", "1"]).await,
            ["OK"]
        );
    }
    let at = call(&mut c, &["LOOKUP", "Eve@D.test", ""]).await[1].clone();
    let open = call(
        &mut c,
        &["SESSION-OPEN", "s1", "Eve@D.test", "", &at, "imap"],
    )
    .await;
    assert_eq!(open, ["OK"]);
    // The backend leaves: its session's user is kicked there.
    assert_eq!(call(&mut c, &["BACKEND-DOWN", &at, "2"]).await, ["OK"]);
    assert_eq!(
        recv(&mut watcher).await,
        ["USER-KICKED", "Eve@D.test", at.as_str()]
    );
    // Admin move: new pin at once, kick on the old backend.
    let now_at = call(&mut c, &["LOOKUP", "eve@d.test", ""]).await[1].clone();
    assert_ne!(now_at, at);
    let target = ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
        .into_iter()
        .find(|ip| *ip != at && *ip != now_at)
        .unwrap();
    let moved = shared
        .move_user("eve@d.test", "", target.parse().unwrap())
        .unwrap();
    assert_eq!(moved.from.unwrap().to_string(), now_at);
    assert_eq!(
        recv(&mut watcher).await,
        ["USER-KICKED", "eve@d.test", now_at.as_str()]
    );
    assert_eq!(call(&mut c, &["LOOKUP", "EVE@d.test", ""]).await[1], target);
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// Confirmed-kill hold: after an admin move, the user's LOOKUP waits
/// until the old session closes, then lands on the new backend; the
/// flush hook then runs with the documented arguments.
#[tokio::test]
async fn moved_users_lookup_waits_for_the_old_session_then_the_hook_runs() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hook.out");
    let hook = dir.path().join("hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho \"$@\" > {}.tmp && mv {}.tmp {}\n",
            out.display(),
            out.display(),
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = DirectorService {
        user_kick_delay: 0,
        flush_program: hook.display().to_string(),
        ..DirectorService::default()
    };
    let shared = Shared::from_config(&config, DirectorId(1)).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(yarilo_director::service::serve(
        shared.clone(),
        listener,
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut c = connect(addr).await;
    for ip in ["127.0.0.21", "127.0.0.22"] {
        assert_eq!(
            call(&mut c, &["BACKEND-UP", ip, "143", "", "100", "1"]).await,
            ["OK"]
        );
    }
    let old = call(&mut c, &["LOOKUP", "gina@d.test", ""]).await[1].clone();
    let new = if old == "127.0.0.21" {
        "127.0.0.22"
    } else {
        "127.0.0.21"
    };
    assert_eq!(
        call(
            &mut c,
            &["SESSION-OPEN", "g1", "gina@d.test", "", &old, "imap"]
        )
        .await,
        ["OK"]
    );
    shared
        .move_user("gina@d.test", "", new.parse().unwrap())
        .unwrap();

    let mut c2 = connect(addr).await;
    c2.send(&["LOOKUP", "gina@d.test", ""][..]).await.unwrap();
    // Held while the old session lives.
    assert!(tokio::time::timeout(Duration::from_millis(300), c2.next())
        .await
        .is_err());
    assert_eq!(call(&mut c, &["SESSION-CLOSE", "g1"]).await, ["OK"]);
    let r = recv(&mut c2).await;
    // A registered pod: its BACKEND-UP port is nominal, the login dials its own.
    assert_eq!(r, ["OK", new, "0"]);

    // The hook ran: FLUSH <user> <hash> <old> <new>.
    let deadline = tokio::time::Instant::now() + T;
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&out) {
            break t;
        }
        assert!(tokio::time::Instant::now() < deadline, "hook never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let args: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(args[0], "FLUSH");
    assert_eq!(args[1], "gina@d.test");
    assert!(args[2].parse::<u32>().is_ok());
    assert_eq!(args[3], old);
    assert_eq!(args[4], new);
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// A graceful admin flush moves users in a self-clocked window of
/// max_parallel_moves: the next window is kicked only once the previous
/// one's sessions are confirmed gone.
#[tokio::test]
async fn graceful_flush_kicks_in_windows_clocked_by_confirmations() {
    let config = DirectorService {
        user_kick_delay: 0,
        max_parallel_moves: 2,
        ..DirectorService::default()
    };
    let shared = Shared::from_config(&config, DirectorId(1)).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(yarilo_director::service::serve(
        shared.clone(),
        listener,
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut c = connect(addr).await;
    for ip in ["127.0.0.21", "127.0.0.22"] {
        assert_eq!(
            call(&mut c, &["BACKEND-UP", ip, "143", "", "100", "1"]).await,
            ["OK"]
        );
    }
    // Three users with a session on .21.
    let mut on21 = Vec::new();
    for i in 0.. {
        let u = format!("f{i}@d.test");
        if call(&mut c, &["LOOKUP", &u, ""]).await[1] == "127.0.0.21" {
            let open = call(
                &mut c,
                &["SESSION-OPEN", &format!("s-{u}"), &u, "", "127.0.0.21"],
            )
            .await;
            assert_eq!(open, ["OK"]);
            on21.push(u);
            if on21.len() == 3 {
                break;
            }
        }
    }
    let mut watcher = connect(addr).await;
    assert_eq!(call(&mut watcher, &["KICK-WATCH"]).await, ["OK"]);
    let ip: std::net::IpAddr = "127.0.0.21".parse().unwrap();
    let users = shared.director().admin_flush(ip).unwrap();
    assert_eq!(users.len(), 3);
    shared.drain_flushed(ip, users, false);
    let first = recv(&mut watcher).await;
    let second = recv(&mut watcher).await;
    assert_eq!(first[0], "USER-KICKED");
    assert_eq!(second[0], "USER-KICKED");
    // The third waits for the first window's confirmations.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), watcher.next())
            .await
            .is_err()
    );
    for kicked in [&first[1], &second[1]] {
        let close = call(&mut c, &["SESSION-CLOSE", &format!("s-{kicked}")]).await;
        assert_eq!(close, ["OK"]);
    }
    let third = recv(&mut watcher).await;
    assert_eq!(third[0], "USER-KICKED");
    assert!(on21.contains(&third[1]) && third[1] != first[1] && third[1] != second[1]);
    // The kicked users re-place on the survivor.
    assert_eq!(
        call(&mut c, &["LOOKUP", &first[1], ""]).await[1],
        "127.0.0.22"
    );
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}
