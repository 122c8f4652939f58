//! `lmtp.*`: LMTP delivery (RFC 2033). Key names follow Dovecot's
//! `lmtp_*` / `lda_*` settings where Dovecot has one. Restart-only.

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `lmtp.*`: how LMTP delivers into the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LmtpConfig {
    /// Name in the greeting and the LHLO reply. Default empty:
    /// `general.hostname`.
    pub hostname: String,
    /// Dovecot `lmtp_save_to_detail_mailbox`: deliver `user+detail@dom`
    /// into the mailbox `detail` (INBOX when it does not exist and
    /// `mailbox_autocreate` is off). Default false.
    pub save_to_detail_mailbox: bool,
    /// Dovecot `recipient_delimiter`: characters separating the user from
    /// the detail in a recipient's local part; empty disables details.
    /// Default `+`.
    pub recipient_delimiter: String,
    /// Dovecot `lda_mailbox_autocreate`: create a missing detail mailbox
    /// instead of falling back to INBOX. Default false.
    pub mailbox_autocreate: bool,
    /// Largest message accepted, bytes (advertised as `SIZE`); 0 = no
    /// limit. Default 52428800 (50 MiB).
    pub max_message_size: u64,
    /// Recipients per transaction; more get `452 4.5.3`. Default 100.
    pub max_recipients: usize,
    /// Dovecot `lmtp_rcpt_check_quota`: refuse a recipient already over
    /// quota at RCPT time (quota is always checked again at DATA).
    /// Default true.
    pub rcpt_check_quota: bool,
    /// Dovecot `quota_full_tempfail`: answer `452 4.2.2` instead of
    /// `552 5.2.2` when a mailbox is full. Default false.
    pub quota_full_tempfail: bool,
    /// Dovecot `lmtp_add_received_header`. Default true.
    pub add_received_header: bool,
    /// Longest command line, bytes, CRLF included. Default 4096.
    pub max_line_length: usize,
    /// Seconds a client may stay silent (between commands or inside
    /// DATA). Default 300 (RFC 5321 §4.5.3.2).
    pub timeout_seconds: u64,
    /// Unknown or malformed commands before the connection is closed.
    /// Default 10.
    pub max_bad_commands: u32,
}

impl Default for LmtpConfig {
    fn default() -> Self {
        LmtpConfig {
            hostname: String::new(),
            save_to_detail_mailbox: false,
            recipient_delimiter: "+".to_string(),
            mailbox_autocreate: false,
            max_message_size: 50 << 20,
            max_recipients: 100,
            rcpt_check_quota: true,
            quota_full_tempfail: false,
            add_received_header: true,
            max_line_length: 4096,
            timeout_seconds: 300,
            max_bad_commands: 10,
        }
    }
}

impl LmtpConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_line_length < 512 {
            return Err(ConfigError::invalid(
                "lmtp.max_line_length",
                "must be at least 512 (RFC 5321 §4.5.3.1.4)",
            ));
        }
        if self.max_recipients == 0 {
            return Err(ConfigError::invalid(
                "lmtp.max_recipients",
                "must be at least 1",
            ));
        }
        if self.timeout_seconds == 0 {
            return Err(ConfigError::invalid(
                "lmtp.timeout_seconds",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}
