//! THREAD (RFC 5256 §3–§4): ORDEREDSUBJECT and REFERENCES, and REFS
//! (draft-ietf-morg-inthread-01 §3, as Dovecot implements it).
//!
//! Messages are fed one by one in mailbox order ([`Threader::add`]) so
//! the caller can stream headers in batches; only the per-message facts
//! THREAD needs are kept (one node per message or referenced Message-ID).
//! Every tree walk is iterative: a mailbox holding one 100k-long reply
//! chain must not overflow the stack.
//!
//! REFS differs from REFERENCES (draft-ietf-morg-inthread §3): threads
//! are never merged by subject (step 5 is skipped), and the threads are
//! ordered by the sent date of their most recent message, so the thread
//! that last saw activity comes last.

use std::collections::HashMap;

use yarilo_imap_proto::response::ThreadNode;

/// A THREAD algorithm this server implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    OrderedSubject,
    References,
    Refs,
}

impl Algorithm {
    /// From the (upper-cased) THREAD argument.
    pub(crate) fn parse(name: &str) -> Option<Algorithm> {
        match name {
            "ORDEREDSUBJECT" => Some(Algorithm::OrderedSubject),
            "REFERENCES" => Some(Algorithm::References),
            "REFS" => Some(Algorithm::Refs),
            _ => None,
        }
    }
}

/// What THREAD needs of one message.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadMsg {
    /// The number written in the response (MSN or UID).
    pub id: u32,
    /// Sent date (RFC 5256 §2.2: Date:, else INTERNALDATE), unix seconds.
    pub date: i64,
    /// The collation key of the base subject.
    pub subject: String,
    /// Base-subject extraction found a reply or forward.
    pub reply: bool,
    /// The Message-ID's msg-id, if valid.
    pub message_id: Option<String>,
    /// References msg-ids, else the first In-Reply-To msg-id.
    pub references: Vec<String>,
}

/// The msg-ids of a Message-ID / References / In-Reply-To value, without
/// their angle brackets. Comments and junk between ids are skipped; an
/// id must be non-empty and free of whitespace.
pub(crate) fn msg_ids(raw: &[u8]) -> Vec<String> {
    let s = String::from_utf8_lossy(raw);
    let mut out = Vec::new();
    let mut rest: &str = &s;
    while let Some(open) = rest.find('<') {
        let after = rest.get(open + 1..).unwrap_or_default();
        let Some(close) = after.find(['>', '<']) else {
            break;
        };
        let id = after.get(..close).unwrap_or_default();
        if after.as_bytes().get(close) == Some(&b'>')
            && !id.is_empty()
            && !id.chars().any(char::is_whitespace)
        {
            out.push(id.to_string());
        }
        rest = after.get(close..).unwrap_or_default();
        if rest.starts_with('>') {
            rest = rest.get(1..).unwrap_or_default();
        }
    }
    out
}

#[derive(Debug)]
struct Info {
    id: u32,
    /// Position in mailbox order: the tie-breaker of equal dates.
    seq: u32,
    date: i64,
    subject: Box<str>,
    reply: bool,
}

#[derive(Debug, Default)]
struct Node {
    msg: Option<Info>,
    parent: Option<usize>,
    children: Vec<usize>,
}

/// Builds threads from messages added in mailbox order.
pub(crate) struct Threader {
    alg: Algorithm,
    nodes: Vec<Node>,
    ids: HashMap<String, usize>,
    seq: u32,
}

impl Threader {
    pub(crate) fn new(alg: Algorithm) -> Threader {
        Threader {
            alg,
            nodes: Vec::new(),
            ids: HashMap::new(),
            seq: 0,
        }
    }

    fn node_for_id(&mut self, id: &str) -> usize {
        if let Some(&n) = self.ids.get(id) {
            return n;
        }
        let n = self.nodes.len();
        self.nodes.push(Node::default());
        self.ids.insert(id.to_string(), n);
        n
    }

    fn parent(&self, n: usize) -> Option<usize> {
        self.nodes.get(n).and_then(|x| x.parent)
    }

