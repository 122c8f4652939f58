//! The sql driver: SQLite, PostgreSQL and MySQL/MariaDB through sqlx's
//! `Any` driver.
//!
//! Queries are Dovecot-style templates (`... WHERE username = '%u'`),
//! compiled once into statements with bind placeholders
//! ([`crate::template::SqlTemplate`]); user input is only ever a bound
//! parameter. Every column of the first row becomes a field (NULLs are
//! skipped); the passdb query's `password` column is the stored password,
//! a `user` column renames the user, `nopassword` accepts any password.

use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Column as _, Row as _};

use super::{parse_password, DbError, LookupRequest, PassdbEntry};
use crate::fields::ExtraFields;
use crate::scheme::Scheme;
use crate::template::{Placeholders, SqlTemplate, Vars};

const DEFAULT_PASSDB_QUERY: &str = "SELECT password FROM users WHERE username = '%u'";
const DEFAULT_USERDB_QUERY: &str = "SELECT home, uid, gid FROM users WHERE username = '%u'";
const DEFAULT_ITERATE_QUERY: &str = "SELECT username FROM users";
const DEFAULT_INSERT_QUERY: &str = "INSERT INTO users (username, password) VALUES ('%u', '%w')";
const DEFAULT_UPDATE_QUERY: &str = "UPDATE users SET password = '%w' WHERE username = '%u'";
const DEFAULT_DELETE_QUERY: &str = "DELETE FROM users WHERE username = '%u'";

#[derive(Debug)]
struct Queries {
    passdb: SqlTemplate,
    userdb: SqlTemplate,
    iterate: SqlTemplate,
    insert: SqlTemplate,
    update: SqlTemplate,
    delete: SqlTemplate,
}

/// An SQL passdb/userdb with its connection pool (connected lazily, so a
/// database that is down at start only fails the logins that need it).
#[derive(Debug, Clone)]
pub struct SqlDb {
    pool: AnyPool,
    backend: &'static str,
    queries: Arc<Queries>,
    default_scheme: Scheme,
}

fn or_default<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.trim().is_empty() {
        default
    } else {
        value
    }
}

impl SqlDb {
    pub fn new(
        entry: &yarilo_config::DbEntry,
        default_scheme: Scheme,
        _for_userdb: bool,
    ) -> Result<SqlDb, DbError> {
        Self::connect(
            entry.connect.expose(),
            entry.pool_size,
            default_scheme,
            &QueryTexts {
                passdb: &entry.passdb_sql_query,
                userdb: &entry.userdb_sql_query,
                iterate: &entry.iterate_query,
                insert: &entry.insert_query,
                update: &entry.update_query,
                delete: &entry.delete_query,
            },
        )
    }

    /// Builds a lazily connecting pool for `url`.
    pub fn connect(
        url: &str,
        pool_size: u32,
        default_scheme: Scheme,
        texts: &QueryTexts<'_>,
    ) -> Result<SqlDb, DbError> {
        sqlx::any::install_default_drivers();
        let (backend, style) = if url.starts_with("postgres") {
            ("postgres", Placeholders::Dollar)
        } else if url.starts_with("mysql") || url.starts_with("mariadb") {
            ("mysql", Placeholders::Question)
        } else if url.starts_with("sqlite") {
            ("sqlite", Placeholders::Question)
        } else {
            return Err(DbError::Sql(
                "connect must start with sqlite:, postgres: or mysql:".into(),
            ));
        };
        let url = url.replacen("mariadb:", "mysql:", 1);
        let pool = AnyPoolOptions::new()
            .max_connections(pool_size.max(1))
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy(&url)
            .map_err(|e| DbError::Sql(e.to_string()))?;
        let c = |t: &str, d: &str| SqlTemplate::compile(or_default(t, d), style);
        Ok(SqlDb {
            pool,
            backend,
            queries: Arc::new(Queries {
                passdb: c(texts.passdb, DEFAULT_PASSDB_QUERY),
                userdb: c(texts.userdb, DEFAULT_USERDB_QUERY),
                iterate: c(texts.iterate, DEFAULT_ITERATE_QUERY),
                insert: c(texts.insert, DEFAULT_INSERT_QUERY),
                update: c(texts.update, DEFAULT_UPDATE_QUERY),
                delete: c(texts.delete, DEFAULT_DELETE_QUERY),
            }),
            default_scheme,
        })
    }

