use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `general.*`: settings every component shares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct General {
    /// Name used in greetings and generated certificates. Default: the
    /// machine's host name, or `localhost`.
    pub hostname: String,
    /// Where `yarilo single` and local-disk setups keep mail, users, keys and
    /// certificates. Default `./yarilo-data`.
    pub data_dir: String,
    /// How long sessions may run on after SIGTERM/SIGINT before the process
    /// exits anyway. Default 10.
    pub shutdown_grace_seconds: u64,
    pub haproxy: Haproxy,
    pub xclient: Xclient,
}

impl Default for General {
    fn default() -> Self {
        General {
            hostname: default_hostname(),
            data_dir: "./yarilo-data".to_string(),
            shutdown_grace_seconds: 10,
            haproxy: Haproxy::default(),
            xclient: Xclient::default(),
        }
    }
}

fn default_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

impl General {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.data_dir.is_empty() {
            return Err(ConfigError::invalid(
                "general.data_dir",
                "must not be empty",
            ));
        }
        if self.haproxy.timeout == 0 {
            return Err(ConfigError::invalid(
                "general.haproxy.timeout",
                "must be at least 1 second",
            ));
        }
        if self.haproxy.enabled && self.haproxy.trusted_nets.is_empty() {
            return Err(ConfigError::invalid(
                "general.haproxy.trusted_nets",
                "haproxy is enabled but no network is trusted to send PROXY headers",
            ));
        }
        Ok(())
    }
}

/// `general.haproxy.*`: HAProxy PROXY protocol (v1 and v2) on listeners that
/// set `haproxy_protocol: true`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Haproxy {
    /// Global switch for every `haproxy_protocol: true` listener. Default false.
    pub enabled: bool,
    /// Source networks whose PROXY headers are believed; from anyone else the
    /// header is ignored and the raw address used. Default empty.
    #[serde(alias = "haproxy_trusted_networks")]
    pub trusted_nets: Vec<IpNet>,
    /// Seconds to wait for the PROXY header. Default 3.
    pub timeout: u64,
}

impl Default for Haproxy {
    fn default() -> Self {
        Haproxy {
            enabled: false,
            trusted_nets: Vec::new(),
            timeout: 3,
        }
    }
}

/// `general.xclient.*`: who may tell yarilo the real client address.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Xclient {
    /// Global switch for every `xclient_protocol: true` listener: inbound
    /// XCLIENT (SMTP, LMTP, POP3, IMAP) and IMAP `ID` `x-originating-ip`
    /// from `trusted_nets`. Default false.
    pub enabled: bool,
    /// Peers whose forwarded client address is believed, and, with
    /// internal mTLS off, the login peers a backend accepts the preamble
    /// from. Default `[127.0.0.1/32, 10.0.0.0/8]` (the deployment seed's).
    pub trusted_nets: Vec<IpNet>,
}

impl Default for Xclient {
    fn default() -> Self {
        Xclient {
            enabled: false,
            trusted_nets: ["127.0.0.1/32", "10.0.0.0/8"]
                .iter()
                .filter_map(|n| n.parse().ok())
                .collect(),
        }
    }
}
