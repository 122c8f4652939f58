//! The `yarilo.yaml` schema.
//!
//! One YAML file configures every component. Keys are snake_case and
//! section-prefixed as the design documents name them
//! (`services.imaps.port`, `telemetry.listen`, `internal_tls.server_name`).
//! Every struct denies unknown fields, so a misspelt key is an error that
//! names its full path and the line it is on, never a silently ignored value.
//!
//! Adding a section: write it in its own module (`store.rs`, `auth.rs`, …)
//! with `#[serde(default, deny_unknown_fields)]`, add one field to
//! [`Config`], and call its `validate` from [`Config::validate`]. Document
//! every key with its default in `docs/configuration.md`.

mod auth;
mod director;
mod error;
mod general;
mod imap;
mod listen;
mod lmtp;
mod locks;
mod log;
mod login;
mod pop3;
mod quota_status;
mod secret;
mod services;
mod store;
mod submission;
mod telemetry;
mod tls;
mod warden;
mod yaml;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use auth::{
    Auth, AuthClient, AuthService, DbDriver, DbEntry, TokenStoreKind, DEFAULT_USERNAME_CHARS,
};
pub use director::{
    AssignmentPolicy, BackendRegister, DirectorApi, DirectorService, HashMode, MailServer,
};
pub use error::ConfigError;
pub use general::{General, Haproxy, Xclient};
pub use imap::Imap;
pub use listen::parse_listen;
pub use lmtp::LmtpConfig;
pub use locks::{LocksClient, LocksMode, LocksService};
pub use log::{LogConfig, LogFormat};
pub use login::{Login, LoginRoute, RouteTarget};
pub use pop3::Pop3;
pub use quota_status::QuotaStatus;
pub use secret::Secret;
/// The one YAML parser of the workspace (`deny.toml` keeps `serde_yaml`
/// behind this crate): the lab reads scenarios and manifests through it.
pub use serde_yaml;
pub use services::{Service, ServiceName, Services, SslMode};
pub use store::{StoreConfig, StoreMailbox};
pub use submission::{RelaySsl, SubmissionConfig};
pub use telemetry::{LivenessWatchdog, Pprof, Readiness, Telemetry};
pub use tls::{CertPair, ClientTls, InternalTls};
pub use warden::{WardenClient, WardenLimits, WardenService, WardenStateBackend};

/// Where the configuration is read from when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/yarilo/yarilo.yaml";

/// The whole configuration file. Every section has a default, so an empty
/// file is a valid configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub general: General,
    pub log: LogConfig,
    pub services: Services,
    pub telemetry: Telemetry,
    /// Certificates for the client-facing listeners.
    pub tls: ClientTls,
    /// mTLS between internal components.
    pub internal_tls: InternalTls,
    /// The director: routing core, static backends, ring (`director_service.*`).
    pub director_service: DirectorService,
    /// The backend-reg sidecar (`backend_register.*`).
    pub backend_register: BackendRegister,
    /// The yarilo-locks process (`locks_service.*`).
    pub locks_service: LocksService,
    /// How session processes reach yarilo-locks (`locks_client.*`).
    pub locks_client: LocksClient,
    /// The yarilo-warden process (`warden_service.*`).
    pub warden_service: WardenService,
    /// How login proxies and sessions reach warden (`warden_client.*`).
    pub warden_client: WardenClient,
    /// Authentication settings (`auth.*`).
    pub auth: Auth,
    /// The passdb chain; empty means one passwd-file at `<data_dir>/users`.
    pub passdb: Vec<DbEntry>,
    /// The userdb chain; empty means the passwd-file at `<data_dir>/users`.
    pub userdb: Vec<DbEntry>,
    /// The `yarilo auth` listener.
    pub auth_service: AuthService,
    /// How components reach `yarilo auth`.
    pub auth_client: AuthClient,
    /// The mail store: `mail_location`, special-use mailboxes (`store.*`).
    pub store: StoreConfig,
    /// The POP3 session (`pop3.*`).
    pub pop3: Pop3,
    /// LMTP delivery (`lmtp.*`).
    pub lmtp: LmtpConfig,
    /// The Postfix quota policy service (`quota_status.*`).
    pub quota_status: QuotaStatus,
    /// Message submission and its relay (`submission.*`).
    pub submission: SubmissionConfig,
    /// The IMAP session (`imap.*`).
    pub imap: Imap,
    /// Login proxies and the login → backend hop (`login.*`).
    pub login: Login,
}

impl Config {
    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text, &path.display().to_string())
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = yaml::parse(text, origin)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values that parse but cannot work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.general.validate()?;
        self.log.validate()?;
        self.services.validate()?;
        self.telemetry.validate()?;
        self.tls.validate()?;
        self.internal_tls.validate()?;
        self.director_service.validate()?;
        self.backend_register.validate()?;
        self.locks_service.validate()?;
        self.locks_client.validate()?;
        self.warden_service.validate()?;
        self.warden_client.validate()?;
        self.auth.validate()?;
        auth::validate_chains(&self.passdb, &self.userdb)?;
        self.auth_service.validate()?;
        self.auth_client.validate()?;
        self.store.validate()?;
        self.pop3.validate()?;
        self.lmtp.validate()?;
        self.quota_status.validate()?;
        self.submission.validate()?;
        self.imap.validate()?;
        self.login.validate()?;
        // A LOOKUP held by the director must not time out at the login
        // first (both keys in one file: the shape the charts render).
        if self.login.lookup_timeout_ms <= self.director_service.user_kill_timeout * 1000 {
            return Err(ConfigError::invalid(
                "login.lookup_timeout_ms",
                format!(
                    "must be longer than director_service.user_kill_timeout ({} s), or a login \
                     gives up on a user the director is still holding",
                    self.director_service.user_kill_timeout
                ),
            ));
        }
        Ok(())
    }

    /// The effective configuration with every default filled in, as YAML.
    /// Secrets are replaced by a marker.
    pub fn to_yaml(&self) -> Result<String, ConfigError> {
        yaml::render(self)
    }
}

#[cfg(test)]
mod tests;
