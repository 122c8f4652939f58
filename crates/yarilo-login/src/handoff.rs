//! The hand-off every login shares once the auth service said yes: route,
//! dial, send the preamble, wait for the backend's first line
//! ([`open`]); then, when that line is the protocol's success, relay it
//! and pipe until either side closes, warden kicks the user, or the
//! director kicks the user off that backend ([`proxy`]). A director-routed
//! session is reported to the director for exactly as long as it is
//! piped. What counts as success and what the client sees on a
//! refusal is the protocol module's call.

use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use yarilo_auth::ExtraFields;
use yarilo_tls::internal::InternalTls;

use crate::hop::{dial, send_preamble, FirstLine, UpstreamStream};
use crate::metrics::{DirectionLabels, ProtocolLabel};
use crate::pipe::pipe;
use crate::preamble::HopPreamble;
use crate::route::{DirectorRoute, Router};
use crate::warden::SessionGuard;
use crate::{HopError, LoginMetrics, LoginSettings};

/// A backend that has read the preamble and spoken first.
pub(crate) struct Backend {
    pub addr: String,
    pub stream: UpstreamStream,
    pub first: FirstLine,
    started: Instant,
    /// The director's choice, when it made one (reported once piped).
    director: Option<DirectorRoute>,
    /// The preamble's SESSION and USER (the director report's id and user).
    session: String,
    user: String,
}

/// Routes `hop`'s user, dials and sends the preamble. Counts and logs a
/// failure (the caller answers the client).
pub(crate) async fn open(
    protocol: &'static str,
    router: &Router,
    hop_tls: Option<&InternalTls>,
    settings: &LoginSettings,
    metrics: &LoginMetrics,
    hop: &HopPreamble,
    fields: &ExtraFields,
) -> Result<Backend, HopError> {
    let started = Instant::now();
    let user = &hop.preamble.user;
    let attempt = async {
        let route = router.route_for(user, fields).await?;
        let addr = route.addr.clone();
        let mut stream = dial(&addr, hop_tls, settings.connect_timeout)
            .await
            .inspect_err(|e| route.report_if_unreachable(e))?;
        let first = send_preamble(&mut stream, &addr, hop, settings.backend_answer_timeout).await?;
        Ok::<_, HopError>(Backend {
            addr,
            stream,
            first,
            started,
            director: route.director,
            session: hop.preamble.session.clone(),
            user: user.clone(),
        })
    };
    attempt.await.inspect_err(|e| {
        metrics.handoff(protocol, e.label());
        tracing::warn!(user = %user, error = %e, "hand-off failed");
    })
}

/// Counts a backend whose first line was a refusal.
pub(crate) fn refused(protocol: &'static str, metrics: &LoginMetrics, user: &str, b: &Backend) {
    metrics.handoff(protocol, "refused");
    let line = String::from_utf8_lossy(&b.first.line);
    tracing::warn!(user = %user, backend = %b.addr, answer = %line.trim_end(), "backend refused the session");
}

/// Relays the backend's first line (and whatever followed it), forwards
/// what the client pipelined after its login command, and pipes both
/// ways until the session ends — or until a kick for the user arrives
/// (warden's through `session`, or the director's for this backend), which
/// drops both connections without a word: the pipe may be in the middle
/// of a response, so no protocol goodbye can be written safely. (Bytes of
/// a kicked session are not counted.) A director-routed session is
/// reported open from here and closed on every way out (the guard's
/// `Drop`).
pub(crate) async fn proxy<C>(
    protocol: &'static str,
    metrics: &LoginMetrics,
    client: &mut C,
    mut backend: Backend,
    pipelined: Vec<u8>,
    session: &SessionGuard,
) -> std::io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    metrics.handoff(protocol, "ok");
    let reported = backend.director.as_ref().map(|d| {
        d.link
            .open(&backend.session, &backend.user, &d.tag, d.backend)
    });
    let director_kicked = async {
        match &reported {
            Some(r) => r.kicked().await,
            None => std::future::pending().await,
        }
    };
    metrics
        .handoff_seconds
        .get_or_create(&ProtocolLabel { protocol })
        .observe(backend.started.elapsed().as_secs_f64());
    tracing::info!(backend = %backend.addr, "proxying");
    client.write_all(&backend.first.line).await?;
    client.write_all(&backend.first.rest).await?;
    client.flush().await?;
    if !pipelined.is_empty() {
        backend.stream.write_all(&pipelined).await?;
    }
    let gauge = metrics
        .proxied
        .get_or_create(&ProtocolLabel { protocol })
        .clone();
    gauge.inc();
    let piped = tokio::select! {
        p = pipe(client, &mut backend.stream) => Ok(p),
        _ = session.kicked() => Err(KickedBy::Warden),
        _ = director_kicked => Err(KickedBy::Director),
    };
    gauge.dec();
    let piped = match piped {
        Ok(p) => p,
        Err(by) => {
            match by {
                KickedBy::Warden => session.count_kick(),
                KickedBy::Director => {
                    if let Some(r) = &reported {
                        r.count_kick();
                    }
                }
            }
            tracing::info!(backend = %backend.addr, by = by.as_str(), "session kicked; connection closed");
            return Ok(());
        }
    };
    let count = |direction, n: u64| {
        metrics
            .bytes
            .get_or_create(&DirectionLabels {
                protocol,
                direction,
            })
            .inc_by(n)
    };
    count("upstream", pipelined.len() as u64);
    match piped {
        Ok(p) => {
            count("upstream", p.upstream);
            count("downstream", p.downstream);
            tracing::info!(
                upstream = p.upstream,
                downstream = p.downstream,
                "proxy ended"
            );
        }
        Err(e) => tracing::info!(error = %e, "proxy ended"),
    }
    Ok(())
}

/// Who ended a piped session.
#[derive(Clone, Copy)]
enum KickedBy {
    Warden,
    Director,
}

impl KickedBy {
    fn as_str(self) -> &'static str {
        match self {
            KickedBy::Warden => "warden",
            KickedBy::Director => "director",
        }
    }
}

/// A random session id, 16 hex digits (the preamble's `SESSION`).
pub(crate) fn session_id() -> String {
    use rand::Rng;
    let n: u64 = rand::thread_rng().gen();
    format!("{n:016x}")
}
