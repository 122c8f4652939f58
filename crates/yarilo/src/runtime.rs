//! Process life cycle shared by every component: signals and the grace
//! period around [`Lifecycle`].

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use yarilo_listener::Lifecycle;

/// Waits for SIGTERM or SIGINT, running `on_hup` on every SIGHUP
/// meanwhile; then stops accepting and gives sessions `grace` to end.
/// Returns whether they all ended in time.
pub async fn run_until_signal(
    life: &Lifecycle,
    grace: Duration,
    on_hup: impl Fn(),
) -> anyhow::Result<bool> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break }
            _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break }
            _ = hup.recv() => { tracing::info!("SIGHUP: reloading"); on_hup() }
            _ = life.token.cancelled() => break,
        }
    }
    let clean = life.drain(grace).await;
    // Locks released by the last sessions must reach the lock service
    // before exit, or they stay held until their TTL.
    yarilo_locks::flush_releases(Duration::from_secs(2)).await;
    Ok(clean)
}

pub fn build_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("yarilo")
        .build()?)
}