    /// Is `a` `b` or one of its descendants?
    fn descends_from(&self, a: usize, b: usize) -> bool {
        // A childless `b` has no descendants: the common case (a new
        // message) costs no walk.
        if a != b && self.nodes.get(b).is_some_and(|n| n.children.is_empty()) {
            return false;
        }
        let mut cur = Some(a);
        while let Some(c) = cur {
            if c == b {
                return true;
            }
            cur = self.parent(c);
        }
        false
    }

    fn unlink(&mut self, child: usize) {
        if let Some(p) = self.parent(child) {
            if let Some(pn) = self.nodes.get_mut(p) {
                pn.children.retain(|&c| c != child);
            }
            if let Some(cn) = self.nodes.get_mut(child) {
                cn.parent = None;
            }
        }
    }

    fn link(&mut self, parent: usize, child: usize) {
        if let Some(cn) = self.nodes.get_mut(child) {
            cn.parent = Some(parent);
        }
        if let Some(pn) = self.nodes.get_mut(parent) {
            pn.children.push(child);
        }
    }

    /// Adds the next message in mailbox order (RFC 5256 REFERENCES step 1).
    pub(crate) fn add(&mut self, m: ThreadMsg) {
        self.seq += 1;
        let info = Info {
            id: m.id,
            seq: self.seq,
            date: m.date,
            subject: m.subject.into_boxed_str(),
            reply: m.reply,
        };
        // A missing Message-ID, or a duplicate of one already used by an
        // earlier message, gets a node of its own that nothing can name.
        let me = match &m.message_id {
            Some(id) => {
                let n = self.node_for_id(id);
                if self.nodes.get(n).is_some_and(|x| x.msg.is_none()) {
                    n
                } else {
                    self.nodes.push(Node::default());
                    self.nodes.len() - 1
                }
            }
            None => {
                self.nodes.push(Node::default());
                self.nodes.len() - 1
            }
        };
        if let Some(n) = self.nodes.get_mut(me) {
            n.msg = Some(info);
        }
        if self.alg == Algorithm::OrderedSubject {
            return;
        }
        // Step 1.A: chain the references, never re-parenting and never
        // creating a loop.
        let refs: Vec<usize> = m.references.iter().map(|r| self.node_for_id(r)).collect();
        for w in refs.windows(2) {
            let &[p, c] = w else { continue };
            if p != c && self.parent(c).is_none() && !self.descends_from(p, c) {
                self.link(p, c);
            }
        }
        // Step 1.B: the last reference is the parent, replacing any link
        // a truncated References elsewhere made; no references, no parent.
        self.unlink(me);
        if let Some(&p) = refs.last() {
            if !self.descends_from(p, me) {
                self.link(p, me);
            }
        }
    }

    /// Runs the remaining steps and returns the threads.
    pub(crate) fn finish(self) -> Vec<ThreadNode> {
        match self.alg {
            Algorithm::OrderedSubject => self.ordered_subject(),
            Algorithm::References | Algorithm::Refs => self.references(),
        }
    }

    /// RFC 5256 §3 ORDEREDSUBJECT: sort by (base subject, sent date), one
    /// thread per base subject whose first message is the parent of all
    /// the others; threads in the order of their first message's date.
    fn ordered_subject(self) -> Vec<ThreadNode> {
        let mut msgs: Vec<Info> = self.nodes.into_iter().filter_map(|n| n.msg).collect();
        msgs.sort_by(|a, b| {
            a.subject
                .cmp(&b.subject)
                .then(a.date.cmp(&b.date))
                .then(a.seq.cmp(&b.seq))
        });
        let mut threads: Vec<((i64, u32), ThreadNode)> = Vec::new();
        let mut current: Option<(&str, usize)> = None;
        for m in &msgs {
            match current {
                Some((s, i)) if s == &*m.subject => {
                    if let Some((_, t)) = threads.get_mut(i) {
                        t.children.push(leaf(m.id));
                    }
                }
                _ => {
                    current = Some((&m.subject, threads.len()));
                    threads.push(((m.date, m.seq), leaf(m.id)));
                }
            }
        }
        threads.sort_by_key(|t| t.0);
        threads.into_iter().map(|t| t.1).collect()
    }

