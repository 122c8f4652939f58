//! FETCH and UID FETCH (RFC 9051 §6.4.5, RFC 3516 BINARY, RFC 7162
//! CHANGEDSINCE/VANISHED, RFC 8514 SAVEDATE).

use std::sync::Arc;

use bytes::Bytes;
use yarilo_imap_proto::command::{
    FetchAttr, FetchAttrs, FetchModifiers, Partial, Section, SectionText,
};
use yarilo_imap_proto::response::{Code, Data, FetchItem, Response};
use yarilo_imap_proto::SequenceSet;
use yarilo_store::{FlagOp, Flags, Mailbox, MailboxView, StoreError};

use yarilo_store::maildir::header_section as header_of;

use crate::dates::datetime;
use crate::selected::{flags_of, store_no};
use crate::session::Session;

/// What of the message a FETCH needs from disk.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    Nothing,
    Header,
    Full,
}

fn need_of(a: &FetchAttr) -> Need {
    match a {
        FetchAttr::Envelope | FetchAttr::Rfc822Header => Need::Header,
        FetchAttr::BodySection { section, .. } if header_only(section) => Need::Header,
        FetchAttr::Body
        | FetchAttr::BodyStructure
        | FetchAttr::Rfc822
        | FetchAttr::Rfc822Text
        | FetchAttr::BodySection { .. }
        | FetchAttr::Binary { .. }
        | FetchAttr::BinarySize(_) => Need::Full,
        _ => Need::Nothing,
    }
}

fn header_only(s: &Section) -> bool {
    s.part.is_empty()
        && matches!(
            s.text,
            Some(SectionText::Header)
                | Some(SectionText::HeaderFields(_))
                | Some(SectionText::HeaderFieldsNot(_))
        )
}

/// Marks the message \Seen when fetched (RFC 9051: BODY[] and friends
/// without .PEEK).
fn sets_seen(a: &FetchAttr) -> bool {
    matches!(
        a,
        FetchAttr::Rfc822
            | FetchAttr::Rfc822Text
            | FetchAttr::BodySection { peek: false, .. }
            | FetchAttr::Binary { peek: false, .. }
    )
}

/// Bare LF → CRLF, as IMAP requires on the wire (Maildir files written by
/// Dovecot use LF). A message stored with CRLF is returned as it is: a
/// bare LF inside it is content (a `binary` part, RFC 3516).
pub(crate) fn crlf(raw: Vec<u8>) -> Vec<u8> {
    if !yarilo_store::filename::lf_line_ends(&raw) {
        return raw;
    }
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 32);
    let mut prev = 0u8;
    for &b in &raw {
        if b == b'\n' && prev != b'\r' {
            out.push(b'\r');
        }
        out.push(b);
        prev = b;
    }
    out
}

/// BODY[] (`text` None) or BODY[TEXT] of a message.
fn whole(full: &[u8], text: Option<SectionText>) -> Vec<u8> {
    let section = Section {
        part: Vec::new(),
        text,
    };
    yarilo_mime::section(full, &section).unwrap_or_default()
}

pub(crate) fn apply_partial(data: Vec<u8>, p: Option<Partial>) -> Vec<u8> {
    match p {
        None => data,
        Some(p) => {
            let start = (p.origin as usize).min(data.len());
            let end = start.saturating_add(p.count as usize).min(data.len());
            data.get(start..end).map(<[u8]>::to_vec).unwrap_or_default()
        }
    }
}

/// The save time of a Maildir message: the leading seconds of its base
/// name (`<secs>.M…`), which is when it was delivered or appended.
fn save_date(guid: &str) -> Option<i64> {
    guid.split('.').next()?.parse().ok()
}

/// A message loaded for one FETCH response.
struct Loaded {
    header: Option<Vec<u8>>,
    full: Option<Vec<u8>>,
}

