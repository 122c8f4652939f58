//! CONTEXT=SEARCH and CONTEXT=SORT update notifications (RFC 5267 §4.3)
//! and CANCELUPDATE (§4.3.5).
//!
//! A `SEARCH`/`SORT RETURN (UPDATE ...)` leaves an [`UpdateContext`] on
//! the selected mailbox: the search program (message numbers frozen to
//! UIDs, §4.3 last paragraph) and the current result in the requested
//! order. [`crate::selected::Selected::sync`] calls two hooks:
//! [`Contexts::expunging`] right before it reports expunges (so a
//! REMOVEFROM naming sequence numbers precedes the EXPUNGE, §4.3.4), and
//! [`Contexts::touched`] for new messages and flag changes, which
//! [`Session::context_updates`] re-evaluates afterwards (reading headers
//! when the program or sort order needs them) and answers with
//! ADDTO/REMOVEFROM after the EXISTS/FETCH that caused them (§4.3.3).
//!
//! SEARCH contexts use context position 0 and mailbox-ordered sets;
//! SORT contexts carry real positions so the client's list stays in the
//! requested order. Contexts die with the selection.

use yarilo_imap_proto::command::{SearchKey, SortCriterion};
use yarilo_imap_proto::response::{Data, ESearch, ESearchItem, Response};
use yarilo_imap_proto::SequenceSet;
use yarilo_store::MailboxView;

use crate::search::{scan, Hit};
use crate::selected::Selected;
use crate::session::Session;
use crate::sort::{compare, keys_of, needs_header, ordered_set, SortValue};

/// A result entry: sort keys (empty for SEARCH) and UID.
type Entry = (Vec<SortValue>, u32);

/// One live UPDATE context.
pub(crate) struct UpdateContext {
    tag: String,
    uid: bool,
    key: SearchKey,
    sort: Option<Vec<SortCriterion>>,
    /// (sort keys, UID) in the requested order; keys empty for SEARCH
    /// (then ascending UID).
    result: Vec<Entry>,
}

impl UpdateContext {
    pub(crate) fn new(
        tag: String,
        uid: bool,
        key: SearchKey,
        sort: Option<Vec<SortCriterion>>,
        result: Vec<Entry>,
    ) -> UpdateContext {
        UpdateContext {
            tag,
            uid,
            key,
            sort,
            result,
        }
    }

    fn cmp(&self, a: &Entry, b: &Entry) -> std::cmp::Ordering {
        match &self.sort {
            Some(c) => compare(c, &a.0, a.1, &b.0, b.1),
            None => a.1.cmp(&b.1),
        }
    }

    /// Removes `gone` (sorted UIDs) from the result; the REMOVEFROM item.
    fn remove(&mut self, gone: &[u32], num: impl Fn(u32) -> Option<u32>) -> Option<ESearchItem> {
        let positions: Vec<usize> = self
            .result
            .iter()
            .enumerate()
            .filter(|(_, e)| gone.binary_search(&e.1).is_ok())
            .map(|(i, _)| i)
            .collect();
        if positions.is_empty() {
            return None;
        }
        let pairs = if self.sort.is_none() {
            let nums = positions
                .iter()
                .filter_map(|&i| self.result.get(i).and_then(|e| num(e.1)));
            vec![(0, SequenceSet::from_numbers(nums))]
        } else {
            // Runs of adjacent positions, each given where it starts once
            // the earlier runs are gone (§4.3.4).
            let mut pairs = Vec::new();
            let mut removed = 0usize;
            let mut i = 0;
            while let Some(&start) = positions.get(i) {
                let mut j = i + 1;
                while positions.get(j) == Some(&(start + (j - i))) {
                    j += 1;
                }
                let nums: Vec<u32> = positions
                    .get(i..j)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|&p| self.result.get(p).and_then(|e| num(e.1)))
                    .collect();
                pairs.push(((start - removed + 1) as u32, ordered_set(&nums)));
                removed += j - i;
                i = j;
            }
            pairs
        };
        self.result.retain(|e| gone.binary_search(&e.1).is_err());
        Some(ESearchItem::RemoveFrom(pairs))
    }

    /// Inserts `added` in order; the ADDTO item.
    fn insert(
        &mut self,
        mut added: Vec<Entry>,
        num: impl Fn(u32) -> Option<u32>,
    ) -> Option<ESearchItem> {
        if added.is_empty() {
            return None;
        }
        let mut uids: Vec<u32> = added.iter().map(|a| a.1).collect();
        uids.sort_unstable();
        for a in added.drain(..) {
            let at = self
                .result
                .partition_point(|e| self.cmp(e, &a) == std::cmp::Ordering::Less);
            self.result.insert(at, a);
        }
        if self.sort.is_none() {
            let nums = uids.iter().filter_map(|&u| num(u));
            return Some(ESearchItem::AddTo(vec![(
                0,
                SequenceSet::from_numbers(nums),
            )]));
        }
        // Final positions ascending: inserting in this order puts each at
        // its final place (§4.3.3).
        let positions: Vec<usize> = self
            .result
            .iter()
            .enumerate()
            .filter(|(_, e)| uids.binary_search(&e.1).is_ok())
            .map(|(i, _)| i)
            .collect();
        let mut pairs = Vec::new();
        let mut i = 0;
        while let Some(&start) = positions.get(i) {
            let mut j = i + 1;
            while positions.get(j) == Some(&(start + (j - i))) {
                j += 1;
            }
            let nums: Vec<u32> = positions
                .get(i..j)
                .unwrap_or_default()
                .iter()
                .filter_map(|&p| self.result.get(p).and_then(|e| num(e.1)))
                .collect();
            pairs.push(((start + 1) as u32, ordered_set(&nums)));
            i = j;
        }
        Some(ESearchItem::AddTo(pairs))
    }

    fn response(&self, items: Vec<ESearchItem>) -> Response {
        Response::Data(Data::ESearch(ESearch {
            tag: Some(self.tag.clone()),
            uid: self.uid,
            items,
        }))
    }
}

