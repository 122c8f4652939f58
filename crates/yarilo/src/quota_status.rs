//! `yarilo quota-status`: the Postfix policy service answering whether a
//! recipient has room (`quota_status.*`). It reads users through the auth
//! service (`auth_client`) and their usage from the shared store (remote
//! locks, `locks_client`), so every replica answers for every user; the
//! MTA dials one stable address (`check_policy_service`).

use std::process::ExitCode;

use anyhow::Context as _;
use yarilo_quota_status::{QuotaStatusMetrics, QuotaStatusServer, QuotaStatusSettings};

use crate::component::{self, ComponentArgs, Context};

pub fn quota_status(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("quota-status", args, |ctx: Context| async move {
        let config = &ctx.config;
        let auth = crate::backend::backend_auth(&ctx, true)?;
        let store = crate::backend::remote_store(&ctx).await?;
        let settings = QuotaStatusSettings::from_config(config);
        let metrics = ctx.metrics.register(QuotaStatusMetrics::register);
        let addr = yarilo_config::parse_listen(&config.quota_status.listen)
            .map_err(|m| anyhow::anyhow!("quota_status.listen: {m}"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("quota_status.listen {addr}"))?;
        println!("  quota-status {}", listener.local_addr()?);
        let server = QuotaStatusServer::new(settings, auth, store, metrics);
        server.serve(listener, ctx.life.clone()).await;
        Ok(())
    })
}
