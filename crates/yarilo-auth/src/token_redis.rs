//! Login tokens in Redis, shared by every `yarilo auth` replica: a token
//! issued by one replica verifies on any other, still exactly once.
//!
//! Keys are `yarilo:auth:token:<sha256(token) hex>` (a dump of Redis holds
//! no usable token), set with `PX` = the token TTL; VERIFY is `GETDEL`
//! (Redis ≥ 6.2), so two replicas racing on one token cannot both win.
//! Values are the binding as one `yarilo_wire` line.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use sha2::Digest as _;
use tokio::sync::Mutex;

use crate::fields::ExtraFields;
use crate::token::{check_binding, new_token, TokenBinding, TokenError, TokenStore};

/// A [`TokenStore`] on Redis.
#[derive(Clone)]
pub struct RedisTokenStore {
    client: redis::Client,
    timeout: Duration,
    conn: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl std::fmt::Debug for RedisTokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisTokenStore")
    }
}

fn key(token: &str) -> String {
    let digest = sha2::Sha256::digest(token.to_ascii_lowercase().as_bytes());
    format!("yarilo:auth:token:{}", hex::encode(digest))
}

fn encode(b: &TokenBinding) -> String {
    let mut fields = vec![b.user.clone(), b.session.clone(), b.service.clone()];
    fields.extend(b.fields.iter().map(|(k, v)| format!("{k}={v}")));
    yarilo_wire::join_line(&fields)
}

fn decode(text: &str) -> Option<TokenBinding> {
    let fields = yarilo_wire::split_line(text).ok()?;
    let mut it = fields.into_iter();
    let (user, session, service) = (it.next()?, it.next()?, it.next()?);
    let fields: ExtraFields = it
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        })
        .collect();
    Some(TokenBinding {
        user,
        session,
        service,
        fields,
    })
}

impl RedisTokenStore {
    /// `url`: `redis://host:port/db`, `rediss://…`, `unix:///path`.
    pub fn new(url: &str, timeout: Duration) -> Result<RedisTokenStore, TokenError> {
        let client =
            redis::Client::open(url).map_err(|e| TokenError::Unavailable(e.to_string()))?;
        Ok(RedisTokenStore {
            client,
            timeout,
            conn: Arc::new(Mutex::new(None)),
        })
    }

    async fn connection(&self) -> Result<MultiplexedConnection, TokenError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = tokio::time::timeout(self.timeout, self.client.get_multiplexed_async_connection())
            .await
            .map_err(|_| TokenError::Unavailable("redis connect timed out".into()))?
            .map_err(|e| TokenError::Unavailable(e.to_string()))?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs one command; a failed call drops the connection so the next
    /// call dials again.
    async fn call<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, TokenError> {
        let mut conn = self.connection().await?;
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                *self.conn.lock().await = None;
                Err(TokenError::Unavailable(e.to_string()))
            }
            Err(_) => {
                *self.conn.lock().await = None;
                Err(TokenError::Unavailable("redis call timed out".into()))
            }
        }
    }

    /// Milliseconds `token` has left, for tests and diagnostics.
    pub async fn remaining_ms(&self, token: &str) -> Result<i64, TokenError> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(key(token));
        self.call(cmd).await
    }
}

impl TokenStore for RedisTokenStore {
    fn issue(
        &self,
        binding: TokenBinding,
        ttl: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<String, TokenError>> + Send + '_>> {
        Box::pin(async move {
            let token = new_token();
            let mut cmd = redis::cmd("SET");
            cmd.arg(key(&token))
                .arg(encode(&binding))
                .arg("PX")
                .arg(ttl.as_millis().max(1) as u64)
                .arg("NX");
            let _: Option<String> = self.call(cmd).await?;
            Ok(token)
        })
    }

    fn verify<'a>(
        &'a self,
        token: &'a str,
        expect: &'a TokenBinding,
    ) -> Pin<Box<dyn Future<Output = Result<TokenBinding, TokenError>> + Send + 'a>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("GETDEL");
            cmd.arg(key(token));
            let value: Option<String> = self.call(cmd).await?;
            match value.as_deref().and_then(decode) {
                Some(b) => check_binding(b, expect),
                None => Err(TokenError::Unknown),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_round_trip_through_their_encoding() {
        let mut fields = ExtraFields::new();
        fields.set("home", "/srv/a b\tc");
        fields.set("quota_rule", "*:storage=1G");
        let b = TokenBinding {
            user: "u@x".into(),
            session: "s\n1".into(),
            service: "imap".into(),
            fields,
        };
        assert_eq!(decode(&encode(&b)), Some(b));
        assert_ne!(key("AB"), key("ab0"));
        assert_eq!(key("AB"), key("ab"));
    }
}
