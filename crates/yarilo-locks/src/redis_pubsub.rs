//! A Redis pub/sub channel fanned out to in-process subscribers, and the
//! [`EventBus`] built on it for the locks service in remote mode.
//!
//! Invariants: the subscribe side redials and re-subscribes by itself for
//! as long as the handle lives (a Redis restart deafens it only until Redis
//! is back); publishing never blocks the caller (a bounded queue, dropped
//! when full: delivery is best-effort, at most once). After a re-subscribe
//! every subscriber receives one `reconnected` notice, because messages
//! published during the gap are lost and a consumer may want to rescan.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::redis_conn::RedisConn;
use crate::{Event, EventBus};

/// What a subscriber of a [`RedisChannel`] receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelMessage {
    /// A message someone published.
    Message(String),
    /// The subscription was re-established after a gap; anything published
    /// meanwhile is lost.
    Reconnected,
}

/// Counters a [`RedisChannel`] reports into, so the owner can export them.
pub trait ChannelObserver: Send + Sync + 'static {
    /// A PUBLISH or the SUBSCRIBE dial failed.
    fn redis_error(&self, op: &'static str);
}

struct NoObserver;
impl ChannelObserver for NoObserver {
    fn redis_error(&self, _op: &'static str) {}
}

struct Tasks(Vec<JoinHandle<()>>);
impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// One Redis pub/sub channel. Cheap to clone; the background tasks stop
/// when the last clone is dropped.
#[derive(Clone)]
pub struct RedisChannel {
    out: mpsc::Sender<String>,
    fanout: broadcast::Sender<ChannelMessage>,
    connected: tokio::sync::watch::Receiver<bool>,
    _tasks: Arc<Tasks>,
}

impl RedisChannel {
    pub fn new(conn: RedisConn, channel: &str) -> RedisChannel {
        Self::with_observer(conn, channel, Arc::new(NoObserver))
    }

    pub fn with_observer(
        conn: RedisConn,
        channel: &str,
        observer: Arc<dyn ChannelObserver>,
    ) -> RedisChannel {
        let (out, mut out_rx) = mpsc::channel::<String>(4096);
        let (fanout, _) = broadcast::channel(4096);
        let (connected_tx, connected) = tokio::sync::watch::channel(false);
        let publisher = {
            let conn = conn.clone();
            let channel = channel.to_string();
            let observer = observer.clone();
            tokio::spawn(async move {
                while let Some(msg) = out_rx.recv().await {
                    let mut cmd = redis::cmd("PUBLISH");
                    cmd.arg(&channel).arg(&msg);
                    if let Err(e) = conn.query::<i64>(&cmd).await {
                        observer.redis_error("publish");
                        tracing::warn!(error = %e, %channel, "redis PUBLISH failed; message dropped");
                    }
                }
            })
        };
        let subscriber = {
            let fanout = fanout.clone();
            let channel = channel.to_string();
            tokio::spawn(subscribe_loop(
                conn,
                channel,
                fanout,
                connected_tx,
                observer,
            ))
        };
        RedisChannel {
            out,
            fanout,
            connected,
            _tasks: Arc::new(Tasks(vec![publisher, subscriber])),
        }
    }

    /// Queues `message` for PUBLISH; dropped if the queue is full.
    pub fn publish(&self, message: String) -> bool {
        self.out.try_send(message).is_ok()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ChannelMessage> {
        self.fanout.subscribe()
    }

    /// Whether the subscription is currently established.
    pub fn is_subscribed(&self) -> bool {
        *self.connected.borrow()
    }

    /// Waits until the subscription is established (tests, startup).
    pub async fn wait_subscribed(&self) {
        let mut c = self.connected.clone();
        let _ = c.wait_for(|v| *v).await;
    }
}

async fn subscribe_loop(
    conn: RedisConn,
    channel: String,
    fanout: broadcast::Sender<ChannelMessage>,
    connected: tokio::sync::watch::Sender<bool>,
    observer: Arc<dyn ChannelObserver>,
) {
    let mut backoff = Duration::from_millis(50);
    let mut first = true;
    loop {
        let dial = async {
            let mut ps = conn.client().get_async_pubsub().await?;
            ps.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(ps)
        };
        match tokio::time::timeout(conn.timeout(), dial).await {
            Ok(Ok(mut ps)) => {
                backoff = Duration::from_millis(50);
                let _ = connected.send(true);
                if !first {
                    tracing::info!(%channel, "redis subscription re-established");
                    let _ = fanout.send(ChannelMessage::Reconnected);
                }
                first = false;
                let mut stream = ps.on_message();
                while let Some(msg) = stream.next().await {
                    match msg.get_payload::<String>() {
                        Ok(p) => {
                            let _ = fanout.send(ChannelMessage::Message(p));
                        }
                        Err(e) => tracing::warn!(error = %e, "non-text pub/sub message ignored"),
                    }
                }
                let _ = connected.send(false);
                tracing::warn!(%channel, "redis subscription lost; redialling");
            }
            Ok(Err(e)) => {
                observer.redis_error("subscribe");
                tracing::debug!(error = %e, %channel, "redis subscribe failed");
            }
            Err(_) => {
                observer.redis_error("subscribe");
                tracing::debug!(%channel, "redis subscribe timed out");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// The locks service's event bus in remote mode: events travel through
/// Redis pub/sub, so an EVENT sent to one replica reaches the subscribers
/// of every replica.
#[derive(Clone)]
pub struct RedisEventBus {
    channel: RedisChannel,
    local: broadcast::Sender<Event>,
    _relay: Arc<Tasks>,
}

impl RedisEventBus {
    pub fn new(channel: RedisChannel) -> Self {
        let (local, _) = broadcast::channel(4096);
        let mut rx = channel.subscribe();
        let tx = local.clone();
        let relay = tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(ChannelMessage::Message(line)) => {
                        if let Ok(f) = yarilo_wire::split_line(&line) {
                            if let [resource, kind, payload] = f.as_slice() {
                                let _ = tx.send(Event {
                                    resource: resource.clone(),
                                    kind: kind.clone(),
                                    payload: payload.clone(),
                                });
                            }
                        }
                    }
                    Ok(ChannelMessage::Reconnected)
                    | Err(broadcast::error::RecvError::Lagged(_)) => {
                        let _ = tx.send(resync_event());
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        RedisEventBus {
            channel,
            local,
            _relay: Arc::new(Tasks(vec![relay])),
        }
    }

    pub fn channel(&self) -> &RedisChannel {
        &self.channel
    }
}

/// The event a subscriber gets when events may have been lost: resource
/// `*`, kind `resync`. Consumers rescan whatever they watch.
pub fn resync_event() -> Event {
    Event {
        resource: "*".into(),
        kind: "resync".into(),
        payload: String::new(),
    }
}

impl EventBus for RedisEventBus {
    fn publish(&self, event: Event) {
        let line = yarilo_wire::join_line(&[&event.resource, &event.kind, &event.payload]);
        let line = line.strip_suffix('\n').unwrap_or(&line).to_string();
        if !self.channel.publish(line) {
            tracing::warn!("event queue full; event dropped");
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.local.subscribe()
    }
}
