//! The authentication engine: one SASL exchange against the passdb chain,
//! then allow_nets / nologin with the real client IP, the userdb chain,
//! and a login token. Used in-process by `yarilo single` and by the auth
//! service for login pods.
//!
//! Invariants:
//! * every failure that a wrong password or unknown user can cause looks
//!   the same to the client ("authentication failed"), is counted against
//!   the client IP and answered only after `auth_failure_delay`;
//! * `disable_plaintext_auth`: PLAIN/LOGIN only over TLS, from loopback or
//!   from `auth.trusted_nets`;
//! * slow hashes run on blocking threads, at most `hash_workers` at once,
//!   so they never stall the async threads serving other logins;
//! * lookup errors are answered as temporary failures and never cached.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tokio::sync::Semaphore;

use crate::cache::LookupCache;
use crate::db::{Db, DbError, LookupRequest, PassdbEntry};
use crate::fields::{ExtraFields, LoginRefused};
use crate::metrics::AuthMetrics;
use crate::penalty::{FailurePenalty, LocalPenalty};
use crate::sasl::{Mechanism, SaslError, SaslServer, SaslStep};
use crate::scheme::{Scheme, StoredPassword};
use crate::token::{MemoryTokenStore, TokenBinding, TokenError, TokenStore};

/// Engine settings, normally from `auth.*` ([`AuthSettings::from_config`]).
#[derive(Debug, Clone)]
pub struct AuthSettings {
    pub mechanisms: Vec<Mechanism>,
    pub disable_plaintext_auth: bool,
    pub trusted_nets: Vec<IpNet>,
    pub failure_delay: Duration,
    pub penalty_max: Duration,
    pub penalty_window: Duration,
    pub cache_size: usize,
    pub cache_ttl: Duration,
    pub cache_negative_ttl: Duration,
    /// Allowed characters; `None` allows all but NUL and control characters.
    pub username_chars: Option<HashSet<char>>,
    pub username_lowercase: bool,
    pub max_username_length: usize,
    pub token_ttl: Duration,
    pub hash_workers: usize,
    pub exchange_timeout: Duration,
    /// Host name in CRAM-MD5 challenges.
    pub hostname: String,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings::from_config(&yarilo_config::Auth::default(), "localhost")
    }
}

impl AuthSettings {
    pub fn from_config(c: &yarilo_config::Auth, hostname: &str) -> AuthSettings {
        AuthSettings {
            mechanisms: c
                .mechanisms
                .iter()
                .filter_map(|m| Mechanism::parse(m))
                .collect(),
            disable_plaintext_auth: c.disable_plaintext_auth,
            trusted_nets: c.trusted_nets.clone(),
            failure_delay: Duration::from_secs(c.auth_failure_delay_seconds),
            penalty_max: Duration::from_secs(c.auth_penalty_max_seconds),
            penalty_window: Duration::from_secs(c.auth_penalty_window_seconds),
            cache_size: c.auth_cache_size,
            cache_ttl: Duration::from_secs(c.auth_cache_ttl_seconds),
            cache_negative_ttl: Duration::from_secs(c.auth_cache_negative_ttl_seconds),
            username_chars: (!c.username_chars.is_empty())
                .then(|| c.username_chars.chars().collect()),
            username_lowercase: c.username_lowercase,
            max_username_length: c.max_username_length,
            token_ttl: Duration::from_secs(c.token_ttl_seconds),
            hash_workers: c.hash_workers,
            exchange_timeout: Duration::from_secs(c.exchange_timeout_seconds),
            hostname: hostname.to_string(),
        }
    }
}

/// Who is logging in, from where, for what. The login layer fills it from
/// the connection (after the PROXY header, so `client_ip` is the real one).
#[derive(Debug, Clone)]
pub struct AuthRequest {
    /// `imap`, `pop3`, `submission`, `sieve`, `jmap`, …
    pub service: String,
    pub client_ip: IpAddr,
    pub local_ip: Option<IpAddr>,
    /// The session id the token is bound to (the warden id).
    pub session: String,
    /// TLS is on for this client connection.
    pub secured: bool,
}

