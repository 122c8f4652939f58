//! An in-memory cache, per mailbox and shared by the sessions of one
//! process, of the header facts SORT and THREAD use (sort keys, base
//! subject, Message-ID, References). Without it every SORT or THREAD reads
//! every message's header section again; Dovecot keeps the same facts in
//! its index cache.
//!
//! Invariants: a Maildir message never changes under its UID, so an entry
//! stays right while the mailbox keeps its UIDVALIDITY (a new UIDVALIDITY
//! drops the mailbox's entries); entries of expunged messages are dropped
//! whenever the mailbox's HIGHESTMODSEQ or message count has moved. At most
//! `imap.sort_cache_messages` messages are held over all mailboxes: the
//! least recently used mailboxes go first, and a mailbox bigger than the
//! whole budget is cached only up to it. Never held across an `.await`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use yarilo_imap_proto::command::{SortCriterion, SortKey};
use yarilo_store::{MailboxView, MessageRecord};

use crate::sort::SortValue;
use crate::thread::ThreadMsg;

/// What SORT and THREAD need of one message's header, computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The Date: header; `None` falls back to INTERNALDATE.
    date: Option<i64>,
    subject: Box<str>,
    reply: bool,
    from: Box<str>,
    to: Box<str>,
    cc: Box<str>,
    display_from: Box<str>,
    display_to: Box<str>,
    message_id: Option<Box<str>>,
    references: Box<[Box<str>]>,
}

impl Facts {
    /// From a header section (CRLF line ends).
    pub(crate) fn of(header: &[u8]) -> Facts {
        let (subject, reply) = crate::sort::subject_key(header);
        let (message_id, references) = crate::thread::thread_ids(header);
        let (from, display_from) = crate::sort::address_keys(header, "From");
        let (to, display_to) = crate::sort::address_keys(header, "To");
        Facts {
            date: yarilo_mime::sent_date(header),
            subject: subject.into_boxed_str(),
            reply,
            from: from.into_boxed_str(),
            to: to.into_boxed_str(),
            cc: crate::sort::mailbox_key(header, "Cc").into_boxed_str(),
            display_from: display_from.into_boxed_str(),
            display_to: display_to.into_boxed_str(),
            message_id: message_id.map(String::into_boxed_str),
            references: references.into_iter().map(String::into_boxed_str).collect(),
        }
    }

    /// The same values as [`crate::sort::keys_of`] on the header.
    pub(crate) fn sort_keys(
        &self,
        criteria: &[SortCriterion],
        rec: &MessageRecord,
    ) -> Vec<SortValue> {
        criteria
            .iter()
            .map(|c| match c.key {
                SortKey::Arrival => SortValue::Num(rec.internal_date),
                SortKey::Size => SortValue::Num(i64::try_from(rec.vsize).unwrap_or(i64::MAX)),
                SortKey::Date => SortValue::Num(self.date.unwrap_or(rec.internal_date)),
                SortKey::Subject => SortValue::Text(self.subject.to_string()),
                SortKey::From => SortValue::Text(self.from.to_string()),
                SortKey::To => SortValue::Text(self.to.to_string()),
                SortKey::Cc => SortValue::Text(self.cc.to_string()),
                SortKey::DisplayFrom => SortValue::Text(self.display_from.to_string()),
                SortKey::DisplayTo => SortValue::Text(self.display_to.to_string()),
            })
            .collect()
    }

    /// The order [`crate::sort::compare`] gives the keys of `a` and `b`,
    /// without building them (ties: UID order).
    pub(crate) fn compare(
        criteria: &[SortCriterion],
        (a, ar): (&Facts, &MessageRecord),
        (b, br): (&Facts, &MessageRecord),
    ) -> Ordering {
        for c in criteria {
            let o = match c.key {
                SortKey::Arrival => ar.internal_date.cmp(&br.internal_date),
                SortKey::Size => ar.vsize.cmp(&br.vsize),
                SortKey::Date => a
                    .date
                    .unwrap_or(ar.internal_date)
                    .cmp(&b.date.unwrap_or(br.internal_date)),
                SortKey::Subject => a.subject.cmp(&b.subject),
                SortKey::From => a.from.cmp(&b.from),
                SortKey::To => a.to.cmp(&b.to),
                SortKey::Cc => a.cc.cmp(&b.cc),
                SortKey::DisplayFrom => a.display_from.cmp(&b.display_from),
                SortKey::DisplayTo => a.display_to.cmp(&b.display_to),
            };
            let o = if c.reverse { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        ar.uid.cmp(&br.uid)
    }

    /// The same value as [`crate::thread::thread_msg`] on the header.
    pub(crate) fn thread_msg(&self, id: u32, rec: &MessageRecord) -> ThreadMsg {
        ThreadMsg {
            id,
            date: self.date.unwrap_or(rec.internal_date),
            subject: self.subject.to_string(),
            reply: self.reply,
            message_id: self.message_id.as_deref().map(str::to_string),
            references: self.references.iter().map(|r| r.to_string()).collect(),
        }
    }
}

/// One criterion's value, kept inline so that sorting a large mailbox
/// walks one array instead of chasing a pointer per comparison: numbers
/// as they are, strings by their first 8 bytes (big-endian, zero-padded,
/// which orders like the strings whenever they differ) with the whole
/// string behind for ties.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key<'a> {
    Num(i64),
    Text(u64, &'a str),
}

impl Ord for Key<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Key::Num(a), Key::Num(b)) => a.cmp(b),
            (Key::Text(pa, a), Key::Text(pb, b)) => pa.cmp(pb).then_with(|| a.cmp(b)),
            // One criterion gives one kind; never mixed.
            (Key::Num(_), Key::Text(..)) => Ordering::Less,
            (Key::Text(..), Key::Num(_)) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Key<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn text(s: &str) -> Key<'_> {
    let mut p = [0u8; 8];
    for (d, b) in p.iter_mut().zip(s.bytes()) {
        *d = b;
    }
    Key::Text(u64::from_be_bytes(p), s)
}

