//! The readiness freshness check: a timer-driven request-path self-check
//! whose last success `/readyz` looks at (deployment seed, "the pod's
//! per-protocol freshness file is fresh").
//!
//! The listener's accept loop can keep answering while every session is
//! stuck (a hung NFS handle, a saturated blocking pool, a deadlock on a
//! process-local lock). The self-check goes the way a session goes: it
//! enters the process-local gate the liveness watchdog uses, then stats
//! the mail store base in a blocking thread, bounded by the interval. A
//! success refreshes the timestamp (and, when configured, a file an exec
//! probe or a sidecar can read); readiness fails once the timestamp is
//! older than `freshness_max_age_seconds`.
//!
//! Readiness never restarts anything: a stale check takes the container
//! out of rotation (and the pod out of the director's ring, through the
//! backend-reg sidecar), and it returns by itself once a check succeeds.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

use crate::{Metrics, ReadyCheck};

/// The freshness state of one process.
#[derive(Clone)]
pub struct Freshness {
    inner: Arc<Inner>,
}

struct Inner {
    paths: Vec<PathBuf>,
    file: Option<PathBuf>,
    interval: Duration,
    max_age: Duration,
    gate: Arc<tokio::sync::Mutex<()>>,
    /// Last successful self-check; `None` until the first.
    last_ok: Mutex<Option<Instant>>,
    failures: Counter,
    age: Gauge,
}

impl Freshness {
    /// From `telemetry.readiness`; `paths` are stat-checked (the mail store
    /// base), `gate` is the watchdog's when there is one.
    pub fn new(
        cfg: &yarilo_config::Readiness,
        paths: Vec<PathBuf>,
        gate: Option<Arc<tokio::sync::Mutex<()>>>,
        metrics: &Metrics,
    ) -> Freshness {
        let failures = Counter::default();
        let age = Gauge::default();
        metrics.register(|r| {
            r.register(
                "yarilo_telemetry_freshness_failures",
                "Request-path self-checks (readiness freshness) that failed or timed out",
                failures.clone(),
            );
            r.register(
                "yarilo_telemetry_freshness_age_seconds",
                "Seconds since the last successful request-path self-check",
                age.clone(),
            );
        });
        Freshness {
            inner: Arc::new(Inner {
                paths,
                file: (!cfg.freshness_file.is_empty()).then(|| PathBuf::from(&cfg.freshness_file)),
                interval: Duration::from_secs(cfg.freshness_interval_seconds.max(1)),
                max_age: Duration::from_secs(cfg.freshness_max_age_seconds.max(2)),
                gate: gate.unwrap_or_default(),
                last_ok: Mutex::new(None),
                failures,
                age,
            }),
        }
    }

    fn last_ok(&self) -> Option<Instant> {
        *self.inner.last_ok.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Age of the last success (`None`: none yet).
    pub fn age(&self) -> Option<Duration> {
        self.last_ok().map(|t| t.elapsed())
    }

    /// Runs one self-check, bounded by the interval; true on success.
    pub async fn check_once(&self) -> bool {
        let inner = &self.inner;
        let ok = tokio::time::timeout(inner.interval, self.self_check())
            .await
            .unwrap_or(false);
        if ok {
            *inner.last_ok.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        } else {
            inner.failures.inc();
        }
        inner.age.set(self.age().map_or(-1, |a| a.as_secs() as i64));
        ok
    }

    async fn self_check(&self) -> bool {
        let _entered = self.inner.gate.lock().await;
        let paths = self.inner.paths.clone();
        let file = self.inner.file.clone();
        tokio::task::spawn_blocking(move || {
            if !paths.iter().all(|p| std::fs::metadata(p).is_ok()) {
                return false;
            }
            if let Some(file) = file {
                if let Err(e) = write_stamp(&file) {
                    tracing::warn!(file = %file.display(), error = %e, "cannot write the freshness file");
                }
            }
            true
        })
        .await
        .unwrap_or(false)
    }

    /// Checks every interval until the process ends. Each check runs in a
    /// task of its own, so a wedged one cannot stop the timer.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let f = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(f.inner.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut failing = false;
            loop {
                tick.tick().await;
                let f2 = f.clone();
                let ok = tokio::spawn(async move { f2.check_once().await })
                    .await
                    .unwrap_or(false);
                if ok == failing {
                    failing = !ok;
                    if failing {
                        tracing::warn!("request-path self-check failed; readiness will lapse");
                    } else {
                        tracing::info!("request-path self-check succeeds again");
                    }
                }
            }
        })
    }

    /// The `fresh` readiness check.
    pub fn ready_check(&self) -> ReadyCheck {
        let f = self.clone();
        ReadyCheck::new("fresh", move || {
            let age = f.age();
            let max = f.inner.max_age;
            async move {
                match age {
                    Some(a) if a <= max => Ok(()),
                    Some(a) => Err(format!(
                        "last request-path self-check succeeded {}s ago (max {}s)",
                        a.as_secs(),
                        max.as_secs()
                    )),
                    None => Err("no request-path self-check has succeeded yet".into()),
                }
            }
        })
    }
}

/// Writes the Unix time to `file` through a temporary and a rename, so a
/// reader never sees a half-written stamp.
fn write_stamp(file: &std::path::Path) -> std::io::Result<()> {
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{now}\n"))?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(file: &str) -> yarilo_config::Readiness {
        yarilo_config::Readiness {
            freshness_interval_seconds: 1,
            freshness_max_age_seconds: 3,
            freshness_file: file.to_string(),
        }
    }

    #[tokio::test]
    async fn a_missing_store_base_stops_the_refreshes_and_the_file_carries_the_time() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("mail");
        std::fs::create_dir(&base).unwrap();
        let file = dir.path().join("imap.fresh");
        let f = Freshness::new(
            &cfg(file.to_str().unwrap()),
            vec![base.clone()],
            None,
            &Metrics::new(),
        );
        let check = f.ready_check();
        assert!(check.run().await.is_err(), "not fresh before any check");
        assert!(f.check_once().await);
        assert!(check.run().await.is_ok());
        let stamp: u64 = std::fs::read_to_string(&file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(stamp > 1_600_000_000, "{stamp}");
        std::fs::remove_dir(&base).unwrap();
        assert!(
            !f.check_once().await,
            "a missing store base fails the check"
        );
    }

    #[tokio::test]
    async fn a_held_gate_times_the_check_out() {
        let dir = tempfile::tempdir().unwrap();
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        let f = Freshness::new(
            &cfg(""),
            vec![dir.path().to_path_buf()],
            Some(gate.clone()),
            &Metrics::new(),
        );
        assert!(f.check_once().await);
        let _held = gate.lock().await;
        assert!(!f.check_once().await, "a wedged gate times the check out");
    }
}
