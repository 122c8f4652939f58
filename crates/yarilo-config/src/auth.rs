//! `auth.*`, `passdb`, `userdb`, `auth_service.*` and `auth_client.*`:
//! authentication. Names follow Dovecot 2.3 (`auth_mechanisms`,
//! `disable_plaintext_auth`, `auth_cache_ttl`, `passdb { driver args }`)
//! with units spelt out in the key.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::{parse_listen, ConfigError, Secret};

/// `auth.*`: how logins are checked, wherever the authenticator runs
/// (in-process in `single`, in `yarilo auth` in a cluster).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Auth {
    /// SASL mechanisms offered, upper case. Default
    /// `[PLAIN, LOGIN, SCRAM-SHA-256, SCRAM-SHA-1]`. `CRAM-MD5` works only
    /// with passwords stored as PLAIN or CRAM-MD5; SCRAM only with PLAIN or
    /// the matching SCRAM scheme.
    pub mechanisms: Vec<String>,
    /// Refuse plaintext mechanisms (PLAIN, LOGIN) on connections that are
    /// neither TLS nor from loopback / `auth.trusted_nets`. Default true.
    pub disable_plaintext_auth: bool,
    /// Client networks treated as secured for `disable_plaintext_auth`
    /// (Dovecot's `login_trusted_networks`). Loopback always is. Default empty.
    pub trusted_nets: Vec<IpNet>,
    /// Scheme for stored passwords without a `{SCHEME}` prefix (per passdb
    /// `default_pass_scheme` overrides it). Default `PLAIN`.
    pub default_pass_scheme: String,
    /// Scheme `yarctl user add` and `yarctl pw` use. Default `ARGON2ID`.
    pub new_pass_scheme: String,
    /// Seconds a failed authentication waits before it is answered.
    /// Default 2 (Dovecot's `auth_failure_delay`).
    pub auth_failure_delay_seconds: u64,
    /// Per-client-IP penalty: after failures from an IP, each further
    /// attempt first waits 2^(failures-1) seconds, at most this many.
    /// 0 disables it. Default 15. Loopback and trusted nets are exempt.
    pub auth_penalty_max_seconds: u64,
    /// Seconds a client IP's failure count is remembered. Default 3600.
    pub auth_penalty_window_seconds: u64,
    /// Entries in the passdb/userdb lookup cache; 0 disables the cache.
    /// Default 0 (as Dovecot's `auth_cache_size`).
    pub auth_cache_size: usize,
    /// Seconds a found user stays cached. Default 3600.
    pub auth_cache_ttl_seconds: u64,
    /// Seconds an unknown user stays cached. Default 3600.
    pub auth_cache_negative_ttl_seconds: u64,
    /// Characters allowed in user names; empty allows all. Default
    /// Dovecot's `a-zA-Z0-9.-_@` (so `' OR 1=1 --` is refused before any
    /// passdb sees it).
    pub username_chars: String,
    /// Lower-case user names before lookup (Dovecot `auth_username_format = %Lu`).
    /// Default true.
    pub username_lowercase: bool,
    /// Longest user name accepted, in bytes. Default 255.
    pub max_username_length: usize,
    /// Seconds an AUTH token stays valid for VERIFY. Default 30.
    pub token_ttl_seconds: u64,
    /// Threads hashing slow schemes (crypt, Argon2, PBKDF2) at once; 0 means
    /// the number of CPUs. Default 0.
    pub hash_workers: usize,
    /// Seconds one SASL exchange may stay open between steps. Default 60.
    pub exchange_timeout_seconds: u64,
    /// Where login tokens live: `memory` (default; one auth process, as in
    /// `single`) or `redis` (shared by every `yarilo auth` replica, so
    /// VERIFY may reach any of them).
    pub token_store: TokenStoreKind,
    /// Redis URL for `token_store: redis` (may be `env:NAME`). Default
    /// `redis://127.0.0.1:6379/0`.
    pub token_redis: Secret,
    /// Bound on each Redis call and dial for tokens, ms. Default 1000.
    pub token_redis_timeout_ms: u64,
}

/// `auth.token_store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenStoreKind {
    #[default]
    Memory,
    Redis,
}

impl Default for Auth {
    fn default() -> Self {
        Auth {
            mechanisms: ["PLAIN", "LOGIN", "SCRAM-SHA-256", "SCRAM-SHA-1"]
                .map(String::from)
                .to_vec(),
            disable_plaintext_auth: true,
            trusted_nets: Vec::new(),
            default_pass_scheme: "PLAIN".to_string(),
            new_pass_scheme: "ARGON2ID".to_string(),
            auth_failure_delay_seconds: 2,
            auth_penalty_max_seconds: 15,
            auth_penalty_window_seconds: 3600,
            auth_cache_size: 0,
            auth_cache_ttl_seconds: 3600,
            auth_cache_negative_ttl_seconds: 3600,
            username_chars: DEFAULT_USERNAME_CHARS.to_string(),
            username_lowercase: true,
            max_username_length: 255,
            token_ttl_seconds: 30,
            hash_workers: 0,
            exchange_timeout_seconds: 60,
            token_store: TokenStoreKind::Memory,
            token_redis: Secret::new("redis://127.0.0.1:6379/0"),
            token_redis_timeout_ms: 1000,
        }
    }
}

