//! Warden in a login process (`imap-login`, `pop3-login`,
//! `submission-login`): the per-IP connection limit, the auth-failure
//! penalty, per-user session limits and the kick bus. `docs/warden.md`
//! describes the service, `docs/login.md` when each call happens.
//!
//! Switched on by `warden_client.enabled`; off, [`LoginWarden`] admits
//! everything and never dials.
//!
//! Per client connection:
//! 1. before the greeting, `CONNECT <session id> <client ip>` (the IP
//!    after the PROXY header). A refusal (`ip_connections`, `penalty`)
//!    is answered with the protocol's temporary error and the connection
//!    closes; the greeting is never sent.
//! 2. each failed authentication (`BadCredentials`) is reported with
//!    `AUTH_FAIL`; warden's count `n` delays the answer by
//!    2 s · 2^(n-1), capped by `login.warden_penalty_max_delay_ms`. A
//!    successful one clears the count (`AUTH_OK`, in the background).
//! 3. after a successful authentication and before any backend is dialled,
//!    `SESSION_START <session id> <user> <client ip>`. A refusal
//!    (`user_sessions`, `user_ip_sessions`) is the protocol's login error;
//!    the backend is never contacted. Once the backend has answered and
//!    the pipe starts, the connection stops being a pre-auth connection
//!    (`DISCONNECT`), and the session is counted until the pipe ends
//!    (`SESSION_END`).
//!
//! Invariants: every CONNECT or SESSION_START that warden may have
//! recorded has a guard whose `Drop` sends the matching release — on a
//! normal end, an I/O error or a panic unwinding the session task (warden
//! also releases everything a client registered when the client's
//! connection to it closes); every warden call is bounded by
//! `warden_client.request_timeout_ms`; warden down follows
//! `warden_client.fail_open` and is logged and counted, never retried in
//! the client's path.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{broadcast, Notify};
use yarilo_warden::{
    Admission, KickSubscription, Refusal, WardenClient, WardenClientError, WardenClientOptions,
};

/// First step of the penalty delay (Dovecot's `AUTH_PENALTY_INIT_SECS`).
const PENALTY_INIT: Duration = Duration::from_secs(2);
/// How often the kick dispatcher refreshes the subscription gauge.
const SUBSCRIBED_REFRESH: Duration = Duration::from_secs(1);

/// Why warden did not admit a connection or a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WardenRefusal {
    /// A limit was reached (or the IP is penalised).
    Limit(Refusal),
    /// Warden could not be reached and `warden_client.fail_open` is false.
    Unavailable,
}

impl WardenRefusal {
    /// The `result` label of `yarilo_login_warden_admissions_total`.
    fn label(self) -> &'static str {
        match self {
            WardenRefusal::Limit(r) => r.as_str(),
            WardenRefusal::Unavailable => "failclosed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    protocol: &'static str,
    /// `connect` (per-IP, before the greeting) or `session` (per user).
    stage: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    protocol: &'static str,
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabel {
    protocol: &'static str,
}

/// `yarilo_login_warden_*`.
#[derive(Clone, Default)]
struct Metrics {
    admissions: Family<AdmissionLabels, Counter>,
    errors: Family<OpLabels, Counter>,
    auth_failures: Family<ProtocolLabel, Counter>,
    kicks: Family<ProtocolLabel, Counter>,
    subscribed: Gauge,
}

impl Metrics {
    fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics::default();
        registry.register(
            "yarilo_login_warden_admissions",
            "Warden admissions by stage (connect, session, delivery) and result \
             (ok, ip_connections, penalty, user_sessions, user_ip_sessions, user_deliveries, \
             failopen, failclosed)",
            m.admissions.clone(),
        );
        registry.register(
            "yarilo_login_warden_errors",
            "Warden calls without a usable answer, by operation",
            m.errors.clone(),
        );
        registry.register(
            "yarilo_login_warden_auth_failures",
            "Authentication failures reported to warden (AUTH_FAIL)",
            m.auth_failures.clone(),
        );
        registry.register(
            "yarilo_login_warden_kicks",
            "Piped sessions closed by a kick from the warden kick bus",
            m.kicks.clone(),
        );
        registry.register(
            "yarilo_login_warden_kick_subscribed",
            "1 while the kick-bus subscription is established",
            m.subscribed.clone(),
        );
        m
    }
}

/// Sessions piped right now, by user, for the kick bus.
#[derive(Default)]
struct KickTable {
    next: u64,
    by_user: HashMap<String, HashMap<u64, Arc<Notify>>>,
}

struct Enabled {
    client: WardenClient,
    protocol: &'static str,
    fail_open: bool,
    penalty_max: Duration,
    metrics: Metrics,
    table: Arc<Mutex<KickTable>>,
    /// Owns the kick subscription (and its redial loop).
    dispatcher: tokio::task::JoinHandle<()>,
}

impl Drop for Enabled {
    fn drop(&mut self) {
        self.dispatcher.abort();
    }
}

impl Enabled {
    fn table(&self) -> MutexGuard<'_, KickTable> {
        lock(&self.table)
    }

