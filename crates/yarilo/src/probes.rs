//! What a component registers for its startup and readiness probes
//! (`docs/operations.md`, "The three probes of a container"): the
//! dependencies `/startupz` waits for, and the request-path freshness
//! check behind `/readyz`.

use std::path::PathBuf;
use std::time::Duration;

use yarilo_config::Config;
use yarilo_telemetry::{Freshness, Health, Metrics, ReadyCheck};
use yarilo_tls::internal::InternalTls;

/// Bound on one dependency probe (below the 2 s a check may take).
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// A startup check named `name`: `addr` accepts a connection (internal
/// mTLS when `tls`) and answers `VERSION\t<service>\t1…`.
pub fn version_check(
    name: &'static str,
    addr: String,
    tls: Option<InternalTls>,
    service: &'static str,
) -> ReadyCheck {
    ReadyCheck::new(name, move || {
        let (addr, tls) = (addr.clone(), tls.clone());
        async move {
            if addr.is_empty() {
                return Err("no address configured".to_string());
            }
            let mut s = yarilo_login::hop::dial(&addr, tls.as_ref(), PROBE_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            let hello = ["VERSION", service, "1", "0"].map(String::from);
            let answer =
                tokio::time::timeout(PROBE_TIMEOUT, yarilo_wire::handshake(&mut s, &hello, 1024))
                    .await
                    .map_err(|_| format!("{addr}: no VERSION within {PROBE_TIMEOUT:?}"))?
                    .map_err(|e| format!("{addr}: {e}"))?;
            match answer.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["VERSION", s, "1", ..] if s == service => Ok(()),
                _ => Err(format!("{addr}: unexpected answer {answer:?}")),
            }
        }
    })
}

/// The auth service (`auth_client.address`) as a startup dependency.
pub fn auth_check(config: &Config) -> anyhow::Result<ReadyCheck> {
    let tls = InternalTls::from_config(&config.internal_tls)?;
    Ok(version_check(
        "auth",
        config.auth_client.address.clone(),
        tls,
        "auth",
    ))
}

/// Warden (the first of `warden_client.endpoints`) as a startup
/// dependency; `None` when the login does not use warden.
pub fn warden_check(config: &Config) -> anyhow::Result<Option<ReadyCheck>> {
    let w = &config.warden_client;
    if !w.enabled {
        return Ok(None);
    }
    let tls = InternalTls::from_config(&config.internal_tls)?;
    let endpoints = w.endpoints.clone();
    Ok(Some(ReadyCheck::new("warden", move || {
        // Any endpoint answering is enough: the client fails over.
        let checks: Vec<ReadyCheck> = endpoints
            .iter()
            .map(|e| version_check("warden", e.clone(), tls.clone(), "warden"))
            .collect();
        async move {
            let mut last = "no endpoint configured".to_string();
            for c in checks {
                match c.run().await {
                    Ok(()) => return Ok(()),
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    })))
}

/// The locks service as a startup dependency, through the client the
/// store uses (it redials on every call until one succeeds).
pub fn locks_check(locks: yarilo_locks::LocksClient) -> ReadyCheck {
    ReadyCheck::new("locks", move || {
        let locks = locks.clone();
        async move { locks.connect().await.map_err(|e| e.to_string()) }
    })
}

/// Starts the request-path freshness check (stat-checking `paths`, entering
/// the watchdog's gate when there is one) and registers it with readiness.
pub fn start_freshness(config: &Config, health: &Health, metrics: &Metrics, paths: Vec<PathBuf>) {
    let gate = health.watchdog().map(|w| w.gate());
    let freshness = Freshness::new(&config.telemetry.readiness, paths, gate, metrics);
    freshness.spawn();
    health.add_ready_check(freshness.ready_check());
}
