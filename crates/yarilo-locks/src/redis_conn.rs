//! One Redis connection shared by every request of a process, redialled on
//! demand.
//!
//! Invariants: every Redis call is bounded by a timeout (a hung Redis makes
//! calls fail, never hang); a failed or timed-out call drops the connection
//! so the next call dials afresh — that is what lets a service come back by
//! itself when Redis returns, without a restart. Nothing here retries: the
//! caller decides (locks answers `unavailable`, warden fails open).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Client, RedisError};
use tokio::sync::Mutex;

/// Why a Redis call failed. State in Redis is unknown for writes that
/// timed out (they may have been applied).
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// The URL does not parse; nothing was sent.
    #[error("bad redis url: {0}")]
    Url(String),
    /// Dial, command or reply failed; the connection was dropped.
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    /// No answer within the timeout; the connection was dropped.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// A lazily dialled, self-healing Redis connection.
#[derive(Clone)]
pub struct RedisConn {
    client: Client,
    timeout: Duration,
    conn: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl RedisConn {
    /// Does not dial: the first call does. `timeout` bounds the dial and
    /// each call.
    pub fn new(url: &str, timeout: Duration) -> Result<RedisConn, RedisCallError> {
        let client = Client::open(url).map_err(|e| RedisCallError::Url(e.to_string()))?;
        Ok(RedisConn {
            client,
            timeout,
            conn: Arc::new(Mutex::new(None)),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn connection(&self) -> Result<MultiplexedConnection, RedisCallError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout);
        let dial = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let c = match tokio::time::timeout(self.timeout, dial).await {
            Ok(r) => r?,
            Err(_) => return Err(RedisCallError::Timeout(self.timeout)),
        };
        *slot = Some(c.clone());
        Ok(c)
    }

    async fn reset(&self) {
        *self.conn.lock().await = None;
    }

    /// Runs `cmd` with the timeout.
    pub async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisCallError> {
        let mut c = self.connection().await?;
        let r = tokio::time::timeout(self.timeout, cmd.query_async(&mut c)).await;
        self.finish(r).await
    }

    /// Runs a pipeline (atomic with `.atomic()`) with the timeout.
    pub async fn query_pipeline<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, RedisCallError> {
        let mut c = self.connection().await?;
        let r = tokio::time::timeout(self.timeout, pipe.query_async(&mut c)).await;
        self.finish(r).await
    }

    /// Runs a Lua script with the timeout.
    pub async fn script<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, RedisCallError> {
        let mut c = self.connection().await?;
        let r = tokio::time::timeout(self.timeout, inv.invoke_async(&mut c)).await;
        self.finish(r).await
    }

    async fn finish<T>(
        &self,
        r: Result<Result<T, RedisError>, tokio::time::error::Elapsed>,
    ) -> Result<T, RedisCallError> {
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if is_connection_error(&e) {
                    self.reset().await;
                }
                Err(e.into())
            }
            Err(_) => {
                self.reset().await;
                Err(RedisCallError::Timeout(self.timeout))
            }
        }
    }

    /// `PING` with the timeout: the readiness answer.
    pub async fn ping(&self) -> bool {
        matches!(self.query::<String>(&redis::cmd("PING")).await, Ok(s) if s == "PONG")
    }
}

fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}