    fn admission(&self, stage: &'static str, result: &'static str) {
        self.metrics
            .admissions
            .get_or_create(&AdmissionLabels {
                protocol: self.protocol,
                stage,
                result,
            })
            .inc();
    }

    fn error(&self, op: &'static str, e: &WardenClientError) {
        self.metrics
            .errors
            .get_or_create(&OpLabels {
                protocol: self.protocol,
                op,
            })
            .inc();
        tracing::warn!(op, error = %e, "warden call failed");
    }

    /// Maps an admission answer; `Ok(())` admits (also fail-open).
    fn decide(
        &self,
        stage: &'static str,
        op: &'static str,
        answer: Result<Admission, WardenClientError>,
    ) -> Result<(), WardenRefusal> {
        match answer {
            Ok(Admission::Admitted { .. }) => {
                self.admission(stage, "ok");
                Ok(())
            }
            Ok(Admission::Refused(why)) => {
                let r = WardenRefusal::Limit(why);
                self.admission(stage, r.label());
                Err(r)
            }
            Err(e) => {
                self.error(op, &e);
                if self.fail_open {
                    self.admission(stage, "failopen");
                    Ok(())
                } else {
                    self.admission(stage, WardenRefusal::Unavailable.label());
                    Err(WardenRefusal::Unavailable)
                }
            }
        }
    }
}

fn lock(m: &Mutex<KickTable>) -> MutexGuard<'_, KickTable> {
    // A handful of inserts and removes; nothing a panic could leave
    // half-done in a way that matters.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Warden as one login process sees it. Cheap to clone.
#[derive(Clone, Default)]
pub struct LoginWarden {
    inner: Option<Arc<Enabled>>,
}

impl LoginWarden {
    /// A warden that admits everything and never dials.
    pub fn disabled() -> LoginWarden {
        LoginWarden::default()
    }

    /// From `warden_client.*` (`enabled` switches it on), `internal_tls`
    /// and `login.warden_penalty_max_delay_ms`; registers
    /// `yarilo_login_warden_*` in `registry` and subscribes to the kick
    /// bus (in the background: a warden that is down does not delay
    /// start-up). Must run inside a tokio runtime.
    pub fn from_config(
        config: &yarilo_config::Config,
        protocol: &'static str,
        registry: &mut Registry,
    ) -> Result<LoginWarden, WardenClientError> {
        if !config.warden_client.enabled {
            return Ok(LoginWarden::disabled());
        }
        let mut opts = WardenClientOptions::from_full_config(config)?;
        let fail_open = opts.fail_open;
        // The policy is applied here so that it is counted and logged
        // per protocol; the client itself only reports errors.
        opts.fail_open = false;
        let penalty_max = Duration::from_millis(config.login.warden_penalty_max_delay_ms);
        Ok(LoginWarden::new(
            WardenClient::new(opts),
            protocol,
            fail_open,
            penalty_max,
            registry,
        ))
    }

