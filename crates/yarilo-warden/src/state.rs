//! Where warden keeps its three pieces of state (connections per IP,
//! sessions per user and user@ip, the auth-failure penalty) and its kick
//! bus. [`MemoryState`] for one replica, [`crate::RedisState`] for many.
//!
//! Invariants: registering an id that is already registered changes
//! nothing (clients replay their registrations after a reconnect);
//! releasing an unknown id changes nothing; a limit of 0 means unlimited.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;
use yarilo_config::WardenLimits;
use yarilo_locks::BoxFuture;

use crate::protocol::Refusal;

/// A kick: every session of `user` should end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kick {
    pub user: String,
    pub reason: String,
}

/// Result of an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    No(Refusal),
}

/// The state store failed; the service fails open and counts it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("warden state: {0}")]
pub struct StateError(pub String);

/// Warden's state. Object-safe so the service holds `Arc<dyn WardenState>`.
pub trait WardenState: Send + Sync + 'static {
    fn connect<'a>(
        &'a self,
        id: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>>;
    fn disconnect<'a>(&'a self, id: &'a str, ip: IpAddr) -> BoxFuture<'a, Result<(), StateError>>;
    /// Whether a new session of `user` from `ip` would be admitted.
    fn check<'a>(
        &'a self,
        user: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>>;
    fn session_start<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>>;
    fn session_end<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        ip: IpAddr,
    ) -> BoxFuture<'a, Result<(), StateError>>;
    fn sessions<'a>(&'a self, user: &'a str) -> BoxFuture<'a, Result<u64, StateError>>;
    /// One LMTP delivery to `user` starts (`lmtp-login`, per recipient):
    /// refused at `max_deliveries_per_user` concurrent ones.
    fn delivery_start<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>>;
    fn delivery_end<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>>;
    /// Counts one auth failure; returns the failures within the TTL.
    fn auth_fail<'a>(&'a self, ip: IpAddr, ttl: Duration)
        -> BoxFuture<'a, Result<u64, StateError>>;
    fn auth_ok<'a>(&'a self, ip: IpAddr) -> BoxFuture<'a, Result<(), StateError>>;
    fn penalty<'a>(&'a self, ip: IpAddr) -> BoxFuture<'a, Result<u64, StateError>>;
    /// Publishes a kick to every subscriber of every replica.
    fn emit(&self, kick: Kick);
    fn subscribe(&self) -> broadcast::Receiver<Kick>;
}

#[derive(Default)]
struct Tables {
    /// ip → connection ids
    conns: HashMap<IpAddr, HashMap<String, ()>>,
    /// user → session id → ip
    sessions: HashMap<String, HashMap<String, IpAddr>>,
    /// ip → (failures, expiry)
    penalty: HashMap<IpAddr, (u64, Instant)>,
    /// user → delivery ids
    deliveries: HashMap<String, std::collections::HashSet<String>>,
}

/// State of a single warden replica.
#[derive(Clone)]
pub struct MemoryState {
    t: Arc<Mutex<Tables>>,
    kicks: broadcast::Sender<Kick>,
}

impl Default for MemoryState {
    fn default() -> Self {
        MemoryState {
            t: Arc::default(),
            kicks: broadcast::channel(4096).0,
        }
    }
}

/// IPs whose auth failures one replica tracks at most (as auth's own
/// penalty table). An attacker spraying source addresses fills it; then
/// the expired entries go first, then the tenth that expires soonest, so
/// the cost of making room stays amortized O(1) per failure.
pub const MAX_PENALTY_IPS: usize = 100_000;

fn over(limit: u64, current: usize) -> bool {
    limit > 0 && current as u64 >= limit
}

