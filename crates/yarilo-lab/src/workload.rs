//! The clients: LMTP deliveries with unique Message-IDs, IMAP sessions
//! (SELECT, APPEND, FETCH, STORE; IDLE waiting for deliveries), POP3, and
//! LOOKUPs to the directors. Every operation goes to `history.jsonl`.
//! Clients come from outside the cluster, as through a load balancer: each
//! connection goes to a random Ready endpoint of the target Service.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::history::{ms, Journal, Op};
use crate::proto::{self, Director, Imap, ProtoError};
use crate::scenario::{Target, Workload};

/// How clients reach Services.
pub type Reach = Arc<dyn Fn(&str, u16) -> Option<SocketAddr> + Send + Sync>;

pub const PASSWORD: &str = "lab-secret";

pub fn user(i: u32) -> String {
    format!("user{:03}", i + 1)
}

pub struct Run {
    pub start: Instant,
    pub history: Arc<Journal<Op>>,
    pub reach: Reach,
    pub seed: u64,
    pub stop: watch::Receiver<bool>,
    pub lookup: Option<Target>,
    /// mTLS towards the director port (when internal TLS is on).
    pub director_tls: Option<DirectorTls>,
    /// The tag of the workload's own LOOKUPs.
    pub tag: String,
    counter: AtomicU64,
}

/// A TLS client for the director port: connector and pinned name.
#[derive(Clone)]
pub struct DirectorTls {
    pub connector: tokio_rustls::TlsConnector,
    pub name: rustls::pki_types::ServerName<'static>,
}

pub type AnyStream = Box<dyn proto::Stream>;

impl Run {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        start: Instant,
        history: Arc<Journal<Op>>,
        reach: Reach,
        seed: u64,
        stop: watch::Receiver<bool>,
        lookup: Option<Target>,
        director_tls: Option<DirectorTls>,
        tag: String,
    ) -> Arc<Run> {
        Arc::new(Run {
            start,
            history,
            reach,
            seed,
            stop,
            lookup,
            director_tls,
            tag,
            counter: AtomicU64::new(0),
        })
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    fn message_id(&self, kind: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("<lab-{}-{kind}-{n}@lab.invalid>", self.seed)
    }

    fn op(&self, kind: &str, user: &str, t0: Instant) -> Op {
        Op {
            t_ms: t0.duration_since(self.start).as_millis() as u64,
            dur_ms: t0.elapsed().as_millis() as u64,
            kind: kind.into(),
            user: user.into(),
            ..Default::default()
        }
    }

    fn record(&self, mut op: Op, r: Result<(), ProtoError>) {
        match r {
            Ok(()) => op.ok = true,
            Err(e) => {
                op.ok = false;
                op.error = Some(e.to_string());
            }
        }
        self.history.push(op);
    }

    async fn sleep(&self, d: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop.changed() => {}
        }
    }

    /// What the director says for a user now (`None` without a lookup
    /// target or when it fails).
    async fn ask_director(&self, user: &str) -> Option<String> {
        let t = self.lookup.as_ref()?;
        let addr = (self.reach)(&t.service, t.port)?;
        let mut d = self.director(addr).await.ok()?;
        d.lookup(user, &self.tag).await.ok()
    }

    /// A connection to a director's LOOKUP port (mTLS when configured).
    pub async fn director(&self, addr: SocketAddr) -> Result<Director<AnyStream>, ProtoError> {
        let s = proto::connect(addr).await?;
        let stream: AnyStream = match &self.director_tls {
            Some(t) => Box::new(
                tokio::time::timeout(
                    Duration::from_secs(5),
                    t.connector.connect(t.name.clone(), s),
                )
                .await
                .map_err(|_| ProtoError::Timeout)??,
            ),
            None => Box::new(s),
        };
        Director::start(stream).await
    }
}

