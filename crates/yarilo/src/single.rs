//! `yarilo single`: every component as tasks of one process, on local
//! disk, with in-memory coordination. With no configuration at all it runs
//! on an embedded default: loopback only, non-privileged ports, data under
//! `./yarilo-data`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use yarilo_config::Config;
use yarilo_telemetry::ReadyCheck;
use yarilo_tls::CertStore;

use yarilo_listener::Lifecycle;

use crate::runtime::{build_runtime, run_until_signal};

/// The configuration `single` runs on when no file is given. Documented in
/// docs/single.md; keep the two in step.
pub const EMBEDDED_DEFAULT: &str = include_str!("single-default.yaml");

#[derive(clap::Args)]
pub struct SingleArgs {
    /// Directory for mail, users, keys and certificates [default: ./yarilo-data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Configuration file; without it the embedded default is used.
    #[arg(long, env = "YARILO_CONFIG")]
    config: Option<PathBuf>,
}

pub fn embedded_default() -> anyhow::Result<Config> {
    Ok(Config::from_yaml(
        EMBEDDED_DEFAULT,
        "<embedded single default>",
    )?)
}

pub fn main(args: SingleArgs) -> anyhow::Result<ExitCode> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => embedded_default()?,
    };
    if let Some(data) = &args.data {
        config.general.data_dir = data.display().to_string();
    }
    yarilo_telemetry::init_logging(&config.log);
    build_runtime()?.block_on(run(config))
}

async fn run(mut config: Config) -> anyhow::Result<ExitCode> {
    let signals = crate::runtime::Signals::install()?;
    let data_dir = absolute(Path::new(&config.general.data_dir))?;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    // Every path derived from the data dir (users file, mail) is absolute.
    config.general.data_dir = data_dir.display().to_string();
    let config = Arc::new(config);
    let life = Lifecycle::new();

    let (certs, cert_note) = client_certificates(&config, &data_dir)?;
    if config.tls.reload_interval_seconds > 0 {
        certs.spawn_watch(Duration::from_secs(config.tls.reload_interval_seconds));
    }

    let telemetry = crate::telemetry::start(&config, vec![data_dir.clone()], &life).await?;
    crate::telemetry::register_build_info(&telemetry.metrics, "single");
    let probe_dir = data_dir.clone();
    telemetry
        .health
        .add_ready_check(ReadyCheck::new("data_dir", move || {
            let dir = probe_dir.clone();
            async move {
                tokio::task::spawn_blocking(move || data_dir_writable(&dir))
                    .await
                    .map_err(|e| e.to_string())?
            }
        }));

    crate::probes::start_freshness(
        &config,
        &telemetry.health,
        &telemetry.metrics,
        vec![data_dir.clone()],
    );
    // One process: in-memory locks and change events.
    let events = Arc::new(yarilo_locks::MemoryEventBus::default());
    let store = yarilo_store::Store::new(
        yarilo_store::StoreSettings::from_config(&config.store, &config.general.data_dir),
        Arc::new(yarilo_locks::MemoryLocker::new()),
        events,
    )
    .context("store")?;
    telemetry.metrics.register(|r| store.register_metrics(r));
    let authenticator = Arc::new(yarilo_auth::Authenticator::from_config(&config).context("auth")?);
    telemetry
        .metrics
        .register(|r| authenticator.register_metrics(r));
    let listener_metrics = telemetry
        .metrics
        .register(yarilo_listener::ListenerMetrics::register);
    let mail = crate::mail::MailContext {
        config: config.clone(),
        store,
        auth: yarilo_auth::AuthHandle::Local(authenticator),
        certs: certs.clone(),
        life: life.clone(),
        metrics: telemetry.metrics.clone(),
        health: telemetry.health.clone(),
        listener_metrics,
    };
    let mut bound = Vec::new();
    bound.extend(mail.start_imap().await?);
    bound.extend(mail.start_pop3().await?);
    bound.extend(mail.start_lmtp().await?);
    bound.extend(mail.start_submission().await?);

    println!("yarilo single {} running", env!("CARGO_PKG_VERSION"));
    println!("  data        {}", data_dir.display());
    println!("  tls         {cert_note}");
    match telemetry.addr {
        Some(addr) => println!("  telemetry   http://{addr}  (/metrics /healthz /readyz)"),
        None => println!("  telemetry   off"),
    }
    for (name, addr) in &bound {
        println!("  {name:<11} {addr}");
    }
    println!(
        "  submission relays to {}:{}",
        config.submission.relay_host, config.submission.relay_port
    );
    println!("  not yet in this build: managesieve, jmap (their ports stay closed)");
    println!(
        "Add a user:  yarctl user add alice --password 'a-long-secret' --data {}",
        data_dir.display()
    );
    println!(
        "             (from a source checkout: cargo run --release --bin yarctl -- user add …)"
    );
    println!("Stop with Ctrl-C or SIGTERM.");

    let grace = Duration::from_secs(config.general.shutdown_grace_seconds);
    let reload = certs.clone();
    let clean = run_until_signal(signals, &life, grace, move || {
        if let Err(e) = reload.reload() {
            tracing::error!(error = %e, "certificate reload failed; keeping the previous ones");
        }
    })
    .await?;
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// The client-facing certificates: the configured ones, or a self-signed
/// pair generated once under `<data>/tls/`.
pub(crate) fn client_certificates(
    config: &Config,
    data_dir: &Path,
) -> anyhow::Result<(Arc<CertStore>, String)> {
    if !config.tls.cert.is_empty() {
        let mut pairs = vec![(
            PathBuf::from(&config.tls.cert),
            PathBuf::from(&config.tls.key),
        )];
        pairs.extend(
            config
                .tls
                .sni
                .iter()
                .map(|p| (PathBuf::from(&p.cert), PathBuf::from(&p.key))),
        );
        let store = CertStore::load(pairs).context("tls.cert")?;
        return Ok((store, format!("certificate {}", config.tls.cert)));
    }
    let (cert, key, fresh) =
        yarilo_tls::ensure_self_signed(&data_dir.join("tls"), &config.general.hostname)
            .context("cannot create the self-signed certificate")?;
    let note = format!(
        "self-signed certificate {} ({})",
        cert.display(),
        if fresh { "generated now" } else { "reused" }
    );
    Ok((CertStore::load(vec![(cert, key)])?, note))
}

fn data_dir_writable(dir: &Path) -> Result<(), String> {
    let probe = dir.join(".ready-probe");
    std::fs::write(&probe, b"ok").map_err(|e| format!("{} not writable: {e}", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// `p` made absolute against the working directory, `.` components
/// dropped, so what is printed is a path a user can copy.
fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    Ok(joined.components().collect())
}
