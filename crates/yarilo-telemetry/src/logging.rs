use std::io::IsTerminal;

use tracing_subscriber::fmt;
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

use yarilo_config::{LogConfig, LogFormat};

/// Installs the global subscriber from `log.*`. `RUST_LOG`, when set,
/// replaces the configured levels (handy for a one-off debug run). Logs go
/// to stderr; a second call is a no-op.
pub fn init_logging(cfg: &LogConfig) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| {
            EnvFilter::try_new(cfg.filter_directive()).unwrap_or_else(|_| EnvFilter::new("info"))
        });
    let registry = tracing_subscriber::registry().with(filter);
    let result = match cfg.format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    let _ = result;
}
