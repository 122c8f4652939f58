//! The login process's standing connection to the director: session
//! reports and kick orders (`docs/director.md`, "The LOOKUP protocol").
//!
//! When `login.<proto>.director_addr` routes a login, the piped session is
//! reported with `SESSION-OPEN <id> <user> <tag> <backend-ip> <proto>` once
//! the backend has admitted it, and with `SESSION-CLOSE <id>` when the pipe
//! ends, however it ends ([`DirectorSession`]'s `Drop`). The same
//! connection sends `KICK-WATCH` first, and every `USER-KICKED <user>
//! <backend-ip>` it receives ends this process's piped sessions of that
//! user on that backend.
//!
//! A backend this process could not dial at all (connection refused or
//! timed out) is reported on the same connection with
//! `BACKEND-UNREACHABLE <ip> <reporter>` ([`DirectorLink::report_unreachable`]),
//! so the directors evict a dead registered pod once
//! `backend_unreachable_reporters` distinct login pods said so within
//! `backend_unreachable_window`, instead of serving failures until its
//! lease expires. `<reporter>` names the pod (`POD_NAME`, else the host
//! name): the containers of one pod count once. Reports are deduplicated
//! (one per backend per [`UNREACHABLE_EVERY`]) and bounded like the
//! session reports; one that finds the director away is dropped (it is
//! stale by the time the link is back).
//!
//! One connection, not one for reports and one for kicks: behind a
//! load-balanced director Service two connections may land on two
//! directors, and a director kicks the sessions *it* was told about (a
//! ring merge that moves a user, a backend leaving). Watching where we
//! report keeps the two together.
//!
//! Invariants:
//! - the session path never waits on the director: a report is a
//!   non-blocking push into a bounded queue; a full queue drops the report
//!   (`yarilo_login_director_reports_total{result="dropped"}`, logged at
//!   most every [`LOG_EVERY`]);
//! - every wait on the director is bounded (dial, handshake, each write,
//!   each reply — [`REPLY_TIMEOUT`]); a silent director is pinged after
//!   [`KEEPALIVE`]; a broken connection is redialled with backoff
//!   ([`MIN_BACKOFF`] … [`MAX_BACKOFF`]);
//! - after a reconnect every live session is reported again (the director
//!   may have restarted); a SESSION-CLOSE is sent only for a session whose
//!   SESSION-OPEN was sent, and one pending while the director is away is
//!   kept (bounded by [`REPORT_QUEUE`]) and sent after the reconnect;
//! - at most [`MAX_IN_FLIGHT`] requests await a reply: a director that
//!   stops reading fills our queue, not our memory;
//! - lines are bounded ([`MAX_LINE`], the director's own limit); a report
//!   that would not fit is dropped rather than sent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tracing::Instrument;
use yarilo_tls::internal::InternalTls;
use yarilo_wire::{join_line, LineCodec};

use crate::hop::UpstreamStream;

/// Longest line either way (the director's `MAX_LINE`).
pub const MAX_LINE: usize = 8 * 1024;
/// Reports waiting to be written (and SESSION-CLOSEs kept while the
/// director is away).
pub const REPORT_QUEUE: usize = 4096;
/// Requests written and not yet answered.
pub const MAX_IN_FLIGHT: usize = 1024;
/// Bound on each write, on the VERSION and KICK-WATCH exchange, and on
/// the director's answer to a request.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Silence after which we PING the director.
pub const KEEPALIVE: Duration = Duration::from_secs(30);
/// First redial delay; doubles up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection that stayed up this long resets the backoff.
const BACKOFF_RESET: Duration = Duration::from_secs(10);
/// At most one BACKEND-UNREACHABLE per backend per this interval.
pub const UNREACHABLE_EVERY: Duration = Duration::from_secs(1);
/// Backends remembered for the deduplication.
const UNREACHABLE_MEMORY: usize = 1024;