    /// Nodes of the tree below `roots` in preorder (iterative).
    fn preorder(&self, roots: &[usize]) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<usize> = roots.iter().rev().copied().collect();
        while let Some(n) = stack.pop() {
            out.push(n);
            if let Some(node) = self.nodes.get(n) {
                stack.extend(node.children.iter().rev());
            }
        }
        out
    }

    fn is_dummy(&self, n: usize) -> bool {
        self.nodes.get(n).is_none_or(|x| x.msg.is_none())
    }

    /// RFC 5256 §3 REFERENCES steps 2–6 (REFS: see the module docs).
    fn references(mut self) -> Vec<ThreadNode> {
        // (2) The root set.
        let roots: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| self.parent(n).is_none())
            .collect();
        // (3) Prune dummies bottom-up: a dummy is replaced by its
        // (pruned) children; below the root that is always allowed.
        let order = self.preorder(&roots);
        let mut replaced: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for &n in order.iter().rev() {
            let kids = std::mem::take(&mut self.nodes[n].children);
            let mut new_kids = Vec::with_capacity(kids.len());
            for k in kids {
                new_kids.append(&mut replaced[k]);
            }
            if self.is_dummy(n) {
                replaced[n] = new_kids;
            } else {
                for &k in &new_kids {
                    self.nodes[k].parent = Some(n);
                }
                self.nodes[n].children = new_kids;
                replaced[n] = vec![n];
            }
        }
        // At the root a dummy stays unless it has a single child (then
        // that child is promoted).
        let mut top: Vec<usize> = Vec::new();
        for &r in &roots {
            let kids = std::mem::take(&mut replaced[r]);
            if !self.is_dummy(r) || kids.len() == 1 {
                for k in kids {
                    self.nodes[k].parent = None;
                    top.push(k);
                }
            } else if !kids.is_empty() {
                for &k in &kids {
                    self.nodes[k].parent = Some(r);
                }
                self.nodes[r].children = kids;
                top.push(r);
            }
        }
        drop(replaced);
        // (6) Sibling order by sent date everywhere (a dummy sorts by its
        // first child), computed bottom-up.
        let order = self.preorder(&top);
        let mut key: Vec<(i64, u32)> = vec![(i64::MAX, u32::MAX); self.nodes.len()];
        for &n in order.iter().rev() {
            let mut kids = std::mem::take(&mut self.nodes[n].children);
            kids.sort_by_key(|&k| key[k]);
            key[n] = match &self.nodes[n].msg {
                Some(m) => (m.date, m.seq),
                None => kids.first().map_or((i64::MAX, u32::MAX), |&k| key[k]),
            };
            self.nodes[n].children = kids;
        }
        // (4) Top-level order.
        top.sort_by_key(|&n| key[n]);
        match self.alg {
            Algorithm::Refs => {
                // Threads by their most recent message.
                let mut latest: Vec<((i64, u32), usize)> = Vec::with_capacity(top.len());
                for &t in &top {
                    let newest = self
                        .preorder(&[t])
                        .into_iter()
                        .filter_map(|n| self.nodes[n].msg.as_ref().map(|m| m.date))
                        .max()
                        .unwrap_or(i64::MIN);
                    latest.push(((newest, key[t].1), t));
                }
                latest.sort_by_key(|l| l.0);
                top = latest.into_iter().map(|l| l.1).collect();
            }
            _ => {
                // (5) Merge threads by base subject.
                if self.merge_subjects(&mut top, &mut key) {
                    top.sort_by_key(|&n| key[n]);
                }
            }
        }
        self.build(&top)
    }

    /// The thread subject of a root: its own, or its first child's when
    /// it is a dummy (RFC 5256 §3 step 5.B.i), with the reply flag.
    fn thread_subject(&self, r: usize) -> Option<(&str, bool)> {
        let node = self.nodes.get(r)?;
        let m = match &node.msg {
            Some(m) => m,
            None => self.nodes.get(*node.children.first()?)?.msg.as_ref()?,
        };
        Some((&m.subject, m.reply))
    }

    /// RFC 5256 §3 step 5 (B and C). Returns whether anything merged.
    fn merge_subjects(&mut self, top: &mut Vec<usize>, key: &mut Vec<(i64, u32)>) -> bool {
        // (B) One root per subject.
        let mut table: HashMap<String, usize> = HashMap::new();
        for &r in top.iter() {
            let Some((subj, reply)) = self.thread_subject(r) else {
                continue;
            };
            if subj.is_empty() {
                continue;
            }
            match table.get(subj) {
                None => {
                    table.insert(subj.to_string(), r);
                }
                Some(&t) => {
                    let t_reply = self.thread_subject(t).is_some_and(|s| s.1);
                    if !self.is_dummy(t) && (self.is_dummy(r) || (t_reply && !reply)) {
                        table.insert(subj.to_string(), r);
                    }
                }
            }
        }
        // (C) Merge the others into it.
        let mut merged = false;
        let mut slots: Vec<Option<usize>> = top.iter().map(|&r| Some(r)).collect();
        let mut slot_of: HashMap<usize, usize> =
            top.iter().enumerate().map(|(i, &r)| (r, i)).collect();
        for i in 0..slots.len() {
            let Some(r) = slots.get(i).copied().flatten() else {
                continue;
            };
            let Some((subj, reply)) = self.thread_subject(r) else {
                continue;
            };
            if subj.is_empty() {
                continue;
            }
            let subj = subj.to_string();
            let Some(&t) = table.get(&subj) else { continue };
            if t == r {
                continue;
            }
            merged = true;
            let t_reply = self.thread_subject(t).is_some_and(|s| s.1);
            if self.is_dummy(r) && self.is_dummy(t) {
                let kids = std::mem::take(&mut self.nodes[r].children);
                for &k in &kids {
                    self.nodes[k].parent = Some(t);
                }
                self.nodes[t].children.extend(kids);
            } else if self.is_dummy(t) || (reply && !t_reply) {
                self.nodes[r].parent = Some(t);
                self.nodes[t].children.push(r);
            } else {
                let d = self.nodes.len();
                self.nodes.push(Node {
                    msg: None,
                    parent: None,
                    children: vec![t, r],
                });
                self.nodes[t].parent = Some(d);
                self.nodes[r].parent = Some(d);
                key.push((i64::MAX, u32::MAX));
                if let Some(ts) = slot_of.remove(&t) {
                    if let Some(s) = slots.get_mut(ts) {
                        *s = Some(d);
                    }
                    slot_of.insert(d, ts);
                }
                table.insert(subj, d);
            }
            if let Some(s) = slots.get_mut(i) {
                *s = None;
            }
            slot_of.remove(&r);
        }
        if !merged {
            return false;
        }
        // Re-sort the siblings that changed and refresh the dummy keys.
        *top = slots.into_iter().flatten().collect();
        for &r in top.iter() {
            let mut kids = std::mem::take(&mut self.nodes[r].children);
            kids.sort_by_key(|&k| key[k]);
            if self.is_dummy(r) {
                key[r] = kids.first().map_or((i64::MAX, u32::MAX), |&k| key[k]);
            }
            self.nodes[r].children = kids;
        }
        true
    }

    /// The response tree, built bottom-up without recursion.
    fn build(&self, top: &[usize]) -> Vec<ThreadNode> {
        let order = self.preorder(top);
        let mut built: HashMap<usize, ThreadNode> = HashMap::with_capacity(order.len());
        for &n in order.iter().rev() {
            let Some(node) = self.nodes.get(n) else {
                continue;
            };
            let children = node
                .children
                .iter()
                .filter_map(|k| built.remove(k))
                .collect();
            built.insert(
                n,
                ThreadNode {
                    id: node.msg.as_ref().map(|m| m.id),
                    children,
                },
            );
        }
        top.iter().filter_map(|t| built.remove(t)).collect()
    }
}

