//! Director ring at scale: a join into a ring holding 1M sticky users,
//! LOOKUP throughput on a member while the ring gossips new assignments,
//! and whether two members that both hold many users can (re)connect.
//!
//! cargo run --release -p yarilo-director --example ring_scale -- [users] [rate] [seconds] [connections] [depth]
//!
//! Defaults: 1,000,000 users, 10,000 assignments/s, 10 s windows, 4
//! connections pipelining 128 LOOKUPs each. `RUST_LOG` overrides the log
//! filter (default: warnings and the crate's info lines).
//! `RING_SCALE_NO_RELAY=1` runs without the relays (a control: what they
//! report is not of their making; no byte counts then).
//!
//! Everything runs in this one process on a 2-worker tokio runtime, through
//! the public API only (`prepare`, `serve`, `Shared::director()`, the
//! ring's member list, links and counters):
//!
//! - Directors A < B < C listen on 127.0.1.{2,3,4} (ephemeral ports); each
//!   has a byte-counting TCP relay in front of it on 127.0.0.{2,3,4}, and
//!   that relay's address is its `ring_address`, so every ring connection
//!   (dials, seed polls, probes) passes a relay. The relay reads the
//!   dialer's `DIRECTOR-JOIN` line to attribute each connection to a
//!   (dialer, acceptor, mode); counts are TCP payload bytes. It also
//!   notes a write it cannot finish: the far side has stopped reading.
//!   A monitor prints link changes, closes and such stalls as they happen.
//! - Part 1: A and B form a ring; `users` users are pinned on them through
//!   `assign_and_pin`, alternating batches between A and B so both gossip,
//!   paced so the slower side never lags more than `MAX_LAG` assignments
//!   (a link whose queue overflows is closed and re-synchronised, which
//!   would measure that instead). Hash collisions merge two names into one
//!   record, so pinning tops up until both hold exactly `users` records.
//!   Then C starts with A as its seed; we poll C's user count until it
//!   holds them all, then wait (bounded) for the ring to settle: every
//!   link up, no stalled write, no traffic beyond keepalives.
//! - Part 2: LOOKUPs of pinned users straight to B's listener (not through
//!   the relay), pipelined over several connections, for `seconds`; then
//!   again while A pins `rate` new users per second, which the ring
//!   gossips to B and C. We check that B and C end up with every one.
//! - Part 3: for growing N, director D holding N users and director E
//!   holding the same N (pinned before it serves) connect; we report
//!   whether both snapshots get through.
//!
//! Timings are printed, never asserted. Load generator, relays and the
//! directors share the same cores, so the figures are floors.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark measures wall time; the clock ban is for the state machine.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use yarilo_config::{DirectorApi, DirectorService, MailServer, Secret};
use yarilo_director::service::{prepare, serve, Shared};
use yarilo_wire::LineCodec;

const SECRET: &str = "ring-scale-secret";
/// Most assignments the pinning side may be ahead of the other member.
/// Well under the ring's per-connection queue, so pinning measures
/// replication and not the overflow path.
const MAX_LAG: u64 = 100_000;
/// Assignments per director lock while pinning.
const PIN_BATCH: u64 = 2_000;
/// Bound on every wait; a wait that runs out is reported, not fatal.
const PATIENCE: Duration = Duration::from_secs(300);