/// At most one warning per this interval for dropped reports and lost
/// connections (the rest are counted in the log line that follows).
pub const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReportLabels {
    protocol: &'static str,
    /// `open`, `close` or `unreachable`.
    op: &'static str,
    /// `ok` (answered OK), `refused` (answered FAIL: unknown backend or
    /// tag, a closed id, a full registry), `dropped` (never sent: queue
    /// full, line too long, a CLOSE owed too long to an absent director).
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabel {
    protocol: &'static str,
}

/// `yarilo_login_director_*`.
#[derive(Clone, Default)]
struct Metrics {
    reports: Family<ReportLabels, Counter>,
    kicks: Family<ProtocolLabel, Counter>,
    connected: Gauge,
}

impl Metrics {
    fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics::default();
        registry.register(
            "yarilo_login_director_reports",
            "Session reports to the director by op (open, close) and result \
             (ok, refused, dropped)",
            m.reports.clone(),
        );
        registry.register(
            "yarilo_login_director_kicks",
            "Piped sessions closed by a director kick (USER-KICKED)",
            m.kicks.clone(),
        );
        registry.register(
            "yarilo_login_director_connected",
            "1 while the director connection is up and watching kicks",
            m.connected.clone(),
        );
        m
    }
}

/// A warning at most every [`LOG_EVERY`]; the ones in between are counted.
#[derive(Default)]
struct Throttle {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl Throttle {
    /// `Some(n)` when this one may be logged (`n` were suppressed since).
    fn allow(&self) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some(t) if now.duration_since(t) < LOG_EVERY => {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.suppressed.swap(0, Ordering::Relaxed))
            }
        }
    }
}

/// A session this process pipes, as the director knows it.
struct Live {
    user: String,
    tag: String,
    backend: IpAddr,
    kick: Arc<Notify>,
    /// A SESSION-OPEN for it was written (so its end needs a CLOSE).
    announced: bool,
}

#[derive(Default)]
struct Table {
    live: HashMap<String, Live>,
    /// (user, backend) → session ids, for USER-KICKED.
    by_target: HashMap<(String, IpAddr), HashSet<String>>,
}

enum Report {
    Open(String),
    Close(String),
    Unreachable(IpAddr),
}

/// What an answered request was, in reply order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Open,
    Close,
    Unreachable,
    Ping,
}

struct Inner {
    addr: String,
    tls: Option<InternalTls>,
    connect_timeout: Duration,
    protocol: &'static str,
    table: Mutex<Table>,
    reports: mpsc::Sender<Report>,
    metrics: Metrics,
    dropped_log: Throttle,
    conn_log: Throttle,
    /// This pod's name in BACKEND-UNREACHABLE.
    reporter: String,
    /// Backend → when it was last reported.
    unreachable: Mutex<HashMap<IpAddr, Instant>>,
}

