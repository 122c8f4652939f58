use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that must not appear in logs or in `config dump`: passwords,
/// tokens, connection strings with credentials.
///
/// In the file it is written as the value itself, as `env:NAME` (read from
/// the environment variable NAME when the file is loaded) or as
/// `file:/path` (the file's content, trailing newline removed), so that a
/// Kubernetes Secret can be mounted or injected without templating the YAML.
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
            return std::fs::read_to_string(path)
                .map(|s| Secret(s.trim_end_matches(['\r', '\n']).to_string()))
                .map_err(|e| format!("cannot read secret file {path}: {e}"));
        }
        Ok(Secret(raw.to_string()))
    }
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