fn leaf(id: u32) -> ThreadNode {
    ThreadNode {
        id: Some(id),
        children: Vec::new(),
    }
}

/// Drops a response tree without recursing (a derived drop of a deep
/// chain would recurse once per level).
pub(crate) fn dismantle(threads: Vec<ThreadNode>) {
    let mut stack = threads;
    while let Some(mut n) = stack.pop() {
        stack.append(&mut n.children);
    }
}

/// The THREAD facts of one message from its header (RFC 5256 §3
/// REFERENCES step 1: References, else the first In-Reply-To id).
pub(crate) fn thread_msg(id: u32, rec: &yarilo_store::MessageRecord, header: &[u8]) -> ThreadMsg {
    let (subject, reply) = crate::sort::subject_key(header);
    let (message_id, references) = thread_ids(header);
    ThreadMsg {
        id,
        date: crate::sort::sent_date(rec, header),
        subject,
        reply,
        message_id,
        references,
    }
}

/// The Message-ID and the parent chain (References, else the first
/// In-Reply-To id) of a header.
pub(crate) fn thread_ids(header: &[u8]) -> (Option<String>, Vec<String>) {
    let ids = |field: &str| {
        yarilo_mime::header_raw(header, field)
            .map(|v| msg_ids(&v))
            .unwrap_or_default()
    };
    let mut references = ids("References");
    if references.is_empty() {
        references = ids("In-Reply-To").into_iter().take(1).collect();
    }
    (ids("Message-ID").into_iter().next(), references)
}