/// A successful login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSuccess {
    pub user: String,
    /// 64 hex digits for the `YARILO` preamble and VERIFY.
    pub token: String,
    /// passdb extra fields, then userdb fields (`home`, `director_tag`, …).
    pub fields: ExtraFields,
    /// SASL additional data with success (SCRAM server-final).
    pub additional: Option<Vec<u8>>,
}

/// Why a login failed; `message` is safe to show the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure {
    pub kind: FailureKind,
    pub message: String,
    /// The user, when known (for logs; never tells the client more).
    pub user: Option<String>,
}

/// Failure classes; the protocol maps them to its replies (IMAP:
/// `[AUTHENTICATIONFAILED]`, `[UNAVAILABLE]`, …) and metrics to `result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Wrong password, unknown user, bad proof, unusable name.
    BadCredentials,
    /// `allow_nets` does not contain the client IP.
    NotAllowedNet,
    /// `nologin`; the message is the reason.
    Nologin,
    /// Plaintext mechanism on an insecure connection.
    PlaintextDisabled,
    /// Mechanism unknown or not enabled.
    UnsupportedMechanism,
    /// The client broke the mechanism's grammar.
    Malformed,
    /// The client cancelled (`*`).
    Aborted,
    /// A passdb/userdb was unreachable; try again later.
    Temporary,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::BadCredentials => "bad_credentials",
            FailureKind::NotAllowedNet => "not_allowed_net",
            FailureKind::Nologin => "nologin",
            FailureKind::PlaintextDisabled => "plaintext_disabled",
            FailureKind::UnsupportedMechanism => "unsupported_mechanism",
            FailureKind::Malformed => "malformed",
            FailureKind::Aborted => "aborted",
            FailureKind::Temporary => "temporary",
        }
    }

    pub fn parse(s: &str) -> FailureKind {
        match s {
            "not_allowed_net" => FailureKind::NotAllowedNet,
            "nologin" => FailureKind::Nologin,
            "plaintext_disabled" => FailureKind::PlaintextDisabled,
            "unsupported_mechanism" => FailureKind::UnsupportedMechanism,
            "malformed" => FailureKind::Malformed,
            "aborted" => FailureKind::Aborted,
            "temporary" => FailureKind::Temporary,
            _ => FailureKind::BadCredentials,
        }
    }
}

impl AuthFailure {
    fn new(kind: FailureKind, user: Option<String>) -> AuthFailure {
        let message = match kind {
            FailureKind::BadCredentials | FailureKind::NotAllowedNet => "Authentication failed.",
            FailureKind::Nologin => "Login disabled.",
            FailureKind::PlaintextDisabled => {
                "Plaintext authentication disallowed on non-secure connections."
            }
            FailureKind::UnsupportedMechanism => "Unsupported authentication mechanism.",
            FailureKind::Malformed => "Invalid authentication data.",
            FailureKind::Aborted => "Authentication aborted.",
            FailureKind::Temporary => "Temporary authentication failure.",
        };
        AuthFailure {
            kind,
            message: message.to_string(),
            user,
        }
    }
}

/// One step's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthReply {
    /// Send this challenge; feed the answer to [`Exchange::step`].
    Continue(Vec<u8>),
    Success(AuthSuccess),
    Failure(AuthFailure),
}

/// What VERIFY returns to a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedLogin {
    pub user: String,
    pub fields: ExtraFields,
}

/// The only service a USER lookup issues a token for (deliveries carry no
/// credentials; every other service's token needs a passdb success).
pub const DELIVERY_SERVICE: &str = "lmtp";

/// The engine. Cheap to share: wrap it in an `Arc`.
pub struct Authenticator {
    settings: AuthSettings,
    passdbs: Vec<Db>,
    userdbs: Vec<Db>,
    pass_cache: LookupCache<(usize, String), PassdbEntry>,
    user_cache: LookupCache<(usize, String), ExtraFields>,
    penalty: Arc<dyn FailurePenalty>,
    tokens: Arc<dyn TokenStore>,
    hashers: Arc<Semaphore>,
    metrics: AuthMetrics,
    /// Keys decoy SCRAM credentials for unknown users (per process).
    decoy_secret: [u8; 32],
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field(
                "passdbs",
                &self.passdbs.iter().map(Db::describe).collect::<Vec<_>>(),
            )
            .field(
                "userdbs",
                &self.userdbs.iter().map(Db::describe).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Building an authenticator failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{key}: {source}")]
    Db {
        key: String,
        #[source]
        source: DbError,
    },
    /// A setting that cannot be used (the message names the key).
    #[error("{0}")]
    Scheme(String),
}

impl Authenticator {
    /// An engine with the given chains, a local penalty and in-memory tokens.
    pub fn new(settings: AuthSettings, passdbs: Vec<Db>, userdbs: Vec<Db>) -> Authenticator {
        let penalty = Arc::new(LocalPenalty::new(
            settings.penalty_max,
            settings.penalty_window,
        ));
        Self::with_parts(
            settings,
            passdbs,
            userdbs,
            penalty,
            Arc::new(MemoryTokenStore::new()),
        )
    }

