//! The client-side spelling of commands: what a test client or a proxy
//! sends. Literals are written inline as `{n}`; a client talking to a real
//! server waits for the continuation after each (or uses LITERAL+).
//!
//! Invariant: `parse_command(encode(c)) == c` for every command the parser
//! can produce (property-tested for the recursive parts in `tests/`).

use super::*;
use crate::response::{EncodeOptions, Writer};

fn flags(w: &mut Writer<'_>, f: &[Flag]) {
    w.list(f, |w, f| w.text(&f.to_string()));
}

fn opt_list<T>(w: &mut Writer<'_>, items: &[T], f: impl FnMut(&mut Writer<'_>, &T)) {
    w.list(items, f);
}

fn write_part(w: &mut Writer<'_>, part: &[u32]) {
    let p: Vec<String> = part.iter().map(u32::to_string).collect();
    w.text(&p.join("."));
}

fn write_section(w: &mut Writer<'_>, s: &Section) {
    w.raw(b"[");
    write_part(w, &s.part);
    if let Some(t) = &s.text {
        if !s.part.is_empty() {
            w.raw(b".");
        }
        match t {
            SectionText::Header => w.text("HEADER"),
            SectionText::HeaderFields(v) | SectionText::HeaderFieldsNot(v) => {
                w.text(if matches!(t, SectionText::HeaderFields(_)) {
                    "HEADER.FIELDS "
                } else {
                    "HEADER.FIELDS.NOT "
                });
                w.list(v, |w, h| w.astring(h.as_bytes()));
            }
            SectionText::Text => w.text("TEXT"),
            SectionText::Mime => w.text("MIME"),
        }
    }
    w.raw(b"]");
}

fn write_partial(w: &mut Writer<'_>, p: Option<Partial>) {
    if let Some(p) = p {
        w.raw(b"<");
        w.num(p.origin);
        w.raw(b".");
        w.num(p.count);
        w.raw(b">");
    }
}

impl FetchAttr {
    /// Writes the attribute as a client sends it.
    pub fn write(&self, w: &mut Writer<'_>) {
        use FetchAttr as A;
        match self {
            A::Envelope => w.text("ENVELOPE"),
            A::Flags => w.text("FLAGS"),
            A::InternalDate => w.text("INTERNALDATE"),
            A::Rfc822 => w.text("RFC822"),
            A::Rfc822Header => w.text("RFC822.HEADER"),
            A::Rfc822Size => w.text("RFC822.SIZE"),
            A::Rfc822Text => w.text("RFC822.TEXT"),
            A::Body => w.text("BODY"),
            A::BodyStructure => w.text("BODYSTRUCTURE"),
            A::Uid => w.text("UID"),
            A::ModSeq => w.text("MODSEQ"),
            A::SaveDate => w.text("SAVEDATE"),
            A::EmailId => w.text("EMAILID"),
            A::ThreadId => w.text("THREADID"),
            A::BodySection {
                peek,
                section,
                partial,
            } => {
                w.text(if *peek { "BODY.PEEK" } else { "BODY" });
                write_section(w, section);
                write_partial(w, *partial);
            }
            A::Binary {
                peek,
                part,
                partial,
            } => {
                w.text(if *peek { "BINARY.PEEK[" } else { "BINARY[" });
                write_part(w, part);
                w.raw(b"]");
                write_partial(w, *partial);
            }
            A::BinarySize(part) => {
                w.text("BINARY.SIZE[");
                write_part(w, part);
                w.raw(b"]");
            }
        }
    }
}

