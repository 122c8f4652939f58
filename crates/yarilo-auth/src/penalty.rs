//! The per-client-IP auth-failure penalty (Dovecot's auth penalty): after
//! failures from an IP, the next attempt first waits 2^(failures-1)
//! seconds, capped. Behind a trait so the warden can share the counters
//! across auth replicas; [`LocalPenalty`] keeps them in this process.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shared failure counters keyed by client IP.
pub trait FailurePenalty: Send + Sync + 'static {
    /// How long a new attempt from `ip` must wait first.
    fn delay_for(&self, ip: IpAddr) -> Pin<Box<dyn Future<Output = Duration> + Send + '_>>;
    /// Counts a failed attempt.
    fn record_failure(&self, ip: IpAddr) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// Forgets `ip` after a success.
    fn reset(&self, ip: IpAddr) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// In-process counters with a sliding window.
#[derive(Debug)]
pub struct LocalPenalty {
    max: Duration,
    window: Duration,
    counts: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

/// IPs tracked at most; beyond it the oldest are dropped (bounded memory
/// under a spray of source addresses).
const MAX_TRACKED: usize = 100_000;

impl LocalPenalty {
    pub fn new(max: Duration, window: Duration) -> LocalPenalty {
        LocalPenalty {
            max,
            window,
            counts: Mutex::new(HashMap::new()),
        }
    }

    fn delay_now(&self, ip: IpAddr) -> Duration {
        if self.max.is_zero() {
            return Duration::ZERO;
        }
        let Ok(counts) = self.counts.lock() else {
            return Duration::ZERO;
        };
        match counts.get(&ip) {
            Some((n, last)) if *n > 0 && last.elapsed() < self.window => {
                let secs = 1u64 << (n - 1).min(16);
                Duration::from_secs(secs).min(self.max)
            }
            _ => Duration::ZERO,
        }
    }

    /// Failures currently counted for `ip`.
    pub fn failures(&self, ip: IpAddr) -> u32 {
        self.counts
            .lock()
            .ok()
            .and_then(|c| c.get(&ip).map(|(n, _)| *n))
            .unwrap_or(0)
    }
}

impl FailurePenalty for LocalPenalty {
    fn delay_for(&self, ip: IpAddr) -> Pin<Box<dyn Future<Output = Duration> + Send + '_>> {
        let d = self.delay_now(ip);
        Box::pin(async move { d })
    }

    fn record_failure(&self, ip: IpAddr) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        if let Ok(mut counts) = self.counts.lock() {
            if counts.len() >= MAX_TRACKED && !counts.contains_key(&ip) {
                let window = self.window;
                counts.retain(|_, (_, t)| t.elapsed() < window);
                if counts.len() >= MAX_TRACKED {
                    if let Some(oldest) =
                        counts.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k)
                    {
                        counts.remove(&oldest);
                    }
                }
            }
            let e = counts.entry(ip).or_insert((0, Instant::now()));
            if e.1.elapsed() >= self.window {
                e.0 = 0;
            }
            e.0 = e.0.saturating_add(1);
            e.1 = Instant::now();
        }
        Box::pin(async {})
    }

    fn reset(&self, ip: IpAddr) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        if let Ok(mut counts) = self.counts.lock() {
            counts.remove(&ip);
        }
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delay_doubles_up_to_the_cap_and_resets() {
        let p = LocalPenalty::new(Duration::from_secs(15), Duration::from_secs(3600));
        let ip: IpAddr = "192.0.2.9".parse().unwrap();
        assert_eq!(p.delay_for(ip).await, Duration::ZERO);
        p.record_failure(ip).await;
        assert_eq!(p.delay_for(ip).await, Duration::from_secs(1));
        p.record_failure(ip).await;
        p.record_failure(ip).await;
        assert_eq!(p.delay_for(ip).await, Duration::from_secs(4));
        for _ in 0..10 {
            p.record_failure(ip).await;
        }
        assert_eq!(p.delay_for(ip).await, Duration::from_secs(15));
        p.reset(ip).await;
        assert_eq!(p.delay_for(ip).await, Duration::ZERO);
    }
}
