use std::future::Future;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::profiling::{self, PprofSettings, ProfileError, WaitKind};
use crate::{Health, Metrics};

/// What the telemetry endpoint serves.
#[derive(Clone)]
pub struct TelemetryServer {
    pub health: Health,
    pub metrics: Metrics,
    /// Exposes `POST /debug/fault/deadlock` (only with a watchdog).
    pub fault_injection: bool,
    /// `/debug/pprof/*` (`telemetry.pprof`).
    pub pprof: PprofSettings,
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    state: TelemetryServer,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/startupz", get(startupz))
        .route("/loadz", get(loadz));
    // No index page: only the profiles a switch allows exist as routes.
    if state.pprof.enabled {
        app = app
            .route("/debug/pprof/profile", get(pprof_cpu))
            .route("/debug/pprof/tasks", get(pprof_tasks))
            .route("/debug/pprof/block", get(pprof_block))
            .route("/debug/pprof/mutex", get(pprof_mutex))
            .route("/debug/pprof/cmdline", get(pprof_cmdline));
    }
    if state.pprof.heap_enabled {
        app = app.route("/debug/pprof/heap", get(pprof_heap));
    }
    if state.fault_injection && state.health.watchdog().is_some() {
        tracing::warn!(
            "liveness fault injection is enabled: POST /debug/fault/deadlock wedges this process's \
             health check on purpose"
        );
        app = app.route("/debug/fault/deadlock", post(fault_deadlock));
    }
    axum::serve(listener, app.with_state(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics(State(s): State<TelemetryServer>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], s.metrics.render())
}

async fn healthz(State(s): State<TelemetryServer>) -> impl IntoResponse {
    if s.health.live() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "liveness watchdog tripped\n",
        )
    }
}

async fn readyz(State(s): State<TelemetryServer>) -> impl IntoResponse {
    let failing = s.health.not_ready().await;
    if failing.is_empty() {
        return (StatusCode::OK, "ready\n".to_string());
    }
    let body: String = failing
        .iter()
        .map(|(name, why)| format!("{name}: {why}\n"))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, body)
}

async fn startupz(State(s): State<TelemetryServer>) -> impl IntoResponse {
    let failing = s.health.not_started().await;
    if failing.is_empty() {
        return (StatusCode::OK, "started\n".to_string());
    }
    let body: String = failing
        .iter()
        .map(|(name, why)| format!("{name}: {why}\n"))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, body)
}

/// The highest load first, then each source.
async fn loadz(State(s): State<TelemetryServer>) -> impl IntoResponse {
    let loads = s.health.loads();
    let top = loads.iter().map(|(_, l)| *l).max().unwrap_or(0);
    let mut body = format!("{top}\n");
    for (name, l) in loads {
        body.push_str(&format!("{name} {l}\n"));
    }
    body
}

const PROFILE: &str = "application/octet-stream";

fn profile_response(r: Result<Vec<u8>, ProfileError>) -> axum::response::Response {
    match r {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, PROFILE),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"profile\"",
                ),
            ],
            bytes,
        )
            .into_response(),
        Err(e @ ProfileError::Busy) => (StatusCode::CONFLICT, format!("{e}\n")).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// `?seconds=N` (default 30, 1 to 300), as Go's handler takes it.
async fn pprof_cpu(
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> axum::response::Response {
    let seconds = match q.get("seconds").map(|s| s.parse::<u64>()) {
        None => 30,
        Some(Ok(n)) if (1..=300).contains(&n) => n,
        Some(_) => {
            return (StatusCode::BAD_REQUEST, "seconds must be 1 to 300\n").into_response();
        }
    };
    profile_response(profiling::cpu_profile(seconds).await)
}

async fn pprof_heap() -> axum::response::Response {
    profile_response(profiling::heap_profile().await)
}

async fn pprof_block() -> axum::response::Response {
    profile_response(Ok(profiling::wait_profile(WaitKind::Block)))
}

async fn pprof_mutex() -> axum::response::Response {
    profile_response(Ok(profiling::wait_profile(WaitKind::Mutex)))
}

async fn pprof_tasks() -> String {
    profiling::tasks_view()
}

async fn pprof_cmdline() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.join("\0")
}

async fn fault_deadlock(State(s): State<TelemetryServer>) -> impl IntoResponse {
    match s.health.watchdog() {
        Some(w) => {
            w.inject_deadlock();
            (StatusCode::ACCEPTED, "watchdog gate deadlocked\n")
        }
        None => (StatusCode::NOT_FOUND, "no watchdog\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReadyCheck;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn endpoints_answer_and_metrics_parse() {
        let health = Health::new();
        let up = Arc::new(AtomicBool::new(false));
        let flag = up.clone();
        health.add_ready_check(ReadyCheck::new("imap", move || {
            let ok = flag.load(Ordering::Relaxed);
            async move {
                if ok {
                    Ok(())
                } else {
                    Err("not listening".into())
                }
            }
        }));
        let auth_up = Arc::new(AtomicBool::new(false));
        let flag = auth_up.clone();
        health.add_startup_check(ReadyCheck::new("auth", move || {
            let ok = flag.load(Ordering::Relaxed);
            async move {
                if ok {
                    Ok(())
                } else {
                    Err("connection refused".into())
                }
            }
        }));
        health.add_load("listener imap", || 40);
        health.add_load("listener imaps", || 75);
        let state = TelemetryServer {
            health,
            metrics: Metrics::new(),
            fault_injection: true,
            pprof: PprofSettings {
                enabled: true,
                ..Default::default()
            },
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, state, async {
            let _ = rx.await;
        }));
        let client = reqwest::Client::new();
        let get = |p: &str| client.get(format!("{base}{p}")).send();
        assert_eq!(get("/healthz").await.unwrap().status(), 200);
        let r = get("/readyz").await.unwrap();
        assert_eq!(r.status(), 503);
        assert!(r.text().await.unwrap().contains("imap: not listening"));
        up.store(true, Ordering::Relaxed);
        assert_eq!(get("/readyz").await.unwrap().status(), 200);
        let r = get("/startupz").await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.text().await.unwrap(), "auth: connection refused\n");
        auth_up.store(true, Ordering::Relaxed);
        assert_eq!(get("/startupz").await.unwrap().status(), 200);
        assert_eq!(
            get("/loadz").await.unwrap().text().await.unwrap(),
            "75\nlistener imap 40\nlistener imaps 75\n"
        );
        let text = get("/metrics").await.unwrap().text().await.unwrap();
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
        assert!(scrape
            .samples
            .iter()
            .any(|s| s.metric == "yarilo_process_start_time_seconds"));
        // Without a watchdog the fault endpoint does not exist.
        let r = client
            .post(format!("{base}/debug/fault/deadlock"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        // Profiles: the enabled ones only, and no index page.
        assert_eq!(get("/debug/pprof/").await.unwrap().status(), 404);
        assert_eq!(get("/debug/pprof/heap").await.unwrap().status(), 404);
        let block = get("/debug/pprof/block").await.unwrap();
        assert_eq!(block.status(), 200);
        let p = profiling::decode(&block.bytes().await.unwrap()).unwrap();
        assert!(p.sample.is_empty(), "no rate set: an empty profile");
        let cpu = get("/debug/pprof/profile?seconds=1").await.unwrap();
        assert_eq!(cpu.status(), 200);
        let p = profiling::decode(&cpu.bytes().await.unwrap()).unwrap();
        assert!(!p.string_table.is_empty());
        tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
