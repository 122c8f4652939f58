//! Client-facing listeners of a login process: `services.<name>` with the
//! PROXY header from `general.haproxy.trusted_nets` (when
//! `general.haproxy.enabled` and the service's `haproxy_protocol`), and
//! implicit TLS on `ssl_mode: ssl`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::TlsAcceptor;
use yarilo_config::{General, Service, SslMode};
use yarilo_listener::{ClientConn, Lifecycle, ListenError, Listener, ListenerMetrics};
use yarilo_telemetry::Health;

/// What every listener of a login process shares.
#[derive(Clone)]
pub struct ListenContext {
    pub general: General,
    /// Client certificate acceptor (implicit TLS and STARTTLS).
    pub tls: Option<TlsAcceptor>,
    pub life: Lifecycle,
    pub health: Health,
    pub metrics: ListenerMetrics,
    /// PROXY header + implicit TLS handshake bound.
    pub handshake_timeout: Duration,
}

impl ListenContext {
    /// Binds `services.<name>` and hands each established connection to
    /// `handle`; `None` when the service is disabled.
    pub async fn serve<H, F>(
        &self,
        name: &str,
        service: &Service,
        max_connections: usize,
        handle: H,
    ) -> Result<Option<SocketAddr>, ListenError>
    where
        H: Fn(ClientConn) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        if !service.enabled {
            return Ok(None);
        }
        let tls = match service.ssl_mode {
            SslMode::Ssl => self.tls.clone(),
            _ => None,
        };
        let mut listener = Listener::bind(name, service, tls, max_connections).await?;
        let haproxy = &self.general.haproxy;
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
        let timeout = self.handshake_timeout;
        tokio::spawn(
            listener.serve(self.life.clone(), self.metrics.clone(), move |accepted| {
                let handle = handle.clone();
                let service_name = service_name.clone();
                async move {
                    match accepted.establish(timeout).await {
                        Ok(conn) => handle(conn).await,
                        Err(e) => tracing::debug!(
                            service = %service_name,
                            error = %e,
                            "connection dropped before the session"
                        ),
                    }
                }
            }),
        );
        Ok(Some(addr))
    }
}
