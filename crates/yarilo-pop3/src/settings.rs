use std::time::Duration;

use crate::uidl::UidlFormat;
use crate::Pop3Error;

/// Everything a POP3 server needs from the configuration. Restart-only.
#[derive(Debug, Clone)]
pub struct Pop3Settings {
    /// Name for logs and the APOP timestamp. Default: the host name.
    pub hostname: String,
    /// `pop3.uidl_format`. Default `%08Xu%08Xv`.
    pub uidl_format: UidlFormat,
    /// `pop3.enable_apop`. Default false (and only false works for now).
    pub enable_apop: bool,
    /// Silence allowed after login. Default 600 s.
    pub idle_timeout: Duration,
    /// Silence allowed before login (also bounds a SASL exchange). Default 180 s.
    pub login_timeout: Duration,
    /// Longest command line, line end excluded. Default 8192.
    pub max_line_length: usize,
    /// Bad commands before the connection is closed. Default 20.
    pub max_bad_commands: u32,
    /// Failed logins before the connection is closed. Default 3.
    pub max_auth_failures: u32,
    /// Text after `+OK ` in the greeting. Default `yarilo ready.`.
    pub login_greeting: String,
    /// CAPA `IMPLEMENTATION`; empty hides it. Default `yarilo`.
    pub implementation: String,
    /// Skip setting `\Seen` on retrieved messages at QUIT. Default false.
    pub no_flag_updates: bool,
}

impl Default for Pop3Settings {
    fn default() -> Self {
        let c = yarilo_config::Pop3::default();
        Pop3Settings {
            hostname: "localhost".to_string(),
            uidl_format: UidlFormat::default(),
            enable_apop: c.enable_apop,
            idle_timeout: Duration::from_secs(c.idle_timeout_seconds),
            login_timeout: Duration::from_secs(c.login_timeout_seconds),
            max_line_length: c.max_line_length,
            max_bad_commands: c.max_bad_commands,
            max_auth_failures: c.max_auth_failures,
            login_greeting: c.login_greeting,
            implementation: c.implementation,
            no_flag_updates: c.no_flag_updates,
        }
    }
}

impl Pop3Settings {
    /// From `pop3.*` and `general.hostname`; fails on a `uidl_format`
    /// that does not parse (the message names the key).
    pub fn from_config(config: &yarilo_config::Config) -> Result<Pop3Settings, Pop3Error> {
        let c = &config.pop3;
        if c.enable_apop {
            return Err(Pop3Error::Config {
                key: "enable_apop",
                message: "APOP is not available (no APOP mechanism in the auth engine)".into(),
            });
        }
        Ok(Pop3Settings {
            hostname: config.general.hostname.clone(),
            uidl_format: UidlFormat::parse(&c.uidl_format)?,
            enable_apop: c.enable_apop,
            idle_timeout: Duration::from_secs(c.idle_timeout_seconds),
            login_timeout: Duration::from_secs(c.login_timeout_seconds),
            max_line_length: c.max_line_length,
            max_bad_commands: c.max_bad_commands,
            max_auth_failures: c.max_auth_failures,
            login_greeting: c.login_greeting.clone(),
            implementation: c.implementation.clone(),
            no_flag_updates: c.no_flag_updates,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_config_reads_the_pop3_section() {
        let c = yarilo_config::Config::from_yaml(
            "pop3:\n  uidl_format: \"%v.%u\"\n  max_bad_commands: 5\n",
            "t.yaml",
        )
        .unwrap();
        let s = Pop3Settings::from_config(&c).unwrap();
        assert_eq!(s.uidl_format.as_str(), "%v.%u");
        assert_eq!(s.max_bad_commands, 5);
        assert_eq!(s.idle_timeout, Duration::from_secs(600));
    }

    #[test]
    fn a_bad_uidl_format_names_the_key() {
        let c =
            yarilo_config::Config::from_yaml("pop3:\n  uidl_format: \"%m\"\n", "t.yaml").unwrap();
        let e = Pop3Settings::from_config(&c).unwrap_err().to_string();
        assert!(e.starts_with("pop3.uidl_format"), "{e}");
    }

    #[test]
    fn unknown_pop3_keys_are_refused() {
        assert!(yarilo_config::Config::from_yaml("pop3:\n  uidl_fromat: x\n", "t.yaml").is_err());
    }
}
