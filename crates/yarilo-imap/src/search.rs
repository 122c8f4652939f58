//! SEARCH and UID SEARCH (RFC 9051 §6.4.4) with ESEARCH (RFC 4731),
//! SEARCHRES (RFC 5182), CONDSTORE MODSEQ (RFC 7162), WITHIN (RFC 5032)
//! and SAVEDATE (RFC 8514). Header and body keys scan the messages (the
//! FTS issue replaces the scan with an index).

use std::collections::HashMap;
use std::sync::Arc;

use yarilo_imap_proto::command::{SearchCommand, SearchKey, SearchKind, SearchReturn};
use yarilo_imap_proto::response::{Code, Data, ESearch, ESearchItem, Response};
use yarilo_imap_proto::{Date, SequenceSet};
use yarilo_store::{Flags, MailboxView, MessageRecord, StoreError};

use crate::context::UpdateContext;
use crate::dates::day_of;
use crate::fetch::crlf;
use crate::selected::{store_no, Selected};
use crate::session::Session;
use crate::sort::{compare, keys_of, needs_header, ordered_set, partial_window, SortValue};
use crate::sort_cache::{Facts, SortCache};
use crate::thread::{dismantle, thread_msg, Algorithm, Threader};

/// How much of each message the keys look at.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Need {
    Meta,
    Header,
    Full,
}

pub(crate) fn need(k: &SearchKey) -> Need {
    use SearchKey::*;
    match k {
        Body(_) | Text(_) => Need::Full,
        Bcc(_) | Cc(_) | From(_) | Subject(_) | To(_) | Header(..) | SentBefore(_) | SentOn(_)
        | SentSince(_) => Need::Header,
        Not(k) => need(k),
        Or(a, b) => need(a).max(need(b)),
        And(v) => v.iter().map(need).max().unwrap_or(Need::Meta),
        _ => Need::Meta,
    }
}

fn uses_modseq(k: &SearchKey) -> bool {
    match k {
        SearchKey::ModSeq { .. } => true,
        SearchKey::Not(k) => uses_modseq(k),
        SearchKey::Or(a, b) => uses_modseq(a) || uses_modseq(b),
        SearchKey::And(v) => v.iter().any(uses_modseq),
        _ => false,
    }
}

/// One message as the evaluator sees it.
struct Msg<'a> {
    msn: u32,
    rec: &'a MessageRecord,
    header: &'a [u8],
    full: &'a [u8],
    recent: bool,
}

struct Ctx<'a> {
    view: &'a MailboxView,
    exists: u32,
    highest_uid: u32,
    saved: &'a [u32],
    now: i64,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn day(d: &Date) -> i64 {
    d.days_since_epoch()
}

