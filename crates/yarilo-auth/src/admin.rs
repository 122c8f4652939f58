//! The logic behind `yarctl user …` and `yarctl pw`: where users live
//! (the passwd-file at `<data>/users`, or the first passwd-file / sql
//! passdb of a config file) and how they are added, changed, listed,
//! shown and removed. A running server sees every change without a
//! restart: the passwd-file is rewritten atomically and re-read on its
//! next lookup; SQL rows are read per lookup (mind `auth_cache_size`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::db::{Db, PasswdFile, PasswdLine, SqlDb};
use crate::fields::ExtraFields;
use crate::scheme::{hash_password, Scheme, StoredPassword};

/// The data directory `yarilo single` uses when none is configured.
pub const DEFAULT_DATA_DIR: &str = "./yarilo-data";

/// The `users` table the default SQL queries read and write (portable
/// across SQLite, MariaDB/MySQL and PostgreSQL). `yarctl user init-db`
/// creates it when it is missing; sites with their own schema point the
/// queries at it instead.
pub const DEFAULT_USERS_TABLE: &str = "CREATE TABLE IF NOT EXISTS users (\
    username VARCHAR(255) NOT NULL PRIMARY KEY, \
    password VARCHAR(255) NOT NULL, \
    home VARCHAR(255), \
    uid INTEGER, \
    gid INTEGER)";

/// Where `yarctl user` reads and writes users.
#[derive(Debug, Clone)]
pub struct UserStore {
    backend: Backend,
    /// Name rules from `auth.*`.
    auth: yarilo_config::Auth,
}

#[derive(Debug, Clone)]
enum Backend {
    File(PasswdFile),
    Sql(SqlDb),
}

/// What `yarctl user show` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub user: String,
    /// The password's scheme, never the hash.
    pub scheme: Option<String>,
    /// passdb extra fields and userdb fields.
    pub fields: ExtraFields,
}

impl UserStore {
    /// `--data DIR` wins; else `--config FILE`'s first passwd-file or sql
    /// passdb (an empty chain means `<general.data_dir>/users`); else
    /// `./yarilo-data/users`.
    pub fn open(data: Option<&Path>, config: Option<&Path>) -> anyhow::Result<UserStore> {
        if let Some(dir) = data {
            return Ok(UserStore::passwd_file(dir.join("users")));
        }
        let Some(path) = config else {
            return Ok(UserStore::passwd_file(
                PathBuf::from(DEFAULT_DATA_DIR).join("users"),
            ));
        };
        let config = yarilo_config::Config::load(path)
            .with_context(|| format!("loading {}", path.display()))?;
        let data_dir = PathBuf::from(&config.general.data_dir);
        let default_scheme = Scheme::parse(&config.auth.default_pass_scheme)
            .map(|(s, _)| s)
            .unwrap_or(Scheme::Plain);
        let backend = if config.passdb.is_empty() {
            Backend::File(PasswdFile::new(data_dir.join("users"), default_scheme))
        } else {
            let entry = config
                .passdb
                .iter()
                .find(|e| {
                    matches!(
                        e.driver,
                        yarilo_config::DbDriver::PasswdFile | yarilo_config::DbDriver::Sql
                    )
                })
                .context("no passwd-file or sql passdb in the configuration to manage users in")?;
            match Db::from_config(entry, &data_dir, default_scheme, false)? {
                Db::PasswdFile(p) => Backend::File(p),
                Db::Sql(s) => Backend::Sql(s),
                Db::Static(_) => bail!("a static passdb has no users to manage"),
            }
        };
        Ok(UserStore {
            backend,
            auth: config.auth,
        })
    }

    /// A store on one passwd-file with default name rules.
    pub fn passwd_file(path: PathBuf) -> UserStore {
        UserStore {
            backend: Backend::File(PasswdFile::new(path, Scheme::Plain)),
            auth: yarilo_config::Auth::default(),
        }
    }