/// The run's clock: the log lines' uptime and the monitor's `+t` agree.
static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Milliseconds since the start of the run (never 0, so 0 can mean "none").
fn ms() -> u64 {
    T0.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

fn user(i: u64) -> String {
    format!("user{i}@example{}.test", i % 97)
}

fn rss_bytes() -> u64 {
    // Resident pages × page size, from /proc (Linux).
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

// ---- the byte-counting relay ---------------------------------------------

/// One connection through a relay.
struct ConnLog {
    /// (dialer's ring address, join mode) from its `DIRECTOR-JOIN` line;
    /// None until seen (a probe never sends one).
    join: Mutex<Option<(String, String)>>,
    to_acceptor: AtomicU64,
    to_dialer: AtomicU64,
    /// When a write towards the acceptor / the dialer began and has not
    /// finished (`ms()`), 0 when none is pending: a write pending for long
    /// means that side has stopped reading.
    acceptor_blocked: AtomicU64,
    dialer_blocked: AtomicU64,
    /// When the last read of more than 512 bytes went through (`ms()`):
    /// snapshot or gossip data; keepalives and member-list re-sends are
    /// smaller.
    last_bulk_ms: AtomicU64,
    opened: Instant,
    closed: AtomicBool,
}

impl ConnLog {
    fn join(&self) -> (String, String) {
        self.join
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| ("?".into(), "probe".into()))
    }

    /// Milliseconds the oldest pending write has waited.
    fn blocked_ms(&self) -> u64 {
        let now = ms();
        [&self.acceptor_blocked, &self.dialer_blocked]
            .iter()
            .map(|b| match b.load(Ordering::Relaxed) {
                0 => 0,
                t => now.saturating_sub(t),
            })
            .max()
            .unwrap_or(0)
    }
}

#[derive(Default)]
struct RelayLog {
    conns: Mutex<Vec<Arc<ConnLog>>>,
}

impl RelayLog {
    fn total(&self) -> u64 {
        self.conns
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.to_acceptor.load(Ordering::Relaxed) + c.to_dialer.load(Ordering::Relaxed))
            .sum()
    }
}

/// Accepts on `listener` (the ring address) and pipes every connection to
/// `target` (the director's real listener), counting both directions.
async fn relay(listener: TcpListener, target: SocketAddr, log: Arc<RelayLog>) {
    loop {
        let Ok((downstream, _)) = listener.accept().await else {
            continue;
        };
        let log = log.clone();
        tokio::spawn(async move {
            let Ok(upstream) = TcpStream::connect(target).await else {
                return;
            };
            let _ = downstream.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let conn = Arc::new(ConnLog {
                join: Mutex::new(None),
                to_acceptor: AtomicU64::new(0),
                to_dialer: AtomicU64::new(0),
                acceptor_blocked: AtomicU64::new(0),
                dialer_blocked: AtomicU64::new(0),
                last_bulk_ms: AtomicU64::new(0),
                opened: Instant::now(),
                closed: AtomicBool::new(false),
            });
            log.conns.lock().unwrap().push(conn.clone());
            let (dr, dw) = downstream.into_split();
            let (ur, uw) = upstream.into_split();
            tokio::join!(
                pipe(
                    dr,
                    uw,
                    &conn.to_acceptor,
                    &conn.acceptor_blocked,
                    &conn.last_bulk_ms,
                    Some(&conn)
                ),
                pipe(
                    ur,
                    dw,
                    &conn.to_dialer,
                    &conn.dialer_blocked,
                    &conn.last_bulk_ms,
                    None
                )
            );
            conn.closed.store(true, Ordering::Relaxed);
        });
    }
}

/// Copies one direction, half-closing the other side at EOF. With `sniff`
/// the first few KiB are scanned for the dialer's `DIRECTOR-JOIN`.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    count: &AtomicU64,
    blocked: &AtomicU64,
    last_bulk: &AtomicU64,
    sniff: Option<&ConnLog>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut head: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(conn) = sniff {
            if head.len() < 4096 {
                head.extend_from_slice(&buf[..n]);
                let mut join = conn.join.lock().unwrap();
                if join.is_none() {
                    *join = String::from_utf8_lossy(&head).lines().find_map(|l| {
                        let f: Vec<&str> = l.split('\t').collect();
                        (f.len() >= 4 && f[0] == "DIRECTOR-JOIN")
                            .then(|| (f[1].to_string(), f[3].to_string()))
                    });
                }
            }
        }
        blocked.store(ms(), Ordering::Relaxed);
        let written = to.write_all(&buf[..n]).await;
        blocked.store(0, Ordering::Relaxed);
        if written.is_err() {
            break;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        if n > 512 {
            last_bulk.store(ms(), Ordering::Relaxed);
        }
    }
    let _ = to.shutdown().await;
}

// ---- directors -------------------------------------------------------------

#[derive(Clone)]
struct Node {
    name: &'static str,
    /// The relay in front of it: its ring address.
    ring: SocketAddr,
    /// Its own listener (LOOKUP clients go straight here).
    direct: SocketAddr,
    shared: Arc<Shared>,
    log: Arc<RelayLog>,
    /// Aborting the serve task closes every socket of the director.
    task: tokio::task::AbortHandle,
    /// When it started serving (`ms()`).
    served: u64,
}

