//! Entry points for the `yarilo` binary: `yarilo director` and
//! `yarilo backend-reg`, built from the whole configuration.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{error, info, warn};
use yarilo_config::{parse_listen, Config};
use yarilo_tls::internal::InternalTls;

use crate::api::{run_api, ApiAccess};
use crate::backend_reg::{self, RegError, RegSettings};
use crate::service::{serve_inner, Shared};
use crate::DirectorError;

/// `yarilo director`: the LOOKUP port and the admin API.
pub struct DirectorComponent {
    shared: Arc<Shared>,
    listener: TcpListener,
    api: Option<(TcpListener, ApiAccess)>,
    tls: Option<InternalTls>,
}

impl DirectorComponent {
    /// Parses the template, resolves `mail_servers`, loads internal TLS
    /// and binds both ports. Any failure aborts start-up.
    pub async fn from_config(config: &Config) -> Result<DirectorComponent, DirectorError> {
        let d = &config.director_service;
        let tls = InternalTls::from_config(&config.internal_tls)
            .map_err(|e| DirectorError::Tls(e.to_string()))?;
        if let Some(tls) = &tls {
            check_ring_tls_name(config, tls);
        }
        let addr = parse_listen(&d.listen)
            .map_err(|m| DirectorError::Config(format!("director_service.listen: {m}")))?;
        let listener = TcpListener::bind(addr).await?;
        let shared = crate::service::prepare(d, listener.local_addr()?, tls.as_ref()).await?;
        let api = if d.api.listen.is_empty() {
            None
        } else {
            let addr = parse_listen(&d.api.listen)
                .map_err(|m| DirectorError::Config(format!("director_service.api.listen: {m}")))?;
            Some((
                TcpListener::bind(addr).await?,
                ApiAccess::from_config(&d.api),
            ))
        };
        info!(
            listen = %listener.local_addr()?,
            backends = shared.director().backends().len(),
            tls = tls.is_some(),
            ring = ?shared.ring().map(|r| r.me()),
            "director ready"
        );
        Ok(DirectorComponent {
            shared,
            listener,
            api,
            tls,
        })
    }

    /// The bound LOOKUP address.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// The bound admin API address (None when disabled).
    pub fn api_addr(&self) -> Option<std::net::SocketAddr> {
        self.api.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// The shared state (tests, embedding).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Registers the director's metrics.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.shared.register_metrics(registry);
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), DirectorError> {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = tx.send(true);
        });
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let api = self.api.map(|(listener, access)| {
            tokio::spawn(run_api(
                self.shared.clone(),
                listener,
                access,
                stopped(rx.clone()),
            ))
        });
        let result = serve_inner(self.shared, self.listener, self.tls, stopped(rx)).await;
        if let Some(api) = api {
            match api.await {
                Ok(Err(e)) => return Err(e.into()),
                Err(e) => return Err(DirectorError::Config(format!("admin API task: {e}"))),
                Ok(Ok(())) => {}
            }
        }
        result
    }
}

/// Start-up checks of the name ring dials verify (director seed, "mTLS"):
/// peers dialled by pod IP can only be verified against a fixed name, so
/// with internal TLS and ring peers an empty `ring_tls_server_name` is an
/// ERROR (the dials then pin `internal_tls.server_name`, which works only
/// when every director certificate carries that name), and a name missing
/// from this director's own certificate a warning.
fn check_ring_tls_name(config: &Config, tls: &InternalTls) {
    let d = &config.director_service;
    let name = d.ring_tls_server_name.as_deref().filter(|n| !n.is_empty());
    match name {
        None if !d.peers.is_empty() => {
            let fallback = &config.internal_tls.server_name;
            error!(
                fallback = %fallback,
                "internal_tls is on and director_service.peers is set, but \
                 director_service.ring_tls_server_name is empty: ring dials go to pod IPs and \
                 verify `{fallback}` instead; set ring_tls_server_name to the ring name every \
                 director certificate carries (the chart's <release>-director-ring)"
            );
            if !tls.own_certificate_has_name(fallback) {
                warn!(
                    name = %fallback,
                    "this director's certificate lacks `{fallback}` as a DNS SAN: ring peers \
                     cannot verify it and the ring will not converge"
                );
            }
        }
        None => {}
        Some(name) if !tls.own_certificate_has_name(name) => warn!(
            %name,
            "director_service.ring_tls_server_name `{name}` is not a DNS SAN of this \
             director's certificate: ring peers cannot verify it and the ring will not converge"
        ),
        Some(_) => {}
    }
}

/// `yarilo backend-reg`: settings from `backend_register.*` (and internal
/// TLS), then [`backend_reg::run`] until `shutdown` (SIGTERM → BACKEND-DOWN).
pub fn backend_reg_settings(config: &Config) -> Result<RegSettings, RegError> {
    let mut settings = RegSettings::from_config(&config.backend_register)?;
    settings.tls = InternalTls::from_config(&config.internal_tls)
        .map_err(|e| RegError::Tls(e.to_string()))?
        .map(|t| t.with_server_name(&config.internal_tls.server_name))
        .transpose()
        .map_err(|e| RegError::Tls(e.to_string()))?;
    Ok(settings)
}

/// Runs the sidecar from the whole configuration.
pub async fn run_backend_reg(
    config: &Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RegError> {
    let settings = backend_reg_settings(config)?;
    backend_reg::run(settings, shutdown).await;
    Ok(())
}