impl Facts {
    fn key(&self, key: SortKey, rec: &MessageRecord) -> Key<'_> {
        match key {
            SortKey::Arrival => Key::Num(rec.internal_date),
            SortKey::Size => Key::Num(i64::try_from(rec.vsize).unwrap_or(i64::MAX)),
            SortKey::Date => Key::Num(self.date.unwrap_or(rec.internal_date)),
            SortKey::Subject => text(&self.subject),
            SortKey::From => text(&self.from),
            SortKey::To => text(&self.to),
            SortKey::Cc => text(&self.cc),
            SortKey::DisplayFrom => text(&self.display_from),
            SortKey::DisplayTo => text(&self.display_to),
        }
    }
}

/// `items` (facts, record, payload) in the order [`Facts::compare`]
/// gives, as their payloads.
pub(crate) fn sorted<T: Copy>(
    criteria: &[SortCriterion],
    items: &[(Arc<Facts>, &MessageRecord, T)],
) -> Vec<T> {
    let [c] = criteria else {
        let mut v: Vec<&(Arc<Facts>, &MessageRecord, T)> = items.iter().collect();
        v.sort_by(|a, b| Facts::compare(criteria, (&a.0, a.1), (&b.0, b.1)));
        return v.into_iter().map(|x| x.2).collect();
    };
    let mut rows: Vec<(Key<'_>, u32, T)> = items
        .iter()
        .map(|(f, rec, t)| (f.key(c.key, rec), rec.uid, *t))
        .collect();
    rows.sort_by(|a, b| {
        let o = a.0.cmp(&b.0);
        let o = if c.reverse { o.reverse() } else { o };
        o.then(a.1.cmp(&b.1))
    });
    rows.into_iter().map(|r| r.2).collect()
}

#[cfg(test)]
fn placeholder() -> MessageRecord {
    MessageRecord {
        uid: 0,
        flags: Default::default(),
        keywords: Default::default(),
        modseq: 0,
        size: 0,
        vsize: 0,
        internal_date: 0,
        in_new: false,
        filename: "".into(),
        cache: None,
    }
}

struct MailboxFacts {
    uidvalidity: u32,
    /// (HIGHESTMODSEQ, messages) when expunged entries were last dropped.
    state: (u64, usize),
    last_used: u64,
    facts: HashMap<u32, Arc<Facts>>,
}

#[derive(Default)]
struct Inner {
    boxes: HashMap<String, MailboxFacts>,
    total: usize,
    clock: u64,
}

/// See the module documentation.
pub(crate) struct SortCache {
    max: usize,
    inner: Mutex<Inner>,
}

impl SortCache {
    /// At most `max` messages over all mailboxes; 0 disables the cache.
    pub(crate) fn new(max: usize) -> SortCache {
        SortCache {
            max,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.max > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves plain data
        // behind; the cache stays usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Brings the mailbox's entry up to `view` and returns which of `uids`
    /// have no facts yet.
    pub(crate) fn missing(&self, resource: &str, view: &MailboxView, uids: &[u32]) -> Vec<u32> {
        self.missing_in(
            resource,
            view.uidvalidity(),
            (view.highest_modseq(), view.len()),
            |uid| view.by_uid(uid).is_some(),
            uids,
        )
    }

    /// [`Self::missing`] on the parts of a view it looks at: UIDVALIDITY,
    /// (HIGHESTMODSEQ, messages), and whether a UID still exists.
    fn missing_in(
        &self,
        resource: &str,
        uidvalidity: u32,
        state: (u64, usize),
        live: impl Fn(u32) -> bool,
        uids: &[u32],
    ) -> Vec<u32> {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.clock += 1;
        let now = inner.clock;
        let entry = inner
            .boxes
            .entry(resource.to_string())
            .or_insert_with(|| MailboxFacts {
                uidvalidity,
                state,
                last_used: now,
                facts: HashMap::new(),
            });
        entry.last_used = now;
        if entry.uidvalidity != uidvalidity {
            inner.total -= entry.facts.len();
            entry.facts.clear();
            entry.uidvalidity = uidvalidity;
        } else if entry.state != state {
            let before = entry.facts.len();
            entry.facts.retain(|uid, _| live(*uid));
            inner.total -= before - entry.facts.len();
        }
        entry.state = state;
        uids.iter()
            .copied()
            .filter(|u| !entry.facts.contains_key(u))
            .collect()
    }

    /// Adds facts for `resource` (whose entry [`Self::missing`] made),
    /// within the budget; what does not fit is dropped.
    pub(crate) fn insert(&self, resource: &str, items: Vec<(u32, Arc<Facts>)>) {
        let mut g = self.lock();
        let inner = &mut *g;
        let need = items.len();
        // Make room from the least recently used other mailboxes.
        while inner.total + need > self.max {
            let victim = inner
                .boxes
                .iter()
                .filter(|(name, _)| name.as_str() != resource)
                .min_by_key(|(_, b)| b.last_used)
                .map(|(name, _)| name.clone());
            let Some(victim) = victim else { break };
            if let Some(b) = inner.boxes.remove(&victim) {
                inner.total -= b.facts.len();
            }
        }
        let room = self.max.saturating_sub(inner.total);
        let Some(entry) = inner.boxes.get_mut(resource) else {
            return;
        };
        let mut added = 0;
        for (uid, f) in items.into_iter().take(room) {
            if entry.facts.insert(uid, f).is_none() {
                added += 1;
            }
        }
        inner.total += added;
    }

    /// The cached facts of `uids` (`None` where there are none). Only
    /// reference counts are copied under the lock.
    pub(crate) fn get(&self, resource: &str, uids: &[u32]) -> Vec<Option<Arc<Facts>>> {
        let g = self.lock();
        let Some(b) = g.boxes.get(resource) else {
            return vec![None; uids.len()];
        };
        uids.iter().map(|u| b.facts.get(u).cloned()).collect()
    }

    /// Messages held over all mailboxes.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADERS: &[&[u8]] = &[
        b"From: \"Zed\" <mike@a.org>\r\nTo: bob@b.org\r\nCc: carol@c.org\r\nSubject: Re: [fwd: Re: x]\r\nDate: Mon, 03 Jan 2022 00:00:00 +0000\r\nMessage-ID: <m1@t>\r\nReferences: <gone@t> <m0@t>\r\n\r\n",
        b"From: =?UTF-8?Q?=C3=89mile?= <emile@e.org>\r\nSubject: x\r\nIn-Reply-To: <m1@t> <m2@t>\r\n\r\n",
        b"Date: garbage\r\n\r\n",
        b"\r\n",
    ];

    fn rec(uid: u32) -> MessageRecord {
        MessageRecord {
            uid,
            internal_date: 70 + i64::from(uid),
            vsize: 5,
            ..placeholder()
        }
    }

    #[test]
    fn facts_give_what_the_header_gives() {
        let all: Vec<SortCriterion> = [
            SortKey::Arrival,
            SortKey::Size,
            SortKey::Date,
            SortKey::Subject,
            SortKey::From,
            SortKey::To,
            SortKey::Cc,
            SortKey::DisplayFrom,
            SortKey::DisplayTo,
        ]
        .into_iter()
        .map(|key| SortCriterion {
            reverse: false,
            key,
        })
        .collect();
        // Both directions of every criterion order like the built keys.
        for (i, ha) in (1..).zip(HEADERS) {
            for (j, hb) in (1..).zip(HEADERS) {
                let (a, b) = (Facts::of(ha), Facts::of(hb));
                let (ra, rb) = (rec(i), rec(j));
                for c in &all {
                    for reverse in [false, true] {
                        let c = [SortCriterion {
                            reverse,
                            key: c.key,
                        }];
                        assert_eq!(
                            Facts::compare(&c, (&a, &ra), (&b, &rb)),
                            crate::sort::compare(
                                &c,
                                &a.sort_keys(&c, &ra),
                                ra.uid,
                                &b.sort_keys(&c, &rb),
                                rb.uid
                            ),
                            "{c:?} {i} {j}"
                        );
                    }
                }
            }
        }
        for h in HEADERS {
            let f = Facts::of(h);
            assert_eq!(
                f.sort_keys(&all, &rec(1)),
                crate::sort::keys_of(&all, &rec(1), h)
            );
            let a = f.thread_msg(9, &rec(1));
            let b = crate::thread::thread_msg(9, &rec(1), h);
            assert_eq!(
                (a.id, a.date, a.subject, a.reply, a.message_id, a.references),
                (b.id, b.date, b.subject, b.reply, b.message_id, b.references)
            );
        }
    }

    fn f() -> Arc<Facts> {
        Arc::new(Facts::of(b"Subject: s\r\n\r\n"))
    }

    fn cached(c: &SortCache, name: &str) -> usize {
        c.get(name, &[1, 2, 3, 4]).iter().flatten().count()
    }

    #[test]
    fn inline_keys_sort_like_the_comparator() {
        let headers: Vec<Vec<u8>> = [
            "Subject: abcdefgh1\r\nFrom: a@x\r\n",
            "Subject: abcdefgh\r\nFrom: b@x\r\n",
            "Subject: abc\r\nDate: Mon, 03 Jan 2022 00:00:00 +0000\r\n",
            "Subject: Re: abc\r\nFrom: a@x\r\n",
            "Subject: \u{e9}t\u{e9}\r\n",
            "Subject: abcdefgh\r\n",
            "\r\n",
        ]
        .iter()
        .map(|h| format!("{h}\r\n").into_bytes())
        .collect();
        let facts: Vec<Arc<Facts>> = headers.iter().map(|h| Arc::new(Facts::of(h))).collect();
        let recs: Vec<MessageRecord> = (1..=7u32)
            .map(|u| MessageRecord {
                vsize: u64::from(8 - u) % 3,
                ..rec(u)
            })
            .collect();
        let items: Vec<(Arc<Facts>, &MessageRecord, u32)> = facts
            .iter()
            .zip(&recs)
            .map(|(f, r)| (f.clone(), r, r.uid))
            .collect();
        let keys = [
            SortKey::Subject,
            SortKey::From,
            SortKey::Date,
            SortKey::Size,
        ];
        let mut sets: Vec<Vec<SortCriterion>> = Vec::new();
        for key in keys {
            for reverse in [false, true] {
                sets.push(vec![SortCriterion { reverse, key }]);
            }
        }
        sets.push(vec![
            SortCriterion {
                reverse: false,
                key: SortKey::Subject,
            },
            SortCriterion {
                reverse: true,
                key: SortKey::Size,
            },
        ]);
        for c in &sets {
            let mut want: Vec<&(Arc<Facts>, &MessageRecord, u32)> = items.iter().collect();
            want.sort_by(|a, b| Facts::compare(c, (&a.0, a.1), (&b.0, b.1)));
            let want: Vec<u32> = want.into_iter().map(|x| x.2).collect();
            assert_eq!(sorted(c, &items), want, "{c:?}");
        }
    }

    #[test]
    fn budget_evicts_least_recently_used_mailboxes() {
        let c = SortCache::new(3);
        let miss = |name: &str, uids: &[u32]| c.missing_in(name, 1, (1, 9), |_| true, uids);
        assert_eq!(miss("a", &[1, 2]), vec![1, 2]);
        c.insert("a", vec![(1, f()), (2, f())]);
        assert_eq!(miss("a", &[1, 2, 3]), vec![3]);
        assert_eq!(miss("b", &[1, 2]), vec![1, 2]);
        c.insert("b", vec![(1, f()), (2, f())]);
        // "a" was used less recently and goes.
        assert_eq!(c.total(), 2);
        assert_eq!(cached(&c, "a"), 0);
        // A mailbox bigger than the budget is cached up to it.
        assert_eq!(miss("c", &[1, 2, 3, 4]).len(), 4);
        c.insert("c", (1..=4).map(|u| (u, f())).collect());
        assert_eq!(c.total(), 3);
        assert_eq!(cached(&c, "c"), 3);
        // Disabled.
        assert!(!SortCache::new(0).enabled());
    }

    #[test]
    fn expunges_and_new_uidvalidity_invalidate() {
        let c = SortCache::new(100);
        c.missing_in("a", 1, (5, 3), |_| true, &[]);
        c.insert("a", vec![(1, f()), (2, f()), (3, f())]);
        // Same state: nothing re-checked, all cached.
        assert!(c
            .missing_in("a", 1, (5, 3), |_| false, &[1, 2, 3])
            .is_empty());
        // UID 2 expunged (HIGHESTMODSEQ moved): its entry goes.
        assert_eq!(
            c.missing_in("a", 1, (6, 2), |u| u != 2, &[1, 2, 3]),
            vec![2]
        );
        assert_eq!(c.total(), 2);
        // A new UIDVALIDITY: every UID means another message now.
        assert_eq!(c.missing_in("a", 2, (6, 2), |_| true, &[1, 3]), vec![1, 3]);
        assert_eq!(c.total(), 0);
    }
}