impl Node {
    fn users(&self) -> usize {
        self.shared.director().users().len()
    }

    fn links_up(&self) -> u64 {
        self.shared.ring().map_or(0, |r| r.stats().links_up.get())
    }

    fn members(&self) -> usize {
        self.shared.ring().map_or(0, |r| r.members().len())
    }

    fn links(&self) -> Vec<(SocketAddr, bool)> {
        self.shared.ring().map_or(Vec::new(), |r| r.links())
    }
}

/// Prints, as they happen, what the figures alone would hide: ring links
/// coming and going, relay connections closing, and a side that stops
/// reading (a write through the relay pending for over a second).
async fn monitor(nodes: Arc<Mutex<Vec<Node>>>) {
    use std::collections::{HashMap, HashSet};
    let mut links: HashMap<&'static str, Vec<(SocketAddr, bool)>> = HashMap::new();
    let mut closed: HashSet<usize> = HashSet::new();
    let mut blocked: HashSet<usize> = HashSet::new();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let nodes = nodes.lock().unwrap().clone();
        let refs: Vec<&Node> = nodes.iter().collect();
        let t = ms() as f64 / 1000.0;
        for n in &nodes {
            let now = n.links();
            if links.get(n.name) != Some(&now) {
                let shown: Vec<String> = now
                    .iter()
                    .map(|(p, dialed)| {
                        let how = if *dialed { "dialled" } else { "accepted" };
                        format!("{} ({how})", name_of(&refs, &p.to_string()))
                    })
                    .collect();
                println!("  +{t:.2}s {} ring links: [{}]", n.name, shown.join(", "));
                links.insert(n.name, now);
            }
            for c in n.log.conns.lock().unwrap().iter() {
                let id = Arc::as_ptr(c) as usize;
                let (dialer, mode) = c.join();
                if mode != "ring" {
                    continue;
                }
                let dialer = name_of(&refs, &dialer);
                let (to_acc, to_dia) = (
                    mib(c.to_acceptor.load(Ordering::Relaxed)),
                    mib(c.to_dialer.load(Ordering::Relaxed)),
                );
                let stuck = c.blocked_ms();
                if stuck > 1000 && blocked.insert(id) {
                    // Both directions pending: each end writes, neither reads.
                    let pending = |b: &AtomicU64| b.load(Ordering::Relaxed) != 0;
                    let towards = match (pending(&c.acceptor_blocked), pending(&c.dialer_blocked)) {
                        (true, true) => "both ends".to_string(),
                        (true, false) => n.name.to_string(),
                        _ => dialer.clone(),
                    };
                    println!(
                        "  +{t:.2}s {dialer} -> {} stalled: writes towards {towards} have waited {:.1}s \
                         ({to_acc:.1} MiB {dialer}->{}, {to_dia:.1} MiB {}->{dialer} so far)",
                        n.name,
                        stuck as f64 / 1000.0,
                        n.name,
                        n.name,
                    );
                } else if stuck == 0 && blocked.remove(&id) {
                    println!("  +{t:.2}s {dialer} -> {} moving again", n.name);
                }
                if c.closed.load(Ordering::Relaxed) && closed.insert(id) {
                    println!(
                        "  +{t:.2}s {dialer} -> {} closed after {:.1}s ({to_acc:.1} MiB {dialer}->{}, {to_dia:.1} MiB {}->{dialer})",
                        n.name,
                        c.opened.elapsed().as_secs_f64(),
                        n.name,
                        n.name,
                    );
                }
            }
        }
    }
}

