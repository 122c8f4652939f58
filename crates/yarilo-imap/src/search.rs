//! SEARCH and UID SEARCH (RFC 9051 §6.4.4) with ESEARCH (RFC 4731),
//! SEARCHRES (RFC 5182), CONDSTORE MODSEQ (RFC 7162), WITHIN (RFC 5032)
//! and SAVEDATE (RFC 8514). Header and body keys scan the messages (the
//! FTS issue replaces the scan with an index).

use std::sync::Arc;

use yarilo_imap_proto::command::{SearchCommand, SearchKey, SearchKind, SearchReturn};
use yarilo_imap_proto::response::{Code, Data, ESearch, ESearchItem, Response};
use yarilo_imap_proto::{Date, SequenceSet};
use yarilo_store::{Flags, MailboxView, MessageRecord};

use crate::dates::day_of;
use crate::fetch::crlf;
use crate::selected::store_no;
use crate::session::Session;

/// How much of each message the keys look at.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    Meta,
    Header,
    Full,
}

fn need(k: &SearchKey) -> Need {
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
            s => s.contains(m.rec.uid, c.highest_uid),
        },
        SequenceSet(set) => match set {
            yarilo_imap_proto::SequenceSet::Saved => c.saved.binary_search(&m.rec.uid).is_ok(),
            s => s.contains(m.msn, c.exists),
        },
        From(s) => yarilo_mime::header_matches(m.header, "From", &text(s)),
        To(s) => yarilo_mime::header_matches(m.header, "To", &text(s)),
        Cc(s) => yarilo_mime::header_matches(m.header, "Cc", &text(s)),
        Bcc(s) => yarilo_mime::header_matches(m.header, "Bcc", &text(s)),
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

fn sent_day(m: &Msg<'_>) -> Option<i64> {
    yarilo_mime::sent_date(m.header).map(day_of)
}

fn saved_day(m: &Msg<'_>) -> Option<i64> {
    yarilo_store::filename::base_of(&m.rec.filename)
        .split('.')
        .next()?
        .parse::<i64>()
        .ok()
        .map(day_of)
}

fn header_part(raw: &[u8]) -> &[u8] {
    let mut i = 0;
    while i + 1 < raw.len() {
        if i == 0 && raw.get(..2) == Some(b"\r\n") {
            return raw.get(..2).unwrap_or_default();
        }
        if raw.get(i..i + 4) == Some(b"\r\n\r\n") {
            return raw.get(..i + 4).unwrap_or_default();
        }
        i += 1;
    }
    raw
}

impl Session {
    pub(crate) async fn search(
        &mut self,
        tag: &str,
        s: SearchCommand,
    ) -> std::io::Result<Response> {
        if !matches!(s.kind, SearchKind::Search) {
            return Ok(Response::bad(
                Some(tag.to_string()),
                None,
                "SORT and THREAD are not supported.",
            ));
        }
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
            return Ok(Response::bad(
                Some(tag.to_string()),
                None,
                "No mailbox selected.",
            ));
        };
        let key = SearchKey::And(s.keys.clone());
        let modseq_used = uses_modseq(&key);
        if modseq_used {
            self.enabled.condstore = true;
        }
        let view: Arc<MailboxView> = sel.view.clone();
        let mailbox = sel.mailbox.clone();
        let needed = need(&key);
        let ctx = Ctx {
            view: &view,
            exists: sel.exists(),
            highest_uid: sel.highest_uid(),
            saved: &sel.saved,
            now: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
        };
        let mut hits: Vec<(u32, u32, u64)> = Vec::new();
        let candidates: Vec<(u32, u32)> = sel
            .uids
            .iter()
            .enumerate()
            .filter(|(_, u)| view.by_uid(**u).is_some())
            .map(|(i, &u)| (i as u32 + 1, u))
            .collect();
        // Contents are read in bounded batches, one blocking trip each.
        let batch = match needed {
            Need::Full => 16,
            _ => 512,
        };
        for chunk in candidates.chunks(batch) {
            let uids: Vec<u32> = chunk.iter().map(|(_, u)| *u).collect();
            let contents: Vec<Option<Vec<u8>>> = match needed {
                Need::Meta => uids.iter().map(|_| Some(Vec::new())).collect(),
                Need::Header => match mailbox.read_headers(&uids).await {
                    Ok(v) => v.into_iter().map(|(_, d)| d.map(crlf)).collect(),
                    Err(e) => return Ok(store_no(tag, &e)),
                },
                Need::Full => match mailbox.read_messages(&uids).await {
                    Ok(v) => v.into_iter().map(|(_, d)| d.map(crlf)).collect(),
                    Err(e) => return Ok(store_no(tag, &e)),
                },
            };
            for (&(msn, uid), content) in chunk.iter().zip(contents) {
                let (Some(rec), Some(content)) = (view.by_uid(uid), content) else {
                    continue;
                };
                let (header, full) = match needed {
                    Need::Meta => (&[][..], &[][..]),
                    Need::Header => (&content[..], &[][..]),
                    Need::Full => (header_part(&content), &content[..]),
                };
                let m = Msg {
                    msn,
                    rec,
                    header,
                    full,
                    recent: sel.is_recent(uid),
                };
                if eval(&key, &m, &ctx) {
                    hits.push((m.msn, uid, rec.modseq));
                }
            }
        }
        let nums: Vec<u32> = hits
            .iter()
            .map(|&(msn, uid, _)| if s.uid { uid } else { msn })
            .collect();
        let max_modseq = if modseq_used {
            hits.iter().map(|h| h.2).max()
        } else {
            None
        };
        let Some(ret) = s.ret else {
            self.conn.send(&Response::Data(Data::Search {
                nums,
                modseq: max_modseq,
            }));
            return Ok(Response::ok(tag, None, "Search completed."));
        };
        let ret = if ret.is_empty() {
            vec![SearchReturn::All]
        } else {
            ret
        };
        if ret.contains(&SearchReturn::Save) {
            let mut uids: Vec<u32> = hits.iter().map(|h| h.1).collect();
            uids.sort_unstable();
            if let Some(sel) = self.selected.as_mut() {
                sel.saved = uids;
            }
        }
        let mut items = Vec::new();
        for r in &ret {
            match r {
                SearchReturn::Min => {
                    if let Some(&n) = nums.iter().min() {
                        items.push(ESearchItem::Min(n));
                    }
                }
                SearchReturn::Max => {
                    if let Some(&n) = nums.iter().max() {
                        items.push(ESearchItem::Max(n));
                    }
                }
                SearchReturn::All => {
                    if !nums.is_empty() {
                        items.push(ESearchItem::All(SequenceSet::from_numbers(nums.clone())));
                    }
                }
                SearchReturn::Count => items.push(ESearchItem::Count(nums.len() as u32)),
                SearchReturn::Save => {}
                _ => {
                    return Ok(Response::bad(
                        Some(tag.to_string()),
                        None,
                        "Unsupported RETURN option.",
                    ))
                }
            }
        }
        if let Some(m) = max_modseq {
            items.push(ESearchItem::ModSeq(m));
        }
        // RFC 5182 §2.4: RETURN (SAVE) alone produces no ESEARCH.
        let save_only = ret.iter().all(|r| *r == SearchReturn::Save);
        if !save_only {
            self.conn.send(&Response::Data(Data::ESearch(ESearch {
                tag: Some(tag.to_string()),
                uid: s.uid,
                items,
            })));
        }
        Ok(Response::ok(tag, None, "Search completed."))
    }
}
