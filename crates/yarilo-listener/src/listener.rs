use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use yarilo_config::{Service, SslMode};
use yarilo_telemetry::ReadyCheck;

use crate::proxy_protocol::{self, Parsed, ProxiedAddrs, MAX_HEADER};
use crate::{Lifecycle, ListenError, MailStream};

type Labels = Vec<(String, String)>;

/// Connection counters of every listener in the process.
#[derive(Clone, Default)]
pub struct ListenerMetrics {
    accepted: Family<Labels, Counter>,
    rejected: Family<Labels, Counter>,
    open: Family<Labels, Gauge>,
}

impl ListenerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = ListenerMetrics::default();
        registry.register(
            "yarilo_listener_connections",
            "Client connections accepted, by service",
            m.accepted.clone(),
        );
        registry.register(
            "yarilo_listener_connections_rejected",
            "Client connections closed at accept, by service and reason",
            m.rejected.clone(),
        );
        registry.register(
            "yarilo_listener_connections_open",
            "Client connections currently open, by service",
            m.open.clone(),
        );
        m
    }
}

/// A bound `services.<name>` listener, not yet accepting.
pub struct Listener {
    service: Arc<str>,
    tcp: TcpListener,
    local: SocketAddr,
    implicit_tls: Option<TlsAcceptor>,
    slots: Arc<Semaphore>,
    /// The connection limit (`slots`' size).
    max: usize,
    alive: Arc<AtomicBool>,
    proxy: Option<Arc<ProxyPolicy>>,
}

/// One accepted connection, with its slot in the connection limit (freed
/// when this, or the [`ClientConn`] made from it, is dropped).
pub struct Accepted {
    pub service: Arc<str>,
    /// The TCP peer; the real client may differ behind a PROXY header.
    pub peer: SocketAddr,
    pub local: SocketAddr,
    stream: MailStream,
    implicit_tls: Option<TlsAcceptor>,
    proxy: Option<Arc<ProxyPolicy>>,
    slot: OwnedSemaphorePermit,
    open: OpenGuard,
}

struct OpenGuard(Gauge);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Which peers may send a PROXY header, and how long we wait for it.
struct ProxyPolicy {
    trusted: Vec<IpNet>,
    timeout: Duration,
}

/// A connection ready for a protocol session: the PROXY header consumed
/// (from trusted peers), the implicit TLS handshake done.
pub struct ClientConn {
    pub service: Arc<str>,
    pub stream: MailStream,
    /// The real client: from the PROXY header when one was accepted.
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Whether `peer` came from a PROXY header.
    pub proxied: bool,
    _slot: OwnedSemaphorePermit,
    _open: OpenGuard,
}

/// Why a connection could not become a [`ClientConn`]; it is closed.
#[derive(Debug, thiserror::Error)]
pub enum EstablishError {
    #[error("PROXY header: {0}")]
    Proxy(String),
    #[error("TLS handshake: {0}")]
    Tls(std::io::Error),
}

impl Accepted {
    /// Reads the PROXY header where one is expected and performs the TLS
    /// handshake on an implicit-TLS listener, each bounded in time.
    pub async fn establish(
        mut self,
        handshake_timeout: Duration,
    ) -> Result<ClientConn, EstablishError> {
        let mut peer = self.peer;
        let mut local = self.local;
        let mut proxied = false;
        if let Some(policy) = &self.proxy {
            if policy.trusted.iter().any(|n| n.contains(&peer.ip())) {
                let MailStream::Plain(tcp) = &mut self.stream else {
                    return Err(EstablishError::Proxy("stream is not plain".into()));
                };
                match tokio::time::timeout(policy.timeout, read_proxy_header(tcp)).await {
                    Err(_) => return Err(EstablishError::Proxy("timed out".into())),
                    Ok(Err(e)) => return Err(EstablishError::Proxy(e)),
                    Ok(Ok(ProxiedAddrs::Proxied {
                        source,
                        destination,
                    })) => {
                        peer = source;
                        local = destination;
                        proxied = true;
                    }
                    Ok(Ok(ProxiedAddrs::Local)) => {}
                }
            }
        }
        if let Some(acceptor) = self.implicit_tls.take() {
            match tokio::time::timeout(handshake_timeout, self.stream.upgrade(&acceptor)).await {
                Err(_) => {
                    return Err(EstablishError::Tls(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "timed out",
                    )))
                }
                Ok(Err(e)) => return Err(EstablishError::Tls(e)),
                Ok(Ok(())) => {}
            }
        }
        Ok(ClientConn {
            service: self.service,
            stream: self.stream,
            peer,
            local,
            proxied,
            _slot: self.slot,
            _open: self.open,
        })
    }
}

