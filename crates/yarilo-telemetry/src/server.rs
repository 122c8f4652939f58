use std::future::Future;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::{Health, Metrics};

/// What the telemetry endpoint serves.
#[derive(Clone)]
pub struct TelemetryServer {
    pub health: Health,
    pub metrics: Metrics,
    /// Exposes `POST /debug/fault/deadlock` (only with a watchdog).
    pub fault_injection: bool,
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
        .route("/readyz", get(readyz));
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
        let state = TelemetryServer {
            health,
            metrics: Metrics::new(),
            fault_injection: true,
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
        tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
