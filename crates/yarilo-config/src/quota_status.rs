//! `quota_status.*`: the Postfix policy service answering whether a
//! recipient has room (`yarilo quota-status`). The reply keys keep the
//! names of Dovecot 2.3's quota-status plugin settings. Restart-only.

use serde::{Deserialize, Serialize};

use crate::{parse_listen, ConfigError};

/// `quota_status.*`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaStatus {
    /// TCP listen address. Default `:12340` (the port of Dovecot's
    /// documented `service quota-status` example).
    pub listen: String,
    /// Dovecot `quota_status_success`: the action when the message fits.
    /// Default `OK`.
    pub quota_status_success: String,
    /// Dovecot `quota_status_nouser`: the action for a recipient the
    /// userdb does not know. Default `REJECT Unknown user`.
    pub quota_status_nouser: String,
    /// Dovecot `quota_status_overquota`: the action when the message does
    /// not fit; `%{error}` is replaced by the reason. Default
    /// `554 5.2.2 %{error}` (Dovecot 2.3's built-in reply).
    pub quota_status_overquota: String,
    /// Dovecot `quota_status_toolarge`: the action when the message alone
    /// is larger than the user's whole limit; empty uses
    /// `quota_status_overquota`. Default empty.
    pub quota_status_toolarge: String,
    /// Dovecot `recipient_delimiter`: characters separating the user from
    /// the detail in a recipient's local part; empty disables details.
    /// Default `+`.
    pub recipient_delimiter: String,
    /// Longest request line, bytes, LF included; a longer one closes the
    /// connection. Default 8192.
    pub max_line_length: usize,
    /// Attributes in one request; more close the connection. Default 256.
    pub max_attributes: usize,
    /// Seconds a client may stay silent between or inside requests
    /// (Postfix keeps idle policy connections for `max_idle`, 100 s).
    /// Default 300.
    pub read_timeout_seconds: u64,
    /// Seconds a reply may take to be written. Default 30.
    pub write_timeout_seconds: u64,
    /// Concurrent connections; more wait in the kernel's backlog.
    /// Default 1024.
    pub max_connections: usize,
}

impl Default for QuotaStatus {
    fn default() -> Self {
        QuotaStatus {
            listen: ":12340".into(),
            quota_status_success: "OK".into(),
            quota_status_nouser: "REJECT Unknown user".into(),
            quota_status_overquota: "554 5.2.2 %{error}".into(),
            quota_status_toolarge: String::new(),
            recipient_delimiter: "+".into(),
            max_line_length: 8192,
            max_attributes: 256,
            read_timeout_seconds: 300,
            write_timeout_seconds: 30,
            max_connections: 1024,
        }
    }
}

impl QuotaStatus {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("quota_status.{k}");
        parse_listen(&self.listen).map_err(|m| ConfigError::invalid(key("listen"), m))?;
        for (name, value) in [
            ("quota_status_success", &self.quota_status_success),
            ("quota_status_nouser", &self.quota_status_nouser),
            ("quota_status_overquota", &self.quota_status_overquota),
        ] {
            if value.trim().is_empty() {
                return Err(ConfigError::invalid(key(name), "must not be empty"));
            }
        }
        for (name, value) in [
            ("quota_status_success", &self.quota_status_success),
            ("quota_status_nouser", &self.quota_status_nouser),
            ("quota_status_overquota", &self.quota_status_overquota),
            ("quota_status_toolarge", &self.quota_status_toolarge),
        ] {
            // A line break would end the policy reply early.
            if value.contains(['\n', '\r']) {
                return Err(ConfigError::invalid(key(name), "must be one line"));
            }
        }
        if self.max_line_length < 512 {
            return Err(ConfigError::invalid(
                key("max_line_length"),
                "must be at least 512",
            ));
        }
        if self.max_attributes == 0 {
            return Err(ConfigError::invalid(
                key("max_attributes"),
                "must be at least 1",
            ));
        }
        for (name, v) in [
            ("read_timeout_seconds", self.read_timeout_seconds),
            ("write_timeout_seconds", self.write_timeout_seconds),
        ] {
            if v == 0 {
                return Err(ConfigError::invalid(key(name), "must be at least 1"));
            }
        }
        if self.max_connections == 0 {
            return Err(ConfigError::invalid(
                key("max_connections"),
                "must be at least 1",
            ));
        }
        Ok(())
    }
}
