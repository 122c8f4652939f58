//! The async API the protocols use: [`Store`] (one per deployment) →
//! [`UserStore`] (one user's mailboxes) → [`Mailbox`] (one open mailbox,
//! shared by every session of this process) → [`MailboxView`] snapshots.
//!
//! Writers take `yarilo_locks` locks in the order `idx:<user>` (mailbox
//! list changes) → `mbox:<user>:<mailbox>` (anything that changes a
//! mailbox) and never hold two `mbox:` locks at once (COPY/MOVE lock only
//! the destination, then only the source). LMTP may wrap deliveries in
//! `deliver:<user>:<mailbox>` taken after `mbox:`; the store never takes it.
//! All file I/O runs in `spawn_blocking`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;
use yarilo_locks::{lock, Event, EventBus, LockGuard, LockOptions, Locker};

use crate::durable::{create_dir_durable, fsync_dir, write_atomic};
use crate::error::{IoContext, StoreError};
use crate::flags::Flags;
use crate::location::{MailLocation, UserInfo, UserLocation};
use crate::maildir::{self, Core, CoreOptions, FlagOp, FlagResult, MailboxPaths};
use crate::names::{self, index_dir, mailbox_dir, normalize};
use crate::subscriptions;
use crate::view::MailboxView;

/// RFC 6154 special-use attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecialUse {
    All,
    Archive,
    Drafts,
    Flagged,
    Junk,
    Sent,
    Trash,
}

impl SpecialUse {
    pub fn parse(s: &str) -> Option<SpecialUse> {
        Some(match s.to_ascii_lowercase().as_str() {
            "\\all" => SpecialUse::All,
            "\\archive" => SpecialUse::Archive,
            "\\drafts" => SpecialUse::Drafts,
            "\\flagged" => SpecialUse::Flagged,
            "\\junk" => SpecialUse::Junk,
            "\\sent" => SpecialUse::Sent,
            "\\trash" => SpecialUse::Trash,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            SpecialUse::All => "\\All",
            SpecialUse::Archive => "\\Archive",
            SpecialUse::Drafts => "\\Drafts",
            SpecialUse::Flagged => "\\Flagged",
            SpecialUse::Junk => "\\Junk",
            SpecialUse::Sent => "\\Sent",
            SpecialUse::Trash => "\\Trash",
        }
    }
}

/// Whether a configured mailbox is created for every user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoCreate {
    No,
    Create,
    Subscribe,
}

/// A mailbox named in the config (Dovecot's `namespace inbox { mailbox X }`).
#[derive(Debug, Clone)]
pub struct MailboxSetting {
    pub name: String,
    pub special_use: Option<SpecialUse>,
    pub auto: AutoCreate,
}

/// Everything the store needs from the config.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// `mail_location` (Dovecot syntax).
    pub mail_location: String,
    pub mailboxes: Vec<MailboxSetting>,
    pub core: CoreOptions,
    /// Largest message APPEND/LMTP may store, bytes (0 = no limit).
    pub max_message_size: u64,
    /// Open mailboxes kept in memory per process.
    pub cache_mailboxes: usize,
    pub lock: LockOptions,
}

impl StoreSettings {
    /// From the `store` config section; `data_dir` is `general.data_dir`.
    pub fn from_config(c: &yarilo_config::StoreConfig, data_dir: &str) -> StoreSettings {
        let mail_location = if c.mail_location.is_empty() {
            format!("maildir:{data_dir}/mail/%Ld/%Ln")
        } else {
            c.mail_location.clone()
        };
        let mailboxes = c
            .mailboxes
            .iter()
            .map(|m| MailboxSetting {
                name: m.name.clone(),
                special_use: m.special_use.as_deref().and_then(SpecialUse::parse),
                auto: match m.auto.as_str() {
                    "create" => AutoCreate::Create,
                    "subscribe" => AutoCreate::Subscribe,
                    _ => AutoCreate::No,
                },
            })
            .collect();
        StoreSettings {
            mail_location,
            mailboxes,
            core: CoreOptions {
                very_dirty_syncs: c.maildir_very_dirty_syncs,
                log_compact_bytes: c.index_log_compact_bytes,
                dotlock_wait: std::time::Duration::from_secs(c.lock_timeout_seconds),
                hostname: crate::dotlock::hostname(),
            },
            max_message_size: c.max_message_size,
            cache_mailboxes: c.cache_mailboxes,
            lock: LockOptions {
                ttl: std::time::Duration::from_secs(c.lock_timeout_seconds.max(10)),
                wait: std::time::Duration::from_secs(c.lock_timeout_seconds),
                ..LockOptions::default()
            },
        }
    }

    /// Defaults for `mail_location` (tests, tools).
    pub fn new(mail_location: &str) -> StoreSettings {
        let mut s = StoreSettings::from_config(&yarilo_config::StoreConfig::default(), ".");
        s.mail_location = mail_location.to_string();
        s
    }
}

#[derive(Default)]
struct Metrics {
    appends: Counter,
    expunges: Counter,
    flag_updates: Counter,
    full_syncs: Counter,
}