    /// Like [`new`](Self::new) with a shared penalty and token store.
    pub fn with_parts(
        settings: AuthSettings,
        passdbs: Vec<Db>,
        userdbs: Vec<Db>,
        penalty: Arc<dyn FailurePenalty>,
        tokens: Arc<dyn TokenStore>,
    ) -> Authenticator {
        let workers = if settings.hash_workers == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        } else {
            settings.hash_workers
        };
        Authenticator {
            pass_cache: LookupCache::new(
                settings.cache_size,
                settings.cache_ttl,
                settings.cache_negative_ttl,
            ),
            user_cache: LookupCache::new(
                settings.cache_size,
                settings.cache_ttl,
                settings.cache_negative_ttl,
            ),
            hashers: Arc::new(Semaphore::new(workers)),
            settings,
            passdbs,
            userdbs,
            penalty,
            tokens,
            metrics: AuthMetrics::default(),
            decoy_secret: {
                use rand::Rng as _;
                let mut k = [0u8; 32];
                rand::thread_rng().fill(&mut k);
                k
            },
        }
    }

    /// Unprovable SCRAM credentials for an unknown user: the salt is stable
    /// per user (a repeated probe sees the same one), the keys are secret.
    fn decoy_scram(&self, scheme: Scheme, user: &str) -> StoredPassword {
        use crate::scheme::scram_keys::{hash_len, hmac};
        let len = hash_len(scheme).unwrap_or(32);
        let mac = |label: &str| {
            let mut data = label.as_bytes().to_vec();
            data.extend_from_slice(user.as_bytes());
            hmac(Scheme::ScramSha256, &self.decoy_secret, &data)
        };
        let keys = crate::scheme::ScramKeys {
            scheme,
            iterations: 4096,
            salt: mac("salt")[..16].to_vec(),
            stored_key: mac("stored")[..len].to_vec(),
            server_key: mac("server")[..len].to_vec(),
        };
        StoredPassword {
            scheme,
            encoding: crate::scheme::Encoding::Default,
            value: keys.to_stored(),
        }
    }

