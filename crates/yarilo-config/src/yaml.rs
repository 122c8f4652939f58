//! The only place that knows the file is YAML: swapping the parser means
//! changing this module alone.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ConfigError;

/// Parses `text` into `T`, turning parser errors into [`ConfigError`]s that
/// carry the key path and the position in the file.
pub(crate) fn parse<T: DeserializeOwned + Default>(
    text: &str,
    origin: &str,
) -> Result<T, ConfigError> {
    // An empty file, or one holding only comments, is an empty document: the
    // defaults apply.
    let probe: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| syntax(e, origin))?;
    if probe.is_null() {
        return Ok(T::default());
    }
    let deserializer = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let (line, column) = position(&inner);
        ConfigError::Key {
            origin: origin.to_string(),
            path,
            line,
            column,
            message: strip_position(&inner.to_string()),
        }
    })
}

pub(crate) fn render<T: Serialize>(value: &T) -> Result<String, ConfigError> {
    serde_yaml::to_string(value).map_err(|e| ConfigError::Render(e.to_string()))
}

fn syntax(err: serde_yaml::Error, origin: &str) -> ConfigError {
    let (line, column) = position(&err);
    ConfigError::Syntax {
        origin: origin.to_string(),
        line,
        column,
        message: strip_position(&err.to_string()),
    }
}

fn position(err: &serde_yaml::Error) -> (usize, usize) {
    err.location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((0, 0))
}

/// serde_yaml appends " at line L column C" to its messages; we print the
/// position ourselves in a fixed place.
fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}
