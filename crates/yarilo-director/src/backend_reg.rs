//! `yarilo backend-reg`: the sidecar that registers a backend pod with the
//! director and keeps its lease alive (deployment seed, "backend liveness
//! — self-registration + heartbeat").
//!
//! Invariants:
//! - one registration per pod (one origin, one monotonic seq stream);
//! - the seq is seeded from the process start time in milliseconds, so a
//!   restart on the same IP resumes above anything the director saw;
//! - a heartbeat is sent only while every protocol container's readiness
//!   URL answers 200: an unready container makes the pod go silent and the
//!   lease expire (fail safe), never routes to a half-dead pod;
//! - the director's PING is answered with PONG;
//! - on shutdown (SIGTERM) BACKEND-DOWN is sent so the pod leaves at once;
//! - reconnects back off exponentially, and the backoff resets once a
//!   connection has stayed healthy for two intervals;
//! - overload drains, it never removes (deployment seed, "Overload →
//!   FLUSH"): while the highest `/loadz` of the protocol containers is at
//!   `overload_percent` or above, the heartbeat is BACKEND-FLUSH (the pod
//!   keeps its ring slice, its users and its lease; new users go
//!   elsewhere) until the load falls below `overload_clear_percent`,
//!   when BACKEND-UP resumes. A container that does not answer `/loadz`
//!   counts as not loaded.

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tracing::{debug, info, warn};
use yarilo_config::BackendRegister;
use yarilo_wire::{LineCodec, Version};

use crate::protocol;

/// Settings of the sidecar, resolved from `backend_register.*`.
#[derive(Debug, Clone)]
pub struct RegSettings {
    pub director_addr: String,
    pub interval: Duration,
    pub ip: IpAddr,
    pub port: u16,
    pub tag: String,
    pub vhosts: u32,
    pub readyz_urls: Vec<String>,
    /// Load at which heartbeats become BACKEND-FLUSH (0: never).
    pub overload_percent: u32,
    /// Load below which BACKEND-UP resumes.
    pub overload_clear_percent: u32,
    /// Internal mTLS to the director (certificate with the `backend-reg`
    /// role); `None` is plain TCP.
    pub tls: Option<yarilo_tls::internal::InternalTls>,
}

/// Why the sidecar cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RegError {
    /// Neither `backend_register.address` nor `POD_IP` gives an IP.
    #[error("backend_register.address is empty and POD_IP is not an IP address")]
    NoAddress,
    /// `backend_register.director_addr` is empty.
    #[error("backend_register.director_addr is empty")]
    NoDirector,
    /// Internal TLS material could not be loaded.
    #[error("internal TLS: {0}")]
    Tls(String),
}

impl RegSettings {
    pub fn from_config(c: &BackendRegister) -> Result<RegSettings, RegError> {
        if c.director_addr.is_empty() {
            return Err(RegError::NoDirector);
        }
        let address = if c.address.is_empty() {
            std::env::var("POD_IP").unwrap_or_default()
        } else {
            c.address.clone()
        };
        Ok(RegSettings {
            director_addr: c.director_addr.clone(),
            interval: Duration::from_secs(c.register_interval.max(1)),
            ip: address.parse().map_err(|_| RegError::NoAddress)?,
            port: c.port,
            tag: c.tag.clone(),
            vhosts: c.vhosts.min(100),
            readyz_urls: c.readyz_urls.clone(),
            overload_percent: c.overload_percent.min(100),
            overload_clear_percent: c.overload_clear_percent,
            tls: None,
        })
    }
}

/// The first heartbeat seq: milliseconds since the Unix epoch at start.
pub fn initial_seq() -> u64 {
    // The one wall-clock read of the sidecar: it orders restarts.
    #[allow(clippy::disallowed_types, clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    #[allow(clippy::disallowed_types)]
    let epoch = std::time::UNIX_EPOCH;
    now.duration_since(epoch)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(1)
}

/// Whether every readiness URL answers 200 (bounded by `timeout` each).
pub async fn all_ready(urls: &[String], timeout: Duration) -> bool {
    for url in urls {
        match tokio::time::timeout(timeout, http_get_ok(url)).await {
            Ok(true) => {}
            _ => {
                debug!(%url, "protocol container not ready; heartbeat withheld");
                return false;
            }
        }
    }
    true
}

/// A minimal HTTP/1.0 GET: true on a 200 status line.
async fn http_get_ok(url: &str) -> bool {
    http_get(url, 64)
        .await
        .is_some_and(|(status, _)| status == 200)
}

