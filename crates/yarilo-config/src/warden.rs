//! `warden_service.*` (the yarilo-warden process) and `warden_client.*`
//! (login proxies and session processes). mTLS material comes from
//! `internal_tls`. All settings are restart-only.

use serde::{Deserialize, Serialize};

use crate::{parse_listen, ConfigError, Secret};

/// Where warden keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WardenStateBackend {
    /// In the process: exactly one replica.
    #[default]
    Memory,
    /// Shared Redis: any number of replicas.
    Redis,
}

/// `warden_service.limits.*`. 0 means "no limit".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WardenLimits {
    /// Concurrent pre-auth connections per client IP. Default 50.
    pub max_connections_per_ip: u64,
    /// Concurrent sessions per user (all IPs). Default 0 (no limit).
    pub max_sessions_per_user: u64,
    /// Concurrent sessions per user from one IP (`user@ip`; the
    /// `connection_limit` of the design). Default 10.
    pub max_sessions_per_user_ip: u64,
    /// Auth failures per IP after which logins from it are refused.
    /// Default 10.
    pub max_auth_failures: u64,
    /// How long an IP's failure count lives after its last failure, in
    /// seconds. Default 300.
    pub penalty_ttl_s: u64,
    /// Concurrent LMTP deliveries per user through `lmtp-login` (checked
    /// per RCPT; a recipient over it gets 451 4.7.0 and the MTA retries).
    /// Counted apart from sessions. Default 10.
    pub max_deliveries_per_user: u64,
}

impl Default for WardenLimits {
    fn default() -> Self {
        WardenLimits {
            max_connections_per_ip: 50,
            max_sessions_per_user: 0,
            max_sessions_per_user_ip: 10,
            max_auth_failures: 10,
            penalty_ttl_s: 300,
            max_deliveries_per_user: 10,
        }
    }
}

/// `warden_service.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WardenService {
    /// TCP listen address. Default `:9105`.
    pub listen: String,
    /// `memory` (default) or `redis`.
    pub state_backend: WardenStateBackend,
    /// Replicas the deployment runs (the chart renders it). With
    /// `memory`, anything but 1 refuses to start. Default 1.
    pub replicas: u32,
    /// Redis URL for `state_backend: redis`. Default `redis://127.0.0.1:6379/0`.
    pub redis: Secret,
    /// Bound on each Redis call, in ms. Default 500.
    pub redis_timeout_ms: u64,
    /// Prefix of every Redis key and the kick channel. Default `warden:`.
    pub redis_prefix: String,
    /// How often the sweep drops entries of dead replicas and reconciles
    /// counters with their hashes, in seconds. Default 30.
    pub reconcile_interval_s: u64,
    /// Concurrent client connections accepted. Default 4096.
    pub max_connections: usize,
    /// Name this replica logs as (`pod=`). Default: the HOSTNAME
    /// environment variable, else `warden`.
    pub pod: String,
    pub limits: WardenLimits,
}

impl Default for WardenService {
    fn default() -> Self {
        WardenService {
            listen: ":9105".into(),
            state_backend: WardenStateBackend::Memory,
            replicas: 1,
            redis: Secret::new("redis://127.0.0.1:6379/0"),
            redis_timeout_ms: 500,
            redis_prefix: "warden:".into(),
            reconcile_interval_s: 30,
            max_connections: 4096,
            pod: String::new(),
            limits: WardenLimits::default(),
        }
    }
}

impl WardenService {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("warden_service.{k}");
        parse_listen(&self.listen).map_err(|m| ConfigError::invalid(key("listen"), m))?;
        if self.replicas == 0 {
            return Err(ConfigError::invalid(key("replicas"), "must be at least 1"));
        }
        if self.state_backend == WardenStateBackend::Memory && self.replicas > 1 {
            return Err(ConfigError::invalid(
                key("state_backend"),
                format!(
                    "`memory` keeps state in one process, but replicas is {}: \
                     set state_backend: redis before running more than one replica",
                    self.replicas
                ),
            ));
        }
        for (k, v) in [
            ("redis_timeout_ms", self.redis_timeout_ms),
            ("reconcile_interval_s", self.reconcile_interval_s),
            ("limits.penalty_ttl_s", self.limits.penalty_ttl_s),
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
        Ok(())
    }
}

/// `warden_client.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WardenClient {
    /// Whether login proxies talk to warden at all: CONNECT/DISCONNECT
    /// per client connection, the auth-failure penalty, per-user session
    /// limits and the kick bus. Off (default), a login process never
    /// dials warden and enforces none of its limits.
    pub enabled: bool,
    /// `host:port` of warden, tried in order with failover. Default
    /// `["127.0.0.1:9105"]`.
    pub endpoints: Vec<String>,
    /// Dial and handshake bound per endpoint, in ms. Default 2000.
    pub connect_timeout_ms: u64,
    /// Bound on one request's answer, in ms. Default 2000.
    pub request_timeout_ms: u64,
    /// What a login proxy does when warden cannot be reached (no answer
    /// within the timeouts): true (default) admits the connection or
    /// session (fail-open), false refuses it.
    pub fail_open: bool,
}

impl Default for WardenClient {
    fn default() -> Self {
        WardenClient {
            enabled: false,
            endpoints: vec!["127.0.0.1:9105".into()],
            connect_timeout_ms: 2000,
            request_timeout_ms: 2000,
            fail_open: true,
        }
    }
}

impl WardenClient {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.endpoints.is_empty() {
            return Err(ConfigError::invalid(
                "warden_client.endpoints",
                "at least one host:port is required",
            ));
        }
        for (k, v) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::invalid(
                    format!("warden_client.{k}"),
                    "must be greater than 0",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn memory_backend_with_two_replicas_is_refused() {
        let e = Config::from_yaml("warden_service:\n  replicas: 2\n", "t").unwrap_err();
        assert!(
            e.to_string().contains("warden_service.state_backend"),
            "{e}"
        );
        let c = Config::from_yaml(
            "warden_service:\n  replicas: 2\n  state_backend: redis\n  limits:\n    max_connections_per_ip: 3\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.warden_service.limits.max_connections_per_ip, 3);
        assert_eq!(c.warden_service.limits.max_sessions_per_user_ip, 10);
    }
}
