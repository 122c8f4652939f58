//! Untagged data responses (RFC 9051 §7.2–7.5) and the extensions' data:
//! ENABLED (RFC 5161), ESEARCH (RFC 4731, RFC 5267, RFC 9394), VANISHED
//! (RFC 7162), LIST extended data (RFC 5258), NAMESPACE (RFC 2342), ID
//! (RFC 2971), SORT/THREAD (RFC 5256), QUOTA (RFC 9208), METADATA
//! (RFC 5464), GENURLAUTH/URLFETCH (RFC 4467) and extended URLFETCH
//! (RFC 5524).

use bytes::Bytes;

use super::{BodyStructure, Envelope, Writer};
use crate::command::{Section, SectionText, StatusItem};
use crate::{DateTime, Flag, Mailbox, SequenceSet, Tag};

/// `* LIST` / `* LSUB` data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListItem {
    /// Attributes, e.g. `\HasNoChildren`, `\Sent`.
    pub attributes: Vec<String>,
    /// Hierarchy delimiter, or NIL.
    pub delimiter: Option<char>,
    /// The mailbox.
    pub mailbox: Mailbox,
    /// Extended data (LIST-EXTENDED).
    pub extended: Vec<ListExtended>,
}

/// LIST extended data items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListExtended {
    /// `("CHILDINFO" ("SUBSCRIBED"))` (RFC 5258 §3.5)
    ChildInfo(Vec<String>),
    /// `("OLDNAME" ("name"))` (RFC 9051 §6.3.9.7)
    OldName(Mailbox),
}

/// A STATUS value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusValue {
    /// A number.
    Number(u64),
    /// `NIL` (APPENDLIMIT without a limit).
    Nil,
    /// `(objectid)` (MAILBOXID).
    Id(String),
}

/// One entry of an ESEARCH response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ESearchItem {
    /// `MIN n`
    Min(u32),
    /// `MAX n`
    Max(u32),
    /// `ALL set`
    All(SequenceSet),
    /// `COUNT n`
    Count(u32),
    /// `MODSEQ n` (RFC 7162)
    ModSeq(u64),
    /// `PARTIAL (range set-or-NIL)` (RFC 9394 / RFC 5267)
    Partial {
        /// The requested range.
        range: (i64, i64),
        /// The matching numbers, or NIL.
        set: Option<SequenceSet>,
    },
    /// `ADDTO (position set ...)` (RFC 5267)
    AddTo(Vec<(u32, SequenceSet)>),
    /// `REMOVEFROM (position set ...)` (RFC 5267)
    RemoveFrom(Vec<(u32, SequenceSet)>),
}

/// `* ESEARCH (TAG "x") [UID] items`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ESearch {
    /// The tag of the command that caused it.
    pub tag: Option<Tag>,
    /// Numbers are UIDs.
    pub uid: bool,
    /// Result items.
    pub items: Vec<ESearchItem>,
}

/// A node of a THREAD response (RFC 5256 §4): `id: None` is a dummy parent
/// (a missing message), written only through its children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadNode {
    /// Message number or UID.
    pub id: Option<u32>,
    /// Replies.
    pub children: Vec<ThreadNode>,
}

/// A NAMESPACE description (RFC 2342 / RFC 9051 §7.3.1... §6.3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceDesc {
    /// Prefix, e.g. `""` or `"Other Users/"`.
    pub prefix: String,
    /// Hierarchy delimiter.
    pub delimiter: Option<char>,
}

/// METADATA response payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataEntries {
    /// Entries with values (GETMETADATA).
    Values(Vec<(String, Option<Vec<u8>>)>),
    /// Entry names only (unsolicited change notice).
    Names(Vec<String>),
}