/// A minimal HTTP/1.0 GET reading at most `limit` bytes: the status and
/// the body (what arrived of it).
async fn http_get(url: &str, limit: usize) -> Option<(u16, String)> {
    let rest = url.strip_prefix("http://")?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut stream = TcpStream::connect(hostport).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut buf = vec![0u8; limit.max(16)];
    let mut n = 0;
    while n < buf.len() {
        match stream.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    let text = String::from_utf8_lossy(&buf[..n]);
    if !text.starts_with("HTTP/1.") {
        return None;
    }
    let status = text.get(9..12)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// The `/loadz` URL beside a readiness URL (same host and port).
pub fn load_url(readyz: &str) -> Option<String> {
    let rest = readyz.strip_prefix("http://")?;
    let hostport = rest.split('/').next()?;
    Some(format!("http://{hostport}/loadz"))
}

/// The highest load the protocol containers report (percent; a container
/// that does not answer counts as 0).
pub async fn max_load(readyz_urls: &[String], timeout: Duration) -> u32 {
    let mut top = 0;
    for url in readyz_urls.iter().filter_map(|u| load_url(u)) {
        let load = match tokio::time::timeout(timeout, http_get(&url, 1024)).await {
            Ok(Some((200, body))) => body
                .lines()
                .next()
                .and_then(|l| l.trim().parse::<u32>().ok())
                .unwrap_or(0),
            _ => 0,
        };
        top = top.max(load.min(100));
    }
    top
}

/// Runs the sidecar until `shutdown` completes; then sends BACKEND-DOWN
/// (best effort, bounded) and returns.
pub async fn run(settings: RegSettings, shutdown: impl Future<Output = ()>) {
    let mut seq = initial_seq();
    let mut backoff = Duration::from_millis(100);
    const MAX_BACKOFF: Duration = Duration::from_secs(5);
    tokio::pin!(shutdown);
    loop {
        let connected = tokio::select! {
            _ = &mut shutdown => return,
            c = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&settings.director_addr)) => c,
        };
        let stream = match connected {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                warn!(director = %settings.director_addr, error = %e, "cannot reach the director");
                if sleep_or_shutdown(backoff, &mut shutdown).await {
                    return;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            Err(_) => {
                warn!(director = %settings.director_addr, "director connect timed out");
                if sleep_or_shutdown(backoff, &mut shutdown).await {
                    return;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let since = Instant::now();
        let end = match &settings.tls {
            None => session(&settings, stream, &mut seq, &mut shutdown).await,
            Some(tls) => match tokio::time::timeout(Duration::from_secs(10), tls.connect(stream))
                .await
            {
                Ok(Ok(tls_stream)) => session(&settings, tls_stream, &mut seq, &mut shutdown).await,
                Ok(Err(e)) => {
                    warn!(director = %settings.director_addr, error = %e, "TLS to the director failed");
                    SessionEnd::Lost
                }
                Err(_) => {
                    warn!(director = %settings.director_addr, "TLS handshake timed out");
                    SessionEnd::Lost
                }
            },
        };
        if since.elapsed() >= settings.interval * 2 {
            backoff = Duration::from_millis(100);
        }
        if end == SessionEnd::Shutdown {
            return;
        }
        if sleep_or_shutdown(backoff, &mut shutdown).await {
            return;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn sleep_or_shutdown<F: Future<Output = ()> + Unpin>(d: Duration, shutdown: &mut F) -> bool {
    tokio::select! {
        _ = shutdown => true,
        _ = tokio::time::sleep(d) => false,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum SessionEnd {
    Lost,
    Shutdown,
}

async fn session<S, F>(s: &RegSettings, stream: S, seq: &mut u64, shutdown: &mut F) -> SessionEnd
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    F: Future<Output = ()> + Unpin,
{
    let mut framed = Framed::new(stream, LineCodec::new(protocol::MAX_LINE));
    let ours = Version::new(protocol::SERVICE, protocol::MAJOR, protocol::MINOR);
    if framed.send(&ours.to_fields()).await.is_err() {
        return SessionEnd::Lost;
    }
    let ip = s.ip.to_string();
    let port = s.port.to_string();
    let vhosts = s.vhosts.to_string();
    let mut ticker = tokio::time::interval(s.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let check_timeout = (s.interval / 2).max(Duration::from_millis(200));
    let mut registered = false;
    let mut flushing = false;
    loop {
        tokio::select! {
            _ = &mut *shutdown => {
                *seq += 1;
                let down = ["BACKEND-DOWN", ip.as_str(), &seq.to_string()];
                let bye = async {
                    framed.send(&down[..]).await.ok()?;
                    // Wait for the answer so the removal is known done.
                    loop {
                        match framed.next().await {
                            Some(Ok(Ok(f))) if f.first().is_some_and(|c| c == "OK" || c == "FAIL") => return Some(()),
                            Some(Ok(_)) => continue,
                            _ => return None,
                        }
                    }
                };
                match tokio::time::timeout(Duration::from_secs(2), bye).await {
                    Ok(Some(())) => info!(%ip, "sent BACKEND-DOWN"),
                    _ => warn!(%ip, "BACKEND-DOWN not confirmed; the lease will expire"),
                }
                return SessionEnd::Shutdown;
            }
            _ = ticker.tick() => {
                if !all_ready(&s.readyz_urls, check_timeout).await {
                    continue;
                }
                if s.overload_percent > 0 {
                    let load = max_load(&s.readyz_urls, check_timeout).await;
                    let now = if flushing {
                        load >= s.overload_clear_percent
                    } else {
                        load >= s.overload_percent
                    };
                    if now != flushing {
                        flushing = now;
                        if flushing {
                            warn!(%ip, load, threshold = s.overload_percent, "overloaded: BACKEND-FLUSH (no new users; the ring slice stays)");
                        } else {
                            info!(%ip, load, "load back below overload_clear_percent: BACKEND-UP");
                        }
                    }
                }
                *seq += 1;
                let seq_text = seq.to_string();
                let sent = if flushing && registered {
                    framed.send(&["BACKEND-FLUSH", ip.as_str(), &seq_text][..]).await
                } else {
                    let up = ["BACKEND-UP", ip.as_str(), port.as_str(), s.tag.as_str(), vhosts.as_str(), &seq_text];
                    framed.send(&up[..]).await
                };
                if sent.is_err() {
                    return SessionEnd::Lost;
                }
                if !registered {
                    registered = true;
                    info!(%ip, tag = %s.tag, "registered with the director");
                }
            }
            line = framed.next() => match line {
                Some(Ok(Ok(fields))) => match fields.first().map(String::as_str) {
                    Some("PING") if framed.send(&["PONG"][..]).await.is_err() => {
                        return SessionEnd::Lost;
                    }
                    Some("FAIL") => warn!(reply = ?fields, "director refused a registration line"),
                    _ => {}
                },
                Some(Ok(Err(_))) => {}
                Some(Err(_)) | None => return SessionEnd::Lost,
            },
        }
    }
}
