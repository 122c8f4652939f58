//! Mailbox commands: SELECT/EXAMINE (with CONDSTORE/QRESYNC), CLOSE,
//! UNSELECT, CREATE, DELETE, RENAME, SUBSCRIBE, LIST (LIST-EXTENDED,
//! LIST-STATUS, SPECIAL-USE) and LSUB.

use std::collections::{BTreeMap, HashSet};

use yarilo_imap_proto::command::{ListCommand, ListReturn, ListSelect, Select};
use yarilo_imap_proto::response::{
    Code, Data, FetchItem, ListExtended, ListItem, Response, StatusKind,
};
use yarilo_imap_proto::{Flag, Mailbox, SequenceSet};
use yarilo_store::Flags;

use crate::names::{matches, parents};
use crate::selected::{flags_of, store_no, Selected};
use crate::session::Session;

/// What LIST knows about one name.
#[derive(Default, Clone)]
struct Node {
    exists: bool,
    subscribed: bool,
    has_children: bool,
    special: Option<&'static str>,
    /// A subscribed descendant exists (RECURSIVEMATCH).
    subscribed_child: bool,
}

fn untagged_ok(code: Code, text: &str) -> Response {
    Response::Status {
        tag: None,
        kind: StatusKind::Ok,
        code: Some(code),
        text: text.into(),
    }
}

impl Session {
    /// Client name → store name, or the NO to send.
    pub(crate) fn store_name(&self, tag: &str, m: &Mailbox) -> Result<String, Response> {
        if m.is_undecodable() {
            // A name that is not valid mUTF-7 / UTF-8 is still a valid
            // astring; no mailbox can have it (as Dovecot answers).
            return Err(Response::no(
                tag,
                Some(Code::NonExistent),
                "Mailbox doesn't exist.",
            ));
        }
        let mut name = m.as_str();
        if self.server.settings.tb_extra_mailbox_sep {
            // Some Thunderbird versions append the separator to names.
            name = name.strip_suffix(self.names.imap).unwrap_or(name);
        }
        self.names
            .to_store(name)
            .map_err(|e| Response::no(tag, Some(Code::Cannot), e.0))
    }

    fn deselect(&mut self) -> bool {
        self.selected.take().is_some()
    }

    pub(crate) async fn select(&mut self, tag: &str, s: Select, read_only: bool) -> Response {
        let had = self.deselect();
        if had {
            self.conn
                .send(&untagged_ok(Code::Closed, "Previous mailbox closed."));
        }
        if s.qresync.is_some() && !self.enabled.qresync {
            return Response::bad(
                Some(tag.to_string()),
                None,
                "QRESYNC parameter requires ENABLE QRESYNC first.",
            );
        }
        if s.condstore {
            self.enabled.condstore = true;
        }
        let name = match self.store_name(tag, &s.mailbox) {
            Ok(n) => n,
            Err(r) => return r,
        };
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let mailbox = match store.open(&name).await {
            Ok(m) => m,
            Err(e) => return open_no(tag, &e),
        };
        let view = match mailbox.refresh().await {
            Ok(v) => v,
            Err(e) => return store_no(tag, &e),
        };
        let user = self
            .user
            .as_ref()
            .map(|u| u.name.clone())
            .unwrap_or_default();
        let mut sel = Selected::new(mailbox, read_only);
        sel.view = view.clone();
        sel.uids = view.uids();
        sel.keywords = view.keyword_names();
        let floor = recent_floor(&view);
        let recent = &self.server.recent;
        let first = if read_only {
            recent.peek(&user, &name, sel.highest_uid(), floor)
        } else {
            recent.claim(&user, &name, sel.highest_uid(), floor)
        };
        if let Some(first) = first {
            sel.recent = sel.uids.iter().copied().filter(|&u| u >= first).collect();
        }
        self.conn
            .send(&Response::Data(Data::Flags(sel.flag_list())));
        let mut perm = sel.flag_list();
        perm.push(Flag::Wildcard);
        self.conn.send(&untagged_ok(
            Code::PermanentFlags(if read_only { Vec::new() } else { perm }),
            if read_only {
                "Read-only mailbox."
            } else {
                "Flags permitted."
            },
        ));
        self.conn.send(&Response::Data(Data::Exists(sel.exists())));
        if !self.enabled.rev2 {
            self.conn
                .send(&Response::Data(Data::Recent(sel.recent.len() as u32)));
            if let Some(first) = view.records().position(|r| !r.flags.contains(Flags::SEEN)) {
                self.conn.send(&untagged_ok(
                    Code::Unseen(first as u32 + 1),
                    "First unseen.",
                ));
            }
        }
        self.conn.send(&untagged_ok(
            Code::UidValidity(view.uidvalidity()),
            "UIDs valid",
        ));
        self.conn.send(&untagged_ok(
            Code::UidNext(view.uidnext()),
            "Predicted next UID",
        ));
        self.conn.send(&untagged_ok(
            Code::HighestModSeq(view.highest_modseq()),
            "Highest",
        ));
        if self.enabled.rev2 {
            self.conn.send(&Response::Data(Data::List(ListItem {
                attributes: Vec::new(),
                delimiter: Some(self.names.imap),
                mailbox: s.mailbox.clone(),
                extended: Vec::new(),
            })));
        }
        if let Some(q) = &s.qresync {
            if q.uidvalidity == view.uidvalidity() {
                self.qresync_select(&sel, q);
            }
        }
        self.selected = Some(sel);
        let code = if read_only {
            Code::ReadOnly
        } else {
            Code::ReadWrite
        };
        Response::ok(
            tag,
            Some(code),
            if read_only {
                "Examine completed."
            } else {
                "Select completed."
            },
        )
    }

