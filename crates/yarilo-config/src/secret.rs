use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that must not appear in logs or in `config dump`: passwords,
/// tokens, connection strings with credentials.
///
/// In the file it is written as the value itself, as `env:NAME` (read from
/// the environment variable NAME when the file is loaded) or as
/// `file:/path` (the file's content, trailing newline removed), so that a
/// Kubernetes Secret can be mounted or injected without templating the YAML,
/// or as `credential:NAME` (the file NAME in `$CREDENTIALS_DIRECTORY`, where
/// systemd's `LoadCredential=` puts a unit's secrets: readable by the
/// service's own user, never in the unit file or the Nix store).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Call it where the value is used, nowhere else.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn resolve(raw: &str) -> Result<Secret, String> {
        if let Some(name) = raw.strip_prefix("env:") {
            return std::env::var(name)
                .map(Secret)
                .map_err(|_| format!("environment variable {name} is not set"));
        }
        if let Some(path) = raw.strip_prefix("file:") {
            return read_secret_file(std::path::Path::new(path));
        }
        if let Some(name) = raw.strip_prefix("credential:") {
            return Self::credential(std::env::var_os("CREDENTIALS_DIRECTORY"), name);
        }
        Ok(Secret(raw.to_string()))
    }

    fn credential(dir: Option<std::ffi::OsString>, name: &str) -> Result<Secret, String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(format!(
                "credential:{name}: a credential name is one path component"
            ));
        }
        let dir = dir.ok_or_else(|| {
            format!("credential:{name}: CREDENTIALS_DIRECTORY is not set (systemd sets it for units with LoadCredential=)")
        })?;
        read_secret_file(&std::path::Path::new(&dir).join(name))
    }
}

fn read_secret_file(path: &std::path::Path) -> Result<Secret, String> {
    std::fs::read_to_string(path)
        .map(|s| Secret(s.trim_end_matches(['\r', '\n']).to_string()))
        .map_err(|e| format!("cannot read secret file {}: {e}", path.display()))
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<hidden>"
        })
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { "<hidden>" })
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Secret::resolve(&raw).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_reads_the_named_file_in_the_credentials_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sql-url"), "mysql://u:p@db/y\n").unwrap();
        let got = Secret::credential(Some(dir.path().as_os_str().to_owned()), "sql-url").unwrap();
        assert_eq!(got.expose(), "mysql://u:p@db/y");
    }

    #[test]
    fn credential_without_a_directory_or_with_a_path_is_an_error() {
        let err = Secret::credential(None, "sql-url").unwrap_err();
        assert!(err.contains("CREDENTIALS_DIRECTORY"), "{err}");
        for bad in ["", "../etc/shadow", "a/b", ".."] {
            let dir = Some(std::ffi::OsString::from("/tmp"));
            assert!(Secret::credential(dir, bad).is_err(), "{bad:?}");
        }
    }
}
