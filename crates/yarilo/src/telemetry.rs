//! Starting the telemetry endpoint of a component.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use yarilo_config::{parse_listen, Config};
use yarilo_telemetry::{Health, Metrics, TelemetryServer, Watchdog};

use yarilo_listener::Lifecycle;

pub struct Telemetry {
    pub health: Health,
    pub metrics: Metrics,
    pub addr: Option<SocketAddr>,
}

/// Binds `telemetry.listen` (or `$TELEMETRY_LISTEN`), starts the watchdog
/// when enabled (stat-checking `watch_paths`), and serves until shutdown.
pub async fn start(
    config: &Config,
    watch_paths: Vec<PathBuf>,
    life: &Lifecycle,
) -> anyhow::Result<Telemetry> {
    let health = Health::new();
    let metrics = Metrics::new();
    let listen =
        std::env::var("TELEMETRY_LISTEN").unwrap_or_else(|_| config.telemetry.listen.clone());
    let pprof = yarilo_telemetry::profiling::PprofSettings::from_config(&config.telemetry.pprof);
    if let Some(exposed) = pprof.exposure() {
        // Deliberately at every start: profiling left on for a year is the
        // failure this guards against.
        tracing::warn!(exposed = %exposed, "profiling is on: turn telemetry.pprof off when done");
    }
    yarilo_telemetry::profiling::configure_waits(
        pprof.block_profile_rate,
        pprof.mutex_profile_fraction,
    );
    if pprof.heap_enabled {
        if let Err(e) = yarilo_telemetry::profiling::activate_heap() {
            tracing::warn!(error = %e, "telemetry.pprof.heap_enabled: heap sampling not started");
        }
    }
    let wd = &config.telemetry.liveness_watchdog;
    if wd.liveness_watchdog_enabled {
        let watchdog = Watchdog::new(wd, watch_paths, &metrics);
        watchdog.spawn();
        health.set_watchdog(watchdog);
    }
    if listen.is_empty() {
        return Ok(Telemetry {
            health,
            metrics,
            addr: None,
        });
    }
    let addr = parse_listen(&listen).map_err(|m| anyhow::anyhow!("telemetry.listen: {m}"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("telemetry.listen: cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    let server = TelemetryServer {
        health: health.clone(),
        metrics: metrics.clone(),
        fault_injection: wd.liveness_watchdog_enabled
            && wd.liveness_watchdog_fault_injection_enabled,
        pprof,
    };
    let stopped = life.stopped();
    tokio::spawn(async move {
        if let Err(e) = yarilo_telemetry::serve(listener, server, stopped).await {
            tracing::error!(error = %e, "telemetry server failed");
        }
    });
    Ok(Telemetry {
        health,
        metrics,
        addr: Some(bound),
    })
}

/// `yarilo_build_info{version,component} 1`, so dashboards can tell which
/// build and component a series comes from.
pub fn register_build_info(metrics: &Metrics, component: &str) {
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    let info: Family<Vec<(String, String)>, Gauge> = Family::default();
    info.get_or_create(&vec![
        ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
        ("component".to_string(), component.to_string()),
    ])
    .set(1);
    metrics.register(|r| {
        r.register(
            "yarilo_build_info",
            "Build and component of this process",
            info,
        )
    });
}
