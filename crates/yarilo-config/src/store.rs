use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `store.*`: where mail lives and how the mail store behaves. Key names
/// follow Dovecot where Dovecot has one. Restart-only.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Dovecot `mail_location`: `maildir:<path>[:LAYOUT=fs][:INDEX=<dir>|MEMORY][:INBOX=<dir>]`
    /// with `%u %n %d %h`, `%L` lower-case modifier, `~/`. Default empty:
    /// `maildir:<general.data_dir>/mail/%Ld/%Ln`.
    pub mail_location: String,
    /// Mailboxes with special use and auto-creation (Dovecot's
    /// `namespace inbox { mailbox X { special_use, auto } }`).
    /// Default: Drafts, Sent, Trash, Junk, all `auto: subscribe`.
    pub mailboxes: Vec<StoreMailbox>,
    /// Dovecot `maildir_very_dirty_syncs`: assume nothing but yarilo and
    /// Dovecot changes `cur/`, so timestamp granularity never forces a
    /// rescan. Default false.
    pub maildir_very_dirty_syncs: bool,
    /// Rewrite a mailbox's index snapshot when its log exceeds this many
    /// bytes. Default 4194304 (4 MiB).
    pub index_log_compact_bytes: u64,
    /// Seconds to wait for a mailbox lock (the lock service and Dovecot's
    /// `dovecot-uidlist.lock`). Default 30.
    pub lock_timeout_seconds: u64,
    /// Largest message accepted for APPEND/delivery, bytes; 0 = no limit.
    /// Default 0 (the protocols enforce their own limits).
    pub max_message_size: u64,
    /// Open mailboxes kept in memory per process. Default 1000.
    pub cache_mailboxes: usize,
}

/// One configured mailbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreMailbox {
    pub name: String,
    /// RFC 6154 attribute: `\Drafts`, `\Sent`, `\Trash`, `\Junk`,
    /// `\Archive`, `\All`, `\Flagged`. Default none.
    #[serde(default)]
    pub special_use: Option<String>,
    /// `no`, `create` or `subscribe`. Default `no`.
    #[serde(default = "default_auto")]
    pub auto: String,
}

fn default_auto() -> String {
    "no".to_string()
}

impl Default for StoreConfig {
    fn default() -> Self {
        let mb = |name: &str, su: &str| StoreMailbox {
            name: name.to_string(),
            special_use: Some(su.to_string()),
            auto: "subscribe".to_string(),
        };
        StoreConfig {
            mail_location: String::new(),
            mailboxes: vec![
                mb("Drafts", "\\Drafts"),
                mb("Sent", "\\Sent"),
                mb("Trash", "\\Trash"),
                mb("Junk", "\\Junk"),
            ],
            maildir_very_dirty_syncs: false,
            index_log_compact_bytes: 4 << 20,
            lock_timeout_seconds: 30,
            max_message_size: 0,
            cache_mailboxes: 1000,
        }
    }
}

impl StoreConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.mail_location.is_empty() && !self.mail_location.starts_with("maildir:") {
            return Err(ConfigError::invalid(
                "store.mail_location",
                "only maildir:<path>[:options] is supported",
            ));
        }
        for (i, m) in self.mailboxes.iter().enumerate() {
            if m.name.is_empty() {
                return Err(ConfigError::invalid(
                    format!("store.mailboxes[{i}].name"),
                    "must not be empty",
                ));
            }
            if !matches!(m.auto.as_str(), "no" | "create" | "subscribe") {
                return Err(ConfigError::invalid(
                    format!("store.mailboxes[{i}].auto"),
                    "must be no, create or subscribe",
                ));
            }
            if let Some(su) = &m.special_use {
                let ok = [
                    "\\all",
                    "\\archive",
                    "\\drafts",
                    "\\flagged",
                    "\\junk",
                    "\\sent",
                    "\\trash",
                ]
                .contains(&su.to_ascii_lowercase().as_str());
                if !ok {
                    return Err(ConfigError::invalid(
                        format!("store.mailboxes[{i}].special_use"),
                        "must be one of \\All \\Archive \\Drafts \\Flagged \\Junk \\Sent \\Trash",
                    ));
                }
            }
        }
        if self.lock_timeout_seconds == 0 {
            return Err(ConfigError::invalid(
                "store.lock_timeout_seconds",
                "must be at least 1",
            ));
        }
        if self.index_log_compact_bytes < 4096 {
            return Err(ConfigError::invalid(
                "store.index_log_compact_bytes",
                "must be at least 4096",
            ));
        }
        Ok(())
    }
}
