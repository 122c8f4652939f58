//! Commands that change messages: STORE (with UNCHANGEDSINCE), COPY,
//! MOVE, EXPUNGE and UID EXPUNGE.

use yarilo_imap_proto::command::{Store, StoreMode};
use yarilo_imap_proto::response::{Code, Data, FetchItem, Response};
use yarilo_imap_proto::{Mailbox, SequenceSet};
use yarilo_store::{FlagOp, Flags};

use crate::flags::split;
use crate::selected::{flags_of, store_no};
use crate::session::Session;

fn invalid_set(tag: &str) -> Response {
    Response::bad(Some(tag.to_string()), None, "Invalid messageset")
}

impl Session {
    pub(crate) async fn store(&mut self, tag: &str, s: Store) -> Response {
        let Some(sel) = self.selected.as_ref() else {
            return Response::bad(Some(tag.to_string()), None, "No mailbox selected.");
        };
        if sel.read_only {
            return Response::no(tag, Some(Code::ReadOnly), "Mailbox is read-only.");
        }
        let targets = match sel.resolve(&s.set, s.uid) {
            Ok(t) => t,
            Err(_) => return invalid_set(tag),
        };
        let fs = match split(&s.flags) {
            Ok(f) => f,
            Err(e) => return Response::bad(Some(tag.to_string()), None, e),
        };
        if s.unchanged_since.is_some() {
            crate::session::condstore_on(&mut self.enabled, &mut self.conn, Some(sel));
        }
        let op = match s.mode {
            StoreMode::Add => FlagOp::Add,
            StoreMode::Remove => FlagOp::Remove,
            StoreMode::Replace => FlagOp::Replace,
        };
        let uids: Vec<u32> = targets.iter().map(|(_, u)| *u).collect();
        let mailbox = sel.mailbox.clone();
        let res = match mailbox
            .store_flags(&uids, op, fs.system, &fs.keywords, s.unchanged_since)
            .await
        {
            Ok(r) => r,
            Err(e) => return store_no(tag, &e),
        };
        // Report the new state of the messages (RFC 9051 §6.4.6), then
        // let the general sync report what others changed meanwhile.
        let view = mailbox.view();
        let condstore = self.enabled.condstore;
        let with_uid = s.uid || self.enabled.qresync;
        let mut changed = res.changed.clone();
        changed.sort_unstable();
        let mut modified = res.modified.clone();
        modified.sort_unstable();
        if let Some(sel) = self.selected.as_mut() {
            // New keywords must be announced before FETCH uses them.
            let kw = view.keyword_names();
            if kw != sel.keywords {
                sel.keywords = kw;
                self.conn
                    .send(&Response::Data(Data::Flags(sel.flag_list())));
                let mut perm = sel.flag_list();
                perm.push(yarilo_imap_proto::Flag::Wildcard);
                self.conn.send(&Response::Status {
                    tag: None,
                    kind: yarilo_imap_proto::response::StatusKind::Ok,
                    code: Some(Code::PermanentFlags(perm)),
                    text: "Flags permitted.".into(),
                });
            }
        }
        let Some(sel) = self.selected.as_ref() else {
            return Response::ok(tag, None, "Store completed.");
        };
        for &(msn, uid) in &targets {
            if modified.binary_search(&uid).is_ok() {
                continue;
            }
            let Some(rec) = view.by_uid(uid) else {
                continue;
            };
            let was_changed = changed.binary_search(&uid).is_ok();
            let mut items = Vec::new();
            if with_uid {
                items.push(FetchItem::Uid(uid));
            }
            if s.silent {
                // RFC 7162 §3.2: with CONDSTORE the new MODSEQ is still
                // reported for changed messages.
                if !(condstore && was_changed) {
                    continue;
                }
            } else {
                if s.unchanged_since.is_some() && !was_changed {
                    continue;
                }
                items.push(FetchItem::Flags(flags_of(&view, uid, sel.is_recent(uid))));
            }
            if condstore {
                items.push(FetchItem::ModSeq(rec.modseq));
            }
            self.conn
                .send(&Response::Data(Data::Fetch { seq: msn, items }));
        }
        // Our own changes are reported; the sync must not repeat them.
        self.apply_view(view, false, &changed);
        if !modified.is_empty() {
            let Some(sel) = self.selected.as_ref() else {
                return Response::ok(tag, None, "Store completed.");
            };
            let set = if s.uid {
                SequenceSet::from_numbers(modified)
            } else {
                SequenceSet::from_numbers(modified.iter().filter_map(|&u| sel.msn_of(u)))
            };
            return Response::ok(tag, Some(Code::Modified(set)), "Conditional STORE failed.");
        }
        Response::ok(tag, None, "Store completed.")
    }

