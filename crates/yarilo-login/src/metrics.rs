//! `yarilo_login_*` metrics of a login process.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub protocol: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DirectionLabels {
    pub protocol: &'static str,
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProtocolLabel {
    pub protocol: &'static str,
}

/// Counters shared by every session of a login process.
#[derive(Clone)]
pub struct LoginMetrics {
    /// Authentication outcomes: `ok` or the failure class.
    pub(crate) logins: Family<ResultLabels, Counter>,
    /// Hand-offs to a backend: `ok`, `no_route`, `connect_failed`,
    /// `no_answer`, `refused` (the backend answered with a failure).
    pub(crate) backend: Family<ResultLabels, Counter>,
    /// Seconds from the auth service's yes to the backend's first line.
    pub(crate) handoff_seconds: Family<ProtocolLabel, Histogram>,
    /// Sessions currently piped to a backend.
    pub(crate) proxied: Family<ProtocolLabel, Gauge>,
    /// Bytes piped, `upstream` (client → backend) and `downstream`.
    pub(crate) bytes: Family<DirectionLabels, Counter>,
}

fn handoff_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
    ])
}

impl Default for LoginMetrics {
    fn default() -> Self {
        LoginMetrics {
            logins: Family::default(),
            backend: Family::default(),
            handoff_seconds: Family::new_with_constructor(handoff_histogram),
            proxied: Family::default(),
            bytes: Family::default(),
        }
    }
}

impl LoginMetrics {
    pub fn register(registry: &mut Registry) -> LoginMetrics {
        let m = LoginMetrics::default();
        registry.register(
            "yarilo_login_logins",
            "Logins decided by the auth service, by protocol and result",
            m.logins.clone(),
        );
        registry.register(
            "yarilo_login_backend_handoffs",
            "Hand-offs of an authenticated session to a backend, by protocol and result",
            m.backend.clone(),
        );
        registry.register(
            "yarilo_login_handoff_seconds",
            "Time from successful authentication to the backend's first line",
            m.handoff_seconds.clone(),
        );
        registry.register(
            "yarilo_login_sessions_proxied",
            "Sessions currently piped to a backend",
            m.proxied.clone(),
        );
        registry.register(
            "yarilo_login_proxied_bytes",
            "Bytes piped between clients and backends (upstream: client to backend)",
            m.bytes.clone(),
        );
        m
    }

    pub(crate) fn login(&self, protocol: &'static str, result: &'static str) {
        self.logins
            .get_or_create(&ResultLabels { protocol, result })
            .inc();
    }

    pub(crate) fn handoff(&self, protocol: &'static str, result: &'static str) {
        self.backend
            .get_or_create(&ResultLabels { protocol, result })
            .inc();
    }
}