impl SearchKey {
    /// Writes the key as a client sends it.
    pub fn write(&self, w: &mut Writer<'_>) {
        use SearchKey as K;
        let s = |w: &mut Writer<'_>, name: &str, v: &[u8]| {
            w.text(name);
            w.sp();
            w.astring(v);
        };
        let d = |w: &mut Writer<'_>, name: &str, v: &crate::Date| {
            w.text(name);
            w.sp();
            w.text(&v.to_string());
        };
        match self {
            K::All => w.text("ALL"),
            K::Answered => w.text("ANSWERED"),
            K::Bcc(v) => s(w, "BCC", v),
            K::Before(v) => d(w, "BEFORE", v),
            K::Body(v) => s(w, "BODY", v),
            K::Cc(v) => s(w, "CC", v),
            K::Deleted => w.text("DELETED"),
            K::Draft => w.text("DRAFT"),
            K::Flagged => w.text("FLAGGED"),
            K::From(v) => s(w, "FROM", v),
            K::Header(f, v) => {
                s(w, "HEADER", f.as_bytes());
                w.sp();
                w.astring(v);
            }
            K::Keyword(k) => {
                w.text("KEYWORD ");
                w.text(k);
            }
            K::Larger(n) => {
                w.text("LARGER ");
                w.num(n);
            }
            K::New => w.text("NEW"),
            K::Not(k) => {
                w.text("NOT ");
                k.write(w);
            }
            K::Old => w.text("OLD"),
            K::On(v) => d(w, "ON", v),
            K::Or(a, b) => {
                w.text("OR ");
                a.write(w);
                w.sp();
                b.write(w);
            }
            K::Recent => w.text("RECENT"),
            K::Seen => w.text("SEEN"),
            K::SentBefore(v) => d(w, "SENTBEFORE", v),
            K::SentOn(v) => d(w, "SENTON", v),
            K::SentSince(v) => d(w, "SENTSINCE", v),
            K::Since(v) => d(w, "SINCE", v),
            K::Smaller(n) => {
                w.text("SMALLER ");
                w.num(n);
            }
            K::Subject(v) => s(w, "SUBJECT", v),
            K::Text(v) => s(w, "TEXT", v),
            K::To(v) => s(w, "TO", v),
            K::Uid(set) => {
                w.text("UID ");
                w.text(&set.to_string());
            }
            K::Unanswered => w.text("UNANSWERED"),
            K::Undeleted => w.text("UNDELETED"),
            K::Undraft => w.text("UNDRAFT"),
            K::Unflagged => w.text("UNFLAGGED"),
            K::Unkeyword(k) => {
                w.text("UNKEYWORD ");
                w.text(k);
            }
            K::Unseen => w.text("UNSEEN"),
            K::SequenceSet(set) => w.text(&set.to_string()),
            K::And(keys) => w.list(keys, |w, k| k.write(w)),
            K::ModSeq { entry, modseq } => {
                w.text("MODSEQ ");
                if let Some((name, kind)) = entry {
                    w.string(name.as_bytes());
                    w.sp();
                    w.text(kind);
                    w.sp();
                }
                w.num(modseq);
            }
            K::Younger(n) => {
                w.text("YOUNGER ");
                w.num(n);
            }
            K::Older(n) => {
                w.text("OLDER ");
                w.num(n);
            }
            K::SavedBefore(v) => d(w, "SAVEDBEFORE", v),
            K::SavedOn(v) => d(w, "SAVEDON", v),
            K::SavedSince(v) => d(w, "SAVEDSINCE", v),
            K::SaveDateSupported => w.text("SAVEDATESUPPORTED"),
            K::EmailId(id) => {
                w.text("EMAILID ");
                w.text(id);
            }
            K::ThreadId(id) => {
                w.text("THREADID ");
                w.text(id);
            }
        }
    }
}

fn search_return(w: &mut Writer<'_>, r: &SearchReturn) {
    match r {
        SearchReturn::Min => w.text("MIN"),
        SearchReturn::Max => w.text("MAX"),
        SearchReturn::All => w.text("ALL"),
        SearchReturn::Count => w.text("COUNT"),
        SearchReturn::Save => w.text("SAVE"),
        SearchReturn::Update => w.text("UPDATE"),
        SearchReturn::Context => w.text("CONTEXT"),
        SearchReturn::Partial(a, b) => {
            w.text("PARTIAL ");
            w.num(a);
            w.raw(b":");
            w.num(b);
        }
    }
}

