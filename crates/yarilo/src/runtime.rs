//! Process life cycle shared by every component: signals and the grace
//! period around [`Lifecycle`].

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use yarilo_listener::Lifecycle;

/// The signals a component reacts to. Installed first thing, before the
/// process announces anything: a SIGTERM that arrives while listeners are
/// still being bound must shut down cleanly, not kill the process.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Waits for SIGTERM or SIGINT, running `on_hup` on every SIGHUP
/// meanwhile; then stops accepting and gives sessions `grace` to end.
/// Returns whether they all ended in time.
pub async fn run_until_signal(
    signals: Signals,
    life: &Lifecycle,
    grace: Duration,
    on_hup: impl Fn(),
) -> anyhow::Result<bool> {
    wait_for_stop(signals, life, on_hup).await?;
    Ok(drain(life, grace).await)
}

/// Waits for SIGTERM or SIGINT (or the lifecycle being cancelled),
/// running `on_hup` on every SIGHUP meanwhile.
pub async fn wait_for_stop(
    signals: Signals,
    life: &Lifecycle,
    on_hup: impl Fn(),
) -> anyhow::Result<()> {
    let Signals {
        mut term,
        mut int,
        mut hup,
    } = signals;
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break }
            _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break }
            _ = hup.recv() => { tracing::info!("SIGHUP: reloading"); on_hup() }
            _ = life.token.cancelled() => break,
        }
    }
    Ok(())
}

/// Stops accepting and gives sessions `grace` to end; whether they all
/// did.
pub async fn drain(life: &Lifecycle, grace: Duration) -> bool {
    let clean = life.drain(grace).await;
    // Locks released by the last sessions must reach the lock service
    // before exit, or they stay held until their TTL.
    yarilo_locks::flush_releases(Duration::from_secs(2)).await;
    clean
}

pub fn build_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("yarilo")
        .build()?)
}
