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
        listener.register_health(&self.health);
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

    /// The STARTTLS acceptor for a plain listener, unless TLS is off there.
    fn starttls_for(&self, service: &Service) -> anyhow::Result<Option<tokio_rustls::TlsAcceptor>> {
        Ok(match service.ssl_mode {
            SslMode::No => None,
            _ => Some(self.acceptor()?),
        })
    }

    /// POP3 on `services.pop3` (STLS) and `services.pop3s`.
    pub async fn start_pop3(&self) -> anyhow::Result<Vec<(String, SocketAddr)>> {
        let settings = yarilo_pop3::Pop3Settings::from_config(&self.config).context("pop3")?;
        let starttls = self.starttls_for(&self.config.services.pop3)?;
        let (store, auth) = (self.store.clone(), self.auth.clone());
        let server = self
            .metrics
            .register(|r| yarilo_pop3::Pop3Server::new(settings, store, auth, starttls, r));
        let mut bound = Vec::new();
        for (name, svc) in [
            ("pop3", &self.config.services.pop3),
            ("pop3s", &self.config.services.pop3s),
        ] {
            let (srv, life) = (server.clone(), self.life.clone());
            let max = self.config.imap.max_connections;
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

    /// LMTP on `services.lmtp`: delivery into the store.
    pub async fn start_lmtp(&self) -> anyhow::Result<Vec<(String, SocketAddr)>> {
        let settings = yarilo_smtp::LmtpSettings::from_config(&self.config);
        let (store, auth) = (self.store.clone(), self.auth.clone());
        let server = self
            .metrics
            .register(|r| yarilo_smtp::LmtpServer::new(settings, store, auth, r));
        let (srv, life) = (server.clone(), self.life.clone());
        let addr = self
            .serve("lmtp", &self.config.services.lmtp, 1024, move |conn| {
                srv.clone().handle(conn, life.stopped())
            })
            .await?;
        Ok(addr.map(|a| ("lmtp".to_string(), a)).into_iter().collect())
    }

    /// Submission on `services.submission` (STARTTLS) and
    /// `services.submissions`, relaying to `submission.relay_host`.
    pub async fn start_submission(&self) -> anyhow::Result<Vec<(String, SocketAddr)>> {
        let settings = yarilo_smtp::SubmissionSettings::from_config(&self.config);
        let starttls = self.starttls_for(&self.config.services.submission)?;
        let auth = self.auth.clone();
        let server = self
            .metrics
            .register(|r| yarilo_smtp::SubmissionServer::new(settings, auth, starttls, r));
        let mut bound = Vec::new();
        for (name, svc) in [
            ("submission", &self.config.services.submission),
            ("submissions", &self.config.services.submissions),
        ] {
            let (srv, life) = (server.clone(), self.life.clone());
            if let Some(addr) = self
                .serve(name, svc, 4096, move |conn| {
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
