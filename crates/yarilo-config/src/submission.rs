//! `submission.*`: message submission (RFC 6409, RFC 8314) and the relay
//! it hands mail to. Key names follow Dovecot's `submission_*` settings
//! without the prefix. Restart-only.

use serde::{Deserialize, Serialize};

use crate::{ConfigError, Secret};

/// How the relay connection is secured (Dovecot `submission_relay_ssl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RelaySsl {
    /// Plain SMTP.
    None,
    /// Plain SMTP upgraded with STARTTLS; a relay without it is an error.
    Starttls,
    /// TLS from the first byte (SMTPS, RFC 8314).
    Ssl,
}

/// `submission.*`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubmissionConfig {
    /// Name in the greeting and the EHLO reply. Default empty:
    /// `general.hostname`.
    pub hostname: String,
    /// The MTA that sends submitted mail on. Default `127.0.0.1`.
    pub relay_host: String,
    /// Default 25.
    pub relay_port: u16,
    /// `none`, `starttls` or `ssl`. Default `none`.
    pub relay_ssl: RelaySsl,
    /// Verify the relay's certificate (and `relay_host` as its name).
    /// Default true.
    pub relay_ssl_verify: bool,
    /// PEM file with the CAs the relay's certificate must chain to.
    /// Default empty: the platform's trust store (`SSL_CERT_FILE`,
    /// `SSL_CERT_DIR`, or the distribution's bundle), or the built-in
    /// Mozilla roots where the platform has none.
    pub relay_ssl_ca_file: String,
    /// AUTH PLAIN at the relay when not empty. Default empty.
    pub relay_user: String,
    /// Password for `relay_user` (`env:NAME` / `file:/path` allowed).
    pub relay_password: Secret,
    /// Seconds to connect to the relay (TCP and TLS). Default 30.
    pub relay_connect_timeout_seconds: u64,
    /// Seconds to wait for each relay reply; the reply to the end of
    /// DATA gets 10 minutes at least (RFC 5321 §4.5.3.2.6). Default 300.
    pub relay_command_timeout_seconds: u64,
    /// Domain appended to a login name without `@` to form the user's own
    /// sender address. Default empty: `hostname`.
    pub default_domain: String,
    /// Largest message accepted, bytes (advertised as `SIZE`); 0 = no
    /// limit. Default 41943040 (40 MiB).
    pub max_message_size: u64,
    /// Recipients per transaction. Default 100.
    pub max_recipients: usize,
    /// Longest command line, bytes, CRLF included. Default 4096.
    pub max_line_length: usize,
    /// Seconds a client may stay silent. Default 300.
    pub timeout_seconds: u64,
    /// Seconds the TLS handshake after STARTTLS may take before the
    /// connection is closed. Default 30.
    pub starttls_timeout_seconds: u64,
    /// Unknown or malformed commands and failed AUTHs before the
    /// connection is closed. Default 10.
    pub max_bad_commands: u32,
}

impl Default for SubmissionConfig {
    fn default() -> Self {
        SubmissionConfig {
            hostname: String::new(),
            relay_host: "127.0.0.1".to_string(),
            relay_port: 25,
            relay_ssl: RelaySsl::None,
            relay_ssl_verify: true,
            relay_ssl_ca_file: String::new(),
            relay_user: String::new(),
            relay_password: Secret::default(),
            relay_connect_timeout_seconds: 30,
            relay_command_timeout_seconds: 300,
            default_domain: String::new(),
            max_message_size: 40 << 20,
            max_recipients: 100,
            max_line_length: 4096,
            timeout_seconds: 300,
            starttls_timeout_seconds: 30,
            max_bad_commands: 10,
        }
    }
}

impl SubmissionConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.relay_host.is_empty() {
            return Err(ConfigError::invalid(
                "submission.relay_host",
                "must not be empty",
            ));
        }
        if self.relay_port == 0 {
            return Err(ConfigError::invalid(
                "submission.relay_port",
                "must not be 0",
            ));
        }
        if self.max_line_length < 512 {
            return Err(ConfigError::invalid(
                "submission.max_line_length",
                "must be at least 512 (RFC 5321 §4.5.3.1.4)",
            ));
        }
        if self.max_recipients == 0 {
            return Err(ConfigError::invalid(
                "submission.max_recipients",
                "must be at least 1",
            ));
        }
        if self.timeout_seconds == 0
            || self.relay_connect_timeout_seconds == 0
            || self.relay_command_timeout_seconds == 0
            || self.starttls_timeout_seconds == 0
        {
            return Err(ConfigError::invalid(
                "submission.timeout_seconds",
                "timeouts must be at least 1 second",
            ));
        }
        if !self.relay_user.is_empty() && self.relay_password.is_empty() {
            return Err(ConfigError::invalid(
                "submission.relay_password",
                "must be set when relay_user is",
            ));
        }
        Ok(())
    }
}
