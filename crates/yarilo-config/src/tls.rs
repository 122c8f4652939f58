use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `tls.*`: certificates for client-facing listeners (IMAPS, STARTTLS, …).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTls {
    /// PEM certificate chain. Empty (default): a self-signed certificate is
    /// generated under `<general.data_dir>/tls/` on first start and reused.
    pub cert: String,
    /// PEM private key belonging to `cert`.
    pub key: String,
    /// Lowest protocol version accepted: `1.2` (default) or `1.3`.
    pub min_version: String,
    /// More certificates, chosen by the client's SNI against their DNS
    /// names. Default empty.
    pub sni: Vec<CertPair>,
    /// Seconds between checks of the certificate files for changes
    /// (SIGHUP reloads at once). 0 disables polling. Default 60.
    pub reload_interval_seconds: u64,
}

/// One certificate and its key, PEM files.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertPair {
    pub cert: String,
    pub key: String,
}

impl Default for ClientTls {
    fn default() -> Self {
        ClientTls {
            cert: String::new(),
            key: String::new(),
            min_version: "1.2".to_string(),
            sni: Vec::new(),
            reload_interval_seconds: 60,
        }
    }
}

impl ClientTls {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.cert.is_empty() != self.key.is_empty() {
            return Err(ConfigError::invalid(
                "tls",
                "set both tls.cert and tls.key, or neither (a self-signed pair is then generated)",
            ));
        }
        if !self.sni.is_empty() && self.cert.is_empty() {
            return Err(ConfigError::invalid(
                "tls.sni",
                "SNI certificates need a default certificate in tls.cert/tls.key",
            ));
        }
        if !matches!(self.min_version.as_str(), "1.2" | "1.3") {
            return Err(ConfigError::invalid(
                "tls.min_version",
                format!("`{}` is not 1.2 or 1.3", self.min_version),
            ));
        }
        Ok(())
    }
}

/// `internal_tls.*`: mutual TLS between yarilo components.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InternalTls {
    /// Default false: internal connections are plain TCP (acceptable behind
    /// a service mesh).
    pub enabled: bool,
    /// PEM certificate presented to peers, both as server and as client.
    pub cert: String,
    pub key: String,
    /// PEM CA bundle peers' certificates must chain to.
    pub ca: String,
    /// The one name every internal client verifies the server certificate
    /// against, whatever address it dialled. Required when enabled.
    pub server_name: String,
}

impl InternalTls {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        for (key, value) in [("cert", &self.cert), ("key", &self.key), ("ca", &self.ca)] {
            if value.is_empty() {
                return Err(ConfigError::invalid(
                    format!("internal_tls.{key}"),
                    "is required when internal_tls.enabled is true",
                ));
            }
        }
        if self.server_name.is_empty() {
            return Err(ConfigError::invalid(
                "internal_tls.server_name",
                "is required when internal_tls.enabled is true: set it to the stable SAN \
                 every internal certificate carries (`yarctl certs init` writes one)",
            ));
        }
        Ok(())
    }
}
