//! The frame every stand-alone component runs in: configuration, logging,
//! telemetry, signals and the exit code. A component supplies only the
//! future that serves it.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use yarilo_config::Config;
use yarilo_listener::Lifecycle;
use yarilo_telemetry::{Health, Metrics};

use crate::runtime::build_runtime;

/// Options every component takes.
#[derive(clap::Args)]
pub struct ComponentArgs {
    /// Configuration file.
    #[arg(long, env = "YARILO_CONFIG", default_value = yarilo_config::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
}

/// What a component gets to run with.
pub struct Context {
    pub config: Config,
    pub life: Lifecycle,
    pub health: Health,
    pub metrics: Metrics,
}

/// Loads the configuration, starts logging and telemetry, runs the future
/// `start` returns until SIGTERM/SIGINT (then gives it the grace period to
/// finish), and turns the outcome into an exit code. A service future that
/// ends on its own with an error (a dead accept loop) exits 1 at once:
/// the orchestrator restarts the process, which is the right answer.
pub fn run<F, Fut>(name: &'static str, args: ComponentArgs, start: F) -> anyhow::Result<ExitCode>
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    run_with_grace(
        name,
        args,
        |c| Duration::from_secs(c.general.shutdown_grace_seconds),
        start,
    )
}

/// [`run`] with the component's own grace period after SIGTERM (the
/// director's is `director_service.session_grace_period`): sessions and
/// then the service future get that long, together, before the process
/// exits.
pub fn run_with_grace<G, F, Fut>(
    name: &'static str,
    args: ComponentArgs,
    grace_of: G,
    start: F,
) -> anyhow::Result<ExitCode>
where
    G: FnOnce(&Config) -> Duration,
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let config = Config::load(&args.config)?;
    let grace = grace_of(&config);
    yarilo_telemetry::init_logging(&config.log);
    build_runtime()?.block_on(async move {
        let signals = crate::runtime::Signals::install()?;
        let life = Lifecycle::new();
        let watch = vec![PathBuf::from(&config.general.data_dir)];
        let telemetry = crate::telemetry::start(&config, watch, &life).await?;
        crate::telemetry::register_build_info(&telemetry.metrics, name);
        let ctx = Context {
            config,
            life: life.clone(),
            health: telemetry.health.clone(),
            metrics: telemetry.metrics.clone(),
        };
        let mut service = tokio::spawn(start(ctx));
        tracing::info!(component = name, telemetry = ?telemetry.addr, "started");
        if let Some(addr) = telemetry.addr {
            println!("yarilo {name} running");
            println!("  telemetry   http://{addr}  (/metrics /healthz /readyz)");
        }
        tokio::select! {
            ended = &mut service => {
                match ended {
                    Ok(Ok(())) => Ok(ExitCode::SUCCESS),
                    Ok(Err(e)) => {
                        tracing::error!(component = name, error = %format!("{e:#}"), "service failed");
                        eprintln!("yarilo {name}: {e:#}");
                        Ok(ExitCode::FAILURE)
                    }
                    Err(e) => Err(anyhow::anyhow!("{name} task panicked: {e}")),
                }
            }
            clean = async {
                let stopping = crate::runtime::wait_for_stop(signals, &life, || {}).await;
                let deadline = tokio::time::Instant::now() + grace;
                let clean = crate::runtime::drain(&life, grace).await;
                (stopping, deadline, clean)
            } => {
                let (stopping, deadline, clean) = clean;
                stopping?;
                // The service saw the shutdown token; give it what is left
                // of the grace period (at least a second) to return.
                let left = deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .max(Duration::from_secs(1));
                if tokio::time::timeout(left, service).await.is_err() {
                    tracing::warn!(component = name, "grace period over; exiting");
                }
                Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(2) })
            }
        }
    })
}