/// One per deployment (process): config, lock service, event bus, and the
/// mailboxes this process has open.
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    location: MailLocation,
    settings: StoreSettings,
    locker: Arc<dyn Locker>,
    events: Arc<dyn EventBus>,
    open: Mutex<HashMap<(String, String), Arc<Shared>>>,
    metrics: Metrics,
}

/// Disk usage of one user (quota accounting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuotaUsage {
    pub bytes: u64,
    pub messages: u64,
}

/// One line of a mailbox listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxEntry {
    pub name: String,
    pub special_use: Option<SpecialUse>,
    pub subscribed: bool,
    pub has_children: bool,
}

/// How to append.
#[derive(Debug, Clone, Default)]
pub struct AppendOptions {
    pub flags: Flags,
    pub keywords: Vec<String>,
    /// INTERNALDATE, unix seconds; default now.
    pub internal_date: Option<i64>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Internal(format!("worker failed: {e}")))?
}

impl Store {
    pub fn new(
        settings: StoreSettings,
        locker: Arc<dyn Locker>,
        events: Arc<dyn EventBus>,
    ) -> Result<Store, StoreError> {
        let location = MailLocation::parse(&settings.mail_location)?;
        Ok(Store {
            inner: Arc::new(StoreInner {
                location,
                settings,
                locker,
                events,
                open: Mutex::new(HashMap::new()),
                metrics: Metrics::default(),
            }),
        })
    }

    /// Registers `yarilo_store_*` metrics.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let m = &self.inner.metrics;
        registry.register(
            "yarilo_store_appends",
            "Messages appended",
            m.appends.clone(),
        );
        registry.register(
            "yarilo_store_expunges",
            "Messages expunged",
            m.expunges.clone(),
        );
        registry.register(
            "yarilo_store_flag_updates",
            "Flag update operations",
            m.flag_updates.clone(),
        );
        registry.register(
            "yarilo_store_full_syncs",
            "Maildir rescans (changes not explained by the index log)",
            m.full_syncs.clone(),
        );
    }

    /// One user's mailboxes. Creates INBOX and the auto-created mailboxes
    /// on first use.
    pub async fn user(&self, user: &UserInfo) -> Result<UserStore, StoreError> {
        let loc = self.inner.location.for_user(user)?;
        let us = UserStore {
            inner: self.inner.clone(),
            user: user.user.clone(),
            loc,
        };
        us.autocreate().await?;
        Ok(us)
    }
}

/// The mailboxes of one user.
#[derive(Clone)]
pub struct UserStore {
    inner: Arc<StoreInner>,
    user: String,
    loc: UserLocation,
}

impl UserStore {
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Change events of the deployment (every mailbox, every user; filter
    /// on `resource`, which starts with `mbox:<user>:` for this user's).
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// Publishes a mailbox-level change (create, delete, rename,
    /// subscribe) on the event bus, for NOTIFY and idling sessions.
    fn announce(&self, name: &str, kind: &str, payload: &str) {
        let name = normalize(name, self.loc.layout).unwrap_or_else(|_| name.to_string());
        let payload = if kind == "rename" {
            normalize(payload, self.loc.layout).unwrap_or_else(|_| payload.to_string())
        } else {
            payload.to_string()
        };
        self.inner.events.publish(Event {
            resource: format!("mbox:{}:{}", self.user, name),
            kind: kind.to_string(),
            payload,
        });
    }

    pub fn location(&self) -> &UserLocation {
        &self.loc
    }

    /// The hierarchy separator of this user's namespace.
    pub fn separator(&self) -> char {
        self.loc.layout.separator()
    }

    fn paths(&self, name: &str) -> MailboxPaths {
        MailboxPaths {
            name: name.to_string(),
            dir: mailbox_dir(&self.loc, name),
            root: self.loc.root.clone(),
            index_dir: index_dir(&self.loc, name),
        }
    }

    async fn idx_lock(&self) -> Result<LockGuard, StoreError> {
        Ok(lock(
            self.inner.locker.clone(),
            &format!("idx:{}", self.user),
            &self.inner.settings.lock,
        )
        .await?)
    }

    async fn autocreate(&self) -> Result<(), StoreError> {
        let mut wanted = vec![(self.paths("INBOX"), true, false)];
        for m in &self.inner.settings.mailboxes {
            if m.auto == AutoCreate::No {
                continue;
            }
            let name = normalize(&m.name, self.loc.layout)?;
            wanted.push((self.paths(&name), false, m.auto == AutoCreate::Subscribe));
        }
        // stat() may block (NFS): off the runtime threads.
        let missing = blocking(move || {
            Ok(wanted
                .into_iter()
                .filter(|(p, is_inbox, _)| {
                    !p.dir.join("cur").is_dir()
                        || (*is_inbox && !p.dir.join("dovecot-uidlist").exists())
                })
                .collect::<Vec<_>>())
        })
        .await?;
        let mut todo: Vec<(MailboxPaths, bool)> = Vec::new();
        let mut subscribe = Vec::new();
        for (p, is_inbox, sub) in missing {
            if sub {
                subscribe.push(p.name.clone());
            }
            todo.push((p, is_inbox));
        }
        if todo.is_empty() {
            return Ok(());
        }
        let _g = self.idx_lock().await?;
        let root = self.loc.root.clone();
        let sep = self.separator();
        blocking(move || {
            create_dir_durable(&root).ctx(|| format!("create {}", root.display()))?;
            for (p, is_inbox) in todo {
                maildir::create_maildir(&p, is_inbox)?;
            }
            if !subscribe.is_empty() {
                let mut subs = read_subscriptions(&root, sep);
                for s in subscribe {
                    if !subs.contains(&s) {
                        subs.push(s);
                    }
                }
                write_subscriptions(&root, sep, &subs)?;
            }
            Ok(())
        })
        .await
    }

    /// Every mailbox with its attributes.
    pub async fn list(&self) -> Result<Vec<MailboxEntry>, StoreError> {
        let loc = self.loc.clone();
        let settings = self.inner.settings.mailboxes.clone();
        let sep = self.separator();
        blocking(move || {
            let (names, leftovers) = names::scan_root(&loc, std::time::SystemTime::now())
                .ctx(|| format!("list {}", loc.root.display()))?;
            if !leftovers.is_empty() {
                leftovers.remove_in_background();
            }
            let subs = read_subscriptions(&loc.root, sep);
            let mut out = Vec::with_capacity(names.len());
            for n in &names {
                let prefix = format!("{n}{sep}");
                out.push(MailboxEntry {
                    name: n.clone(),
                    special_use: settings
                        .iter()
                        .find(|m| m.name == *n)
                        .and_then(|m| m.special_use),
                    subscribed: subs.contains(n),
                    has_children: names.iter().any(|c| c.starts_with(&prefix)),
                });
            }
            Ok(out)
        })
        .await
    }

    /// Publishes a `create` event when done.
    pub async fn create(&self, name: &str) -> Result<(), StoreError> {
        self.create_inner(name).await?;
        self.announce(name, "create", "");
        Ok(())
    }

    async fn create_inner(&self, name: &str) -> Result<(), StoreError> {
        let name = normalize(name, self.loc.layout)?;
        if name == "INBOX" {
            return Err(StoreError::MailboxExists(name));
        }
        let _g = self.idx_lock().await?;
        let p = self.paths(&name);
        blocking(move || {
            if p.dir.join("cur").is_dir() {
                return Err(StoreError::MailboxExists(p.name.clone()));
            }
            maildir::create_maildir(&p, false)
        })
        .await
    }

    /// Deletes a mailbox and its messages (not its children).
    /// Publishes a `delete` event when done.
    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        self.delete_inner(name).await?;
        self.announce(name, "delete", "");
        Ok(())
    }