/// The UPDATE contexts of a selected mailbox.
#[derive(Default)]
pub(crate) struct Contexts {
    list: Vec<UpdateContext>,
    /// UIDs to re-evaluate (sorted, unique).
    pending: Vec<u32>,
}

impl Contexts {
    pub(crate) fn has(&self, tag: &str) -> bool {
        self.list.iter().any(|c| c.tag == tag)
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn add(&mut self, c: UpdateContext) {
        self.list.push(c);
    }

    /// Drops the named contexts; false if some tag named none.
    pub(crate) fn cancel(&mut self, tags: &[String]) -> bool {
        let all = tags.iter().all(|t| self.has(t));
        self.list.retain(|c| !tags.contains(&c.tag));
        all
    }

    /// Sync hook, before the EXPUNGE/VANISHED of `gone` (UIDs) go out;
    /// `uids` is the MSN map that still holds them.
    pub(crate) fn expunging(&mut self, gone: &[u32], uids: &[u32], out: &mut Vec<Response>) {
        if self.list.is_empty() {
            return;
        }
        let mut gone = gone.to_vec();
        gone.sort_unstable();
        self.pending.retain(|u| gone.binary_search(u).is_err());
        let msn = |u: u32| uids.binary_search(&u).ok().map(|i| i as u32 + 1);
        for c in &mut self.list {
            let by_uid = c.uid;
            if let Some(item) = c.remove(&gone, |u| if by_uid { Some(u) } else { msn(u) }) {
                out.push(c.response(vec![item]));
            }
        }
    }

    /// Sync hook: messages that changed since `old_modseq` and the newly
    /// announced `added` must be re-evaluated.
    pub(crate) fn touched(&mut self, new: &MailboxView, old_modseq: u64, added: &[u32]) {
        if self.list.is_empty() {
            return;
        }
        self.pending
            .extend(new.changed_since(old_modseq).iter().map(|r| r.uid));
        self.pending.extend_from_slice(added);
        self.pending.sort_unstable();
        self.pending.dedup();
    }
}

/// The search program with message numbers and `$` frozen to UIDs, as
/// they were when the command ran (RFC 5267 §4.3).
pub(crate) fn freeze(key: &SearchKey, sel: &Selected) -> SearchKey {
    let uids = |v: Vec<u32>| {
        if v.is_empty() {
            SearchKey::Not(Box::new(SearchKey::All))
        } else {
            SearchKey::Uid(SequenceSet::from_numbers(v))
        }
    };
    match key {
        SearchKey::SequenceSet(set) => match sel.resolve(set, false) {
            Ok(v) => uids(v.into_iter().map(|(_, u)| u).collect()),
            Err(_) => uids(Vec::new()),
        },
        SearchKey::Uid(SequenceSet::Saved) => uids(sel.saved.clone()),
        SearchKey::Not(k) => SearchKey::Not(Box::new(freeze(k, sel))),
        SearchKey::Or(a, b) => SearchKey::Or(Box::new(freeze(a, sel)), Box::new(freeze(b, sel))),
        SearchKey::And(v) => SearchKey::And(v.iter().map(|k| freeze(k, sel)).collect()),
        other => other.clone(),
    }
}

impl Session {
    /// Re-evaluates what the last syncs marked and sends ADDTO /
    /// REMOVEFROM (after the EXISTS/FETCH already queued).
    pub(crate) async fn context_updates(&mut self) {
        let Some(sel) = self.selected.as_mut() else {
            return;
        };
        let pending = std::mem::take(&mut sel.contexts.pending);
        if pending.is_empty() || sel.contexts.list.is_empty() {
            return;
        }
        let sel: &Selected = sel;
        let cands: Vec<(u32, u32)> = pending
            .iter()
            .filter(|&&u| sel.view.by_uid(u).is_some())
            .filter_map(|&u| sel.msn_of(u).map(|m| (m, u)))
            .collect();
        // Evaluate first (reads), then apply (writes).
        let mut matched: Vec<Option<Vec<Entry>>> = Vec::new();
        for c in &sel.contexts.list {
            let header_too = c.sort.as_deref().is_some_and(needs_header);
            let mut m = Vec::new();
            let r = scan(sel, &c.key, header_too, &cands, |hit: Hit, rec, header| {
                let keys = c
                    .sort
                    .as_deref()
                    .map(|s| keys_of(s, rec, header))
                    .unwrap_or_default();
                m.push((keys, hit.uid));
            })
            .await;
            match r {
                Ok(()) => matched.push(Some(m)),
                Err(e) => {
                    tracing::warn!(error = %e, "CONTEXT update evaluation failed");
                    matched.push(None);
                }
            }
        }
        let Some(sel) = self.selected.as_mut() else {
            return;
        };
        let considered: Vec<u32> = cands.iter().map(|c| c.1).collect();
        let mut out = Vec::new();
        let uids = &sel.uids;
        let msn = |u: u32| uids.binary_search(&u).ok().map(|i| i as u32 + 1);
        for (c, m) in sel.contexts.list.iter_mut().zip(matched) {
            let Some(m) = m else { continue };
            let now: Vec<u32> = {
                let mut v: Vec<u32> = m.iter().map(|e| e.1).collect();
                v.sort_unstable();
                v
            };
            let in_result: std::collections::HashSet<u32> = c.result.iter().map(|e| e.1).collect();
            let present = |u: u32| in_result.contains(&u);
            let removed: Vec<u32> = considered
                .iter()
                .copied()
                .filter(|&u| now.binary_search(&u).is_err() && present(u))
                .collect();
            let added: Vec<Entry> = m.into_iter().filter(|e| !present(e.1)).collect();
            let by_uid = c.uid;
            let num = |u: u32| if by_uid { Some(u) } else { msn(u) };
            let mut items = Vec::new();
            items.extend(c.remove(&removed, num));
            items.extend(c.insert(added, num));
            if !items.is_empty() {
                out.push(c.response(items));
            }
        }
        for r in &out {
            self.conn.send(r);
        }
    }

