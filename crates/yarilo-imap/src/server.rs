//! [`ImapServer`]: what every session of one process shares (settings,
//! store, auth, metrics), and the entry points a listener calls.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_rustls::TlsAcceptor;
use yarilo_auth::{AuthHandle, ExtraFields};
use yarilo_listener::ClientConn;
use yarilo_store::Store;

use crate::metrics::Metrics;
use crate::recent::RecentTracker;
use crate::session::Session;

/// Session settings, from `imap.*` and `general.hostname`.
#[derive(Debug, Clone)]
pub struct ImapSettings {
    /// Name in the greeting.
    pub hostname: String,
    /// Hierarchy separator clients see.
    pub separator: char,
    pub max_line_length: usize,
    pub max_literal: usize,
    /// APPENDLIMIT in bytes.
    pub append_limit: u64,
    pub max_bad_commands: u32,
    pub login_timeout: Duration,
    pub autologout: Duration,
    pub idle_timeout: Duration,
    pub idle_check_interval: Duration,
    pub max_auth_failures: u32,
    pub auth_failure_delay: Duration,
    /// Replaces the post-login capability list when not empty.
    pub capability_override: Vec<String>,
    /// `delay-newmail`: new-mail EXISTS only at NOOP and CHECK.
    pub delay_newmail: bool,
    /// `tb-extra-mailbox-sep`: drop a trailing separator from names.
    pub tb_extra_mailbox_sep: bool,
    /// `tb-lsub-flags`: LSUB answers carry `\HasChildren`/`\HasNoChildren`.
    pub tb_lsub_flags: bool,
    /// Messages whose SORT/THREAD header facts are kept in memory, over
    /// all mailboxes; 0 turns the cache off.
    pub sort_cache_messages: usize,
    /// Bound on the TLS handshake after STARTTLS.
    pub starttls_timeout: Duration,
    /// Bound on one write to the client.
    pub write_timeout: Duration,
    /// Bound on the whole unauthenticated phase of a connection.
    pub preauth_timeout: Duration,
    /// Process-wide bound on APPEND bytes held in memory.
    pub append_buffer_bytes: u64,
}

impl Default for ImapSettings {
    fn default() -> Self {
        ImapSettings::from_imap(&yarilo_config::Imap::default(), "localhost")
    }
}

impl ImapSettings {
    pub fn from_config(c: &yarilo_config::Config) -> ImapSettings {
        ImapSettings::from_imap(&c.imap, &c.general.hostname)
    }

    fn from_imap(c: &yarilo_config::Imap, hostname: &str) -> ImapSettings {
        ImapSettings {
            hostname: hostname.to_string(),
            separator: c.separator_char(),
            max_line_length: c.max_line_length,
            max_literal: c.max_literal,
            append_limit: c.append_limit,
            max_bad_commands: c.max_bad_commands,
            login_timeout: Duration::from_secs(c.login_timeout_seconds),
            autologout: Duration::from_secs(c.autologout_seconds),
            idle_timeout: Duration::from_secs(c.idle_timeout_seconds),
            idle_check_interval: Duration::from_secs(c.idle_check_interval_seconds),
            max_auth_failures: c.max_auth_failures.max(1),
            auth_failure_delay: Duration::from_secs(c.auth_failure_delay_seconds),
            capability_override: c
                .capability
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            delay_newmail: c.client_workarounds.iter().any(|w| w == "delay-newmail"),
            tb_extra_mailbox_sep: c
                .client_workarounds
                .iter()
                .any(|w| w == "tb-extra-mailbox-sep"),
            tb_lsub_flags: c.client_workarounds.iter().any(|w| w == "tb-lsub-flags"),
            sort_cache_messages: c.sort_cache_messages,
            starttls_timeout: Duration::from_secs(c.starttls_timeout_seconds),
            write_timeout: Duration::from_secs(c.write_timeout_seconds),
            preauth_timeout: Duration::from_secs(c.preauth_timeout_seconds),
            append_buffer_bytes: c.append_buffer_bytes,
        }
    }
}

/// Shared by every IMAP session of the process.
pub struct ImapServer {
    pub(crate) settings: ImapSettings,
    pub(crate) store: Store,
    pub(crate) auth: AuthHandle,
    pub(crate) starttls: Option<TlsAcceptor>,
    pub(crate) metrics: Metrics,
    pub(crate) recent: RecentTracker,
    pub(crate) idle_watch: crate::idle::IdleWatch,
    pub(crate) sort_cache: crate::sort_cache::SortCache,
    /// What APPENDs of every session may buffer together.
    pub(crate) append_budget: crate::append::AppendBudget,
}

impl ImapServer {
    /// `starttls` enables STARTTLS on plain connections (and is what
    /// makes LOGIN acceptable on a non-loopback plain connection).
    pub fn new(
        settings: ImapSettings,
        store: Store,
        auth: AuthHandle,
        starttls: Option<TlsAcceptor>,
        registry: &mut Registry,
    ) -> Arc<ImapServer> {
        let metrics = Metrics::default();
        metrics.register(registry);
        Arc::new(ImapServer {
            store,
            auth,
            starttls,
            metrics,
            recent: RecentTracker::default(),
            idle_watch: Default::default(),
            sort_cache: crate::sort_cache::SortCache::new(settings.sort_cache_messages),
            append_budget: crate::append::AppendBudget::new(settings.append_buffer_bytes),
            settings,
        })
    }

    /// Runs one client connection from greeting to logout. `shutdown`
    /// resolves when the process stops: the session then says BYE at the
    /// next command boundary (or at once when idle).
    pub async fn handle(
        self: Arc<Self>,
        conn: ClientConn,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let session = Session::new(self, conn);
        session.run(None, shutdown).await;
    }

    /// Runs a connection that is already authenticated (a login proxy
    /// verified the user): the greeting is PREAUTH.
    pub async fn handle_preauth(
        self: Arc<Self>,
        conn: ClientConn,
        user: String,
        fields: ExtraFields,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let session = Session::new(self, conn);
        session.run(Some((user, fields)), shutdown).await;
    }

    /// Runs a connection a login proxy handed over after the client's
    /// LOGIN/AUTHENTICATE `tag` succeeded there (the backend verified the
    /// preamble): instead of a greeting, the first line is
    /// `<tag> OK [CAPABILITY …] Logged in` (or `<tag> NO [UNAVAILABLE]`
    /// when the mail store cannot be opened), so the client sees this
    /// backend's post-login capabilities.
    pub async fn handle_proxied(
        self: Arc<Self>,
        conn: ClientConn,
        user: String,
        fields: ExtraFields,
        tag: String,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let mut session = Session::new(self, conn);
        session.login_tag = Some(tag);
        session.run(Some((user, fields)), shutdown).await;
    }
}