    async fn delete_inner(&self, name: &str) -> Result<(), StoreError> {
        let name = normalize(name, self.loc.layout)?;
        if name == "INBOX" {
            return Err(StoreError::NotAllowed(name, "INBOX cannot be deleted"));
        }
        let _g = self.idx_lock().await?;
        let _m = self.mbox_lock(&name).await?;
        self.forget(&name);
        let p = self.paths(&name);
        let layout = self.loc.layout;
        blocking(move || {
            if !p.dir.join("cur").is_dir() {
                return Err(StoreError::NoMailbox(p.name.clone()));
            }
            // Rename out of the namespace first, so a crash midway leaves
            // no half-deleted mailbox visible: once the rename is durable
            // the DELETE has happened. What is left is cleanup, which a
            // later LIST finishes if we die (crate::cleanup).
            let parent = p.dir.parent().unwrap_or(&p.root).to_path_buf();
            let trash = parent.join(format!(
                "{}{:08x}",
                crate::cleanup::TRASH_PREFIX,
                rand::random::<u32>()
            ));
            match layout {
                crate::location::Layout::MaildirPlusPlus => {
                    std::fs::rename(&p.dir, &trash)
                        .ctx(|| format!("rename {}", p.dir.display()))?;
                    fsync_dir(&parent).ctx(|| format!("fsync {}", parent.display()))?;
                    if let Err(e) = std::fs::remove_dir_all(&trash) {
                        tracing::warn!(dir = %trash.display(), error = %e, "deleted mailbox not fully removed; a later LIST retries");
                    }
                }
                crate::location::Layout::Fs => {
                    // Children live inside; remove only the mailbox's own files.
                    for sub in ["cur", "new", "tmp"] {
                        let d = p.dir.join(sub);
                        if d.exists() {
                            std::fs::remove_dir_all(&d)
                                .ctx(|| format!("remove {}", d.display()))?;
                        }
                    }
                    for f in ["dovecot-uidlist", "dovecot-keywords", "maildirfolder"] {
                        let _ = std::fs::remove_file(p.dir.join(f));
                    }
                    let _ = std::fs::remove_dir(&p.dir);
                }
            }
            if let Some(idx) = &p.index_dir {
                if idx != &p.dir {
                    let _ = std::fs::remove_dir_all(idx);
                }
            }
            // Its METADATA goes with it (a later mailbox of the same name
            // starts clean).
            let mut entries = crate::metadata::load(&p.root);
            let before = entries.len();
            entries.retain(|(m, _), _| *m != p.name);
            if entries.len() != before {
                crate::metadata::save(&p.root, &entries)?;
            }
            Ok(())
        })
        .await
    }