    /// An enabled warden over `client` (whose own `fail_open` should be
    /// false: `fail_open` here is the policy).
    pub fn new(
        client: WardenClient,
        protocol: &'static str,
        fail_open: bool,
        penalty_max: Duration,
        registry: &mut Registry,
    ) -> LoginWarden {
        let metrics = Metrics::register(registry);
        let table = Arc::new(Mutex::new(KickTable::default()));
        let dispatcher = tokio::spawn(dispatch_kicks(
            client.kicks(),
            table.clone(),
            metrics.subscribed.clone(),
        ));
        LoginWarden {
            inner: Some(Arc::new(Enabled {
                client,
                protocol,
                fail_open,
                penalty_max,
                metrics,
                table,
                dispatcher,
            })),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// CONNECT: may a new client connection from `ip` be served? The guard
    /// sends DISCONNECT when dropped (or [`ConnectionGuard::release`]d).
    pub async fn connect(&self, id: &str, ip: IpAddr) -> Result<ConnectionGuard, WardenRefusal> {
        let Some(w) = &self.inner else {
            return Ok(ConnectionGuard { held: None });
        };
        let answer = w.client.connect(id, ip).await;
        let penalty = match &answer {
            Ok(Admission::Admitted { penalty }) => *penalty,
            _ => 0,
        };
        // The client remembers a registration it could not confirm and
        // replays it, so anything but a refusal needs a release.
        let held = match &answer {
            Ok(Admission::Refused(_)) => None,
            _ => Some(Held {
                warden: w.clone(),
                id: id.to_string(),
                ip,
            }),
        };
        let guard = ConnectionGuard { held };
        w.decide("connect", "connect", answer)?;
        if penalty > 0 {
            tracing::info!(penalty, "client address has recent auth failures");
        }
        Ok(guard)
    }

    /// Reports a failed authentication from `ip`; returns how long to wait
    /// before answering it (zero when warden is off or unreachable).
    pub async fn auth_failed(&self, ip: IpAddr) -> Duration {
        let Some(w) = &self.inner else {
            return Duration::ZERO;
        };
        match w.client.auth_fail(ip).await {
            Ok(n) => {
                w.metrics
                    .auth_failures
                    .get_or_create(&ProtocolLabel {
                        protocol: w.protocol,
                    })
                    .inc();
                penalty_delay(n, w.penalty_max)
            }
            Err(e) => {
                w.error("auth_fail", &e);
                Duration::ZERO
            }
        }
    }

    /// Clears `ip`'s failure count after a successful authentication, in
    /// the background (the login does not wait for it).
    pub fn auth_succeeded(&self, ip: IpAddr) {
        let Some(w) = self.inner.clone() else {
            return;
        };
        spawn(async move {
            if let Err(e) = w.client.auth_ok(ip).await {
                w.error("auth_ok", &e);
            }
        });
    }

    /// SESSION_START before the backend is dialled: may `user` from `ip`
    /// open one more session? The guard sends SESSION_END when dropped and
    /// is how a kick reaches the session ([`SessionGuard::kicked`]).
    pub async fn start_session(
        &self,
        id: &str,
        user: &str,
        ip: IpAddr,
    ) -> Result<SessionGuard, WardenRefusal> {
        let Some(w) = &self.inner else {
            return Ok(SessionGuard { held: None });
        };
        let answer = w.client.session_start(id, user, ip).await;
        let held = match &answer {
            Ok(Admission::Refused(_)) => None,
            _ => {
                let kick = Arc::new(Notify::new());
                let key = {
                    let mut t = w.table();
                    t.next += 1;
                    let key = t.next;
                    t.by_user
                        .entry(user.to_string())
                        .or_default()
                        .insert(key, kick.clone());
                    key
                };
                Some(HeldSession {
                    warden: w.clone(),
                    id: id.to_string(),
                    user: user.to_string(),
                    ip,
                    key,
                    kick,
                })
            }
        };
        let guard = SessionGuard { held };
        w.decide("session", "session_start", answer)?;
        Ok(guard)
    }
}

impl LoginWarden {
    /// DELIVERY_START per LMTP recipient (`lmtp-login`): may one more
    /// delivery to `user` run now? The guard sends DELIVERY_END when
    /// dropped.
    pub async fn start_delivery(
        &self,
        id: &str,
        user: &str,
    ) -> Result<DeliveryGuard, WardenRefusal> {
        let Some(w) = &self.inner else {
            return Ok(DeliveryGuard { held: None });
        };
        let answer = w.client.delivery_start(id, user).await;
        let held = match &answer {
            Ok(Admission::Refused(_)) => None,
            _ => Some((w.clone(), id.to_string(), user.to_string())),
        };
        let guard = DeliveryGuard { held };
        w.decide("delivery", "delivery_start", answer)?;
        Ok(guard)
    }
}

/// One LMTP delivery warden counts; DELIVERY_END on drop.
#[must_use = "dropping the guard ends the delivery at once"]
pub struct DeliveryGuard {
    held: Option<(Arc<Enabled>, String, String)>,
}

impl Drop for DeliveryGuard {
    fn drop(&mut self) {
        if let Some((w, id, user)) = self.held.take() {
            spawn(async move {
                if let Err(e) = w.client.delivery_end(&id, &user).await {
                    w.error("delivery_end", &e);
                }
            });
        }
    }
}

/// 2 s · 2^(n-1) for `n` failures, at most `max` (Dovecot's auth penalty
/// curve: 2, 4, 8, 15 s with the default cap).
pub fn penalty_delay(failures: u64, max: Duration) -> Duration {
    if failures == 0 || max.is_zero() {
        return Duration::ZERO;
    }
    let shift = u32::try_from(failures - 1).unwrap_or(u32::MAX).min(16);
    PENALTY_INIT
        .checked_mul(1u32 << shift)
        .unwrap_or(max)
        .min(max)
}

fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(f: F) {
    // A guard dropped while the runtime shuts down has nobody to send
    // its release; warden releases it when our connection closes.
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(f);
    }
}

struct Held {
    warden: Arc<Enabled>,
    id: String,
    ip: IpAddr,
}

/// A client connection warden counts (CONNECT); DISCONNECT on drop.
#[must_use = "dropping the guard releases the connection at once"]
pub struct ConnectionGuard {
    held: Option<Held>,
}

impl ConnectionGuard {
    /// The connection is no longer a pre-auth one (its session is counted
    /// instead): DISCONNECT now.
    pub fn release(self) {}
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(h) = self.held.take() {
            spawn(async move {
                if let Err(e) = h.warden.client.disconnect(&h.id, h.ip).await {
                    h.warden.error("disconnect", &e);
                }
            });
        }
    }
}

