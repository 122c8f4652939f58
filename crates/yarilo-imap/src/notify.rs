//! NOTIFY (RFC 5465): after `NOTIFY SET`, changes to mailboxes other than
//! the selected one are reported as `* STATUS` responses, at command
//! boundaries and while idling. The changes come from the store's event
//! bus, so deliveries and changes made by other processes of the
//! deployment (through the locks EVENT channel) are seen as well.
//!
//! Supported events: MessageNew, MessageExpunge, FlagChange (as STATUS),
//! MailboxName and SubscriptionChange (as LIST), MailboxMetadataChange
//! and ServerMetadataChange (RFC 5465 §5.8-5.9, as the unsolicited
//! `METADATA mailbox entry...` of RFC 5464 §4.4.2, entry names only).
//! AnnotationChange is answered `NO [BADEVENT]` with this list.

use std::collections::BTreeSet;

use tokio::sync::broadcast;
use yarilo_imap_proto::command::{NotifyEvent, NotifyFilter, NotifySet, StatusItem};
use yarilo_imap_proto::response::{Code, Data, ListExtended, ListItem, MetadataEntries, Response};
use yarilo_imap_proto::Mailbox;
use yarilo_locks::Event;

use crate::session::Session;

const SUPPORTED: [&str; 7] = [
    "MessageNew",
    "MessageExpunge",
    "FlagChange",
    "MailboxName",
    "SubscriptionChange",
    "MailboxMetadataChange",
    "ServerMetadataChange",
];

/// What the client asked to hear about, per filter.
#[derive(Clone, Copy, Default)]
struct Wants {
    new: bool,
    expunge: bool,
    flags: bool,
    names: bool,
    subscriptions: bool,
    mailbox_metadata: bool,
    server_metadata: bool,
}

pub(crate) struct NotifyState {
    groups: Vec<(NotifyFilter, Wants)>,
    /// Store names subscribed at SET time (for the SUBSCRIBED filter).
    subscribed: Vec<String>,
    rx: broadcast::Receiver<Event>,
    /// `mbox:<user>:` — this user's events.
    prefix: String,
    /// Store names with something to report, and whether flags changed.
    pending: BTreeSet<(String, bool)>,
    /// Events were lost: report every watched mailbox once.
    lagged: bool,
    /// Mailbox-level changes in arrival order: (kind, store name, payload).
    lists: Vec<(String, String, String)>,
    /// Metadata changes in arrival order: (store name or "" for the
    /// server, entry names).
    metadata: Vec<(String, Vec<String>)>,
    /// This user's name, to recognise its metadata events.
    user: String,
}

/// Bounds the metadata changes queued between two command boundaries;
/// beyond it the oldest are dropped (the client can re-read with
/// GETMETADATA, as after any lost event).
const MAX_QUEUED_METADATA: usize = 1000;

impl NotifyState {
    /// The first group whose filter takes `name` (client spelling) decides.
    fn wants(&self, imap_name: &str, store_name: &str, sep: char) -> Option<Wants> {
        self.groups
            .iter()
            .find_map(|(f, w)| self.wants_one(f, imap_name, store_name, sep).then_some(*w))
    }

