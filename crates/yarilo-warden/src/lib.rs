//! yarilo-warden: connection and session limits, the auth-failure penalty
//! and the kick bus.
//!
//! Writers: login proxies send CONNECT/DISCONNECT (pre-auth, per IP) and
//! AUTH_FAIL/AUTH_OK; backend session processes send
//! SESSION_START/SESSION_END (post-auth, per user and user@ip). Readers:
//! login proxies ask before admitting a connection (CONNECT, CHECK). The
//! kick bus (EMIT/SUBSCRIBE) tells login proxies to end a user's sessions.
//!
//! State lives in one process ([`MemoryState`], exactly one replica) or in
//! shared Redis ([`RedisState`], any number of replicas: penalty as a key
//! with TTL, sessions as hashes plus an atomic counter reconciled by a
//! sweep, kicks over pub/sub). Redis trouble fails open and is counted.

mod client;
mod metrics;
pub mod protocol;
mod redis_state;
mod service;
mod state;

pub use client::{
    Admission, KickSubscription, WardenClient, WardenClientError, WardenClientOptions, WardenTls,
};
pub use metrics::WardenMetrics;
pub use protocol::Refusal;
pub use redis_state::RedisState;
pub use service::{run, WardenError, WardenService};
pub use state::{Admit, Kick, MemoryState, StateError, WardenState};