/// The ring is quiet: for three seconds in a row every member has its
/// links, no relay write is pending, and under 4 KiB a second (keepalives,
/// member-list re-sends) moves. Three, because a link that stalls is quiet
/// too between its close and the next stall. Returns how long it took,
/// None if it did not happen within `patience`.
async fn settle(nodes: &[&Node], patience: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut last = nodes.iter().map(|n| n.log.total()).sum::<u64>();
    let mut quiet_for = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = nodes.iter().map(|n| n.log.total()).sum::<u64>();
        let linked = nodes.iter().all(|n| n.links().len() == nodes.len() - 1);
        let stalled = nodes.iter().any(|n| {
            n.log
                .conns
                .lock()
                .unwrap()
                .iter()
                .any(|c| !c.closed.load(Ordering::Relaxed) && c.blocked_ms() > 200)
        });
        if now - last < 4096 && linked && !stalled {
            quiet_for += 1;
            if quiet_for == 3 {
                return Some(start.elapsed());
            }
        } else {
            quiet_for = 0;
        }
        if start.elapsed() > patience {
            return None;
        }
        last = now;
    }
}

/// A director's listener and relay, bound before any director starts so
/// every ring address is known up front.
struct Slot {
    name: &'static str,
    listener: TcpListener,
    ring: SocketAddr,
    log: Arc<RelayLog>,
}

/// `RING_SCALE_NO_RELAY=1`: directors are reached directly (a control run
/// showing that what the relays see is not of their making); no byte
/// counts then.
fn no_relay() -> bool {
    std::env::var_os("RING_SCALE_NO_RELAY").is_some_and(|v| v == "1")
}

async fn slot(name: &'static str, n: u8) -> Slot {
    let log = Arc::new(RelayLog::default());
    if no_relay() {
        let listener = TcpListener::bind(format!("127.0.0.{n}:0"))
            .await
            .expect("bind director");
        let ring = listener.local_addr().expect("addr");
        return Slot {
            name,
            listener,
            ring,
            log,
        };
    }
    let listener = TcpListener::bind(format!("127.0.1.{n}:0"))
        .await
        .expect("bind director");
    let relay_listener = TcpListener::bind(format!("127.0.0.{n}:0"))
        .await
        .expect("bind relay");
    let ring = relay_listener.local_addr().expect("addr");
    tokio::spawn(relay(
        relay_listener,
        listener.local_addr().expect("addr"),
        log.clone(),
    ));
    Slot {
        name,
        listener,
        ring,
        log,
    }
}

fn config(ring: SocketAddr, seeds: &[SocketAddr]) -> DirectorService {
    DirectorService {
        // Five static backends that are never dialled: the director only
        // names them.
        mail_servers: (1..=5)
            .map(|i| MailServer {
                host: format!("10.1.0.{i}"),
                port: 143,
                tag: String::new(),
                vhosts: 100,
            })
            .collect(),
        ring_secret: Some(Secret::new(SECRET)),
        ring_address: ring.to_string(),
        peers: seeds.iter().map(|a| a.to_string()).collect(),
        api: DirectorApi {
            listen: String::new(),
            ..DirectorApi::default()
        },
        ..DirectorService::default()
    }
}

/// Starts a director; with `preload` > 0 it holds users `0..preload`
/// before it serves, so before its ring runs.
async fn start(slot: Slot, seeds: &[SocketAddr], preload: u64) -> Node {
    let direct = slot.listener.local_addr().expect("addr");
    let shared = prepare(&config(slot.ring, seeds), direct, None)
        .await
        .expect("prepare");
    let s = shared.clone();
    let mut node = Node {
        name: slot.name,
        ring: slot.ring,
        direct,
        shared,
        log: slot.log,
        task: tokio::spawn(async {}).abort_handle(),
        served: 0,
    };
    for from in (0..preload).step_by(PIN_BATCH as usize) {
        pin(&node, from, (from + PIN_BATCH).min(preload));
    }
    node.served = ms();
    node.task = tokio::spawn(async move {
        serve(s, slot.listener, std::future::pending::<()>())
            .await
            .expect("serve");
    })
    .abort_handle();
    node
}

