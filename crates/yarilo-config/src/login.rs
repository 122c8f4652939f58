//! `login.*`: the login proxies (`yarilo imap-login`, `pop3-login`, …) and
//! the login → backend hop they share with the backends (`yarilo imap`, …).
//!
//! Routing is per protocol (`login.imap.backend_addr`, …) because one file
//! may configure several login components; in Kubernetes each login pod
//! gets its own file and only its protocol's entry matters. Whether a
//! protocol's route is usable (at least one of `backend_addr` and
//! `director_addr`) is checked when that login component starts, not here:
//! a file for an auth pod need not route anything. All settings are
//! restart-only.

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `login.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Login {
    /// Bound on dialling a backend (TCP connect and internal TLS
    /// handshake), in ms. Default 5000.
    pub connect_timeout_ms: u64,
    /// How long a login proxy waits for the backend's first line after the
    /// preamble (the backend VERIFYs the token and opens the mailbox
    /// meanwhile), in ms. Default 30000.
    pub backend_answer_timeout_ms: u64,
    /// How long a backend waits for the preamble after accepting a
    /// connection, in ms. Default 5000.
    pub preamble_timeout_ms: u64,
    /// How long a login waits for the director's answer to a LOOKUP once
    /// connected, in ms. Longer than the director's confirmed-kill hold
    /// (`director_service.user_kill_timeout`), so a user being moved waits
    /// for the hold instead of failing. Default 35000.
    pub lookup_timeout_ms: u64,
    /// Bound on the PROXY header and the client TLS handshake (implicit
    /// TLS and STARTTLS), in seconds. Default 30.
    pub handshake_timeout_seconds: u64,
    /// Cap on the delay a login proxy puts before answering a failed
    /// authentication, from warden's per-IP failure count (`n` failures:
    /// 2 s · 2^(n-1), at most this), in ms. 0 turns the warden delay off
    /// (the protocol's own delay still applies). Only with
    /// `warden_client.enabled`. Default 15000.
    pub warden_penalty_max_delay_ms: u64,
    /// `imap-login` → `yarilo imap`.
    pub imap: LoginRoute,
    /// `pop3-login` → `yarilo pop3`.
    pub pop3: LoginRoute,
    /// `submission-login` → `yarilo submission`.
    pub submission: LoginRoute,
    /// `lmtp-login` → `yarilo lmtp`.
    pub lmtp: LoginRoute,
    /// `managesieve-login` → `yarilo managesieve`.
    pub managesieve: LoginRoute,
}

impl Default for Login {
    fn default() -> Self {
        Login {
            connect_timeout_ms: 5000,
            backend_answer_timeout_ms: 30_000,
            preamble_timeout_ms: 5000,
            lookup_timeout_ms: 35_000,
            handshake_timeout_seconds: 30,
            warden_penalty_max_delay_ms: 15_000,
            imap: LoginRoute::default(),
            pop3: LoginRoute::default(),
            submission: LoginRoute::default(),
            lmtp: LoginRoute::default(),
            managesieve: LoginRoute::default(),
        }
    }
}

/// Where one protocol's login proxy sends authenticated sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoginRoute {
    /// `host:port` of the protocol backend (standalone shape). Wins over
    /// `director_addr` when both are set. Default empty.
    pub backend_addr: String,
    /// `host:port` of the director's LOOKUP port (director shape).
    /// Default empty.
    pub director_addr: String,
    /// The port dialled on the backend a director LOOKUP names, whatever
    /// the LOOKUP said; 0: the LOOKUP's port when it gives one (a static
    /// backend listed with a port), else this login's own protocol port
    /// (`services.<proto>.port`). Default 0.
    pub backend_port: u16,
    /// The tag pool of this login's LOOKUPs for users whose passdb/userdb
    /// gives no `director_tag` field (a per-user field wins). Default
    /// empty: the untagged pool.
    pub director_tag: String,
}

/// How a login proxy routes, resolved from a [`LoginRoute`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteTarget {
    /// Every session to this `host:port`.
    Backend(String),
    /// Ask the director at this `host:port`.
    Director(String),
}

impl LoginRoute {
    /// The route in effect; `Err` (a message naming `key`) when neither
    /// address is set.
    pub fn target(&self, key: &str) -> Result<RouteTarget, ConfigError> {
        // Both set is legal: backend_addr wins (the login component warns).
        if !self.backend_addr.is_empty() {
            return Ok(RouteTarget::Backend(self.backend_addr.clone()));
        }
        if !self.director_addr.is_empty() {
            return Ok(RouteTarget::Director(self.director_addr.clone()));
        }
        Err(ConfigError::invalid(
            format!("{key}.backend_addr"),
            format!("set {key}.backend_addr (standalone) or {key}.director_addr (director)"),
        ))
    }

    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        for (k, v) in [
            ("backend_addr", &self.backend_addr),
            ("director_addr", &self.director_addr),
        ] {
            if !v.is_empty() && !is_host_port(v) {
                return Err(ConfigError::invalid(
                    format!("{key}.{k}"),
                    format!("`{v}` is not host:port"),
                ));
            }
        }
        Ok(())
    }
}

fn is_host_port(s: &str) -> bool {
    s.rsplit_once(':')
        .and_then(|(h, p)| (!h.is_empty()).then_some(p))
        .and_then(|p| p.parse::<u16>().ok())
        .is_some_and(|p| p != 0)
}

impl Login {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (k, v) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("backend_answer_timeout_ms", self.backend_answer_timeout_ms),
            ("preamble_timeout_ms", self.preamble_timeout_ms),
            ("lookup_timeout_ms", self.lookup_timeout_ms),
            ("handshake_timeout_seconds", self.handshake_timeout_seconds),
        ] {
            if v == 0 {
                return Err(ConfigError::invalid(
                    format!("login.{k}"),
                    "must be greater than 0",
                ));
            }
        }
        self.imap.validate("login.imap")?;
        self.pop3.validate("login.pop3")?;
        self.submission.validate("login.submission")?;
        self.lmtp.validate("login.lmtp")?;
        self.managesieve.validate("login.managesieve")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn backend_addr_wins_and_one_route_is_required() {
        let c = Config::from_yaml(
            "login:\n  imap:\n    backend_addr: \"10.0.0.5:143\"\n    director_addr: \"dir:9100\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            c.login.imap.target("login.imap").unwrap(),
            RouteTarget::Backend("10.0.0.5:143".into())
        );
        let e = c.login.pop3.target("login.pop3").unwrap_err();
        assert!(e.to_string().contains("login.pop3.backend_addr"), "{e}");
    }

    #[test]
    fn malformed_addresses_and_zero_timeouts_name_their_key() {
        let e = Config::from_yaml("login:\n  imap:\n    backend_addr: nohost\n", "t").unwrap_err();
        assert!(e.to_string().contains("login.imap.backend_addr"), "{e}");
        let e = Config::from_yaml("login:\n  preamble_timeout_ms: 0\n", "t").unwrap_err();
        assert!(e.to_string().contains("login.preamble_timeout_ms"), "{e}");
        assert!(Config::from_yaml("login:\n  imap:\n    bogus: 1\n", "t").is_err());
    }
}