/// Loads what `need` asks for of each UID, in order, as the session's
/// `view` knows the messages (one expunged by another session since is
/// still served while it can be read); `None` for a message that is gone.
async fn load_many(
    mailbox: &Mailbox,
    view: &Arc<MailboxView>,
    uids: &[u32],
    need: Need,
) -> Result<Vec<Option<Loaded>>, StoreError> {
    Ok(match need {
        Need::Nothing => uids
            .iter()
            .map(|_| {
                Some(Loaded {
                    header: None,
                    full: None,
                })
            })
            .collect(),
        Need::Header => mailbox
            .read_headers_in(view.clone(), uids)
            .await?
            .into_iter()
            .map(|(_, h)| {
                h.map(|h| Loaded {
                    header: Some(crlf(h)),
                    full: None,
                })
            })
            .collect(),
        Need::Full => mailbox
            .read_messages_in(view.clone(), uids)
            .await?
            .into_iter()
            .map(|(_, m)| {
                m.map(|m| Loaded {
                    header: None,
                    full: Some(crlf(m)),
                })
            })
            .collect(),
    })
}

impl Loaded {
    fn header(&self) -> &[u8] {
        if let Some(h) = &self.header {
            return h;
        }
        match &self.full {
            Some(f) => header_of(f),
            None => &[],
        }
    }
    fn full(&self) -> &[u8] {
        self.full.as_deref().unwrap_or_default()
    }
}

enum ItemError {
    UnknownCte,
}

