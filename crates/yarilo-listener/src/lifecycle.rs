use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Shutdown signal and session tracking shared by every listener of a
/// process: stop accepting when `token` fires, spawn sessions on
/// `sessions` so shutdown can wait for them.
#[derive(Clone, Default)]
pub struct Lifecycle {
    pub token: CancellationToken,
    pub sessions: TaskTracker,
}

impl Lifecycle {
    pub fn new() -> Self {
        Self::default()
    }

    /// Resolves when shutdown starts.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let token = self.token.clone();
        async move { token.cancelled().await }
    }

    /// Stops accepting and waits up to `grace` for running sessions.
    /// Returns whether they all ended in time.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.token.cancel();
        self.sessions.close();
        let done = tokio::time::timeout(grace, self.sessions.wait())
            .await
            .is_ok();
        if done {
            tracing::info!("all sessions ended");
        } else {
            tracing::warn!(
                remaining = self.sessions.len(),
                grace_seconds = grace.as_secs(),
                "grace period over; closing remaining sessions"
            );
        }
        done
    }
}