/// Dovecot's default `auth_username_chars`.
pub const DEFAULT_USERNAME_CHARS: &str =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01234567890.-_@";

const MECHANISMS: &[&str] = &["PLAIN", "LOGIN", "CRAM-MD5", "SCRAM-SHA-1", "SCRAM-SHA-256"];

impl Auth {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for m in &self.mechanisms {
            if !MECHANISMS.contains(&m.as_str()) {
                return Err(ConfigError::invalid(
                    "auth.mechanisms",
                    format!("`{m}` is not one of {}", MECHANISMS.join(", ")),
                ));
            }
        }
        if self.token_ttl_seconds == 0 {
            return Err(ConfigError::invalid(
                "auth.token_ttl_seconds",
                "must be at least 1",
            ));
        }
        if self.max_username_length == 0 {
            return Err(ConfigError::invalid(
                "auth.max_username_length",
                "must be at least 1",
            ));
        }
        if self.token_store == TokenStoreKind::Redis {
            let url = self.token_redis.expose();
            if !["redis://", "rediss://", "unix://", "redis+unix://"]
                .iter()
                .any(|p| url.starts_with(p))
            {
                return Err(ConfigError::invalid(
                    "auth.token_redis",
                    "must be a redis://, rediss:// or unix:// URL",
                ));
            }
            if self.token_redis_timeout_ms == 0 {
                return Err(ConfigError::invalid(
                    "auth.token_redis_timeout_ms",
                    "must be at least 1",
                ));
            }
        }
        if self.exchange_timeout_seconds == 0 {
            return Err(ConfigError::invalid(
                "auth.exchange_timeout_seconds",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Which backend a `passdb` / `userdb` entry reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DbDriver {
    /// Dovecot passwd-file: `args` is the path.
    #[serde(rename = "passwd-file")]
    PasswdFile,
    /// SQL through `connect`; queries in `*_query`.
    #[serde(rename = "sql")]
    Sql,
    /// Fields given in `args` (`uid=vmail home=/srv/mail/%d/%n`, or for a
    /// passdb `password=…` / `nopassword=y`).
    #[serde(rename = "static")]
    Static,
}

/// One entry of the `passdb` or `userdb` chain. Entries are tried in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DbEntry {
    pub driver: DbDriver,
    /// passwd-file: the file path (default `<general.data_dir>/users`);
    /// static: space-separated `key=value` template fields. Default empty.
    #[serde(default)]
    pub args: String,
    /// Scheme of stored passwords without a `{SCHEME}` prefix; empty means
    /// `auth.default_pass_scheme`. Default empty.
    #[serde(default)]
    pub default_pass_scheme: String,
    /// sql: sqlx URL, `sqlite:///path`, `postgres://…`, `mysql://…`
    /// (may be `env:NAME` / `file:/path`). Default empty.
    #[serde(default)]
    pub connect: Secret,
    /// sql passdb: returns `password` and any extra columns as extra
    /// fields. `%u %n %d %r %s` are bound as parameters. Default
    /// `SELECT password FROM users WHERE username = '%u'`.
    #[serde(default)]
    pub passdb_sql_query: String,
    /// sql userdb: returns `home`, `uid`, `gid`, `mail`, … as fields.
    /// Default `SELECT home, uid, gid FROM users WHERE username = '%u'`.
    #[serde(default)]
    pub userdb_sql_query: String,
    /// sql, for `yarctl user list`: one column with the user name. Default
    /// `SELECT username FROM users`.
    #[serde(default)]
    pub iterate_query: String,
    /// sql, for `yarctl user add`: `%u` and `%w` (the hashed password).
    /// Default `INSERT INTO users (username, password) VALUES ('%u', '%w')`.
    #[serde(default)]
    pub insert_query: String,
    /// sql, for `yarctl user passwd`. Default
    /// `UPDATE users SET password = '%w' WHERE username = '%u'`.
    #[serde(default)]
    pub update_query: String,
    /// sql, for `yarctl user del`. Default `DELETE FROM users WHERE username = '%u'`.
    #[serde(default)]
    pub delete_query: String,
    /// sql: connections kept open. Default 4.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
}

fn default_pool_size() -> u32 {
    4
}

impl DbEntry {
    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        match self.driver {
            DbDriver::Sql => {
                let url = self.connect.expose();
                let known = ["sqlite:", "postgres:", "postgresql:", "mysql:", "mariadb:"];
                if !known.iter().any(|p| url.starts_with(p)) {
                    return Err(ConfigError::invalid(
                        format!("{key}.connect"),
                        "must be a sqlite:, postgres: or mysql: URL for driver sql",
                    ));
                }
                if self.pool_size == 0 {
                    return Err(ConfigError::invalid(
                        format!("{key}.pool_size"),
                        "must be at least 1",
                    ));
                }
            }
            DbDriver::PasswdFile | DbDriver::Static => {}
        }
        Ok(())
    }
}

/// `auth_service.*`: the `yarilo auth` listener.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthService {
    /// Address `yarilo auth` listens on. Default `:9106`.
    pub listen: String,
    /// Connections served at once. Default 1024.
    pub max_connections: usize,
    /// Seconds a connection may stay silent. Default 600.
    pub idle_timeout_seconds: u64,
}

impl Default for AuthService {
    fn default() -> Self {
        AuthService {
            listen: ":9106".to_string(),
            max_connections: 1024,
            idle_timeout_seconds: 600,
        }
    }
}

impl AuthService {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        parse_listen(&self.listen).map_err(|m| ConfigError::invalid("auth_service.listen", m))?;
        if self.max_connections == 0 {
            return Err(ConfigError::invalid(
                "auth_service.max_connections",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// `auth_client.*`: how login pods and backends reach `yarilo auth`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthClient {
    /// `host:port` of the auth service. Default `yarilo-auth:9106`.
    pub address: String,
    /// Seconds to establish a connection. Default 5.
    pub connect_timeout_seconds: u64,
    /// Seconds to wait for one answer. Default 30 (a slow hash behind a
    /// penalty delay can take a while).
    pub request_timeout_seconds: u64,
}

impl Default for AuthClient {
    fn default() -> Self {
        AuthClient {
            address: "yarilo-auth:9106".to_string(),
            connect_timeout_seconds: 5,
            request_timeout_seconds: 30,
        }
    }
}

impl AuthClient {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.address.is_empty() {
            return Err(ConfigError::invalid(
                "auth_client.address",
                "must not be empty",
            ));
        }
        if self.connect_timeout_seconds == 0 || self.request_timeout_seconds == 0 {
            return Err(ConfigError::invalid(
                "auth_client",
                "timeouts must be at least 1 second",
            ));
        }
        Ok(())
    }
}

/// Checks the `passdb` and `userdb` lists.
pub(crate) fn validate_chains(passdb: &[DbEntry], userdb: &[DbEntry]) -> Result<(), ConfigError> {
    for (i, e) in passdb.iter().enumerate() {
        e.validate(&format!("passdb[{i}]"))?;
    }
    for (i, e) in userdb.iter().enumerate() {
        e.validate(&format!("userdb[{i}]"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Config, DbDriver};

    #[test]
    fn auth_sections_parse_with_defaults() {
        let c = Config::from_yaml("", "t.yaml").unwrap();
        assert!(c.auth.disable_plaintext_auth);
        assert_eq!(c.auth.new_pass_scheme, "ARGON2ID");
        assert!(c.passdb.is_empty());
        assert_eq!(c.auth_service.listen, ":9106");

        let text = "passdb:\n  - driver: passwd-file\n    args: /etc/yarilo/users\n  - driver: sql\n    connect: sqlite:///tmp/u.db\n    passdb_sql_query: SELECT password FROM users WHERE username = '%u'\nuserdb:\n  - driver: static\n    args: uid=vmail home=/srv/%d/%n\nauth:\n  mechanisms: [PLAIN, CRAM-MD5]\n  auth_cache_size: 1000\n";
        let c = Config::from_yaml(text, "t.yaml").unwrap();
        assert_eq!(c.passdb.len(), 2);
        assert_eq!(c.passdb[1].driver, DbDriver::Sql);
        assert_eq!(c.passdb[1].pool_size, 4);
        assert_eq!(c.userdb[0].driver, DbDriver::Static);
        assert_eq!(c.auth.auth_cache_size, 1000);
    }

    #[test]
    fn bad_auth_values_name_their_key() {
        let err = Config::from_yaml("auth:\n  mechanisms: [GSSAPI]\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("auth.mechanisms"), "{err}");
        let err = Config::from_yaml(
            "passdb:\n  - driver: sql\n    connect: oracle://x\n",
            "t.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("passdb[0].connect"), "{err}");
        let err = Config::from_yaml("passdb:\n  - driver: ldap\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("passdb"), "{err}");
        let err = Config::from_yaml("passdb:\n  - driver: static\n    argz: x\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("argz"), "{err}");
        let err = Config::from_yaml(
            "auth:\n  token_store: redis\n  token_redis: http://x\n",
            "t.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("auth.token_redis"), "{err}");
        let c = Config::from_yaml("auth:\n  token_store: redis\n", "t.yaml").unwrap();
        assert_eq!(c.auth.token_store, crate::TokenStoreKind::Redis);
    }
}