    /// Takes what arrived on the bus into `pending`.
    pub fn collect(&mut self, selected: Option<&str>) {
        loop {
            match self.rx.try_recv() {
                Ok(e) => {
                    self.note(&e, selected);
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.lagged = true,
                Err(_) => break,
            }
        }
    }

    /// The first group whose filter takes `store_name` for a metadata
    /// event; unlike message events, SELECTED matches the selected
    /// mailbox (its metadata changes have no other way to be reported).
    fn wants_metadata(
        &self,
        imap_name: &str,
        store_name: &str,
        sep: char,
        selected: Option<&str>,
    ) -> Option<Wants> {
        self.groups.iter().find_map(|(f, w)| {
            let hit = match f {
                NotifyFilter::Selected | NotifyFilter::SelectedDelayed => {
                    selected == Some(store_name)
                }
                _ => return self.wants_one(f, imap_name, store_name, sep).then_some(*w),
            };
            hit.then_some(*w)
        })
    }

    fn wants_one(&self, f: &NotifyFilter, imap_name: &str, store_name: &str, sep: char) -> bool {
        match f {
            NotifyFilter::Selected | NotifyFilter::SelectedDelayed => false,
            NotifyFilter::Inboxes => store_name == "INBOX",
            NotifyFilter::Personal => true,
            NotifyFilter::Subscribed => self.subscribed.iter().any(|s| s == store_name),
            NotifyFilter::Subtree(list) => list.iter().any(|m| {
                let root = m.as_str();
                imap_name == root
                    || imap_name
                        .strip_prefix(root)
                        .is_some_and(|r| r.starts_with(sep))
            }),
            NotifyFilter::Mailboxes(list) => list.iter().any(|m| m.as_str() == imap_name),
        }
    }

    /// Whether `e` is news for this session.
    pub fn note(&mut self, e: &Event, selected: Option<&str>) -> bool {
        if let Some((mailbox, names)) = yarilo_store::metadata::parse_event(e, &self.user) {
            if self.metadata.len() >= MAX_QUEUED_METADATA {
                self.metadata.remove(0);
            }
            self.metadata.push((mailbox.to_string(), names));
            return true;
        }
        let Some(name) = e.resource.strip_prefix(&self.prefix) else {
            return false;
        };
        if matches!(
            e.kind.as_str(),
            "create" | "delete" | "rename" | "subscribe" | "unsubscribe"
        ) {
            if e.kind == "subscribe" {
                self.subscribed.push(name.to_string());
            } else if e.kind == "unsubscribe" {
                self.subscribed.retain(|s| s != name);
            }
            self.lists
                .push((e.kind.clone(), name.to_string(), e.payload.clone()));
            return true;
        }
        if Some(e.resource.as_str()) == selected {
            return false;
        }
        let flags = e.kind == "flags";
        self.pending.insert((name.to_string(), flags));
        true
    }

    pub fn receiver(&mut self) -> &mut broadcast::Receiver<Event> {
        &mut self.rx
    }
}

fn wants_of(events: &[NotifyEvent]) -> Result<Wants, Vec<String>> {
    let mut w = Wants::default();
    let mut bad = Vec::new();
    for e in events {
        match e {
            NotifyEvent::MessageNew(_) => w.new = true,
            NotifyEvent::MessageExpunge => w.expunge = true,
            NotifyEvent::FlagChange => w.flags = true,
            NotifyEvent::MailboxName => w.names = true,
            NotifyEvent::SubscriptionChange => w.subscriptions = true,
            NotifyEvent::MailboxMetadataChange => w.mailbox_metadata = true,
            NotifyEvent::ServerMetadataChange => w.server_metadata = true,
            _ => bad.push(()),
        }
    }
    if bad.is_empty() {
        Ok(w)
    } else {
        Err(SUPPORTED.iter().map(|s| s.to_string()).collect())
    }
}

impl Session {
    pub(crate) async fn notify(&mut self, tag: &str, set: Option<NotifySet>) -> Response {
        let Some(set) = set else {
            self.notify = None;
            return Response::ok(tag, None, "NOTIFY completed.");
        };
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let mut groups = Vec::new();
        for g in &set.groups {
            let w = match wants_of(&g.events) {
                Ok(w) => w,
                Err(list) => {
                    return Response::no(tag, Some(Code::BadEvent(list)), "Unsupported event.")
                }
            };
            // RFC 5465 §5: for the selected mailbox MessageNew and
            // MessageExpunge go together, and FlagChange needs both (the
            // client's message numbers depend on it). Other mailboxes are
            // reported by STATUS, where each event alone makes sense.
            let selected = matches!(
                g.filter,
                NotifyFilter::Selected | NotifyFilter::SelectedDelayed
            );
            if selected && ((w.new != w.expunge) || (w.flags && !w.new)) {
                return Response::bad(
                    Some(tag.to_string()),
                    None,
                    "MessageNew and MessageExpunge must be given together (and with FlagChange).",
                );
            }
            groups.push((g.filter.clone(), w));
        }
        let subscribed = store.subscriptions().await.unwrap_or_default();
        let user = self
            .user
            .as_ref()
            .map(|u| u.name.clone())
            .unwrap_or_default();
        let mut state = NotifyState {
            groups,
            subscribed,
            rx: store.events(),
            prefix: format!("mbox:{user}:"),
            pending: BTreeSet::new(),
            lagged: false,
            lists: Vec::new(),
            metadata: Vec::new(),
            user,
        };
        if set.status {
            // STATUS for every watched mailbox now (RFC 5465 §3.1).
            state.lagged = true;
        }
        self.notify = Some(state);
        if set.status {
            self.deliver_notifications().await;
        }
        Response::ok(tag, None, "NOTIFY completed.")
    }