/// One FETCH data item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchItem {
    /// `FLAGS (...)`
    Flags(Vec<Flag>),
    /// `INTERNALDATE "..."`
    InternalDate(DateTime),
    /// `RFC822.SIZE n`
    Rfc822Size(u64),
    /// `UID n`
    Uid(u32),
    /// `MODSEQ (n)`
    ModSeq(u64),
    /// `ENVELOPE (...)`
    Envelope(Box<Envelope>),
    /// `BODY (...)` (non-extensible)
    Body(Box<BodyStructure>),
    /// `BODYSTRUCTURE (...)`
    BodyStructure(Box<BodyStructure>),
    /// `BODY[section]<origin> data`
    BodySection {
        /// The section as requested.
        section: Section,
        /// Origin of a partial fetch.
        origin: Option<u32>,
        /// The data, or NIL.
        data: Option<Bytes>,
    },
    /// `BINARY[part]<origin> data` (literal8 when it holds NUL)
    Binary {
        /// Part path.
        part: Vec<u32>,
        /// Origin of a partial fetch.
        origin: Option<u32>,
        /// The decoded data, or NIL.
        data: Option<Bytes>,
    },
    /// `BINARY.SIZE[part] n`
    BinarySize {
        /// Part path.
        part: Vec<u32>,
        /// Decoded size.
        size: u64,
    },
    /// `RFC822 data`
    Rfc822(Option<Bytes>),
    /// `RFC822.HEADER data`
    Rfc822Header(Option<Bytes>),
    /// `RFC822.TEXT data`
    Rfc822Text(Option<Bytes>),
    /// `SAVEDATE "..."` or NIL (RFC 8514)
    SaveDate(Option<DateTime>),
    /// `EMAILID (id)` (RFC 8474)
    EmailId(String),
    /// `THREADID (id)` or NIL (RFC 8474)
    ThreadId(Option<String>),
}

/// Untagged data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// `CAPABILITY ...`
    Capability(Vec<String>),
    /// `ENABLED ...`
    Enabled(Vec<String>),
    /// `LIST ...`
    List(ListItem),
    /// `LSUB ...`
    Lsub(ListItem),
    /// `STATUS mailbox (...)`
    Status {
        /// The mailbox.
        mailbox: Mailbox,
        /// Items and values.
        items: Vec<(StatusItem, StatusValue)>,
    },
    /// `SEARCH n... [(MODSEQ m)]` (IMAP4rev1 form)
    Search {
        /// Matches.
        nums: Vec<u32>,
        /// Highest mod-sequence of the matches (CONDSTORE).
        modseq: Option<u64>,
    },
    /// `SORT n... [(MODSEQ m)]`
    Sort {
        /// Matches in order.
        nums: Vec<u32>,
        /// Highest mod-sequence (CONDSTORE).
        modseq: Option<u64>,
    },
    /// `THREAD (...)...`
    Thread(Vec<ThreadNode>),
    /// `ESEARCH ...`
    ESearch(ESearch),
    /// `FLAGS (...)`
    Flags(Vec<Flag>),
    /// `n EXISTS`
    Exists(u32),
    /// `n RECENT` (IMAP4rev1)
    Recent(u32),
    /// `n EXPUNGE`
    Expunge(u32),
    /// `VANISHED [(EARLIER)] uids`
    Vanished {
        /// `(EARLIER)`.
        earlier: bool,
        /// Expunged UIDs.
        uids: SequenceSet,
    },
    /// `n FETCH (...)`
    Fetch {
        /// Message sequence number.
        seq: u32,
        /// Items.
        items: Vec<FetchItem>,
    },
    /// `NAMESPACE personal other shared`
    Namespace {
        /// Personal namespaces.
        personal: Vec<NamespaceDesc>,
        /// Other users' namespaces.
        other: Vec<NamespaceDesc>,
        /// Shared namespaces.
        shared: Vec<NamespaceDesc>,
    },
    /// `ID (...)` or `ID NIL`
    Id(Option<Vec<(String, Option<String>)>>),
    /// `QUOTA root (resource usage limit ...)`
    Quota {
        /// Quota root.
        root: String,
        /// (resource, usage, limit).
        resources: Vec<(String, u64, u64)>,
    },
    /// `QUOTAROOT mailbox root...`
    QuotaRoot {
        /// The mailbox.
        mailbox: Mailbox,
        /// Its roots.
        roots: Vec<String>,
    },
    /// `METADATA mailbox ...` (`None` = server, written as `""`)
    Metadata {
        /// The mailbox.
        mailbox: Option<Mailbox>,
        /// Entries.
        entries: MetadataEntries,
    },
    /// `GENURLAUTH url...`
    GenUrlAuth(Vec<String>),
    /// `URLFETCH url data ...`
    UrlFetch(Vec<(String, UrlFetchValue)>),
}

