//! The internal coordination services as stand-alone components.

use std::process::ExitCode;

use anyhow::Context as _;
use yarilo_telemetry::ReadyCheck;

use crate::component::{self, ComponentArgs, Context};

/// Readiness from a service's own probe (Redis reachable, in remote mode).
fn ready_check(name: &'static str, readiness: yarilo_locks::Readiness) -> ReadyCheck {
    ReadyCheck::new(name, move || {
        let r = readiness.clone();
        async move {
            if r.ready().await {
                Ok(())
            } else {
                Err("state store (Redis) unreachable".to_string())
            }
        }
    })
}

/// `yarilo locks`: the lock service (embedded unix socket or remote TCP).
/// No liveness self-check: a hung Redis makes it not ready, never dead.
pub fn locks(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("locks", args, |ctx: Context| async move {
        let svc = yarilo_locks::LocksService::from_config(&ctx.config)
            .await
            .context("locks_service")?;
        ctx.metrics.register(|r| svc.register_metrics(r));
        ctx.health
            .add_ready_check(ready_check("locks", svc.readiness()));
        if ctx.config.locks_service.mode == yarilo_config::LocksMode::Remote {
            ctx.health
                .add_startup_check(ready_check("redis", svc.readiness()));
        }
        svc.serve(ctx.life.stopped()).await.context("locks service")
    })
}

/// `yarilo warden`: connection/session limits, auth penalty, kick bus.
pub fn warden(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("warden", args, |ctx: Context| async move {
        let svc = yarilo_warden::WardenService::from_config(&ctx.config)
            .await
            .context("warden_service")?;
        ctx.metrics.register(|r| svc.register_metrics(r));
        ctx.health
            .add_ready_check(ready_check("warden", svc.readiness()));
        if ctx.config.warden_service.state_backend == yarilo_config::WardenStateBackend::Redis {
            ctx.health
                .add_startup_check(ready_check("redis", svc.readiness()));
        }
        svc.serve(ctx.life.stopped())
            .await
            .context("warden service")
    })
}

/// `yarilo director`: LOOKUP for login pods, backend registration, the
/// admin API. A single replica (a ring of one).
pub fn director(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    let grace = |c: &yarilo_config::Config| {
        std::time::Duration::from_secs(c.director_service.session_grace_period)
    };
    component::run_with_grace("director", args, grace, |ctx: Context| async move {
        let director = yarilo_director::DirectorComponent::from_config(&ctx.config)
            .await
            .context("director_service")?;
        ctx.metrics.register(|r| director.register_metrics(r));
        let addr = director.local_addr()?;
        println!("  director    {addr}");
        if let Some(api) = director.api_addr() {
            println!("  admin api   http://{api}");
        }
        // Bound above; serving starts right below.
        ctx.health
            .add_ready_check(ReadyCheck::new("director", || async { Ok(()) }));
        director
            .serve(ctx.life.stopped())
            .await
            .context("director service")
    })
}

/// `yarilo backend-reg`: the sidecar registering this backend pod with the
/// directors, heartbeating while every protocol container is ready, and
/// sending BACKEND-DOWN on SIGTERM.
pub fn backend_reg(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("backend-reg", args, |ctx: Context| async move {
        ctx.health
            .add_ready_check(ReadyCheck::new("backend-reg", || async { Ok(()) }));
        let b = &ctx.config.backend_register;
        let tls = yarilo_tls::internal::InternalTls::from_config(&ctx.config.internal_tls)
            .context("internal_tls")?;
        ctx.health.add_startup_check(crate::probes::version_check(
            "director",
            b.director_addr.clone(),
            tls,
            "director",
        ));
        yarilo_director::run_backend_reg(&ctx.config, ctx.life.stopped())
            .await
            .context("backend_register")
    })
}

/// `yarilo auth`: passdb/userdb chains, SASL, tokens for the login pods
/// and backends (`auth_service`, mTLS from `internal_tls`).
pub fn auth(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    use std::sync::Arc;
    component::run("auth", args, |ctx: Context| async move {
        let config = &ctx.config;
        let tls = yarilo_tls::internal::InternalTls::from_config(&config.internal_tls)
            .context("internal_tls")?
            .map(|t| t.acceptor());
        let auth =
            Arc::new(yarilo_auth::Authenticator::from_config(config).context("passdb/userdb")?);
        ctx.metrics.register(|r| auth.register_metrics(r));
        for (name, dbs) in [("passdb", auth.passdbs()), ("userdb", auth.userdbs())] {
            let dbs = dbs.to_vec();
            ctx.health.add_startup_check(ReadyCheck::new(name, move || {
                let dbs = dbs.clone();
                async move {
                    for db in &dbs {
                        db.ping()
                            .await
                            .map_err(|e| format!("{}: {e}", db.describe()))?;
                    }
                    Ok(())
                }
            }));
        }
        let addr = yarilo_config::parse_listen(&config.auth_service.listen)
            .map_err(|m| anyhow::anyhow!("auth_service.listen: {m}"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("auth_service.listen: cannot listen on {addr}"))?;
        println!("  auth        {}", listener.local_addr()?);
        ctx.health
            .add_ready_check(ReadyCheck::new("auth", || async { Ok(()) }));
        yarilo_auth::service::run(
            listener,
            auth,
            yarilo_auth::service::ServiceSettings::from_config(&config.auth_service),
            tls,
            ctx.life.stopped(),
        )
        .await
        .context("auth service")
    })
}
