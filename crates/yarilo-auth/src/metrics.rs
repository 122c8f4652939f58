//! `yarilo_auth_*` metrics.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Counters and histograms of one authenticator (clones share values).
#[derive(Debug, Clone)]
pub struct AuthMetrics {
    attempts: Family<Labels, Counter>,
    verifies: Family<Labels, Counter>,
    hash_seconds: Histogram,
}

impl Default for AuthMetrics {
    fn default() -> Self {
        AuthMetrics {
            attempts: Family::default(),
            verifies: Family::default(),
            hash_seconds: Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
        }
    }
}

impl AuthMetrics {
    /// Registers under the `yarilo_auth` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("yarilo_auth");
        sub.register(
            "attempts",
            "Authentication exchanges by service, mechanism and result",
            self.attempts.clone(),
        );
        sub.register(
            "token_verifications",
            "VERIFY requests by result",
            self.verifies.clone(),
        );
        sub.register(
            "hash_duration_seconds",
            "Time slow password hashes took on the blocking pool, queueing included",
            self.hash_seconds.clone(),
        );
    }

    pub(crate) fn count_attempt(&self, service: &str, mechanism: &str, result: &str) {
        self.attempts
            .get_or_create(&vec![
                ("service".to_string(), service.to_string()),
                ("mechanism".to_string(), mechanism.to_string()),
                ("result".to_string(), result.to_string()),
            ])
            .inc();
    }

    pub(crate) fn count_verify(&self, result: &str) {
        self.verifies
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .inc();
    }

    pub(crate) fn observe_hash(&self, d: Duration) {
        self.hash_seconds.observe(d.as_secs_f64());
    }

    /// Attempts counted with this result (for tests and benchmarks).
    pub fn attempts_with_result(&self, service: &str, mechanism: &str, result: &str) -> u64 {
        self.attempts
            .get_or_create(&vec![
                ("service".to_string(), service.to_string()),
                ("mechanism".to_string(), mechanism.to_string()),
                ("result".to_string(), result.to_string()),
            ])
            .get()
    }
}
