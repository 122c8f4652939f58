use serde::{Deserialize, Serialize};

use crate::{parse_listen, ConfigError};

/// `telemetry.*`: the HTTP endpoint for `/metrics`, `/healthz`, `/readyz`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Telemetry {
    /// Address of the telemetry HTTP server. Default `:9090`. The
    /// environment variable `TELEMETRY_LISTEN` overrides it, so containers
    /// of one pod can each be given their own port. Empty disables it.
    pub listen: String,
    pub liveness_watchdog: LivenessWatchdog,
    pub readiness: Readiness,
    pub pprof: Pprof,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            listen: ":9090".to_string(),
            liveness_watchdog: LivenessWatchdog::default(),
            readiness: Readiness::default(),
            pprof: Pprof::default(),
        }
    }
}

impl Telemetry {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.listen.is_empty() {
            parse_listen(&self.listen).map_err(|m| ConfigError::invalid("telemetry.listen", m))?;
        }
        self.liveness_watchdog.validate()?;
        self.readiness.validate()
    }
}

/// `telemetry.pprof.*`: profiles of a live process on the telemetry port
/// (`docs/operations.md`, "Profiling"). Everything off by default; every
/// start logs a warning while anything is on. The Helm value names
/// (`heapEnabled`, `blockProfileRate`, `mutexProfileFraction`) are
/// accepted as aliases.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Pprof {
    /// Serves `/debug/pprof/profile` (CPU), `tasks`, `block`, `mutex`,
    /// `cmdline`. Default false.
    pub enabled: bool,
    /// Serves `/debug/pprof/heap` and turns the allocator's heap sampling
    /// on. Default false.
    #[serde(alias = "heapEnabled")]
    pub heap_enabled: bool,
    /// One block sample per this many nanoseconds of blocked time; 0 off.
    /// Default 0.
    #[serde(alias = "blockProfileRate")]
    pub block_profile_rate: u64,
    /// One mutex sample per this many contention events; 0 off. Default 0.
    #[serde(alias = "mutexProfileFraction")]
    pub mutex_profile_fraction: u64,
}

/// `telemetry.readiness.*`: the request-path freshness check behind
/// `/readyz` in mail-serving components (`docs/operations.md`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Readiness {
    /// Seconds between request-path self-checks. Default 5.
    pub freshness_interval_seconds: u64,
    /// `/readyz` fails when the last successful self-check is older than
    /// this. Default 15.
    pub freshness_max_age_seconds: u64,
    /// File rewritten (Unix time) after every successful self-check, for
    /// exec probes and sidecars. Default "": none.
    pub freshness_file: String,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            freshness_interval_seconds: 5,
            freshness_max_age_seconds: 15,
            freshness_file: String::new(),
        }
    }
}

impl Readiness {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.freshness_interval_seconds == 0 {
            return Err(ConfigError::invalid(
                "telemetry.readiness.freshness_interval_seconds",
                "must be at least 1",
            ));
        }
        if self.freshness_max_age_seconds <= self.freshness_interval_seconds {
            return Err(ConfigError::invalid(
                "telemetry.readiness.freshness_max_age_seconds",
                "must be longer than freshness_interval_seconds",
            ));
        }
        Ok(())
    }
}

/// `telemetry.liveness_watchdog.*`: a timer-driven self-check that makes
/// `/healthz` fail when the request path is wedged (a hung NFS handle, a
/// deadlock) while the accept loop still answers. Off by default: with it
/// off `/healthz` is unconditional.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LivenessWatchdog {
    /// Default false.
    pub liveness_watchdog_enabled: bool,
    /// Seconds between self-checks. Default 10.
    pub liveness_watchdog_interval_seconds: u64,
    /// Seconds one self-check may take; shorter than the interval. Default 5.
    pub liveness_watchdog_timeout_seconds: u64,
    /// Consecutive failed checks before `/healthz` fails. Default 3.
    pub liveness_watchdog_failure_threshold: u32,
    /// Exposes `POST /debug/fault/deadlock`, which wedges the self-check on
    /// purpose to prove the restart path. Default false.
    pub liveness_watchdog_fault_injection_enabled: bool,
}

impl Default for LivenessWatchdog {
    fn default() -> Self {
        LivenessWatchdog {
            liveness_watchdog_enabled: false,
            liveness_watchdog_interval_seconds: 10,
            liveness_watchdog_timeout_seconds: 5,
            liveness_watchdog_failure_threshold: 3,
            liveness_watchdog_fault_injection_enabled: false,
        }
    }
}

impl LivenessWatchdog {
    fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("telemetry.liveness_watchdog.liveness_watchdog_{k}");
        if self.liveness_watchdog_interval_seconds == 0 {
            return Err(ConfigError::invalid(
                key("interval_seconds"),
                "must be at least 1",
            ));
        }
        if self.liveness_watchdog_timeout_seconds == 0
            || self.liveness_watchdog_timeout_seconds >= self.liveness_watchdog_interval_seconds
        {
            return Err(ConfigError::invalid(
                key("timeout_seconds"),
                "must be at least 1 and shorter than liveness_watchdog_interval_seconds",
            ));
        }
        if self.liveness_watchdog_failure_threshold == 0 {
            return Err(ConfigError::invalid(
                key("failure_threshold"),
                "must be at least 1",
            ));
        }
        Ok(())
    }
}
