//! `yarilo_quota_status_*` metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// Requests answered and connections closed.
#[derive(Clone)]
pub struct QuotaStatusMetrics {
    /// `result`: `ok`, `nouser`, `overquota`, `toolarge`, `dunno`,
    /// `tempfail`.
    pub requests: Family<ResultLabel, Counter>,
    /// `result`: `closed`, `timeout`, `line_too_long`,
    /// `too_many_attributes`, `io`, `shutdown`.
    pub connections: Family<ResultLabel, Counter>,
}

impl QuotaStatusMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = QuotaStatusMetrics {
            requests: Family::default(),
            connections: Family::default(),
        };
        registry.register(
            "yarilo_quota_status_requests",
            "Policy requests answered, by result",
            m.requests.clone(),
        );
        registry.register(
            "yarilo_quota_status_connections",
            "Policy connections ended, by how",
            m.connections.clone(),
        );
        m
    }

    pub fn request(&self, result: &str) {
        self.requests
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    pub fn connection(&self, result: &str) {
        self.connections
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }
}
