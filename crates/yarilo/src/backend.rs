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
//! * `yarilo pop3` / `pop3-login`, `yarilo submission` /
//!   `submission-login`: the same pair for POP3 (`services.pop3`,
//!   `pop3s`) and submission (`services.submission`, `submissions`); the
//!   submission preamble carries the client's EHLO domain (`HELO=`).
//! * `yarilo lmtp` / `lmtp-login`: LMTP has no credentials; the proxy
//!   looks each recipient up (the auth service issuing a delivery token),
//!   routes it and opens one backend connection per recipient with the
//!   same `YARILO` preamble, which the backend's gate VERIFYs before it
//!   greets.
//!
//! Each runs in its own process with its own configuration file (the two
//! ends of a pair bind the same `services.<name>` key on different hosts
//! or ports).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use yarilo_auth::AuthHandle;
use yarilo_config::{Config, SslMode};
use yarilo_listener::{Listener, ListenerMetrics};
use yarilo_login::gate::{GateSettings, PreambleGate};
use yarilo_tls::internal::InternalTls;

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

/// A protocol backend's auth client, with its startup check (auth
/// reachable) and the request-path freshness check (over the mail store
/// base when `store` is set).
pub(crate) fn backend_auth(ctx: &Context, store: bool) -> anyhow::Result<AuthHandle> {
    let config = &ctx.config;
    ctx.health
        .add_startup_check(crate::probes::auth_check(config).context("internal_tls")?);
    let paths = if store {
        vec![std::path::PathBuf::from(&config.general.data_dir)]
    } else {
        Vec::new()
    };
    crate::probes::start_freshness(config, &ctx.health, &ctx.metrics, paths);
    remote_auth(config)
}

/// The mail store over the remote locks service and its event bus, as in
/// the standalone shape (several backends on one volume).
pub(crate) async fn remote_store(ctx: &Context) -> anyhow::Result<yarilo_store::Store> {
    let config = &ctx.config;
    let locks = yarilo_locks::LocksClient::from_config(config).context("locks_client")?;
    // Not fatal: `/startupz` reports it until the locks service answers
    // (the client redials on every request).
    if let Err(e) = locks.connect().await {
        tracing::warn!(error = %e, "locks service not reachable yet");
    }
    ctx.health
        .add_startup_check(crate::probes::locks_check(locks.clone()));
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

/// Binds a backend's hop listener on `services.<name>`'s address and
/// port: plain TCP, or internal mTLS when `internal_tls.enabled` (the
/// service's `ssl_mode`, `haproxy_protocol` and `enabled` do not apply to
/// the hop).
async fn bind_hop_listener(
    ctx: &Context,
    name: &str,
    service: &yarilo_config::Service,
    hop_tls: Option<&InternalTls>,
    max_connections: usize,
) -> anyhow::Result<Listener> {
    let mut service = service.clone();
    service.enabled = true;
    service.haproxy_protocol = false;
    service.ssl_mode = if hop_tls.is_some() {
        SslMode::Ssl
    } else {
        SslMode::No
    };
    let listener = Listener::bind(
        name,
        &service,
        hop_tls.map(InternalTls::acceptor),
        max_connections,
    )
    .await
    .with_context(|| format!("services.{name}"))?;
    println!("  {name:<11} {}", listener.local_addr());
    listener.register_health(&ctx.health);
    Ok(listener)
}

/// `yarilo pop3`: the POP3 backend behind `pop3-login`. Every connection
/// must carry a verified preamble; the session starts in TRANSACTION and
/// its first line answers the client's PASS/AUTH.
pub fn pop3(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("pop3", args, |ctx: Context| async move {
        let config = &ctx.config;
        let gate_settings = GateSettings::from_config(config, "pop3")?;
        let hop_tls = InternalTls::from_config(&config.internal_tls).context("internal_tls")?;
        let auth = backend_auth(&ctx, true)?;
        let store = remote_store(&ctx).await?;
        let settings = yarilo_pop3::Pop3Settings::from_config(config).context("pop3")?;
        let server = ctx
            .metrics
            .register(|r| yarilo_pop3::Pop3Server::new(settings, store, auth.clone(), None, r));
        let gate = Arc::new(
            ctx.metrics
                .register(|r| PreambleGate::new(gate_settings, auth, r)),
        );
        let listener_metrics = ctx.metrics.register(ListenerMetrics::register);
        let listener = bind_hop_listener(
            &ctx,
            "pop3",
            &config.services.pop3,
            hop_tls.as_ref(),
            config.imap.max_connections,
        )
        .await?;
        let life = ctx.life.clone();
        listener
            .serve(ctx.life.clone(), listener_metrics, move |accepted| {
                let (gate, server, life) = (gate.clone(), server.clone(), life.clone());
                async move {
                    let Some((conn, admitted, _record)) = admit(&gate, accepted).await else {
                        return;
                    };
                    server
                        .handle_proxied(conn, admitted.user, admitted.fields, life.stopped())
                        .await
                }
            })
            .await;
        Ok(())
    })
}

/// The internal TLS handshake and the gate: the admitted connection (its
/// `peer` now the real client) or `None` (already logged and counted).
async fn admit(
    gate: &PreambleGate,
    accepted: yarilo_listener::Accepted,
) -> Option<(
    yarilo_listener::ClientConn,
    yarilo_login::gate::Admitted,
    SessionRecord,
)> {
    let mut conn = match accepted.establish(HOP_HANDSHAKE).await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(error = %e, "login peer dropped before the preamble");
            return None;
        }
    };
    let admitted = gate.admit(&mut conn).await.ok()?;
    let record = SessionRecord::start(gate.service(), &admitted.session, &admitted.user);
    Some((conn, admitted, record))
}