/// What a URLFETCH response carries for one URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlFetchValue {
    /// RFC 4467 form: the data as a string, or NIL (also the RFC 5524
    /// answer for a URL that names nothing).
    Simple(Option<Bytes>),
    /// RFC 5524 §3.2: one parenthesised element per item asked for, in the
    /// order BODYPARTSTRUCTURE, then BODY or BINARY.
    Extended {
        /// `(BODYPARTSTRUCTURE body)`, when asked for.
        body_part_structure: Option<Box<BodyStructure>>,
        /// `(BODY nstring)` or `(BINARY nstring / literal8)`, when asked for.
        data: Option<UrlFetchData>,
    },
}

/// The data element of an extended URLFETCH response (RFC 5524 §3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlFetchData {
    /// `BODY`: as stored, transfer encoding untouched.
    Body(Bytes),
    /// `BINARY`: transfer encoding removed; `None` when it could not be
    /// (written `NIL`).
    Binary(Option<Bytes>),
}

fn flags(w: &mut Writer<'_>, f: &[Flag]) {
    w.list(f, |w, f| w.text(&f.to_string()));
}

fn nums(w: &mut Writer<'_>, name: &str, n: &[u32], modseq: Option<u64>) {
    w.text(name);
    for x in n {
        w.sp();
        w.num(x);
    }
    if let Some(m) = modseq {
        w.text(" (MODSEQ ");
        w.num(m);
        w.raw(b")");
    }
}

fn delimiter(w: &mut Writer<'_>, d: Option<char>) {
    match d {
        Some(c) => {
            let mut b = [0u8; 4];
            w.string(c.encode_utf8(&mut b).as_bytes());
        }
        None => w.nil(),
    }
}

fn thread(w: &mut Writer<'_>, n: &ThreadNode) {
    // Iterative: a chain is written in a loop and branches go on an
    // explicit stack, so no tree shape (a 100k-deep chain with a side
    // branch at every level) can overflow the call stack.
    enum Work<'a> {
        Node(&'a ThreadNode),
        Raw(&'static [u8]),
    }
    let mut stack = vec![Work::Node(n)];
    while let Some(work) = stack.pop() {
        let mut node = match work {
            Work::Raw(b) => {
                w.raw(b);
                continue;
            }
            Work::Node(node) => node,
        };
        let mut first = true;
        loop {
            if let Some(id) = node.id {
                if !first {
                    w.sp();
                }
                w.num(id);
                first = false;
            }
            match node.children.as_slice() {
                [] => break,
                [only] if node.id.is_some() => node = only,
                many => {
                    // thread-members SP thread-nested (RFC 5256 §4)
                    if !first {
                        w.sp();
                    }
                    for c in many.iter().rev() {
                        stack.push(Work::Raw(b")"));
                        stack.push(Work::Node(c));
                        stack.push(Work::Raw(b"("));
                    }
                    break;
                }
            }
        }
    }
}

fn section(w: &mut Writer<'_>, s: &Section) {
    w.raw(b"[");
    let part: Vec<String> = s.part.iter().map(u32::to_string).collect();
    w.text(&part.join("."));
    if let Some(t) = &s.text {
        if !s.part.is_empty() {
            w.raw(b".");
        }
        let names = |w: &mut Writer<'_>, v: &[String]| {
            w.sp();
            w.list(v, |w, h| w.astring(h.as_bytes()));
        };
        match t {
            SectionText::Header => w.text("HEADER"),
            SectionText::HeaderFields(v) => {
                w.text("HEADER.FIELDS");
                names(w, v);
            }
            SectionText::HeaderFieldsNot(v) => {
                w.text("HEADER.FIELDS.NOT");
                names(w, v);
            }
            SectionText::Text => w.text("TEXT"),
            SectionText::Mime => w.text("MIME"),
        }
    }
    w.raw(b"]");
}

fn part(w: &mut Writer<'_>, p: &[u32]) {
    let part: Vec<String> = p.iter().map(u32::to_string).collect();
    w.raw(b"[");
    w.text(&part.join("."));
    w.raw(b"]");
}

