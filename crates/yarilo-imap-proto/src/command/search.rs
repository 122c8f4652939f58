//! SEARCH keys as a typed tree (RFC 9051 §6.4.4) with ESEARCH (RFC 4731),
//! SEARCHRES (RFC 5182), CONDSTORE (RFC 7162), WITHIN (RFC 5032), SAVEDATE
//! (RFC 8514), CONTEXT (RFC 5267), PARTIAL (RFC 9394), SORT/THREAD (RFC 5256,
//! RFC 5957 SORT=DISPLAY) and ESORT.

use crate::{Date, SequenceSet};

/// `[UID] SEARCH`, `[UID] SORT` or `[UID] THREAD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchCommand {
    /// The UID form.
    pub uid: bool,
    /// SEARCH, SORT or THREAD.
    pub kind: SearchKind,
    /// `RETURN (...)`; `None` means the command had no RETURN (plain
    /// `* SEARCH` reply), `Some(empty)` means `RETURN ()` (= ALL, RFC 4731).
    pub ret: Option<Vec<SearchReturn>>,
    /// `CHARSET x` (upper-cased); SORT/THREAD always carry one.
    pub charset: Option<String>,
    /// The criteria, ANDed. Never empty.
    pub keys: Vec<SearchKey>,
}

impl SearchCommand {
    pub(crate) fn name(&self) -> &'static str {
        match (&self.kind, self.uid) {
            (SearchKind::Search, false) => "SEARCH",
            (SearchKind::Search, true) => "UID SEARCH",
            (SearchKind::Sort(_), false) => "SORT",
            (SearchKind::Sort(_), true) => "UID SORT",
            (SearchKind::Thread(_), false) => "THREAD",
            (SearchKind::Thread(_), true) => "UID THREAD",
        }
    }
}

/// Which of the three search-shaped commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchKind {
    /// SEARCH
    Search,
    /// SORT with its criteria (RFC 5256).
    Sort(Vec<SortCriterion>),
    /// THREAD with its algorithm name, upper-cased (RFC 5256).
    Thread(String),
}

/// A sort key with its REVERSE flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortCriterion {
    /// `REVERSE`.
    pub reverse: bool,
    /// The key.
    pub key: SortKey,
}

/// RFC 5256 / RFC 5957 sort keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// `ARRIVAL`
    Arrival,
    /// `CC`
    Cc,
    /// `DATE`
    Date,
    /// `FROM`
    From,
    /// `SIZE`
    Size,
    /// `SUBJECT`
    Subject,
    /// `TO`
    To,
    /// `DISPLAYFROM` (RFC 5957)
    DisplayFrom,
    /// `DISPLAYTO` (RFC 5957)
    DisplayTo,
}

/// ESEARCH / CONTEXT / PARTIAL return options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchReturn {
    /// `MIN`
    Min,
    /// `MAX`
    Max,
    /// `ALL`
    All,
    /// `COUNT`
    Count,
    /// `SAVE` (RFC 5182)
    Save,
    /// `UPDATE` (RFC 5267)
    Update,
    /// `CONTEXT` (RFC 5267)
    Context,
    /// `PARTIAL first:last` (RFC 5267 positive ranges; RFC 9394 adds
    /// negative ranges counted from the end).
    Partial(i64, i64),
}

/// One search key. `And` is the parenthesised list; the command's top level
/// is an implicit `And`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchKey {
    /// `ALL`
    All,
    /// `ANSWERED`
    Answered,
    /// `BCC s`
    Bcc(Vec<u8>),
    /// `BEFORE d`
    Before(Date),
    /// `BODY s`
    Body(Vec<u8>),
    /// `CC s`
    Cc(Vec<u8>),
    /// `DELETED`
    Deleted,
    /// `DRAFT`
    Draft,
    /// `FLAGGED`
    Flagged,
    /// `FROM s`
    From(Vec<u8>),
    /// `HEADER name s`
    Header(String, Vec<u8>),
    /// `KEYWORD k`
    Keyword(String),
    /// `LARGER n`
    Larger(u64),
    /// `NEW` (IMAP4rev1)
    New,
    /// `NOT key`
    Not(Box<SearchKey>),
    /// `OLD` (IMAP4rev1)
    Old,
    /// `ON d`
    On(Date),
    /// `OR a b`
    Or(Box<SearchKey>, Box<SearchKey>),
    /// `RECENT` (IMAP4rev1)
    Recent,
    /// `SEEN`
    Seen,
    /// `SENTBEFORE d`
    SentBefore(Date),
    /// `SENTON d`
    SentOn(Date),
    /// `SENTSINCE d`
    SentSince(Date),
    /// `SINCE d`
    Since(Date),
    /// `SMALLER n`
    Smaller(u64),
    /// `SUBJECT s`
    Subject(Vec<u8>),
    /// `TEXT s`
    Text(Vec<u8>),
    /// `TO s`
    To(Vec<u8>),
    /// `UID set`
    Uid(SequenceSet),
    /// `UNANSWERED`
    Unanswered,
    /// `UNDELETED`
    Undeleted,
    /// `UNDRAFT`
    Undraft,
    /// `UNFLAGGED`
    Unflagged,
    /// `UNKEYWORD k`
    Unkeyword(String),
    /// `UNSEEN`
    Unseen,
    /// A bare sequence set (or `$`).
    SequenceSet(SequenceSet),
    /// `( keys )`
    And(Vec<SearchKey>),
    /// `MODSEQ ["entry" type] n` (RFC 7162); the entry is kept only for
    /// completeness.
    ModSeq {
        /// Flag metadata entry name and type (`priv`/`shared`/`all`).
        entry: Option<(String, String)>,
        /// Minimum mod-sequence.
        modseq: u64,
    },
    /// `YOUNGER seconds` (RFC 5032)
    Younger(u64),
    /// `OLDER seconds` (RFC 5032)
    Older(u64),
    /// `SAVEDBEFORE d` (RFC 8514)
    SavedBefore(Date),
    /// `SAVEDON d` (RFC 8514)
    SavedOn(Date),
    /// `SAVEDSINCE d` (RFC 8514)
    SavedSince(Date),
    /// `SAVEDATESUPPORTED` (RFC 8514)
    SaveDateSupported,
    /// `EMAILID id` (RFC 8474)
    EmailId(String),
    /// `THREADID id` (RFC 8474)
    ThreadId(String),
}
