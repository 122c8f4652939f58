//! Coordination of writers across sessions and processes.
//!
//! Storage code serializes every write through a [`Locker`]: exclusive
//! locks with a TTL, so a crashed holder's lock expires by itself. Callers
//! take locks in the order `idx:<user>` → `mbox:<user>:<folder>` →
//! `deliver:<user>:<folder>` and never the other way round; that order is
//! what keeps two writers from deadlocking.
//!
//! [`lock`] is the one way to take a lock: it retries a busy resource until
//! a deadline, renews the lease in the background while the guard lives,
//! and releases it when the guard is dropped.
//!
//! [`EventBus`] carries change notifications (new mail, flag changes)
//! between sessions so IDLE wakes up without polling.
//!
//! Implementations of [`Locker`]: [`MemoryLocker`] (in-process: `single`,
//! and the state of the embedded locks service), [`RedisLocker`] (the state
//! of the remote locks service) and [`LocksClient`] (what session processes
//! use: the locks service over its unix socket or over TCP + mTLS). The
//! wire protocol is in [`protocol`], the service in [`service`].

mod client;
mod events;
mod guard;
mod memory;
pub mod protocol;
pub mod redis_conn;
mod redis_locker;
pub mod redis_pubsub;
pub mod service;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use events::{Event, EventBus, MemoryEventBus};
pub use guard::{default_owner, flush_releases, lock, LockGuard, LockOptions};
pub use memory::MemoryLocker;

pub use client::{lock_options, ClientEventBus, ClientOptions, ClientTls, Endpoint, LocksClient};
pub use redis_conn::{RedisCallError, RedisConn};
pub use redis_locker::{RedisLocker, KEY_PREFIX};
pub use redis_pubsub::{ChannelMessage, RedisChannel, RedisEventBus};
pub use service::{run, LocksService, Readiness, ServiceError, ServiceMetrics};

/// A boxed future, so that [`Locker`] can be used as `Arc<dyn Locker>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one acquisition attempt gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The lock is ours; `lock_id` releases and renews it.
    Acquired { lock_id: String },
    /// Someone else holds it.
    Busy { owner: String },
}

/// Why a lock operation failed. None of these leave a lock held by us.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LockError {
    /// The resource stayed busy until the caller's deadline.
    #[error("timed out waiting for lock {resource} (held by {owner})")]
    Timeout { resource: String, owner: String },
    /// The lock service or its state store could not be reached; the write
    /// must not go ahead.
    #[error("lock service unavailable: {0}")]
    Unavailable(String),
    /// The lock service answered something we do not understand (a bug or
    /// a version mismatch).
    #[error("lock protocol error: {0}")]
    Protocol(String),
}

/// An exclusive, TTL-bounded lock service. Implementations: [`MemoryLocker`]
/// (one process), and the locks service client (embedded socket or remote,
/// Redis-backed).
pub trait Locker: Send + Sync + 'static {
    /// One attempt to take `resource` for `owner` for `ttl`.
    fn try_acquire<'a>(
        &'a self,
        resource: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Acquire, LockError>>;

    /// Releases a lock we hold. `Ok(false)`: it had already expired.
    fn release<'a>(&'a self, lock_id: &'a str) -> BoxFuture<'a, Result<bool, LockError>>;

    /// Extends a lock we hold. `Ok(false)`: it had expired and is lost.
    fn renew<'a>(
        &'a self,
        lock_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>>;
}