fn message(id: &str, subject: &str) -> Vec<u8> {
    format!(
        "From: lab@lab.invalid\r\nTo: someone@lab.invalid\r\nSubject: {subject}\r\nMessage-ID: {id}\r\n\r\nlab body {id}\r\n"
    )
    .into_bytes()
}

/// Starts every client loop of the workload; they end when `stop` flips.
pub fn start(run: &Arc<Run>, w: &Workload) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let users: Vec<String> = (0..w.users.max(1)).map(user).collect();
    if let Some(l) = &w.lmtp {
        let run = run.clone();
        let l = l.clone();
        let users = users.clone();
        tasks.push(tokio::spawn(async move {
            let period = Duration::from_secs_f64(1.0 / l.rate_per_second.max(0.01));
            let mut n = 0usize;
            let mut inflight = Vec::new();
            while !run.stopped() {
                let u = users[n % users.len()].clone();
                n += 1;
                let run2 = run.clone();
                let t = l.target.clone();
                inflight.push(tokio::spawn(async move { lmtp_once(&run2, &t, &u).await }));
                inflight.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
                run.sleep(period).await;
            }
            for h in inflight {
                let _ = h.await;
            }
        }));
    }
    if let Some(i) = &w.imap {
        for k in 0..i.sessions {
            let run = run.clone();
            let i = i.clone();
            let u = users[k as usize % users.len()].clone();
            tasks.push(tokio::spawn(async move {
                imap_loop(&run, &i.target, &u, i.op_interval_ms).await
            }));
        }
        if i.idle {
            let run = run.clone();
            let i = i.clone();
            let u = users[0].clone();
            tasks.push(tokio::spawn(
                async move { idle_loop(&run, &i.target, &u).await },
            ));
        }
    }
    if let Some(p) = &w.pop3 {
        for k in 0..p.sessions {
            let run = run.clone();
            let p = p.clone();
            // POP3 users come from the end of the list, so they do not
            // share a maildrop lock with the IMAP loops' users.
            let u = users[users.len() - 1 - (k as usize % users.len())].clone();
            tasks.push(tokio::spawn(async move {
                while !run.stopped() {
                    let t0 = Instant::now();
                    let mut op = run.op("pop3", &u, t0);
                    let r = async {
                        let addr = (run.reach)(&p.target.service, p.target.port)
                            .ok_or_else(|| ProtoError::Unexpected("no ready endpoint".into()))?;
                        op.via = Some(addr.to_string());
                        let s = proto::connect(addr).await?;
                        proto::pop3_session(s, &u, PASSWORD).await.map(|_| ())
                    }
                    .await;
                    op.dur_ms = t0.elapsed().as_millis() as u64;
                    run.record(op, r);
                    run.sleep(Duration::from_millis(p.interval_ms)).await;
                }
            }));
        }
    }
    if let Some(l) = &w.lookup {
        let run = run.clone();
        let l = l.clone();
        let users = users.clone();
        tasks.push(tokio::spawn(async move {
            let period = Duration::from_secs_f64(1.0 / l.rate_per_second.max(0.01));
            let mut conn: Option<(Director<AnyStream>, String)> = None;
            let mut n = 0usize;
            while !run.stopped() {
                let u = users[n % users.len()].clone();
                n += 1;
                let t0 = Instant::now();
                let mut op = run.op("lookup", &u, t0);
                let r = async {
                    if conn.is_none() {
                        let addr = (run.reach)(&l.target.service, l.target.port)
                            .ok_or_else(|| ProtoError::Unexpected("no ready endpoint".into()))?;
                        conn = Some((run.director(addr).await?, addr.to_string()));
                    }
                    let Some((d, via)) = conn.as_mut() else {
                        return Err(ProtoError::Closed);
                    };
                    op.via = Some(via.clone());
                    let ip = d.lookup(&u, &l.tag).await?;
                    op.director = Some(ip);
                    Ok(())
                }
                .await;
                if r.is_err() {
                    conn = None;
                }
                op.dur_ms = t0.elapsed().as_millis() as u64;
                run.record(op, r);
                run.sleep(period).await;
            }
        }));
    }
    tasks
}

