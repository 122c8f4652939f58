//! The driver: one task per connection, generic over the stream, with read
//! and write timeouts; the userdb through the auth service and the usage
//! from the shared store, so any instance answers for any user.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use yarilo_auth::AuthHandle;
use yarilo_config::Config;
use yarilo_listener::Lifecycle;
use yarilo_store::{QuotaLimits, Store, UserInfo};

use crate::codec::{CodecError, PolicyDecoder};
use crate::decision::{check_quota, verdict, Outcome, Replies, Verdict};
use crate::metrics::QuotaStatusMetrics;

/// The reason after `DEFER_IF_PERMIT` when the userdb cannot answer (as
/// Dovecot words it).
const LOOKUP_FAILED: &str = "Temporary internal error";
/// The reason when the user's usage cannot be read.
const USAGE_FAILED: &str = "Internal quota calculation error";

/// `quota_status.*`, read once at start.
#[derive(Debug, Clone)]
pub struct QuotaStatusSettings {
    pub replies: Replies,
    pub recipient_delimiter: String,
    pub max_line_length: usize,
    pub max_attributes: usize,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

impl QuotaStatusSettings {
    pub fn from_config(config: &Config) -> QuotaStatusSettings {
        let q = &config.quota_status;
        QuotaStatusSettings {
            replies: Replies {
                success: q.quota_status_success.clone(),
                nouser: q.quota_status_nouser.clone(),
                overquota: q.quota_status_overquota.clone(),
                toolarge: q.quota_status_toolarge.clone(),
            },
            recipient_delimiter: q.recipient_delimiter.clone(),
            max_line_length: q.max_line_length,
            max_attributes: q.max_attributes,
            read_timeout: Duration::from_secs(q.read_timeout_seconds),
            write_timeout: Duration::from_secs(q.write_timeout_seconds),
            max_connections: q.max_connections,
        }
    }
}

/// The service: settings, the userdb, the store and the metrics.
pub struct QuotaStatusServer {
    settings: QuotaStatusSettings,
    auth: AuthHandle,
    store: Store,
    metrics: QuotaStatusMetrics,
}

impl QuotaStatusServer {
    pub fn new(
        settings: QuotaStatusSettings,
        auth: AuthHandle,
        store: Store,
        metrics: QuotaStatusMetrics,
    ) -> Arc<QuotaStatusServer> {
        Arc::new(QuotaStatusServer {
            settings,
            auth,
            store,
            metrics,
        })
    }

    /// Accepts until `life` stops; at most `max_connections` at once (the
    /// rest wait in the backlog).
    pub async fn serve(self: Arc<Self>, listener: TcpListener, life: Lifecycle) {
        let slots = Arc::new(Semaphore::new(self.settings.max_connections));
        loop {
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
                _ = life.stopped() => return,
            };
            let (stream, peer) = tokio::select! {
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and the like: the next accept may work.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::task::yield_now().await;
                        continue;
                    }
                },
                _ = life.stopped() => return,
            };
            let server = self.clone();
            let stopped = life.stopped();
            life.sessions.spawn(async move {
                tracing::debug!(%peer, "policy client connected");
                server.handle(stream, stopped).await;
                drop(permit);
            });
        }
    }

    /// Serves one connection: requests answered in order until the client
    /// closes, a bound is crossed, a timeout fires or `stopped` resolves
    /// (between requests).
    pub async fn handle<S, F>(&self, mut stream: S, stopped: F)
    where
        S: AsyncRead + AsyncWrite + Unpin,
        F: std::future::Future<Output = ()>,
    {
        let end = self.session(&mut stream, stopped).await;
        self.metrics.connection(end);
        let _ = stream.shutdown().await;
    }

    async fn session<S, F>(&self, stream: &mut S, stopped: F) -> &'static str
    where
        S: AsyncRead + AsyncWrite + Unpin,
        F: std::future::Future<Output = ()>,
    {
        let s = &self.settings;
        let mut decoder = PolicyDecoder::new(s.max_line_length, s.max_attributes);
        let mut buf = vec![0u8; 4096];
        tokio::pin!(stopped);
        loop {
            loop {
                match decoder.next_request() {
                    Ok(Some(req)) => {
                        let outcome = self.decide(&req).await;
                        self.metrics.request(outcome.label());
                        let reply = s.replies.render(&outcome);
                        match tokio::time::timeout(
                            s.write_timeout,
                            stream.write_all(reply.as_bytes()),
                        )
                        .await
                        {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => return "io",
                            Err(_) => return "timeout",
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::info!(error = %e, "policy client closed");
                        return match e {
                            CodecError::LineTooLong(_) => "line_too_long",
                            CodecError::TooManyAttributes(_) => "too_many_attributes",
                        };
                    }
                }
            }
            let read = tokio::select! {
                r = tokio::time::timeout(s.read_timeout, stream.read(&mut buf)) => r,
                _ = &mut stopped, if !decoder.is_mid_request() => return "shutdown",
            };
            match read {
                Ok(Ok(0)) => return "closed",
                Ok(Ok(n)) => decoder.feed(&buf[..n]),
                Ok(Err(_)) => return "io",
                Err(_) => return "timeout",
            }
        }
    }

    async fn decide(&self, req: &crate::codec::PolicyRequest) -> Outcome {
        let (user, size) = match verdict(req, &self.settings.recipient_delimiter) {
            Verdict::Dunno => return Outcome::Dunno,
            Verdict::Check { user, size } => (user, size),
        };
        let (name, fields) = match self.auth.lookup_user(&user, "quota-status").await {
            Ok(Some(found)) => found,
            Ok(None) => return Outcome::NoUser,
            Err(e) => {
                tracing::error!(%user, error = %e, "userdb lookup failed");
                return Outcome::TempFail {
                    reason: LOOKUP_FAILED,
                };
            }
        };
        let limits = QuotaLimits::from_fields(fields.iter());
        if limits.is_unlimited() {
            return Outcome::Success;
        }
        let info = UserInfo {
            user: name.clone(),
            home: fields.get("home").unwrap_or_default().to_string(),
        };
        let usage = match self.store.user(&info).await {
            Ok(us) => us.quota().await,
            Err(e) => Err(e),
        };
        match usage {
            Ok(u) => check_quota(&limits, &u, size),
            Err(e) => {
                tracing::error!(user = %name, error = %e, "quota usage failed");
                Outcome::TempFail {
                    reason: USAGE_FAILED,
                }
            }
        }
    }
}