fn eval(k: &SearchKey, m: &Msg<'_>, c: &Ctx<'_>) -> bool {
    use SearchKey::*;
    let f = m.rec.flags;
    match k {
        All => true,
        Answered => f.contains(Flags::ANSWERED),
        Unanswered => !f.contains(Flags::ANSWERED),
        Deleted => f.contains(Flags::DELETED),
        Undeleted => !f.contains(Flags::DELETED),
        Draft => f.contains(Flags::DRAFT),
        Undraft => !f.contains(Flags::DRAFT),
        Flagged => f.contains(Flags::FLAGGED),
        Unflagged => !f.contains(Flags::FLAGGED),
        Seen => f.contains(Flags::SEEN),
        Unseen => !f.contains(Flags::SEEN),
        Recent => m.recent,
        New => m.recent && !f.contains(Flags::SEEN),
        Old => !m.recent,
        Keyword(kw) => c
            .view
            .info(m.rec)
            .keywords
            .iter()
            .any(|k| k.eq_ignore_ascii_case(kw)),
        Unkeyword(kw) => !c
            .view
            .info(m.rec)
            .keywords
            .iter()
            .any(|k| k.eq_ignore_ascii_case(kw)),
        Before(d) => day_of(m.rec.internal_date) < day(d),
        On(d) => day_of(m.rec.internal_date) == day(d),
        Since(d) => day_of(m.rec.internal_date) >= day(d),
        SentBefore(d) => sent_day(m).is_some_and(|s| s < day(d)),
        SentOn(d) => sent_day(m).is_some_and(|s| s == day(d)),
        SentSince(d) => sent_day(m).is_some_and(|s| s >= day(d)),
        SavedBefore(d) => saved_day(m).is_some_and(|s| s < day(d)),
        SavedOn(d) => saved_day(m).is_some_and(|s| s == day(d)),
        SavedSince(d) => saved_day(m).is_some_and(|s| s >= day(d)),
        SaveDateSupported => true,
        Younger(n) => c.now - m.rec.internal_date <= *n as i64,
        Older(n) => c.now - m.rec.internal_date >= *n as i64,
        Larger(n) => m.rec.vsize > *n,
        Smaller(n) => m.rec.vsize < *n,
        ModSeq { modseq, .. } => m.rec.modseq >= *modseq,
        Uid(set) => match set {
            yarilo_imap_proto::SequenceSet::Saved => c.saved.binary_search(&m.rec.uid).is_ok(),
            s => in_compacted(s, m.rec.uid, c.highest_uid),
        },
        SequenceSet(set) => match set {
            yarilo_imap_proto::SequenceSet::Saved => c.saved.binary_search(&m.rec.uid).is_ok(),
            s => in_compacted(s, m.msn, c.exists),
        },
        From(s) => yarilo_mime::address_matches(m.header, "From", &text(s)),
        To(s) => yarilo_mime::address_matches(m.header, "To", &text(s)),
        Cc(s) => yarilo_mime::address_matches(m.header, "Cc", &text(s)),
        Bcc(s) => yarilo_mime::address_matches(m.header, "Bcc", &text(s)),
        Subject(s) => yarilo_mime::header_matches(m.header, "Subject", &text(s)),
        Header(name, s) => yarilo_mime::header_matches(m.header, name, &text(s)),
        Body(s) => yarilo_mime::body_contains(m.full, &text(s)),
        Text(s) => yarilo_mime::text_contains(m.full, &text(s)),
        Not(k) => !eval(k, m, c),
        Or(a, b) => eval(a, m, c) || eval(b, m, c),
        And(v) => v.iter().all(|k| eval(k, m, c)),
        EmailId(_) | ThreadId(_) => false,
    }
}

/// The Date: header's own calendar day (RFC 9051 §6.4.4: time and zone
/// disregarded); without a parsable Date:, INTERNALDATE's (as RFC 5256 §2.2
/// has for the sent date, and Dovecot does).
fn sent_day(m: &Msg<'_>) -> Option<i64> {
    Some(yarilo_mime::sent_day(m.header).unwrap_or_else(|| day_of(m.rec.internal_date)))
}

fn saved_day(m: &Msg<'_>) -> Option<i64> {
    yarilo_store::filename::base_of(&m.rec.filename)
        .split('.')
        .next()?
        .parse::<i64>()
        .ok()
        .map(day_of)
}

/// One matching message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit {
    pub msn: u32,
    pub uid: u32,
    pub modseq: u64,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Evaluates `key` over `candidates` ((MSN, UID) in mailbox order),
/// reading contents in bounded batches (one blocking trip each), and calls
/// `on_hit` for every match with its record and header section. The
/// header is read when the key needs it or `header_too` (SORT, THREAD);
/// otherwise it is empty.
pub(crate) async fn scan(
    sel: &Selected,
    key: &SearchKey,
    header_too: bool,
    candidates: &[(u32, u32)],
    mut on_hit: impl FnMut(Hit, &MessageRecord, &[u8]),
) -> Result<(), StoreError> {
    let view: Arc<MailboxView> = sel.view.clone();
    let mut needed = need(key);
    if header_too {
        needed = needed.max(Need::Header);
    }
    let ctx = Ctx {
        view: &view,
        exists: sel.exists(),
        highest_uid: sel.highest_uid(),
        saved: &sel.saved,
        now: now(),
    };
    let key = &compact(key, ctx.exists, ctx.highest_uid);
    let batch = match needed {
        Need::Full => 16,
        _ => 512,
    };
    for chunk in candidates.chunks(batch) {
        let uids: Vec<u32> = chunk.iter().map(|(_, u)| *u).collect();
        let contents: Vec<Option<Vec<u8>>> = match needed {
            Need::Meta => uids.iter().map(|_| Some(Vec::new())).collect(),
            Need::Header => sel
                .mailbox
                .read_headers(&uids)
                .await?
                .into_iter()
                .map(|(_, d)| d.map(crlf))
                .collect(),
            Need::Full => sel
                .mailbox
                .read_messages(&uids)
                .await?
                .into_iter()
                .map(|(_, d)| d.map(crlf))
                .collect(),
        };
        for (&(msn, uid), content) in chunk.iter().zip(contents) {
            let (Some(rec), Some(content)) = (view.by_uid(uid), content) else {
                continue;
            };
            let (header, full) = match needed {
                Need::Meta => (&[][..], &[][..]),
                Need::Header => (&content[..], &[][..]),
                Need::Full => (
                    yarilo_store::maildir::header_section(&content),
                    &content[..],
                ),
            };
            let m = Msg {
                msn,
                rec,
                header,
                full,
                recent: sel.is_recent(uid),
            };
            if eval(key, &m, &ctx) {
                on_hit(
                    Hit {
                        msn,
                        uid,
                        modseq: rec.modseq,
                    },
                    rec,
                    header,
                );
            }
        }
    }
    Ok(())
}

