//! What an operator or a kubelet looks at: `/metrics` (Prometheus text,
//! OpenMetrics flavour), `/healthz` (liveness, gated on the watchdog),
//! `/readyz` (readiness, per component), and the log set-up.
//!
//! Invariants:
//! - `/healthz` answers 200 unless the liveness watchdog is enabled and has
//!   seen `failure_threshold` consecutive failed self-checks; nothing shared
//!   (Redis, a database) is ever part of it, so a shared outage restarts
//!   nothing.
//! - `/readyz` answers 200 only when every registered readiness check
//!   passes within its timeout; in mail-serving components one of them is
//!   the request-path freshness check ([`Freshness`]).
//! - `/startupz` answers 200 only when every registered dependency check
//!   passes (dependencies reachable before traffic); `/loadz` is the
//!   fullest listener's connections over its limit, in percent.

mod freshness;
mod health;
mod logging;
mod metrics;
pub mod profiling;
mod server;
mod watchdog;

pub use freshness::Freshness;
pub use health::{Health, ReadyCheck};
pub use logging::init_logging;
pub use metrics::Metrics;
pub use server::{serve, TelemetryServer};
pub use watchdog::Watchdog;

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}