    /// Builds the engine from the whole configuration. An empty `passdb`
    /// (`userdb`) list means one passwd-file at `<general.data_dir>/users`.
    pub fn from_config(config: &yarilo_config::Config) -> Result<Authenticator, BuildError> {
        let data_dir = Path::new(&config.general.data_dir);
        let default_scheme = Scheme::parse(&config.auth.default_pass_scheme)
            .map_err(|e| BuildError::Scheme(format!("auth.default_pass_scheme: {e}")))?
            .0;
        let default_entry = yarilo_config::DbEntry {
            driver: yarilo_config::DbDriver::PasswdFile,
            args: String::new(),
            default_pass_scheme: String::new(),
            connect: Default::default(),
            passdb_sql_query: String::new(),
            userdb_sql_query: String::new(),
            iterate_query: String::new(),
            insert_query: String::new(),
            update_query: String::new(),
            delete_query: String::new(),
            pool_size: 1,
        };
        let build = |list: &[yarilo_config::DbEntry], what: &str, userdb: bool| {
            let defaulted = [default_entry.clone()];
            let list = if list.is_empty() {
                &defaulted[..]
            } else {
                list
            };
            list.iter()
                .enumerate()
                .map(|(i, e)| {
                    Db::from_config(e, data_dir, default_scheme, userdb).map_err(|source| {
                        BuildError::Db {
                            key: format!("{what}[{i}]"),
                            source,
                        }
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let passdbs = build(&config.passdb, "passdb", false)?;
        let userdbs = build(&config.userdb, "userdb", true)?;
        let settings = AuthSettings::from_config(&config.auth, &config.general.hostname);
        let tokens: Arc<dyn TokenStore> = match config.auth.token_store {
            yarilo_config::TokenStoreKind::Memory => Arc::new(MemoryTokenStore::new()),
            yarilo_config::TokenStoreKind::Redis => Arc::new(
                crate::token_redis::RedisTokenStore::new(
                    config.auth.token_redis.expose(),
                    Duration::from_millis(config.auth.token_redis_timeout_ms),
                )
                .map_err(|e| BuildError::Scheme(format!("auth.token_redis: {e}")))?,
            ),
        };
        let penalty = Arc::new(LocalPenalty::new(
            settings.penalty_max,
            settings.penalty_window,
        ));
        Ok(Authenticator::with_parts(
            settings, passdbs, userdbs, penalty, tokens,
        ))
    }

    pub fn settings(&self) -> &AuthSettings {
        &self.settings
    }

    pub fn metrics(&self) -> &AuthMetrics {
        &self.metrics
    }

    pub fn passdbs(&self) -> &[Db] {
        &self.passdbs
    }

    pub fn userdbs(&self) -> &[Db] {
        &self.userdbs
    }

    /// Registers the engine's metrics (`yarilo_auth_*`).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.metrics.register(registry);
    }

    /// Whether a connection counts as secure for `disable_plaintext_auth`.
    pub fn is_secured(&self, secured_transport: bool, client_ip: IpAddr) -> bool {
        secured_transport || client_ip.is_loopback() || self.is_trusted(client_ip)
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.settings.trusted_nets.iter().any(|n| n.contains(&ip))
    }

    /// Mechanisms to advertise on a connection (CAPABILITY, EHLO, CAPA).
    pub fn mechanisms(&self, secured_transport: bool, client_ip: IpAddr) -> Vec<Mechanism> {
        let secure = self.is_secured(secured_transport, client_ip);
        self.settings
            .mechanisms
            .iter()
            .copied()
            .filter(|m| secure || !self.settings.disable_plaintext_auth || !m.is_plaintext())
            .collect()
    }

    /// Starts an exchange for mechanism `mech` (case-insensitive name).
    pub fn exchange(self: &Arc<Self>, request: AuthRequest, mech: &str) -> Exchange {
        let mechanism = Mechanism::parse(mech).filter(|m| self.settings.mechanisms.contains(m));
        Exchange {
            auth: Arc::clone(self),
            sasl: mechanism.map(|m| SaslServer::start(m, &self.settings.hostname)),
            request,
            started: Instant::now(),
            done: false,
            user: None,
            pending_entry: None,
        }
    }

    /// Convenience: a whole PLAIN login with a known password.
    pub async fn login_plain(
        self: &Arc<Self>,
        request: AuthRequest,
        user: &str,
        password: &str,
    ) -> AuthReply {
        let mut ir = Vec::with_capacity(user.len() + password.len() + 2);
        ir.push(0);
        ir.extend_from_slice(user.as_bytes());
        ir.push(0);
        ir.extend_from_slice(password.as_bytes());
        self.exchange(request, "PLAIN").begin(Some(&ir)).await
    }

    /// Normalises a login name, or refuses it. NUL and control characters
    /// are refused even when `username_chars` is empty.
    pub fn normalize_user(&self, raw: &str) -> Option<String> {
        if raw.is_empty()
            || raw.len() > self.settings.max_username_length
            || raw.chars().any(char::is_control)
        {
            return None;
        }
        if let Some(allowed) = &self.settings.username_chars {
            if !raw.chars().all(|c| allowed.contains(&c)) {
                return None;
            }
        }
        Some(if self.settings.username_lowercase {
            raw.to_lowercase()
        } else {
            raw.to_string()
        })
    }

    async fn passdb_entry(
        &self,
        index: usize,
        db: &Db,
        req: &LookupRequest<'_>,
    ) -> Result<Option<PassdbEntry>, DbError> {
        let key = (index, req.user.to_string());
        if let Some(hit) = self.pass_cache.get(&key) {
            return Ok(hit);
        }
        let found = db.passdb_lookup(req).await?;
        self.pass_cache.put(key, found.clone());
        Ok(found)
    }

    /// Runs `f` on a blocking thread, at most `hash_workers` at once.
    async fn hash_off_thread<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let permit = Arc::clone(&self.hashers).acquire_owned().await.ok()?;
        let started = Instant::now();
        let r = tokio::task::spawn_blocking(move || {
            let r = f();
            drop(permit);
            r
        })
        .await
        .ok();
        self.metrics.observe_hash(started.elapsed());
        r
    }

    async fn verify_stored(&self, stored: &StoredPassword, password: &[u8]) -> bool {
        if stored.is_slow() {
            let stored = stored.clone();
            let password = password.to_vec();
            self.hash_off_thread(move || stored.verify(&password))
                .await
                .unwrap_or(false)
        } else {
            stored.verify(password)
        }
    }

    /// The passdb chain with a password: the first passdb whose entry
    /// matches wins (Dovecot's default `result_failure = continue`).
    async fn passdb_verify(
        &self,
        req: &LookupRequest<'_>,
        password: &[u8],
    ) -> Result<PassdbEntry, FailureKind> {
        let mut temporary = false;
        let mut mismatched = false;
        for (i, db) in self.passdbs.iter().enumerate() {
            match self.passdb_entry(i, db, req).await {
                Err(e) => {
                    tracing::warn!(user = req.user, passdb = %db.describe(), error = %e, "passdb lookup failed");
                    temporary = true;
                }
                Ok(None) => {}
                Ok(Some(entry)) => {
                    if entry.nopassword {
                        return Ok(entry);
                    }
                    let Some(stored) = &entry.password else {
                        mismatched = true;
                        continue;
                    };
                    if self.verify_stored(stored, password).await {
                        return Ok(entry);
                    }
                    mismatched = true;
                }
            }
        }
        if temporary && !mismatched {
            Err(FailureKind::Temporary)
        } else {
            Err(FailureKind::BadCredentials)
        }
    }

    /// The passdb chain without a password (CRAM-MD5, SCRAM): the first
    /// passdb that knows the user.
    async fn passdb_credentials(
        &self,
        req: &LookupRequest<'_>,
    ) -> Result<PassdbEntry, FailureKind> {
        let mut temporary = false;
        for (i, db) in self.passdbs.iter().enumerate() {
            match self.passdb_entry(i, db, req).await {
                Err(e) => {
                    tracing::warn!(user = req.user, passdb = %db.describe(), error = %e, "passdb lookup failed");
                    temporary = true;
                }
                Ok(None) => {}
                Ok(Some(entry)) => return Ok(entry),
            }
        }
        Err(if temporary {
            FailureKind::Temporary
        } else {
            FailureKind::BadCredentials
        })
    }

    /// The userdb chain: the first userdb that knows the user. `Ok(None)`
    /// when no userdb does.
    pub async fn userdb_lookup(
        &self,
        user: &str,
        service: &str,
        remote_ip: Option<IpAddr>,
    ) -> Result<Option<ExtraFields>, DbError> {
        let req = LookupRequest {
            user,
            service,
            remote_ip,
            local_ip: None,
        };
        let mut last_err = None;
        for (i, db) in self.userdbs.iter().enumerate() {
            let key = (i, user.to_string());
            if let Some(hit) = self.user_cache.get(&key) {
                if hit.is_some() {
                    return Ok(hit);
                }
                continue;
            }
            match db.userdb_lookup(&req).await {
                Ok(found) => {
                    self.user_cache.put(key, found.clone());
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                Err(e) => last_err = Some(e),
            }
        }
        match last_err {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// USER lookup for LMTP and admin tools: the userdb fields of `user`
    /// (normalised first), or `Ok(None)` if unknown.
    pub async fn lookup_user(
        &self,
        user: &str,
        service: &str,
    ) -> Result<Option<(String, ExtraFields)>, DbError> {
        let Some(user) = self.normalize_user(user) else {
            return Ok(None);
        };
        Ok(self
            .userdb_lookup(&user, service, None)
            .await?
            .map(|f| (user, f)))
    }

    /// USER lookup for an LMTP delivery through `lmtp-login`: the userdb
    /// fields and a single-use token bound to (user, `session`, `lmtp`),
    /// which the LMTP backend VERIFYs from the hop's preamble. LMTP has no
    /// credentials: the token proves the hop came through the login layer
    /// (and this auth service), and is good for nothing but an `lmtp`
    /// VERIFY of that user and session. `Ok(None)` if unknown.
    pub async fn lookup_delivery(
        &self,
        user: &str,
        session: &str,
    ) -> Result<Option<(String, ExtraFields, String)>, DbError> {
        let Some((user, fields)) = self.lookup_user(user, DELIVERY_SERVICE).await? else {
            return Ok(None);
        };
        let token = self
            .tokens
            .issue(
                TokenBinding {
                    user: user.clone(),
                    session: session.to_string(),
                    service: DELIVERY_SERVICE.to_string(),
                    fields: fields.clone(),
                },
                self.settings.token_ttl,
            )
            .await
            .map_err(|e| DbError::Internal(format!("cannot issue a delivery token: {e}")))?;
        Ok(Some((user, fields, token)))
    }

    /// VERIFY: consumes `token` and checks it was issued for this session,
    /// service and (when given) user.
    pub async fn verify_token(
        &self,
        token: &str,
        session: &str,
        service: &str,
        user: &str,
    ) -> Result<VerifiedLogin, TokenError> {
        let expect = TokenBinding {
            user: user.to_string(),
            session: session.to_string(),
            service: service.to_string(),
            fields: ExtraFields::new(),
        };
        let r = self.tokens.verify(token, &expect).await;
        self.metrics.count_verify(match &r {
            Ok(_) => "ok",
            Err(TokenError::Unknown) => "unknown",
            Err(TokenError::Mismatch(_)) => "mismatch",
            Err(TokenError::Unavailable(_)) => "unavailable",
        });
        r.map(|b| VerifiedLogin {
            user: b.user,
            fields: b.fields,
        })
    }

    async fn finish_success(
        &self,
        request: &AuthRequest,
        entry: PassdbEntry,
        additional: Option<Vec<u8>>,
    ) -> Result<AuthSuccess, AuthFailure> {
        let user = entry.user.clone();
        match entry.fields.check_login(request.client_ip) {
            Ok(()) => {}
            Err(LoginRefused::NotInAllowedNets(ip)) => {
                tracing::info!(user, %ip, "login refused: client not in allow_nets");
                return Err(AuthFailure::new(FailureKind::NotAllowedNet, Some(user)));
            }
            Err(LoginRefused::Nologin(reason)) => {
                let mut f = AuthFailure::new(FailureKind::Nologin, Some(user));
                f.message = reason;
                return Err(f);
            }
        }
        let mut fields = entry.fields.clone();
        fields.merge(&entry.userdb_fields);
        if !self.userdbs.is_empty() {
            match self
                .userdb_lookup(&user, &request.service, Some(request.client_ip))
                .await
            {
                Ok(Some(u)) => fields.merge(&u),
                Ok(None) if !entry.userdb_fields.is_empty() => {}
                Ok(None) => {
                    tracing::warn!(user, "authenticated but unknown to every userdb");
                    return Err(AuthFailure::new(FailureKind::BadCredentials, Some(user)));
                }
                Err(e) => {
                    tracing::warn!(user, error = %e, "userdb lookup failed");
                    return Err(AuthFailure::new(FailureKind::Temporary, Some(user)));
                }
            }
        }
        let token = self
            .tokens
            .issue(
                TokenBinding {
                    user: user.clone(),
                    session: request.session.clone(),
                    service: request.service.clone(),
                    fields: fields.clone(),
                },
                self.settings.token_ttl,
            )
            .await
            .map_err(|e| {
                tracing::warn!(user, error = %e, "cannot issue a login token");
                AuthFailure::new(FailureKind::Temporary, Some(user.clone()))
            })?;
        Ok(AuthSuccess {
            user,
            token,
            fields,
            additional,
        })
    }
}

/// One SASL exchange through the engine.
pub struct Exchange {
    auth: Arc<Authenticator>,
    request: AuthRequest,
    sasl: Option<SaslServer>,
    started: Instant,
    done: bool,
    user: Option<String>,
    /// The passdb entry between SCRAM's server-first and client-final.
    pending_entry: Option<PassdbEntry>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("service", &self.request.service)
            .field("mechanism", &self.sasl.as_ref().map(|s| s.mechanism()))
            .finish()
    }
}

impl Exchange {
    /// The first step, with the client's initial response if any.
    pub async fn begin(&mut self, initial: Option<&[u8]>) -> AuthReply {
        let Some(mech) = self.sasl.as_ref().map(|s| s.mechanism()) else {
            return self.fail(FailureKind::UnsupportedMechanism).await;
        };
        let ip = self.request.client_ip;
        if mech.is_plaintext()
            && self.auth.settings.disable_plaintext_auth
            && !self.auth.is_secured(self.request.secured, ip)
        {
            return self.fail(FailureKind::PlaintextDisabled).await;
        }
        if !ip.is_loopback() && !self.auth.is_trusted(ip) {
            let delay = self.auth.penalty.delay_for(ip).await;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        let Some(sasl) = self.sasl.as_mut() else {
            return self.fail(FailureKind::UnsupportedMechanism).await;
        };
        let step = sasl.begin(initial);
        self.drive(step).await
    }

    /// Feeds the client's next response; `None` is a cancel (`*`).
    pub async fn step(&mut self, response: Option<&[u8]>) -> AuthReply {
        if self.done {
            return AuthReply::Failure(AuthFailure::new(FailureKind::Malformed, None));
        }
        if self.started.elapsed() > self.auth.settings.exchange_timeout {
            return self.fail(FailureKind::Aborted).await;
        }
        let Some(response) = response else {
            return self.fail(FailureKind::Aborted).await;
        };
        let Some(sasl) = self.sasl.as_mut() else {
            return self.fail(FailureKind::UnsupportedMechanism).await;
        };
        let step = sasl.step(response);
        self.drive(step).await
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Open longer than `exchange_timeout`: the next step fails.
    pub fn is_expired(&self) -> bool {
        self.started.elapsed() > self.auth.settings.exchange_timeout
    }

    fn mech_name(&self) -> &'static str {
        self.sasl
            .as_ref()
            .map(|s| s.mechanism().name())
            .unwrap_or("unknown")
    }

    async fn fail(&mut self, kind: FailureKind) -> AuthReply {
        self.done = true;
        let auth = Arc::clone(&self.auth);
        let ip = self.request.client_ip;
        auth.metrics
            .count_attempt(&self.request.service, self.mech_name(), kind.as_str());
        if matches!(
            kind,
            FailureKind::BadCredentials | FailureKind::NotAllowedNet
        ) {
            if !ip.is_loopback() && !auth.is_trusted(ip) {
                auth.penalty.record_failure(ip).await;
            }
            if !auth.settings.failure_delay.is_zero() {
                tokio::time::sleep(auth.settings.failure_delay).await;
            }
        }
        tracing::info!(
            service = %self.request.service,
            mechanism = self.mech_name(),
            ip = %ip,
            user = self.user.as_deref().unwrap_or(""),
            result = kind.as_str(),
            "authentication failed"
        );
        AuthReply::Failure(AuthFailure::new(kind, self.user.clone()))
    }

    fn lookup_request<'a>(&'a self, user: &'a str) -> LookupRequest<'a> {
        LookupRequest {
            user,
            service: &self.request.service,
            remote_ip: Some(self.request.client_ip),
            local_ip: self.request.local_ip,
        }
    }

    async fn drive(&mut self, mut step: SaslStep) -> AuthReply {
        // The entry of the user the mechanism asked credentials for.
        let mut entry: Option<PassdbEntry> = None;
        loop {
            match step {
                SaslStep::Challenge(c) => return AuthReply::Continue(c),
                SaslStep::Failure(e) => {
                    let kind = match e {
                        SaslError::Malformed(_) | SaslError::TooLong | SaslError::OutOfOrder => {
                            FailureKind::Malformed
                        }
                        SaslError::ChannelBinding => FailureKind::UnsupportedMechanism,
                        _ => FailureKind::BadCredentials,
                    };
                    return self.fail(kind).await;
                }
                SaslStep::VerifyPassword {
                    authcid,
                    authzid,
                    password,
                } => {
                    self.user = Some(authcid.clone());
                    if authzid.is_some() {
                        return self.fail(FailureKind::BadCredentials).await;
                    }
                    let Some(user) = self.auth.normalize_user(&authcid) else {
                        return self.fail(FailureKind::BadCredentials).await;
                    };
                    self.user = Some(user.clone());
                    let auth = Arc::clone(&self.auth);
                    let req = self.lookup_request(&user);
                    let result = auth.passdb_verify(&req, &password).await;
                    return match result {
                        Ok(e) => self.succeed(e, None).await,
                        Err(kind) => self.fail(kind).await,
                    };
                }
                SaslStep::NeedCredentials { authcid, authzid } => {
                    self.user = Some(authcid.clone());
                    if authzid.is_some() {
                        return self.fail(FailureKind::BadCredentials).await;
                    }
                    let Some(user) = self.auth.normalize_user(&authcid) else {
                        return self.fail(FailureKind::BadCredentials).await;
                    };
                    self.user = Some(user.clone());
                    let auth = Arc::clone(&self.auth);
                    let req = self.lookup_request(&user);
                    let scram = match self.sasl.as_ref().map(|s| s.mechanism()) {
                        Some(Mechanism::ScramSha1) => Some(Scheme::ScramSha1),
                        Some(Mechanism::ScramSha256) => Some(Scheme::ScramSha256),
                        _ => None,
                    };
                    let (found, stored) = match auth.passdb_credentials(&req).await {
                        Ok(e) => match (e.password.clone(), scram) {
                            (Some(p), _) => (Some(e), p),
                            (None, Some(s)) => (None, auth.decoy_scram(s, &user)),
                            (None, None) => return self.fail(FailureKind::BadCredentials).await,
                        },
                        // RFC 5802 §9: answer an unknown user with a
                        // plausible server-first, so SCRAM's first step
                        // does not tell which users exist.
                        Err(FailureKind::BadCredentials) if scram.is_some() => {
                            let s = scram.unwrap_or(Scheme::ScramSha256);
                            (None, auth.decoy_scram(s, &user))
                        }
                        Err(kind) => return self.fail(kind).await,
                    };
                    entry = found;
                    let Some(mut sasl) = self.sasl.take() else {
                        return self.fail(FailureKind::Malformed).await;
                    };
                    // Deriving SCRAM keys from a clear-text password is PBKDF2.
                    let result = auth
                        .hash_off_thread(move || {
                            let s = sasl.credentials(&stored);
                            (sasl, s)
                        })
                        .await;
                    let Some((sasl, next)) = result else {
                        return self.fail(FailureKind::Temporary).await;
                    };
                    self.sasl = Some(sasl);
                    step = next;
                    if let SaslStep::Challenge(c) = step {
                        self.pending_entry = entry.take();
                        return AuthReply::Continue(c);
                    }
                }
                SaslStep::Success {
                    authcid,
                    additional,
                    ..
                } => {
                    let e = match entry.take().or_else(|| self.pending_entry.take()) {
                        Some(e) => e,
                        None => {
                            // Only a decoy exchange has no entry, and its
                            // random keys cannot be proven.
                            tracing::warn!(user = authcid, "SASL success without a passdb entry");
                            return self.fail(FailureKind::BadCredentials).await;
                        }
                    };
                    return self.succeed(e, additional).await;
                }
            }
        }
    }

    async fn succeed(&mut self, entry: PassdbEntry, additional: Option<Vec<u8>>) -> AuthReply {
        self.done = true;
        let auth = Arc::clone(&self.auth);
        match auth.finish_success(&self.request, entry, additional).await {
            Ok(s) => {
                auth.penalty.reset(self.request.client_ip).await;
                auth.metrics
                    .count_attempt(&self.request.service, self.mech_name(), "ok");
                tracing::info!(
                    service = %self.request.service,
                    mechanism = self.mech_name(),
                    ip = %self.request.client_ip,
                    user = %s.user,
                    "authenticated"
                );
                AuthReply::Success(s)
            }
            Err(f) => {
                self.user = f.user.clone();
                let message = f.message.clone();
                match self.fail(f.kind).await {
                    AuthReply::Failure(mut out) => {
                        out.message = message;
                        AuthReply::Failure(out)
                    }
                    other => other,
                }
            }
        }
    }
}