impl Session {
    pub(crate) async fn fetch(
        &mut self,
        tag: &str,
        uid: bool,
        set: SequenceSet,
        attrs: FetchAttrs,
        modifiers: FetchModifiers,
    ) -> std::io::Result<Response> {
        let Some(sel) = self.selected.as_ref() else {
            return Ok(Response::bad(
                Some(tag.to_string()),
                None,
                "No mailbox selected.",
            ));
        };
        let mut targets = match sel.resolve(&set, uid) {
            Ok(t) => t,
            Err(_) => {
                return Ok(Response::bad(
                    Some(tag.to_string()),
                    None,
                    "Invalid messageset",
                ))
            }
        };
        if modifiers.vanished
            && (!uid || !self.enabled.qresync || modifiers.changed_since.is_none())
        {
            return Ok(Response::bad(
                Some(tag.to_string()),
                None,
                "VANISHED needs UID FETCH, ENABLE QRESYNC and CHANGEDSINCE.",
            ));
        }
        let mut attrs = attrs.expand();
        if uid && !attrs.contains(&FetchAttr::Uid) {
            attrs.insert(0, FetchAttr::Uid);
        }
        if modifiers.changed_since.is_some() || attrs.contains(&FetchAttr::ModSeq) {
            crate::session::condstore_on(&mut self.enabled, &mut self.conn, Some(sel));
            if !attrs.contains(&FetchAttr::ModSeq) {
                attrs.push(FetchAttr::ModSeq);
            }
        }
        let mailbox = sel.mailbox.clone();
        let read_only = sel.read_only;
        let mut view: Arc<MailboxView> = sel.view.clone();
        // Messages expunged elsewhere whose EXPUNGE the client has not had
        // yet are still its messages: they are served from this view.
        let shown = sel.before_expunge.clone().unwrap_or_else(|| view.clone());
        if let Some(cs) = modifiers.changed_since {
            if modifiers.vanished {
                let uids_in_set = |u: u32| set.contains(u, sel.highest_uid().max(u));
                let gone: Vec<u32> = match view.expunged_since(cs) {
                    Some(v) => v.into_iter().filter(|&u| uids_in_set(u)).collect(),
                    None => Vec::new(),
                };
                if !gone.is_empty() {
                    self.conn.send(&Response::Data(Data::Vanished {
                        earlier: true,
                        uids: SequenceSet::from_numbers(gone),
                    }));
                }
            }
            targets.retain(|(_, u)| view.by_uid(*u).is_some_and(|r| r.modseq > cs));
        }
        // Implicit \Seen first, so the responses show it.
        let mut seen_set: Vec<u32> = Vec::new();
        if !read_only && attrs.iter().any(sets_seen) {
            let unseen: Vec<u32> = targets
                .iter()
                .filter(|(_, u)| {
                    view.by_uid(*u)
                        .is_some_and(|r| !r.flags.contains(Flags::SEEN))
                })
                .map(|(_, u)| *u)
                .collect();
            if !unseen.is_empty() {
                match mailbox
                    .store_flags(&unseen, FlagOp::Add, Flags::SEEN, &[], None)
                    .await
                {
                    Ok(r) => {
                        seen_set = r.changed;
                        seen_set.sort_unstable();
                        view = mailbox.view();
                    }
                    // Expunged meanwhile (the store retried once): the
                    // fetch goes on without \Seen for what is gone.
                    Err(StoreError::NoMessage(_)) => {}
                    Err(e) => return Ok(store_no(tag, &e)),
                }
            }
        }
        let need = attrs.iter().map(need_of).max().unwrap_or(Need::Nothing);
        let mut missing = false;
        // Messages are read in batches (one trip to the blocking pool
        // each), bounded so a FETCH 1:* never holds a mailbox in memory.
        let batch = match need {
            Need::Full => 16,
            _ => 256,
        };
        for chunk in targets.chunks(batch) {
            let uids: Vec<u32> = chunk.iter().map(|(_, u)| *u).collect();
            let mut contents = match load_many(&mailbox, &shown, &uids, need).await {
                Ok(c) => c.into_iter(),
                Err(e) => return Ok(store_no(tag, &e)),
            };
            for &(msn, uid_) in chunk {
                let loaded = contents.next().flatten();
                // Flags from the newest view; a message expunged since is
                // described as the client last saw it.
                let rec_view = if view.by_uid(uid_).is_some() {
                    &view
                } else {
                    &shown
                };
                let (Some(rec), Some(loaded)) = (rec_view.by_uid(uid_), loaded) else {
                    missing = true;
                    continue;
                };
                let recent = self.selected.as_ref().is_some_and(|s| s.is_recent(uid_));
                let mut items = Vec::with_capacity(attrs.len() + 1);
                for a in &attrs {
                    match self.item(a, rec_view, rec, recent, &loaded) {
                        Ok(Some(i)) => items.push(i),
                        Ok(None) => {}
                        Err(ItemError::UnknownCte) => {
                            return Ok(Response::no(
                                tag,
                                Some(Code::UnknownCte),
                                "Unknown Content-Transfer-Encoding.",
                            ))
                        }
                    }
                }
                if seen_set.binary_search(&uid_).is_ok() && !attrs.contains(&FetchAttr::Flags) {
                    items.push(FetchItem::Flags(flags_of(&view, uid_, recent)));
                }
                self.conn
                    .send(&Response::Data(Data::Fetch { seq: msn, items }));
                self.conn.maybe_flush().await?;
            }
        }
        // The flags the client just saw are now known: no duplicate
        // FETCH from the sync for our own \Seen.
        if !seen_set.is_empty() {
            self.apply_view(view.clone(), false, &seen_set);
        }
        if missing && !uid {
            return Ok(Response::no(
                tag,
                Some(Code::ExpungeIssued),
                "Some messages were also expunged.",
            ));
        }
        Ok(Response::ok(tag, None, "Fetch completed."))
    }

