use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `imap.*`: the IMAP session (limits, timeouts, namespace). Keys follow
/// Dovecot's `imap_*` settings where one exists.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Imap {
    /// Hierarchy separator clients see in the personal namespace (Dovecot
    /// `namespace inbox { separator }`), independent of the on-disk `.` of
    /// Maildir++. Default `/`.
    pub separator: String,
    /// Longest command line in bytes, CRLF included (Dovecot
    /// `imap_max_line_length`). Default 65536.
    pub max_line_length: usize,
    /// Largest message APPEND accepts, in bytes; advertised as
    /// `APPENDLIMIT=`. Default 52428800 (50 MiB).
    pub append_limit: u64,
    /// Largest literal in any other command (search strings, …). Default
    /// 1048576.
    pub max_literal: usize,
    /// Bad commands in a row before the connection is closed with BYE.
    /// Default 20.
    pub max_bad_commands: u32,
    /// Seconds an unauthenticated connection may stay idle. Default 60.
    pub login_timeout_seconds: u64,
    /// Seconds an authenticated connection may stay idle outside IDLE
    /// (RFC 9051 asks for at least 30 minutes). Default 1800.
    pub autologout_seconds: u64,
    /// Seconds an IDLE may last before the server ends the connection;
    /// clients re-issue IDLE well within this. Default 1800 (30 minutes)
    /// plus a margin the session adds.
    pub idle_timeout_seconds: u64,
    /// How often, in seconds, an IDLE-ing session checks the Maildir for
    /// changes made outside yarilo (another Dovecot writing the same
    /// mailbox). Changes made by yarilo arrive at once through the event
    /// bus. Default 1.
    pub idle_check_interval_seconds: u64,
    /// Failed LOGIN/AUTHENTICATE attempts per connection before it is
    /// closed. Default 3.
    pub max_auth_failures: u32,
    /// Seconds a failed login is answered late, to slow guessing. Default 2.
    pub auth_failure_delay_seconds: u64,
    /// Replaces the post-login CAPABILITY list when not empty (Dovecot
    /// `imap_capability`). Default empty.
    pub capability: String,
    /// Open connections per IMAP listener; more are closed at accept.
    /// Default 20000.
    pub max_connections: usize,
    /// Dovecot's `imap_client_workarounds` that still matter:
    /// `delay-newmail`, `tb-extra-mailbox-sep`, `tb-lsub-flags`. Default
    /// none.
    pub client_workarounds: Vec<String>,
    /// Messages whose SORT/THREAD header facts (sort keys, base subject,
    /// Message-ID, References) are kept in memory, over all mailboxes of
    /// the process (about 0.5 KiB each); least recently used
    /// mailboxes are dropped first. 0 turns the cache off. Default 500000.
    pub sort_cache_messages: usize,
    /// Seconds the TLS handshake after STARTTLS may take before the
    /// connection is closed. Default 30.
    pub starttls_timeout_seconds: u64,
    /// Seconds one write to the client may stall (a client that stops
    /// reading) before the connection is closed. Default 300.
    pub write_timeout_seconds: u64,
    /// Seconds a connection may stay unauthenticated in total, however
    /// busy it is; then it is closed with `* BYE`. Default 180.
    pub preauth_timeout_seconds: u64,
    /// Bytes of APPEND messages all sessions of the process may hold in
    /// memory at once; an APPEND that would go over is refused with
    /// `NO [LIMIT]` before its literal is read. Default 268435456
    /// (256 MiB).
    pub append_buffer_bytes: u64,
}

/// The workaround names `imap.client_workarounds` accepts.
pub const CLIENT_WORKAROUNDS: [&str; 3] =
    ["delay-newmail", "tb-extra-mailbox-sep", "tb-lsub-flags"];

impl Default for Imap {
    fn default() -> Self {
        Imap {
            separator: "/".to_string(),
            max_line_length: 65536,
            append_limit: 50 * 1024 * 1024,
            max_literal: 1024 * 1024,
            max_bad_commands: 20,
            login_timeout_seconds: 60,
            autologout_seconds: 1800,
            idle_timeout_seconds: 1800,
            idle_check_interval_seconds: 1,
            max_auth_failures: 3,
            auth_failure_delay_seconds: 2,
            capability: String::new(),
            max_connections: 20_000,
            client_workarounds: Vec::new(),
            sort_cache_messages: 500_000,
            starttls_timeout_seconds: 30,
            write_timeout_seconds: 300,
            preauth_timeout_seconds: 180,
            append_buffer_bytes: 256 << 20,
        }
    }
}

impl Imap {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let mut chars = self.separator.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) if c.is_ascii_graphic() && !"%*\"\\".contains(c) => {}
            _ => {
                return Err(ConfigError::invalid(
                    "imap.separator",
                    "must be one printable ASCII character other than % * \" \\",
                ))
            }
        }
        if self.max_line_length < 1024 {
            return Err(ConfigError::invalid(
                "imap.max_line_length",
                "must be at least 1024",
            ));
        }
        if self.append_limit == 0 || self.max_literal == 0 {
            return Err(ConfigError::invalid(
                "imap.append_limit",
                "append_limit and max_literal must be above 0",
            ));
        }
        if self.autologout_seconds < 60 || self.login_timeout_seconds == 0 {
            return Err(ConfigError::invalid(
                "imap.autologout_seconds",
                "autologout_seconds must be at least 60, login_timeout_seconds at least 1",
            ));
        }
        for (key, v) in [
            (
                "imap.starttls_timeout_seconds",
                self.starttls_timeout_seconds,
            ),
            ("imap.write_timeout_seconds", self.write_timeout_seconds),
            ("imap.preauth_timeout_seconds", self.preauth_timeout_seconds),
        ] {
            if v == 0 {
                return Err(ConfigError::invalid(key, "must be at least 1"));
            }
        }
        if self.append_buffer_bytes < self.append_limit {
            return Err(ConfigError::invalid(
                "imap.append_buffer_bytes",
                "must be at least imap.append_limit",
            ));
        }
        if let Some(w) = self
            .client_workarounds
            .iter()
            .find(|w| !CLIENT_WORKAROUNDS.contains(&w.as_str()))
        {
            return Err(ConfigError::invalid(
                "imap.client_workarounds",
                format!(
                    "unknown workaround {w:?}; known: {}",
                    CLIENT_WORKAROUNDS.join(", ")
                ),
            ));
        }
        if self.idle_check_interval_seconds == 0 {
            return Err(ConfigError::invalid(
                "imap.idle_check_interval_seconds",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// The separator as a char (validated).
    pub fn separator_char(&self) -> char {
        self.separator.chars().next().unwrap_or('/')
    }
}