fn origin(w: &mut Writer<'_>, o: Option<u32>) {
    if let Some(o) = o {
        w.raw(b"<");
        w.num(o);
        w.raw(b">");
    }
}

impl FetchItem {
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            FetchItem::Flags(f) => {
                w.text("FLAGS ");
                flags(w, f);
            }
            FetchItem::InternalDate(d) => {
                w.text("INTERNALDATE \"");
                w.text(&d.to_string());
                w.raw(b"\"");
            }
            FetchItem::Rfc822Size(n) => {
                w.text("RFC822.SIZE ");
                w.num(n);
            }
            FetchItem::Uid(n) => {
                w.text("UID ");
                w.num(n);
            }
            FetchItem::ModSeq(n) => {
                w.text("MODSEQ (");
                w.num(n);
                w.raw(b")");
            }
            FetchItem::Envelope(e) => {
                w.text("ENVELOPE ");
                w.envelope(e);
            }
            FetchItem::Body(b) => {
                w.text("BODY ");
                w.body_structure(b, false);
            }
            FetchItem::BodyStructure(b) => {
                w.text("BODYSTRUCTURE ");
                w.body_structure(b, true);
            }
            FetchItem::BodySection {
                section: s,
                origin: o,
                data,
            } => {
                w.text("BODY");
                section(w, s);
                origin(w, *o);
                w.sp();
                w.nstring(data.as_deref());
            }
            FetchItem::Binary {
                part: p,
                origin: o,
                data,
            } => {
                w.text("BINARY");
                part(w, p);
                origin(w, *o);
                w.sp();
                w.binary_nstring(data.as_deref());
            }
            FetchItem::BinarySize { part: p, size } => {
                w.text("BINARY.SIZE");
                part(w, p);
                w.sp();
                w.num(size);
            }
            FetchItem::Rfc822(d) => {
                w.text("RFC822 ");
                w.nstring(d.as_deref());
            }
            FetchItem::Rfc822Header(d) => {
                w.text("RFC822.HEADER ");
                w.nstring(d.as_deref());
            }
            FetchItem::Rfc822Text(d) => {
                w.text("RFC822.TEXT ");
                w.nstring(d.as_deref());
            }
            FetchItem::SaveDate(d) => {
                w.text("SAVEDATE ");
                match d {
                    Some(d) => {
                        w.raw(b"\"");
                        w.text(&d.to_string());
                        w.raw(b"\"");
                    }
                    None => w.nil(),
                }
            }
            FetchItem::EmailId(id) => {
                w.text("EMAILID (");
                w.text(id);
                w.raw(b")");
            }
            FetchItem::ThreadId(id) => {
                w.text("THREADID ");
                match id {
                    Some(id) => {
                        w.raw(b"(");
                        w.text(id);
                        w.raw(b")");
                    }
                    None => w.nil(),
                }
            }
        }
    }
}

fn list_item(w: &mut Writer<'_>, name: &str, l: &ListItem) {
    w.text(name);
    w.sp();
    w.list(&l.attributes, |w, a| w.text(a));
    w.sp();
    delimiter(w, l.delimiter);
    w.sp();
    w.mailbox(&l.mailbox);
    if !l.extended.is_empty() {
        w.sp();
        w.list(&l.extended, |w, e| match e {
            ListExtended::ChildInfo(v) => {
                w.text("\"CHILDINFO\" ");
                w.list(v, |w, s| w.string(s.as_bytes()));
            }
            ListExtended::OldName(m) => {
                w.text("\"OLDNAME\" (");
                w.mailbox(m);
                w.raw(b")");
            }
        });
    }
}

fn positions(w: &mut Writer<'_>, name: &str, v: &[(u32, SequenceSet)]) {
    w.text(name);
    w.sp();
    w.list(v, |w, (pos, set)| {
        w.num(pos);
        w.sp();
        w.text(&set.to_string());
    });
}

