//! `yarilo_pop3_*` metrics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Counters of one POP3 server (clones share values).
#[derive(Debug, Clone, Default)]
pub struct Pop3Metrics {
    pub(crate) sessions_open: Gauge,
    pub(crate) sessions: Counter,
    pub(crate) commands: Family<Labels, Counter>,
    pub(crate) logins: Family<Labels, Counter>,
    pub(crate) sent_bytes: Family<Labels, Counter>,
    pub(crate) deleted_messages: Counter,
    pub(crate) disconnects: Family<Labels, Counter>,
}

/// What a command did, for the `result` label: `ok`; `no` (the client
/// asked for something not possible now: a deleted message, wrong state);
/// `bad` (syntax, unknown command); `error` (server fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandResult {
    Ok,
    No,
    Bad,
    Error,
}

impl CommandResult {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandResult::Ok => "ok",
            CommandResult::No => "no",
            CommandResult::Bad => "bad",
            CommandResult::Error => "error",
        }
    }
}

impl Pop3Metrics {
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("yarilo_pop3");
        sub.register(
            "sessions_open",
            "POP3 sessions running now",
            self.sessions_open.clone(),
        );
        sub.register("sessions", "POP3 sessions started", self.sessions.clone());
        sub.register(
            "commands",
            "POP3 commands by command and result (ok, no, bad, error)",
            self.commands.clone(),
        );
        sub.register(
            "logins",
            "POP3 logins by result (ok or the auth failure class)",
            self.logins.clone(),
        );
        sub.register(
            "sent_bytes",
            "Message bytes sent by RETR and TOP",
            self.sent_bytes.clone(),
        );
        sub.register(
            "deleted_messages",
            "Messages deleted at QUIT",
            self.deleted_messages.clone(),
        );
        sub.register(
            "disconnects",
            "Sessions ended, by reason",
            self.disconnects.clone(),
        );
    }

    pub(crate) fn command(&self, command: &str, result: CommandResult) {
        self.commands
            .get_or_create(&vec![
                ("command".to_string(), command.to_string()),
                ("result".to_string(), result.as_str().to_string()),
            ])
            .inc();
    }

    pub(crate) fn login(&self, result: &str) {
        self.logins
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .inc();
    }

    pub(crate) fn sent(&self, command: &str, bytes: u64) {
        self.sent_bytes
            .get_or_create(&vec![("command".to_string(), command.to_string())])
            .inc_by(bytes);
    }

    pub(crate) fn disconnect(&self, reason: &str) {
        self.disconnects
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }
}
