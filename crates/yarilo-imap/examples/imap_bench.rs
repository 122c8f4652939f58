//! `imap_bench`: a small IMAP load generator with a hand-written client
//! (plain TCP, LOGIN, synchronising literals), used by `bench/imap/run.sh`
//! and `bench/imap/idle_memory.sh`. It speaks to any IMAP4rev1 server, so
//! the same workload runs against yarilo and Dovecot.
//!
//! ```text
//! imap_bench freeport [N]
//! imap_bench prefill --target NAME=HOST:PORT ... --users N --password PW --messages M
//! imap_bench load    --target NAME=HOST:PORT ... --users N --password PW
//!                    --levels 1,8,32 --duration SECS [--json FILE] [--mix login|expunge]
//! imap_bench idle    --target HOST:PORT --users N --password PW --conns N [--ramp K]
//! ```
//!
//! Users are `bench1..benchN`. `load` runs the levels interleaved across the
//! targets (level 1 on every target, then level 8, …) so that both servers
//! see similar machine conditions, then prints one table and the
//! throughput ratio of the first target to the second.
//!
//! The session mix of one `load` client, repeated until the time is up:
//! LOGIN, SELECT INBOX, FETCH of the last 50 messages (FLAGS UID
//! RFC822.SIZE ENVELOPE), 3 × (UID FETCH <random> BODY.PEEK[] + STORE
//! <random> +FLAGS (\Seen)), APPEND of a ~4 KB message, UID SEARCH UNSEEN,
//! UID SEARCH SUBJECT <word>, LOGOUT. Every command is one op; latency is
//! measured from the first byte sent to the tagged response (APPEND
//! includes the continuation round trip).
//!
//! `--mix expunge`: long-lived sessions that share mailboxes (several
//! clients per user). Each logs in and selects once, then repeats until
//! the time is up: FETCH (FLAGS UID BODY.PEEK[HEADER.FIELDS (SUBJECT)]) of
//! ten messages of its view by sequence number, and one time in three
//! STORE +FLAGS (\Deleted) of one of them, EXPUNGE and an APPEND that
//! puts the mailbox back at its size. Other sessions' expunges reach a
//! session only through its own NOOP-free command flow, so its FETCHes
//! name messages that are gone from the disk but still in its view: a
//! server that cannot serve them answers NO (counted as failed).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

type Res<T> = Result<T, String>;

const CMD_TIMEOUT: Duration = Duration::from_secs(30);
const FETCH_WINDOW: u32 = 50;
const READS_PER_SESSION: usize = 3;

// ---------------------------------------------------------------- client

struct Resp {
    /// `OK`, `NO` or `BAD`.
    status: String,
    tagged: String,
    untagged: Vec<String>,
    literal_bytes: usize,
}

struct Client {
    s: BufReader<TcpStream>,
    next_tag: u64,
}