fn sort_key(k: SortKey) -> &'static str {
    match k {
        SortKey::Arrival => "ARRIVAL",
        SortKey::Cc => "CC",
        SortKey::Date => "DATE",
        SortKey::From => "FROM",
        SortKey::Size => "SIZE",
        SortKey::Subject => "SUBJECT",
        SortKey::To => "TO",
        SortKey::DisplayFrom => "DISPLAYFROM",
        SortKey::DisplayTo => "DISPLAYTO",
    }
}

fn write_search(w: &mut Writer<'_>, s: &SearchCommand) {
    if s.uid {
        w.text("UID ");
    }
    match &s.kind {
        SearchKind::Search => w.text("SEARCH"),
        SearchKind::Sort(_) => w.text("SORT"),
        SearchKind::Thread(alg) => {
            w.text("THREAD ");
            w.text(alg);
        }
    }
    if let Some(ret) = &s.ret {
        w.text(" RETURN ");
        opt_list(w, ret, search_return);
    }
    if let SearchKind::Sort(c) = &s.kind {
        w.sp();
        w.list(c, |w, c| {
            if c.reverse {
                w.text("REVERSE ");
            }
            w.text(sort_key(c.key));
        });
    }
    match (&s.kind, &s.charset) {
        (SearchKind::Search, Some(cs)) => {
            w.text(" CHARSET ");
            w.astring(cs.as_bytes());
        }
        (SearchKind::Search, None) => {}
        (_, cs) => {
            w.sp();
            w.astring(cs.as_deref().unwrap_or("UTF-8").as_bytes());
        }
    }
    for k in &s.keys {
        w.sp();
        k.write(w);
    }
}

impl Command {
    /// Appends `tag SP command CRLF` as a client would send it.
    pub fn encode(&self, tag: &str, out: &mut Vec<u8>, opts: EncodeOptions) {
        let mut w = Writer::new(out, opts);
        w.text(tag);
        w.sp();
        self.write(&mut w);
        w.raw(b"\r\n");
    }

