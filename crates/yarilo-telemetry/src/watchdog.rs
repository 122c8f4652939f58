//! The liveness watchdog: a timer-driven self-check that trips `/healthz`
//! when the request path is wedged (a hung NFS handle, a deadlock) while
//! the accept loop and the telemetry server still answer.
//!
//! The check stats the configured local paths (the mail store base) in a
//! blocking thread and enters a process-local gate; it touches nothing
//! shared. It trips only after `failure_threshold` consecutive failures,
//! and each check is bounded by a timeout shorter than its interval.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Mutex;

use crate::Metrics;

#[derive(Clone)]
pub struct Watchdog {
    inner: Arc<Inner>,
}

struct Inner {
    paths: Vec<PathBuf>,
    interval: Duration,
    timeout: Duration,
    threshold: u32,
    consecutive_failures: AtomicU32,
    tripped: AtomicBool,
    /// Entered by every self-check; the deadlock fault holds it forever.
    gate: Arc<Mutex<()>>,
    checks_failed: Counter,
    healthy_gauge: Gauge,
}

impl Watchdog {
    pub fn new(
        cfg: &yarilo_config::LivenessWatchdog,
        paths: Vec<PathBuf>,
        metrics: &Metrics,
    ) -> Self {
        let checks_failed = Counter::default();
        let healthy_gauge = Gauge::default();
        healthy_gauge.set(1);
        metrics.register(|r| {
            r.register(
                "yarilo_telemetry_watchdog_check_failures",
                "Liveness watchdog self-checks that failed or timed out",
                checks_failed.clone(),
            );
            r.register(
                "yarilo_telemetry_watchdog_healthy",
                "1 while the liveness watchdog has not tripped",
                healthy_gauge.clone(),
            );
        });
        Watchdog {
            inner: Arc::new(Inner {
                paths,
                interval: Duration::from_secs(cfg.liveness_watchdog_interval_seconds),
                timeout: Duration::from_secs(cfg.liveness_watchdog_timeout_seconds),
                threshold: cfg.liveness_watchdog_failure_threshold,
                consecutive_failures: AtomicU32::new(0),
                tripped: AtomicBool::new(false),
                gate: Arc::new(Mutex::new(())),
                checks_failed,
                healthy_gauge,
            }),
        }
    }

    pub fn healthy(&self) -> bool {
        !self.inner.tripped.load(Ordering::Relaxed)
    }

    /// Runs one self-check and updates the state.
    pub async fn check_once(&self) -> bool {
        let inner = &self.inner;
        let ok = tokio::time::timeout(inner.timeout, self.self_check())
            .await
            .unwrap_or(false);
        if ok {
            inner.consecutive_failures.store(0, Ordering::Relaxed);
            // Recovery is possible before the kubelet acts on a trip.
            inner.tripped.store(false, Ordering::Relaxed);
            inner.healthy_gauge.set(1);
        } else {
            inner.checks_failed.inc();
            let n = inner.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                consecutive = n,
                threshold = inner.threshold,
                "liveness self-check failed"
            );
            if n >= inner.threshold && !inner.tripped.swap(true, Ordering::Relaxed) {
                tracing::error!("liveness watchdog tripped: /healthz now fails");
                inner.healthy_gauge.set(0);
            }
        }
        ok
    }

    async fn self_check(&self) -> bool {
        let _entered = self.inner.gate.lock().await;
        let paths = self.inner.paths.clone();
        tokio::task::spawn_blocking(move || paths.iter().all(|p| std::fs::metadata(p).is_ok()))
            .await
            .unwrap_or(false)
    }

    /// Checks every interval until the process ends.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let w = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(w.inner.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // The check runs in its own task so a wedged one cannot stop
                // the timer: its timeout counts as a failure.
                let w2 = w.clone();
                let _ = tokio::spawn(async move { w2.check_once().await }).await;
            }
        })
    }

    /// The process-local gate every self-check enters (the readiness
    /// freshness check enters it too, so an injected deadlock shows there
    /// first).
    pub fn gate(&self) -> Arc<Mutex<()>> {
        self.inner.gate.clone()
    }

    /// Fault injection: takes the gate and never gives it back, as a
    /// deadlocked request path would.
    pub fn inject_deadlock(&self) {
        let gate = self.inner.gate.clone();
        tokio::spawn(async move {
            let guard = gate.lock_owned().await;
            std::mem::forget(guard);
            tracing::error!("fault injection: watchdog gate deadlocked on request");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(threshold: u32) -> yarilo_config::LivenessWatchdog {
        yarilo_config::LivenessWatchdog {
            liveness_watchdog_enabled: true,
            liveness_watchdog_interval_seconds: 2,
            liveness_watchdog_timeout_seconds: 1,
            liveness_watchdog_failure_threshold: threshold,
            liveness_watchdog_fault_injection_enabled: true,
        }
    }

    #[tokio::test]
    async fn trips_only_after_threshold_consecutive_failures() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone");
        let w = Watchdog::new(&cfg(3), vec![missing.clone()], &Metrics::new());
        assert!(!w.check_once().await);
        assert!(!w.check_once().await);
        assert!(w.healthy(), "two failures are below the threshold");
        std::fs::create_dir(&missing).unwrap();
        assert!(w.check_once().await, "success resets the count");
        std::fs::remove_dir(&missing).unwrap();
        for _ in 0..2 {
            w.check_once().await;
        }
        assert!(w.healthy());
        w.check_once().await;
        assert!(!w.healthy());
    }

    #[tokio::test(start_paused = true)]
    async fn injected_deadlock_times_the_check_out() {
        let dir = tempfile::tempdir().unwrap();
        let w = Watchdog::new(&cfg(1), vec![dir.path().to_path_buf()], &Metrics::new());
        assert!(w.check_once().await);
        w.inject_deadlock();
        tokio::task::yield_now().await;
        assert!(!w.check_once().await);
        assert!(!w.healthy());
    }
}
