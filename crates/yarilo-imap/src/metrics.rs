//! `yarilo_imap_*` metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CommandLabels {
    pub command: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone)]
pub(crate) struct Metrics {
    pub sessions_open: Gauge,
    pub sessions_authenticated: Gauge,
    pub sessions_idle: Gauge,
    pub commands: Family<CommandLabels, Counter>,
    pub command_seconds: Family<CommandLabels, Histogram>,
    pub logins: Family<ResultLabel, Counter>,
    pub bytes_out: Counter,
    pub bytes_in: Counter,
    /// Connections closed by a bound in time, by `kind`: `starttls`,
    /// `write`, `preauth`, `inactivity`.
    pub timeouts: Family<KindLabel, Counter>,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        10.0,
    ])
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            sessions_open: Gauge::default(),
            sessions_authenticated: Gauge::default(),
            sessions_idle: Gauge::default(),
            commands: Family::default(),
            command_seconds: Family::new_with_constructor(latency_histogram),
            logins: Family::default(),
            bytes_out: Counter::default(),
            bytes_in: Counter::default(),
            timeouts: Family::default(),
        }
    }
}

impl Metrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "yarilo_imap_sessions_open",
            "IMAP connections in progress",
            self.sessions_open.clone(),
        );
        r.register(
            "yarilo_imap_sessions_authenticated",
            "IMAP connections past login",
            self.sessions_authenticated.clone(),
        );
        r.register(
            "yarilo_imap_sessions_idle",
            "IMAP sessions in IDLE",
            self.sessions_idle.clone(),
        );
        r.register(
            "yarilo_imap_commands",
            "IMAP commands by name and result (ok, no, bad)",
            self.commands.clone(),
        );
        r.register(
            "yarilo_imap_command_duration_seconds",
            "Time from a complete command to its tagged reply, by name and result",
            self.command_seconds.clone(),
        );
        r.register(
            "yarilo_imap_logins",
            "IMAP login attempts by result",
            self.logins.clone(),
        );
        r.register(
            "yarilo_imap_sent_bytes",
            "Bytes sent to IMAP clients",
            self.bytes_out.clone(),
        );
        r.register(
            "yarilo_imap_received_bytes",
            "Bytes received from IMAP clients",
            self.bytes_in.clone(),
        );
        r.register(
            "yarilo_imap_timeouts",
            "IMAP connections closed by a timeout, by kind (starttls, write, preauth, inactivity)",
            self.timeouts.clone(),
        );
    }

    /// Counts a connection closed by the `kind` timeout.
    pub fn timed_out(&self, kind: &'static str) {
        self.timeouts.get_or_create(&KindLabel { kind }).inc();
    }
}