#[cfg(test)]
mod tests {
    use super::*;
    use yarilo_imap_proto::response::{Data, EncodeOptions, Response};

    /// (id, date, subject, message-id, references)
    type M<'a> = (u32, i64, &'a str, Option<&'a str>, &'a [&'a str]);

    fn run(alg: Algorithm, msgs: &[M<'_>]) -> String {
        let mut t = Threader::new(alg);
        for &(id, date, subj, mid, refs) in msgs {
            let b = crate::base_subject::base_subject(subj);
            t.add(ThreadMsg {
                id,
                date,
                subject: crate::collation::unicode_casemap(&b.text),
                reply: b.reply_or_forward,
                message_id: mid.map(str::to_string),
                references: refs.iter().map(|r| r.to_string()).collect(),
            });
        }
        let r = Response::Data(Data::Thread(t.finish()));
        let s = String::from_utf8(r.to_bytes(EncodeOptions::default())).unwrap_or_default();
        if let Response::Data(Data::Thread(t)) = r {
            dismantle(t);
        }
        s.trim_end().to_string()
    }

    #[test]
    fn references_prunes_dummies_and_merges_subjects() {
        let msgs: &[M<'_>] = &[
            (1, 1, "hello", Some("a"), &[]),
            (2, 2, "Re: hello", Some("b"), &["a"]),
            // Both parents missing: the dummies go, 3 is a root.
            (3, 3, "other", Some("c"), &["x", "y"]),
            // Siblings under one missing parent: a dummy root stays.
            (4, 4, "z", Some("d"), &["m"]),
            (5, 5, "Re: z2", Some("e"), &["m"]),
            // No ids at all: joined to "hello" by subject (step 5).
            (6, 6, "Re: hello", None, &[]),
        ];
        assert_eq!(
            run(Algorithm::References, msgs),
            "* THREAD (1 (2)(6))(3)((4)(5))"
        );
    }

    #[test]
    fn a_missing_parent_with_one_child_is_promoted_at_the_root() {
        let msgs: &[M<'_>] = &[(7, 1, "a", Some("c"), &["gone1", "gone2"])];
        assert_eq!(run(Algorithm::References, msgs), "* THREAD (7)");
    }

    #[test]
    fn no_references_means_no_parent_even_when_referenced_before() {
        // 1 names q as its parent's parent chain p→q→x; then q arrives
        // without references and so is cut from p (step 1.B).
        let msgs: &[M<'_>] = &[
            (1, 1, "s1", Some("x"), &["p", "q"]),
            (2, 2, "s2", Some("q"), &[]),
        ];
        assert_eq!(run(Algorithm::References, msgs), "* THREAD (2 1)");
    }

    #[test]
    fn loops_are_never_created() {
        let msgs: &[M<'_>] = &[
            (1, 1, "s1", Some("a"), &["b"]),
            (2, 2, "s2", Some("b"), &["a"]),
            (3, 3, "s3", Some("c"), &["c", "c"]),
        ];
        assert_eq!(run(Algorithm::References, msgs), "* THREAD (2 1)(3)");
    }

    #[test]
    fn duplicate_message_ids_are_separate_messages() {
        let msgs: &[M<'_>] = &[
            (1, 1, "s1", Some("a"), &[]),
            (2, 2, "s2", Some("a"), &[]),
            (3, 3, "s3", Some("r"), &["a"]),
        ];
        assert_eq!(run(Algorithm::References, msgs), "* THREAD (1 3)(2)");
    }

    #[test]
    fn subject_merge_makes_a_dummy_for_two_originals() {
        let msgs: &[M<'_>] = &[
            (1, 1, "x", Some("a"), &[]),
            (2, 2, "[list] x", Some("b"), &[]),
            (3, 3, "Re: x", Some("c"), &[]),
        ];
        // 1 and 2 are both originals: a dummy holds them; the reply
        // joins the dummy (RFC 5256 step 5.C).
        assert_eq!(run(Algorithm::References, msgs), "* THREAD ((1)(2)(3))");
    }

    #[test]
    fn ordered_subject_groups_by_base_subject() {
        let msgs: &[M<'_>] = &[
            (1, 1, "b", None, &[]),
            (2, 5, "a", None, &[]),
            (3, 2, "Re: b", None, &[]),
            (4, 3, "re: A", None, &[]),
            (5, 4, "[fwd: b]", None, &[]),
        ];
        assert_eq!(
            run(Algorithm::OrderedSubject, msgs),
            "* THREAD (1 (3)(5))(4 2)"
        );
    }

    #[test]
    fn refs_orders_threads_by_latest_message_and_ignores_subjects() {
        let msgs: &[M<'_>] = &[
            (1, 1, "t", Some("a"), &[]),
            (2, 2, "u", Some("b"), &[]),
            (3, 3, "Re: t", Some("c"), &["a"]),
            (4, 4, "Re: x", Some("d"), &[]),
            (5, 5, "x", Some("e"), &[]),
        ];
        assert_eq!(run(Algorithm::Refs, msgs), "* THREAD (2)(1 3)(4)(5)");
        assert_eq!(run(Algorithm::References, msgs), "* THREAD (1 3)(2)(5 4)");
    }

    #[test]
    fn empty_mailbox_gives_an_empty_thread_response() {
        assert_eq!(run(Algorithm::References, &[]), "* THREAD");
        assert_eq!(run(Algorithm::OrderedSubject, &[]), "* THREAD");
    }

    #[test]
    fn a_very_deep_reply_chain_does_not_recurse() {
        let ids: Vec<String> = (0..50_000).map(|i| format!("m{i}")).collect();
        let mut t = Threader::new(Algorithm::References);
        for (i, id) in ids.iter().enumerate() {
            t.add(ThreadMsg {
                id: i as u32 + 1,
                date: i as i64,
                subject: "S".into(),
                reply: i > 0,
                message_id: Some(id.clone()),
                references: i
                    .checked_sub(1)
                    .and_then(|p| ids.get(p))
                    .cloned()
                    .into_iter()
                    .collect(),
            });
        }
        let threads = t.finish();
        assert_eq!(threads.len(), 1);
        let r = Response::Data(Data::Thread(threads));
        let bytes = r.to_bytes(EncodeOptions::default());
        assert!(bytes.starts_with(b"* THREAD (1 2 3 "));
        if let Response::Data(Data::Thread(t)) = r {
            dismantle(t);
        }
    }

    #[test]
    fn msg_ids_are_extracted_from_messy_fields() {
        assert_eq!(
            msg_ids(b"<a@b> (comment <x y>) junk <c@d><>< e@f> <g@h"),
            vec!["a@b".to_string(), "c@d".to_string()]
        );
    }
}