    fn write(&self, w: &mut Writer<'_>) {
        let name = self.name();
        match self {
            Command::Capability
            | Command::Noop
            | Command::Logout
            | Command::StartTls
            | Command::Namespace
            | Command::Idle
            | Command::Check
            | Command::Close
            | Command::Unselect
            | Command::Expunge => w.text(name),
            Command::Id(None) => w.text("ID NIL"),
            Command::Id(Some(pairs)) => {
                w.text("ID ");
                w.raw(b"(");
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        w.sp();
                    }
                    w.string(k.as_bytes());
                    w.sp();
                    w.nstring(v.as_deref().map(str::as_bytes));
                }
                w.raw(b")");
            }
            Command::Authenticate { mechanism, initial } => {
                w.text("AUTHENTICATE ");
                w.text(mechanism);
                if let Some(i) = initial {
                    w.sp();
                    w.raw(if i.is_empty() { b"=" } else { i });
                }
            }
            Command::Login { username, password } => {
                w.text("LOGIN ");
                w.astring(username);
                w.sp();
                w.astring(password);
            }
            Command::Enable(caps) => {
                w.text("ENABLE");
                for c in caps {
                    w.sp();
                    w.text(c);
                }
            }
            Command::Select(s) | Command::Examine(s) => {
                w.text(name);
                w.sp();
                w.mailbox(&s.mailbox);
                let mut params: Vec<&dyn Fn(&mut Writer<'_>)> = Vec::new();
                let condstore = |w: &mut Writer<'_>| w.text("CONDSTORE");
                let qresync = |w: &mut Writer<'_>| {
                    if let Some(q) = &s.qresync {
                        w.text("QRESYNC (");
                        w.num(q.uidvalidity);
                        w.sp();
                        w.num(q.modseq);
                        if let Some(k) = &q.known_uids {
                            w.sp();
                            w.text(&k.to_string());
                        }
                        if let Some((a, b)) = &q.seq_match {
                            w.text(&format!(" ({a} {b})"));
                        }
                        w.raw(b")");
                    }
                };
                if s.condstore {
                    params.push(&condstore);
                }
                if s.qresync.is_some() {
                    params.push(&qresync);
                }
                if !params.is_empty() {
                    w.sp();
                    w.list(&params, |w, p| p(w));
                }
            }
            Command::Create {
                mailbox,
                special_use,
            } => {
                w.text("CREATE ");
                w.mailbox(mailbox);
                if !special_use.is_empty() {
                    w.text(" (USE ");
                    w.list(special_use, |w, u| w.text(u));
                    w.raw(b")");
                }
            }
            Command::Delete(m)
            | Command::Subscribe(m)
            | Command::Unsubscribe(m)
            | Command::GetQuotaRoot(m) => {
                w.text(name);
                w.sp();
                w.mailbox(m);
            }
            Command::Rename { from, to } => {
                w.text("RENAME ");
                w.mailbox(from);
                w.sp();
                w.mailbox(to);
            }
            Command::List(l) => write_list(w, l),
            Command::Lsub { reference, pattern } => {
                w.text("LSUB ");
                list_name(w, reference);
                w.sp();
                list_name(w, pattern);
            }
            Command::Status { mailbox, items } => {
                w.text("STATUS ");
                w.mailbox(mailbox);
                w.sp();
                w.list(items, |w, i| w.text(i.as_str()));
            }
            Command::Append { mailbox, messages } => {
                w.text("APPEND ");
                w.mailbox(mailbox);
                for m in messages {
                    write_append_message(w, m);
                }
            }
            Command::UidExpunge(set) => {
                w.text("UID EXPUNGE ");
                w.text(&set.to_string());
            }
            Command::Search(s) => write_search(w, s),
            Command::Fetch {
                uid,
                set,
                attrs,
                modifiers,
            } => {
                w.text(if *uid { "UID FETCH " } else { "FETCH " });
                w.text(&set.to_string());
                w.sp();
                match attrs {
                    FetchAttrs::All => w.text("ALL"),
                    FetchAttrs::Fast => w.text("FAST"),
                    FetchAttrs::Full => w.text("FULL"),
                    FetchAttrs::List(v) => w.list(v, |w, a| a.write(w)),
                }
                let mut mods = Vec::new();
                if let Some(n) = modifiers.changed_since {
                    mods.push(format!("CHANGEDSINCE {n}"));
                }
                if modifiers.vanished {
                    mods.push("VANISHED".to_owned());
                }
                if !mods.is_empty() {
                    w.sp();
                    w.list(&mods, |w, m| w.text(m));
                }
            }
            Command::Store(s) => {
                w.text(if s.uid { "UID STORE " } else { "STORE " });
                w.text(&s.set.to_string());
                w.sp();
                if let Some(n) = s.unchanged_since {
                    w.text(&format!("(UNCHANGEDSINCE {n}) "));
                }
                w.text(match s.mode {
                    StoreMode::Replace => "FLAGS",
                    StoreMode::Add => "+FLAGS",
                    StoreMode::Remove => "-FLAGS",
                });
                if s.silent {
                    w.text(".SILENT");
                }
                w.sp();
                flags(w, &s.flags);
            }
            Command::Copy { set, mailbox, .. } | Command::Move { set, mailbox, .. } => {
                w.text(name);
                w.sp();
                w.text(&set.to_string());
                w.sp();
                w.mailbox(mailbox);
            }
            Command::CancelUpdate(tags) => {
                w.text("CANCELUPDATE");
                for t in tags {
                    w.sp();
                    w.string(t.as_bytes());
                }
            }
            Command::GetQuota(root) => {
                w.text("GETQUOTA ");
                w.astring(root.as_bytes());
            }
            Command::SetQuota { root, limits } => {
                w.text("SETQUOTA ");
                w.astring(root.as_bytes());
                w.sp();
                w.list(limits, |w, (r, n)| {
                    w.text(r);
                    w.sp();
                    w.num(n);
                });
            }
            Command::GetMetadata {
                max_size,
                depth,
                mailbox,
                entries,
            } => {
                w.text("GETMETADATA ");
                let mut opts = Vec::new();
                if let Some(n) = max_size {
                    opts.push(format!("MAXSIZE {n}"));
                }
                // Always sent (DEPTH 0 is the default) so an entry list
                // after the mailbox is never taken for late options.
                opts.push(
                    match depth {
                        MetadataDepth::Zero => "DEPTH 0",
                        MetadataDepth::One => "DEPTH 1",
                        MetadataDepth::Infinity => "DEPTH infinity",
                    }
                    .to_owned(),
                );
                w.list(&opts, |w, o| w.text(o));
                w.sp();
                metadata_mailbox(w, mailbox.as_ref());
                w.sp();
                w.list(entries, |w, e| w.astring(e.as_bytes()));
            }
            Command::SetMetadata { mailbox, entries } => {
                w.text("SETMETADATA ");
                metadata_mailbox(w, mailbox.as_ref());
                w.sp();
                w.list(entries, |w, (e, v)| {
                    w.astring(e.as_bytes());
                    w.sp();
                    w.binary_nstring(v.as_deref());
                });
            }
            Command::Notify(None) => w.text("NOTIFY NONE"),
            Command::Notify(Some(n)) => write_notify(w, n),
            Command::Compress(m) => {
                w.text("COMPRESS ");
                w.text(m);
            }
            Command::GenUrlAuth(pairs) => {
                w.text("GENURLAUTH");
                for (u, m) in pairs {
                    w.sp();
                    w.astring(u.as_bytes());
                    w.sp();
                    w.text(m);
                }
            }
            Command::ResetKey {
                mailbox,
                mechanisms,
            } => {
                w.text("RESETKEY");
                if let Some(m) = mailbox {
                    w.sp();
                    w.mailbox(m);
                    for mech in mechanisms {
                        w.sp();
                        w.text(mech);
                    }
                }
            }
            Command::XClient(pairs) => {
                w.text("XCLIENT");
                for (k, v) in pairs {
                    w.sp();
                    w.text(k);
                    w.raw(b"=");
                    w.text(v);
                }
            }
            Command::UrlFetch(items) => {
                w.text("URLFETCH");
                for i in items {
                    w.sp();
                    if i.extended {
                        w.raw(b"(");
                        w.astring(i.url.as_bytes());
                        for (on, p) in [
                            (i.body_part_structure, " BODYPARTSTRUCTURE"),
                            (i.binary, " BINARY"),
                            (i.body, " BODY"),
                        ] {
                            if on {
                                w.text(p);
                            }
                        }
                        w.raw(b")");
                    } else {
                        w.astring(i.url.as_bytes());
                    }
                }
            }
        }
    }
}

