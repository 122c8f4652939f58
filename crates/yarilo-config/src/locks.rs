//! `locks_service.*` (the yarilo-locks process) and `locks_client.*` (every
//! session process that writes to the store). mTLS material comes from
//! `internal_tls`; nothing here holds keys. All settings are restart-only.

use serde::{Deserialize, Serialize};

use crate::{parse_listen, ConfigError, Secret};

/// Where lock state lives and how the service is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LocksMode {
    /// In-memory state, unix socket. Dev, CI, non-Kubernetes single hosts.
    #[default]
    Embedded,
    /// Redis state, TCP (+ mTLS with `internal_tls.enabled`). Every
    /// Kubernetes deployment, whatever its replica count.
    Remote,
}

/// `locks_service.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocksService {
    /// `embedded` (default) or `remote`.
    pub mode: LocksMode,
    /// TCP listen address in remote mode. Default `:9104`.
    pub listen: String,
    /// Unix socket path in embedded mode. Default `/run/yarilo/locks.sock`.
    pub socket: String,
    /// Redis URL in remote mode (may carry a password, hence a secret).
    /// Default `redis://127.0.0.1:6379/0`.
    pub redis: Secret,
    /// Bound on each Redis call and dial, and on the readiness ping, in ms.
    /// Default 1000.
    pub redis_timeout_ms: u64,
    /// Redis pub/sub channel carrying EVENTs between replicas.
    /// Default `yarilo:locks:events`.
    pub events_channel: String,
    /// Longest lease a client may ask for, in ms. Default 300000 (5 min).
    pub max_ttl_ms: u64,
    /// How often the embedded table drops expired entries, in ms.
    /// Default 1000.
    pub sweep_interval_ms: u64,
    /// Concurrent client connections accepted. Default 4096.
    pub max_connections: usize,
}

impl Default for LocksService {
    fn default() -> Self {
        LocksService {
            mode: LocksMode::Embedded,
            listen: ":9104".into(),
            socket: "/run/yarilo/locks.sock".into(),
            redis: Secret::new("redis://127.0.0.1:6379/0"),
            redis_timeout_ms: 1000,
            events_channel: "yarilo:locks:events".into(),
            max_ttl_ms: 300_000,
            sweep_interval_ms: 1000,
            max_connections: 4096,
        }
    }
}

impl LocksService {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("locks_service.{k}");
        match self.mode {
            LocksMode::Remote => {
                parse_listen(&self.listen).map_err(|m| ConfigError::invalid(key("listen"), m))?;
                if !self.redis.expose().starts_with("redis://")
                    && !self.redis.expose().starts_with("rediss://")
                    && !self.redis.expose().starts_with("redis+unix://")
                    && !self.redis.expose().starts_with("unix://")
                {
                    return Err(ConfigError::invalid(
                        key("redis"),
                        "must be a redis://, rediss:// or unix:// URL",
                    ));
                }
            }
            LocksMode::Embedded => {
                if self.socket.is_empty() {
                    return Err(ConfigError::invalid(key("socket"), "must not be empty"));
                }
            }
        }
        for (k, v) in [
            ("redis_timeout_ms", self.redis_timeout_ms),
            ("max_ttl_ms", self.max_ttl_ms),
            ("sweep_interval_ms", self.sweep_interval_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::invalid(key(k), "must be greater than 0"));
            }
        }
        if self.max_connections == 0 {
            return Err(ConfigError::invalid(
                key("max_connections"),
                "must be greater than 0",
            ));
        }
        if self.events_channel.is_empty() {
            return Err(ConfigError::invalid(
                key("events_channel"),
                "must not be empty",
            ));
        }
        Ok(())
    }
}

/// `locks_client.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocksClient {
    /// `embedded` (default: the unix socket) or `remote` (the endpoints).
    pub mode: LocksMode,
    /// `host:port` of the locks service, tried in order with failover.
    /// Required in remote mode. Default empty.
    pub endpoints: Vec<String>,
    /// Unix socket of an embedded locks service.
    /// Default `/run/yarilo/locks.sock`.
    pub socket: String,
    /// Dial and handshake bound per endpoint, in ms. Default 2000.
    pub connect_timeout_ms: u64,
    /// Bound on one request's answer, in ms. Default 5000.
    pub request_timeout_ms: u64,
    /// Lease taken per lock, renewed every third of it. Default 30000.
    pub ttl_ms: u64,
    /// How long a writer waits for a busy lock, in ms. Default 30000.
    pub wait_ms: u64,
}

impl Default for LocksClient {
    fn default() -> Self {
        LocksClient {
            mode: LocksMode::Embedded,
            endpoints: Vec::new(),
            socket: "/run/yarilo/locks.sock".into(),
            connect_timeout_ms: 2000,
            request_timeout_ms: 5000,
            ttl_ms: 30_000,
            wait_ms: 30_000,
        }
    }
}

impl LocksClient {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("locks_client.{k}");
        match self.mode {
            LocksMode::Remote => {
                if self.endpoints.is_empty() {
                    return Err(ConfigError::invalid(
                        key("endpoints"),
                        "at least one host:port is required in remote mode",
                    ));
                }
                for e in &self.endpoints {
                    if e.rsplit_once(':')
                        .and_then(|(h, p)| (!h.is_empty()).then_some(p))
                        .and_then(|p| p.parse::<u16>().ok())
                        .is_none()
                    {
                        return Err(ConfigError::invalid(
                            key("endpoints"),
                            format!("`{e}` is not host:port"),
                        ));
                    }
                }
            }
            LocksMode::Embedded => {
                if self.socket.is_empty() {
                    return Err(ConfigError::invalid(key("socket"), "must not be empty"));
                }
            }
        }
        for (k, v) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
            ("ttl_ms", self.ttl_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::invalid(key(k), "must be greater than 0"));
            }
        }
        if self.ttl_ms < 30 {
            return Err(ConfigError::invalid(
                key("ttl_ms"),
                "must be at least 30 (renewal runs every third of it)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn design_document_examples_parse() {
        let c = Config::from_yaml(
            "locks_service:\n  mode: remote\n  listen: \":9104\"\n  redis: \"redis://redis:6379/0\"\n\
             locks_client:\n  mode: remote\n  endpoints: [\"yarilo-locks.yarilo.svc.cluster.local:9104\"]\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.locks_service.mode, super::LocksMode::Remote);
        assert_eq!(c.locks_client.endpoints.len(), 1);
        let c = Config::from_yaml(
            "locks_service:\n  mode: embedded\n  socket: /run/yarilo/locks.sock\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.locks_service.socket, "/run/yarilo/locks.sock");
    }

    #[test]
    fn remote_client_without_endpoints_is_refused() {
        let e = Config::from_yaml("locks_client:\n  mode: remote\n", "t").unwrap_err();
        assert!(e.to_string().contains("locks_client.endpoints"), "{e}");
        assert!(Config::from_yaml("locks_service:\n  bogus: 1\n", "t").is_err());
    }
}