async fn lmtp_once(run: &Run, t: &Target, u: &str) {
    let id = run.message_id("lmtp");
    let t0 = Instant::now();
    let mut op = run.op("lmtp", u, t0);
    op.message_id = Some(id.clone());
    op.director = run.ask_director(u).await;
    let r = async {
        let addr = (run.reach)(&t.service, t.port)
            .ok_or_else(|| ProtoError::Unexpected("no ready endpoint".into()))?;
        op.via = Some(addr.to_string());
        let s = proto::connect(addr).await?;
        let reply = proto::lmtp_deliver(s, "sender@lab.invalid", u, &message(&id, "lmtp")).await?;
        op.reply = Some(reply);
        Ok(())
    }
    .await;
    op.dur_ms = t0.elapsed().as_millis() as u64;
    run.record(op, r);
}

async fn imap_loop(run: &Run, t: &Target, u: &str, interval_ms: u64) {
    while !run.stopped() {
        let t0 = Instant::now();
        let mut op = run.op("imap_login", u, t0);
        op.director = run.ask_director(u).await;
        let conn = async {
            let addr = (run.reach)(&t.service, t.port)
                .ok_or_else(|| ProtoError::Unexpected("no ready endpoint".into()))?;
            op.via = Some(addr.to_string());
            let s = proto::connect(addr).await?;
            let mut c = Imap::start(s).await?;
            c.login(u, PASSWORD).await?;
            Ok::<_, ProtoError>(c)
        }
        .await;
        op.dur_ms = t0.elapsed().as_millis() as u64;
        let via = op.via.clone();
        let director = op.director.clone();
        let mut c = match conn {
            Ok(c) => {
                run.record(op, Ok(()));
                c
            }
            Err(e) => {
                run.record(op, Err(e));
                run.sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        // A session does ten rounds, then logs out and comes back (so
        // users are routed again after a fault).
        for _ in 0..10 {
            if run.stopped() {
                break;
            }
            let step = imap_round(run, &mut c, u, via.as_deref(), director.as_deref()).await;
            if step.is_err() {
                break;
            }
            run.sleep(Duration::from_millis(interval_ms)).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), c.logout()).await;
    }
}

async fn imap_round(
    run: &Run,
    c: &mut Imap<tokio::net::TcpStream>,
    u: &str,
    via: Option<&str>,
    director: Option<&str>,
) -> Result<(), ()> {
    let tag = |mut op: Op| {
        op.via = via.map(String::from);
        op.director = director.map(String::from);
        op
    };
    let t0 = Instant::now();
    let mut op = tag(run.op("imap_select", u, t0));
    let r = c.select("INBOX").await;
    op.dur_ms = t0.elapsed().as_millis() as u64;
    let sel = match r {
        Ok(s) => {
            op.uidvalidity = Some(s.uidvalidity);
            op.uidnext = Some(s.uidnext);
            op.highestmodseq = Some(s.highestmodseq);
            run.record(op, Ok(()));
            s
        }
        Err(e) => {
            run.record(op, Err(e));
            return Err(());
        }
    };
    let id = run.message_id("append");
    let t0 = Instant::now();
    let mut op = tag(run.op("imap_append", u, t0));
    op.message_id = Some(id.clone());
    let r = c.append("INBOX", &message(&id, "append")).await;
    op.dur_ms = t0.elapsed().as_millis() as u64;
    let uid = match r {
        Ok(Some((v, uid))) => {
            op.uidvalidity = Some(v);
            op.uid = Some(uid);
            run.record(op, Ok(()));
            Some(uid)
        }
        Ok(None) => {
            run.record(op, Ok(()));
            None
        }
        Err(e) => {
            run.record(op, Err(e));
            return Err(());
        }
    };
    let t0 = Instant::now();
    let mut op = tag(run.op("imap_fetch", u, t0));
    op.uidvalidity = Some(sel.uidvalidity);
    // The newest messages only (the whole mailbox is read after the heal):
    // a bounded history however long the run.
    let r = c.message_ids(sel.uidnext.saturating_sub(40)).await;
    op.dur_ms = t0.elapsed().as_millis() as u64;
    match r {
        Ok(seen) => {
            op.seen = seen;
            run.record(op, Ok(()));
        }
        Err(e) => {
            run.record(op, Err(e));
            return Err(());
        }
    }
    if let Some(uid) = uid {
        let t0 = Instant::now();
        let mut op = tag(run.op("imap_store", u, t0));
        op.uid = Some(uid);
        op.uidvalidity = Some(sel.uidvalidity);
        let r = c.store_seen(uid).await;
        op.dur_ms = t0.elapsed().as_millis() as u64;
        match r {
            Ok(m) => {
                op.highestmodseq = m;
                run.record(op, Ok(()));
            }
            Err(e) => {
                run.record(op, Err(e));
                return Err(());
            }
        }
    }
    Ok(())
}

async fn idle_loop(run: &Run, t: &Target, u: &str) {
    while !run.stopped() {
        let t0 = Instant::now();
        let mut op = run.op("imap_idle", u, t0);
        let r = async {
            let addr = (run.reach)(&t.service, t.port)
                .ok_or_else(|| ProtoError::Unexpected("no ready endpoint".into()))?;
            op.via = Some(addr.to_string());
            let s = proto::connect(addr).await?;
            let mut c = Imap::start(s).await?;
            c.login(u, PASSWORD).await?;
            let sel = c.select("INBOX").await?;
            op.uidvalidity = Some(sel.uidvalidity);
            op.uidnext = Some(sel.uidnext);
            for _ in 0..5 {
                if run.stopped() {
                    break;
                }
                let seen = c.idle(Duration::from_secs(5)).await?;
                if seen.is_some() {
                    op.uid = seen;
                }
            }
            let _ = c.logout().await;
            Ok(())
        }
        .await;
        op.dur_ms = t0.elapsed().as_millis() as u64;
        let failed = r.is_err();
        run.record(op, r);
        if failed {
            run.sleep(Duration::from_millis(300)).await;
        }
    }
}

/// After the heal: every message of every workload user, as the clients
/// see it now (user → (uidvalidity, [(uid, Message-ID)])).
pub async fn final_state(
    reach: &Reach,
    t: &Target,
    users: u32,
) -> Result<Vec<(String, u32, Vec<(u32, String)>)>, String> {
    let mut out = Vec::new();
    for i in 0..users {
        let u = user(i);
        let mut last = String::new();
        let mut done = false;
        for _ in 0..20 {
            let r = async {
                let addr = reach(&t.service, t.port)
                    .ok_or_else(|| ProtoError::Unexpected("no ready endpoint".into()))?;
                let s = proto::connect(addr).await?;
                let mut c = Imap::start(s).await?;
                c.login(&u, PASSWORD).await?;
                let sel = c.select("INBOX").await?;
                let ids = if sel.exists > 0 {
                    c.message_ids(1).await?
                } else {
                    Vec::new()
                };
                let _ = c.logout().await;
                Ok::<_, ProtoError>((sel.uidvalidity, ids))
            }
            .await;
            match r {
                Ok((v, ids)) => {
                    out.push((u.clone(), v, ids));
                    done = true;
                    break;
                }
                Err(e) => {
                    last = e.to_string();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        if !done {
            return Err(format!("{u}: mailbox unreadable after the heal: {last}"));
        }
    }
    Ok(out)
}

/// ms since start, for callers outside.
pub fn now_ms(run: &Run) -> u64 {
    ms(run.start)
}