impl Client {
    async fn connect(addr: &str) -> Res<Client> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        tcp.set_nodelay(true).ok();
        let mut c = Client {
            s: BufReader::with_capacity(64 * 1024, tcp),
            next_tag: 1,
        };
        let (greeting, _) = c.read_line().await?;
        if !greeting.starts_with("* OK") {
            return Err(format!("greeting: {}", greeting.trim_end()));
        }
        Ok(c)
    }

    /// One logical response line: literals (`{N}` / `{N+}` at the end of a
    /// physical line) are read and kept as a placeholder, with their size
    /// counted.
    async fn read_line(&mut self) -> Res<(String, usize)> {
        let mut out = String::new();
        let mut lit_total = 0;
        loop {
            let mut buf = Vec::new();
            let n = self
                .s
                .read_until(b'\n', &mut buf)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err(format!("connection closed by server after {:?}", out));
            }
            let line = String::from_utf8_lossy(&buf).into_owned();
            let trimmed = line.trim_end_matches(['\r', '\n']);
            if let Some(n) = literal_len(trimmed) {
                out.push_str(trimmed);
                let mut lit = vec![0u8; n];
                self.s
                    .read_exact(&mut lit)
                    .await
                    .map_err(|e| format!("read literal: {e}"))?;
                lit_total += n;
                out.push_str("<literal>");
                continue;
            }
            out.push_str(&line);
            return Ok((out, lit_total));
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> Res<()> {
        self.s
            .get_mut()
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    fn tag(&mut self) -> String {
        let t = format!("a{}", self.next_tag);
        self.next_tag += 1;
        t
    }

    async fn read_until_tagged(&mut self, tag: &str) -> Res<Resp> {
        let mut untagged = Vec::new();
        let mut literal_bytes = 0;
        loop {
            let (line, lits) = self.read_line().await?;
            literal_bytes += lits;
            if let Some(rest) = line.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')) {
                let status = rest.split(' ').next().unwrap_or("").trim_end().to_string();
                return Ok(Resp {
                    status,
                    tagged: line.trim_end().to_string(),
                    untagged,
                    literal_bytes,
                });
            }
            if line.starts_with('+') {
                return Err(format!("unexpected continuation: {}", line.trim_end()));
            }
            untagged.push(line);
        }
    }

    async fn cmd(&mut self, text: &str) -> Res<Resp> {
        let tag = self.tag();
        self.send(format!("{tag} {text}\r\n").as_bytes()).await?;
        self.read_until_tagged(&tag).await
    }

    /// `cmd` that insists on a tagged OK.
    async fn ok(&mut self, text: &str) -> Res<Resp> {
        let r = self.cmd(text).await?;
        if r.status != "OK" {
            return Err(format!("{text:?} -> {}", r.tagged));
        }
        Ok(r)
    }

    async fn append(&mut self, mailbox: &str, msg: &[u8]) -> Res<Resp> {
        let tag = self.tag();
        self.send(format!("{tag} APPEND {mailbox} {{{}}}\r\n", msg.len()).as_bytes())
            .await?;
        loop {
            let (line, _) = self.read_line().await?;
            if line.starts_with('+') {
                break;
            }
            if line.starts_with(&format!("{tag} ")) {
                return Err(format!(
                    "APPEND refused before literal: {}",
                    line.trim_end()
                ));
            }
        }
        let mut data = Vec::with_capacity(msg.len() + 2);
        data.extend_from_slice(msg);
        data.extend_from_slice(b"\r\n");
        self.send(&data).await?;
        let r = self.read_until_tagged(&tag).await?;
        if r.status != "OK" {
            return Err(format!("APPEND -> {}", r.tagged));
        }
        Ok(r)
    }

    async fn login(&mut self, user: &str, pw: &str) -> Res<Resp> {
        self.ok(&format!("LOGIN {} {}", quote(user), quote(pw)))
            .await
    }
}

