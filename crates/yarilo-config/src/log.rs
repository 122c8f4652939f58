use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `log.*`: what is logged and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (default) or `json` (one object per line).
    pub format: LogFormat,
    /// Default level: `error`, `warn`, `info` (default), `debug`, `trace`.
    pub level: String,
    /// Per-module levels, e.g. `yarilo_imap: debug`. Default empty.
    pub modules: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".to_string(),
            modules: BTreeMap::new(),
        }
    }
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

impl LogConfig {
    /// The filter in `tracing_subscriber::EnvFilter` syntax.
    pub fn filter_directive(&self) -> String {
        let mut directive = self.level.clone();
        for (module, level) in &self.modules {
            directive.push_str(&format!(",{module}={level}"));
        }
        directive
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !LEVELS.contains(&self.level.as_str()) {
            return Err(ConfigError::invalid(
                "log.level",
                format!("`{}` is not one of {}", self.level, LEVELS.join(", ")),
            ));
        }
        for (module, level) in &self.modules {
            if !LEVELS.contains(&level.as_str()) {
                return Err(ConfigError::invalid(
                    format!("log.modules.{module}"),
                    format!("`{level}` is not one of {}", LEVELS.join(", ")),
                ));
            }
            if module.is_empty() || module.contains([',', '=', ' ']) {
                return Err(ConfigError::invalid(
                    format!("log.modules.{module}"),
                    "is not a module path",
                ));
            }
        }
        Ok(())
    }
}
