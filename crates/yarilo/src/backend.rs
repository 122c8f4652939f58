//! The two ends of the login → backend hop as components:
//!
//! * `yarilo imap` — the IMAP backend of the standalone and director
//!   shapes: binds `services.imap` (address and port; the hop is plain TCP
//!   or internal mTLS, never client TLS, so `ssl_mode` is ignored), admits
//!   only preambles from login peers ([`yarilo_login::gate`]), and runs
//!   the IMAP session already authenticated. Store writes go through the
//!   remote locks service (`locks_client`), change events through its
//!   event bus, auth through `yarilo auth` (`auth_client`).
//! * `yarilo imap-login` — the login proxy: binds `services.imap` and
//!   `services.imaps`, authenticates through `yarilo auth`, routes by
//!   `login.imap.backend_addr` / `director_addr`.
//!
//! Each runs in its own process with its own configuration file (the two
//! bind the same `services.imap` key on different hosts or ports).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use yarilo_auth::AuthHandle;
use yarilo_config::{Config, SslMode};
use yarilo_listener::{Listener, ListenerMetrics};
use yarilo_login::gate::{GateSettings, PreambleGate};
use yarilo_tls::internal::InternalTls;
use yarilo_tls::CertStore;

use crate::component::{self, ComponentArgs, Context};

/// Bound on the internal TLS handshake of a login peer.
const HOP_HANDSHAKE: Duration = Duration::from_secs(10);

/// The auth service as a client (`auth_client.*`, mTLS from
/// `internal_tls.*`).
fn remote_auth(config: &Config) -> anyhow::Result<AuthHandle> {
    let settings =
        yarilo_auth::client::ClientSettings::from_config(config).context("internal_tls")?;
    Ok(AuthHandle::Remote(yarilo_auth::client::AuthClient::new(
        settings,
    )))
}

/// The mail store over the remote locks service and its event bus, as in
/// the standalone shape (several backends on one volume).
async fn remote_store(ctx: &Context) -> anyhow::Result<yarilo_store::Store> {
    let config = &ctx.config;
    let locks = yarilo_locks::LocksClient::from_config(config).context("locks_client")?;
    locks
        .connect()
        .await
        .context("locks_client: cannot reach the locks service")?;
    let events = locks.event_bus();
    let store = yarilo_store::Store::new(
        yarilo_store::StoreSettings::from_config(&config.store, &config.general.data_dir),
        Arc::new(locks),
        Arc::new(events),
    )
    .context("store")?;
    ctx.metrics.register(|r| store.register_metrics(r));
    Ok(store)
}

/// `yarilo imap`: the IMAP backend behind login proxies.
pub fn imap(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("imap", args, |ctx: Context| async move {
        let config = &ctx.config;
        let gate_settings = GateSettings::from_config(config, "imap")?;
        let hop_tls = InternalTls::from_config(&config.internal_tls).context("internal_tls")?;
        let auth = remote_auth(config)?;
        let store = remote_store(&ctx).await?;
        let settings = yarilo_imap::ImapSettings::from_config(config);
        let server = ctx
            .metrics
            .register(|r| yarilo_imap::ImapServer::new(settings, store, auth.clone(), None, r));
        let gate = Arc::new(
            ctx.metrics
                .register(|r| PreambleGate::new(gate_settings, auth, r)),
        );
        let listener_metrics = ctx.metrics.register(ListenerMetrics::register);
        let mut service = config.services.imap.clone();
        service.enabled = true;
        service.haproxy_protocol = false;
        service.ssl_mode = if hop_tls.is_some() {
            SslMode::Ssl
        } else {
            SslMode::No
        };
        let listener = Listener::bind(
            "imap",
            &service,
            hop_tls.as_ref().map(InternalTls::acceptor),
            config.imap.max_connections,
        )
        .await
        .context("services.imap")?;
        println!("  imap        {}", listener.local_addr());
        ctx.health.add_ready_check(listener.ready_check());
        let life = ctx.life.clone();
        listener
            .serve(ctx.life.clone(), listener_metrics, move |accepted| {
                let gate = gate.clone();
                let server = server.clone();
                let life = life.clone();
                async move {
                    let mut conn = match accepted.establish(HOP_HANDSHAKE).await {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::info!(error = %e, "login peer dropped before the preamble");
                            return;
                        }
                    };
                    let Ok(admitted) = gate.admit(&mut conn).await else {
                        return;
                    };
                    match admitted.tag {
                        Some(tag) => {
                            server
                                .handle_proxied(
                                    conn,
                                    admitted.user,
                                    admitted.fields,
                                    tag,
                                    life.stopped(),
                                )
                                .await
                        }
                        None => {
                            server
                                .handle_preauth(
                                    conn,
                                    admitted.user,
                                    admitted.fields,
                                    life.stopped(),
                                )
                                .await
                        }
                    }
                }
            })
            .await;
        Ok(())
    })
}

/// `yarilo imap-login`: the IMAP login proxy.
pub fn imap_login(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("imap-login", args, |ctx: Context| async move {
        let config = &ctx.config;
        let hop_tls = InternalTls::from_config(&config.internal_tls).context("internal_tls")?;
        let settings = yarilo_login::LoginSettings::imap(config);
        let router = yarilo_login::route::Router::from_config(
            &config.login.imap,
            "login.imap",
            "imap",
            hop_tls.clone(),
            settings.connect_timeout,
        )?;
        let auth = remote_auth(config)?;
        let certs = client_certificates(config)?;
        let acceptor = certs.acceptor(&config.tls.min_version).context("tls")?;
        let starttls = match config.services.imap.ssl_mode {
            SslMode::No => None,
            _ => Some(acceptor.clone()),
        };
        let handshake_timeout = settings.handshake_timeout;
        let server = ctx.metrics.register(|r| {
            yarilo_login::imap::ImapLoginServer::new(settings, auth, router, hop_tls, starttls, r)
        });
        let listen = yarilo_login::listen::ListenContext {
            general: config.general.clone(),
            tls: Some(acceptor),
            life: ctx.life.clone(),
            health: ctx.health.clone(),
            metrics: ctx.metrics.register(ListenerMetrics::register),
            handshake_timeout,
        };
        let mut bound = 0;
        for (name, svc) in [
            ("imap", &config.services.imap),
            ("imaps", &config.services.imaps),
        ] {
            let srv = server.clone();
            if let Some(addr) = listen
                .serve(name, svc, config.imap.max_connections, move |conn| {
                    srv.clone().handle(conn)
                })
                .await
                .with_context(|| format!("services.{name}"))?
            {
                println!("  {name:<11} {addr}");
                bound += 1;
            }
        }
        if bound == 0 {
            anyhow::bail!("services.imap and services.imaps are both disabled: nothing to serve");
        }
        ctx.life.stopped().await;
        Ok(())
    })
}

/// The client-facing certificates: `tls.cert`/`tls.key` (+ `tls.sni`), or
/// a self-signed pair generated once under `<general.data_dir>/tls/`.
fn client_certificates(config: &Config) -> anyhow::Result<Arc<CertStore>> {
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
        return CertStore::load(pairs).context("tls.cert");
    }
    let dir = Path::new(&config.general.data_dir).join("tls");
    let (cert, key, _) = yarilo_tls::ensure_self_signed(&dir, &config.general.hostname)
        .context("cannot create the self-signed certificate")?;
    Ok(CertStore::load(vec![(cert, key)])?)
}
