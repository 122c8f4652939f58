//! `pop3.*`: the POP3 session (RFC 1939, 2449, 5034). Key names follow
//! Dovecot's `pop3_*` settings where Dovecot has one. Restart-only.

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `pop3.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Pop3 {
    /// Dovecot `pop3_uidl_format`: how a message's UIDL is made from
    /// `%v` (UIDVALIDITY), `%u` (UID), `%f` (Maildir base name), `%g`
    /// (GUID) with Dovecot's modifiers. A UIDL saved in `dovecot-uidlist`
    /// (`P` field) wins, as in Dovecot. Default `%08Xu%08Xv` (Dovecot's).
    pub uidl_format: String,
    /// Offer APOP (RFC 1939 §7) with a timestamp in the greeting. Needs
    /// an APOP mechanism in the auth engine, which yarilo does not have
    /// yet: `true` is refused. Default false (as Dovecot).
    pub enable_apop: bool,
    /// Seconds a logged-in client may stay silent. Default 600 (RFC 1939
    /// §3: at least 10 minutes).
    pub idle_timeout_seconds: u64,
    /// Seconds a client may stay silent before logging in. Default 180.
    pub login_timeout_seconds: u64,
    /// Longest command line, bytes, line end excluded (RFC 2449 allows
    /// 255 for commands; SASL responses are longer). Default 8192.
    pub max_line_length: usize,
    /// Unknown, malformed or out-of-state commands before the
    /// connection is closed. Default 20.
    pub max_bad_commands: u32,
    /// Failed logins (USER/PASS or AUTH) before the connection is
    /// closed. Default 3.
    pub max_auth_failures: u32,
    /// Text after `+OK ` in the greeting. Default `yarilo ready.`.
    pub login_greeting: String,
    /// `IMPLEMENTATION` in CAPA before login (RFC 2449 §6.9); empty
    /// hides it. Default `yarilo`.
    pub implementation: String,
    /// Dovecot `pop3_no_flag_updates`: do not mark retrieved messages
    /// `\Seen` at QUIT. Default false.
    pub no_flag_updates: bool,
}

impl Default for Pop3 {
    fn default() -> Self {
        Pop3 {
            uidl_format: "%08Xu%08Xv".to_string(),
            enable_apop: false,
            idle_timeout_seconds: 600,
            login_timeout_seconds: 180,
            max_line_length: 8192,
            max_bad_commands: 20,
            max_auth_failures: 3,
            login_greeting: "yarilo ready.".to_string(),
            implementation: "yarilo".to_string(),
            no_flag_updates: false,
        }
    }
}

impl Pop3 {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        // The grammar of uidl_format is checked by yarilo-pop3 at start
        // (Pop3Settings::from_config); only what needs no parser is here.
        if self.uidl_format.is_empty() {
            return Err(ConfigError::invalid(
                "pop3.uidl_format",
                "must not be empty",
            ));
        }
        if self.enable_apop {
            return Err(ConfigError::invalid(
                "pop3.enable_apop",
                "APOP needs an auth mechanism yarilo does not have; use USER/PASS or AUTH over TLS",
            ));
        }
        if self.idle_timeout_seconds < 600 {
            return Err(ConfigError::invalid(
                "pop3.idle_timeout_seconds",
                "must be at least 600 (RFC 1939 section 3)",
            ));
        }
        if self.login_timeout_seconds == 0 {
            return Err(ConfigError::invalid(
                "pop3.login_timeout_seconds",
                "must be at least 1",
            ));
        }
        if self.max_line_length < 255 {
            return Err(ConfigError::invalid(
                "pop3.max_line_length",
                "must be at least 255 (RFC 2449 section 4)",
            ));
        }
        if self.max_bad_commands == 0 || self.max_auth_failures == 0 {
            return Err(ConfigError::invalid(
                "pop3.max_bad_commands",
                "max_bad_commands and max_auth_failures must be at least 1",
            ));
        }
        if self.login_greeting.contains(['\r', '\n']) || self.implementation.contains(['\r', '\n'])
        {
            return Err(ConfigError::invalid(
                "pop3.login_greeting",
                "login_greeting and implementation must be one line",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_name_their_key() {
        assert!(Pop3::default().validate().is_ok());
        let bad = |p: Pop3, key: &str| {
            let e = p.validate().unwrap_err().to_string();
            assert!(e.starts_with(key), "{e}");
        };
        bad(
            Pop3 {
                enable_apop: true,
                ..Pop3::default()
            },
            "pop3.enable_apop",
        );
        bad(
            Pop3 {
                idle_timeout_seconds: 60,
                ..Pop3::default()
            },
            "pop3.idle_timeout_seconds",
        );
        bad(
            Pop3 {
                uidl_format: String::new(),
                ..Pop3::default()
            },
            "pop3.uidl_format",
        );
    }
}