/// Membership in a set [`compact`] produced (ascending, disjoint `a:b`
/// ranges): a bisection, not a walk over the items, per message.
fn in_compacted(set: &SequenceSet, n: u32, largest: u32) -> bool {
    let SequenceSet::Set(items) = set else {
        return false;
    };
    let ends = |it: &yarilo_imap_proto::SeqItem| match *it {
        yarilo_imap_proto::SeqItem::One(a) => (a.resolve(largest), a.resolve(largest)),
        yarilo_imap_proto::SeqItem::Range(a, b) => (a.resolve(largest), b.resolve(largest)),
    };
    let i = items.partition_point(|it| ends(it).1 < n);
    items.get(i).is_some_and(|it| {
        let (a, b) = ends(it);
        a <= n && n <= b
    })
}

/// `k` with every sequence set merged into ascending, disjoint ranges
/// within the mailbox, so that testing a message costs a bisection over
/// the distinct ranges, not a walk over what the set's text repeats
/// (`UID 1:*,1:*,…`). [`eval`] relies on it: run every key through here.
fn compact(k: &SearchKey, exists: u32, highest_uid: u32) -> SearchKey {
    let merged = |items: &[yarilo_imap_proto::SeqItem], largest: u32| {
        SequenceSet::Set(
            crate::selected::merged_ranges(items, largest)
                .into_iter()
                .map(|(a, b)| {
                    yarilo_imap_proto::SeqItem::Range(
                        yarilo_imap_proto::SeqNum::Value(a),
                        yarilo_imap_proto::SeqNum::Value(b),
                    )
                })
                .collect(),
        )
    };
    match k {
        SearchKey::Uid(SequenceSet::Set(items)) => SearchKey::Uid(merged(items, highest_uid)),
        SearchKey::SequenceSet(SequenceSet::Set(items)) => {
            SearchKey::SequenceSet(merged(items, exists))
        }
        SearchKey::Not(k) => SearchKey::Not(Box::new(compact(k, exists, highest_uid))),
        SearchKey::Or(a, b) => SearchKey::Or(
            Box::new(compact(a, exists, highest_uid)),
            Box::new(compact(b, exists, highest_uid)),
        ),
        SearchKey::And(v) => {
            SearchKey::And(v.iter().map(|k| compact(k, exists, highest_uid)).collect())
        }
        other => other.clone(),
    }
}

/// Reads the headers of the `hits` the SORT cache lacks (512 per trip to
/// the blocking pool, as scan() does) and adds their facts to it. Returns
/// the facts read, since the cache keeps only what fits its budget.
async fn cached_facts(
    cache: &SortCache,
    sel: &Selected,
    hits: &[Hit],
) -> Result<HashMap<u32, Arc<Facts>>, StoreError> {
    let resource = sel.mailbox.resource();
    let uids: Vec<u32> = hits.iter().map(|h| h.uid).collect();
    let missing = cache.missing(resource, &sel.view, &uids);
    let mut read = HashMap::with_capacity(missing.len());
    // Parsing and collation keys cost more than the reading: done off the
    // runtime threads, one chunk parsing while the next is read, at most
    // two chunks at once.
    let mut parsing = std::collections::VecDeque::new();
    for chunk in missing.chunks(512) {
        let headers = sel.mailbox.read_headers(chunk).await?;
        parsing.push_back(tokio::task::spawn_blocking(move || {
            headers
                .into_iter()
                .filter_map(|(uid, d)| d.map(|d| (uid, Arc::new(Facts::of(&crlf(d))))))
                .collect::<Vec<(u32, Arc<Facts>)>>()
        }));
        if parsing.len() >= 2 {
            if let Some(task) = parsing.pop_front() {
                take_facts(cache, resource, task, &mut read).await?;
            }
        }
    }
    while let Some(task) = parsing.pop_front() {
        take_facts(cache, resource, task, &mut read).await?;
    }
    Ok(read)
}

