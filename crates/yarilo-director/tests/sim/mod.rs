//! A deterministic simulator for the director ring: the production state
//! machine ([`RingNode`] with a [`Director`] per member) on an in-memory
//! network, with virtual time and one seeded random source.
//!
//! What the network models, and why:
//! - A connection is TCP: lines arrive in order on each direction, each
//!   after a random latency (so lines on different connections reorder).
//!   A connection is never "lossy"; it breaks.
//! - A killed process: its peers see the connection end at once (the
//!   kernel resets it), dials to it are refused.
//! - A hung process (SIGSTOP): the kernel still accepts, nothing is
//!   answered; its inputs queue up and replay in order when it resumes.
//!   Dials and probes to it time out.
//! - A cut between two members (partition): lines between them vanish and
//!   the connection stalls (each side only notices by silence); dials and
//!   probes time out.
//! - Seeds: a literal list, a headless name (the pod addresses a DNS
//!   lookup returns now, including phantoms of dead pods), or a
//!   load-balanced name (one poll to a random live pod, possibly
//!   ourselves).
//!
//! Everything runs on one event queue ordered by (time, sequence), so a
//! seed reproduces a run exactly.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::net::{IpAddr, SocketAddr};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use yarilo_director::cluster::node::{
    DialFailure, End, Input, LinkId, NodeConfig, Output, RingNode,
};
use yarilo_director::cluster::wire::RingMsg;
use yarilo_director::director::BackendUp;
use yarilo_director::{Director, DirectorId, Proto, Settings, Tick};

/// The backends every director starts with (static `mail_servers`).
pub const BACKENDS: [&str; 3] = ["10.9.0.1", "10.9.0.2", "10.9.0.3"];
/// Connect / greeting timeout of a dial (as in the driver).
const DIAL_TIMEOUT: Tick = 2_000;
/// Three probes of one second with 200 ms gaps, when nothing answers.
const PROBE_TIMEOUT_ALL: Tick = 3 * 1_000 + 2 * 200;
/// Three refused probes with their gaps.
const PROBE_REFUSED_ALL: Tick = 2 * 200 + 3;
/// How often the driver ticks the state machine (as the tokio driver).
const TICK: Tick = 250;

#[derive(Debug, Clone)]
pub enum Seeds {
    None,
    /// Literal addresses.
    List(Vec<SocketAddr>),
    /// The headless ring name: whatever [`Sim::dns`] lists now.
    Headless,
    /// One address that a load balancer routes to a random live pod.
    LoadBalanced,
}

#[derive(Debug, Clone)]
pub struct Timing {
    pub ping_interval: Tick,
    pub ping_timeout: Tick,
    pub seed_poll: Option<Tick>,
    pub seed_poll_idle: Tick,
    pub anti_entropy: Option<Tick>,
    pub tombstone_ttl: Option<Tick>,
    pub min_members: usize,
}

impl Default for Timing {
    /// The shipped defaults (`director_service.*`).
    fn default() -> Timing {
        Timing {
            ping_interval: 30_000,
            ping_timeout: 10_000,
            seed_poll: Some(2_000),
            seed_poll_idle: 2_000,
            anti_entropy: Some(3_000),
            tombstone_ttl: Some(600_000),
            min_members: 3,
        }
    }
}

/// One pod: an address and, while it runs, a process.
pub struct Pod {
    pub addr: SocketAddr,
    pub proc: Option<Proc>,
}

pub struct Proc {
    pub node: RingNode,
    pub dir: Director,
    /// Bumped on every restart: events for an older life are dropped.
    pub life: u64,
    pub hung: bool,
    /// Inputs that arrived while hung.
    backlog: Vec<Ev>,
    pub kicks: Vec<(String, IpAddr)>,
}

#[derive(Debug, Clone)]
enum Ev {
    Tick,
    DirectorTick,
    Input(Input),
    /// A dial's handshake reached the acceptor (checked when it lands).
    DialArrives {
        from: usize,
        from_life: u64,
        gen: u64,
    },
    Poll,
}

#[derive(Debug, Clone, Copy)]
struct End2 {
    pod: usize,
    life: u64,
    link: LinkId,
}

#[derive(Debug, Clone)]
struct Conn {
    a: End2,
    b: End2,
    /// Time the last line was scheduled in each direction (a→b, b→a).
    last: [Tick; 2],
    /// Stalled by a cut: nothing more is delivered either way.
    stalled: bool,
    closed: bool,
}

