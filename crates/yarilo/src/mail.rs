//! The mail protocol listeners of a process: bind `services.*`, hand each
//! accepted connection (after PROXY header and implicit TLS) to its
//! protocol's session, and stop with the process.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use yarilo_auth::AuthHandle;
use yarilo_config::{Config, Service, SslMode};
use yarilo_listener::{ClientConn, Lifecycle, Listener, ListenerMetrics};
use yarilo_store::Store;
use yarilo_telemetry::{Health, Metrics};
use yarilo_tls::CertStore;

/// What the protocol sessions of one process share.
pub struct MailContext {
    pub config: Arc<Config>,
    pub store: Store,
    pub auth: AuthHandle,
    pub certs: Arc<CertStore>,
    pub life: Lifecycle,
    pub metrics: Metrics,
    pub health: Health,
    pub listener_metrics: ListenerMetrics,
}

/// Seconds allowed for the PROXY header and the implicit TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(30);

impl MailContext {
    fn acceptor(&self) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
        self.certs
            .acceptor(&self.config.tls.min_version)
            .context("tls")
    }

    /// Binds `services.<name>` and serves it with `handle`; `None` when the
    /// service is disabled.
    pub async fn serve<H, F>(
        &self,
        name: &str,
        service: &Service,
        max_connections: usize,
        handle: H,
    ) -> anyhow::Result<Option<SocketAddr>>
    where
        H: Fn(ClientConn) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        if !service.enabled {
            return Ok(None);
        }
        let tls = match service.ssl_mode {
            SslMode::Ssl => Some(self.acceptor()?),
            _ => None,
        };
        let mut listener = Listener::bind(name, service, tls, max_connections)
            .await
            .with_context(|| format!("services.{name}"))?;
        let haproxy = &self.config.general.haproxy;
        if haproxy.enabled && service.haproxy_protocol {
            listener = listener.with_proxy_protocol(
                haproxy.trusted_nets.clone(),
                Duration::from_secs(haproxy.timeout),
            );
        }
        let addr = listener.local_addr();
        self.health.add_ready_check(listener.ready_check());
        let handle = Arc::new(handle);
        let service_name = name.to_string();
        tokio::spawn(listener.serve(
            self.life.clone(),
            self.listener_metrics.clone(),
            move |accepted| {
                let handle = handle.clone();
                let service_name = service_name.clone();
                async move {
                    match accepted.establish(HANDSHAKE).await {
                        Ok(conn) => handle(conn).await,
                        Err(e) => {
                            tracing::debug!(service = %service_name, error = %e, "connection dropped before the session")
                        }
                    }
                }
            },
        ));
        Ok(Some(addr))
    }

    /// IMAP on `services.imap` (STARTTLS) and `services.imaps`.
    pub async fn start_imap(&self) -> anyhow::Result<Vec<(String, SocketAddr)>> {
        let settings = yarilo_imap::ImapSettings::from_config(&self.config);
        let starttls = match self.config.services.imap.ssl_mode {
            SslMode::No => None,
            _ => Some(self.acceptor()?),
        };
        let store = self.store.clone();
        let auth = self.auth.clone();
        let server = self
            .metrics
            .register(|r| yarilo_imap::ImapServer::new(settings, store, auth, starttls, r));
        let max = self.config.imap.max_connections;
        let mut bound = Vec::new();
        for (name, svc) in [
            ("imap", &self.config.services.imap),
            ("imaps", &self.config.services.imaps),
        ] {
            let srv = server.clone();
            let life = self.life.clone();
            if let Some(addr) = self
                .serve(name, svc, max, move |conn| {
                    srv.clone().handle(conn, life.stopped())
                })
                .await?
            {
                bound.push((name.to_string(), addr));
            }
        }
        Ok(bound)
    }
}