/// Peeks until a whole header is there, then consumes exactly it, so the
/// bytes the client sent after it (a TLS ClientHello) stay in the socket.
async fn read_proxy_header(tcp: &mut TcpStream) -> Result<ProxiedAddrs, String> {
    let mut buf = vec![0u8; MAX_HEADER];
    let mut last_len = 0;
    loop {
        let n = tcp.peek(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
        match proxy_protocol::parse(&buf[..n]) {
            Ok(Parsed::Done { addrs, consumed }) => {
                tcp.read_exact(&mut buf[..consumed])
                    .await
                    .map_err(|e| e.to_string())?;
                return Ok(addrs);
            }
            Ok(Parsed::Incomplete) => {
                if n == last_len {
                    // peek returns at once while data is queued: wait a
                    // little for the rest instead of spinning.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                last_len = n;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

impl Listener {
    /// Binds `service`. `tls` is required when its `ssl_mode` is `ssl`
    /// (implicit TLS); STARTTLS acceptors are the session's business.
    pub async fn bind(
        name: &str,
        service: &Service,
        tls: Option<TlsAcceptor>,
        max_connections: usize,
    ) -> Result<Listener, ListenError> {
        let addr = service
            .socket_addr()
            .map_err(|message| ListenError::Config {
                service: name.to_string(),
                message,
            })?;
        let implicit_tls = match service.ssl_mode {
            SslMode::Ssl => Some(tls.ok_or_else(|| ListenError::Config {
                service: name.to_string(),
                message: "ssl_mode is ssl but no certificate is configured".into(),
            })?),
            _ => None,
        };
        let tcp = TcpListener::bind(addr)
            .await
            .map_err(|source| ListenError::Bind {
                service: name.to_string(),
                addr: addr.to_string(),
                source,
            })?;
        let local = tcp.local_addr().map_err(|source| ListenError::Bind {
            service: name.to_string(),
            addr: addr.to_string(),
            source,
        })?;
        Ok(Listener {
            service: Arc::from(name),
            tcp,
            local,
            implicit_tls,
            slots: Arc::new(Semaphore::new(max_connections.max(1))),
            max: max_connections.max(1),
            alive: Arc::new(AtomicBool::new(false)),
            proxy: None,
        })
    }

    /// Expects a PROXY v1/v2 header from peers in `trusted` (from anyone
    /// else a header is not looked for: it reaches the protocol as data).
    pub fn with_proxy_protocol(mut self, trusted: Vec<IpNet>, timeout: Duration) -> Self {
        self.proxy = Some(Arc::new(ProxyPolicy { trusted, timeout }));
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Ready while the accept loop runs.
    pub fn ready_check(&self) -> ReadyCheck {
        let alive = self.alive.clone();
        let name = self.service.clone();
        ReadyCheck::new(format!("listener {name}"), move || {
            let up = alive.load(Ordering::Relaxed);
            async move {
                if up {
                    Ok(())
                } else {
                    Err("accept loop not running".to_string())
                }
            }
        })
    }

    /// Open connections over the limit, in percent (the `/loadz` figure).
    pub fn load_percent(&self) -> impl Fn() -> u32 + Send + Sync + 'static {
        let (slots, max) = (self.slots.clone(), self.max);
        move || {
            let used = max.saturating_sub(slots.available_permits());
            (used * 100 / max) as u32
        }
    }

    /// Registers this listener with `health`: its readiness (accept loop
    /// running) and its load.
    pub fn register_health(&self, health: &yarilo_telemetry::Health) {
        health.add_ready_check(self.ready_check());
        health.add_load(format!("listener {}", self.service), self.load_percent());
    }

    /// Accepts until shutdown, handing each connection to `handler` in a
    /// task of its own.
    pub async fn serve<H, F>(self, life: Lifecycle, metrics: ListenerMetrics, handler: H)
    where
        H: Fn(Accepted) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let labels = vec![("service".to_string(), self.service.to_string())];
        self.alive.store(true, Ordering::Relaxed);
        tracing::info!(service = %self.service, addr = %self.local, "listening");
        loop {
            let accepted = tokio::select! {
                _ = life.token.cancelled() => break,
                r = self.tcp.accept() => r,
            };
            let (tcp, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(service = %self.service, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                let mut l = labels.clone();
                l.push(("reason".to_string(), "limit".to_string()));
                metrics.rejected.get_or_create(&l).inc();
                tracing::warn!(service = %self.service, %peer, "connection limit reached; closing");
                drop(tcp);
                continue;
            };
            let _ = tcp.set_nodelay(true);
            metrics.accepted.get_or_create(&labels).inc();
            let open = metrics.open.get_or_create(&labels).clone();
            open.inc();
            let conn = Accepted {
                service: self.service.clone(),
                peer,
                local: self.local,
                stream: MailStream::Plain(tcp),
                implicit_tls: self.implicit_tls.clone(),
                proxy: self.proxy.clone(),
                slot,
                open: OpenGuard(open),
            };
            life.sessions.spawn(handler(conn));
        }
        self.alive.store(false, Ordering::Relaxed);
        tracing::info!(service = %self.service, "stopped accepting");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn service(ssl_mode: SslMode) -> Service {
        Service {
            enabled: true,
            port: 0,
            address: "127.0.0.1".into(),
            ssl_mode,
            haproxy_protocol: false,
            xclient_protocol: false,
        }
    }

    #[tokio::test]
    async fn accepts_until_shutdown_and_enforces_the_limit() {
        let life = Lifecycle::new();
        let l = Listener::bind("imap", &service(SslMode::Starttls), None, 1)
            .await
            .unwrap();
        let addr = l.local_addr();
        let ready = l.ready_check();
        let mut registry = Registry::default();
        let metrics = ListenerMetrics::register(&mut registry);
        let task = tokio::spawn(l.serve(life.clone(), metrics, |conn: Accepted| async move {
            let mut c = conn.establish(Duration::from_secs(1)).await.unwrap();
            let s = &mut c.stream;
            s.write_all(b"* OK hello\r\n").await.unwrap();
            let mut buf = [0u8; 1];
            let _ = s.read(&mut buf).await;
        }));
        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut line = [0u8; 12];
        first.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"* OK hello\r\n");
        assert!(ready_ok(&ready).await);
        // Over the limit of one: closed at once.
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(second.read(&mut buf).await.unwrap_or(0), 0);
        drop(first);
        assert!(life.drain(Duration::from_secs(5)).await);
        task.await.unwrap();
        assert!(!ready_ok(&ready).await);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                "listener_connections_rejected_total{service=\"imap\",reason=\"limit\"} 1"
            ),
            "{text}"
        );
    }

    async fn ready_ok(check: &ReadyCheck) -> bool {
        let h = yarilo_telemetry::Health::new();
        h.add_ready_check(check.clone());
        h.not_ready().await.is_empty()
    }

    #[tokio::test]
    async fn implicit_tls_listener_needs_a_certificate_and_handshakes() {
        assert!(Listener::bind("imaps", &service(SslMode::Ssl), None, 10)
            .await
            .is_err());
        let dir = tempfile::tempdir().unwrap();
        let (c, k, _) = yarilo_tls::ensure_self_signed(dir.path(), "localhost").unwrap();
        let store = yarilo_tls::CertStore::load(vec![(c, k)]).unwrap();
        let l = Listener::bind(
            "imaps",
            &service(SslMode::Ssl),
            Some(store.acceptor("1.2").unwrap()),
            10,
        )
        .await
        .unwrap();
        let addr = l.local_addr();
        let life = Lifecycle::new();
        tokio::spawn(l.serve(
            life.clone(),
            ListenerMetrics::default(),
            |conn: Accepted| async move {
                if let Ok(mut c) = conn.establish(Duration::from_secs(5)).await {
                    assert!(c.stream.is_tls());
                    let _ = c.stream.write_all(b"hi").await;
                    let _ = c.stream.shutdown().await;
                }
            },
        ));
        // A plain client that never handshakes is cut off by the timeout,
        // and does not stop others from being served.
        let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        for cert in yarilo_tls::load_certs(&dir.path().join("server.crt")).unwrap() {
            roots.add(cert).unwrap();
        }
        let cfg = tokio_rustls::rustls::ClientConfig::builder_with_provider(yarilo_tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap();
        let mut buf = Vec::new();
        tls.read_to_end(&mut buf).await.unwrap();
        assert_eq!(buf, b"hi");
        life.token.cancel();
    }

    #[tokio::test]
    async fn proxy_header_from_a_trusted_peer_sets_the_client_address() {
        let l = Listener::bind("imap", &service(SslMode::No), None, 10)
            .await
            .unwrap()
            .with_proxy_protocol(vec!["127.0.0.0/8".parse().unwrap()], Duration::from_secs(2));
        let addr = l.local_addr();
        let life = Lifecycle::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(l.serve(
            life.clone(),
            ListenerMetrics::default(),
            move |conn: Accepted| {
                let tx = tx.clone();
                async move {
                    match conn.establish(Duration::from_secs(2)).await {
                        Ok(mut c) => {
                            let mut rest = [0u8; 4];
                            c.stream.read_exact(&mut rest).await.unwrap();
                            tx.send(Ok((c.peer, c.proxied, rest))).unwrap();
                        }
                        Err(e) => tx.send(Err(e.to_string())).unwrap(),
                    }
                }
            },
        ));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"PROXY TCP4 203.0.113.42 10.0.0.1 41234 143\r\nabcd")
            .await
            .unwrap();
        let (peer, proxied, rest) = rx.recv().await.unwrap().unwrap();
        assert_eq!(peer, "203.0.113.42:41234".parse::<SocketAddr>().unwrap());
        assert!(proxied);
        assert_eq!(
            &rest, b"abcd",
            "bytes after the header stay for the session"
        );

        // A trusted peer that sends no header is refused.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"a001 CAPABILITY\r\n").await.unwrap();
        assert!(rx.recv().await.unwrap().is_err());
        life.token.cancel();
    }

    #[tokio::test]
    async fn proxy_header_from_an_untrusted_peer_is_not_believed() {
        let l = Listener::bind("imap", &service(SslMode::No), None, 10)
            .await
            .unwrap()
            .with_proxy_protocol(vec!["10.0.0.0/8".parse().unwrap()], Duration::from_secs(2));
        let addr = l.local_addr();
        let life = Lifecycle::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(l.serve(
            life.clone(),
            ListenerMetrics::default(),
            move |conn: Accepted| {
                let tx = tx.clone();
                async move {
                    let mut c = conn.establish(Duration::from_secs(2)).await.unwrap();
                    let mut first = [0u8; 6];
                    c.stream.read_exact(&mut first).await.unwrap();
                    tx.send((c.peer, c.proxied, first)).unwrap();
                }
            },
        ));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"PROXY TCP4 203.0.113.42 10.0.0.1 41234 143\r\n")
            .await
            .unwrap();
        let (peer, proxied, first) = rx.recv().await.unwrap();
        assert!(peer.ip().is_loopback());
        assert!(!proxied);
        assert_eq!(&first, b"PROXY ", "the header reaches the protocol as data");
        life.token.cancel();
    }

    #[tokio::test]
    async fn starttls_upgrades_a_plain_session_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k, _) = yarilo_tls::ensure_self_signed(dir.path(), "localhost").unwrap();
        let store = yarilo_tls::CertStore::load(vec![(c.clone(), k)]).unwrap();
        let acceptor = store.acceptor("1.2").unwrap();
        let l = Listener::bind("imap", &service(SslMode::Starttls), None, 10)
            .await
            .unwrap();
        let addr = l.local_addr();
        let life = Lifecycle::new();
        tokio::spawn(l.serve(
            life.clone(),
            ListenerMetrics::default(),
            move |conn: Accepted| {
                let acceptor = acceptor.clone();
                async move {
                    let mut c = conn.establish(Duration::from_secs(2)).await.unwrap();
                    assert!(!c.stream.is_tls());
                    c.stream
                        .write_all(b"a OK Begin TLS negotiation now\r\n")
                        .await
                        .unwrap();
                    c.stream.upgrade(&acceptor).await.unwrap();
                    assert!(c.stream.is_tls());
                    assert!(
                        c.stream.upgrade(&acceptor).await.is_err(),
                        "no second STARTTLS"
                    );
                    c.stream.write_all(b"* secret\r\n").await.unwrap();
                    c.stream.shutdown().await.unwrap();
                }
            },
        ));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut line = [0u8; 32];
        tcp.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"a OK Begin TLS negotiation now\r\n");
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        for cert in yarilo_tls::load_certs(&c).unwrap() {
            roots.add(cert).unwrap();
        }
        let cfg = tokio_rustls::rustls::ClientConfig::builder_with_provider(yarilo_tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap();
        let mut buf = Vec::new();
        tls.read_to_end(&mut buf).await.unwrap();
        assert_eq!(buf, b"* secret\r\n");
        life.token.cancel();
    }
}