impl Inner {
    fn table(&self) -> MutexGuard<'_, Table> {
        // Inserts and removes only; a panic cannot leave it half-done in
        // a way that matters.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, op: Op, result: &'static str) {
        let op = match op {
            Op::Open => "open",
            Op::Close => "close",
            Op::Unreachable => "unreachable",
            Op::Ping => return,
        };
        self.metrics
            .reports
            .get_or_create(&ReportLabels {
                protocol: self.protocol,
                op,
                result,
            })
            .inc();
    }

    fn dropped(&self, op: Op, why: &'static str) {
        self.count(op, "dropped");
        if let Some(more) = self.dropped_log.allow() {
            tracing::warn!(
                director = %self.addr,
                why,
                dropped_since_last_warning = more,
                "session report to the director dropped"
            );
        }
    }

    fn push(&self, report: Report) {
        let op = match report {
            Report::Open(_) => Op::Open,
            Report::Close(_) => Op::Close,
            Report::Unreachable(_) => Op::Unreachable,
        };
        match self.reports.try_send(report) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.dropped(op, "queue full"),
            // The link is shutting down with the process.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// The director connection of one login process. Cheap to clone; the
/// connection task ends when the last clone is dropped.
#[derive(Clone)]
pub struct DirectorLink {
    inner: Arc<Inner>,
    _task: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for DirectorLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectorLink")
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl DirectorLink {
    /// Starts the connection to `addr` in the background (a director that
    /// is down does not delay start-up) and registers
    /// `yarilo_login_director_*`. Must run inside a tokio runtime.
    pub fn start(
        addr: &str,
        tls: Option<InternalTls>,
        connect_timeout: Duration,
        protocol: &'static str,
        registry: &mut Registry,
    ) -> DirectorLink {
        let (tx, rx) = mpsc::channel(REPORT_QUEUE);
        let inner = Arc::new(Inner {
            addr: addr.to_string(),
            tls,
            connect_timeout,
            protocol,
            table: Mutex::new(Table::default()),
            reports: tx,
            metrics: Metrics::register(registry),
            dropped_log: Throttle::default(),
            conn_log: Throttle::default(),
            reporter: reporter_name(),
            unreachable: Mutex::new(HashMap::new()),
        });
        let span = tracing::info_span!("director-link", director = %addr, protocol);
        // The task holds only a weak reference, so dropping the last
        // DirectorLink ends it.
        let task = tokio::spawn(run(Arc::downgrade(&inner), rx).instrument(span));
        DirectorLink {
            inner,
            _task: Arc::new(AbortOnDrop(task)),
        }
    }

    /// Records a piped session and queues its SESSION-OPEN. The guard
    /// queues SESSION-CLOSE when dropped and is how a kick reaches the
    /// session ([`DirectorSession::kicked`]).
    pub fn open(&self, id: &str, user: &str, tag: &str, backend: IpAddr) -> DirectorSession {
        let kick = Arc::new(Notify::new());
        {
            let mut t = self.inner.table();
            t.live.insert(
                id.to_string(),
                Live {
                    user: user.to_string(),
                    tag: tag.to_string(),
                    backend,
                    kick: kick.clone(),
                    announced: false,
                },
            );
            t.by_target
                .entry((user.to_string(), backend))
                .or_default()
                .insert(id.to_string());
        }
        self.inner.push(Report::Open(id.to_string()));
        DirectorSession {
            inner: self.inner.clone(),
            id: id.to_string(),
            kick,
        }
    }

    /// Reports that this process could not connect to `backend` at all
    /// (deduplicated: once per [`UNREACHABLE_EVERY`] per backend). Never
    /// waits.
    pub fn report_unreachable(&self, backend: IpAddr) {
        {
            let now = Instant::now();
            let mut seen = self
                .inner
                .unreachable
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if seen
                .get(&backend)
                .is_some_and(|t| now.duration_since(*t) < UNREACHABLE_EVERY)
            {
                return;
            }
            if seen.len() >= UNREACHABLE_MEMORY {
                seen.retain(|_, t| now.duration_since(*t) < UNREACHABLE_EVERY);
                if seen.len() >= UNREACHABLE_MEMORY {
                    return;
                }
            }
            seen.insert(backend, now);
        }
        tracing::warn!(%backend, "backend unreachable; reporting it to the director");
        self.inner.push(Report::Unreachable(backend));
    }

    /// Whether the connection is up and watching kicks.
    pub fn is_connected(&self) -> bool {
        self.inner.metrics.connected.get() == 1
    }
}

/// A piped session the director was (or will be) told about.
#[must_use = "dropping the guard reports the session closed at once"]
pub struct DirectorSession {
    inner: Arc<Inner>,
    id: String,
    kick: Arc<Notify>,
}

impl DirectorSession {
    /// Completes when the director kicks this session's user off its
    /// backend.
    pub async fn kicked(&self) {
        self.kick.notified().await
    }

    /// Counts a session closed by a director kick.
    pub(crate) fn count_kick(&self) {
        self.inner
            .metrics
            .kicks
            .get_or_create(&ProtocolLabel {
                protocol: self.inner.protocol,
            })
            .inc();
    }
}

impl Drop for DirectorSession {
    fn drop(&mut self) {
        let announced = {
            let mut t = self.inner.table();
            let Some(live) = t.live.remove(&self.id) else {
                return;
            };
            let key = (live.user, live.backend);
            if let Some(ids) = t.by_target.get_mut(&key) {
                ids.remove(&self.id);
                if ids.is_empty() {
                    t.by_target.remove(&key);
                }
            }
            live.announced
        };
        // Never announced: its OPEN is still queued (and will find it
        // gone) or was never sent; the director has nothing to forget.
        if announced {
            self.inner.push(Report::Close(std::mem::take(&mut self.id)));
        }
    }
}

/// Dials, serves, redials — until the last [`DirectorLink`] is gone.
async fn run(inner: std::sync::Weak<Inner>, mut rx: mpsc::Receiver<Report>) {
    let mut backoff = MIN_BACKOFF;
    // SESSION-CLOSEs owed to the director, kept across a reconnect.
    let mut closes: VecDeque<String> = VecDeque::new();
    loop {
        let Some(link) = inner.upgrade() else {
            return;
        };
        let started = Instant::now();
        let why = match connect(&link).await {
            Ok(stream) => {
                let why = serve(&link, stream, &mut rx, &mut closes).await;
                link.metrics.connected.set(0);
                why
            }
            Err(e) => e,
        };
        if started.elapsed() >= BACKOFF_RESET {
            backoff = MIN_BACKOFF;
        }
        if let Some(more) = link.conn_log.allow() {
            tracing::warn!(error = %why, retry_in = ?backoff, failures_since_last_warning = more, "director connection lost");
        } else {
            tracing::debug!(error = %why, "director connection lost");
        }
        drop(link);
        // Keep the queue moving while away: an OPEN is re-sent from the
        // table on the next connection anyway; a CLOSE is kept.
        let pause = tokio::time::sleep(backoff);
        tokio::pin!(pause);
        loop {
            tokio::select! {
                _ = &mut pause => break,
                report = rx.recv() => match report {
                    None => return,
                    Some(Report::Open(_)) => {}
                    Some(Report::Close(id)) => keep_close(&inner, &mut closes, id),
                    Some(Report::Unreachable(_)) => {
                        if let Some(link) = inner.upgrade() {
                            link.dropped(Op::Unreachable, "director away");
                        }
                    }
                },
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn keep_close(inner: &std::sync::Weak<Inner>, closes: &mut VecDeque<String>, id: String) {
    if closes.len() < REPORT_QUEUE {
        closes.push_back(id);
    } else if let Some(link) = inner.upgrade() {
        link.dropped(Op::Close, "director away too long");
    }
}

/// Dial, VERSION exchange.
async fn connect(link: &Inner) -> Result<UpstreamStream, String> {
    crate::route::dial_director(
        &link.addr,
        link.tls.as_ref(),
        link.connect_timeout.max(REPLY_TIMEOUT),
        MAX_LINE,
    )
    .await
}

/// One connection's life: KICK-WATCH, owed CLOSEs, every live session's
/// OPEN, then reports as they come and kicks as they arrive. Returns why
/// it ended.
async fn serve(
    link: &Inner,
    stream: UpstreamStream,
    rx: &mut mpsc::Receiver<Report>,
    closes: &mut VecDeque<String>,
) -> String {
    let (r, w) = tokio::io::split(stream);
    let mut conn = Conn {
        reader: FramedRead::new(r, LineCodec::new(MAX_LINE)),
        writer: w,
        out: Vec::new(),
        pending: VecDeque::new(),
        in_flight: VecDeque::new(),
        waiting_since: Instant::now(),
    };
    // KICK-WATCH first and alone, so the first reply is its OK.
    conn.out
        .extend_from_slice(join_line(&["KICK-WATCH"]).as_bytes());
    if let Err(e) = conn.flush().await {
        return e;
    }
    let watched = tokio::time::timeout(REPLY_TIMEOUT, async {
        loop {
            match conn.next_line().await? {
                Line::Ping => conn.out.extend_from_slice(join_line(&["PONG"]).as_bytes()),
                Line::Kicked(user, ip) => kick(link, &user, ip),
                Line::Ok => return Ok(()),
                Line::Fail(msg) => return Err(format!("KICK-WATCH refused: {msg}")),
                Line::Other => {}
            }
        }
    })
    .await;
    match watched {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return e,
        Err(_) => return "no answer to KICK-WATCH".into(),
    }
    link.metrics.connected.set(1);
    tracing::info!("director connection up, watching kicks");
    // Owed CLOSEs, then every live session (the director may be new),
    // fed within the in-flight bound ahead of anything queued later: a
    // session that ends meanwhile has its CLOSE sent after this OPEN.
    while let Some(id) = closes.pop_front() {
        conn.pending
            .push_back((Op::Close, vec!["SESSION-CLOSE".into(), id]));
    }
    {
        let mut t = link.table();
        for (id, l) in t.live.iter_mut() {
            l.announced = true;
            conn.pending.push_back((Op::Open, open_line(link, id, l)));
        }
    }
    loop {
        while conn.in_flight.len() < MAX_IN_FLIGHT {
            let Some((op, line)) = conn.pending.pop_front() else {
                break;
            };
            conn.request(link, op, &line);
        }
        if let Err(e) = conn.flush().await {
            return e;
        }
        let deadline = if conn.in_flight.is_empty() {
            conn.waiting_since + KEEPALIVE
        } else {
            conn.waiting_since + REPLY_TIMEOUT
        };
        tokio::select! {
            line = conn.next_line() => match line {
                Err(e) => return e,
                Ok(Line::Ping) => conn.out.extend_from_slice(join_line(&["PONG"]).as_bytes()),
                Ok(Line::Kicked(user, ip)) => kick(link, &user, ip),
                Ok(Line::Ok) => { conn.answered(link, None); }
                Ok(Line::Fail(msg)) => { conn.answered(link, Some(msg)); }
                Ok(Line::Other) => {}
            },
            report = rx.recv(), if conn.in_flight.len() < MAX_IN_FLIGHT && conn.pending.is_empty() => match report {
                None => return "shutting down".into(),
                Some(report) => {
                    conn.report(link, report);
                    // Batch what else is queued into the same write.
                    while conn.in_flight.len() < MAX_IN_FLIGHT {
                        match rx.try_recv() {
                            Ok(r) => conn.report(link, r),
                            Err(_) => break,
                        }
                    }
                }
            },
            _ = tokio::time::sleep_until(deadline) => {
                if !conn.in_flight.is_empty() {
                    return format!("no answer within {REPLY_TIMEOUT:?}");
                }
                conn.request(link, Op::Ping, &["PING"]);
            }
        }
    }
}

/// This pod's name for BACKEND-UNREACHABLE: `POD_NAME` (the downward
/// API), else `HOSTNAME`, else the kernel's host name — the same for every
/// container of a pod, so the director counts a pod once.
fn reporter_name() -> String {
    let name = std::env::var("POD_NAME")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|v| !v.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "login".to_string());
    name.chars().take(128).collect()
}

fn open_line(link: &Inner, id: &str, l: &Live) -> Vec<String> {
    vec![
        "SESSION-OPEN".into(),
        id.into(),
        l.user.clone(),
        l.tag.clone(),
        l.backend.to_string(),
        link.protocol.into(),
    ]
}

/// Wakes this process's piped sessions of `user` on `backend`.
fn kick(link: &Inner, user: &str, backend: IpAddr) {
    let woken: Vec<Arc<Notify>> = {
        let t = link.table();
        t.by_target
            .get(&(user.to_string(), backend))
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| t.live.get(id).map(|l| l.kick.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    tracing::info!(user = %user, backend = %backend, sessions = woken.len(), "director kick received");
    for n in woken {
        n.notify_one();
    }
}

/// A line from the director, classified.
enum Line {
    Ok,
    Fail(String),
    Ping,
    Kicked(String, IpAddr),
    /// PONG is counted as an answer ([`Line::Ok`]); anything else we do
    /// not know is ignored.
    Other,
}

struct Conn {
    reader: FramedRead<ReadHalf<UpstreamStream>, LineCodec>,
    writer: WriteHalf<UpstreamStream>,
    /// Lines to write at the next flush.
    out: Vec<u8>,
    /// Requests of the reconnect (owed CLOSEs, every live OPEN) not yet
    /// written: fed as the in-flight bound allows.
    pending: VecDeque<(Op, Vec<String>)>,
    in_flight: VecDeque<Op>,
    /// Last answer, or when the oldest unanswered request was written.
    waiting_since: Instant,
}

impl Conn {
    async fn flush(&mut self) -> Result<(), String> {
        if self.out.is_empty() {
            return Ok(());
        }
        let work = async {
            self.writer.write_all(&self.out).await?;
            self.writer.flush().await
        };
        match tokio::time::timeout(REPLY_TIMEOUT, work).await {
            Ok(Ok(())) => {
                self.out.clear();
                Ok(())
            }
            Ok(Err(e)) => Err(format!("write: {e}")),
            Err(_) => Err(format!("write blocked for {REPLY_TIMEOUT:?}")),
        }
    }

    async fn next_line(&mut self) -> Result<Line, String> {
        let fields = match self.reader.next().await {
            None => return Err("closed by the director".into()),
            Some(Err(e)) => return Err(format!("read: {e}")),
            // A line we cannot decode is not one we need: skip it.
            Some(Ok(Err(_))) => return Ok(Line::Other),
            Some(Ok(Ok(f))) => f,
        };
        let f: Vec<&str> = fields.iter().map(String::as_str).collect();
        Ok(match f[..] {
            ["OK", ..] | ["PONG", ..] => Line::Ok,
            ["FAIL", ref rest @ ..] => Line::Fail(rest.join(" ")),
            ["PING", ..] => Line::Ping,
            ["USER-KICKED", user, ip, ..] => match ip.parse() {
                Ok(ip) => Line::Kicked(user.to_string(), ip),
                Err(_) => Line::Other,
            },
            _ => Line::Other,
        })
    }

    /// Queues a request line (dropped when it would exceed [`MAX_LINE`]:
    /// the director would close the connection on it).
    fn request<S: AsRef<str>>(&mut self, link: &Inner, op: Op, fields: &[S]) {
        let line = join_line(fields);
        if line.len() > MAX_LINE {
            link.dropped(op, "line too long");
            return;
        }
        if self.in_flight.is_empty() {
            self.waiting_since = Instant::now();
        }
        self.out.extend_from_slice(line.as_bytes());
        self.in_flight.push_back(op);
    }

    fn report(&mut self, link: &Inner, report: Report) {
        match report {
            Report::Open(id) => {
                let line = {
                    let mut t = link.table();
                    // Gone already, or sent by the resync: nothing to do.
                    match t.live.get_mut(&id) {
                        Some(l) if !l.announced => {
                            l.announced = true;
                            Some(open_line(link, &id, l))
                        }
                        _ => None,
                    }
                };
                if let Some(line) = line {
                    self.request(link, Op::Open, &line);
                }
            }
            Report::Close(id) => self.request(link, Op::Close, &["SESSION-CLOSE", &id]),
            Report::Unreachable(ip) => self.request(
                link,
                Op::Unreachable,
                &["BACKEND-UNREACHABLE", &ip.to_string(), &link.reporter],
            ),
        }
    }

    fn answered(&mut self, link: &Inner, fail: Option<String>) {
        self.waiting_since = Instant::now();
        let Some(op) = self.in_flight.pop_front() else {
            return;
        };
        match fail {
            None => link.count(op, "ok"),
            Some(msg) => {
                link.count(op, "refused");
                tracing::debug!(?op, reply = %msg, "the director refused a session report");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::net::TcpListener;

    /// A scripted director: greets, answers every request `OK`, and hands
    /// each request line to the test.
    struct FakeDirector {
        listener: TcpListener,
        addr: String,
    }

    type Lines = mpsc::UnboundedReceiver<String>;
    type Pushes = mpsc::UnboundedSender<String>;

    impl FakeDirector {
        async fn bind() -> FakeDirector {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            FakeDirector { listener, addr }
        }

        /// Accepts one connection; returns its request lines and a way to
        /// push lines (kicks) to the login.
        async fn accept(&self) -> (Lines, Pushes, tokio::task::JoinHandle<()>) {
            let (s, _) = self.listener.accept().await.unwrap();
            let (lines_tx, lines) = mpsc::unbounded_channel();
            let (push, mut pushes) = mpsc::unbounded_channel::<String>();
            let task = tokio::spawn(async move {
                let (r, mut w) = s.into_split();
                let mut r = BufReader::new(r);
                w.write_all(b"VERSION\tdirector\t1\t0\n").await.unwrap();
                let mut line = String::new();
                loop {
                    line.clear();
                    tokio::select! {
                        n = r.read_line(&mut line) => {
                            if n.unwrap_or(0) == 0 {
                                return;
                            }
                            let l = line.trim_end().to_string();
                            if l.starts_with("VERSION") {
                                continue;
                            }
                            let reply: &[u8] = match l.as_str() {
                                "PING" => b"PONG\n",
                                "PONG" => b"",
                                // A session id the director refuses.
                                l if l.starts_with("SESSION-OPEN\tbad") => {
                                    b"FAIL\tNOTRACKED\tclosed id\n"
                                }
                                _ => b"OK\n",
                            };
                            if w.write_all(reply).await.is_err() {
                                return;
                            }
                            let _ = lines_tx.send(l);
                        }
                        Some(p) = pushes.recv() => {
                            if w.write_all(p.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
            (lines, push, task)
        }
    }

    async fn next(lines: &mut Lines) -> String {
        tokio::time::timeout(Duration::from_secs(5), lines.recv())
            .await
            .expect("the login sent nothing within 5 s")
            .expect("director connection closed")
    }

    fn link(addr: &str) -> (DirectorLink, Registry) {
        let mut registry = Registry::default();
        let l = DirectorLink::start(addr, None, Duration::from_secs(2), "imap", &mut registry);
        (l, registry)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn sessions_are_opened_and_closed_at_the_director_after_kick_watch() {
        let d = FakeDirector::bind().await;
        let (link, _r) = link(&d.addr);
        let (mut lines, _push, _t) = d.accept().await;
        assert_eq!(next(&mut lines).await, "KICK-WATCH");
        let s = link.open("s1", "alice", "blue", ip("10.0.0.7"));
        assert_eq!(
            next(&mut lines).await,
            "SESSION-OPEN\ts1\talice\tblue\t10.0.0.7\timap"
        );
        drop(s);
        assert_eq!(next(&mut lines).await, "SESSION-CLOSE\ts1");
    }

    #[tokio::test]
    async fn a_kick_ends_only_that_users_sessions_on_that_backend() {
        let d = FakeDirector::bind().await;
        let (link, _r) = link(&d.addr);
        let (mut lines, push, _t) = d.accept().await;
        assert_eq!(next(&mut lines).await, "KICK-WATCH");
        let a1 = link.open("a1", "alice", "", ip("10.0.0.1"));
        let a2 = link.open("a2", "alice", "", ip("10.0.0.2"));
        let b1 = link.open("b1", "bob", "", ip("10.0.0.1"));
        for _ in 0..3 {
            assert!(next(&mut lines).await.starts_with("SESSION-OPEN"));
        }
        push.send("USER-KICKED\talice\t10.0.0.1\n".into()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), a1.kicked())
            .await
            .expect("alice's session on 10.0.0.1 was kicked");
        for other in [&a2, &b1] {
            let r = tokio::time::timeout(Duration::from_millis(100), other.kicked()).await;
            assert!(r.is_err(), "another user or backend was not kicked");
        }
    }

    #[tokio::test]
    async fn the_directors_ping_is_answered_and_replies_are_counted_by_outcome() {
        let d = FakeDirector::bind().await;
        let (link, registry) = link(&d.addr);
        let (mut lines, push, _t) = d.accept().await;
        assert_eq!(next(&mut lines).await, "KICK-WATCH");
        push.send("PING\n".into()).unwrap();
        assert_eq!(next(&mut lines).await, "PONG");
        let good = link.open("good1", "alice", "", ip("10.0.0.1"));
        let bad = link.open("bad1", "alice", "", ip("10.0.0.1"));
        assert!(next(&mut lines).await.starts_with("SESSION-OPEN\tgood1"));
        assert!(next(&mut lines).await.starts_with("SESSION-OPEN\tbad1"));
        drop((good, bad));
        let mut closed = [next(&mut lines).await, next(&mut lines).await];
        closed.sort();
        assert_eq!(closed, ["SESSION-CLOSE\tbad1", "SESSION-CLOSE\tgood1"]);
        // The replies to the CLOSEs came after those to the OPENs; a PING
        // round trip after them means every reply has been read.
        push.send("PING\n".into()).unwrap();
        assert_eq!(next(&mut lines).await, "PONG");
        let sample = |labels: &str| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            let name = format!("yarilo_login_director_reports_total{{{labels}}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(name.as_str()).map(str::to_string))
                .unwrap_or_default()
        };
        let mut counted = false;
        for _ in 0..200 {
            if sample("protocol=\"imap\",op=\"close\",result=\"ok\"") == "2" {
                counted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(counted, "both CLOSEs answered OK");
        assert_eq!(sample("protocol=\"imap\",op=\"open\",result=\"ok\""), "1");
        assert_eq!(
            sample("protocol=\"imap\",op=\"open\",result=\"refused\""),
            "1"
        );
    }

    #[tokio::test]
    async fn a_director_that_stops_answering_gets_at_most_the_in_flight_bound() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (link, _r) = link(&addr);
        let (s, _) = listener.accept().await.unwrap();
        let (r, mut w) = s.into_split();
        let mut r = BufReader::new(r);
        w.write_all(b"VERSION\tdirector\t1\t0\n").await.unwrap();
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        line.clear();
        r.read_line(&mut line).await.unwrap();
        assert_eq!(line, "KICK-WATCH\n");
        // KICK-WATCH is answered; nothing after it is.
        w.write_all(b"OK\n").await.unwrap();
        for _ in 0..200 {
            if link.is_connected() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let sessions: Vec<DirectorSession> = (0..MAX_IN_FLIGHT + 50)
            .map(|i| link.open(&format!("s{i}"), "u", "", ip("10.0.0.1")))
            .collect();
        let mut opens = 0;
        loop {
            line.clear();
            match tokio::time::timeout(Duration::from_millis(300), r.read_line(&mut line)).await {
                Ok(Ok(n)) if n > 0 => {
                    assert!(line.starts_with("SESSION-OPEN\t"), "{line}");
                    opens += 1;
                }
                Ok(_) => panic!("the login closed the connection"),
                // Quiet for 300 ms: the link is waiting for answers.
                Err(_) => break,
            }
        }
        assert_eq!(opens, MAX_IN_FLIGHT);
        drop(sessions);
    }

    #[tokio::test]
    async fn a_reconnect_reports_live_sessions_again_and_owed_closes() {
        let d = FakeDirector::bind().await;
        let (link, _r) = link(&d.addr);
        let (mut lines, _push, task) = d.accept().await;
        assert_eq!(next(&mut lines).await, "KICK-WATCH");
        let kept = link.open("k1", "alice", "", ip("10.0.0.1"));
        let gone = link.open("g1", "bob", "", ip("10.0.0.1"));
        // From the queue or from the resync after KICK-WATCH: any order.
        let mut opened = [next(&mut lines).await, next(&mut lines).await];
        opened.sort();
        assert!(opened[0].starts_with("SESSION-OPEN\tg1\tbob"), "{opened:?}");
        assert!(
            opened[1].starts_with("SESSION-OPEN\tk1\talice"),
            "{opened:?}"
        );
        // The director goes away; bob's session ends meanwhile.
        task.abort();
        let _ = task.await;
        drop(lines);
        for _ in 0..200 {
            if !link.is_connected() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(gone);
        let (mut lines, _push, _t) = d.accept().await;
        assert_eq!(next(&mut lines).await, "KICK-WATCH");
        assert_eq!(next(&mut lines).await, "SESSION-CLOSE\tg1");
        assert_eq!(
            next(&mut lines).await,
            "SESSION-OPEN\tk1\talice\t\t10.0.0.1\timap"
        );
        drop(kept);
        assert_eq!(next(&mut lines).await, "SESSION-CLOSE\tk1");
    }

    #[tokio::test]
    async fn a_director_that_is_down_never_blocks_a_session_and_unsent_opens_need_no_close() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = dead.local_addr().unwrap().to_string();
        drop(dead);
        let (link, registry) = link(&addr);
        let started = std::time::Instant::now();
        for i in 0..(REPORT_QUEUE * 2) {
            drop(link.open(&format!("s{i}"), "u", "", ip("10.0.0.1")));
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(link.inner.table().live.is_empty());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        // Nothing was announced, so no CLOSE is owed or counted as sent.
        assert!(!text.contains("op=\"close\""), "{text}");
    }
}
