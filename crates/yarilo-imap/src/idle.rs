//! IDLE (RFC 2177): push EXISTS/EXPUNGE/FETCH as changes happen. Changes
//! made through yarilo (LMTP, other sessions, other processes on the
//! event bus) arrive as events at once; changes made by something else
//! writing the Maildir (a Dovecot still running on the volume) are found by
//! a cheap freshness check every `imap.idle_check_interval_seconds`.
//!
//! While idling the session drops its buffers: what remains is the state
//! machine, the MSN map and the socket.

use std::time::Duration;

use rand::Rng;
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
        let r = self.idle_loop(tag).await;
        self.server.metrics.sessions_idle.dec();
        r
    }

    async fn idle_loop(&mut self, tag: &str) -> std::io::Result<Response> {
        let check = self.server.settings.idle_check_interval;
        // Spread the checks of many sessions over the interval.
        let offset = Duration::from_millis(
            rand::thread_rng().gen_range(0..check.as_millis().max(1) as u64),
        );
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + offset, check);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let deadline = tokio::time::sleep(self.server.settings.idle_timeout);
        tokio::pin!(deadline);
        loop {
            // Anything already buffered (DONE pipelined with more).
            match self.conn.rx.next() {
                Outcome::IdleDone => {
                    return Ok(Response::ok(tag, None, "Idle completed."));
                }
                Outcome::Bad { .. } => {
                    return Ok(Response::bad(
                        Some(tag.to_string()),
                        None,
                        "Expected DONE.",
                    ));
                }
                Outcome::Incomplete => {}
                _ => {}
            }
            enum Wake {
                Read(std::io::Result<Read>),
                Event,
                Tick,
                Timeout,
                Stop,
            }
            let wake = {
                let has_selected = self.selected.is_some();
                let events = self.selected.as_mut().map(|s| &mut s.events);
                let event = async {
                    match events {
                        Some(rx) => match rx.recv().await {
                            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => true,
                            Err(broadcast::error::RecvError::Closed) => {
                                std::future::pending::<()>().await;
                                false
                            }
                        },
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = self.conn.fill_small() => Wake::Read(r),
                    _ = event => Wake::Event,
                    _ = ticker.tick(), if has_selected => Wake::Tick,
                    _ = &mut deadline => Wake::Timeout,
                    _ = stopped(&mut self.shutdown) => Wake::Stop,
                }
            };
            match wake {
                Wake::Read(Ok(Read::Data)) => {}
                Wake::Read(Ok(_)) | Wake::Read(Err(_)) => {
                    return Err(std::io::ErrorKind::UnexpectedEof.into())
                }
                Wake::Event | Wake::Tick => {
                    self.sync_selected(true, &[]).await;
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