/// Waits for one chunk's facts and adds them to the cache and `read`.
async fn take_facts(
    cache: &SortCache,
    resource: &str,
    task: tokio::task::JoinHandle<Vec<(u32, Arc<Facts>)>>,
    read: &mut HashMap<u32, Arc<Facts>>,
) -> Result<(), StoreError> {
    let facts = task
        .await
        .map_err(|e| StoreError::Internal(format!("header facts worker failed: {e}")))?;
    cache.insert(resource, facts.clone());
    read.extend(facts);
    Ok(())
}

/// The (MSN, UID) pairs of every message the client knows that still
/// exists.
pub(crate) fn candidates(sel: &Selected) -> Vec<(u32, u32)> {
    sel.uids
        .iter()
        .enumerate()
        .filter(|(_, u)| sel.view.by_uid(**u).is_some())
        .map(|(i, &u)| (i as u32 + 1, u))
        .collect()
}

/// Most UPDATE contexts one session may hold (RFC 5267 §4.3.1: at least
/// one; beyond this the answer is NOUPDATE).
const MAX_UPDATE_CONTEXTS: usize = 16;

impl Session {
    /// SEARCH, SORT and THREAD (all `Command::Search`).
    pub(crate) async fn search(
        &mut self,
        tag: &str,
        s: SearchCommand,
    ) -> std::io::Result<Response> {
        let bad = |text: &str| Response::bad(Some(tag.to_string()), None, text.to_string());
        if let Some(cs) = &s.charset {
            let cs = cs.to_ascii_uppercase();
            if cs != "UTF-8" && cs != "US-ASCII" {
                return Ok(Response::no(
                    tag,
                    Some(Code::BadCharset(vec!["UTF-8".into(), "US-ASCII".into()])),
                    "Unsupported charset.",
                ));
            }
        }
        let Some(sel) = self.selected.as_ref() else {
            return Ok(bad("No mailbox selected."));
        };
        let (criteria, algorithm) = match &s.kind {
            SearchKind::Search => (None, None),
            SearchKind::Sort(c) => (Some(c.clone()), None),
            SearchKind::Thread(name) => match Algorithm::parse(name) {
                Some(a) => (None, Some(a)),
                None => return Ok(bad("Unknown thread algorithm.")),
            },
        };
        if let Some(ret) = &s.ret {
            // RFC 5267 §4.4: at most one PARTIAL or ALL.
            let windows = ret
                .iter()
                .filter(|r| matches!(r, SearchReturn::All | SearchReturn::Partial(..)))
                .count();
            if windows > 1 {
                return Ok(bad("Only one PARTIAL or ALL return option allowed."));
            }
            // RFC 5267 §4.3: a tag naming a live context cannot be reused.
            if ret.contains(&SearchReturn::Update) && sel.contexts.has(tag) {
                return Ok(bad("Tag reuse."));
            }
        }
        let key = SearchKey::And(s.keys.clone());
        let modseq_used = uses_modseq(&key);
        if modseq_used {
            crate::session::condstore_on(&mut self.enabled, &mut self.conn, Some(sel));
        }
        let header_too = algorithm.is_some() || criteria.as_deref().is_some_and(needs_header);
        // The header facts come from the cache when only SORT/THREAD needs
        // the header; a search key that reads headers reads them anyway.
        let cached = header_too && self.server.sort_cache.enabled() && need(&key) == Need::Meta;
        let cands = candidates(sel);
        let mut hits: Vec<Hit> = Vec::new();
        let mut keyed: Vec<(Vec<SortValue>, Hit)> = Vec::new();
        let mut threader = algorithm.map(Threader::new);
        let scanned = scan(
            sel,
            &key,
            header_too && !cached,
            &cands,
            |hit, rec, header| {
                if cached {
                    hits.push(hit);
                    return;
                }
                if let Some(c) = &criteria {
                    keyed.push((keys_of(c, rec, header), hit));
                } else {
                    hits.push(hit);
                }
                if let Some(t) = threader.as_mut() {
                    t.add(thread_msg(
                        if s.uid { hit.uid } else { hit.msn },
                        rec,
                        header,
                    ));
                }
            },
        )
        .await;
        if let Err(e) = scanned {
            return Ok(store_no(tag, &e));
        }
        // Set when the cached path has already put `hits` in sort order.
        let mut presorted = false;
        if cached {
            let cache = &self.server.sort_cache;
            let read = match cached_facts(cache, sel, &hits).await {
                Ok(f) => f,
                Err(e) => return Ok(store_no(tag, &e)),
            };
            let view = &sel.view;
            let found = std::mem::take(&mut hits);
            let uids: Vec<u32> = found.iter().map(|h| h.uid).collect();
            let rows: Vec<(Arc<Facts>, &MessageRecord, Hit)> = cache
                .get(sel.mailbox.resource(), &uids)
                .into_iter()
                .zip(found)
                .filter_map(|(f, hit)| {
                    // Gone from disk meanwhile: skipped, as scan() does.
                    let f = f.or_else(|| read.get(&hit.uid).cloned())?;
                    Some((f, view.by_uid(hit.uid)?, hit))
                })
                .collect();
            if let Some(t) = threader.as_mut() {
                for (f, rec, hit) in &rows {
                    t.add(f.thread_msg(if s.uid { hit.uid } else { hit.msn }, rec));
                }
            }
            let update = s
                .ret
                .as_ref()
                .is_some_and(|r| r.contains(&SearchReturn::Update));
            match &criteria {
                // An UPDATE context keeps the keys themselves.
                Some(c) if update => {
                    keyed = rows
                        .iter()
                        .map(|(f, rec, hit)| (f.sort_keys(c, rec), *hit))
                        .collect();
                }
                Some(c) => {
                    hits = crate::sort_cache::sorted(c, &rows);
                    presorted = true;
                }
                None => hits = rows.iter().map(|r| r.2).collect(),
            }
        }
        if let Some(t) = threader {
            // RFC 5256 §4: the THREAD response, even when empty.
            let resp = Response::Data(Data::Thread(t.finish()));
            self.conn.send(&resp);
            if let Response::Data(Data::Thread(t)) = resp {
                dismantle(t);
            }
            return Ok(Response::ok(tag, None, "Thread completed."));
        }
        if let Some(c) = criteria.as_ref().filter(|_| !presorted) {
            keyed.sort_by(|a, b| compare(c, &a.0, a.1.uid, &b.0, b.1.uid));
            hits = keyed.iter().map(|k| k.1).collect();
        }
        let sorting = criteria.is_some();
        let done = if sorting {
            "Sort completed."
        } else {
            "Search completed."
        };
        let nums: Vec<u32> = hits
            .iter()
            .map(|h| if s.uid { h.uid } else { h.msn })
            .collect();
        let max_modseq = if modseq_used {
            hits.iter().map(|h| h.modseq).max()
        } else {
            None
        };
        let Some(ret) = s.ret.clone() else {
            self.conn.send(&Response::Data(if sorting {
                Data::Sort {
                    nums,
                    modseq: max_modseq,
                }
            } else {
                Data::Search {
                    nums,
                    modseq: max_modseq,
                }
            }));
            return Ok(Response::ok(tag, None, done));
        };
        // RETURN () is ALL (RFC 4731 §3.1); so is a RETURN holding only
        // UPDATE / CONTEXT, which produce no data of their own.
        let produces = |r: &SearchReturn| {
            !matches!(
                r,
                SearchReturn::Save | SearchReturn::Update | SearchReturn::Context
            )
        };
        let save_only = !ret.is_empty() && ret.iter().all(|r| *r == SearchReturn::Save);
        let mut items_wanted = ret.clone();
        if !save_only && !ret.iter().any(produces) {
            items_wanted.push(SearchReturn::All);
        }
        if ret.contains(&SearchReturn::Save) {
            let mut uids: Vec<u32> = hits.iter().map(|h| h.uid).collect();
            uids.sort_unstable();
            if let Some(sel) = self.selected.as_mut() {
                sel.saved = uids;
            }
        }
        let set_of = |v: &[u32]| {
            if sorting {
                ordered_set(v)
            } else {
                SequenceSet::from_numbers(v.iter().copied())
            }
        };
        let mut items = Vec::new();
        for r in &items_wanted {
            match *r {
                // RFC 5267 §3.1: for SORT, MIN/MAX are the first and last
                // in sort order.
                SearchReturn::Min => {
                    let n = if sorting {
                        nums.first().copied()
                    } else {
                        nums.iter().min().copied()
                    };
                    items.extend(n.map(ESearchItem::Min));
                }
                SearchReturn::Max => {
                    let n = if sorting {
                        nums.last().copied()
                    } else {
                        nums.iter().max().copied()
                    };
                    items.extend(n.map(ESearchItem::Max));
                }
                SearchReturn::All => {
                    if !nums.is_empty() {
                        items.push(ESearchItem::All(set_of(&nums)));
                    }
                }
                SearchReturn::Count => items.push(ESearchItem::Count(nums.len() as u32)),
                SearchReturn::Partial(a, b) => {
                    let set = partial_window((a, b), nums.len())
                        .and_then(|(first, last)| nums.get(first..=last))
                        .map(set_of);
                    items.push(ESearchItem::Partial { range: (a, b), set });
                }
                SearchReturn::Save | SearchReturn::Update | SearchReturn::Context => {}
            }
        }
        // RFC 7162 §3.1.5: with MIN and/or MAX as the only result options,
        // MODSEQ is that of the message(s) they return, not of the whole set.
        let min_max_only = items_wanted
            .iter()
            .filter(|r| produces(r))
            .all(|r| matches!(r, SearchReturn::Min | SearchReturn::Max));
        let modseq = if max_modseq.is_some() && min_max_only {
            let num = |h: &Hit| if s.uid { h.uid } else { h.msn };
            let pick = |max: bool| {
                if sorting {
                    if max {
                        hits.last()
                    } else {
                        hits.first()
                    }
                } else if max {
                    hits.iter().max_by_key(|h| num(h))
                } else {
                    hits.iter().min_by_key(|h| num(h))
                }
            };
            items_wanted
                .iter()
                .filter_map(|r| match r {
                    SearchReturn::Min => pick(false),
                    SearchReturn::Max => pick(true),
                    _ => None,
                })
                .map(|h| h.modseq)
                .max()
        } else {
            max_modseq
        };
        if let Some(m) = modseq {
            items.push(ESearchItem::ModSeq(m));
        }
        // RFC 5182 §2.4: RETURN (SAVE) alone produces no ESEARCH.
        if !save_only {
            self.conn.send(&Response::Data(Data::ESearch(ESearch {
                tag: Some(tag.to_string()),
                uid: s.uid,
                items,
            })));
        }
        if ret.contains(&SearchReturn::Update) {
            let Some(sel) = self.selected.as_mut() else {
                return Ok(Response::ok(tag, None, done));
            };
            if sel.contexts.len() >= MAX_UPDATE_CONTEXTS {
                // RFC 5267 §4.3.1: untagged NO [NOUPDATE], results stand.
                self.conn.send(&Response::Status {
                    tag: None,
                    kind: yarilo_imap_proto::response::StatusKind::No,
                    code: Some(Code::NoUpdate(tag.to_string())),
                    text: "Too many update contexts.".into(),
                });
                return Ok(Response::ok(tag, None, done));
            }
            let result: Vec<(Vec<SortValue>, u32)> = if sorting {
                keyed.into_iter().map(|(k, h)| (k, h.uid)).collect()
            } else {
                hits.iter().map(|h| (Vec::new(), h.uid)).collect()
            };
            let frozen = crate::context::freeze(&key, sel);
            sel.contexts.add(UpdateContext::new(
                tag.to_string(),
                s.uid,
                frozen,
                criteria,
                result,
            ));
            let text = if sorting {
                "Sort completed, will notify."
            } else {
                "Search completed, will notify."
            };
            return Ok(Response::ok(tag, None, text));
        }
        Ok(Response::ok(tag, None, done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yarilo_imap_proto::{SeqItem, SeqNum};

    #[test]
    fn compacted_sets_answer_membership_as_the_sets_they_came_from() {
        let v = SeqNum::Value;
        let sets = [
            vec![SeqItem::Range(v(1), SeqNum::Largest); 1000],
            vec![
                SeqItem::Range(v(9), v(4)),
                SeqItem::One(v(2)),
                SeqItem::One(SeqNum::Largest),
                SeqItem::Range(v(5), v(6)),
                SeqItem::One(v(70)),
            ],
            vec![SeqItem::Range(SeqNum::Largest, v(18)), SeqItem::One(v(3))],
        ];
        for items in sets {
            let set = SequenceSet::Set(items);
            let SearchKey::Uid(c) = compact(&SearchKey::Uid(set.clone()), 0, 20) else {
                panic!("compact changed the key");
            };
            for n in 0..=25 {
                assert_eq!(in_compacted(&c, n, 20), set.contains(n, 20), "{set} {n}");
            }
        }
    }
}
