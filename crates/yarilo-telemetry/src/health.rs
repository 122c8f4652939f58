use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::Watchdog;

type CheckFn = dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync;

/// One readiness condition, e.g. "the IMAP listener is accepting" or
/// "Redis answers PING".
#[derive(Clone)]
pub struct ReadyCheck {
    pub name: String,
    check: Arc<CheckFn>,
}

impl ReadyCheck {
    pub fn new<F, Fut>(name: impl Into<String>, f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        ReadyCheck {
            name: name.into(),
            check: Arc::new(move || Box::pin(f())),
        }
    }

    /// Runs the check once (unbounded; [`Health`] bounds it).
    pub async fn run(&self) -> Result<(), String> {
        (self.check)().await
    }
}

/// One contributor to `/loadz`: a percent of its capacity in use.
type LoadFn = dyn Fn() -> u32 + Send + Sync;
/// The named load sources.
type Loads = Arc<RwLock<Vec<(String, Arc<LoadFn>)>>>;

/// The state behind `/healthz`, `/readyz`, `/startupz` and `/loadz`.
#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<RwLock<Vec<ReadyCheck>>>,
    startup: Arc<RwLock<Vec<ReadyCheck>>>,
    loads: Loads,
    watchdog: Arc<RwLock<Option<Watchdog>>>,
}

/// How long one readiness check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

impl Health {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_ready_check(&self, check: ReadyCheck) {
        self.checks
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(check);
    }

    /// A dependency `/startupz` waits for (auth reachable, Redis answers).
    pub fn add_startup_check(&self, check: ReadyCheck) {
        self.startup
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(check);
    }

    /// A load source for `/loadz` (a listener's connections over its
    /// limit, in percent).
    pub fn add_load(&self, name: impl Into<String>, f: impl Fn() -> u32 + Send + Sync + 'static) {
        self.loads
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.into(), Arc::new(f)));
    }

    /// Every load source with its percent; the component's load is the
    /// highest.
    pub fn loads(&self) -> Vec<(String, u32)> {
        self.loads
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, f)| (n.clone(), f().min(100)))
            .collect()
    }

    pub fn set_watchdog(&self, watchdog: Watchdog) {
        *self.watchdog.write().unwrap_or_else(|p| p.into_inner()) = Some(watchdog);
    }

    pub fn watchdog(&self) -> Option<Watchdog> {
        self.watchdog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Liveness: false only when the watchdog has tripped.
    pub fn live(&self) -> bool {
        self.watchdog().map(|w| w.healthy()).unwrap_or(true)
    }

    /// Readiness: the names of the failing checks with their reasons. Every
    /// check runs concurrently, each bounded by a timeout.
    pub async fn not_ready(&self) -> Vec<(String, String)> {
        let checks = self
            .checks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if checks.is_empty() {
            return vec![("startup".into(), "no component has registered yet".into())];
        }
        run_checks(&checks).await
    }

    /// Startup: the dependencies that do not answer yet, with their
    /// reasons. No dependency at all is started.
    pub async fn not_started(&self) -> Vec<(String, String)> {
        let checks = self
            .startup
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        run_checks(&checks).await
    }
}

/// Runs `checks` concurrently, each bounded by [`CHECK_TIMEOUT`]; the
/// failing ones with their reasons.
async fn run_checks(checks: &[ReadyCheck]) -> Vec<(String, String)> {
    let results = futures::future::join_all(checks.iter().map(|c| {
        let fut = (c.check)();
        async move {
            match tokio::time::timeout(CHECK_TIMEOUT, fut).await {
                Ok(Ok(())) => None,
                Ok(Err(why)) => Some((c.name.clone(), why)),
                Err(_) => Some((c.name.clone(), "check timed out".into())),
            }
        }
    }))
    .await;
    results.into_iter().flatten().collect()
}
