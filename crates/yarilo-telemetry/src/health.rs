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
}

/// The state behind `/healthz` and `/readyz`.
#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<RwLock<Vec<ReadyCheck>>>,
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
}
