//! Prometheus metrics of the director (`yarilo_director_*`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::director::{BackendOutcome, Director, Removal, UpOutcome};
use crate::protocol::Effect;

type Labels = [(&'static str, &'static str); 1];

/// The director's metrics. Cheap to clone (shared handles).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// LOOKUPs by result: `ok`, `no_backend`.
    pub lookups: Family<Labels, Counter>,
    /// New pins made, by policy.
    pub assignments: Family<Labels, Counter>,
    /// Backends removed, by reason.
    pub removals: Family<Labels, Counter>,
    /// Backends by state: `up`, `draining`.
    pub backends: Family<Labels, Gauge>,
    /// Entries in the user directory.
    pub users: Gauge,
    /// Bytes of the user directory table.
    pub user_table_bytes: Gauge,
    /// Tracked sessions.
    pub sessions: Gauge,
    /// Kick orders published.
    pub kicks: Counter,
}

impl Metrics {
    /// Registers every metric (names get the `yarilo_director_` prefix).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("yarilo_director");
        r.register("lookups", "LOOKUP requests by result", self.lookups.clone());
        r.register(
            "assignments",
            "New sticky assignments by policy",
            self.assignments.clone(),
        );
        r.register(
            "backend_removals",
            "Backends removed by reason",
            self.removals.clone(),
        );
        r.register("backends", "Backends by state", self.backends.clone());
        r.register("users", "Entries in the user directory", self.users.clone());
        r.register(
            "user_table_bytes",
            "Bytes held by the user directory table",
            self.user_table_bytes.clone(),
        );
        r.register("sessions", "Tracked live sessions", self.sessions.clone());
        r.register(
            "kicks",
            "Kick orders sent to login pods",
            self.kicks.clone(),
        );
    }

    pub(crate) fn effect(&self, effect: &Effect, policy: &'static str) {
        match effect {
            Effect::Lookup { ok, fresh } => {
                let result = if *ok { "ok" } else { "no_backend" };
                self.lookups.get_or_create(&[("result", result)]).inc();
                if *fresh {
                    self.assignments.get_or_create(&[("policy", policy)]).inc();
                }
            }
            Effect::BackendUp(UpOutcome::Retagged(r))
            | Effect::Backend(BackendOutcome::Removed(r)) => self.removal(r),
            _ => {}
        }
    }

    pub(crate) fn removal(&self, r: &Removal) {
        self.removals
            .get_or_create(&[("reason", r.reason.as_str())])
            .inc();
    }

    /// Refreshes the gauges from the state.
    pub fn observe(&self, d: &Director) {
        let (mut up, mut draining) = (0, 0);
        for (_, b) in d.backends().iter() {
            if b.draining || b.admin_drain {
                draining += 1;
            } else {
                up += 1;
            }
        }
        self.backends.get_or_create(&[("state", "up")]).set(up);
        self.backends
            .get_or_create(&[("state", "draining")])
            .set(draining);
        self.users.set(d.users().len() as i64);
        self.user_table_bytes.set(d.users().table_bytes() as i64);
        self.sessions.set(d.sessions().len() as i64);
    }
}