/// The backend's own record of a session it served: `session start` when
/// the preamble was admitted (logged by the gate as `preamble accepted`),
/// `session end` when the session task finishes however it finishes
/// (dropped with the task). Operators and the lab's single-writer check
/// read which pod served which user when from these two lines.
struct SessionRecord {
    service: &'static str,
    session: String,
    user: String,
    started: std::time::Instant,
}

impl SessionRecord {
    fn start(service: &'static str, session: &str, user: &str) -> SessionRecord {
        SessionRecord {
            service,
            session: session.to_string(),
            user: user.to_string(),
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for SessionRecord {
    fn drop(&mut self) {
        tracing::info!(
            service = self.service,
            session = %self.session,
            user = %self.user,
            duration_ms = self.started.elapsed().as_millis() as u64,
            "session end"
        );
    }
}

/// `yarilo pop3-login`: the POP3 login proxy on `services.pop3` (STLS)
/// and `services.pop3s` (implicit TLS).
pub fn pop3_login(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("pop3-login", args, |ctx: Context| async move {
        let config = &ctx.config;
        let settings = yarilo_login::LoginSettings::pop3(config);
        let b = login_base(
            &ctx,
            "pop3",
            &config.login.pop3,
            &config.services.pop3,
            &settings,
        )?;
        let warden = login_warden(&ctx, "pop3")?;
        let router = director_sessions(&ctx, b.router);
        let server = ctx.metrics.register(|r| {
            yarilo_login::pop3::Pop3LoginServer::new(
                settings,
                b.auth,
                router,
                b.hop_tls,
                b.starttls,
                warden,
                yarilo_login::xclient::XclientPolicy::from_config(config),
                r,
            )
        });
        let services = [
            ("pop3", &config.services.pop3),
            ("pop3s", &config.services.pop3s),
        ];
        serve_logins(
            &ctx,
            &b.listen,
            services,
            config.imap.max_connections,
            move |c| server.clone().handle(c),
        )
        .await
    })
}

/// `yarilo submission`: the submission backend behind
/// `submission-login`. Every connection must carry a verified preamble
/// with `HELO=`; the session starts authenticated and relays to
/// `submission.relay_host`.
pub fn submission(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("submission", args, |ctx: Context| async move {
        let config = &ctx.config;
        let gate_settings = GateSettings::from_config(config, "submission")?;
        let hop_tls = InternalTls::from_config(&config.internal_tls).context("internal_tls")?;
        let auth = backend_auth(&ctx, false)?;
        let settings = yarilo_smtp::SubmissionSettings::from_config(config);
        let server = ctx
            .metrics
            .register(|r| yarilo_smtp::SubmissionServer::new(settings, auth.clone(), None, r));
        let gate = Arc::new(
            ctx.metrics
                .register(|r| PreambleGate::new(gate_settings, auth, r)),
        );
        let listener_metrics = ctx.metrics.register(ListenerMetrics::register);
        let listener = bind_hop_listener(
            &ctx,
            "submission",
            &config.services.submission,
            hop_tls.as_ref(),
            4096,
        )
        .await?;
        let life = ctx.life.clone();
        listener
            .serve(ctx.life.clone(), listener_metrics, move |accepted| {
                let (gate, server, life) = (gate.clone(), server.clone(), life.clone());
                async move {
                    let Some((conn, admitted, _record)) = admit(&gate, accepted).await else {
                        return;
                    };
                    let Some(helo) = admitted.helo else {
                        tracing::warn!(
                            session = %admitted.session,
                            "submission preamble without HELO: closed"
                        );
                        return;
                    };
                    server
                        .handle_proxied(conn, admitted.user, admitted.fields, helo, life.stopped())
                        .await
                }
            })
            .await;
        Ok(())
    })
}

/// `yarilo submission-login`: the submission login proxy on
/// `services.submission` (STARTTLS) and `services.submissions`.
pub fn submission_login(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("submission-login", args, |ctx: Context| async move {
        let config = &ctx.config;
        let settings = yarilo_login::LoginSettings::submission(config);
        let b = login_base(
            &ctx,
            "submission",
            &config.login.submission,
            &config.services.submission,
            &settings,
        )?;
        let warden = login_warden(&ctx, "submission")?;
        let router = director_sessions(&ctx, b.router);
        let server = ctx.metrics.register(|r| {
            yarilo_login::submission::SubmissionLoginServer::new(
                settings,
                b.auth,
                router,
                b.hop_tls,
                b.starttls,
                warden,
                yarilo_login::xclient::XclientPolicy::from_config(config),
                r,
            )
        });
        let services = [
            ("submission", &config.services.submission),
            ("submissions", &config.services.submissions),
        ];
        serve_logins(&ctx, &b.listen, services, 4096, move |c| {
            server.clone().handle(c)
        })
        .await
    })
}

/// `yarilo lmtp`: LMTP delivery into the shared store (remote locks),
/// behind `lmtp-login`. Like the other backends it admits only a verified
/// `YARILO` preamble from a login peer (deployment seed: "LMTP preamble
/// originates from yarilo-lmtp-login"); the session then delivers to that
/// one user. An MTA delivering directly talks to `lmtp-login` (or, in the
/// one-process shape, to `yarilo single`).
pub fn lmtp(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("lmtp", args, |ctx: Context| async move {
        let config = &ctx.config;
        let gate_settings = GateSettings::from_config(config, "lmtp")?;
        let hop_tls = InternalTls::from_config(&config.internal_tls).context("internal_tls")?;
        let auth = backend_auth(&ctx, true)?;
        let store = remote_store(&ctx).await?;
        let settings = yarilo_smtp::LmtpSettings::from_config(config);
        let server = ctx
            .metrics
            .register(|r| yarilo_smtp::LmtpServer::new(settings, store, auth.clone(), r));
        let gate = Arc::new(
            ctx.metrics
                .register(|r| PreambleGate::new(gate_settings, auth, r)),
        );
        let listener_metrics = ctx.metrics.register(ListenerMetrics::register);
        let listener =
            bind_hop_listener(&ctx, "lmtp", &config.services.lmtp, hop_tls.as_ref(), 1024).await?;
        let life = ctx.life.clone();
        listener
            .serve(ctx.life.clone(), listener_metrics, move |accepted| {
                let (gate, server, life) = (gate.clone(), server.clone(), life.clone());
                async move {
                    let Some((conn, admitted, _record)) = admit(&gate, accepted).await else {
                        return;
                    };
                    server
                        .handle_proxied(
                            conn,
                            admitted.user,
                            admitted.client_ip,
                            admitted.session,
                            life.stopped(),
                        )
                        .await
                }
            })
            .await;
        Ok(())
    })
}

/// `yarilo lmtp-login`: the LMTP proxy on `services.lmtp`, routing each
/// recipient by `login.lmtp`.
pub fn lmtp_login(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("lmtp-login", args, |ctx: Context| async move {
        let config = &ctx.config;
        let settings = yarilo_login::LoginSettings::lmtp(config);
        let b = login_base(
            &ctx,
            "lmtp",
            &config.login.lmtp,
            &config.services.lmtp,
            &settings,
        )?;
        let delimiter = config.lmtp.recipient_delimiter.clone();
        let warden = login_warden(&ctx, "lmtp")?;
        // The director link carries BACKEND-UNREACHABLE reports (lmtp-login
        // pipes no sessions, so it reports none).
        let router = director_sessions(&ctx, b.router);
        let server = ctx.metrics.register(|r| {
            yarilo_login::lmtp::LmtpLoginServer::new(
                settings,
                b.auth,
                router,
                b.hop_tls,
                delimiter,
                warden,
                yarilo_login::xclient::XclientPolicy::from_config(config),
                r,
            )
        });
        let Some(addr) = b
            .listen
            .serve("lmtp", &config.services.lmtp, 1024, move |conn| {
                server.clone().handle(conn)
            })
            .await
            .context("services.lmtp")?
        else {
            anyhow::bail!("services.lmtp is disabled: nothing to serve");
        };
        println!("  lmtp        {addr}");
        ctx.life.stopped().await;
        Ok(())
    })
}

/// Warden for a login process (`warden_client.*`; off unless
/// `warden_client.enabled`). `lmtp-login` uses it per recipient
/// (DELIVERY_START/END), the others per connection and session.
fn login_warden(
    ctx: &Context,
    protocol: &'static str,
) -> anyhow::Result<yarilo_login::LoginWarden> {
    let warden = ctx
        .metrics
        .register(|r| yarilo_login::LoginWarden::from_config(&ctx.config, protocol, r))
        .context("warden_client")?;
    if warden.is_enabled() {
        let w = &ctx.config.warden_client;
        tracing::info!(
            endpoints = ?w.endpoints,
            fail_open = w.fail_open,
            "warden limits, penalty and kicks on"
        );
    }
    Ok(warden)
}

/// With `director_addr` routing, the login's standing director connection:
/// piped sessions reported (SESSION-OPEN/CLOSE), the director's kicks
/// obeyed (KICK-WATCH), unreachable backends reported
/// (BACKEND-UNREACHABLE; for `lmtp-login` only these: deliveries are not
/// sessions).
fn director_sessions(
    ctx: &Context,
    router: yarilo_login::route::Router,
) -> yarilo_login::route::Router {
    ctx.metrics.register(|r| router.with_director_sessions(r))
}

/// What every login process builds the same way: the hop's internal TLS,
/// the router (`login.<proto>`), the auth client, the client-facing TLS
/// acceptor and the listener context.
struct LoginBase {
    hop_tls: Option<InternalTls>,
    router: yarilo_login::route::Router,
    auth: AuthHandle,
    /// STARTTLS on `services.<plain>` unless its `ssl_mode` is `no`.
    starttls: Option<tokio_rustls::TlsAcceptor>,
    listen: yarilo_login::listen::ListenContext,
}

fn login_base(
    ctx: &Context,
    proto: &'static str,
    route: &yarilo_config::LoginRoute,
    plain: &yarilo_config::Service,
    settings: &yarilo_login::LoginSettings,
) -> anyhow::Result<LoginBase> {
    let config = &ctx.config;
    let hop_tls = InternalTls::from_config(&config.internal_tls).context("internal_tls")?;
    let router = yarilo_login::route::Router::from_config(
        route,
        &format!("login.{proto}"),
        proto,
        plain.port,
        hop_tls.clone(),
        settings.connect_timeout,
    )?
    .with_lookup_timeout(Duration::from_millis(config.login.lookup_timeout_ms));
    let auth = remote_auth(config)?;
    ctx.health
        .add_startup_check(crate::probes::auth_check(config).context("internal_tls")?);
    if let Some(check) = crate::probes::warden_check(config).context("internal_tls")? {
        ctx.health.add_startup_check(check);
    }
    if let yarilo_config::RouteTarget::Director(addr) = route.target(&format!("login.{proto}"))? {
        ctx.health.add_startup_check(crate::probes::version_check(
            "director",
            addr,
            hop_tls.clone(),
            "director",
        ));
    }
    crate::probes::start_freshness(config, &ctx.health, &ctx.metrics, Vec::new());
    let (certs, _) =
        crate::single::client_certificates(config, Path::new(&config.general.data_dir))?;
    let acceptor = certs.acceptor(&config.tls.min_version).context("tls")?;
    let starttls = match plain.ssl_mode {
        SslMode::No => None,
        _ => Some(acceptor.clone()),
    };
    let listen = yarilo_login::listen::ListenContext {
        general: config.general.clone(),
        tls: Some(acceptor),
        life: ctx.life.clone(),
        health: ctx.health.clone(),
        metrics: ctx.metrics.register(ListenerMetrics::register),
        handshake_timeout: settings.handshake_timeout,
    };
    Ok(LoginBase {
        hop_tls,
        router,
        auth,
        starttls,
        listen,
    })
}

/// Binds the client-facing `services` of a login (the plain and the
/// implicit-TLS one), hands each connection to `handle`, and runs until
/// the process stops. At least one must be enabled.
async fn serve_logins<H, F>(
    ctx: &Context,
    listen: &yarilo_login::listen::ListenContext,
    services: [(&str, &yarilo_config::Service); 2],
    max_connections: usize,
    handle: H,
) -> anyhow::Result<()>
where
    H: Fn(yarilo_listener::ClientConn) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut bound = 0;
    for (name, svc) in services {
        if let Some(addr) = listen
            .serve(name, svc, max_connections, handle.clone())
            .await
            .with_context(|| format!("services.{name}"))?
        {
            println!("  {name:<11} {addr}");
            bound += 1;
        }
    }
    if bound == 0 {
        let [(a, _), (b, _)] = services;
        anyhow::bail!("services.{a} and services.{b} are both disabled: nothing to serve");
    }
    ctx.life.stopped().await;
    Ok(())
}

/// `yarilo imap`: the IMAP backend behind login proxies.
pub fn imap(args: ComponentArgs) -> anyhow::Result<ExitCode> {
    component::run("imap", args, |ctx: Context| async move {
        let config = &ctx.config;
        let gate_settings = GateSettings::from_config(config, "imap")?;
        let hop_tls = InternalTls::from_config(&config.internal_tls).context("internal_tls")?;
        let auth = backend_auth(&ctx, true)?;
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
        let listener = bind_hop_listener(
            &ctx,
            "imap",
            &config.services.imap,
            hop_tls.as_ref(),
            config.imap.max_connections,
        )
        .await?;
        let life = ctx.life.clone();
        listener
            .serve(ctx.life.clone(), listener_metrics, move |accepted| {
                let (gate, server, life) = (gate.clone(), server.clone(), life.clone());
                async move {
                    let Some((conn, admitted, _record)) = admit(&gate, accepted).await else {
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
        let settings = yarilo_login::LoginSettings::imap(config);
        let b = login_base(
            &ctx,
            "imap",
            &config.login.imap,
            &config.services.imap,
            &settings,
        )?;
        let warden = login_warden(&ctx, "imap")?;
        let router = director_sessions(&ctx, b.router);
        let server = ctx.metrics.register(|r| {
            yarilo_login::imap::ImapLoginServer::new(
                settings,
                b.auth,
                router,
                b.hop_tls,
                b.starttls,
                warden,
                yarilo_login::xclient::XclientPolicy::from_config(config),
                r,
            )
        });
        let services = [
            ("imap", &config.services.imap),
            ("imaps", &config.services.imaps),
        ];
        serve_logins(
            &ctx,
            &b.listen,
            services,
            config.imap.max_connections,
            move |c| server.clone().handle(c),
        )
        .await
    })
}