fn namespaces(w: &mut Writer<'_>, v: &[NamespaceDesc]) {
    if v.is_empty() {
        return w.nil();
    }
    w.list(v, |w, d| {
        w.raw(b"(");
        w.string(d.prefix.as_bytes());
        w.sp();
        delimiter(w, d.delimiter);
        w.raw(b")");
    });
}

impl Data {
    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        match self {
            Data::Capability(c) | Data::Enabled(c) => {
                w.text(if matches!(self, Data::Capability(_)) {
                    "CAPABILITY"
                } else {
                    "ENABLED"
                });
                for cap in c {
                    w.sp();
                    w.text(cap);
                }
            }
            Data::List(l) => list_item(w, "LIST", l),
            Data::Lsub(l) => list_item(w, "LSUB", l),
            Data::Status { mailbox, items } => {
                w.text("STATUS ");
                w.mailbox(mailbox);
                w.sp();
                w.list(items, |w, (item, v)| {
                    w.text(item.as_str());
                    w.sp();
                    match v {
                        StatusValue::Number(n) => w.num(n),
                        StatusValue::Nil => w.nil(),
                        StatusValue::Id(id) => {
                            w.raw(b"(");
                            w.text(id);
                            w.raw(b")");
                        }
                    }
                });
            }
            Data::Search { nums: n, modseq } => nums(w, "SEARCH", n, *modseq),
            Data::Sort { nums: n, modseq } => nums(w, "SORT", n, *modseq),
            Data::Thread(t) => {
                w.text("THREAD");
                if !t.is_empty() {
                    w.sp();
                }
                for n in t {
                    w.raw(b"(");
                    thread(w, n);
                    w.raw(b")");
                }
            }
            Data::ESearch(e) => {
                w.text("ESEARCH");
                if let Some(t) = &e.tag {
                    w.text(" (TAG ");
                    w.string(t.as_bytes());
                    w.raw(b")");
                }
                if e.uid {
                    w.text(" UID");
                }
                for it in &e.items {
                    w.sp();
                    match it {
                        ESearchItem::Min(n) => {
                            w.text("MIN ");
                            w.num(n);
                        }
                        ESearchItem::Max(n) => {
                            w.text("MAX ");
                            w.num(n);
                        }
                        ESearchItem::All(s) => {
                            w.text("ALL ");
                            w.text(&s.to_string());
                        }
                        ESearchItem::Count(n) => {
                            w.text("COUNT ");
                            w.num(n);
                        }
                        ESearchItem::ModSeq(n) => {
                            w.text("MODSEQ ");
                            w.num(n);
                        }
                        ESearchItem::Partial { range, set } => {
                            w.text("PARTIAL (");
                            w.num(range.0);
                            w.raw(b":");
                            w.num(range.1);
                            w.sp();
                            match set {
                                Some(s) if s != &SequenceSet::Set(Vec::new()) => {
                                    w.text(&s.to_string())
                                }
                                _ => w.nil(),
                            }
                            w.raw(b")");
                        }
                        ESearchItem::AddTo(v) => positions(w, "ADDTO", v),
                        ESearchItem::RemoveFrom(v) => positions(w, "REMOVEFROM", v),
                    }
                }
            }
            Data::Flags(f) => {
                w.text("FLAGS ");
                flags(w, f);
            }
            Data::Exists(n) => {
                w.num(n);
                w.text(" EXISTS");
            }
            Data::Recent(n) => {
                w.num(n);
                w.text(" RECENT");
            }
            Data::Expunge(n) => {
                w.num(n);
                w.text(" EXPUNGE");
            }
            Data::Vanished { earlier, uids } => {
                w.text(if *earlier {
                    "VANISHED (EARLIER) "
                } else {
                    "VANISHED "
                });
                w.text(&uids.to_string());
            }
            Data::Fetch { seq, items } => {
                w.num(seq);
                w.text(" FETCH ");
                w.list(items, |w, i| i.write(w));
            }
            Data::Namespace {
                personal,
                other,
                shared,
            } => {
                w.text("NAMESPACE ");
                namespaces(w, personal);
                w.sp();
                namespaces(w, other);
                w.sp();
                namespaces(w, shared);
            }
            Data::Id(None) => w.text("ID NIL"),
            Data::Id(Some(pairs)) => {
                w.text("ID ");
                if pairs.is_empty() {
                    w.nil();
                } else {
                    w.list(pairs, |w, (k, v)| {
                        w.string(k.as_bytes());
                        w.sp();
                        w.nstring(v.as_deref().map(str::as_bytes));
                    });
                }
            }
            Data::Quota { root, resources } => {
                w.text("QUOTA ");
                w.astring(root.as_bytes());
                w.sp();
                w.list(resources, |w, (name, usage, limit)| {
                    w.text(name);
                    w.sp();
                    w.num(usage);
                    w.sp();
                    w.num(limit);
                });
            }
            Data::QuotaRoot { mailbox, roots } => {
                w.text("QUOTAROOT ");
                w.mailbox(mailbox);
                for r in roots {
                    w.sp();
                    w.astring(r.as_bytes());
                }
            }
            Data::Metadata { mailbox, entries } => {
                w.text("METADATA ");
                match mailbox {
                    Some(m) => w.mailbox(m),
                    None => w.raw(b"\"\""),
                }
                w.sp();
                match entries {
                    MetadataEntries::Values(v) => w.list(v, |w, (k, v)| {
                        w.astring(k.as_bytes());
                        w.sp();
                        w.binary_nstring(v.as_deref());
                    }),
                    MetadataEntries::Names(v) => {
                        for (i, k) in v.iter().enumerate() {
                            if i > 0 {
                                w.sp();
                            }
                            w.astring(k.as_bytes());
                        }
                    }
                }
            }
            Data::GenUrlAuth(urls) => {
                w.text("GENURLAUTH");
                for u in urls {
                    w.sp();
                    w.string(u.as_bytes());
                }
            }
            Data::UrlFetch(items) => {
                w.text("URLFETCH");
                for (u, v) in items {
                    w.sp();
                    w.astring(u.as_bytes());
                    match v {
                        UrlFetchValue::Simple(d) => {
                            w.sp();
                            w.nstring(d.as_deref());
                        }
                        UrlFetchValue::Extended {
                            body_part_structure,
                            data,
                        } => {
                            if let Some(b) = body_part_structure {
                                w.text(" (BODYPARTSTRUCTURE ");
                                w.body_structure(b, true);
                                w.raw(b")");
                            }
                            match data {
                                Some(UrlFetchData::Body(d)) => {
                                    w.text(" (BODY ");
                                    w.string(d);
                                    w.raw(b")");
                                }
                                Some(UrlFetchData::Binary(d)) => {
                                    w.text(" (BINARY ");
                                    w.binary_nstring(d.as_deref());
                                    w.raw(b")");
                                }
                                None => {}
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod thread_writer_tests {
    use super::*;

    #[test]
    fn deeply_branching_thread_is_written_without_recursion() {
        // Each level: a leaf reply and the continuing chain. Built and
        // written on a 256 KiB stack, which a recursive writer overflows.
        let out = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let depth = 20_000u32;
                let mut node = ThreadNode {
                    id: Some(depth * 2),
                    children: Vec::new(),
                };
                for i in (1..depth).rev() {
                    let leaf = ThreadNode {
                        id: Some(i * 2 + 1),
                        children: Vec::new(),
                    };
                    node = ThreadNode {
                        id: Some(i * 2),
                        children: vec![leaf, node],
                    };
                }
                let r = super::super::Response::Data(Data::Thread(vec![node]));
                let bytes = r.to_bytes(super::super::EncodeOptions::default());
                // Take the tree apart iteratively too.
                if let super::super::Response::Data(Data::Thread(t)) = r {
                    let mut stack = t;
                    while let Some(mut n) = stack.pop() {
                        stack.append(&mut n.children);
                    }
                }
                bytes
            })
            .map(|h| h.join());
        let Ok(Ok(bytes)) = out else {
            panic!("writer thread failed");
        };
        assert!(bytes.starts_with(b"* THREAD (2 (3)(4 (5)(6 (7)(8 "));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(" (39997)(39998 (39999)(40000))"));
        let opens = bytes.iter().filter(|&&b| b == b'(').count();
        assert_eq!(opens, bytes.iter().filter(|&&b| b == b')').count());
        assert!(text.ends_with("))\r\n"));
    }
}
