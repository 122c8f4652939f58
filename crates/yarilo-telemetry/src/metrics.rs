use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The process's metric registry. Components register their metrics once
/// at start-up (`metrics.register(|r| ...)`) and keep the handles.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let start: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        start.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        );
        registry.register(
            "yarilo_process_start_time_seconds",
            "Start time of the process since the Unix epoch",
            start,
        );
        Metrics {
            registry: Arc::new(Mutex::new(registry)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers metrics. Names are given whole: `yarilo_<component>_<what>`.
    pub fn register<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        f(&mut self.lock())
    }

    /// The registry in the text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.lock());
        out
    }
}
