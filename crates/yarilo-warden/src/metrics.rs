//! `yarilo_warden_*` metrics, all always on: what the design lists for the
//! scale-out (connect results, kicks emitted/delivered per pod, Redis
//! errors per op — fail-open made visible — reconcile adjustments, penalty
//! updates) plus session admissions and open client connections.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

#[derive(Clone, Default)]
pub struct WardenMetrics {
    pub(crate) connect: Family<Labels, Counter>,
    pub(crate) session_start: Family<Labels, Counter>,
    pub(crate) kick_emitted: Counter,
    pub(crate) kick_delivered: Counter,
    pub(crate) redis_errors: Family<Labels, Counter>,
    pub(crate) reconcile_adjustments: Counter,
    pub(crate) penalty_updates: Family<Labels, Counter>,
    pub(crate) clients: Gauge,
}

impl WardenMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "yarilo_warden_connect",
            "CONNECT requests by result (ok, refused, failopen)",
            self.connect.clone(),
        );
        registry.register(
            "yarilo_warden_session_start",
            "SESSION_START requests by result (ok, refused, failopen)",
            self.session_start.clone(),
        );
        registry.register(
            "yarilo_warden_kick_emitted",
            "Kicks emitted through this replica",
            self.kick_emitted.clone(),
        );
        registry.register(
            "yarilo_warden_kick_delivered",
            "Kicks this replica delivered to its subscribers",
            self.kick_delivered.clone(),
        );
        registry.register(
            "yarilo_warden_redis_errors",
            "Redis operations that failed (warden then fails open), by op",
            self.redis_errors.clone(),
        );
        registry.register(
            "yarilo_warden_reconcile_adjustments",
            "Entries dropped and counters corrected by the reconcile sweep",
            self.reconcile_adjustments.clone(),
        );
        registry.register(
            "yarilo_warden_penalty_updates",
            "Auth-failure penalty updates by result (incremented, cleared, error)",
            self.penalty_updates.clone(),
        );
        registry.register(
            "yarilo_warden_client_connections",
            "Client connections open to this replica",
            self.clients.clone(),
        );
    }

    pub fn redis_error(&self, op: &'static str) {
        self.redis_errors.get_or_create(&vec![("op", op)]).inc();
    }

    pub(crate) fn result(f: &Family<Labels, Counter>, result: &'static str) {
        f.get_or_create(&vec![("result", result)]).inc();
    }
}