    pub(crate) async fn copy(
        &mut self,
        tag: &str,
        uid: bool,
        set: SequenceSet,
        dest: Mailbox,
        is_move: bool,
    ) -> Response {
        let Some(sel) = self.selected.as_ref() else {
            return Response::bad(Some(tag.to_string()), None, "No mailbox selected.");
        };
        if is_move && sel.read_only {
            return Response::no(tag, Some(Code::ReadOnly), "Mailbox is read-only.");
        }
        let targets = match sel.resolve(&set, uid) {
            Ok(t) => t,
            Err(_) => return invalid_set(tag),
        };
        let source = sel.mailbox.clone();
        let name = match self.store_name(tag, &dest) {
            Ok(n) => n,
            Err(r) => return r,
        };
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let dest_box = match store.open(&name).await {
            Ok(m) => m,
            Err(yarilo_store::StoreError::NoMailbox(_)) => {
                return Response::no(tag, Some(Code::TryCreate), "Mailbox doesn't exist.")
            }
            Err(e) => return store_no(tag, &e),
        };
        let uids: Vec<u32> = targets.iter().map(|(_, u)| *u).collect();
        if uids.is_empty() {
            return Response::ok(
                tag,
                None,
                if is_move {
                    "No messages moved."
                } else {
                    "No messages copied."
                },
            );
        }
        let view = source.view();
        if uids.iter().any(|&u| view.by_uid(u).is_none()) && !uid {
            return Response::no(
                tag,
                Some(Code::ExpungeIssued),
                "Some of the requested messages no longer exist.",
            );
        }
        if !is_move {
            let bytes: u64 = uids
                .iter()
                .filter_map(|&u| view.by_uid(u))
                .map(|r| r.size)
                .sum();
            if let Err(r) = self.quota_allows(tag, bytes, uids.len() as u64).await {
                return r;
            }
        }
        let pairs = if is_move {
            source.move_to(&uids, &dest_box).await
        } else {
            source.copy_to(&uids, &dest_box).await
        };
        let pairs = match pairs {
            Ok(p) => p,
            Err(e) => return store_no(tag, &e),
        };
        if pairs.is_empty() {
            return Response::ok(tag, None, "No messages found.");
        }
        let added: Vec<u32> = pairs.iter().map(|p| p.1).collect();
        self.note_arrived(&dest_box, &added);
        let uidvalidity = dest_box.view().uidvalidity();
        let code = Code::CopyUid {
            uidvalidity,
            from: SequenceSet::from_numbers(pairs.iter().map(|p| p.0)),
            to: SequenceSet::from_numbers(pairs.iter().map(|p| p.1)),
        };
        if is_move {
            // RFC 6851 §4.3: COPYUID goes in an untagged OK before the
            // EXPUNGEs, which the sync after this command sends.
            self.conn.send(&Response::Status {
                tag: None,
                kind: yarilo_imap_proto::response::StatusKind::Ok,
                code: Some(code),
                text: "Moved UIDs.".into(),
            });
            Response::ok(tag, None, "Move completed.")
        } else {
            Response::ok(tag, Some(code), "Copy completed.")
        }
    }

    pub(crate) async fn expunge(&mut self, tag: &str, set: Option<SequenceSet>) -> Response {
        let Some(sel) = self.selected.as_ref() else {
            return Response::bad(Some(tag.to_string()), None, "No mailbox selected.");
        };
        if sel.read_only {
            return Response::no(tag, Some(Code::ReadOnly), "Mailbox is read-only.");
        }
        let view = sel.mailbox.view();
        let allowed: Option<Vec<u32>> = match &set {
            None => None,
            Some(s) => match sel.resolve(s, true) {
                Ok(t) => Some(t.into_iter().map(|(_, u)| u).collect()),
                Err(_) => return invalid_set(tag),
            },
        };
        let deleted: Vec<u32> = view
            .records()
            .filter(|r| r.flags.contains(Flags::DELETED))
            .filter(|r| {
                allowed
                    .as_ref()
                    .is_none_or(|a| a.binary_search(&r.uid).is_ok())
            })
            .map(|r| r.uid)
            .collect();
        if deleted.is_empty() {
            return Response::ok(tag, None, "Expunge completed.");
        }
        let mailbox = sel.mailbox.clone();
        match mailbox.expunge(&deleted).await {
            Ok(_) => Response::ok(tag, None, "Expunge completed."),
            Err(e) => store_no(tag, &e),
        }
    }
}