/// Polls `check` every 10 ms until it holds or `PATIENCE` runs out.
async fn wait_for(what: &str, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while !check() {
        if start.elapsed() > PATIENCE {
            println!("  !! gave up after {PATIENCE:?} waiting for: {what}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Some(start.elapsed())
}

/// Pins users `from..to` on `node` through the state machine, one lock per
/// batch; the guard's drop hands the new assignments to the ring.
fn pin(node: &Node, from: u64, to: u64) {
    let now = node.shared.now();
    let mut d = node.shared.director();
    for i in from..to {
        d.assign_and_pin(now, &user(i), "", None)
            .expect("a backend");
    }
}

/// Pins until A and B both hold exactly `target` records. Returns the
/// number of names used (more than `target` by the hash collisions).
async fn pin_everyone(a: &Node, b: &Node, target: u64) -> u64 {
    let mut next = 0u64;
    let mut turn = 0;
    while next < target {
        let end = (next + PIN_BATCH).min(target);
        pin(if turn % 2 == 0 { a } else { b }, next, end);
        turn += 1;
        next = end;
        // Backpressure: the members' counts show how far replication is.
        while next.saturating_sub(a.users().min(b.users()) as u64) > MAX_LAG {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::task::yield_now().await;
    }
    loop {
        wait_for("A and B agree on the user count", || a.users() == b.users()).await;
        let have = a.users() as u64;
        if have >= target {
            return next;
        }
        // Names that collided with an earlier hash made no new record.
        pin(a, next, next + (target - have));
        next += target - have;
    }
}

// ---- the LOOKUP load -------------------------------------------------------

/// LOOKUPs of already pinned users on `addr` for `secs`: `conns`
/// connections, each sending `depth` requests then reading `depth` replies.
/// Returns the number answered OK.
async fn lookups(
    addr: SocketAddr,
    names: Arc<Vec<String>>,
    secs: u64,
    conns: usize,
    depth: usize,
) -> (u64, Duration) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut clients = Vec::new();
    for c in 0..conns {
        let names = names.clone();
        clients.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).ok();
            let mut f = Framed::new(stream, LineCodec::default());
            f.next().await;
            f.send(&["VERSION", "director", "1", "0"][..])
                .await
                .expect("send");
            let mut done = 0u64;
            let mut i = c * names.len() / conns;
            while Instant::now() < deadline {
                for _ in 0..depth {
                    let name = names[i % names.len()].as_str();
                    i += 1;
                    f.feed(&["LOOKUP", name, "", "imap"][..])
                        .await
                        .expect("feed");
                }
                SinkExt::<&[&str]>::flush(&mut f).await.expect("flush");
                for _ in 0..depth {
                    match f.next().await {
                        Some(Ok(Ok(r))) if r[0] == "OK" => done += 1,
                        other => panic!("bad reply {other:?}"),
                    }
                }
            }
            done
        }));
    }
    let start = Instant::now();
    let mut total = 0;
    for c in clients {
        total += c.await.expect("client");
    }
    (total, start.elapsed())
}

/// Pins `rate` new users per second on `node` for `secs`, in 10 ms steps,
/// starting at name `first`. Returns how many it pinned and how long it
/// took.
async fn gossip_load(node: &Node, first: u64, rate: u64, secs: u64) -> (u64, Duration) {
    let start = Instant::now();
    let stop = Duration::from_secs(secs);
    let mut done = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while start.elapsed() < stop {
        tick.tick().await;
        // Catch up to the schedule, so a late tick does not lower the rate.
        let due = ((rate as f64 * start.elapsed().as_secs_f64()) as u64).min(rate * secs);
        if due > done {
            pin(node, first + done, first + due);
            done = due;
        }
    }
    (done, start.elapsed())
}

// ---- report helpers ----------------------------------------------------------

fn name_of(nodes: &[&Node], addr: &str) -> String {
    nodes
        .iter()
        .find(|n| n.ring.to_string() == addr)
        .map_or_else(|| addr.to_string(), |n| n.name.to_string())
}

/// One line per ring connection seen by the relays since `since`.
fn print_links(nodes: &[&Node], since: Instant) {
    for acceptor in nodes {
        for c in acceptor.log.conns.lock().unwrap().iter() {
            if c.opened < since {
                continue;
            }
            let (dialer, mode) = c.join();
            let dialer = name_of(nodes, &dialer);
            let to_acc = c.to_acceptor.load(Ordering::Relaxed);
            let to_dia = c.to_dialer.load(Ordering::Relaxed);
            if mode != "ring" && to_acc + to_dia < 100_000 {
                continue;
            }
            let state = if c.closed.load(Ordering::Relaxed) {
                ", closed".to_string()
            } else if c.blocked_ms() > 0 {
                format!(", a write pending {:.1}s", c.blocked_ms() as f64 / 1000.0)
            } else {
                String::new()
            };
            let a = acceptor.name;
            println!(
                "    {dialer} -> {a} ({mode}, opened +{:.2}s{state}): {:.1} MiB {dialer}->{a}, {:.1} MiB {a}->{dialer}",
                c.opened.duration_since(since).as_secs_f64(),
                mib(to_acc),
                mib(to_dia),
            );
        }
    }
}