    /// CANCELUPDATE (RFC 5267 §4.3.5).
    pub(crate) fn cancel_update(&mut self, tag: &str, tags: &[String]) -> Response {
        let known = self
            .selected
            .as_mut()
            .is_some_and(|s| s.contexts.cancel(tags));
        if known {
            Response::ok(tag, None, "No further updates.")
        } else {
            Response::bad(Some(tag.to_string()), None, "Unknown search context tag.")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yarilo_imap_proto::command::SortKey;

    fn ctx(sort: bool, result: &[(i64, u32)]) -> UpdateContext {
        UpdateContext::new(
            "C01".into(),
            true,
            SearchKey::All,
            sort.then(|| {
                vec![SortCriterion {
                    reverse: false,
                    key: SortKey::Size,
                }]
            }),
            result
                .iter()
                .map(|&(k, u)| {
                    (
                        if sort {
                            vec![SortValue::Num(k)]
                        } else {
                            Vec::new()
                        },
                        u,
                    )
                })
                .collect(),
        )
    }

    fn text(item: Option<ESearchItem>) -> String {
        let r = Response::Data(Data::ESearch(ESearch {
            tag: Some("C01".into()),
            uid: true,
            items: item.into_iter().collect(),
        }));
        let buf = r.to_bytes(yarilo_imap_proto::response::EncodeOptions::default());
        String::from_utf8(buf).unwrap_or_default()
    }

    #[test]
    fn rfc_5267_addto_example_prefers_one_range() {
        // Result 2734:2735, then 2731:2733 arrive sorting first.
        let mut c = ctx(true, &[(10, 2734), (11, 2735)]);
        let item = c.insert(
            vec![
                (vec![SortValue::Num(3)], 2733),
                (vec![SortValue::Num(1)], 2731),
                (vec![SortValue::Num(2)], 2732),
            ],
            Some,
        );
        assert_eq!(
            text(item),
            "* ESEARCH (TAG \"C01\") UID ADDTO (1 2731:2733)\r\n"
        );
    }

    #[test]
    fn sorted_removals_give_positions_after_earlier_removals() {
        let mut c = ctx(true, &[(1, 10), (2, 5), (3, 7), (4, 3), (5, 9)]);
        let item = c.remove(&[3, 5, 7], Some);
        assert_eq!(
            text(item),
            "* ESEARCH (TAG \"C01\") UID REMOVEFROM (2 5,7,3)\r\n"
        );
        assert_eq!(
            c.result.iter().map(|e| e.1).collect::<Vec<_>>(),
            vec![10, 9]
        );
    }

    #[test]
    fn search_contexts_use_position_zero() {
        let mut c = ctx(false, &[(0, 1), (0, 4)]);
        assert_eq!(
            text(c.insert(vec![(Vec::new(), 2), (Vec::new(), 3)], Some)),
            "* ESEARCH (TAG \"C01\") UID ADDTO (0 2:3)\r\n"
        );
        assert_eq!(
            text(c.remove(&[1, 4], Some)),
            "* ESEARCH (TAG \"C01\") UID REMOVEFROM (0 1,4)\r\n"
        );
        assert_eq!(c.remove(&[99], Some), None);
    }
}