/// A reference or pattern: encoded like a mailbox name but not normalised
/// (a pattern `inbox` stays `inbox`), always a string so wildcards survive.
fn list_name(w: &mut Writer<'_>, name: &str) {
    let wire = if w.opts.utf8 {
        name.to_owned()
    } else {
        crate::utf7::encode(name)
    };
    w.string(wire.as_bytes());
}

fn metadata_mailbox(w: &mut Writer<'_>, m: Option<&Mailbox>) {
    match m {
        Some(m) => w.mailbox(m),
        None => w.raw(b"\"\""),
    }
}

fn write_list(w: &mut Writer<'_>, l: &ListCommand) {
    w.text("LIST ");
    if !l.select.is_empty() {
        w.list(&l.select, |w, s| {
            w.text(match s {
                ListSelect::Subscribed => "SUBSCRIBED",
                ListSelect::Remote => "REMOTE",
                ListSelect::RecursiveMatch => "RECURSIVEMATCH",
                ListSelect::SpecialUse => "SPECIAL-USE",
                ListSelect::Other(o) => o,
            })
        });
        w.sp();
    }
    list_name(w, &l.reference);
    w.sp();
    // A single pattern in parentheses is how a bare `LIST` becomes
    // extended, so keep the parentheses whenever nothing else marks it.
    let bare = !l.extended || !l.select.is_empty() || !l.ret.is_empty();
    match l.patterns.as_slice() {
        [one] if bare => list_name(w, one),
        many => w.list(many, |w, p| list_name(w, p)),
    }
    if !l.ret.is_empty() {
        w.text(" RETURN ");
        w.list(&l.ret, |w, r| match r {
            ListReturn::Subscribed => w.text("SUBSCRIBED"),
            ListReturn::Children => w.text("CHILDREN"),
            ListReturn::SpecialUse => w.text("SPECIAL-USE"),
            ListReturn::MyRights => w.text("MYRIGHTS"),
            ListReturn::Status(items) => {
                w.text("STATUS ");
                w.list(items, |w, i| w.text(i.as_str()));
            }
        });
    }
}