    /// RFC 7162 §3.2.5: VANISHED (EARLIER) and the flag changes since the
    /// client's modseq.
    fn qresync_select(&mut self, sel: &Selected, q: &yarilo_imap_proto::command::QResync) {
        let view = &sel.view;
        // Merged once: a membership test per message must not cost the
        // length of the set's text.
        let known_ranges = match &q.known_uids {
            Some(SequenceSet::Set(items)) => Some(crate::selected::merged_ranges(items, u32::MAX)),
            Some(SequenceSet::Saved) => Some(Vec::new()),
            None => None,
        };
        let known = |uid: u32| match &known_ranges {
            Some(r) => crate::selected::ranges_contain(r, uid),
            None => true,
        };
        let vanished: Vec<u32> = match view.expunged_since(q.modseq) {
            Some(v) => v.into_iter().filter(|&u| known(u)).collect(),
            None => match &q.known_uids {
                // History lost: everything the client knows and we lack.
                Some(SequenceSet::Set(items)) => {
                    // Merged and clamped below UIDNEXT first: repeating
                    // `1:*` must not repeat the scan.
                    let largest = view.uidnext().saturating_sub(1);
                    let mut out = Vec::new();
                    'ranges: for (a, b) in crate::selected::merged_ranges(items, largest) {
                        for u in a..=b {
                            if out.len() >= 1_000_000 {
                                break 'ranges;
                            }
                            if view.by_uid(u).is_none() {
                                out.push(u);
                            }
                        }
                    }
                    out
                }
                _ => Vec::new(),
            },
        };
        if !vanished.is_empty() {
            self.conn.send(&Response::Data(Data::Vanished {
                earlier: true,
                uids: SequenceSet::from_numbers(vanished),
            }));
        }
        for rec in view.changed_since(q.modseq) {
            if !known(rec.uid) {
                continue;
            }
            let Some(msn) = sel.msn_of(rec.uid) else {
                continue;
            };
            self.conn.send(&Response::Data(Data::Fetch {
                seq: msn,
                items: vec![
                    FetchItem::Uid(rec.uid),
                    FetchItem::Flags(flags_of(view, rec.uid, sel.is_recent(rec.uid))),
                    FetchItem::ModSeq(rec.modseq),
                ],
            }));
        }
    }

    pub(crate) async fn close(&mut self, tag: &str, expunge: bool) -> Response {
        let Some(sel) = self.selected.take() else {
            return Response::bad(Some(tag.to_string()), None, "No mailbox selected.");
        };
        if expunge && !sel.read_only {
            let view = sel.mailbox.view();
            let deleted: Vec<u32> = view
                .records()
                .filter(|r| r.flags.contains(Flags::DELETED))
                .map(|r| r.uid)
                .collect();
            if !deleted.is_empty() {
                if let Err(e) = sel.mailbox.expunge(&deleted).await {
                    return store_no(tag, &e);
                }
            }
        }
        Response::ok(
            tag,
            None,
            if expunge {
                "Close completed."
            } else {
                "Unselect completed."
            },
        )
    }

    pub(crate) async fn create(
        &mut self,
        tag: &str,
        mailbox: Mailbox,
        special_use: Vec<String>,
    ) -> Response {
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let mut imap_name = mailbox.as_str().to_string();
        // "CREATE a/" asks for a hierarchy level; Maildir++ has none
        // without a mailbox, so create the mailbox without the separator.
        while imap_name.ends_with(self.names.imap) {
            imap_name.pop();
        }
        if imap_name.is_empty() || mailbox.is_undecodable() {
            return Response::no(tag, Some(Code::Cannot), "Invalid mailbox name.");
        }
        if mailbox.is_inbox() {
            return Response::no(tag, Some(Code::AlreadyExists), "Mailbox already exists.");
        }
        if !special_use.is_empty() {
            return Response::no(
                tag,
                Some(Code::UseAttr),
                "Special-use attributes are assigned in the server configuration (store.mailboxes).",
            );
        }
        let name = match self.store_name(tag, &Mailbox::new(imap_name)) {
            Ok(n) => n,
            Err(r) => return r,
        };
        match store.create(&name).await {
            Ok(()) => Response::ok(tag, None, "Create completed."),
            Err(e) => store_no(tag, &e),
        }
    }

    pub(crate) async fn delete(&mut self, tag: &str, mailbox: Mailbox) -> Response {
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        if mailbox.is_inbox() {
            return Response::no(tag, Some(Code::Cannot), "INBOX can't be deleted.");
        }
        let name = match self.store_name(tag, &mailbox) {
            Ok(n) => n,
            Err(r) => return r,
        };
        if self
            .selected
            .as_ref()
            .is_some_and(|s| s.mailbox.name() == name)
        {
            // Dovecot refuses too: the session would lose its mailbox.
            return Response::no(tag, Some(Code::InUse), "Can't delete the selected mailbox.");
        }
        match store.delete(&name).await {
            Ok(()) => {
                let user = self
                    .user
                    .as_ref()
                    .map(|u| u.name.clone())
                    .unwrap_or_default();
                self.server.recent.forget(&user, &name);
                Response::ok(tag, None, "Delete completed.")
            }
            Err(e) => store_no(tag, &e),
        }
    }

    pub(crate) async fn rename(&mut self, tag: &str, from: Mailbox, to: Mailbox) -> Response {
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        if to.is_undecodable() && !from.is_undecodable() {
            return Response::no(tag, Some(Code::Cannot), "Invalid mailbox name.");
        }
        let (a, b) = match (self.store_name(tag, &from), self.store_name(tag, &to)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(r), _) | (_, Err(r)) => return r,
        };
        if to.is_inbox() {
            return Response::no(tag, Some(Code::AlreadyExists), "Mailbox already exists.");
        }
        match store.rename(&a, &b).await {
            Ok(()) => {
                let user = self
                    .user
                    .as_ref()
                    .map(|u| u.name.clone())
                    .unwrap_or_default();
                self.server.recent.forget(&user, &a);
                Response::ok(tag, None, "Rename completed.")
            }
            Err(e) => store_no(tag, &e),
        }
    }

    pub(crate) async fn subscribe(&mut self, tag: &str, mailbox: Mailbox, on: bool) -> Response {
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let name = match self.store_name(tag, &mailbox) {
            Ok(n) => n,
            Err(r) => return r,
        };
        // Subscribing to a name that does not exist is refused, as Dovecot
        // does (RFC 9051 lets a server check); unsubscribing never is, so a
        // deleted mailbox's subscription can always be dropped.
        if on {
            if let Err(e) = store.open(&name).await {
                return store_no(tag, &e);
            }
        }
        match store.subscribe(&name, on).await {
            Ok(()) => Response::ok(
                tag,
                None,
                if on {
                    "Subscribe completed."
                } else {
                    "Unsubscribe completed."
                },
            ),
            Err(e) => store_no(tag, &e),
        }
    }

    /// Every name LIST can talk about, in client spelling.
    async fn tree(&self) -> Result<BTreeMap<String, Node>, yarilo_store::StoreError> {
        let Some(store) = self.user_store() else {
            return Ok(BTreeMap::new());
        };
        let sep = self.names.imap;
        let mut tree: BTreeMap<String, Node> = BTreeMap::new();
        for e in store.list().await? {
            let name = self.names.to_imap(&e.name);
            let n = tree.entry(name.clone()).or_default();
            n.exists = true;
            n.has_children |= e.has_children;
            n.special = e.special_use.map(|s| s.as_str());
            for p in parents(&name, sep) {
                tree.entry(p.to_string()).or_default().has_children = true;
            }
        }
        for s in store.subscriptions().await? {
            let name = self.names.to_imap(&s);
            tree.entry(name.clone()).or_default().subscribed = true;
            for p in parents(&name, sep) {
                tree.entry(p.to_string()).or_default().subscribed_child = true;
            }
        }
        // Children that exist make has_children true for their parents.
        let names: Vec<String> = tree
            .iter()
            .filter(|(_, n)| n.exists)
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            for p in parents(&name, sep) {
                if let Some(n) = tree.get_mut(p) {
                    n.has_children = true;
                }
            }
        }
        Ok(tree)
    }

    pub(crate) async fn list(&mut self, tag: &str, l: ListCommand) -> Response {
        let sep = self.names.imap;
        if l.patterns.len() == 1 && l.patterns.first().is_some_and(|p| p.is_empty()) {
            // The hierarchy delimiter and root (RFC 9051 §6.3.9).
            self.conn.send(&Response::Data(Data::List(ListItem {
                attributes: vec!["\\Noselect".into()],
                delimiter: Some(sep),
                mailbox: Mailbox::new(""),
                extended: Vec::new(),
            })));
            return Response::ok(tag, None, "List completed.");
        }
        let tree = match self.tree().await {
            Ok(t) => t,
            Err(e) => return store_no(tag, &e),
        };
        let sel_subscribed = l.select.contains(&ListSelect::Subscribed);
        let sel_special = l.select.contains(&ListSelect::SpecialUse);
        let recursive = l.select.contains(&ListSelect::RecursiveMatch);
        let ret_subscribed = sel_subscribed || l.ret.contains(&ListReturn::Subscribed);
        let status_items = l.ret.iter().find_map(|r| match r {
            ListReturn::Status(items) => Some(items.clone()),
            _ => None,
        });
        let rev2_style = l.extended || self.enabled.rev2;
        let patterns: Vec<String> = l
            .patterns
            .iter()
            .map(|p| format!("{}{}", l.reference, p))
            .collect();
        let mut emitted = HashSet::new();
        let mut status_for = Vec::new();
        for (name, node) in &tree {
            if !patterns.iter().any(|p| matches(p, name, sep)) {
                continue;
            }
            let mut childinfo = false;
            if sel_subscribed && !node.subscribed {
                if recursive && node.subscribed_child {
                    childinfo = true;
                } else {
                    continue;
                }
            }
            if !sel_subscribed && !node.exists && !node.has_children {
                continue;
            }
            if sel_special && node.special.is_none() {
                continue;
            }
            let mut attrs: Vec<String> = Vec::new();
            if !node.exists {
                attrs.push(if rev2_style {
                    "\\NonExistent".into()
                } else {
                    "\\Noselect".into()
                });
            }
            if ret_subscribed && node.subscribed {
                attrs.push("\\Subscribed".into());
            }
            if node.exists || !sel_subscribed {
                attrs.push(if node.has_children {
                    "\\HasChildren".into()
                } else {
                    "\\HasNoChildren".into()
                });
            }
            if let Some(s) = node.special {
                attrs.push(s.to_string());
            }
            let mut extended = Vec::new();
            // RFC 5258 §3.5: CHILDINFO tells why a mailbox that does not
            // match the selection itself is listed; one that matches
            // (subscribed) gets none, whatever its children.
            if childinfo {
                extended.push(ListExtended::ChildInfo(vec!["SUBSCRIBED".into()]));
            }
            if !emitted.insert(name.clone()) {
                continue;
            }
            self.conn.send(&Response::Data(Data::List(ListItem {
                attributes: attrs,
                delimiter: Some(sep),
                mailbox: Mailbox::new(name.clone()),
                extended,
            })));
            if node.exists && status_items.is_some() {
                status_for.push(name.clone());
            }
            self.conn.maybe_flush().await.ok();
        }
        if let Some(items) = status_items {
            for name in status_for {
                // LIST-STATUS: errors for one mailbox are skipped (RFC 5819 §3).
                let _ = self.status_data(&Mailbox::new(name), &items).await;
            }
        }
        Response::ok(tag, None, "List completed.")
    }

    pub(crate) async fn lsub(&mut self, tag: &str, reference: &str, pattern: &str) -> Response {
        let sep = self.names.imap;
        if pattern.is_empty() {
            self.conn.send(&Response::Data(Data::Lsub(ListItem {
                attributes: vec!["\\Noselect".into()],
                delimiter: Some(sep),
                mailbox: Mailbox::new(""),
                extended: Vec::new(),
            })));
            return Response::ok(tag, None, "Lsub completed.");
        }
        let tree = match self.tree().await {
            Ok(t) => t,
            Err(e) => return store_no(tag, &e),
        };
        let full = format!("{reference}{pattern}");
        for (name, node) in &tree {
            if !matches(&full, name, sep) {
                continue;
            }
            let attrs = if node.subscribed {
                if !node.exists {
                    vec!["\\Noselect".to_string()]
                } else if self.server.settings.tb_lsub_flags {
                    // Thunderbird reads child flags from LSUB too.
                    vec![if node.has_children {
                        "\\HasChildren".to_string()
                    } else {
                        "\\HasNoChildren".to_string()
                    }]
                } else {
                    Vec::new()
                }
            } else if node.subscribed_child && full.ends_with('%') {
                vec!["\\Noselect".to_string()]
            } else {
                continue;
            };
            self.conn.send(&Response::Data(Data::Lsub(ListItem {
                attributes: attrs,
                delimiter: Some(sep),
                mailbox: Mailbox::new(name.clone()),
                extended: Vec::new(),
            })));
        }
        Response::ok(tag, None, "Lsub completed.")
    }
}

