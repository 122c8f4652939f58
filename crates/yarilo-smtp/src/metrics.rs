//! `yarilo_lmtp_*` and `yarilo_submission_*` metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

pub fn label(result: &str) -> ResultLabel {
    ResultLabel {
        result: result.to_string(),
    }
}

fn seconds() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// LMTP: deliveries per recipient and their latency, sessions by outcome.
#[derive(Clone)]
pub struct LmtpMetrics {
    /// `result`: `ok`, `unknown_user`, `quota`, `too_large`, `tempfail`,
    /// `rejected` (filter).
    pub deliveries: Family<ResultLabel, Counter>,
    /// Time from the end of DATA to the durable append, per recipient.
    pub delivery_seconds: Histogram,
    /// `result`: `quit`, `closed`, `timeout`, `shutdown`, `errors`, `io`.
    pub sessions: Family<ResultLabel, Counter>,
}

impl LmtpMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = LmtpMetrics {
            deliveries: Family::default(),
            delivery_seconds: seconds(),
            sessions: Family::default(),
        };
        registry.register(
            "yarilo_lmtp_deliveries",
            "LMTP deliveries per recipient by result",
            m.deliveries.clone(),
        );
        registry.register(
            "yarilo_lmtp_delivery_seconds",
            "Time from end of DATA to the durable append, per recipient",
            m.delivery_seconds.clone(),
        );
        registry.register(
            "yarilo_lmtp_sessions",
            "LMTP sessions by how they ended",
            m.sessions.clone(),
        );
        m
    }
}

/// Submission: messages, recipients, AUTH attempts and relay time.
#[derive(Clone)]
pub struct SubmissionMetrics {
    /// `result`: `ok`, `relay_tempfail`, `relay_rejected`, `too_large`.
    pub messages: Family<ResultLabel, Counter>,
    /// `result`: `ok`, `relay_tempfail`, `relay_rejected`, `limit`.
    pub recipients: Family<ResultLabel, Counter>,
    /// `result`: `ok`, a `FailureKind` name.
    pub auth: Family<ResultLabel, Counter>,
    /// `result`: `ok`, `forged`.
    pub senders: Family<ResultLabel, Counter>,
    /// Time to hand a message to the relay (DATA to its final reply).
    pub relay_seconds: Histogram,
    pub sessions: Family<ResultLabel, Counter>,
}

impl SubmissionMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = SubmissionMetrics {
            messages: Family::default(),
            recipients: Family::default(),
            auth: Family::default(),
            senders: Family::default(),
            relay_seconds: seconds(),
            sessions: Family::default(),
        };
        registry.register(
            "yarilo_submission_messages",
            "Submitted messages by result",
            m.messages.clone(),
        );
        registry.register(
            "yarilo_submission_recipients",
            "Submission recipients by result",
            m.recipients.clone(),
        );
        registry.register(
            "yarilo_submission_auth",
            "Submission AUTH attempts by result",
            m.auth.clone(),
        );
        registry.register(
            "yarilo_submission_senders",
            "MAIL FROM authorization by result",
            m.senders.clone(),
        );
        registry.register(
            "yarilo_submission_relay_seconds",
            "Time to hand a message to the relay",
            m.relay_seconds.clone(),
        );
        registry.register(
            "yarilo_submission_sessions",
            "Submission sessions by how they ended",
            m.sessions.clone(),
        );
        m
    }
}
