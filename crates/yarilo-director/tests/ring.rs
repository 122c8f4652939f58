//! The director ring over real TCP on loopback: three directors on
//! 127.0.0.2, 127.0.0.3 and 127.0.0.11 (string order would put .11 first;
//! the ring orders by number), ephemeral ports, short intervals.
//!
//! Timings are printed, never asserted (the machine is shared and noisy);
//! every wait is bounded generously and fails with what it waited for.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::codec::Framed;
use yarilo_config::{DirectorApi, DirectorService, MailServer, Secret};
use yarilo_director::service::{prepare, serve, Shared};
use yarilo_wire::LineCodec;

const WAIT: Duration = Duration::from_secs(30);
const SECRET: &str = "ring-test-secret";

fn backends() -> Vec<IpAddr> {
    ["127.1.0.1", "127.1.0.2", "127.1.0.3"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect()
}

fn config(seeds: &[SocketAddr], secret: Option<&str>) -> DirectorService {
    DirectorService {
        listen: "127.0.0.1:0".into(),
        mail_servers: backends()
            .into_iter()
            .map(|ip| MailServer {
                host: ip.to_string(),
                port: 10143,
                tag: String::new(),
                vhosts: 100,
            })
            .collect(),
        ring_secret: secret.map(Secret::new),
        peers: seeds.iter().map(|a| a.to_string()).collect(),
        ping_interval: 1,
        ping_timeout: 1,
        anti_entropy_interval: 1,
        seed_poll_interval: 1,
        seed_poll_idle_interval: 1,
        min_members: 3,
        session_grace_period: 2,
        user_kick_delay: -1,
        api: DirectorApi {
            listen: String::new(),
            ..DirectorApi::default()
        },
        ..DirectorService::default()
    }
}

struct Node {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn start(listener: TcpListener, seeds: &[SocketAddr], secret: Option<&str>) -> Node {
        let addr = listener.local_addr().unwrap();
        let cfg = config(seeds, secret);
        let shared = prepare(&cfg, addr, None).await.unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let s = shared.clone();
        let task = tokio::spawn(async move {
            serve(s, listener, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Node {
            addr,
            shared,
            stop: Some(tx),
            task,
        }
    }

    fn members(&self) -> Vec<SocketAddr> {
        self.shared.ring().map(|r| r.members()).unwrap_or_default()
    }

    /// `kill -9`: every socket of this director closes, nothing is said.
    fn kill(self) {
        self.task.abort();
    }

    /// SIGTERM: graceful leave.
    async fn terminate(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(WAIT, self.task).await;
    }

    fn pin(&self, user: &str) -> Option<IpAddr> {
        let now = self.shared.now();
        self.shared.director().pin_of(now, user, "").map(|p| p.0)
    }
}

async fn bind(ip: &str, port: u16) -> TcpListener {
    // A restarted director binds the address it had; the old socket may
    // linger for a moment.
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpListener::bind((ip, port)).await {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                eprintln!("bind {ip}:{port}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("bind {ip}:{port}: {e}"),
        }
    }
}

/// Polls `check` until it holds; returns how long that took.
async fn wait_until(what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < WAIT,
            "timed out after {WAIT:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

fn agree(nodes: &[&Node], expected: &[SocketAddr]) -> bool {
    let mut want = expected.to_vec();
    want.sort();
    nodes.iter().all(|n| n.members() == want)
}

type Client = Framed<TcpStream, LineCodec>;

async fn recv(c: &mut Client) -> Vec<String> {
    tokio::time::timeout(WAIT, c.next())
        .await
        .expect("reply in time")
        .expect("connection open")
        .expect("framing ok")
        .expect("valid line")
}

async fn connect(addr: SocketAddr) -> Client {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut c = Framed::new(stream, LineCodec::default());
    assert_eq!(recv(&mut c).await[0], "VERSION");
    c.send(&["VERSION", "director", "1", "0"][..])
        .await
        .unwrap();
    c
}

async fn lookup(addr: SocketAddr, user: &str) -> IpAddr {
    let mut c = connect(addr).await;
    c.send(&["LOOKUP", user, ""][..]).await.unwrap();
    let reply = recv(&mut c).await;
    assert_eq!(reply[0], "OK", "{reply:?}");
    reply[1].parse().unwrap()
}

/// Every node answers the same backend for every user.
async fn no_split(nodes: &[&Node], users: &[String]) {
    for u in users {
        let mut seen = Vec::new();
        for n in nodes {
            seen.push(lookup(n.addr, u).await);
        }
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "split for {u}: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_directors_form_a_ring_agree_survive_a_kill_and_a_rejoin() {
    // .2 < .3 < .11 by number.
    let la = bind("127.0.0.2", 0).await;
    let lb = bind("127.0.0.3", 0).await;
    let lc = bind("127.0.0.11", 0).await;
    let seeds: Vec<SocketAddr> = [&la, &lb, &lc]
        .iter()
        .map(|l| l.local_addr().unwrap())
        .collect();
    let t0 = Instant::now();
    let a = Node::start(la, &seeds, Some(SECRET)).await;
    let b = Node::start(lb, &seeds, Some(SECRET)).await;
    let c = Node::start(lc, &seeds, Some(SECRET)).await;
    let all = vec![a.addr, b.addr, c.addr];
    wait_until("3 directors agree on 3 members", || {
        agree(&[&a, &b, &c], &all)
    })
    .await;
    let formed = t0.elapsed();
    println!("ring: formation of 3: {} ms", formed.as_millis());
    assert_eq!(a.members(), vec![a.addr, b.addr, c.addr], "numeric order");
    // Each dials its right neighbour: a→b, b→c, c→a.
    wait_until("every director dials its right neighbour", || {
        let dials = |n: &Node| {
            n.shared
                .ring()
                .unwrap()
                .links()
                .into_iter()
                .filter(|l| l.1)
                .map(|l| l.0)
                .collect::<Vec<_>>()
        };
        dials(&a) == vec![b.addr] && dials(&b) == vec![c.addr] && dials(&c) == vec![a.addr]
    })
    .await;

    // A LOOKUP at one director: the others agree.
    let alice = lookup(b.addr, "alice@example.org").await;
    let t = Instant::now();
    wait_until("alice's pin replicated", || {
        a.pin("alice@example.org") == Some(alice) && c.pin("alice@example.org") == Some(alice)
    })
    .await;
    println!(
        "ring: USER-ASSIGN to both peers: {} ms",
        t.elapsed().as_millis()
    );
    no_split(&[&a, &b, &c], &["alice@example.org".into()]).await;

    // An admin move at one director (a pin the hash would not choose).
    let hashed = lookup(a.addr, "bob@example.org").await;
    let target = backends().into_iter().find(|ip| *ip != hashed).unwrap();
    a.shared.move_user("bob@example.org", "", target).unwrap();
    let t = Instant::now();
    wait_until("bob's move replicated", || {
        b.pin("bob@example.org") == Some(target) && c.pin("bob@example.org") == Some(target)
    })
    .await;
    println!(
        "ring: moved pin to both peers: {} ms",
        t.elapsed().as_millis()
    );

    // Conflicting moves on two directors at once: Lamport order decides,
    // and every director ends with the same answer.
    let (x, y) = (backends()[0], backends()[1]);
    a.shared.move_user("carol@example.org", "", x).unwrap();
    c.shared.move_user("carol@example.org", "", y).unwrap();
    wait_until("carol's conflicting pins converge", || {
        let p = a.pin("carol@example.org");
        p.is_some() && p == b.pin("carol@example.org") && p == c.pin("carol@example.org")
    })
    .await;
    println!(
        "ring: conflicting moves converged on {:?}",
        a.pin("carol@example.org")
    );

    let users: Vec<String> = (0..60).map(|i| format!("user{i}@example.org")).collect();
    for (i, u) in users.iter().enumerate() {
        lookup([a.addr, b.addr, c.addr][i % 3], u).await;
    }
    wait_until("60 pins on every director", || {
        users
            .iter()
            .all(|u| a.pin(u).is_some() && a.pin(u) == b.pin(u) && a.pin(u) == c.pin(u))
    })
    .await;
    no_split(&[&a, &b, &c], &users).await;

    // kill -9 of the middle director: both neighbours notice.
    let b_addr = b.addr;
    let b_ip = b_addr.ip().to_string();
    let deaths_before = a.shared.ring().unwrap().stats().deaths_declared.get()
        + c.shared.ring().unwrap().stats().deaths_declared.get();
    let t = Instant::now();
    b.kill();
    let killed = wait_until("a and c drop the killed director", || {
        agree(&[&a, &c], &[a.addr, c.addr])
    })
    .await;
    let deaths = a.shared.ring().unwrap().stats().deaths_declared.get()
        + c.shared.ring().unwrap().stats().deaths_declared.get()
        - deaths_before;
    println!(
        "ring: kill -9 detected and converged in {} ms ({} declaration(s) by the neighbours)",
        killed.as_millis(),
        deaths
    );
    assert!(deaths >= 1, "a neighbour declared the death");
    let _ = t;

    // While it is down, a move at a survivor. (The pin made by the LOOKUP
    // must have reached c first: a move concurrent with another
    // director's fresh pin is ordered by Lamport stamp, not by intent.)
    let dave_hashed = lookup(a.addr, "dave@example.org").await;
    wait_until("dave's pin reaches c over the new a→c connection", || {
        c.pin("dave@example.org") == Some(dave_hashed)
    })
    .await;
    let dave_to = backends()
        .into_iter()
        .find(|ip| *ip != dave_hashed)
        .unwrap();
    c.shared.move_user("dave@example.org", "", dave_to).unwrap();
    wait_until("dave's move reaches a", || {
        a.pin("dave@example.org") == Some(dave_to)
    })
    .await;
    no_split(&[&a, &c], &users).await;

    // It restarts on its address with a new incarnation and an empty
    // directory; the ring streams the routing state to it.
    let lb = bind(&b_ip, b_addr.port()).await;
    let t = Instant::now();
    let b = Node::start(lb, &seeds, Some(SECRET)).await;
    let rejoined = wait_until("3 directors agree again after the rejoin", || {
        agree(&[&a, &b, &c], &all)
    })
    .await;
    println!("ring: rejoin converged in {} ms", rejoined.as_millis());
    wait_until("the rejoined director has the moved pins", || {
        b.pin("bob@example.org") == Some(target) && b.pin("dave@example.org") == Some(dave_to)
    })
    .await;
    println!(
        "ring: rejoined director holds the routing state {} ms after its start",
        t.elapsed().as_millis()
    );
    assert_eq!(lookup(b.addr, "bob@example.org").await, target);
    assert_eq!(lookup(b.addr, "dave@example.org").await, dave_to);
    no_split(&[&a, &b, &c], &users).await;

    // SIGTERM: a graceful leave is seen at once (no probe window).
    let c_addr = c.addr;
    let t = Instant::now();
    let leaving = tokio::spawn(c.terminate());
    let left = wait_until("a and b drop the director that left", || {
        agree(&[&a, &b], &[a.addr, b.addr])
    })
    .await;
    leaving.await.unwrap();
    println!("ring: graceful leave converged in {} ms", left.as_millis());
    assert!(!a.members().contains(&c_addr));
    let _ = t;
    // N=2: only the lower one dials.
    wait_until("with two members only the lower one dials", || {
        let dials = |n: &Node| {
            n.shared
                .ring()
                .unwrap()
                .links()
                .into_iter()
                .filter(|l| l.1)
                .count()
        };
        dials(&a) == 1 && dials(&b) == 0
    })
    .await;
    no_split(&[&a, &b], &users).await;
    println!(
        "ring: summary formation={}ms kill={}ms rejoin={}ms leave={}ms",
        formed.as_millis(),
        killed.as_millis(),
        rejoined.as_millis(),
        left.as_millis()
    );
    a.terminate().await;
    b.terminate().await;
}

#[tokio::test]
async fn a_join_with_a_bad_proof_is_refused() {
    let l = bind("127.0.0.2", 0).await;
    let node = Node::start(l, &[], Some(SECRET)).await;
    let mut c = connect(node.addr).await;
    let fake = "127.0.0.99:1";
    c.send(&["DIRECTOR-HELLO", fake, "00112233"][..])
        .await
        .unwrap();
    let challenge = recv(&mut c).await;
    assert_eq!(challenge[0], "DIRECTOR-CHALLENGE", "{challenge:?}");
    assert_eq!(challenge[1], node.addr.to_string());
    c.send(&["DIRECTOR-JOIN", fake, "5", "ring", &"ab".repeat(32)][..])
        .await
        .unwrap();
    let reply = recv(&mut c).await;
    assert_eq!(reply, ["JOIN-FAIL", "bad proof"]);
    assert_eq!(node.members(), vec![node.addr]);
    assert_eq!(node.shared.ring().unwrap().stats().joins_refused.get(), 1);
    // A LOOKUP client that sends ring lines gets an answer, not a crash.
    let mut c = connect(node.addr).await;
    c.send(&["DIRECTOR-HELLO", "garbage"][..]).await.unwrap();
    assert_eq!(recv(&mut c).await[0], "JOIN-FAIL");
    node.terminate().await;
}

#[tokio::test]
async fn a_director_with_another_secret_or_none_never_joins() {
    let la = bind("127.0.0.2", 0).await;
    let lb = bind("127.0.0.3", 0).await;
    let lc = bind("127.0.0.4", 0).await;
    let seeds: Vec<SocketAddr> = [&la, &lb, &lc]
        .iter()
        .map(|l| l.local_addr().unwrap())
        .collect();
    let a = Node::start(la, &seeds, Some(SECRET)).await;
    let b = Node::start(lb, &seeds, Some("another secret")).await;
    let c = Node::start(lc, &seeds, None).await;
    // Wait for evidence, not for time: each secret-holding director has
    // refused a join from the other at least twice (two poll rounds each).
    let proofs_failed = |n: &Node| n.shared.ring().unwrap().stats().proofs_failed.get();
    wait_until("two refused joins at each director with a secret", || {
        proofs_failed(&a) >= 2 && proofs_failed(&b) >= 2
    })
    .await;
    assert_eq!(a.members(), vec![a.addr]);
    assert_eq!(b.members(), vec![b.addr]);
    assert!(c.shared.ring().is_none(), "no secret: no ring");
    // Each one still answers LOOKUPs alone.
    for n in [&a, &b, &c] {
        lookup(n.addr, "someone").await;
    }
    a.terminate().await;
    b.terminate().await;
    c.terminate().await;
}

/// A member that joined and then hung (SIGSTOP: the kernel still accepts
/// connections, nothing answers) is declared dead by the neighbour that
/// dials it: the dial gets no greeting, the probes get none either.
#[tokio::test]
async fn a_hung_member_is_evicted_by_its_neighbour() {
    use yarilo_director::cluster::wire::{dialer_proof, JoinMode};
    let l = bind("127.0.0.2", 0).await;
    let node = Node::start(l, &[], Some(SECRET)).await;
    // The hung member's socket: bound and listening, never accepting.
    let hung = bind("127.0.0.5", 0).await;
    let hung_addr = hung.local_addr().unwrap();
    let mut c = connect(node.addr).await;
    let nonce = "0123456789abcdef";
    c.send(&["DIRECTOR-HELLO", &hung_addr.to_string(), nonce][..])
        .await
        .unwrap();
    let challenge = recv(&mut c).await;
    assert_eq!(challenge[0], "DIRECTOR-CHALLENGE");
    let proof = dialer_proof(
        SECRET.as_bytes(),
        &challenge[2],
        nonce,
        hung_addr,
        node.addr,
        1,
        JoinMode::Poll,
    );
    c.send(&["DIRECTOR-JOIN", &hung_addr.to_string(), "1", "poll", &proof][..])
        .await
        .unwrap();
    assert_eq!(recv(&mut c).await[0], "JOIN-OK");
    drop(c);
    wait_until("the joined member is listed", || {
        node.members().contains(&hung_addr)
    })
    .await;
    let t = Instant::now();
    wait_until("the hung member is evicted", || {
        node.members() == vec![node.addr]
    })
    .await;
    println!(
        "ring: hung member (no RST) evicted in {} ms",
        t.elapsed().as_millis()
    );
    assert_eq!(node.shared.ring().unwrap().stats().deaths_declared.get(), 1);
    drop(hung);
    node.terminate().await;
}

/// Two directors that each hold many users before they meet: both start
/// the connection by writing a snapshot far larger than the socket
/// buffers. Each side must read while it writes, or the link never comes
/// up (both ends blocked in write until `write_timeout`, again and again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_full_directors_exchange_snapshots_larger_than_the_socket_buffers() {
    const USERS: usize = 300_000;
    let la = bind("127.0.0.2", 0).await;
    let lb = bind("127.0.0.3", 0).await;
    let (a_addr, b_addr) = (la.local_addr().unwrap(), lb.local_addr().unwrap());
    let mut nodes = Vec::new();
    for (listener, seeds, prefix) in [(la, vec![b_addr], "a"), (lb, vec![a_addr], "b")] {
        let addr = listener.local_addr().unwrap();
        let mut cfg = config(&seeds, Some(SECRET));
        cfg.min_members = 2;
        let shared = prepare(&cfg, addr, None).await.unwrap();
        {
            // Pinned before the ring runs: the whole directory goes out in
            // the first snapshot.
            let now = shared.now();
            let mut d = shared.director();
            for i in 0..USERS {
                d.lookup(now, &format!("{prefix}{i}@example.org"), "", None)
                    .unwrap();
            }
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let s = shared.clone();
        let task = tokio::spawn(async move {
            serve(s, listener, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        nodes.push(Node {
            addr,
            shared,
            stop: Some(tx),
            task,
        });
    }
    let expected = {
        let mut d = nodes[0].shared.director();
        let mut hashes: Vec<u32> = (0..USERS)
            .flat_map(|i| [format!("a{i}@example.org"), format!("b{i}@example.org")])
            .map(|u| d.hash_user(&u))
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        hashes.len()
    };
    let took = wait_until("both directors hold both halves of the directory", || {
        if std::env::var("RING_DEBUG").is_ok() {
            for n in &nodes {
                let r = n.shared.ring().unwrap();
                eprintln!(
                    "{} members {:?} links {:?} users {} behind {}",
                    n.addr,
                    r.members(),
                    r.links(),
                    n.shared.director().users().len(),
                    r.stats().links_behind.get()
                );
            }
        }
        // Distinct hashes of the 2 × USERS names (a 32-bit hash collides
        // now and then).
        nodes
            .iter()
            .all(|n| n.shared.director().users().len() == expected)
    })
    .await;
    println!("two directors of {USERS} users each exchanged their snapshots in {took:?}");
    for n in &nodes {
        assert_eq!(
            n.shared.ring().unwrap().stats().links_behind.get(),
            0,
            "no connection fell behind"
        );
    }
    for n in nodes {
        n.terminate().await;
    }
}