/// The NO for a mailbox that could not be opened. A name the store
/// cannot hold (`~foo`, `a/../b`) names no mailbox: `NONEXISTENT`, as
/// Dovecot answers, rather than a complaint about the name.
pub(crate) fn open_no(tag: &str, e: &yarilo_store::StoreError) -> Response {
    match e {
        yarilo_store::StoreError::Name(_) => {
            Response::no(tag, Some(Code::NonExistent), "Mailbox doesn't exist.")
        }
        _ => store_no(tag, e),
    }
}

/// Where `\Recent` starts in a mailbox no session of this process has
/// claimed yet: the messages still in `new/` (delivered, never seen by a
/// mail client).
pub(crate) fn recent_floor(view: &yarilo_store::MailboxView) -> u32 {
    view.records()
        .find(|r| r.in_new)
        .map(|r| r.uid.saturating_sub(1))
        .unwrap_or(view.uidnext().saturating_sub(1))
}

impl Session {
    /// New messages in `mailbox` (APPEND, COPY, MOVE): `\Recent` for the
    /// next session that selects it.
    pub(crate) fn note_arrived(&self, mailbox: &yarilo_store::Mailbox, uids: &[u32]) {
        let Some(&first) = uids.iter().min() else {
            return;
        };
        let user = self
            .user
            .as_ref()
            .map(|u| u.name.clone())
            .unwrap_or_default();
        let floor = recent_floor(&mailbox.view());
        self.server
            .recent
            .arrived(&user, mailbox.name(), first, floor);
    }
}
