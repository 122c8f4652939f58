//! Login tokens: AUTH issues one (64 hex = 32 random bytes) bound to the
//! user, session id and service; the backend presents it with VERIFY.
//! Single use: any VERIFY consumes the token, even a failing one, so a
//! token cannot be probed. Short-lived: expired tokens never verify.
//! Behind a trait so a shared store (Redis) can serve several auth replicas.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng as _;
use subtle::ConstantTimeEq as _;

/// What a token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBinding {
    pub user: String,
    pub session: String,
    pub service: String,
    /// The login's fields, handed to the backend on VERIFY so it needs no
    /// passdb/userdb round trip. Not compared.
    pub fields: crate::fields::ExtraFields,
}

/// Why VERIFY refused a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Never issued, already used, or expired.
    #[error("unknown or expired token")]
    Unknown,
    /// Issued for another session, user or service (it is now consumed).
    #[error("token was issued for another {0}")]
    Mismatch(&'static str),
    /// The shared store could not be reached; the login or VERIFY fails
    /// as temporary.
    #[error("token store unavailable: {0}")]
    Unavailable(String),
}

/// Token storage.
pub trait TokenStore: Send + Sync + 'static {
    /// Issues a token for `binding`, valid for `ttl`.
    fn issue(
        &self,
        binding: TokenBinding,
        ttl: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<String, TokenError>> + Send + '_>>;
    /// Consumes `token` and checks it against `expect` (an empty
    /// `expect.user` skips the user check).
    fn verify<'a>(
        &'a self,
        token: &'a str,
        expect: &'a TokenBinding,
    ) -> Pin<Box<dyn Future<Output = Result<TokenBinding, TokenError>> + Send + 'a>>;
}

/// Tokens in this process's memory.
#[derive(Debug, Default)]
pub struct MemoryTokenStore {
    tokens: Mutex<HashMap<String, (TokenBinding, Instant)>>,
}

/// Tokens outstanding at most; issuing past it first drops expired ones.
const MAX_TOKENS: usize = 1_000_000;

impl MemoryTokenStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn outstanding(&self) -> usize {
        self.tokens.lock().map(|t| t.len()).unwrap_or(0)
    }
}

/// 32 random bytes as 64 lower-case hex digits.
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill(&mut b);
    hex::encode(b)
}

/// Compares a consumed token's binding with what VERIFY expects.
pub(crate) fn check_binding(
    b: TokenBinding,
    expect: &TokenBinding,
) -> Result<TokenBinding, TokenError> {
    if !same(&b.session, &expect.session) {
        Err(TokenError::Mismatch("session"))
    } else if !same(&b.service, &expect.service) {
        Err(TokenError::Mismatch("service"))
    } else if !expect.user.is_empty() && !same(&b.user, &expect.user) {
        Err(TokenError::Mismatch("user"))
    } else {
        Ok(b)
    }
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl TokenStore for MemoryTokenStore {
    fn issue(
        &self,
        binding: TokenBinding,
        ttl: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<String, TokenError>> + Send + '_>> {
        let token = new_token();
        if let Ok(mut t) = self.tokens.lock() {
            if t.len() >= MAX_TOKENS {
                let now = Instant::now();
                t.retain(|_, (_, exp)| *exp > now);
            }
            t.insert(token.clone(), (binding, Instant::now() + ttl));
        }
        Box::pin(async move { Ok(token) })
    }

    fn verify<'a>(
        &'a self,
        token: &'a str,
        expect: &'a TokenBinding,
    ) -> Pin<Box<dyn Future<Output = Result<TokenBinding, TokenError>> + Send + 'a>> {
        let found = self
            .tokens
            .lock()
            .ok()
            .and_then(|mut t| t.remove(&token.to_ascii_lowercase()));
        let result = match found {
            None => Err(TokenError::Unknown),
            Some((_, exp)) if exp <= Instant::now() => Err(TokenError::Unknown),
            Some((b, _)) => check_binding(b, expect),
        };
        Box::pin(async move { result })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(service: &str) -> TokenBinding {
        TokenBinding {
            user: "alice".into(),
            session: "s1".into(),
            service: service.into(),
            fields: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_token_verifies_once_for_its_service_only() {
        let store = MemoryTokenStore::new();
        let t = store
            .issue(b("imap"), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(t.len(), 64);
        assert!(t.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(store.verify(&t, &b("imap")).await, Ok(b("imap")));
        assert_eq!(store.verify(&t, &b("imap")).await, Err(TokenError::Unknown));
        let t = store
            .issue(b("imap"), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(
            store.verify(&t, &b("pop3")).await,
            Err(TokenError::Mismatch("service"))
        );
        assert_eq!(store.verify(&t, &b("imap")).await, Err(TokenError::Unknown));
    }

    #[tokio::test]
    async fn expired_tokens_fail() {
        let store = MemoryTokenStore::new();
        let t = store.issue(b("imap"), Duration::ZERO).await.unwrap();
        assert_eq!(store.verify(&t, &b("imap")).await, Err(TokenError::Unknown));
    }
}