/// The simulator.
pub struct Sim {
    pub seed: u64,
    pub rng: StdRng,
    pub now: Tick,
    seq: u64,
    queue: BinaryHeap<Reverse<(Tick, u64, usize, u64)>>,
    events: HashMap<u64, Ev>,
    pub pods: Vec<Pod>,
    pub timing: Timing,
    /// The state machine's settings for every director.
    pub settings: Settings,
    pub seeds: Seeds,
    /// What the headless name resolves to (pod addresses, phantoms too).
    pub dns: Vec<SocketAddr>,
    cuts: BTreeSet<(usize, usize)>,
    conns: BTreeMap<u64, Conn>,
    /// Link id → connection id.
    link_conn: HashMap<LinkId, u64>,
    next_link: LinkId,
    next_inc: u64,
    pub trace: Vec<String>,
    pub tracing: bool,
    /// Processes that exit after their graceful leave: (when, pod, life).
    exit_at: Vec<(Tick, usize, u64)>,
}

impl Sim {
    pub fn new(seed: u64, timing: Timing, seeds: Seeds) -> Sim {
        Sim {
            seed,
            rng: StdRng::seed_from_u64(seed),
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            pods: Vec::new(),
            timing,
            settings: Settings::defaults(),
            seeds,
            dns: Vec::new(),
            cuts: BTreeSet::new(),
            conns: BTreeMap::new(),
            link_conn: HashMap::new(),
            next_link: 1,
            next_inc: 1,
            trace: Vec::new(),
            tracing: false,
            exit_at: Vec::new(),
        }
    }

    /// A pod address: 10.0.0.<n> (n from 1), port 9102.
    pub fn addr(n: u8) -> SocketAddr {
        SocketAddr::new(IpAddr::from([10, 0, 0, n]), 9102)
    }

    fn log(&mut self, s: impl FnOnce() -> String) {
        if self.tracing {
            let line = format!("{:>8} {}", self.now, s());
            self.trace.push(line);
        }
    }

    // ---- scheduling -----------------------------------------------------------

    fn at(&mut self, when: Tick, pod: usize, life: u64, ev: Ev) {
        self.seq += 1;
        self.events.insert(self.seq, ev);
        self.queue.push(Reverse((when, self.seq, pod, life)));
    }

    fn latency(&mut self) -> Tick {
        self.rng.gen_range(1..=5)
    }

    fn life(&self, pod: usize) -> Option<u64> {
        self.pods[pod].proc.as_ref().map(|p| p.life)
    }

    fn running(&self, pod: usize) -> bool {
        self.pods[pod].proc.as_ref().is_some_and(|p| !p.hung)
    }

    fn cut(&self, a: usize, b: usize) -> bool {
        self.cuts.contains(&(a.min(b), a.max(b)))
    }

    fn pod_of(&self, addr: SocketAddr) -> Option<usize> {
        self.pods.iter().position(|p| p.addr == addr)
    }

    // ---- pods ---------------------------------------------------------------------

    /// Adds a pod and starts its process now. Returns its index.
    pub fn spawn(&mut self, addr: SocketAddr) -> usize {
        let idx = match self.pod_of(addr) {
            Some(i) => i,
            None => {
                self.pods.push(Pod { addr, proc: None });
                self.pods.len() - 1
            }
        };
        if !self.dns.contains(&addr) {
            self.dns.push(addr);
        }
        self.start(idx);
        idx
    }

    /// Starts (or restarts) the process of a pod with a new incarnation.
    pub fn start(&mut self, pod: usize) {
        assert!(self.pods[pod].proc.is_none(), "pod {pod} is running");
        self.next_inc += 1;
        let addr = self.pods[pod].addr;
        let cfg = NodeConfig {
            me: addr,
            incarnation: self.next_inc,
            has_seeds: !matches!(self.seeds, Seeds::None),
            seed_poll: self.timing.seed_poll,
            seed_poll_idle: self.timing.seed_poll_idle,
            min_members: self.timing.min_members,
            ping_interval: self.timing.ping_interval,
            ping_timeout: self.timing.ping_timeout,
            anti_entropy: self.timing.anti_entropy,
            tombstone_ttl: self.timing.tombstone_ttl,
        };
        let mut dir = Director::new(self.settings.clone(), DirectorId::from_addr(addr));
        for b in BACKENDS {
            dir.add_static(self.now, b.parse().unwrap(), 143, "", 100);
        }
        dir.set_replicating(true);
        let life = self.seq + 1_000_000 * (pod as u64 + 1);
        self.pods[pod].proc = Some(Proc {
            node: RingNode::new(cfg, self.now),
            dir,
            life,
            hung: false,
            backlog: Vec::new(),
            kicks: Vec::new(),
        });
        let phase = self.rng.gen_range(0..TICK);
        self.at(self.now + phase, pod, life, Ev::Tick);
        let phase = self.rng.gen_range(0..1_000);
        self.at(self.now + phase, pod, life, Ev::DirectorTick);
        self.log(|| format!("start {addr}"));
    }

