//! Settings of one login component, from `login.*`, `imap.*` and
//! `general.*`.

use std::time::Duration;

/// What a login process needs besides its routes.
#[derive(Debug, Clone)]
pub struct LoginSettings {
    /// Name in the greeting.
    pub hostname: String,
    /// Dial + internal TLS handshake bound.
    pub connect_timeout: Duration,
    /// Wait for the backend's first line after the preamble.
    pub backend_answer_timeout: Duration,
    /// PROXY header + client TLS handshake (implicit or STARTTLS).
    pub handshake_timeout: Duration,
    /// Idle bound before login (`imap.login_timeout_seconds`).
    pub login_timeout: Duration,
    /// Failed logins per connection before it is closed.
    pub max_auth_failures: u32,
    /// Delay before a failure is answered.
    pub auth_failure_delay: Duration,
    /// Longest pre-login command line, CRLF included.
    pub max_line: usize,
    /// Largest literal before login (a LOGIN password).
    pub max_literal: usize,
}

impl LoginSettings {
    /// IMAP login settings from the configuration.
    pub fn imap(c: &yarilo_config::Config) -> LoginSettings {
        LoginSettings {
            hostname: c.general.hostname.clone(),
            connect_timeout: Duration::from_millis(c.login.connect_timeout_ms),
            backend_answer_timeout: Duration::from_millis(c.login.backend_answer_timeout_ms),
            handshake_timeout: Duration::from_secs(c.login.handshake_timeout_seconds),
            login_timeout: Duration::from_secs(c.imap.login_timeout_seconds),
            max_auth_failures: c.imap.max_auth_failures.max(1),
            auth_failure_delay: Duration::from_secs(c.imap.auth_failure_delay_seconds),
            // Pre-login lines are short; Dovecot's login processes cap
            // them well below the session's limit.
            max_line: c.imap.max_line_length.min(16 * 1024),
            max_literal: 8 * 1024,
        }
    }
}
