use std::fmt;

/// Why a configuration could not be used. Every variant names where the
/// problem is: the file and position, or the key path.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The text is not well-formed YAML.
    #[error("{origin}:{line}:{column}: YAML syntax error: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A key is unknown or its value has the wrong type or form.
    #[error("{origin}:{line}:{column}: {}: {message}", KeyPath(path))]
    Key {
        origin: String,
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// Values that parse but cannot work (a zero port, a missing name, …).
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    /// The effective configuration could not be rendered.
    #[error("cannot render configuration: {0}")]
    Render(String),
}

impl ConfigError {
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

struct KeyPath<'a>(&'a str);

impl fmt::Display for KeyPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() || self.0 == "." {
            f.write_str("(top level)")
        } else {
            f.write_str(self.0)
        }
    }
}