    /// kill -9: the process is gone; the kernel ends its connections.
    pub fn kill(&mut self, pod: usize) {
        if self.pods[pod].proc.take().is_none() {
            return;
        }
        let addr = self.pods[pod].addr;
        self.log(|| format!("kill {addr}"));
        self.break_conns_of(pod);
    }

    /// SIGSTOP.
    pub fn hang(&mut self, pod: usize) {
        if let Some(p) = self.pods[pod].proc.as_mut() {
            p.hung = true;
        }
    }

    /// SIGCONT: what queued up is handled in order, now.
    pub fn resume(&mut self, pod: usize) {
        let Some(p) = self.pods[pod].proc.as_mut() else {
            return;
        };
        if !p.hung {
            return;
        }
        p.hung = false;
        let life = p.life;
        let backlog = std::mem::take(&mut p.backlog);
        for ev in backlog {
            self.at(self.now, pod, life, ev);
        }
    }

    /// SIGTERM: the graceful leave, then the process exits (bounded by
    /// the grace period; the driver waits for its connections to close).
    pub fn terminate(&mut self, pod: usize) {
        if !self.running(pod) {
            return;
        }
        self.deliver(pod, Input::Leave);
        let life = self.life(pod).unwrap_or(0);
        // The process exits once its QUITs are out.
        let when = self.now + 20;
        self.at(when, pod, life, Ev::Input(Input::Tick));
        self.exit_at.push((when + 1, pod, life));
    }

    /// Cuts (partitions) the path between two pods.
    pub fn partition(&mut self, a: usize, b: usize) {
        self.cuts.insert((a.min(b), a.max(b)));
        for c in self.conns.values_mut() {
            if (c.a.pod == a && c.b.pod == b) || (c.a.pod == b && c.b.pod == a) {
                c.stalled = true;
            }
        }
    }

    /// Cuts every path between the two groups.
    pub fn split(&mut self, left: &[usize], right: &[usize]) {
        for &a in left {
            for &b in right {
                self.partition(a, b);
            }
        }
    }

    pub fn heal(&mut self) {
        self.cuts.clear();
    }

    // ---- the network -------------------------------------------------------------

