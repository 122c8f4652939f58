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
    /// Text of the greeting after the protocol's positive code (POP3:
    /// `pop3.login_greeting`; IMAP and SMTP build theirs from
    /// `hostname`).
    pub greeting: String,
    /// POP3: `IMPLEMENTATION` in CAPA (`pop3.implementation`); empty
    /// hides it.
    pub implementation: String,
    /// Malformed or out-of-state commands before the connection closes.
    pub max_bad_commands: u32,
    /// SMTP: `SIZE` advertised before AUTH (the backend's
    /// `submission.max_message_size`, so a client that does not repeat
    /// EHLO after AUTH still sees the right limit); LMTP: the largest
    /// message `lmtp-login` buffers (`lmtp.max_message_size`). 0: none.
    pub max_message_size: u64,
    /// SMTP/LMTP: recipients per transaction.
    pub max_recipients: usize,
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
            greeting: String::new(),
            implementation: String::new(),
            max_bad_commands: 10,
            max_message_size: 0,
            max_recipients: 0,
        }
    }

    /// `pop3-login` settings: `pop3.*` bounds. The failure delay is the
    /// auth service's own (`auth.auth_failure_delay_seconds`), as for the
    /// POP3 service in `yarilo single`.
    pub fn pop3(c: &yarilo_config::Config) -> LoginSettings {
        LoginSettings {
            hostname: c.general.hostname.clone(),
            connect_timeout: Duration::from_millis(c.login.connect_timeout_ms),
            backend_answer_timeout: Duration::from_millis(c.login.backend_answer_timeout_ms),
            handshake_timeout: Duration::from_secs(c.login.handshake_timeout_seconds),
            login_timeout: Duration::from_secs(c.pop3.login_timeout_seconds.max(1)),
            max_auth_failures: c.pop3.max_auth_failures.max(1),
            auth_failure_delay: Duration::ZERO,
            max_line: c.pop3.max_line_length.clamp(512, 16 * 1024),
            max_literal: 0,
            greeting: c.pop3.login_greeting.clone(),
            implementation: c.pop3.implementation.clone(),
            max_bad_commands: c.pop3.max_bad_commands.max(1),
            max_message_size: 0,
            max_recipients: 0,
        }
    }

    /// `submission-login` settings: `submission.*` bounds (the session's
    /// `timeout_seconds` is the idle bound before AUTH).
    pub fn submission(c: &yarilo_config::Config) -> LoginSettings {
        let s = &c.submission;
        let hostname = if s.hostname.is_empty() {
            c.general.hostname.clone()
        } else {
            s.hostname.clone()
        };
        LoginSettings {
            hostname,
            connect_timeout: Duration::from_millis(c.login.connect_timeout_ms),
            backend_answer_timeout: Duration::from_millis(c.login.backend_answer_timeout_ms),
            handshake_timeout: Duration::from_secs(c.login.handshake_timeout_seconds),
            login_timeout: Duration::from_secs(s.timeout_seconds.max(1)),
            max_auth_failures: 3,
            auth_failure_delay: Duration::ZERO,
            max_line: s.max_line_length.clamp(512, 16 * 1024),
            max_literal: 0,
            greeting: String::new(),
            implementation: String::new(),
            max_bad_commands: if s.max_bad_commands == 0 {
                u32::MAX
            } else {
                s.max_bad_commands
            },
            max_message_size: s.max_message_size,
            max_recipients: s.max_recipients.max(1),
        }
    }

    /// `lmtp-login` settings: `lmtp.*` bounds.
    pub fn lmtp(c: &yarilo_config::Config) -> LoginSettings {
        let l = &c.lmtp;
        LoginSettings {
            hostname: if l.hostname.is_empty() {
                c.general.hostname.clone()
            } else {
                l.hostname.clone()
            },
            connect_timeout: Duration::from_millis(c.login.connect_timeout_ms),
            backend_answer_timeout: Duration::from_millis(c.login.backend_answer_timeout_ms),
            handshake_timeout: Duration::from_secs(c.login.handshake_timeout_seconds),
            login_timeout: Duration::from_secs(l.timeout_seconds.max(1)),
            max_auth_failures: 1,
            auth_failure_delay: Duration::ZERO,
            max_line: l.max_line_length.clamp(512, 16 * 1024),
            max_literal: 0,
            greeting: String::new(),
            implementation: String::new(),
            max_bad_commands: l.max_bad_commands.max(1),
            max_message_size: if l.max_message_size == 0 {
                DEFAULT_LMTP_BUFFER
            } else {
                l.max_message_size
            },
            max_recipients: l.max_recipients.max(1),
        }
    }
}

/// Bound on a message `lmtp-login` holds while it fans out, when
/// `lmtp.max_message_size` is 0 (unlimited on a backend, but a proxy
/// buffering without a bound would be a memory hole).
pub const DEFAULT_LMTP_BUFFER: u64 = 64 * 1024 * 1024;