fn write_append_message(w: &mut Writer<'_>, m: &AppendMessage) {
    if !m.flags.is_empty() {
        w.sp();
        flags(w, &m.flags);
    }
    if let Some(d) = &m.date {
        w.text(&format!(" \"{d}\""));
    }
    w.sp();
    match &m.data {
        AppendData::Literal { data, binary } => w.literal(data, *binary),
        AppendData::Utf8(data) => {
            w.text("UTF8 (");
            w.literal(data, true);
            w.raw(b")");
        }
        AppendData::Catenate(parts) => {
            w.text("CATENATE ");
            w.list(parts, |w, p| match p {
                CatPart::Url(u) => {
                    w.text("URL ");
                    w.astring(u.as_bytes());
                }
                CatPart::Text(t) => {
                    w.text("TEXT ");
                    w.literal(t, false);
                }
            });
        }
    }
}

fn write_notify(w: &mut Writer<'_>, n: &NotifySet) {
    w.text("NOTIFY SET");
    if n.status {
        w.text(" STATUS");
    }
    for g in &n.groups {
        w.text(" (");
        let boxes = |w: &mut Writer<'_>, name: &str, v: &[Mailbox]| {
            w.text(name);
            w.sp();
            w.list(v, |w, m| w.mailbox(m));
        };
        match &g.filter {
            NotifyFilter::Selected => w.text("SELECTED"),
            NotifyFilter::SelectedDelayed => w.text("SELECTED-DELAYED"),
            NotifyFilter::Inboxes => w.text("INBOXES"),
            NotifyFilter::Personal => w.text("PERSONAL"),
            NotifyFilter::Subscribed => w.text("SUBSCRIBED"),
            NotifyFilter::Subtree(v) => boxes(w, "SUBTREE", v),
            NotifyFilter::Mailboxes(v) => boxes(w, "MAILBOXES", v),
        }
        w.sp();
        if g.events.is_empty() {
            w.text("NONE");
        } else {
            w.list(&g.events, |w, e| match e {
                NotifyEvent::MessageNew(attrs) => {
                    w.text("MessageNew");
                    if !attrs.is_empty() {
                        w.sp();
                        w.list(attrs, |w, a| a.write(w));
                    }
                }
                NotifyEvent::MessageExpunge => w.text("MessageExpunge"),
                NotifyEvent::FlagChange => w.text("FlagChange"),
                NotifyEvent::AnnotationChange => w.text("AnnotationChange"),
                NotifyEvent::MailboxName => w.text("MailboxName"),
                NotifyEvent::SubscriptionChange => w.text("SubscriptionChange"),
                NotifyEvent::MailboxMetadataChange => w.text("MailboxMetadataChange"),
                NotifyEvent::ServerMetadataChange => w.text("ServerMetadataChange"),
                NotifyEvent::Other(o) => w.text(o),
            });
        }
        w.raw(b")");
    }
}