    /// Renames a mailbox and its children. INBOX cannot be renamed.
    /// Publishes a `rename` event when done.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), StoreError> {
        self.rename_inner(from, to).await?;
        // METADATA entries follow the mailbox and its children.
        let (root, sep) = (self.loc.root.clone(), self.separator());
        let (a, b) = (
            normalize(from, self.loc.layout)?,
            normalize(to, self.loc.layout)?,
        );
        {
            let _g = self.idx_lock().await?;
            blocking(move || {
                let mut entries = crate::metadata::load(&root);
                let moved: crate::metadata::Entries = entries
                    .iter()
                    .filter_map(|((m, e), v)| {
                        let rest = if *m == a {
                            Some(String::new())
                        } else {
                            m.strip_prefix(&format!("{a}{sep}"))
                                .map(|r| format!("{sep}{r}"))
                        }?;
                        Some(((format!("{b}{rest}"), e.clone()), v.clone()))
                    })
                    .collect();
                if moved.is_empty() {
                    return Ok(());
                }
                entries.retain(|(m, _), _| *m != a && !m.starts_with(&format!("{a}{sep}")));
                entries.extend(moved);
                crate::metadata::save(&root, &entries)
            })
            .await?;
        }
        self.announce(from, "rename", to);
        Ok(())
    }

    async fn rename_inner(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let from = normalize(from, self.loc.layout)?;
        let to = normalize(to, self.loc.layout)?;
        if from == "INBOX" || to == "INBOX" {
            return Err(StoreError::NotAllowed(from, "INBOX cannot be renamed"));
        }
        let _g = self.idx_lock().await?;
        let loc = self.loc.clone();
        let sep = self.separator();
        let all = {
            let loc = loc.clone();
            blocking(move || names::list_mailboxes(&loc).ctx(|| "list".to_string())).await?
        };
        if !all.contains(&from) {
            return Err(StoreError::NoMailbox(from));
        }
        if all.contains(&to) {
            return Err(StoreError::MailboxExists(to));
        }
        let prefix = format!("{from}{sep}");
        let mut moves: Vec<(String, String)> = vec![(from.clone(), to.clone())];
        if loc.layout == crate::location::Layout::MaildirPlusPlus {
            for n in &all {
                if let Some(rest) = n.strip_prefix(&prefix) {
                    moves.push((n.clone(), format!("{to}{sep}{rest}")));
                }
            }
        }
        let mut guards = Vec::new();
        for (old, _) in &moves {
            guards.push(self.mbox_lock(old).await?);
            self.forget(old);
        }
        let pairs: Vec<(MailboxPaths, MailboxPaths)> = moves
            .iter()
            .map(|(a, b)| (self.paths(a), self.paths(b)))
            .collect();
        blocking(move || {
            for (a, b) in &pairs {
                if let Some(parent) = b.dir.parent() {
                    create_dir_durable(parent).ctx(|| format!("create {}", parent.display()))?;
                }
                std::fs::rename(&a.dir, &b.dir).ctx(|| format!("rename {}", a.dir.display()))?;
                if let (Some(ia), Some(ib)) = (&a.index_dir, &b.index_dir) {
                    if ia != &a.dir && ia.exists() {
                        if let Some(parent) = ib.parent() {
                            let _ = create_dir_durable(parent);
                        }
                        let _ = std::fs::rename(ia, ib);
                    }
                }
                if let Some(parent) = b.dir.parent() {
                    fsync_dir(parent).ctx(|| format!("fsync {}", parent.display()))?;
                }
            }
            // Subscriptions follow the rename, as in Dovecot.
            let mut subs = read_subscriptions(&loc.root, sep);
            let mut changed = false;
            for s in subs.iter_mut() {
                for (a, b) in &pairs {
                    if *s == a.name {
                        *s = b.name.clone();
                        changed = true;
                    }
                }
            }
            if changed {
                write_subscriptions(&loc.root, sep, &subs)?;
            }
            Ok(())
        })
        .await
    }

    /// METADATA entries of the server (`mailbox` `""`) or a mailbox.
    pub async fn metadata(&self, mailbox: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let root = self.loc.root.clone();
        let mailbox = mailbox.to_string();
        blocking(move || {
            Ok(crate::metadata::load(&root)
                .into_iter()
                .filter(|((m, _), _)| *m == mailbox)
                .map(|((_, e), v)| (e, v))
                .collect())
        })
        .await
    }

    /// SETMETADATA: sets (`Some`) or removes (`None`) entries, all or
    /// nothing, durably. The outer error is the store's, the inner the
    /// client's.
    pub async fn set_metadata(
        &self,
        mailbox: &str,
        changes: Vec<(String, Option<Vec<u8>>)>,
    ) -> Result<Result<(), crate::metadata::MetadataError>, StoreError> {
        let _g = self.idx_lock().await?;
        let root = self.loc.root.clone();
        let name = mailbox.to_string();
        let names: Vec<String> = changes
            .iter()
            .filter_map(|(n, _)| crate::metadata::entry_name(n).ok())
            .collect();
        let r = blocking(move || {
            let mut entries = crate::metadata::load(&root);
            if let Err(e) = crate::metadata::apply(&mut entries, &name, &changes) {
                return Ok(Err(e));
            }
            crate::metadata::save(&root, &entries)?;
            Ok(Ok(()))
        })
        .await?;
        if r.is_ok() {
            // After the durable write: a listener that reads the entry
            // sees the new value.
            self.inner
                .events
                .publish(crate::metadata::event(&self.user, mailbox, &names));
        }
        Ok(r)
    }

    /// The URLAUTH access key of a mailbox; created (32 random bytes) when
    /// `create` and missing.
    pub async fn urlauth_key(
        &self,
        mailbox: &str,
        create: bool,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let root = self.loc.root.clone();
        let mailbox = mailbox.to_string();
        if !create {
            return blocking(move || Ok(crate::urlauth_keys::load(&root)?.get(&mailbox).cloned()))
                .await;
        }
        let _g = self.idx_lock().await?;
        blocking(move || {
            let mut keys = crate::urlauth_keys::load(&root)?;
            if let Some(k) = keys.get(&mailbox) {
                return Ok(Some(k.clone()));
            }
            let key: Vec<u8> = (0..32).map(|_| rand::random::<u8>()).collect();
            keys.insert(mailbox, key.clone());
            crate::urlauth_keys::save(&root, &keys)?;
            Ok(Some(key))
        })
        .await
    }

    /// RESETKEY: forgets the key of `mailbox`, or of every mailbox.
    pub async fn reset_urlauth_keys(&self, mailbox: Option<&str>) -> Result<(), StoreError> {
        let _g = self.idx_lock().await?;
        let root = self.loc.root.clone();
        let mailbox = mailbox.map(str::to_string);
        blocking(move || {
            let keys = match &mailbox {
                Some(m) => {
                    let mut keys = crate::urlauth_keys::load(&root)?;
                    keys.remove(m);
                    keys
                }
                // Every key goes: no need to read (or trust) the old file.
                None => Default::default(),
            };
            crate::urlauth_keys::save(&root, &keys)
        })
        .await
    }

    pub async fn subscriptions(&self) -> Result<Vec<String>, StoreError> {
        let root = self.loc.root.clone();
        let sep = self.separator();
        blocking(move || Ok(read_subscriptions(&root, sep))).await
    }

    /// Subscribes (`true`) or unsubscribes a name (it need not exist).
    /// Publishes a `subscribe` event when done.
    pub async fn subscribe(&self, name: &str, on: bool) -> Result<(), StoreError> {
        self.subscribe_inner(name, on).await?;
        self.announce(name, if on { "subscribe" } else { "unsubscribe" }, "");
        Ok(())
    }

    async fn subscribe_inner(&self, name: &str, on: bool) -> Result<(), StoreError> {
        let name = normalize(name, self.loc.layout)?;
        let _g = self.idx_lock().await?;
        let root = self.loc.root.clone();
        let sep = self.separator();
        blocking(move || {
            let mut subs = read_subscriptions(&root, sep);
            let had = subs.contains(&name);
            if on && !had {
                subs.push(name);
            } else if !on && had {
                subs.retain(|s| *s != name);
            } else {
                return Ok(());
            }
            write_subscriptions(&root, sep, &subs)
        })
        .await
    }

    async fn mbox_lock(&self, name: &str) -> Result<LockGuard, StoreError> {
        Ok(lock(
            self.inner.locker.clone(),
            &format!("mbox:{}:{}", self.user, name),
            &self.inner.settings.lock,
        )
        .await?)
    }

    async fn deliver_lock(&self, name: &str) -> Result<LockGuard, StoreError> {
        Ok(lock(
            self.inner.locker.clone(),
            &format!("deliver:{}:{}", self.user, name),
            &self.inner.settings.lock,
        )
        .await?)
    }

    fn cache(&self) -> MutexGuard<'_, HashMap<(String, String), Arc<Shared>>> {
        self.inner.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn forget(&self, name: &str) {
        self.cache().remove(&(self.user.clone(), name.to_string()));
    }

    /// Opens a mailbox, sharing the in-memory state with every other
    /// handle of this process, and brings it up to date.
    pub async fn open(&self, name: &str) -> Result<Mailbox, StoreError> {
        let name = normalize(name, self.loc.layout)?;
        let key = (self.user.clone(), name.clone());
        let cached = self.cache().get(&key).cloned();
        let shared = match cached {
            Some(s) => s,
            None => {
                let paths = self.paths(&name);
                let opts = self.inner.settings.core.clone();
                let core = blocking(move || Core::open(paths, opts)).await?;
                let view = Arc::new(core.view());
                let shared = Arc::new(Shared {
                    paths: core.paths().clone(),
                    core: Mutex::new(core),
                    view: RwLock::new(view),
                    resource: format!("mbox:{}:{}", self.user, name),
                });
                let mut cache = self.cache();
                let cap = self.inner.settings.cache_mailboxes.max(1);
                if cache.len() >= cap {
                    // Evict something that no session holds.
                    let victim = cache
                        .iter()
                        .find(|(_, v)| Arc::strong_count(v) == 1)
                        .map(|(k, _)| k.clone());
                    if let Some(v) = victim {
                        cache.remove(&v);
                    }
                }
                cache.entry(key).or_insert(shared).clone()
            }
        };
        let mb = Mailbox {
            inner: self.inner.clone(),
            user: self.clone(),
            name,
            shared,
        };
        mb.refresh().await?;
        Ok(mb)
    }

    /// Bytes and messages over all mailboxes.
    pub async fn quota(&self) -> Result<QuotaUsage, StoreError> {
        let mut q = QuotaUsage::default();
        for e in self.list().await? {
            let mb = self.open(&e.name).await?;
            let v = mb.view();
            q.bytes += v.total_bytes();
            q.messages += v.len() as u64;
        }
        Ok(q)
    }
}

