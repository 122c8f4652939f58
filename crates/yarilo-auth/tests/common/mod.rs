#![allow(dead_code)]
//! Helpers shared by the integration tests.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use yarilo_auth::client::{AuthClient, ClientSettings};
use yarilo_auth::sasl::Mechanism;
use yarilo_auth::service::{self, ServiceSettings};
use yarilo_auth::{AuthRequest, AuthSettings, Authenticator};

/// Fast settings: no failure delay, no penalty, every mechanism.
pub fn settings() -> AuthSettings {
    AuthSettings {
        mechanisms: Mechanism::ALL.to_vec(),
        failure_delay: Duration::ZERO,
        penalty_max: Duration::ZERO,
        ..AuthSettings::default()
    }
}

/// A running auth service; stops when dropped.
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start_on(listener: tokio::net::TcpListener, auth: Arc<Authenticator>) -> Running {
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        service::run(listener, auth, ServiceSettings::default(), None, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

pub async fn start(auth: Arc<Authenticator>) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    start_on(listener, auth).await
}

pub fn client(addr: SocketAddr) -> AuthClient {
    AuthClient::new(ClientSettings {
        address: addr.to_string(),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        tls: None,
    })
}

pub fn request(ip: &str, service: &str, session: &str) -> AuthRequest {
    AuthRequest {
        service: service.to_string(),
        client_ip: ip.parse::<IpAddr>().unwrap(),
        local_ip: None,
        session: session.to_string(),
        secured: true,
    }
}

/// Finds a program in PATH or fails naming the setup script.
pub fn require(program: &str, package: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(program))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!("{program} not found in PATH: run scripts/setup-dev (it installs {package})")
        })
}