    /// Sends the unsolicited `* METADATA mailbox entry...` (RFC 5464
    /// §4.4.2) for the metadata changes queued since last time.
    fn deliver_metadata(&mut self, selected_resource: Option<&str>, sep: char) {
        let Some(state) = self.notify.as_mut() else {
            return;
        };
        let changes = std::mem::take(&mut state.metadata);
        let selected = selected_resource.and_then(|r| r.strip_prefix(state.prefix.as_str()));
        for (store_name, names) in changes {
            if names.is_empty() {
                continue;
            }
            let Some(state) = self.notify.as_ref() else {
                return;
            };
            let mailbox = if store_name.is_empty() {
                // RFC 5465 §5.9: server entries are not tied to a
                // mailbox, so any group asking for them will do.
                if !state.groups.iter().any(|(_, w)| w.server_metadata) {
                    continue;
                }
                None
            } else {
                let imap_name = self.names.to_imap(&store_name);
                let wanted = state
                    .wants_metadata(&imap_name, &store_name, sep, selected)
                    .is_some_and(|w| w.mailbox_metadata);
                if !wanted {
                    continue;
                }
                Some(Mailbox::new(imap_name))
            };
            self.conn.send(&Response::Data(Data::Metadata {
                mailbox,
                entries: MetadataEntries::Names(names),
            }));
        }
    }

    /// Sends `* STATUS` for the mailboxes that changed since last time.
    pub(crate) async fn deliver_notifications(&mut self) {
        let selected = self
            .selected
            .as_ref()
            .map(|s| s.mailbox.resource().to_string());
        let sep = self.names.imap;
        let Some(state) = self.notify.as_mut() else {
            return;
        };
        state.collect(selected.as_deref());
        let lists = std::mem::take(&mut state.lists);
        for (kind, store_name, payload) in lists {
            let imap_name = self.names.to_imap(&store_name);
            let Some(w) = self
                .notify
                .as_ref()
                .and_then(|s| s.wants(&imap_name, &store_name, sep))
            else {
                continue;
            };
            let (attrs, name, extended) = match kind.as_str() {
                "create" if w.names => (Vec::new(), imap_name, Vec::new()),
                "delete" if w.names => (vec!["\\NonExistent".to_string()], imap_name, Vec::new()),
                "rename" if w.names => (
                    Vec::new(),
                    self.names.to_imap(&payload),
                    vec![ListExtended::OldName(Mailbox::new(imap_name))],
                ),
                "subscribe" if w.subscriptions => {
                    (vec!["\\Subscribed".to_string()], imap_name, Vec::new())
                }
                "unsubscribe" if w.subscriptions => (Vec::new(), imap_name, Vec::new()),
                _ => continue,
            };
            self.conn.send(&Response::Data(Data::List(ListItem {
                attributes: attrs,
                delimiter: Some(sep),
                mailbox: Mailbox::new(name),
                extended,
            })));
        }
        self.deliver_metadata(selected.as_deref(), sep);
        let Some(state) = self.notify.as_mut() else {
            return;
        };
        let mut todo: Vec<(String, bool)> =
            std::mem::take(&mut state.pending).into_iter().collect();
        if std::mem::take(&mut state.lagged) {
            if let Some(store) = self.user_store() {
                if let Ok(list) = store.list().await {
                    todo.extend(list.into_iter().map(|e| (e.name, true)));
                }
            }
        }
        // One report per mailbox; flags changed if any event said so.
        todo.sort();
        let mut merged: Vec<(String, bool)> = Vec::new();
        for (name, flags) in todo {
            match merged.last_mut() {
                Some(last) if last.0 == name => last.1 |= flags,
                _ => merged.push((name, flags)),
            }
        }
        let todo = merged;
        for (store_name, _flags) in todo {
            if selected
                .as_deref()
                .is_some_and(|r| r.ends_with(&format!(":{store_name}")))
            {
                continue;
            }
            let imap_name = self.names.to_imap(&store_name);
            let Some(w) = self
                .notify
                .as_ref()
                .and_then(|s| s.wants(&imap_name, &store_name, sep))
            else {
                continue;
            };
            // What each event implies (RFC 5465 §5.2-5.4, as Dovecot):
            // MessageExpunge → MESSAGES; MessageNew → MESSAGES UIDNEXT
            // UIDVALIDITY; FlagChange → UIDVALIDITY HIGHESTMODSEQ.
            let mut items = Vec::new();
            if w.new || w.expunge {
                items.push(StatusItem::Messages);
            }
            if w.new {
                items.push(StatusItem::UidNext);
            }
            if w.new || w.flags {
                items.push(StatusItem::UidValidity);
            }
            if w.flags || self.enabled.condstore {
                items.push(StatusItem::HighestModSeq);
            }
            if items.is_empty() {
                continue;
            }
            // A mailbox that vanished meanwhile is simply not reported.
            let _ = self.status_data(&Mailbox::new(imap_name), &items).await;
        }
    }
}
