//! LIST (RFC 9051 §6.3.9 with LIST-EXTENDED RFC 5258, LIST-STATUS RFC 5819,
//! SPECIAL-USE RFC 6154) and STATUS items.

/// `LIST [(selection)] reference patterns [RETURN (options)]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListCommand {
    /// Selection options.
    pub select: Vec<ListSelect>,
    /// Reference name (decoded).
    pub reference: String,
    /// One or more patterns (decoded); `*` and `%` are wildcards.
    pub patterns: Vec<String>,
    /// Return options.
    pub ret: Vec<ListReturn>,
    /// The command used the extended syntax (selection, several patterns or
    /// RETURN): replies may carry extended data.
    pub extended: bool,
}

/// LIST selection options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListSelect {
    /// `SUBSCRIBED`
    Subscribed,
    /// `REMOTE`
    Remote,
    /// `RECURSIVEMATCH`
    RecursiveMatch,
    /// `SPECIAL-USE`
    SpecialUse,
    /// Unknown option (upper-cased); RFC 5258 says reject with BAD — the
    /// parser already does.
    Other(String),
}

/// LIST return options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListReturn {
    /// `SUBSCRIBED`
    Subscribed,
    /// `CHILDREN`
    Children,
    /// `SPECIAL-USE`
    SpecialUse,
    /// `STATUS (items)` (RFC 5819)
    Status(Vec<StatusItem>),
    /// `MYRIGHTS` (RFC 8440) — parsed so it can be refused politely.
    MyRights,
}

/// STATUS data items (RFC 9051 §6.3.11, RFC 7162, RFC 8438, RFC 7889, RFC 8474).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusItem {
    /// `MESSAGES`
    Messages,
    /// `UIDNEXT`
    UidNext,
    /// `UIDVALIDITY`
    UidValidity,
    /// `UNSEEN`
    Unseen,
    /// `DELETED`
    Deleted,
    /// `SIZE` (STATUS=SIZE)
    Size,
    /// `RECENT` (IMAP4rev1)
    Recent,
    /// `HIGHESTMODSEQ` (CONDSTORE)
    HighestModSeq,
    /// `APPENDLIMIT`
    AppendLimit,
    /// `MAILBOXID` (OBJECTID)
    MailboxId,
    /// `DELETED-STORAGE` (RFC 9208 §4.3)
    DeletedStorage,
}

impl StatusItem {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusItem::Messages => "MESSAGES",
            StatusItem::UidNext => "UIDNEXT",
            StatusItem::UidValidity => "UIDVALIDITY",
            StatusItem::Unseen => "UNSEEN",
            StatusItem::Deleted => "DELETED",
            StatusItem::Size => "SIZE",
            StatusItem::Recent => "RECENT",
            StatusItem::HighestModSeq => "HIGHESTMODSEQ",
            StatusItem::AppendLimit => "APPENDLIMIT",
            StatusItem::MailboxId => "MAILBOXID",
            StatusItem::DeletedStorage => "DELETED-STORAGE",
        }
    }

    /// Parses a wire name, case-insensitively.
    pub fn from_name(s: &str) -> Option<Self> {
        const ALL: [StatusItem; 11] = [
            StatusItem::Messages,
            StatusItem::UidNext,
            StatusItem::UidValidity,
            StatusItem::Unseen,
            StatusItem::Deleted,
            StatusItem::Size,
            StatusItem::Recent,
            StatusItem::HighestModSeq,
            StatusItem::AppendLimit,
            StatusItem::MailboxId,
            StatusItem::DeletedStorage,
        ];
        ALL.into_iter().find(|i| i.as_str().eq_ignore_ascii_case(s))
    }
}
