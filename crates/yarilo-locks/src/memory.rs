use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::{Acquire, BoxFuture, LockError, Locker};

/// How long the waiting place outlives the waiter's last attempt (longer
/// than the longest retry interval of `lock()`).
const WAIT_SLOT: Duration = Duration::from_millis(500);

/// In-process lock table: the state behind `single` and behind the locks
/// service in embedded mode. Same shape as the Redis backend: one entry per
/// resource holding `<owner>|<acquired_at>` and a deadline, and the same
/// one-place waiting line that keeps a tight release/re-acquire loop from
/// starving a waiter.
#[derive(Clone, Default)]
pub struct MemoryLocker {
    inner: Arc<Mutex<Table>>,
}

#[derive(Default)]
struct Table {
    by_resource: HashMap<String, Entry>,
    /// The one-place waiting line per resource: the first owner refused
    /// while it was held, until it gets the lock or stops retrying.
    waiting: HashMap<String, (String, Instant)>,
    /// lock_id → resource
    by_id: HashMap<String, String>,
    next_id: u64,
}

struct Entry {
    lock_id: String,
    owner: String,
    /// Unix milliseconds, kept for `<owner>|<acquired_at>` diagnostics.
    acquired_at_ms: u128,
    expires: Instant,
}

impl MemoryLocker {
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding this mutex cannot leave the table half
        // updated (every update is a single insert/remove), so recover.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops expired entries. The service runs it on a timer; lookups also
    /// treat an expired entry as absent, so correctness does not depend on it.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut t = self.table();
        let expired: Vec<String> = t
            .by_resource
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(r, _)| r.clone())
            .collect();
        for r in &expired {
            if let Some(e) = t.by_resource.remove(r) {
                t.by_id.remove(&e.lock_id);
            }
        }
        t.waiting.retain(|_, (_, until)| *until > now);
        expired.len()
    }

    /// Number of locks currently held (expired ones not counted).
    pub fn held(&self) -> usize {
        let now = Instant::now();
        self.table()
            .by_resource
            .values()
            .filter(|e| e.expires > now)
            .count()
    }

    /// `<owner>|<acquired_at>` of the current holder of `resource`.
    pub fn holder(&self, resource: &str) -> Option<String> {
        let now = Instant::now();
        self.table()
            .by_resource
            .get(resource)
            .filter(|e| e.expires > now)
            .map(|e| format!("{}|{}", e.owner, e.acquired_at_ms))
    }

    pub fn acquire_now(&self, resource: &str, owner: &str, ttl: Duration) -> Acquire {
        let now = Instant::now();
        let mut t = self.table();
        let held_by = t
            .by_resource
            .get(resource)
            .filter(|e| e.expires > now)
            .map(|e| e.owner.clone());
        let other_waiter = t
            .waiting
            .get(resource)
            .filter(|(w, until)| *until > now && w != owner)
            .map(|(w, _)| w.clone());
        if let Some(waiter) = other_waiter {
            return Acquire::Busy {
                owner: held_by.unwrap_or(waiter),
            };
        }
        if let Some(holder) = held_by {
            t.waiting
                .insert(resource.to_string(), (owner.to_string(), now + WAIT_SLOT));
            return Acquire::Busy { owner: holder };
        }
        t.waiting.remove(resource);
        if let Some(e) = t.by_resource.get(resource) {
            let old = e.lock_id.clone();
            t.by_id.remove(&old);
        }
        t.next_id += 1;
        let lock_id = format!("m{}-{:016x}", t.next_id, rand::random::<u64>());
        let acquired_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        t.by_id.insert(lock_id.clone(), resource.to_string());
        t.by_resource.insert(
            resource.to_string(),
            Entry {
                lock_id: lock_id.clone(),
                owner: owner.to_string(),
                acquired_at_ms,
                expires: now + ttl,
            },
        );
        Acquire::Acquired { lock_id }
    }

    pub fn release_now(&self, lock_id: &str) -> bool {
        let now = Instant::now();
        let mut t = self.table();
        let Some(resource) = t.by_id.remove(lock_id) else {
            return false;
        };
        match t.by_resource.remove(&resource) {
            Some(e) => e.expires > now,
            None => false,
        }
    }

    pub fn renew_now(&self, lock_id: &str, ttl: Duration) -> bool {
        let now = Instant::now();
        let mut t = self.table();
        let Some(resource) = t.by_id.get(lock_id).cloned() else {
            return false;
        };
        match t.by_resource.get_mut(&resource) {
            Some(e) if e.lock_id == lock_id && e.expires > now => {
                e.expires = now + ttl;
                true
            }
            _ => false,
        }
    }
}

impl Locker for MemoryLocker {
    fn try_acquire<'a>(
        &'a self,
        resource: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        Box::pin(async move { Ok(self.acquire_now(resource, owner, ttl)) })
    }

    fn release<'a>(&'a self, lock_id: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move { Ok(self.release_now(lock_id)) })
    }

    fn renew<'a>(
        &'a self,
        lock_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move { Ok(self.renew_now(lock_id, ttl)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn exclusive_until_released_or_expired() {
        let l = MemoryLocker::new();
        let ttl = Duration::from_secs(30);
        let Acquire::Acquired { lock_id } = l.acquire_now("mbox:u:INBOX", "a", ttl) else {
            panic!("first acquire must succeed");
        };
        assert_eq!(
            l.acquire_now("mbox:u:INBOX", "b", ttl),
            Acquire::Busy { owner: "a".into() }
        );
        assert!(l.release_now(&lock_id));
        assert!(!l.release_now(&lock_id));
        let Acquire::Acquired { lock_id } = l.acquire_now("mbox:u:INBOX", "b", ttl) else {
            panic!("free after release");
        };
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(
            !l.renew_now(&lock_id, ttl),
            "expired lock cannot be renewed"
        );
        assert!(matches!(
            l.acquire_now("mbox:u:INBOX", "c", ttl),
            Acquire::Acquired { .. }
        ));
        assert_eq!(l.sweep(), 0);
        tokio::time::advance(Duration::from_secs(31)).await;
        // (c's lease has expired too; the waiting line is empty again.)
        assert_eq!(l.sweep(), 1);
        assert_eq!(l.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_not_starved_by_a_holder_that_re_acquires_at_once() {
        let l = MemoryLocker::new();
        let ttl = Duration::from_secs(30);
        let Acquire::Acquired { lock_id } = l.acquire_now("r", "a", ttl) else {
            panic!()
        };
        // b is refused and takes the waiting place.
        assert!(matches!(l.acquire_now("r", "b", ttl), Acquire::Busy { .. }));
        assert!(l.release_now(&lock_id));
        // a comes straight back: b is next in line, so a waits.
        assert!(matches!(l.acquire_now("r", "a", ttl), Acquire::Busy { .. }));
        assert!(matches!(
            l.acquire_now("r", "b", ttl),
            Acquire::Acquired { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_stops_retrying_loses_its_place() {
        let l = MemoryLocker::new();
        let ttl = Duration::from_secs(30);
        let Acquire::Acquired { lock_id } = l.acquire_now("r", "a", ttl) else {
            panic!()
        };
        assert!(matches!(l.acquire_now("r", "b", ttl), Acquire::Busy { .. }));
        assert!(l.release_now(&lock_id));
        tokio::time::advance(WAIT_SLOT + Duration::from_millis(1)).await;
        assert!(matches!(
            l.acquire_now("r", "a", ttl),
            Acquire::Acquired { .. }
        ));
    }
}