    /// `sqlite`, `postgres` or `mysql`.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    async fn fetch_first(
        &self,
        template: &SqlTemplate,
        vars: &Vars<'_>,
    ) -> Result<Option<ExtraFields>, DbError> {
        let values = template.bind_values(vars);
        // No stored user can hold a NUL, and PostgreSQL refuses NUL in
        // text: answer "unknown" rather than report an outage.
        if values.iter().any(|v| v.contains('\0')) {
            return Ok(None);
        }
        let mut q = sqlx::query(&template.sql);
        for v in values {
            q = q.bind(v);
        }
        let row = q
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| DbError::Sql(e.to_string()))?;
        Ok(row.map(|r| row_fields(&r)))
    }

    async fn execute(&self, template: &SqlTemplate, vars: &Vars<'_>) -> Result<u64, DbError> {
        let mut q = sqlx::query(&template.sql);
        for v in template.bind_values(vars) {
            q = q.bind(v);
        }
        q.execute(&self.pool)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| DbError::Sql(e.to_string()))
    }

    /// One round trip to the database (the startup probe).
    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| DbError::Sql(e.to_string()))
    }

    pub async fn passdb_lookup(
        &self,
        req: &LookupRequest<'_>,
    ) -> Result<Option<PassdbEntry>, DbError> {
        let Some(mut fields) = self.fetch_first(&self.queries.passdb, &req.vars()).await? else {
            return Ok(None);
        };
        let user = fields
            .remove("user")
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| req.user.to_string());
        let nopassword = fields
            .remove("nopassword")
            .is_some_and(|v| !matches!(v.as_str(), "" | "n" | "no" | "0" | "false"));
        let password = match fields.remove("password") {
            Some(p) if !p.is_empty() => Some(parse_password(&user, &p, self.default_scheme)?),
            _ => None,
        };
        let (fields, userdb_fields) = fields.split_userdb();
        Ok(Some(PassdbEntry {
            user,
            password,
            nopassword,
            fields,
            userdb_fields,
        }))
    }

    pub async fn userdb_lookup(
        &self,
        req: &LookupRequest<'_>,
    ) -> Result<Option<ExtraFields>, DbError> {
        self.fetch_first(&self.queries.userdb, &req.vars()).await
    }

    /// `iterate_query`: every user name.
    pub async fn list_users(&self) -> Result<Vec<String>, DbError> {
        let mut q = sqlx::query(&self.queries.iterate.sql);
        for v in self.queries.iterate.bind_values(&Vars::default()) {
            q = q.bind(v);
        }
        let rows = q
            .fetch_all(&self.pool)
            .await
            .map_err(|e| DbError::Sql(e.to_string()))?;
        Ok(rows.iter().filter_map(|r| column_text(r, 0)).collect())
    }

    fn admin_vars<'a>(user: &'a str, stored: Option<&'a str>) -> Vars<'a> {
        Vars {
            user,
            password: stored,
            ..Vars::default()
        }
    }

    /// `insert_query` with `%u` and `%w` (the stored hash).
    pub async fn add_user(&self, user: &str, stored: &str) -> Result<(), DbError> {
        self.execute(&self.queries.insert, &Self::admin_vars(user, Some(stored)))
            .await
            .map(|_| ())
    }

    /// `update_query`; fails when no row changed.
    pub async fn set_password(&self, user: &str, stored: &str) -> Result<(), DbError> {
        match self
            .execute(&self.queries.update, &Self::admin_vars(user, Some(stored)))
            .await?
        {
            0 => Err(DbError::Unsupported(format!("no user {user}"))),
            _ => Ok(()),
        }
    }

    /// `delete_query`; fails when no row changed.
    pub async fn delete_user(&self, user: &str) -> Result<(), DbError> {
        match self
            .execute(&self.queries.delete, &Self::admin_vars(user, None))
            .await?
        {
            0 => Err(DbError::Unsupported(format!("no user {user}"))),
            _ => Ok(()),
        }
    }

    /// Runs a statement without parameters (test and setup helper).
    pub async fn execute_raw(&self, sql: &str) -> Result<(), DbError> {
        sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| DbError::Sql(e.to_string()))
    }
}

/// The query templates, empty meaning the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryTexts<'a> {
    pub passdb: &'a str,
    pub userdb: &'a str,
    pub iterate: &'a str,
    pub insert: &'a str,
    pub update: &'a str,
    pub delete: &'a str,
}

fn column_text(row: &AnyRow, i: usize) -> Option<String> {
    if let Ok(v) = row.try_get::<Option<String>, _>(i) {
        return v;
    }
    if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
        return v.map(|n| n.to_string());
    }
    if let Ok(v) = row.try_get::<Option<i32>, _>(i) {
        return v.map(|n| n.to_string());
    }
    if let Ok(v) = row.try_get::<Option<i16>, _>(i) {
        return v.map(|n| n.to_string());
    }
    if let Ok(v) = row.try_get::<Option<bool>, _>(i) {
        return v.map(|b| if b { "y" } else { "n" }.to_string());
    }
    if let Ok(v) = row.try_get::<Option<f64>, _>(i) {
        return v.map(|n| n.to_string());
    }
    if let Ok(v) = row.try_get::<Option<Vec<u8>>, _>(i) {
        return v.and_then(|b| String::from_utf8(b).ok());
    }
    None
}

fn row_fields(row: &AnyRow) -> ExtraFields {
    let mut f = ExtraFields::new();
    for (i, col) in row.columns().iter().enumerate() {
        if let Some(v) = column_text(row, i) {
            f.set(col.name().to_ascii_lowercase(), v);
        }
    }
    f
}
