//! IDLE (RFC 2177): push EXISTS/EXPUNGE/FETCH as changes happen. Changes
//! made through yarilo (LMTP, other sessions, other processes on the
//! event bus) arrive as events at once; changes made by something else
//! writing the Maildir (a Dovecot still running on the volume) are found by
//! a cheap freshness check every `imap.idle_check_interval_seconds`.
//!
//! While idling the session drops its buffers: what remains is the state
//! machine, the MSN map and the socket.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use std::time::Duration;

use tokio::sync::broadcast;
use yarilo_imap_proto::response::Response;
use yarilo_imap_proto::{Expect, Outcome};

use crate::conn::Read;
use crate::session::{answered, stopped, Session};

impl Session {
    pub(crate) async fn idle(&mut self, tag: &str) -> std::io::Result<Response> {
        // Updates that are already due go out before the continuation.
        self.sync_selected(true, &[]).await;
        self.conn.raw(b"+ idling\r\n");
        self.conn.flush().await?;
        self.conn.rx.expect(Expect::IdleDone);
        self.conn.shrink();
        self.server.metrics.sessions_idle.inc();
        let _watch = self
            .selected
            .as_ref()
            .map(|s| self.server.idle_watch.watch(&self.server, &s.mailbox));
        let r = self.idle_loop(tag).await;
        self.server.metrics.sessions_idle.dec();
        r
    }

    async fn idle_loop(&mut self, tag: &str) -> std::io::Result<Response> {
        let deadline = tokio::time::sleep(self.server.settings.idle_timeout);
        tokio::pin!(deadline);
        loop {
            // Anything already buffered (DONE pipelined with more).
            match self.conn.rx.next() {
                Outcome::IdleDone => {
                    return Ok(Response::ok(tag, None, "Idle completed."));
                }
                Outcome::Bad { .. } => {
                    return Ok(Response::bad(Some(tag.to_string()), None, "Expected DONE."));
                }
                Outcome::Incomplete => {}
                _ => {}
            }
            enum Wake {
                Read(std::io::Result<Read>),
                Event,
                Timeout,
                Stop,
            }
            let wake = {
                let events = self
                    .selected
                    .as_mut()
                    .map(|s| (s.mailbox.resource().to_string(), &mut s.events));
                let selected_resource = events.as_ref().map(|(r, _)| r.clone());
                // The bus carries every mailbox's events: wake only for
                // ours (or when events were lost), not for every delivery
                // in the process.
                let event = async {
                    match events {
                        Some((mine, rx)) => loop {
                            match rx.recv().await {
                                Ok(e) if e.resource == mine => break true,
                                Ok(_) => continue,
                                Err(broadcast::error::RecvError::Lagged(_)) => break true,
                                Err(broadcast::error::RecvError::Closed) => {
                                    std::future::pending::<()>().await;
                                }
                            }
                        },
                        None => std::future::pending().await,
                    }
                };
                // NOTIFY: other mailboxes of this user.
                let notified = async {
                    match self.notify.as_mut() {
                        Some(n) => loop {
                            match n.receiver().recv().await {
                                Ok(e) => {
                                    if n.note(&e, selected_resource.as_deref()) {
                                        break;
                                    }
                                }
                                Err(broadcast::error::RecvError::Lagged(_)) => break,
                                Err(broadcast::error::RecvError::Closed) => {
                                    std::future::pending::<()>().await;
                                }
                            }
                        },
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = self.conn.fill_small() => Wake::Read(r),
                    _ = event => Wake::Event,
                    _ = notified => Wake::Event,
                    _ = &mut deadline => Wake::Timeout,
                    _ = stopped(&mut self.shutdown) => Wake::Stop,
                }
            };
            match wake {
                Wake::Read(Ok(Read::Data)) => {}
                Wake::Read(Ok(_)) | Wake::Read(Err(_)) => {
                    return Err(std::io::ErrorKind::UnexpectedEof.into())
                }
                Wake::Event => {
                    self.sync_selected(true, &[]).await;
                    self.deliver_notifications().await;
                    self.conn.flush().await?;
                    self.conn.shrink();
                }
                Wake::Timeout => {
                    self.conn.send(&Response::Status {
                        tag: None,
                        kind: yarilo_imap_proto::response::StatusKind::Bye,
                        code: None,
                        text: "Disconnected for inactivity.".into(),
                    });
                    self.closing = true;
                    return Ok(answered());
                }
                Wake::Stop => {
                    self.stopping = true;
                    self.conn.send(&Response::Status {
                        tag: None,
                        kind: yarilo_imap_proto::response::StatusKind::Bye,
                        code: None,
                        text: "Server shutting down.".into(),
                    });
                    self.closing = true;
                    return Ok(answered());
                }
            }
        }
    }
}

/// The Maildir check behind IDLE: one task per process polls every
/// mailbox some session idles on, every `imap.idle_check_interval`, all
/// mailboxes in one trip to the blocking pool, and rescans only the dirty
/// ones. A rescan that finds changes publishes a store event, which wakes
/// the idling sessions. So the cost is per watched mailbox, not per session.
#[derive(Default)]
pub(crate) struct IdleWatch {
    watched: Mutex<HashMap<String, (yarilo_store::Mailbox, usize)>>,
    started: std::sync::OnceLock<()>,
}

/// Keeps a mailbox watched while an IDLE lasts.
pub(crate) struct Watching {
    watch: Weak<crate::server::ImapServer>,
    key: String,
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(server) = self.watch.upgrade() {
            let mut w = server
                .idle_watch
                .watched
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(e) = w.get_mut(&self.key) {
                e.1 = e.1.saturating_sub(1);
                if e.1 == 0 {
                    w.remove(&self.key);
                }
            }
        }
    }
}

impl IdleWatch {
    pub(crate) fn watch(
        &self,
        server: &Arc<crate::server::ImapServer>,
        mailbox: &yarilo_store::Mailbox,
    ) -> Watching {
        let key = mailbox.resource().to_string();
        {
            let mut w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            w.entry(key.clone())
                .or_insert_with(|| (mailbox.clone(), 0))
                .1 += 1;
        }
        self.started.get_or_init(|| {
            let weak = Arc::downgrade(server);
            let every = server.settings.idle_check_interval;
            tokio::spawn(poll_loop(weak, every));
        });
        Watching {
            watch: Arc::downgrade(server),
            key,
        }
    }
}

async fn poll_loop(server: Weak<crate::server::ImapServer>, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(s) = server.upgrade() else {
            return;
        };
        let boxes: Vec<yarilo_store::Mailbox> = s
            .idle_watch
            .watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|(m, _)| m.clone())
            .collect();
        drop(s);
        // Bounded batches keep one blocking call short.
        for chunk in boxes.chunks(1024) {
            let dirty = yarilo_store::Mailbox::dirty(chunk).await;
            for (m, d) in chunk.iter().zip(dirty) {
                if d {
                    if let Err(e) = m.refresh().await {
                        tracing::warn!(mailbox = m.resource(), error = %e, "IDLE check failed");
                    }
                }
            }
        }
    }
}
