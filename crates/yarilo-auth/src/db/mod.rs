//! passdb and userdb drivers, and the chains that try them in order.
//!
//! A passdb answers "what is this user's stored password, and which extra
//! fields come with it"; a userdb answers "where does this user's mail
//! live" (home, uid, gid, mail, quota, director_tag). Drivers:
//! [`PasswdFile`] (Dovecot's format, reloaded when the file changes),
//! [`SqlDb`] (SQLite, PostgreSQL, MySQL/MariaDB through sqlx) and
//! [`StaticDb`] (fields from a template).

mod passwd_file;
pub mod sql;
mod static_db;

use std::net::IpAddr;
use std::path::Path;

pub use passwd_file::{PasswdFile, PasswdLine};
pub use sql::SqlDb;
pub use static_db::StaticDb;

use crate::fields::ExtraFields;
use crate::scheme::{Scheme, StoredPassword};

/// What a lookup is about.
#[derive(Debug, Clone)]
pub struct LookupRequest<'a> {
    /// The normalised user name.
    pub user: &'a str,
    /// `imap`, `pop3`, `smtp`, `lmtp`, `sieve`, `jmap`, …
    pub service: &'a str,
    /// The real client address, when known.
    pub remote_ip: Option<IpAddr>,
    pub local_ip: Option<IpAddr>,
}

impl<'a> LookupRequest<'a> {
    pub fn vars(&self) -> crate::template::Vars<'a> {
        crate::template::Vars {
            user: self.user,
            service: self.service,
            remote_ip: self.remote_ip,
            local_ip: self.local_ip,
            password: None,
        }
    }
}

/// A passdb's answer for a user it knows.
#[derive(Debug, Clone)]
pub struct PassdbEntry {
    /// The user name as the passdb spells it (a `user` field may change it).
    pub user: String,
    /// The stored password; `None` with `nopassword` set means any
    /// password is accepted, otherwise the user cannot log in.
    pub password: Option<StoredPassword>,
    /// `nopassword=y`: any password matches (static passdb, tests).
    pub nopassword: bool,
    /// Passdb extra fields (`allow_nets`, `nologin`, `director_tag`, …).
    pub fields: ExtraFields,
    /// `userdb_*` fields the passdb returned ("prefetch").
    pub userdb_fields: ExtraFields,
}

/// Why a lookup could not answer. The user is neither found nor absent:
/// the login fails with a temporary error and is not cached.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("passwd-file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sql: {0}")]
    Sql(String),
    /// A stored password names a scheme we do not know.
    #[error("user {user}: {message}")]
    BadEntry { user: String, message: String },
    /// The driver cannot do this (e.g. `user add` on a static db).
    #[error("{0}")]
    Unsupported(String),
    /// A blocking task died (a bug).
    #[error("internal: {0}")]
    Internal(String),
}

/// One configured driver.
#[derive(Debug, Clone)]
pub enum Db {
    PasswdFile(PasswdFile),
    Sql(SqlDb),
    Static(StaticDb),
}

impl Db {
    /// Builds a driver from its config entry; relative passwd-file paths and
    /// the default path resolve against `data_dir`.
    pub fn from_config(
        entry: &yarilo_config::DbEntry,
        data_dir: &Path,
        default_scheme: Scheme,
        for_userdb: bool,
    ) -> Result<Db, DbError> {
        let scheme = if entry.default_pass_scheme.is_empty() {
            default_scheme
        } else {
            Scheme::parse(&entry.default_pass_scheme)
                .map_err(|e| DbError::Unsupported(e.to_string()))?
                .0
        };
        Ok(match entry.driver {
            yarilo_config::DbDriver::PasswdFile => {
                let path = if entry.args.trim().is_empty() {
                    data_dir.join("users")
                } else {
                    data_dir.join(entry.args.trim())
                };
                Db::PasswdFile(PasswdFile::new(path, scheme))
            }
            yarilo_config::DbDriver::Static => Db::Static(StaticDb::new(&entry.args, scheme)),
            yarilo_config::DbDriver::Sql => Db::Sql(SqlDb::new(entry, scheme, for_userdb)?),
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Db::PasswdFile(p) => format!("passwd-file {}", p.path().display()),
            Db::Sql(s) => format!("sql {}", s.backend()),
            Db::Static(_) => "static".to_string(),
        }
    }

    /// passdb lookup: `Ok(None)` when the user is unknown here.
    pub async fn passdb_lookup(
        &self,
        req: &LookupRequest<'_>,
    ) -> Result<Option<PassdbEntry>, DbError> {
        match self {
            Db::PasswdFile(p) => p.passdb_lookup(req).await,
            Db::Sql(s) => s.passdb_lookup(req).await,
            Db::Static(s) => s.passdb_lookup(req),
        }
    }

    /// Whether the driver's backing store answers (SQL: a `SELECT 1`;
    /// files and static entries have nothing to reach).
    pub async fn ping(&self) -> Result<(), DbError> {
        match self {
            Db::Sql(s) => s.ping().await,
            Db::PasswdFile(_) | Db::Static(_) => Ok(()),
        }
    }

    /// userdb lookup: `Ok(None)` when the user is unknown here.
    pub async fn userdb_lookup(
        &self,
        req: &LookupRequest<'_>,
    ) -> Result<Option<ExtraFields>, DbError> {
        match self {
            Db::PasswdFile(p) => p.userdb_lookup(req).await,
            Db::Sql(s) => s.userdb_lookup(req).await,
            Db::Static(s) => Ok(Some(s.userdb_fields(req))),
        }
    }
}

/// Parses a stored password, naming the user when its scheme is unknown.
pub(crate) fn parse_password(
    user: &str,
    stored: &str,
    default: Scheme,
) -> Result<StoredPassword, DbError> {
    StoredPassword::parse(stored, default).map_err(|e| DbError::BadEntry {
        user: user.to_string(),
        message: e.to_string(),
    })
}