struct HeldSession {
    warden: Arc<Enabled>,
    id: String,
    user: String,
    ip: IpAddr,
    key: u64,
    kick: Arc<Notify>,
}

/// A session warden counts (SESSION_START); SESSION_END on drop.
#[must_use = "dropping the guard ends the session at once"]
pub struct SessionGuard {
    held: Option<HeldSession>,
}

impl SessionGuard {
    /// Completes when a kick for this session's user arrives; never when
    /// warden is off.
    pub async fn kicked(&self) {
        match &self.held {
            Some(h) => h.kick.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Counts a session closed by a kick.
    pub(crate) fn count_kick(&self) {
        if let Some(h) = &self.held {
            h.warden
                .metrics
                .kicks
                .get_or_create(&ProtocolLabel {
                    protocol: h.warden.protocol,
                })
                .inc();
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let Some(h) = self.held.take() else {
            return;
        };
        {
            let mut t = h.warden.table();
            if let Some(sessions) = t.by_user.get_mut(&h.user) {
                sessions.remove(&h.key);
                if sessions.is_empty() {
                    t.by_user.remove(&h.user);
                }
            }
        }
        spawn(async move {
            if let Err(e) = h.warden.client.session_end(&h.id, &h.user, h.ip).await {
                h.warden.error("session_end", &e);
            }
        });
    }
}

/// Owns the kick subscription: wakes the piped sessions of each kicked
/// user and keeps `yarilo_login_warden_kick_subscribed` current.
async fn dispatch_kicks(
    subscription: KickSubscription,
    table: Arc<Mutex<KickTable>>,
    subscribed: Gauge,
) {
    let mut rx = subscription.receiver();
    let mut tick = tokio::time::interval(SUBSCRIBED_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                subscribed.set(i64::from(subscription.is_subscribed()));
            }
            got = rx.recv() => match got {
                Ok(kick) => {
                    subscribed.set(1);
                    let woken: Vec<Arc<Notify>> = lock(&table)
                        .by_user
                        .get(&kick.user)
                        .map(|s| s.values().cloned().collect())
                        .unwrap_or_default();
                    tracing::info!(
                        user = %kick.user,
                        reason = %kick.reason,
                        sessions = woken.len(),
                        "kick received"
                    );
                    for n in woken {
                        n.notify_one();
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(lost = n, "kick dispatcher fell behind; kicks lost");
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A warden service on loopback with `limits`, and a login-side warden
    /// (fail-closed, no delay cap) talking to it.
    async fn pair(limits: yarilo_config::WardenLimits) -> (LoginWarden, WardenClient) {
        let cfg = yarilo_config::WardenService {
            listen: "127.0.0.1:0".into(),
            limits,
            ..Default::default()
        };
        let svc = yarilo_warden::WardenService::bind(&cfg, None)
            .await
            .unwrap();
        let addr = svc.local_addr().unwrap().to_string();
        tokio::spawn(svc.serve(std::future::pending()));
        let opts = WardenClientOptions {
            endpoints: vec![addr],
            tls: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            fail_open: false,
        };
        let login = LoginWarden::new(
            WardenClient::new(opts.clone()),
            "imap",
            false,
            Duration::from_millis(5),
            &mut Registry::default(),
        );
        (login, WardenClient::new(opts))
    }

    async fn eventually(mut f: impl FnMut() -> bool) {
        for _ in 0..200 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition never held");
    }

    #[tokio::test]
    async fn connection_guards_hold_and_release_the_per_ip_slot() {
        let (w, _) = pair(yarilo_config::WardenLimits {
            max_connections_per_ip: 1,
            ..Default::default()
        })
        .await;
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let first = w.connect("c1", ip).await.unwrap();
        assert_eq!(
            w.connect("c2", ip).await.err(),
            Some(WardenRefusal::Limit(Refusal::IpConnections))
        );
        first.release();
        let mut again = None;
        for _ in 0..200 {
            if let Ok(g) = w.connect("c3", ip).await {
                again = Some(g);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(again.is_some(), "the released slot is admitted again");
    }

    #[tokio::test]
    async fn session_guards_count_per_user_and_a_kick_wakes_only_that_user() {
        let (w, emitter) = pair(yarilo_config::WardenLimits {
            max_sessions_per_user: 1,
            ..Default::default()
        })
        .await;
        let ip: IpAddr = "192.0.2.2".parse().unwrap();
        let alice = w.start_session("s1", "alice", ip).await.unwrap();
        let bob = w.start_session("s2", "bob", ip).await.unwrap();
        assert_eq!(
            w.start_session("s3", "alice", ip).await.err(),
            Some(WardenRefusal::Limit(Refusal::UserSessions))
        );
        let inner = w.inner.clone().unwrap();
        eventually(|| inner.metrics.subscribed.get() == 1).await;
        emitter.emit("alice", "test").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), alice.kicked())
            .await
            .unwrap();
        let bob_kicked = tokio::time::timeout(Duration::from_millis(100), bob.kicked()).await;
        assert!(bob_kicked.is_err(), "bob was not kicked");
        drop(alice);
        assert!(!inner.table().by_user.contains_key("alice"));
        let mut admitted = false;
        for _ in 0..200 {
            if w.start_session("s4", "alice", ip).await.is_ok() {
                admitted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(admitted, "SESSION_END released alice's slot");
    }

    #[tokio::test]
    async fn an_unreachable_warden_follows_the_fail_open_policy_within_the_timeout() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = dead.local_addr().unwrap().to_string();
        drop(dead);
        let opts = || WardenClientOptions {
            endpoints: vec![addr.clone()],
            tls: None,
            connect_timeout: Duration::from_millis(200),
            request_timeout: Duration::from_millis(300),
            fail_open: false,
        };
        let ip: IpAddr = "192.0.2.3".parse().unwrap();
        for fail_open in [true, false] {
            let w = LoginWarden::new(
                WardenClient::new(opts()),
                "pop3",
                fail_open,
                Duration::from_secs(1),
                &mut Registry::default(),
            );
            let started = std::time::Instant::now();
            let c = w.connect("c", ip).await;
            let s = w.start_session("s", "u", ip).await;
            assert_eq!(c.is_ok(), fail_open);
            assert_eq!(s.is_ok(), fail_open);
            if !fail_open {
                assert_eq!(c.err(), Some(WardenRefusal::Unavailable));
            }
            assert_eq!(w.auth_failed(ip).await, Duration::ZERO);
            assert!(started.elapsed() < Duration::from_secs(2));
        }
    }

    #[test]
    fn penalty_delay_doubles_up_to_the_cap() {
        let max = Duration::from_secs(15);
        let secs: Vec<u64> = (0..7).map(|n| penalty_delay(n, max).as_secs()).collect();
        assert_eq!(secs, [0, 2, 4, 8, 15, 15, 15]);
        assert_eq!(penalty_delay(u64::MAX, max), max);
        assert_eq!(penalty_delay(3, Duration::ZERO), Duration::ZERO);
        assert_eq!(
            penalty_delay(1, Duration::from_millis(40)),
            Duration::from_millis(40)
        );
    }
}