    fn break_conns_of(&mut self, pod: usize) {
        let ids: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.closed && (c.a.pod == pod || c.b.pod == pod))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let (other, stalled) = {
                let c = self.conns.get_mut(&id).unwrap();
                c.closed = true;
                (if c.a.pod == pod { c.b } else { c.a }, c.stalled)
            };
            // A reset reaches the peer unless the path is cut.
            if !stalled && !self.cut(pod, other.pod) {
                let when = self.now + self.latency();
                self.at(
                    when,
                    other.pod,
                    other.life,
                    Ev::Input(Input::LinkDown {
                        link: other.link,
                        end: End::Lost,
                    }),
                );
            }
        }
    }

    fn send(&mut self, from_pod: usize, link: LinkId, msgs: Vec<RingMsg>, then_close: bool) {
        let Some(&cid) = self.link_conn.get(&link) else {
            return;
        };
        let lat = self.latency();
        let cut;
        let (to, when) = {
            let c = self.conns.get(&cid).unwrap();
            if c.closed || c.stalled {
                return;
            }
            let (dir, to) = if c.a.link == link { (0, c.b) } else { (1, c.a) };
            cut = self
                .cuts
                .contains(&(from_pod.min(to.pod), from_pod.max(to.pod)));
            let when = (self.now + lat).max(c.last[dir] + 1);
            (to, (dir, when))
        };
        if cut {
            self.conns.get_mut(&cid).unwrap().stalled = true;
            return;
        }
        let (dir, when) = when;
        let mut t = when;
        for msg in msgs {
            self.at(
                t,
                to.pod,
                to.life,
                Ev::Input(Input::Line { link: to.link, msg }),
            );
            t += 0;
        }
        let c = self.conns.get_mut(&cid).unwrap();
        c.last[dir] = t;
        if then_close {
            c.closed = true;
            self.at(
                t + 1,
                to.pod,
                to.life,
                Ev::Input(Input::LinkDown {
                    link: to.link,
                    end: End::Lost,
                }),
            );
        }
    }

    fn close_silently(&mut self, from_pod: usize, link: LinkId) {
        let Some(&cid) = self.link_conn.get(&link) else {
            return;
        };
        let c = self.conns.get_mut(&cid).unwrap();
        if c.closed {
            return;
        }
        c.closed = true;
        let stalled = c.stalled;
        let to = if c.a.link == link { c.b } else { c.a };
        if !stalled && !self.cut(from_pod, to.pod) {
            let when = self.now + self.latency();
            self.at(
                when,
                to.pod,
                to.life,
                Ev::Input(Input::LinkDown {
                    link: to.link,
                    end: End::Lost,
                }),
            );
        }
    }

    fn new_link(&mut self) -> LinkId {
        self.next_link += 1;
        self.next_link
    }

    /// Carries out what a state machine asked for.
    fn outputs(&mut self, pod: usize, out: Vec<Output>) {
        let life = self.life(pod).unwrap_or(0);
        for o in out {
            match o {
                Output::Send { link, msgs } => self.send(pod, link, msgs, false),
                Output::Close { link, reason } => self.send(
                    pod,
                    link,
                    vec![RingMsg::Quit {
                        reason: reason.to_string(),
                    }],
                    true,
                ),
                Output::Drop { link } => self.close_silently(pod, link),
                Output::Dial { peer, gen } => self.dial(pod, life, peer, gen),
                Output::Probe { peer, inc } => {
                    let alive = self.pod_of(peer).is_some_and(|p| self.running(p));
                    let dead = self
                        .pod_of(peer)
                        .is_none_or(|p| self.pods[p].proc.is_none());
                    let delay = if self.pod_of(peer).is_some_and(|p| self.cut(pod, p)) {
                        PROBE_TIMEOUT_ALL
                    } else if alive {
                        2 * self.latency()
                    } else if dead {
                        PROBE_REFUSED_ALL
                    } else {
                        PROBE_TIMEOUT_ALL
                    };
                    let alive = alive && !self.pod_of(peer).is_some_and(|p| self.cut(pod, p));
                    // The answer reflects the peer at the end of the probes.
                    let when = self.now + delay;
                    self.at(
                        when,
                        pod,
                        life,
                        Ev::Input(Input::Probed { peer, inc, alive }),
                    );
                }
                Output::Poll => {
                    let when = self.now + 2 * self.latency();
                    self.at(when, pod, life, Ev::Poll);
                }
                Output::Kick(kicks) => {
                    if let Some(p) = self.pods[pod].proc.as_mut() {
                        p.kicks
                            .extend(kicks.into_iter().map(|k| (k.user, k.backend)));
                    }
                }
                Output::AdminKick(kicks) => {
                    if let Some(p) = self.pods[pod].proc.as_mut() {
                        p.kicks
                            .extend(kicks.into_iter().map(|k| (k.user, k.backend)));
                    }
                }
                Output::Removed(_) | Output::Released(_) => {}
                Output::MemberJoined(a) => self.log(|| format!("{} +{a}", Sim::short(pod))),
                Output::MemberLeft(a) => self.log(|| format!("{} -{a}", Sim::short(pod))),
                Output::DeclaredDead(a) => {
                    self.log(|| format!("{} declares {a} dead", Sim::short(pod)))
                }
                Output::Refuted(inc) => {
                    self.log(|| format!("{} refutes, inc {inc}", Sim::short(pod)))
                }
            }
        }
    }

    fn short(pod: usize) -> String {
        format!("pod{pod}")
    }

    fn dial(&mut self, from: usize, life: u64, peer: SocketAddr, gen: u64) {
        let failed = |sim: &mut Sim, delay: Tick, failure: DialFailure| {
            let when = sim.now + delay;
            sim.at(
                when,
                from,
                life,
                Ev::Input(Input::DialFailed { gen, failure }),
            );
        };
        let Some(to) = self.pod_of(peer) else {
            // A phantom: nothing at that address.
            return failed(self, DIAL_TIMEOUT, DialFailure::Unreachable);
        };
        if self.cut(from, to) {
            return failed(self, DIAL_TIMEOUT, DialFailure::Unreachable);
        }
        match &self.pods[to].proc {
            None => failed(self, 1, DialFailure::Unreachable),
            Some(p) if p.hung => failed(self, DIAL_TIMEOUT, DialFailure::Unreachable),
            Some(_) => {
                let when = self.now + 3 * self.latency();
                let to_life = self.life(to).unwrap_or(0);
                self.at(
                    when,
                    to,
                    to_life,
                    Ev::DialArrives {
                        from,
                        from_life: life,
                        gen,
                    },
                );
            }
        }
    }

    /// The acceptor's side of a dial, at the acceptor (which is running).
    fn accept(&mut self, to: usize, from: usize, from_life: u64, gen: u64) {
        let fail = |sim: &mut Sim, failure| {
            let when = sim.now + sim.latency();
            sim.at(
                when,
                from,
                from_life,
                Ev::Input(Input::DialFailed { gen, failure }),
            );
        };
        if self.life(from) != Some(from_life) {
            return;
        }
        if self.cut(from, to) {
            return fail(self, DialFailure::Unreachable);
        }
        let from_addr = self.pods[from].addr;
        let from_inc = self.pods[from].proc.as_ref().unwrap().node.incarnation();
        let now = self.now;
        let to_life = self.life(to).unwrap_or(0);
        let mut out = Vec::new();
        {
            let p = self.pods[to].proc.as_mut().unwrap();
            if p.node.join_refusal(from_addr).is_some() {
                return fail(self, DialFailure::Refused);
            }
            p.node.joined(now, from_addr, from_inc, &mut out);
        }
        self.outputs(to, out);
        let (la, lb) = (self.new_link(), self.new_link());
        let cid = la;
        // The dialer learns of the connection (JOIN-OK) before any line
        // the acceptor sends on it.
        let dialer_up = self.now + self.latency();
        self.conns.insert(
            cid,
            Conn {
                a: End2 {
                    pod: from,
                    life: from_life,
                    link: la,
                },
                b: End2 {
                    pod: to,
                    life: to_life,
                    link: lb,
                },
                last: [now, dialer_up],
                stalled: false,
                closed: false,
            },
        );
        self.link_conn.insert(la, cid);
        self.link_conn.insert(lb, cid);
        let to_addr = self.pods[to].addr;
        // Acceptor first (its snapshot starts at once), the dialer when
        // JOIN-OK lands.
        self.deliver(
            to,
            Input::LinkUp {
                link: lb,
                peer: from_addr,
                dial: None,
            },
        );
        self.at(
            dialer_up,
            from,
            from_life,
            Ev::Input(Input::LinkUp {
                link: la,
                peer: to_addr,
                dial: Some(gen),
            }),
        );
    }

    /// A seed poll round of `pod`.
    fn poll(&mut self, pod: usize, life: u64) {
        let me = self.pods[pod].addr;
        let targets: Vec<SocketAddr> = match &self.seeds {
            Seeds::None => Vec::new(),
            Seeds::List(l) => l.iter().copied().filter(|a| *a != me).collect(),
            Seeds::Headless => self.dns.iter().copied().filter(|a| *a != me).collect(),
            Seeds::LoadBalanced => {
                let live: Vec<usize> = (0..self.pods.len())
                    .filter(|&p| self.pods[p].proc.is_some())
                    .collect();
                if live.is_empty() {
                    Vec::new()
                } else {
                    let i = self.rng.gen_range(0..live.len());
                    vec![self.pods[live[i]].addr]
                }
            }
        };
        let mut lines = Vec::new();
        let mut self_dial = false;
        let mut unreachable = Vec::new();
        let mut slowest = 2 * self.latency();
        let (my_addr, my_inc) = (me, self.pods[pod].proc.as_ref().unwrap().node.incarnation());
        for t in targets {
            if t == me {
                self_dial = true;
                continue;
            }
            let Some(tp) = self.pod_of(t) else {
                slowest = slowest.max(DIAL_TIMEOUT);
                unreachable.push(t);
                continue;
            };
            if self.cut(pod, tp) || self.pods[tp].proc.as_ref().is_some_and(|p| p.hung) {
                // No greeting within the dial's bound.
                slowest = slowest.max(DIAL_TIMEOUT);
                unreachable.push(t);
                continue;
            }
            if self.pods[tp].proc.is_none() {
                unreachable.push(t);
                continue;
            }
            let now = self.now;
            let mut out = Vec::new();
            let Some(p) = self.pods[tp].proc.as_mut() else {
                continue;
            };
            if p.node.join_refusal(my_addr).is_some() {
                continue;
            }
            p.node.joined(now, my_addr, my_inc, &mut out);
            lines.extend(p.node.member_msgs(now));
            self.outputs(tp, out);
        }
        let when = self.now + slowest;
        self.at(
            when,
            pod,
            life,
            Ev::Input(Input::PollDone {
                self_dial,
                lines,
                unreachable,
            }),
        );
    }

    /// Hands an input to a pod's state machine now (or to its backlog).
    pub fn deliver(&mut self, pod: usize, input: Input) {
        let now = self.now;
        if self.tracing {
            match &input {
                Input::LinkUp { link, peer, dial } => self.trace.push(format!(
                    "{now:>8} pod{pod} link {link} up to {peer} dial {dial:?}"
                )),
                Input::LinkDown { link, end } => self
                    .trace
                    .push(format!("{now:>8} pod{pod} link {link} down {end:?}")),
                Input::Line { link, msg } if !matches!(msg, RingMsg::Ping | RingMsg::Pong) => self
                    .trace
                    .push(format!("{now:>8} pod{pod} <- {link} {msg:?}")),
                _ => {}
            }
        }
        let mut out = Vec::new();
        {
            let Some(p) = self.pods[pod].proc.as_mut() else {
                return;
            };
            if p.hung {
                p.backlog.push(Ev::Input(input));
                return;
            }
            p.node.handle(now, input, &mut p.dir, &mut out);
        }
        self.outputs(pod, out);
    }

    // ---- running ------------------------------------------------------------------

    fn step(&mut self) -> bool {
        let Some(Reverse((when, id, pod, life))) = self.queue.pop() else {
            return false;
        };
        let ev = self.events.remove(&id).unwrap();
        self.now = self.now.max(when);
        self.exits();
        if self.life(pod) != Some(life) {
            return true;
        }
        if self.pods[pod].proc.as_ref().is_some_and(|p| p.hung) {
            // Timers of a stopped process do not run; what arrives waits.
            match ev {
                Ev::Tick | Ev::DirectorTick => {
                    let p = self.pods[pod].proc.as_mut().unwrap();
                    if !p.backlog.iter().any(|e| matches!(e, Ev::Tick)) {
                        p.backlog.push(Ev::Tick);
                        p.backlog.push(Ev::DirectorTick);
                    }
                }
                other => self.pods[pod].proc.as_mut().unwrap().backlog.push(other),
            }
            return true;
        }
        match ev {
            Ev::Tick => {
                self.deliver(pod, Input::Tick);
                self.at(self.now + TICK, pod, life, Ev::Tick);
            }
            Ev::DirectorTick => {
                let now = self.now;
                let mut out = Vec::new();
                if let Some(p) = self.pods[pod].proc.as_mut() {
                    p.dir.tick(now);
                    let events = p.dir.take_events();
                    if !events.is_empty() {
                        p.node
                            .handle(now, Input::Local(events), &mut p.dir, &mut out);
                    }
                }
                self.outputs(pod, out);
                self.at(self.now + 1_000, pod, life, Ev::DirectorTick);
            }
            Ev::Input(input) => self.deliver(pod, input),
            Ev::DialArrives {
                from,
                from_life,
                gen,
            } => self.accept(pod, from, from_life, gen),
            Ev::Poll => self.poll(pod, life),
        }
        true
    }

    fn exits(&mut self) {
        let now = self.now;
        let due: Vec<(Tick, usize, u64)> = self
            .exit_at
            .iter()
            .copied()
            .filter(|(t, _, _)| *t <= now)
            .collect();
        self.exit_at.retain(|(t, _, _)| *t > now);
        for (_, pod, life) in due {
            if self.life(pod) == Some(life) {
                self.kill(pod);
            }
        }
    }

    /// Runs until `until` (virtual ms).
    pub fn run_until(&mut self, until: Tick) {
        while let Some(Reverse((when, ..))) = self.queue.peek() {
            if *when > until {
                break;
            }
            self.step();
        }
        self.now = self.now.max(until);
        self.exits();
    }

    pub fn run_for(&mut self, ms: Tick) {
        let until = self.now + ms;
        self.run_until(until);
    }

    // ---- observing ----------------------------------------------------------------

    /// Pods whose process runs and is not hung.
    pub fn live(&self) -> Vec<usize> {
        (0..self.pods.len()).filter(|&p| self.running(p)).collect()
    }

    /// Why the live members do not agree yet (None: they do).
    pub fn disagreement(&self) -> Option<String> {
        let live = self.live();
        let want: Vec<SocketAddr> = {
            let mut v: Vec<SocketAddr> = live.iter().map(|&p| self.pods[p].addr).collect();
            v.sort();
            v
        };
        let mut dirs: Vec<(usize, BTreeMap<u32, IpAddr>)> = Vec::new();
        let mut backends: Vec<(usize, BTreeSet<IpAddr>)> = Vec::new();
        let mut sessions: Vec<(usize, BTreeMap<String, IpAddr>)> = Vec::new();
        for &p in &live {
            let proc = self.pods[p].proc.as_ref().unwrap();
            let got = proc.node.members();
            if got != want {
                return Some(format!(
                    "pod{p} ({}) sees {:?}, live are {:?}",
                    self.pods[p].addr, got, want
                ));
            }
            let users: BTreeMap<u32, IpAddr> = proc
                .dir
                .user_records(self.now)
                .into_iter()
                .map(|r| (r.hash, r.backend))
                .collect();
            dirs.push((p, users));
            backends.push((p, proc.dir.backends().iter().map(|(_, b)| b.ip).collect()));
            let open: BTreeMap<String, IpAddr> = proc
                .dir
                .session_records()
                .into_iter()
                .map(|r| (r.id, r.backend))
                .collect();
            sessions.push((p, open));
        }
        for w in backends.windows(2) {
            if w[0].1 != w[1].1 {
                return Some(format!(
                    "backends differ: pod{} has {:?}, pod{} has {:?}",
                    w[0].0, w[0].1, w[1].0, w[1].1
                ));
            }
        }
        for w in sessions.windows(2) {
            if w[0].1 != w[1].1 {
                let (a, b) = (&w[0], &w[1]);
                let only_a: Vec<_> =
                    a.1.keys()
                        .filter(|k| !b.1.contains_key(*k))
                        .take(3)
                        .collect();
                let only_b: Vec<_> =
                    b.1.keys()
                        .filter(|k| !a.1.contains_key(*k))
                        .take(3)
                        .collect();
                return Some(format!(
                    "sessions differ: pod{} tracks {}, pod{} tracks {}; only at the first {:?}, only at the second {:?}",
                    a.0,
                    a.1.len(),
                    b.0,
                    b.1.len(),
                    only_a,
                    only_b
                ));
            }
        }
        for w in dirs.windows(2) {
            if w[0].1 != w[1].1 {
                let (a, b) = (&w[0], &w[1]);
                let diff: Vec<_> =
                    a.1.iter()
                        .filter(|(h, ip)| b.1.get(h) != Some(ip))
                        .take(3)
                        .collect();
                return Some(format!(
                    "user directories differ: pod{} has {} users, pod{} has {}; e.g. {:?}",
                    a.0,
                    a.1.len(),
                    b.0,
                    b.1.len(),
                    diff
                ));
            }
        }
        None
    }

    /// Runs until the live members agree; returns how long it took.
    pub fn converge(&mut self, bound: Tick) -> Result<Tick, String> {
        let start = self.now;
        loop {
            if self.disagreement().is_none() {
                return Ok(self.now - start);
            }
            if self.now - start >= bound {
                return Err(format!(
                    "seed {}: no agreement {} ms after t={}: {}",
                    self.seed,
                    bound,
                    start,
                    self.disagreement().unwrap_or_default()
                ));
            }
            self.run_for(100);
        }
    }

    // ---- routing state ------------------------------------------------------------

    /// A change made at `pod` by one of its clients (a login, an admin):
    /// applied to its state machine, and what it changed handed to its
    /// ring, as the service's director guard does. None when the process
    /// is not running (a hung one answers nobody).
    fn local<R>(&mut self, pod: usize, f: impl FnOnce(&mut Director, Tick) -> R) -> Option<R> {
        let now = self.now;
        let mut out = Vec::new();
        let r = {
            let p = self.pods[pod].proc.as_mut()?;
            if p.hung {
                return None;
            }
            let r = f(&mut p.dir, now);
            let events = p.dir.take_events();
            if !events.is_empty() {
                p.node
                    .handle(now, Input::Local(events), &mut p.dir, &mut out);
            }
            r
        };
        self.outputs(pod, out);
        Some(r)
    }

    /// A LOOKUP of `user` on `pod` (pins a new user); the backend it gave.
    pub fn lookup(&mut self, pod: usize, user: &str) -> Option<IpAddr> {
        self.local(pod, |d, now| {
            d.lookup(now, user, "", Some(Proto::Imap)).ok()
        })
        .flatten()
        .map(|route| route.ip)
    }

    /// An admin move of `user` to `to` on `pod`.
    pub fn move_user(&mut self, pod: usize, user: &str, to: IpAddr) {
        self.local(pod, |d, now| d.move_user(now, user, "", to).unwrap());
    }

    /// A login reports a session of `user` on `backend` to `pod`. (An id
    /// already closed is refused: it stays closed everywhere.)
    pub fn session(&mut self, pod: usize, id: &str, user: &str, backend: IpAddr) {
        self.log(|| format!("pod{pod} session-open {id}"));
        self.local(pod, |d, now| {
            d.session_open(now, id, user, "", backend, Proto::Imap)
        });
    }

    /// A login closes a session through `pod` (any director).
    pub fn session_close(&mut self, pod: usize, id: &str) {
        self.log(|| format!("pod{pod} session-close {id}"));
        self.local(pod, |d, _| d.session_close(id));
    }

    /// An admin kick of `user` through `pod`; how many kicks it made.
    pub fn admin_kick(&mut self, pod: usize, user: &str) -> usize {
        let kicks = self
            .local(pod, |d, now| d.kicks_for_user(now, user, ""))
            .unwrap_or_default();
        let n = kicks.len();
        if let Some(p) = self.pods[pod].proc.as_mut() {
            p.kicks
                .extend(kicks.into_iter().map(|k| (k.user, k.backend)));
        }
        n
    }

    /// An admin add (`add`) or remove of a backend through `pod`.
    pub fn admin_backend(&mut self, pod: usize, ip: IpAddr, add: bool) {
        self.local(pod, |d, now| {
            if add {
                d.add_admin(now, ip, 143, "", 100);
            } else {
                d.remove_admin(ip);
            }
        });
    }

    pub fn has_backend(&self, pod: usize, ip: IpAddr) -> bool {
        self.pods[pod]
            .proc
            .as_ref()
            .is_some_and(|p| p.dir.backends().by_ip(ip).is_some())
    }

    /// Sessions `pod` counts on `backend`.
    pub fn sessions_on(&self, pod: usize, backend: IpAddr) -> u32 {
        let d = &self.pods[pod].proc.as_ref().unwrap().dir;
        d.backends()
            .by_ip(backend)
            .and_then(|id| d.backends().get(id))
            .map_or(0, |b| b.sessions)
    }

    /// A backend heartbeat landing on `pod`.
    pub fn heartbeat(&mut self, pod: usize, ip: IpAddr, seq: u64) {
        let up = BackendUp {
            ip,
            port: 143,
            tag: String::new(),
            vhosts: 100,
            seq,
        };
        self.local(pod, |d, now| d.backend_up(now, &up));
    }

    /// Where `pod` routes `user` now without pinning (None: unpinned).
    pub fn pin(&mut self, pod: usize, user: &str) -> Option<IpAddr> {
        let now = self.now;
        let p = self.pods[pod].proc.as_mut()?;
        p.dir.pin_of(now, user, "").map(|(ip, _)| ip)
    }

    pub fn node(&self, pod: usize) -> &RingNode {
        &self.pods[pod].proc.as_ref().unwrap().node
    }

    pub fn kicks(&self, pod: usize) -> &[(String, IpAddr)] {
        &self.pods[pod].proc.as_ref().unwrap().kicks
    }
}