/// Bytes `node` received and sent over ring connections opened since
/// `since` (both directions of every relay connection it is an end of).
fn bytes_of(nodes: &[&Node], node: &Node, since: Instant) -> (u64, u64) {
    let me = node.ring.to_string();
    let (mut rx, mut tx) = (0, 0);
    for acceptor in nodes {
        for c in acceptor.log.conns.lock().unwrap().iter() {
            if c.opened < since {
                continue;
            }
            let dialer = c.join.lock().unwrap().clone().map(|j| j.0);
            let (a, d) = (
                c.to_acceptor.load(Ordering::Relaxed),
                c.to_dialer.load(Ordering::Relaxed),
            );
            if acceptor.ring == node.ring {
                rx += a;
                tx += d;
            } else if dialer.as_deref() == Some(me.as_str()) {
                rx += d;
                tx += a;
            }
        }
    }
    (rx, tx)
}

fn main() {
    ms();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,yarilo_director=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_timer(tracing_subscriber::fmt::time::uptime())
        .with_target(false)
        .with_ansi(false)
        .init();

    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: u64| -> u64 {
        args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    let users = arg(1, 1_000_000);
    let rate = arg(2, 10_000);
    let seconds = arg(3, 10);
    let conns = arg(4, 4) as usize;
    let depth = arg(5, 128) as usize;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(users, rate, seconds, conns, depth));
    // The directors are still serving; no graceful leave needed.
    runtime.shutdown_timeout(Duration::from_secs(1));
}

