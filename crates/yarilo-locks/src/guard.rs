use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{Acquire, LockError, Locker};

/// How [`lock`] waits and how long the lease lasts.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// Lease length; renewed every third of it while the guard lives.
    pub ttl: Duration,
    /// Give up after waiting this long for a busy resource.
    pub wait: Duration,
    /// Who holds the lock, for diagnostics (`BUSY <owner>`).
    pub owner: String,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(30),
            owner: default_owner(),
        }
    }
}

/// `<host name>:<pid>`: unique across the pods of a deployment (where
/// every container's main process may well be pid 1).
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    format!("{host}:{}", std::process::id())
}

/// A held lock. Renewed in the background; released when dropped (or with
/// [`LockGuard::release`] to learn whether it was still ours).
pub struct LockGuard {
    locker: Arc<dyn Locker>,
    lock_id: String,
    resource: String,
    renewer: Option<JoinHandle<()>>,
    released: bool,
}

impl LockGuard {
    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }

    /// Releases now. `Ok(false)`: the lease had expired before (a writer
    /// that held it that long must treat its work as unprotected).
    pub async fn release(mut self) -> Result<bool, LockError> {
        self.released = true;
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        self.locker.release(&self.lock_id).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        if self.released {
            return;
        }
        let locker = self.locker.clone();
        let lock_id = std::mem::take(&mut self.lock_id);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            PENDING_RELEASES.fetch_add(1, Ordering::SeqCst);
            handle.spawn(async move {
                if let Err(e) = locker.release(&lock_id).await {
                    tracing::warn!(%lock_id, error = %e, "lock release failed; it will expire by TTL");
                }
                PENDING_RELEASES.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }
}

/// Releases started by dropped guards that have not reached the lock
/// service yet.
static PENDING_RELEASES: AtomicUsize = AtomicUsize::new(0);

/// Waits (up to `limit`) until every release started by a dropped guard
/// has been sent. A process calls it before it exits: otherwise a lock
/// released just before exit stays held until its TTL, stalling the other
/// writers of that mailbox for the whole lease.
pub async fn flush_releases(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while PENDING_RELEASES.load(Ordering::SeqCst) > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// Takes `resource`, retrying while it is busy (or the lock service is
/// unreachable) until `opts.wait` has passed. The returned guard renews
/// the lease until dropped.
pub async fn lock(
    locker: Arc<dyn Locker>,
    resource: &str,
    opts: &LockOptions,
) -> Result<LockGuard, LockError> {
    let started = Instant::now();
    let deadline = started + opts.wait;
    let mut backoff = Duration::from_micros(200);
    loop {
        let attempt = match locker.try_acquire(resource, &opts.owner, opts.ttl).await {
            Ok(a) => a,
            // The service may be failing over (a replica restarting, Redis
            // blipping): nothing is held, so trying again until the
            // deadline is safe. A grant whose answer was lost shows up as
            // BUSY by our owner until its TTL runs out.
            Err(LockError::Unavailable(reason)) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(LockError::Unavailable(reason));
                }
                tracing::debug!(%resource, %reason, "lock service unavailable; retrying");
                tokio::time::sleep(Duration::from_millis(100).min(deadline - now)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        match attempt {
            Acquire::Acquired { lock_id } => {
                // The wait for a writer's lock is what the `block` profile
                // is for (sampled only while its rate is set).
                yarilo_telemetry::profiling::record_block(started.elapsed());
                let renewer = spawn_renewer(locker.clone(), lock_id.clone(), opts.ttl);
                return Ok(LockGuard {
                    locker,
                    lock_id,
                    resource: resource.to_string(),
                    renewer: Some(renewer),
                    released: false,
                });
            }
            Acquire::Busy { owner } => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(LockError::Timeout {
                        resource: resource.to_string(),
                        owner,
                    });
                }
                // Jittered exponential backoff, capped, so contending
                // writers do not retry in lock-step.
                let jitter = rand::random::<u64>() % (backoff.as_micros() as u64 + 1);
                let sleep = (backoff + Duration::from_micros(jitter)).min(deadline - now);
                tokio::time::sleep(sleep).await;
                // Capped well below the waiting-place TTL of the backends,
                // so a waiter keeps its place in line while it retries.
                backoff = (backoff * 2).min(Duration::from_millis(20));
            }
        }
    }
}

fn spawn_renewer(locker: Arc<dyn Locker>, lock_id: String, ttl: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let period = ttl / 3;
        loop {
            tokio::time::sleep(period).await;
            match locker.renew(&lock_id, ttl).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::error!(%lock_id, "lock lease expired while held");
                    return;
                }
                Err(e) => tracing::warn!(%lock_id, error = %e, "lock renew failed; retrying"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryLocker;

    #[tokio::test(start_paused = true)]
    async fn guard_renews_and_releases_on_drop() {
        let mem = MemoryLocker::new();
        let locker: Arc<dyn Locker> = Arc::new(mem.clone());
        let opts = LockOptions {
            ttl: Duration::from_secs(3),
            wait: Duration::from_millis(100),
            owner: "t".into(),
        };
        let guard = lock(locker.clone(), "mbox:u:INBOX", &opts).await.unwrap();
        // Far past the TTL: still held thanks to renewal.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let err = lock(locker.clone(), "mbox:u:INBOX", &opts).await.err();
        assert!(matches!(err, Some(LockError::Timeout { .. })));
        drop(guard);
        tokio::task::yield_now().await;
        assert!(lock(locker, "mbox:u:INBOX", &opts).await.is_ok());
    }
}