impl MemoryState {
    pub fn new() -> Self {
        Self::default()
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // Every update is a handful of inserts/removes; a panic cannot
        // leave them inconsistent in a way that matters. Recover.
        self.t.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn penalty_now(t: &mut Tables, ip: IpAddr) -> u64 {
        match t.penalty.get(&ip) {
            Some((n, exp)) if *exp > Instant::now() => *n,
            Some(_) => {
                t.penalty.remove(&ip);
                0
            }
            None => 0,
        }
    }

    /// Shrinks a full penalty table: expired entries, then (if that was
    /// not enough) the tenth of the rest that would expire soonest.
    fn make_room(penalty: &mut HashMap<IpAddr, (u64, Instant)>) {
        let now = Instant::now();
        penalty.retain(|_, (_, exp)| *exp > now);
        if penalty.len() < MAX_PENALTY_IPS {
            return;
        }
        let mut by_expiry: Vec<(Instant, IpAddr)> =
            penalty.iter().map(|(ip, (_, e))| (*e, *ip)).collect();
        let cut = MAX_PENALTY_IPS / 10;
        by_expiry.select_nth_unstable(cut);
        for (_, ip) in &by_expiry[..cut] {
            penalty.remove(ip);
        }
        tracing::warn!(
            tracked = penalty.len(),
            "warden penalty table full (source addresses sprayed?): forgot the IPs closest to expiry"
        );
    }

    /// IPs with a live or expired-but-unswept penalty entry.
    pub fn penalty_tracked(&self) -> usize {
        self.tables().penalty.len()
    }

    fn session_admit(t: &Tables, user: &str, ip: IpAddr, limits: &WardenLimits) -> Admit {
        let Some(s) = t.sessions.get(user) else {
            return Admit::Yes;
        };
        if over(limits.max_sessions_per_user, s.len()) {
            return Admit::No(Refusal::UserSessions);
        }
        if over(
            limits.max_sessions_per_user_ip,
            s.values().filter(|i| **i == ip).count(),
        ) {
            return Admit::No(Refusal::UserIpSessions);
        }
        Admit::Yes
    }
}

fn ready<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, Result<T, StateError>> {
    Box::pin(std::future::ready(Ok(v)))
}

impl WardenState for MemoryState {
    fn connect<'a>(
        &'a self,
        id: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        let mut t = self.tables();
        if over(
            limits.max_auth_failures,
            Self::penalty_now(&mut t, ip) as usize,
        ) {
            return ready(Admit::No(Refusal::Penalty));
        }
        let c = t.conns.entry(ip).or_default();
        if c.contains_key(id) {
            return ready(Admit::Yes);
        }
        if over(limits.max_connections_per_ip, c.len()) {
            if c.is_empty() {
                t.conns.remove(&ip);
            }
            return ready(Admit::No(Refusal::IpConnections));
        }
        c.insert(id.to_string(), ());
        ready(Admit::Yes)
    }

    fn disconnect<'a>(&'a self, id: &'a str, ip: IpAddr) -> BoxFuture<'a, Result<(), StateError>> {
        let mut t = self.tables();
        if let Some(c) = t.conns.get_mut(&ip) {
            c.remove(id);
            if c.is_empty() {
                t.conns.remove(&ip);
            }
        }
        ready(())
    }