    /// Where the users are, for messages.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::File(p) => p.path().display().to_string(),
            Backend::Sql(s) => format!("sql ({})", s.backend()),
        }
    }

    /// Creates [`DEFAULT_USERS_TABLE`] in an sql passdb if it does not
    /// exist. Returns false for a passwd-file, which needs nothing.
    pub async fn init_db(&self) -> anyhow::Result<bool> {
        match &self.backend {
            Backend::File(_) => Ok(false),
            Backend::Sql(s) => {
                s.execute_raw(DEFAULT_USERS_TABLE)
                    .await
                    .with_context(|| format!("creating the users table in {}", s.backend()))?;
                Ok(true)
            }
        }
    }

    /// The scheme for new passwords: `--scheme`, else `auth.new_pass_scheme`.
    pub fn scheme(&self, requested: Option<&str>) -> anyhow::Result<Scheme> {
        let name = requested.unwrap_or(&self.auth.new_pass_scheme);
        Ok(Scheme::parse(name)?.0)
    }

    /// Applies the login name rules, so the stored name is the one a login
    /// will look up.
    pub fn normalize(&self, name: &str) -> anyhow::Result<String> {
        if name.is_empty() || name.len() > self.auth.max_username_length {
            bail!(
                "user name must be 1 to {} bytes",
                self.auth.max_username_length
            );
        }
        if !self.auth.username_chars.is_empty() {
            if let Some(c) = name
                .chars()
                .find(|c| !self.auth.username_chars.contains(*c))
            {
                bail!("user name contains {c:?}, which auth.username_chars does not allow");
            }
        }
        if name.chars().any(|c| c.is_control() || c == ':') {
            bail!("user name must not contain ':' or control characters");
        }
        Ok(if self.auth.username_lowercase {
            name.to_lowercase()
        } else {
            name.to_string()
        })
    }

    fn hash(&self, password: &str, scheme: Option<&str>) -> anyhow::Result<String> {
        if password.is_empty() {
            bail!("empty password");
        }
        Ok(hash_password(self.scheme(scheme)?, password)?)
    }

    pub async fn add(
        &self,
        name: &str,
        password: &str,
        scheme: Option<&str>,
    ) -> anyhow::Result<String> {
        let user = self.normalize(name)?;
        let stored = self.hash(password, scheme)?;
        match &self.backend {
            Backend::File(p) => {
                let p = p.clone();
                let line = PasswdLine {
                    user: user.clone(),
                    password: stored,
                    ..Default::default()
                };
                tokio::task::spawn_blocking(move || p.add_blocking(line)).await??;
            }
            Backend::Sql(s) => {
                if s.list_users().await?.contains(&user) {
                    bail!("user {user} already exists");
                }
                s.add_user(&user, &stored).await?
            }
        }
        Ok(user)
    }

    pub async fn set_password(
        &self,
        name: &str,
        password: &str,
        scheme: Option<&str>,
    ) -> anyhow::Result<String> {
        let user = self.normalize(name)?;
        let stored = self.hash(password, scheme)?;
        match &self.backend {
            Backend::File(p) => {
                let p = p.clone();
                let u = user.clone();
                tokio::task::spawn_blocking(move || p.set_password_blocking(&u, &stored)).await??;
            }
            Backend::Sql(s) => s.set_password(&user, &stored).await?,
        }
        Ok(user)
    }

    pub async fn delete(&self, name: &str) -> anyhow::Result<String> {
        let user = self.normalize(name)?;
        match &self.backend {
            Backend::File(p) => {
                let p = p.clone();
                let u = user.clone();
                tokio::task::spawn_blocking(move || p.delete_blocking(&u)).await??;
            }
            Backend::Sql(s) => s.delete_user(&user).await?,
        }
        Ok(user)
    }

    pub async fn list(&self) -> anyhow::Result<Vec<String>> {
        Ok(match &self.backend {
            Backend::File(p) => {
                let p = p.clone();
                tokio::task::spawn_blocking(move || p.list_blocking())
                    .await??
                    .into_iter()
                    .map(|l| l.user)
                    .collect()
            }
            Backend::Sql(s) => s.list_users().await?,
        })
    }

    pub async fn show(&self, name: &str) -> anyhow::Result<Option<UserInfo>> {
        let user = self.normalize(name)?;
        let req = crate::db::LookupRequest {
            user: &user,
            service: "yarctl",
            remote_ip: None,
            local_ip: None,
        };
        let (entry, userdb) = match &self.backend {
            Backend::File(p) => (p.passdb_lookup(&req).await?, p.userdb_lookup(&req).await?),
            Backend::Sql(s) => (
                s.passdb_lookup(&req).await?,
                s.userdb_lookup(&req).await.ok().flatten(),
            ),
        };
        Ok(entry.map(|e| {
            let mut fields = e.fields.clone();
            fields.merge(&e.userdb_fields);
            if let Some(u) = userdb {
                fields.merge(&u);
            }
            UserInfo {
                user: e.user,
                scheme: e.password.map(|p| p.scheme.name().to_string()),
                fields,
            }
        }))
    }
}

/// `yarctl pw -t HASH -p PASSWORD`: whether `password` matches `stored`.
pub fn test_password(stored: &str, password: &str) -> anyhow::Result<bool> {
    let p = StoredPassword::parse(stored, Scheme::Plain)?;
    Ok(p.verify(password.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn add_show_passwd_list_del_on_a_passwd_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(Some(dir.path()), None).unwrap();
        assert_eq!(
            store
                .add("Alice@Example.org", "pw one", None)
                .await
                .unwrap(),
            "alice@example.org"
        );
        assert!(store.add("alice@example.org", "pw", None).await.is_err());
        assert!(store.add("bad name", "pw", None).await.is_err());
        assert!(store.add("x", "", None).await.is_err());
        store.add("bob", "pw", Some("SHA512-CRYPT")).await.unwrap();
        let info = store.show("alice@example.org").await.unwrap().unwrap();
        assert_eq!(info.scheme.as_deref(), Some("ARGON2ID"));
        store
            .set_password("alice@example.org", "pw two", Some("BLF-CRYPT"))
            .await
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join("users")).unwrap();
        let line = text.lines().find(|l| l.starts_with("alice")).unwrap();
        let hash = line.split(':').nth(1).unwrap();
        assert!(test_password(hash, "pw two").unwrap());
        assert!(!test_password(hash, "pw one").unwrap());
        assert_eq!(store.list().await.unwrap(), ["alice@example.org", "bob"]);
        store.delete("bob").await.unwrap();
        assert!(store.delete("bob").await.is_err());
        assert!(store.show("bob").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn config_file_selects_the_passwd_file_under_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("y.yaml");
        std::fs::write(
            &cfg,
            format!(
                "general:\n  data_dir: {}\nauth:\n  new_pass_scheme: SSHA512\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let store = UserStore::open(None, Some(&cfg)).unwrap();
        assert_eq!(
            store.describe(),
            dir.path().join("users").display().to_string()
        );
        store.add("carol", "pw", None).await.unwrap();
        let info = store.show("carol").await.unwrap().unwrap();
        assert_eq!(info.scheme.as_deref(), Some("SSHA512"));
    }
}