fn literal_len(line: &str) -> Option<usize> {
    let body = line.strip_suffix('}')?;
    let open = body.rfind('{')?;
    let digits = body[open + 1..].trim_end_matches('+');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `* N EXISTS` and `[UIDNEXT n]` from a SELECT.
fn select_info(r: &Resp) -> (u32, u32) {
    let mut exists = 0;
    let mut uidnext = 0;
    for l in &r.untagged {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 3 && w[0] == "*" && w[2].eq_ignore_ascii_case("EXISTS") {
            exists = w[1].parse().unwrap_or(0);
        }
        if let Some(i) = l.find("[UIDNEXT ") {
            let rest = &l[i + 9..];
            uidnext = rest
                .split(']')
                .next()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
        }
    }
    (exists, uidnext)
}

// ---------------------------------------------------------------- messages

const WORDS: &[&str] = &[
    "the",
    "meeting",
    "project",
    "budget",
    "review",
    "schedule",
    "team",
    "customer",
    "release",
    "quarter",
    "report",
    "please",
    "attached",
    "find",
    "update",
    "deadline",
    "server",
    "migration",
    "invoice",
    "shipment",
    "contract",
    "draft",
    "notes",
    "agenda",
    "follow",
    "up",
    "regarding",
    "thanks",
    "regards",
    "question",
    "proposal",
    "feedback",
    "tomorrow",
    "morning",
    "afternoon",
    "weekly",
    "status",
    "numbers",
    "forecast",
    "design",
    "approval",
    "pending",
    "office",
    "travel",
    "expenses",
    "summary",
    "backlog",
    "priority",
    "with",
    "and",
    "for",
    "from",
    "about",
    "this",
    "that",
    "will",
    "we",
    "you",
    "our",
];
const SUBJECTS: &[&str] = &[
    "Weekly status update",
    "Re: Budget review for next quarter",
    "Invoice 4471 attached",
    "Meeting notes and agenda",
    "Fwd: Server migration schedule",
    "Draft proposal for feedback",
    "Travel expenses summary",
    "Re: Re: Release deadline",
];
const NAMES: &[&str] = &[
    "Alice Martin",
    "Bob Chen",
    "Carol Diaz",
    "Dmitri Volkov",
    "Eve Laurent",
    "Farid Haddad",
    "Grace Kim",
    "Hiro Tanaka",
];

/// A realistic RFC 5322 text message of about `size` bytes, deterministic
/// in `seed`.
fn make_message(seed: u64, to: &str, size: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let from = NAMES[rng.gen_range(0..NAMES.len())];
    let login = from.split(' ').next().unwrap_or("x").to_lowercase();
    let subject = SUBJECTS[rng.gen_range(0..SUBJECTS.len())];
    let day = 1 + (seed % 28);
    let hour = seed % 24;
    let min = (seed / 24) % 60;
    let mut m = String::with_capacity(size + 200);
    let _ = write!(
        m,
        "Return-Path: <{login}@example.org>\r\n\
         Received: from mx1.example.org (mx1.example.org [192.0.2.10])\r\n\tby mail.example.net with ESMTPS id {seed:x}\r\n\tfor <{to}@example.net>; Mon, {day} Mar 2025 {hour:02}:{min:02}:00 +0000\r\n\
         Date: Mon, {day} Mar 2025 {hour:02}:{min:02}:00 +0000\r\n\
         From: {from} <{login}@example.org>\r\n\
         To: {to} <{to}@example.net>\r\n\
         Cc: team <team@example.net>\r\n\
         Subject: {subject}\r\n\
         Message-ID: <{seed:016x}.bench@example.org>\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         Content-Transfer-Encoding: 8bit\r\n\
         \r\n\
         Hello {to},\r\n\r\n"
    );
    let mut line = String::new();
    while m.len() < size {
        let w = WORDS[rng.gen_range(0..WORDS.len())];
        if line.len() + w.len() + 1 > 72 {
            m.push_str(&line);
            m.push_str(if rng.gen_ratio(1, 8) {
                ".\r\n\r\n"
            } else {
                "\r\n"
            });
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    m.push_str(&line);
    let _ = write!(m, "\r\n\r\nRegards,\r\n{from}\r\n");
    m.into_bytes()
}

// ---------------------------------------------------------------- args

struct Args {
    targets: Vec<(String, String)>,
    users: usize,
    password: String,
    messages: usize,
    levels: Vec<usize>,
    duration: u64,
    json: Option<String>,
    conns: usize,
    ramp: usize,
    msg_size: usize,
    expunge_mix: bool,
}

fn parse_args(v: &[String]) -> Res<Args> {
    let mut a = Args {
        targets: Vec::new(),
        users: 8,
        password: "bench-pass".into(),
        messages: 200,
        levels: vec![1, 8, 32],
        duration: 20,
        json: None,
        conns: 10_000,
        ramp: 200,
        msg_size: 4096,
        expunge_mix: false,
    };
    let mut i = 0;
    while i < v.len() {
        let val = v
            .get(i + 1)
            .cloned()
            .ok_or(format!("{} needs a value", v[i]))?;
        let num = |s: &str| s.parse::<usize>().map_err(|_| format!("bad number {s}"));
        match v[i].as_str() {
            "--target" => {
                let (name, addr) = match val.split_once('=') {
                    Some((n, a)) => (n.to_string(), a.to_string()),
                    None => ("server".to_string(), val.clone()),
                };
                a.targets.push((name, addr));
            }
            "--users" => a.users = num(&val)?,
            "--password" => a.password = val,
            "--messages" => a.messages = num(&val)?,
            "--levels" => {
                a.levels = val.split(',').map(num).collect::<Res<Vec<_>>>()?;
            }
            "--duration" => a.duration = num(&val)? as u64,
            "--json" => a.json = Some(val),
            "--conns" => a.conns = num(&val)?,
            "--ramp" => a.ramp = num(&val)?.max(1),
            "--msg-size" => a.msg_size = num(&val)?,
            "--mix" => {
                a.expunge_mix = match val.as_str() {
                    "login" => false,
                    "expunge" => true,
                    other => return Err(format!("unknown mix {other} (login, expunge)")),
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
        i += 2;
    }
    if a.targets.is_empty() {
        return Err("at least one --target NAME=HOST:PORT is needed".into());
    }
    if a.users == 0 {
        return Err("--users must be at least 1".into());
    }
    Ok(a)
}

fn user_name(i: usize) -> String {
    format!("bench{}", i + 1)
}

// ---------------------------------------------------------------- prefill

async fn prefill(a: &Args) -> Res<()> {
    for (name, addr) in &a.targets {
        let t0 = Instant::now();
        let sem = Arc::new(tokio::sync::Semaphore::new(8));
        let mut tasks = Vec::new();
        for u in 0..a.users {
            let (addr, pw, sem) = (addr.clone(), a.password.clone(), sem.clone());
            let (m, size) = (a.messages, a.msg_size);
            tasks.push(tokio::spawn(async move {
                let _permit = sem.acquire().await;
                let user = user_name(u);
                let mut c = Client::connect(&addr).await?;
                c.login(&user, &pw).await?;
                let (exists, _) = select_info(&c.ok("SELECT INBOX").await?);
                for i in exists as usize..m {
                    let msg = make_message((u as u64) << 32 | i as u64, &user, size);
                    c.append("INBOX", &msg).await?;
                }
                c.cmd("LOGOUT").await.ok();
                Ok::<usize, String>(m.saturating_sub(exists as usize))
            }));
        }
        let mut added = 0;
        for t in tasks {
            added += t.await.map_err(|e| e.to_string())??;
        }
        println!(
            "prefill {name}: {} users, {added} messages appended in {:.1}s",
            a.users,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- load

const KINDS: &[&str] = &[
    "LOGIN",
    "SELECT",
    "FETCH_ENV",
    "UID_FETCH_BODY",
    "STORE",
    "APPEND",
    "SEARCH_UNSEEN",
    "SEARCH_SUBJECT",
    "FETCH_SEQ",
    "STORE_DELETED",
    "EXPUNGE",
    "NOOP",
    "LOGOUT",
];

#[derive(Default)]
struct Stats {
    lat: BTreeMap<&'static str, Vec<u32>>,
    errors: BTreeMap<&'static str, u64>,
    samples: Vec<String>,
    sessions: u64,
}

impl Stats {
    fn rec(&mut self, kind: &'static str, t: Instant) {
        self.lat
            .entry(kind)
            .or_default()
            .push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }
    fn err(&mut self, kind: &'static str, e: String) {
        *self.errors.entry(kind).or_default() += 1;
        if self.samples.len() < 5 {
            self.samples.push(format!("{kind}: {e}"));
        }
    }
    fn merge(&mut self, o: Stats) {
        for (k, mut v) in o.lat {
            self.lat.entry(k).or_default().append(&mut v);
        }
        for (k, n) in o.errors {
            *self.errors.entry(k).or_default() += n;
        }
        for s in o.samples {
            if self.samples.len() < 10 {
                self.samples.push(s);
            }
        }
        self.sessions += o.sessions;
    }
    fn ops(&self) -> u64 {
        self.lat.values().map(|v| v.len() as u64).sum()
    }
}

/// One session of the mix. Returns early with the failing command's kind.
#[allow(clippy::too_many_arguments)]
async fn session(
    addr: &str,
    user: &str,
    pw: &str,
    rng: &mut StdRng,
    seed: &AtomicU64,
    size: usize,
    deadline: Instant,
    st: &mut Stats,
) -> Result<(), (&'static str, String)> {
    macro_rules! timed {
        ($kind:expr, $e:expr) => {{
            if Instant::now() >= deadline {
                return Ok(());
            }
            let t = Instant::now();
            let r = tokio::time::timeout(CMD_TIMEOUT, $e)
                .await
                .map_err(|_| ($kind, format!("no response within {CMD_TIMEOUT:?}")))?
                .map_err(|e| ($kind, e))?;
            st.rec($kind, t);
            r
        }};
    }
    let mut c = tokio::time::timeout(CMD_TIMEOUT, Client::connect(addr))
        .await
        .map_err(|_| ("CONNECT", "no greeting".to_string()))?
        .map_err(|e| ("CONNECT", e))?;
    timed!("LOGIN", c.login(user, pw));
    let sel = timed!("SELECT", c.ok("SELECT INBOX"));
    let (exists, uidnext) = select_info(&sel);
    if exists == 0 || uidnext <= 1 {
        return Err((
            "SELECT",
            format!("EXISTS {exists} UIDNEXT {uidnext}: {:?}", sel.untagged),
        ));
    }
    let lo = exists.saturating_sub(FETCH_WINDOW - 1).max(1);
    let r = timed!(
        "FETCH_ENV",
        c.ok(&format!(
            "FETCH {lo}:{exists} (FLAGS UID RFC822.SIZE ENVELOPE)"
        ))
    );
    // Other sessions' STOREs and APPENDs may add unsolicited FETCH (FLAGS)
    // and EXISTS responses; count only the ones answering this command.
    let fetched = r
        .untagged
        .iter()
        .filter(|l| l.contains(" FETCH ") && l.contains("ENVELOPE"))
        .count() as u32;
    if fetched != exists - lo + 1 {
        return Err((
            "FETCH_ENV",
            format!(
                "expected {} FETCH responses, got {fetched}",
                exists - lo + 1
            ),
        ));
    }
    for _ in 0..READS_PER_SESSION {
        // No expunges happen, so UIDs 1..uidnext-1 all exist.
        let uid = rng.gen_range(1..uidnext);
        let r = timed!(
            "UID_FETCH_BODY",
            c.ok(&format!("UID FETCH {uid} (UID BODY.PEEK[])"))
        );
        if r.literal_bytes < 500 {
            return Err((
                "UID_FETCH_BODY",
                format!(
                    "UID {uid}: body of {} bytes; {:?}",
                    r.literal_bytes, r.untagged
                ),
            ));
        }
        let seq = rng.gen_range(1..=exists);
        timed!("STORE", c.ok(&format!("STORE {seq} +FLAGS (\\Seen)")));
    }
    let msg = make_message(seed.fetch_add(1, Ordering::Relaxed), user, size);
    timed!("APPEND", c.append("INBOX", &msg));
    timed!("SEARCH_UNSEEN", c.ok("UID SEARCH UNSEEN"));
    let word = ["invoice", "budget", "meeting", "migration"][rng.gen_range(0..4)];
    let r = timed!(
        "SEARCH_SUBJECT",
        c.ok(&format!("UID SEARCH SUBJECT {word}"))
    );
    if !r.untagged.iter().any(|l| l.starts_with("* SEARCH")) {
        return Err((
            "SEARCH_SUBJECT",
            format!("no * SEARCH response: {}", r.tagged),
        ));
    }
    timed!("LOGOUT", c.ok("LOGOUT"));
    st.sessions += 1;
    Ok(())
}

/// Follows `* n EXISTS` and `* n EXPUNGE` so the session's view size is
/// known without a NOOP.
fn track_view(exists: &mut u32, r: &Resp) {
    for l in &r.untagged {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 3 && w[0] == "*" {
            if w[2].eq_ignore_ascii_case("EXISTS") {
                *exists = w[1].parse().unwrap_or(*exists);
            } else if w[2].eq_ignore_ascii_case("EXPUNGE") {
                *exists = exists.saturating_sub(1);
            }
        }
    }
}

/// One long-lived session of the `expunge` mix (see the header).
#[allow(clippy::too_many_arguments)]
async fn expunge_session(
    addr: &str,
    user: &str,
    pw: &str,
    rng: &mut StdRng,
    seed: &AtomicU64,
    size: usize,
    deadline: Instant,
    st: &mut Stats,
) -> Result<(), (&'static str, String)> {
    macro_rules! timed {
        ($kind:expr, $e:expr) => {{
            let t = Instant::now();
            let r = tokio::time::timeout(CMD_TIMEOUT, $e)
                .await
                .map_err(|_| ($kind, format!("no response within {CMD_TIMEOUT:?}")))?
                .map_err(|e| ($kind, e))?;
            st.rec($kind, t);
            r
        }};
    }
    let mut c = tokio::time::timeout(CMD_TIMEOUT, Client::connect(addr))
        .await
        .map_err(|_| ("CONNECT", "no greeting".to_string()))?
        .map_err(|e| ("CONNECT", e))?;
    timed!("LOGIN", c.login(user, pw));
    let sel = timed!("SELECT", c.ok("SELECT INBOX"));
    let (mut exists, _) = select_info(&sel);
    while Instant::now() < deadline {
        if exists == 0 {
            let msg = make_message(seed.fetch_add(1, Ordering::Relaxed), user, size);
            let r = timed!("APPEND", c.append("INBOX", &msg));
            track_view(&mut exists, &r);
            let r = timed!("NOOP", c.ok("NOOP"));
            track_view(&mut exists, &r);
            continue;
        }
        let lo = rng.gen_range(1..=exists);
        let hi = (lo + 9).min(exists);
        let r = timed!(
            "FETCH_SEQ",
            c.ok(&format!(
                "FETCH {lo}:{hi} (FLAGS UID BODY.PEEK[HEADER.FIELDS (SUBJECT)])"
            ))
        );
        track_view(&mut exists, &r);
        if rng.gen_range(0..3) == 0 && exists > 0 {
            let n = rng.gen_range(1..=exists);
            let r = timed!(
                "STORE_DELETED",
                c.ok(&format!("STORE {n} +FLAGS.SILENT (\\Deleted)"))
            );
            track_view(&mut exists, &r);
            let r = timed!("EXPUNGE", c.ok("EXPUNGE"));
            track_view(&mut exists, &r);
            let msg = make_message(seed.fetch_add(1, Ordering::Relaxed), user, size);
            let r = timed!("APPEND", c.append("INBOX", &msg));
            track_view(&mut exists, &r);
        }
    }
    timed!("LOGOUT", c.ok("LOGOUT"));
    st.sessions += 1;
    Ok(())
}

struct LevelResult {
    target: String,
    clients: usize,
    secs: f64,
    stats: Stats,
}

async fn run_level(a: &Args, addr: &str, clients: usize, run_id: u64) -> (f64, Stats) {
    let deadline = Instant::now() + Duration::from_secs(a.duration);
    let seed = Arc::new(AtomicU64::new(run_id << 40));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (addr, pw, seed) = (addr.to_string(), a.password.clone(), seed.clone());
        let user = user_name(i % a.users);
        let size = a.msg_size;
        let expunge_mix = a.expunge_mix;
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(run_id * 1000 + i as u64);
            let mut st = Stats::default();
            while Instant::now() < deadline {
                let r = if expunge_mix {
                    expunge_session(&addr, &user, &pw, &mut rng, &seed, size, deadline, &mut st)
                        .await
                } else {
                    session(&addr, &user, &pw, &mut rng, &seed, size, deadline, &mut st).await
                };
                if let Err((kind, e)) = r {
                    st.err(kind, format!("{user}: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            st
        }));
    }
    let mut total = Stats::default();
    for t in tasks {
        if let Ok(st) = t.await {
            total.merge(st);
        }
    }
    (t0.elapsed().as_secs_f64(), total)
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

async fn load(a: &Args) -> Res<()> {
    let mut results: Vec<LevelResult> = Vec::new();
    let mut run_id = 1;
    for &clients in &a.levels {
        for (name, addr) in &a.targets {
            eprintln!("load {name}: {clients} clients for {}s …", a.duration);
            let (secs, mut stats) = run_level(a, addr, clients, run_id).await;
            run_id += 1;
            for v in stats.lat.values_mut() {
                v.sort_unstable();
            }
            let errs: u64 = stats.errors.values().sum();
            eprintln!(
                "  {name} c={clients}: {} ops in {secs:.1}s = {:.0} ops/s, {} sessions, {errs} errors",
                stats.ops(),
                stats.ops() as f64 / secs,
                stats.sessions
            );
            for s in &stats.samples {
                eprintln!("    error: {s}");
            }
            results.push(LevelResult {
                target: name.clone(),
                clients,
                secs,
                stats,
            });
        }
    }
    print_table(a, &results);
    if let Some(path) = &a.json {
        std::fs::write(path, to_json(a, &results)).map_err(|e| format!("{path}: {e}"))?;
        println!("JSON results: {path}");
    }
    Ok(())
}

fn print_table(a: &Args, rs: &[LevelResult]) {
    println!();
    println!(
        "IMAP mix, {} users x {}+ messages of ~{} B, {}s per level; latency p50/p90/p99 in ms",
        a.users, a.messages, a.msg_size, a.duration
    );
    println!(
        "{:<8} {:>4} {:>9} {:>8} {:>6}  per command: p50/p90/p99",
        "server", "cl", "ops/s", "sess/s", "errors"
    );
    for r in rs {
        let ops = r.stats.ops();
        let errs: u64 = r.stats.errors.values().sum();
        println!(
            "{:<8} {:>4} {:>9.0} {:>8.1} {:>6}",
            r.target,
            r.clients,
            ops as f64 / r.secs,
            r.stats.sessions as f64 / r.secs,
            errs
        );
        for k in KINDS {
            if let Some(v) = r.stats.lat.get(k) {
                println!(
                    "{:>33}  {:<15} n={:<7} {:>8.2} {:>8.2} {:>8.2}",
                    "",
                    k,
                    v.len(),
                    pct(v, 50.0),
                    pct(v, 90.0),
                    pct(v, 99.0)
                );
            }
        }
    }
    if a.targets.len() >= 2 {
        let (t0, t1) = (&a.targets[0].0, &a.targets[1].0);
        println!();
        println!("throughput ratio {t0}/{t1}:");
        for &c in &a.levels {
            let get = |t: &str| {
                rs.iter()
                    .find(|r| r.target == t && r.clients == c)
                    .map(|r| r.stats.ops() as f64 / r.secs)
                    .unwrap_or(0.0)
            };
            let (x, y) = (get(t0), get(t1));
            let ratio = if y > 0.0 { x / y } else { f64::NAN };
            println!("  {c:>4} clients: {x:>8.0} / {y:>8.0} ops/s = {ratio:.2}x");
        }
    }
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn to_json(a: &Args, rs: &[LevelResult]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "{{\n  \"users\": {},\n  \"messages_per_user\": {},\n  \"message_bytes\": {},\n  \"duration_seconds\": {},\n  \"results\": [\n",
        a.users, a.messages, a.msg_size, a.duration
    );
    for (i, r) in rs.iter().enumerate() {
        let ops = r.stats.ops();
        let _ = write!(
            o,
            "    {{\"server\": {}, \"clients\": {}, \"seconds\": {:.3}, \"ops\": {}, \"ops_per_second\": {:.1}, \"sessions\": {}, \"errors\": {{",
            json_str(&r.target),
            r.clients,
            r.secs,
            ops,
            ops as f64 / r.secs,
            r.stats.sessions
        );
        let errs: Vec<String> = r
            .stats
            .errors
            .iter()
            .map(|(k, n)| format!("{}: {n}", json_str(k)))
            .collect();
        o.push_str(&errs.join(", "));
        o.push_str("}, \"error_samples\": [");
        let samples: Vec<String> = r.stats.samples.iter().map(|s| json_str(s)).collect();
        o.push_str(&samples.join(", "));
        o.push_str("], \"latency_ms\": {");
        let lats: Vec<String> = KINDS
            .iter()
            .filter_map(|k| {
                r.stats.lat.get(k).map(|v| {
                    format!(
                        "{}: {{\"n\": {}, \"p50\": {:.3}, \"p90\": {:.3}, \"p99\": {:.3}}}",
                        json_str(k),
                        v.len(),
                        pct(v, 50.0),
                        pct(v, 90.0),
                        pct(v, 99.0)
                    )
                })
            })
            .collect();
        o.push_str(&lats.join(", "));
        o.push_str("}}");
        o.push_str(if i + 1 < rs.len() { ",\n" } else { "\n" });
    }
    o.push_str("  ]\n}\n");
    o
}

// ---------------------------------------------------------------- idle

async fn idle(a: &Args) -> Res<()> {
    let addr = a.targets[0].1.clone();
    let idling = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let first_err: Arc<Mutex<Vec<String>>> = Arc::default();
    let sem = Arc::new(tokio::sync::Semaphore::new(a.ramp));
    let t0 = Instant::now();
    for i in 0..a.conns {
        let (addr, pw, sem) = (addr.clone(), a.password.clone(), sem.clone());
        let (idling, dropped, failed, first_err) = (
            idling.clone(),
            dropped.clone(),
            failed.clone(),
            first_err.clone(),
        );
        let user = user_name(i % a.users);
        tokio::spawn(async move {
            let setup = async {
                let permit = sem.acquire().await;
                let mut c = Client::connect(&addr).await?;
                c.login(&user, &pw).await?;
                c.ok("SELECT INBOX").await?;
                let tag = c.tag();
                c.send(format!("{tag} IDLE\r\n").as_bytes()).await?;
                let (line, _) = c.read_line().await?;
                if !line.starts_with('+') {
                    return Err(format!("IDLE -> {}", line.trim_end()));
                }
                drop(permit);
                Ok::<Client, String>(c)
            };
            let res = match tokio::time::timeout(Duration::from_secs(120), setup).await {
                Ok(r) => r,
                Err(_) => Err("no IDLE continuation within 120s".to_string()),
            };
            let mut c = match res {
                Ok(c) => c,
                Err(e) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    let mut fe = first_err.lock().unwrap_or_else(|e| e.into_inner());
                    if fe.len() < 5 {
                        fe.push(format!("conn {i} ({user}) setup failed: {e}"));
                    }
                    return;
                }
            };
            idling.fetch_add(1, Ordering::Relaxed);
            // Hold the session; drain whatever the server sends (keepalives).
            loop {
                match c.read_line().await {
                    Ok(_) => {}
                    Err(e) => {
                        idling.fetch_sub(1, Ordering::Relaxed);
                        dropped.fetch_add(1, Ordering::Relaxed);
                        let mut fe = first_err.lock().unwrap_or_else(|e| e.into_inner());
                        if fe.len() < 5 {
                            fe.push(format!("conn {i} dropped while idling: {e}"));
                        }
                        return;
                    }
                }
            }
        });
    }
    // Report progress until every connection is idling or has failed.
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (n, f, d) = (
            idling.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
            dropped.load(Ordering::Relaxed),
        );
        if n + f + d >= a.conns {
            println!(
                "IDLING {n} failed {f} dropped {d} setup_seconds {:.1}",
                t0.elapsed().as_secs_f64()
            );
            break;
        }
    }
    for e in first_err.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("error: {e}");
    }
    // Hold until told to stop; report changes meanwhile.
    let mut last = idling.load(Ordering::Relaxed);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                let n = idling.load(Ordering::Relaxed);
                if n != last {
                    println!("IDLING {n} dropped {}", dropped.load(Ordering::Relaxed));
                    for e in first_err.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                        println!("error: {e}");
                    }
                    last = n;
                }
            }
        }
    }
    println!("stopping with {} idling", idling.load(Ordering::Relaxed));
    Ok(())
}

// ---------------------------------------------------------------- main

fn free_ports(n: usize) -> Res<Vec<u16>> {
    let socks = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    socks
        .iter()
        .map(|s| s.local_addr().map(|a| a.port()).map_err(|e| e.to_string()))
        .collect()
}

fn run(mode: &str, argv: &[String]) -> Res<()> {
    let args = parse_args(argv).map_err(|e| format!("{e} (see the header of imap_bench.rs)"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        match mode {
            "prefill" => prefill(&args).await,
            "load" => load(&args).await,
            "idle" => idle(&args).await,
            other => Err(format!("unknown mode {other}")),
        }
    })
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(mode) = argv.first().cloned() else {
        eprintln!("usage: imap_bench freeport|prefill|load|idle [options]; see the source header");
        std::process::exit(2);
    };
    let r = if mode == "freeport" {
        // Print N distinct free loopback ports (kept bound until all are chosen).
        let n: usize = argv.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
        free_ports(n).map(|ports| {
            for p in ports {
                println!("{p}");
            }
        })
    } else {
        run(&mode, &argv[1..])
    };
    if let Err(e) = r {
        eprintln!("imap_bench {mode}: {e}");
        std::process::exit(1);
    }
}