    fn check<'a>(
        &'a self,
        user: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        let mut t = self.tables();
        if over(
            limits.max_auth_failures,
            Self::penalty_now(&mut t, ip) as usize,
        ) {
            return ready(Admit::No(Refusal::Penalty));
        }
        ready(Self::session_admit(&t, user, ip, limits))
    }

    fn session_start<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        let mut t = self.tables();
        if t.sessions.get(user).is_some_and(|s| s.contains_key(id)) {
            return ready(Admit::Yes);
        }
        let admit = Self::session_admit(&t, user, ip, limits);
        if admit == Admit::Yes {
            t.sessions
                .entry(user.to_string())
                .or_default()
                .insert(id.to_string(), ip);
        }
        ready(admit)
    }

    fn session_end<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        _ip: IpAddr,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        let mut t = self.tables();
        if let Some(s) = t.sessions.get_mut(user) {
            s.remove(id);
            if s.is_empty() {
                t.sessions.remove(user);
            }
        }
        ready(())
    }

    fn sessions<'a>(&'a self, user: &'a str) -> BoxFuture<'a, Result<u64, StateError>> {
        let n = self
            .tables()
            .sessions
            .get(user)
            .map_or(0, |s| s.len() as u64);
        ready(n)
    }

    fn delivery_start<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        let mut t = self.tables();
        let d = t.deliveries.entry(user.to_string()).or_default();
        if d.contains(id) {
            return ready(Admit::Yes);
        }
        if over(limits.max_deliveries_per_user, d.len()) {
            if d.is_empty() {
                t.deliveries.remove(user);
            }
            return ready(Admit::No(Refusal::UserDeliveries));
        }
        d.insert(id.to_string());
        ready(Admit::Yes)
    }

    fn delivery_end<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        let mut t = self.tables();
        if let Some(d) = t.deliveries.get_mut(user) {
            d.remove(id);
            if d.is_empty() {
                t.deliveries.remove(user);
            }
        }
        ready(())
    }

    fn auth_fail<'a>(
        &'a self,
        ip: IpAddr,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, StateError>> {
        let mut t = self.tables();
        let n = Self::penalty_now(&mut t, ip) + 1;
        if n == 1 && t.penalty.len() >= MAX_PENALTY_IPS {
            Self::make_room(&mut t.penalty);
        }
        t.penalty.insert(ip, (n, Instant::now() + ttl));
        ready(n)
    }

    fn auth_ok<'a>(&'a self, ip: IpAddr) -> BoxFuture<'a, Result<(), StateError>> {
        self.tables().penalty.remove(&ip);
        ready(())
    }

    fn penalty<'a>(&'a self, ip: IpAddr) -> BoxFuture<'a, Result<u64, StateError>> {
        let n = Self::penalty_now(&mut self.tables(), ip);
        ready(n)
    }

    fn emit(&self, kick: Kick) {
        let _ = self.kicks.send(kick);
    }

    fn subscribe(&self) -> broadcast::Receiver<Kick> {
        self.kicks.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_penalty_table_stays_bounded_under_ip_spraying() {
        let s = MemoryState::new();
        let ttl = Duration::from_secs(60);
        let v4 = |i: u32| IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        // A repeat offender first: its entry must survive the spraying.
        for _ in 0..5 {
            s.auth_fail(v4(0), ttl).await.unwrap();
        }
        tokio::time::advance(Duration::from_secs(30)).await;
        for i in 1..=(3 * MAX_PENALTY_IPS as u32) {
            s.auth_fail(v4(i), ttl).await.unwrap();
            if i % 1000 == 0 {
                tokio::time::advance(Duration::from_millis(1)).await;
                s.auth_fail(v4(0), ttl).await.unwrap();
            }
            assert!(s.penalty_tracked() <= MAX_PENALTY_IPS);
        }
        assert!(
            s.penalty_tracked() > MAX_PENALTY_IPS / 2,
            "{}",
            s.penalty_tracked()
        );
        assert!(
            s.penalty(v4(0)).await.unwrap() > 5,
            "the active offender is still counted"
        );
        // The newest sprayed address is counted too.
        assert_eq!(s.penalty(v4(3 * MAX_PENALTY_IPS as u32)).await.unwrap(), 1);
        // Expired entries are swept first when room is needed.
        tokio::time::advance(Duration::from_secs(61)).await;
        s.auth_fail(v4(3 * MAX_PENALTY_IPS as u32 + 1), ttl)
            .await
            .unwrap();
        assert!(s.penalty_tracked() <= MAX_PENALTY_IPS);
    }

    fn limits() -> WardenLimits {
        WardenLimits {
            max_connections_per_ip: 2,
            max_sessions_per_user: 3,
            max_sessions_per_user_ip: 2,
            max_auth_failures: 2,
            penalty_ttl_s: 60,
            max_deliveries_per_user: 2,
        }
    }

    #[tokio::test]
    async fn deliveries_per_user_are_limited_apart_from_sessions() {
        let s = MemoryState::new();
        let l = limits();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for id in ["d1", "d2"] {
            assert_eq!(s.delivery_start(id, "u", &l).await.unwrap(), Admit::Yes);
        }
        assert_eq!(
            s.delivery_start("d1", "u", &l).await.unwrap(),
            Admit::Yes,
            "replay is idempotent"
        );
        assert_eq!(
            s.delivery_start("d3", "u", &l).await.unwrap(),
            Admit::No(Refusal::UserDeliveries)
        );
        assert_eq!(s.delivery_start("d3", "v", &l).await.unwrap(), Admit::Yes);
        assert_eq!(s.sessions("u").await.unwrap(), 0, "not sessions");
        assert_eq!(s.session_start("s1", "u", a, &l).await.unwrap(), Admit::Yes);
        s.delivery_end("d1", "u").await.unwrap();
        assert_eq!(s.delivery_start("d3", "u", &l).await.unwrap(), Admit::Yes);
    }

    #[tokio::test(start_paused = true)]
    async fn limits_are_enforced_and_released() {
        let s = MemoryState::new();
        let l = limits();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(s.connect("c1", a, &l).await.unwrap(), Admit::Yes);
        assert_eq!(
            s.connect("c1", a, &l).await.unwrap(),
            Admit::Yes,
            "replay is idempotent"
        );
        assert_eq!(s.connect("c2", a, &l).await.unwrap(), Admit::Yes);
        assert_eq!(
            s.connect("c3", a, &l).await.unwrap(),
            Admit::No(Refusal::IpConnections)
        );
        s.disconnect("c1", a).await.unwrap();
        assert_eq!(s.connect("c3", a, &l).await.unwrap(), Admit::Yes);

        for id in ["s1", "s2"] {
            assert_eq!(s.session_start(id, "u", a, &l).await.unwrap(), Admit::Yes);
        }
        assert_eq!(
            s.session_start("s3", "u", a, &l).await.unwrap(),
            Admit::No(Refusal::UserIpSessions)
        );
        assert_eq!(s.session_start("s3", "u", b, &l).await.unwrap(), Admit::Yes);
        assert_eq!(
            s.check("u", b, &l).await.unwrap(),
            Admit::No(Refusal::UserSessions)
        );
        assert_eq!(s.sessions("u").await.unwrap(), 3);
        s.session_end("s1", "u", a).await.unwrap();
        assert_eq!(s.sessions("u").await.unwrap(), 2);

        let ttl = Duration::from_secs(60);
        assert_eq!(s.auth_fail(b, ttl).await.unwrap(), 1);
        assert_eq!(s.auth_fail(b, ttl).await.unwrap(), 2);
        assert_eq!(
            s.connect("c9", b, &l).await.unwrap(),
            Admit::No(Refusal::Penalty)
        );
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(s.penalty(b).await.unwrap(), 0, "penalty expires");
    }
}