    fn item(
        &self,
        a: &FetchAttr,
        view: &MailboxView,
        rec: &yarilo_store::MessageRecord,
        recent: bool,
        m: &Loaded,
    ) -> Result<Option<FetchItem>, ItemError> {
        Ok(Some(match a {
            FetchAttr::Uid => FetchItem::Uid(rec.uid),
            FetchAttr::Flags => FetchItem::Flags(flags_of(view, rec.uid, recent)),
            FetchAttr::InternalDate => FetchItem::InternalDate(datetime(rec.internal_date)),
            FetchAttr::Rfc822Size => FetchItem::Rfc822Size(rec.vsize),
            FetchAttr::ModSeq => FetchItem::ModSeq(rec.modseq),
            FetchAttr::Envelope => FetchItem::Envelope(Box::new(yarilo_mime::envelope(m.header()))),
            FetchAttr::Body => FetchItem::Body(Box::new(yarilo_mime::body_structure(m.full()))),
            FetchAttr::BodyStructure => {
                FetchItem::BodyStructure(Box::new(yarilo_mime::body_structure(m.full())))
            }
            // RFC822 and RFC822.TEXT are BODY[] and BODY[TEXT]: `binary`
            // parts 7-bit safe the same way.
            FetchAttr::Rfc822 => FetchItem::Rfc822(Some(Bytes::from(whole(m.full(), None)))),
            FetchAttr::Rfc822Header => {
                FetchItem::Rfc822Header(Some(Bytes::copy_from_slice(m.header())))
            }
            FetchAttr::Rfc822Text => {
                FetchItem::Rfc822Text(Some(Bytes::from(whole(m.full(), Some(SectionText::Text)))))
            }
            FetchAttr::BodySection {
                section, partial, ..
            } => {
                let data = if header_only(section) && m.full.is_none() {
                    yarilo_mime::section(m.header(), section)
                } else {
                    yarilo_mime::section(m.full(), section)
                };
                let data = apply_partial(data.unwrap_or_default(), *partial);
                FetchItem::BodySection {
                    section: section.clone(),
                    origin: partial.map(|p| p.origin),
                    data: Some(Bytes::from(data)),
                }
            }
            FetchAttr::Binary { part, partial, .. } => {
                let data =
                    yarilo_mime::binary(m.full(), part).map_err(|_| ItemError::UnknownCte)?;
                FetchItem::Binary {
                    part: part.clone(),
                    origin: partial.map(|p| p.origin),
                    data: data.map(|d| Bytes::from(apply_partial(d, *partial))),
                }
            }
            FetchAttr::BinarySize(part) => {
                let data =
                    yarilo_mime::binary(m.full(), part).map_err(|_| ItemError::UnknownCte)?;
                FetchItem::BinarySize {
                    part: part.clone(),
                    size: data.map(|d| d.len() as u64).unwrap_or(0),
                }
            }
            FetchAttr::SaveDate => {
                let guid = yarilo_store::filename::base_of(&rec.filename);
                FetchItem::SaveDate(save_date(guid).map(datetime))
            }
            FetchAttr::EmailId | FetchAttr::ThreadId => return Ok(None),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_conversion() {
        assert_eq!(crlf(b"a\nb\r\nc\n".to_vec()), b"a\r\nb\r\nc\r\n".to_vec());
        assert_eq!(crlf(b"a\r\n".to_vec()), b"a\r\n".to_vec());
        assert_eq!(crlf(b"a\r\nb\nc".to_vec()), b"a\r\nb\nc".to_vec());
        assert_eq!(header_of(b"A: b\r\n\r\nbody"), b"A: b\r\n\r\n");
        assert_eq!(header_of(b"\r\nbody"), b"\r\n");
        assert_eq!(save_date("1700000000.M1P2.host"), Some(1_700_000_000));
    }

    #[test]
    fn partial_bounds() {
        let p = |o, c| {
            Some(Partial {
                origin: o,
                count: c,
            })
        };
        assert_eq!(apply_partial(b"hello".to_vec(), p(1, 3)), b"ell");
        assert_eq!(apply_partial(b"hello".to_vec(), p(9, 3)), b"");
        assert_eq!(apply_partial(b"hello".to_vec(), p(3, u32::MAX)), b"lo");
    }
}