fn read_subscriptions(root: &std::path::Path, sep: char) -> Vec<String> {
    std::fs::read_to_string(root.join("subscriptions"))
        .map(|t| subscriptions::parse(&t, sep))
        .unwrap_or_default()
}

fn write_subscriptions(
    root: &std::path::Path,
    sep: char,
    subs: &[String],
) -> Result<(), StoreError> {
    let path = root.join("subscriptions");
    write_atomic(&path, subscriptions::serialize(subs, sep).as_bytes())
        .ctx(|| format!("write {}", path.display()))
}

struct Shared {
    /// Immutable copy, so async code never waits for the core mutex.
    paths: MailboxPaths,
    core: Mutex<Core>,
    view: RwLock<Arc<MailboxView>>,
    resource: String,
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, Core> {
        // Core methods leave it consistent between steps (every step is an
        // atomic file operation); after a panic the next sync repairs it.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn publish_view(&self, core: &Core) -> Arc<MailboxView> {
        let v = Arc::new(core.view());
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = v.clone();
        v
    }
}

/// An open mailbox. Clone freely; all clones share state.
#[derive(Clone)]
pub struct Mailbox {
    inner: Arc<StoreInner>,
    user: UserStore,
    name: String,
    shared: Arc<Shared>,
}

impl Mailbox {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The latest view this process knows, without touching the disk.
    pub fn view(&self) -> Arc<MailboxView> {
        self.shared
            .view
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Change notifications for this mailbox (`append`, `flags`,
    /// `expunge`, `sync`); on any, call [`Mailbox::refresh`]. A lagged
    /// receiver must refresh too.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// The event resource name of this mailbox (`mbox:<user>:<name>`).
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    fn publish(&self, kind: &str, uids: &[u32]) {
        let payload = uids
            .iter()
            .map(|u| u.to_string())
            .collect::<Vec<_>>()
            .join(",");
        self.inner.events.publish(Event {
            resource: self.shared.resource.clone(),
            kind: kind.to_string(),
            payload,
        });
    }

    /// Picks up changes made by other processes (yarilo or Dovecot):
    /// a few `stat`s when nothing changed, the index log tail when another
    /// yarilo wrote, a directory rescan (under the lock) otherwise.
    pub async fn refresh(&self) -> Result<Arc<MailboxView>, StoreError> {
        let shared = self.shared.clone();
        let clean = blocking(move || {
            let mut core = shared.core();
            let clean = core.is_clean()?;
            shared.publish_view(&core);
            Ok(clean)
        })
        .await?;
        if clean {
            return Ok(self.view());
        }
        let _g = self.user.mbox_lock(&self.name).await?;
        let shared = self.shared.clone();
        let changed = blocking(move || {
            let mut core = shared.core();
            let changed = core.sync(false)?;
            shared.publish_view(&core);
            Ok(changed)
        })
        .await?;
        self.inner.metrics.full_syncs.inc();
        if changed {
            self.publish("sync", &[]);
        }
        Ok(self.view())
    }

    /// Which of `boxes` changed on disk in a way only a rescan explains
    /// (another program wrote the Maildir), checked in one trip to the
    /// blocking pool: the cheap half of [`Mailbox::refresh`] for many
    /// mailboxes at once (IDLE polling). Call `refresh` on the dirty ones.
    /// A mailbox whose check fails counts as dirty.
    pub async fn dirty(boxes: &[Mailbox]) -> Vec<bool> {
        let shared: Vec<Arc<Shared>> = boxes.iter().map(|b| b.shared.clone()).collect();
        let n = shared.len();
        tokio::task::spawn_blocking(move || {
            shared
                .iter()
                .map(|s| {
                    let mut core = s.core();
                    let clean = core.is_clean().unwrap_or(false);
                    s.publish_view(&core);
                    !clean
                })
                .collect()
        })
        .await
        .unwrap_or_else(|_| vec![true; n])
    }

    /// Rescans the Maildir unconditionally (repair, tools).
    pub async fn force_resync(&self) -> Result<Arc<MailboxView>, StoreError> {
        let _g = self.user.mbox_lock(&self.name).await?;
        let shared = self.shared.clone();
        blocking(move || {
            let mut core = shared.core();
            core.sync(true)?;
            shared.publish_view(&core);
            Ok(())
        })
        .await?;
        self.inner.metrics.full_syncs.inc();
        Ok(self.view())
    }

    /// Appends one message; returns its UID once it is durable.
    pub async fn append(&self, data: Vec<u8>, opts: AppendOptions) -> Result<u32, StoreError> {
        let uids = self.append_many(vec![(data, opts)]).await?;
        uids.first()
            .copied()
            .ok_or_else(|| StoreError::Internal("append returned no uid".into()))
    }

    /// Appends messages atomically per message, in order, sharing the
    /// fsyncs (MULTIAPPEND, LMTP to one mailbox).
    pub async fn append_many(
        &self,
        msgs: Vec<(Vec<u8>, AppendOptions)>,
    ) -> Result<Vec<u32>, StoreError> {
        self.append_locked(msgs, false).await
    }

    /// A delivery (LMTP): [`Mailbox::append_many`] under the
    /// `deliver:<user>:<folder>` lock as well.
    pub async fn deliver(
        &self,
        msgs: Vec<(Vec<u8>, AppendOptions)>,
    ) -> Result<Vec<u32>, StoreError> {
        self.append_locked(msgs, true).await
    }

    async fn append_locked(
        &self,
        msgs: Vec<(Vec<u8>, AppendOptions)>,
        delivery: bool,
    ) -> Result<Vec<u32>, StoreError> {
        let max = self.inner.settings.max_message_size;
        for (d, _) in &msgs {
            if max > 0 && d.len() as u64 > max {
                return Err(StoreError::TooLarge(d.len() as u64));
            }
        }
        // Write the files before taking any lock.
        let paths = self.shared.paths.clone();
        let host = self.inner.settings.core.hostname.clone();
        let prepared = blocking(move || {
            msgs.into_iter()
                .map(|(d, o)| {
                    maildir::prepare(&paths, &host, &d, o.flags, o.keywords, o.internal_date)
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
        let _g = self.user.mbox_lock(&self.name).await?;
        // A delivery also holds `deliver:`, innermost in the lock order
        // (idx → mbox → deliver), so tools can fence deliveries alone.
        let _d = match delivery {
            true => Some(self.user.deliver_lock(&self.name).await?),
            false => None,
        };
        let shared = self.shared.clone();
        let uids = blocking(move || {
            let mut core = shared.core();
            let r = core.append(prepared);
            shared.publish_view(&core);
            r
        })
        .await?;
        self.inner.metrics.appends.inc_by(uids.len() as u64);
        self.publish("append", &uids);
        Ok(uids)
    }

    /// Adds, removes or replaces flags and keywords (STORE). With
    /// `unchanged_since`, messages changed after that MODSEQ are skipped
    /// and reported in [`FlagResult::modified`].
    pub async fn store_flags(
        &self,
        uids: &[u32],
        op: FlagOp,
        flags: Flags,
        keywords: &[String],
        unchanged_since: Option<u64>,
    ) -> Result<FlagResult, StoreError> {
        let _g = self.user.mbox_lock(&self.name).await?;
        let uids = uids.to_vec();
        let keywords = keywords.to_vec();
        let shared = self.shared.clone();
        let res = blocking(move || {
            let mut core = shared.core();
            let mut r = core.store_flags(&uids, op, flags, &keywords, unchanged_since);
            if matches!(r, Err(StoreError::NoMessage(_))) {
                // The file moved under us; the core rescanned: retry once.
                r = core.store_flags(&uids, op, flags, &keywords, unchanged_since);
            }
            shared.publish_view(&core);
            r
        })
        .await?;
        self.inner.metrics.flag_updates.inc();
        if !res.changed.is_empty() {
            self.publish("flags", &res.changed);
        }
        Ok(res)
    }

    /// Removes messages; returns the UIDs that were removed.
    pub async fn expunge(&self, uids: &[u32]) -> Result<Vec<u32>, StoreError> {
        let _g = self.user.mbox_lock(&self.name).await?;
        let uids = uids.to_vec();
        let shared = self.shared.clone();
        let gone = blocking(move || {
            let mut core = shared.core();
            let r = core.expunge(&uids);
            shared.publish_view(&core);
            r
        })
        .await?;
        self.inner.metrics.expunges.inc_by(gone.len() as u64);
        if !gone.is_empty() {
            self.publish("expunge", &gone);
        }
        Ok(gone)
    }

    /// Copies messages into `dest` (flags and keywords kept). Returns
    /// (source UID, destination UID) pairs (UIDPLUS COPYUID).
    pub async fn copy_to(
        &self,
        uids: &[u32],
        dest: &Mailbox,
    ) -> Result<Vec<(u32, u32)>, StoreError> {
        let view = self.view();
        let mut srcs = Vec::new();
        for &u in uids {
            if let Some(r) = view.by_uid(u) {
                srcs.push((
                    view.path_of(r),
                    r.clone(),
                    view.keywords.names_of(r.keywords),
                ));
            }
        }
        let dpaths = dest.shared.paths.clone();
        let host = self.inner.settings.core.hostname.clone();
        let src_uids: Vec<u32> = srcs.iter().map(|(_, r, _)| r.uid).collect();
        let prepared = blocking(move || {
            srcs.into_iter()
                .map(|(p, r, k)| maildir::prepare_copy(&dpaths, &host, &p, &r, k))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
        let _g = dest.user.mbox_lock(&dest.name).await?;
        let shared = dest.shared.clone();
        let new = blocking(move || {
            let mut core = shared.core();
            let r = core.append(prepared);
            shared.publish_view(&core);
            r
        })
        .await?;
        dest.inner.metrics.appends.inc_by(new.len() as u64);
        dest.publish("append", &new);
        Ok(src_uids.into_iter().zip(new).collect())
    }

    /// COPY then EXPUNGE of the sources (RFC 6851). A crash between the
    /// two leaves the message in both mailboxes, never in neither.
    pub async fn move_to(
        &self,
        uids: &[u32],
        dest: &Mailbox,
    ) -> Result<Vec<(u32, u32)>, StoreError> {
        let pairs = self.copy_to(uids, dest).await?;
        let src: Vec<u32> = pairs.iter().map(|(s, _)| *s).collect();
        self.expunge(&src).await?;
        Ok(pairs)
    }

    /// The whole message.
    pub async fn read_message(&self, uid: u32) -> Result<Vec<u8>, StoreError> {
        self.read_with(uid, |view, rec| std::fs::read(view.path_of(rec)))
            .await
    }

    /// The header section (from the cache when present).
    pub async fn read_header(&self, uid: u32) -> Result<Vec<u8>, StoreError> {
        self.read_with(uid, maildir::read_header).await
    }

    /// Header sections of many messages in one trip to the blocking pool
    /// (SEARCH, FETCH of many messages). `None`: the message is gone.
    pub async fn read_headers(
        &self,
        uids: &[u32],
    ) -> Result<Vec<(u32, Option<Vec<u8>>)>, StoreError> {
        self.read_many(self.view(), uids, maildir::read_header)
            .await
    }

    /// Whole messages, as [`Mailbox::read_headers`].
    pub async fn read_messages(
        &self,
        uids: &[u32],
    ) -> Result<Vec<(u32, Option<Vec<u8>>)>, StoreError> {
        self.read_many(self.view(), uids, read_file).await
    }

    /// [`Mailbox::read_headers`] of the messages as `view` (an earlier
    /// view a session still shows its client) knows them: a message
    /// expunged since is served from the header cache while its entry
    /// there is readable (as Dovecot serves from its index cache), and is
    /// `None` only when nothing of it can be read any more.
    pub async fn read_headers_in(
        &self,
        view: Arc<MailboxView>,
        uids: &[u32],
    ) -> Result<Vec<(u32, Option<Vec<u8>>)>, StoreError> {
        self.read_many(view, uids, maildir::read_header).await
    }

    /// Whole messages as `view` knows them, as [`Mailbox::read_headers_in`]
    /// (a message file that is gone cannot be read, though).
    pub async fn read_messages_in(
        &self,
        view: Arc<MailboxView>,
        uids: &[u32],
    ) -> Result<Vec<(u32, Option<Vec<u8>>)>, StoreError> {
        self.read_many(view, uids, read_file).await
    }

    async fn read_many(
        &self,
        view: Arc<MailboxView>,
        uids: &[u32],
        f: fn(&MailboxView, &crate::records::MessageRecord) -> std::io::Result<Vec<u8>>,
    ) -> Result<Vec<(u32, Option<Vec<u8>>)>, StoreError> {
        let wanted = uids.to_vec();
        // (uid, data); `Err(uid)` marks a file renamed meanwhile.
        let first = tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(wanted.len());
            for uid in wanted {
                let Some(rec) = view.by_uid(uid) else {
                    // Unknown to the caller's view: the current one may
                    // still have it (a newer message).
                    out.push(Err(uid));
                    continue;
                };
                match f(&view, rec) {
                    Ok(d) => out.push(Ok((uid, Some(d)))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => out.push(Err(uid)),
                    Err(e) => return Err(StoreError::io(format!("read uid {uid}"), e)),
                }
            }
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::Internal(e.to_string()))??;
        let mut out = Vec::with_capacity(first.len());
        for r in first {
            match r {
                Ok(x) => out.push(x),
                Err(uid) => match self.read_with(uid, f).await {
                    Ok(d) => out.push((uid, Some(d))),
                    Err(StoreError::NoMessage(_)) => out.push((uid, None)),
                    Err(e) => return Err(e),
                },
            }
        }
        Ok(out)
    }

    async fn read_with<T: Send + 'static>(
        &self,
        uid: u32,
        f: fn(&MailboxView, &crate::records::MessageRecord) -> std::io::Result<T>,
    ) -> Result<T, StoreError> {
        for attempt in 0..2 {
            let view = if attempt == 0 {
                self.view()
            } else {
                self.refresh().await?
            };
            let Some(rec) = view.by_uid(uid).cloned() else {
                return Err(StoreError::NoMessage(uid));
            };
            let v = view.clone();
            let res = tokio::task::spawn_blocking(move || f(&v, &rec))
                .await
                .map_err(|e| StoreError::Internal(e.to_string()))?;
            match res {
                Ok(t) => return Ok(t),
                // Renamed by a flag change elsewhere: refresh and retry.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(StoreError::io(format!("read uid {uid}"), e)),
            }
        }
        Err(StoreError::NoMessage(uid))
    }

    /// The directory of this mailbox's Maildir.
    pub fn dir(&self) -> PathBuf {
        self.view().dir.clone()
    }
}

/// The whole message file of `rec` in `view`.
fn read_file(view: &MailboxView, rec: &crate::records::MessageRecord) -> std::io::Result<Vec<u8>> {
    std::fs::read(view.path_of(rec))
}