async fn run(users: u64, rate: u64, seconds: u64, conns: usize, depth: usize) {
    let rss_start = rss_bytes();
    let (sa, sb, sc) = (slot("A", 2).await, slot("B", 3).await, slot("C", 4).await);
    let (ring_a, ring_b) = (sa.ring, sb.ring);
    let a = start(sa, &[ring_b], 0).await;
    let b = start(sb, &[ring_a], 0).await;
    let watched = Arc::new(Mutex::new(vec![a.clone(), b.clone()]));
    tokio::spawn(monitor(watched.clone()));
    println!(
        "A: ring address {} (relay) -> {}; B: {} -> {}; C will be {}",
        a.ring, a.direct, b.ring, b.direct, sc.ring
    );
    let formed = wait_for("A and B see each other", || {
        a.members() == 2 && b.members() == 2 && a.links().len() == 1 && b.links().len() == 1
    })
    .await
    .expect("ring of two");
    println!("A and B formed a ring in {:.2}s", formed.as_secs_f64());

    // ---- Part 1: the join ----------------------------------------------------
    let t = Instant::now();
    let names_used = pin_everyone(&a, &b, users).await;
    let pin_secs = t.elapsed().as_secs_f64();
    println!(
        "pinned {users} users on A and B (alternate batches of {PIN_BATCH}, each gossiped to the other) \
         in {pin_secs:.2}s: {:.0} assignments/s replicated; {names_used} names used ({} merged by \
         32-bit hash collisions)",
        users as f64 / pin_secs,
        names_used - users,
    );
    settle(&[&a, &b], PATIENCE).await;
    let rss_before = rss_bytes();
    let links_before = (a.links_up(), b.links_up());
    println!(
        "before the join: RSS {:.0} MiB (the process: A, B, relays; {:.0} MiB at start); table estimate {:.1} MiB per director",
        mib(rss_before),
        mib(rss_start),
        mib(a.shared.director().users().table_bytes() as u64),
    );

    println!("join of C (seed A) at +{:.2}s:", ms() as f64 / 1000.0);
    let join_start = Instant::now();
    let c = start(sc, &[ring_a], 0).await;
    watched.lock().unwrap().push(c.clone());
    let mut first_record: Option<Duration> = None;
    let mut three: Option<Duration> = None;
    let mut samples = Vec::new();
    let mut next_sample = Duration::ZERO;
    let full = wait_for("C holds every user", || {
        let n = c.users();
        let e = join_start.elapsed();
        if first_record.is_none() && n > 0 {
            first_record = Some(e);
        }
        if three.is_none() && c.members() == 3 && a.members() == 3 && b.members() == 3 {
            three = Some(e);
        }
        if e >= next_sample {
            samples.push((e, n));
            next_sample += Duration::from_millis(500);
        }
        n as u64 >= users
    })
    .await;
    let full_at = join_start.elapsed();
    let full_rss = rss_bytes();
    let nodes = [&a, &b, &c];
    let (full_rx, _) = bytes_of(&nodes, &c, join_start);
    println!(
        "  all three see three members after {}; first user record at C after {}",
        three.map_or("-".into(), |d| format!("{:.2}s", d.as_secs_f64())),
        first_record.map_or("-".into(), |d| format!("{:.2}s", d.as_secs_f64()))
    );
    match full {
        Some(_) => println!(
            "  C holds all {users} users after {:.2}s, having received {:.1} MiB by then",
            full_at.as_secs_f64(),
            mib(full_rx)
        ),
        None => println!("  C holds only {} of {users} users", c.users()),
    }
    let progress: Vec<String> = samples
        .iter()
        .map(|(e, n)| format!("{:.1}s:{}k", e.as_secs_f64(), n / 1000))
        .collect();
    println!("  C's count every 0.5 s: {}", progress.join(" "));
    // Long enough to see a stalled link time out and come back.
    let settled = settle(&nodes, Duration::from_secs(45)).await;
    println!(
        "  ring settled (every link up, no write pending, traffic quiet) {}",
        settled.map_or(
            format!(
                "never: not within {:.0}s of the join",
                join_start.elapsed().as_secs_f64()
            ),
            |_| format!(
                "{:.2}s after the join started{}",
                join_start.elapsed().as_secs_f64(),
                if no_relay() {
                    " (no relay: only \"every link up for 3 s\" is seen)"
                } else {
                    ""
                }
            )
        )
    );
    let (rx, tx) = bytes_of(&nodes, &c, join_start);
    println!(
        "  C received {:.1} MiB ({:.1} B per user) and sent {:.1} MiB over ring connections opened since the join:",
        mib(rx),
        rx as f64 / users as f64,
        mib(tx)
    );
    print_links(&nodes, join_start);
    println!(
        "  ring connections opened since the join: A {}, B {}, C {} (a clean join opens A 1, B 1, C 2)",
        a.links_up() - links_before.0,
        b.links_up() - links_before.1,
        c.links_up()
    );
    let rss_after = rss_bytes();
    println!(
        "  RSS {:.0} MiB before, {:.0} MiB when C was full, {:.0} MiB settled (+{:.0} MiB: C's copy plus \
         what the snapshots left allocated); C's table estimate {:.1} MiB",
        mib(rss_before),
        mib(full_rss),
        mib(rss_after),
        mib(rss_after.saturating_sub(rss_before)),
        mib(c.shared.director().users().table_bytes() as u64),
    );
    println!(
        "  counts: A {}, B {}, C {}",
        a.users(),
        b.users(),
        c.users()
    );

    // ---- Part 2: LOOKUPs under gossip -------------------------------------
    let names: Arc<Vec<String>> = Arc::new((0..users.min(200_000)).map(user).collect());
    println!(
        "LOOKUP throughput on B ({} directly, {conns} connections pipelining {depth}, {seconds}s each, pinned users only):",
        b.direct
    );
    let (n, d) = lookups(b.direct, names.clone(), seconds, conns, depth).await;
    let quiet = n as f64 / d.as_secs_f64();
    println!(
        "  quiet ring: {quiet:.0} LOOKUPs/s ({n} in {:.1}s)",
        d.as_secs_f64()
    );

    let before = (a.users(), b.users(), c.users());
    let links_before = (a.links_up(), b.links_up(), c.links_up());
    let max_lag = AtomicU64::new(0);
    let sampling = AtomicBool::new(true);
    let lookup_task = tokio::spawn(lookups(b.direct, names, seconds, conns, depth));
    let (made, gd) = {
        let lag_probe = async {
            while sampling.load(Ordering::Relaxed) {
                let lag = (a.users() as u64).saturating_sub(b.users() as u64);
                max_lag.fetch_max(lag, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let load = async {
            let r = gossip_load(&a, names_used, rate, seconds).await;
            sampling.store(false, Ordering::Relaxed);
            r
        };
        tokio::join!(load, lag_probe).0
    };
    let (n, d) = lookup_task.await.expect("lookups");
    let busy = n as f64 / d.as_secs_f64();
    let at_end = (a.users(), b.users(), c.users());
    let converged = wait_for("B and C hold every new assignment", || {
        let n = a.users();
        b.users() == n && c.users() == n
    })
    .await;
    println!(
        "  while A pins {rate}/s: {busy:.0} LOOKUPs/s ({n} in {:.1}s; {:.0}% of quiet)",
        d.as_secs_f64(),
        busy * 100.0 / quiet
    );
    println!(
        "  A pinned {made} new users in {:.1}s ({:.0}/s); new records at the end of the window: \
         A +{}, B +{}, C +{}; B lagged A by at most {} records",
        gd.as_secs_f64(),
        made as f64 / gd.as_secs_f64(),
        at_end.0 - before.0,
        at_end.1 - before.1,
        at_end.2 - before.2,
        max_lag.load(Ordering::Relaxed),
    );
    match converged {
        Some(w) => println!(
            "  B and C held every new assignment {:.2}s after the window (counts A {}, B {}, C {})",
            w.as_secs_f64(),
            a.users(),
            b.users(),
            c.users()
        ),
        None => println!(
            "  not converged: A {}, B {}, C {}",
            a.users(),
            b.users(),
            c.users()
        ),
    }
    println!(
        "  ring connections opened during the window: A {}, B {}, C {}",
        a.links_up() - links_before.0,
        b.links_up() - links_before.1,
        c.links_up() - links_before.2
    );

    // ---- Part 3: two full members (re)connect ------------------------------
    for n in [&a, &b, &c] {
        n.task.abort();
    }
    println!(
        "re-link: two directors that both hold the same N users connect (a restarted link, a healed \
         partition); each is given 15 s:"
    );
    let mut sizes: Vec<u64> = [50_000, 100_000, 200_000, 400_000, 600_000]
        .into_iter()
        .filter(|&n| n < users)
        .collect();
    sizes.push(users);
    for (k, n) in sizes.into_iter().enumerate() {
        let base = 10 + 2 * k as u8;
        let d = start(slot("D", base).await, &[], n).await;
        let e_slot = slot("E", base + 1).await;
        let e = start(e_slot, &[d.ring], n).await;
        let t0 = e.served;
        *watched.lock().unwrap() = vec![d.clone(), e.clone()];
        let settled = settle(&[&d, &e], Duration::from_secs(15)).await;
        let conns = e.log.conns.lock().unwrap().clone();
        let ring_conns: Vec<_> = d
            .log
            .conns
            .lock()
            .unwrap()
            .iter()
            .chain(conns.iter())
            .filter(|c| c.join().1 == "ring")
            .cloned()
            .collect();
        let moved = |c: &ConnLog| {
            format!(
                "{:.1} MiB / {:.1} MiB",
                mib(c.to_acceptor.load(Ordering::Relaxed)),
                mib(c.to_dialer.load(Ordering::Relaxed))
            )
        };
        let first = ring_conns.first().map_or("-".into(), |c| moved(c));
        match settled {
            Some(_) if ring_conns.len() == 1 => println!(
                "  {n} users each: both snapshots through {:.2}s after E started serving ({first} dialer->acceptor / back)",
                ring_conns[0].last_bulk_ms.load(Ordering::Relaxed).saturating_sub(t0) as f64 / 1000.0
            ),
            _ => println!(
                "  {n} users each: not done after {:.1}s: {} ring connection(s), the first moved {first} \
                 (dialer->acceptor / back){}",
                (ms() - t0) as f64 / 1000.0,
                ring_conns.len(),
                if ring_conns.iter().any(|c| c.blocked_ms() > 1000) {
                    "; a write is stalled now"
                } else {
                    ""
                }
            ),
        }
        d.task.abort();
        e.task.abort();
    }
}
