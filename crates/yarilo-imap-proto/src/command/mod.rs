//! Typed IMAP commands (RFC 3501, RFC 9051 and the extensions listed in the
//! crate docs). One value per command a client can send; every field is
//! already decoded (mailbox names from modified UTF-7, quoted strings
//! unescaped, literals inline).

mod encode;
mod fetch;
mod list;
pub(crate) mod search;

pub use fetch::{FetchAttr, FetchAttrs, FetchModifiers, Partial, Section, SectionText};
pub use list::{ListCommand, ListReturn, ListSelect, StatusItem};
pub use search::{SearchCommand, SearchKey, SearchKind, SearchReturn, SortCriterion, SortKey};

use crate::{DateTime, Flag, Mailbox, SequenceSet};

/// A command tag, as the client sent it (never contains `+` or specials).
pub type Tag = String;

/// One client command (RFC 9051 §6 and extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    // --- any state (RFC 9051 §6.1) ---
    /// `CAPABILITY`
    Capability,
    /// `NOOP`
    Noop,
    /// `LOGOUT`
    Logout,
    /// `ID (k v ...)` or `ID NIL` (RFC 2971).
    Id(Option<Vec<(String, Option<String>)>>),
    // --- not authenticated (RFC 9051 §6.2) ---
    /// `STARTTLS`
    StartTls,
    /// `AUTHENTICATE mech [initial-response]` (RFC 4959 SASL-IR). The
    /// initial response is still base64; `Some(empty)` means `=`.
    Authenticate {
        /// SASL mechanism name, upper-cased.
        mechanism: String,
        /// Base64 initial response.
        initial: Option<Vec<u8>>,
    },
    /// `LOGIN user password`
    Login {
        /// User name as sent.
        username: Vec<u8>,
        /// Password as sent.
        password: Vec<u8>,
    },
    // --- authenticated (RFC 9051 §6.3) ---
    /// `ENABLE cap...` (RFC 5161), capability names upper-cased.
    Enable(Vec<String>),
    /// `SELECT mailbox [(params)]`
    Select(Select),
    /// `EXAMINE mailbox [(params)]`
    Examine(Select),
    /// `CREATE mailbox [(USE (...))]` (RFC 6154 CREATE-SPECIAL-USE).
    Create {
        /// New mailbox.
        mailbox: Mailbox,
        /// Special-use attributes requested, e.g. `\Drafts`.
        special_use: Vec<String>,
    },
    /// `DELETE mailbox`
    Delete(Mailbox),
    /// `RENAME from to`
    Rename {
        /// Existing name.
        from: Mailbox,
        /// New name.
        to: Mailbox,
    },
    /// `SUBSCRIBE mailbox`
    Subscribe(Mailbox),
    /// `UNSUBSCRIBE mailbox`
    Unsubscribe(Mailbox),
    /// `LIST ...` including LIST-EXTENDED and LIST-STATUS.
    List(ListCommand),
    /// `LSUB reference pattern` (IMAP4rev1).
    Lsub {
        /// Reference name (decoded).
        reference: String,
        /// Pattern with `%`/`*` (decoded).
        pattern: String,
    },
    /// `NAMESPACE` (RFC 2342).
    Namespace,
    /// `STATUS mailbox (items)`
    Status {
        /// Mailbox queried.
        mailbox: Mailbox,
        /// Items requested.
        items: Vec<StatusItem>,
    },
    /// `APPEND mailbox message...` when a whole command was parsed in memory
    /// (the [`Receiver`](crate::Receiver) streams APPEND as
    /// [`AppendEvent`](crate::AppendEvent)s instead).
    Append {
        /// Target mailbox.
        mailbox: Mailbox,
        /// One or more messages (MULTIAPPEND, RFC 3502).
        messages: Vec<AppendMessage>,
    },
    /// `IDLE` (RFC 2177); the client ends it with `DONE`.
    Idle,
    // --- selected (RFC 9051 §6.4) ---
    /// `CHECK` (IMAP4rev1)
    Check,
    /// `CLOSE`
    Close,
    /// `UNSELECT` (RFC 3691)
    Unselect,
    /// `EXPUNGE`
    Expunge,
    /// `UID EXPUNGE set` (RFC 4315)
    UidExpunge(SequenceSet),
    /// `[UID] SEARCH`, `[UID] SORT`, `[UID] THREAD`.
    Search(SearchCommand),
    /// `[UID] FETCH set attrs [(modifiers)]`
    Fetch {
        /// UID FETCH.
        uid: bool,
        /// Messages.
        set: SequenceSet,
        /// What to return.
        attrs: FetchAttrs,
        /// CONDSTORE/QRESYNC modifiers.
        modifiers: FetchModifiers,
    },
    /// `[UID] STORE set [(UNCHANGEDSINCE n)] ±FLAGS[.SILENT] flags`
    Store(Store),
    /// `[UID] COPY set mailbox`
    Copy {
        /// UID COPY.
        uid: bool,
        /// Messages.
        set: SequenceSet,
        /// Destination.
        mailbox: Mailbox,
    },
    /// `[UID] MOVE set mailbox` (RFC 6851)
    Move {
        /// UID MOVE.
        uid: bool,
        /// Messages.
        set: SequenceSet,
        /// Destination.
        mailbox: Mailbox,
    },
    /// `CANCELUPDATE tag...` (RFC 5267 CONTEXT)
    CancelUpdate(Vec<String>),
    // --- issue 6 extensions ---
    /// `GETQUOTA root` (RFC 9208)
    GetQuota(String),
    /// `GETQUOTAROOT mailbox` (RFC 9208)
    GetQuotaRoot(Mailbox),
    /// `SETQUOTA root (resource limit ...)` (RFC 9208)
    SetQuota {
        /// Quota root name.
        root: String,
        /// Resource names (upper-cased) and limits.
        limits: Vec<(String, u64)>,
    },
    /// `GETMETADATA [(options)] mailbox entries` (RFC 5464); an empty
    /// mailbox name addresses server annotations.
    GetMetadata {
        /// MAXSIZE option.
        max_size: Option<u32>,
        /// DEPTH option.
        depth: MetadataDepth,
        /// Mailbox, or `None` for the server ("").
        mailbox: Option<Mailbox>,
        /// Entry names, e.g. `/private/comment`.
        entries: Vec<String>,
    },
    /// `SETMETADATA mailbox (entry value ...)` (RFC 5464); `None` removes.
    SetMetadata {
        /// Mailbox, or `None` for the server.
        mailbox: Option<Mailbox>,
        /// Entries and values.
        entries: Vec<(String, Option<Vec<u8>>)>,
    },
    /// `NOTIFY NONE` / `NOTIFY SET ...` (RFC 5465)
    Notify(Option<NotifySet>),
    /// `COMPRESS mechanism` (RFC 4978), upper-cased.
    Compress(String),
    /// `GENURLAUTH (url mechanism)...` (RFC 4467)
    GenUrlAuth(Vec<(String, String)>),
    /// `RESETKEY [mailbox [mechanism...]]` (RFC 4467)
    ResetKey {
        /// Mailbox whose keys are reset, or all.
        mailbox: Option<Mailbox>,
        /// Mechanisms.
        mechanisms: Vec<String>,
    },
    /// `URLFETCH url...` (RFC 4467, RFC 5524 parameters)
    UrlFetch(Vec<UrlFetchItem>),
    /// `XCLIENT KEY=value...`: a trusted proxy passes the client's address
    /// (`ADDR`, `PORT`, `SESSION`, `TTL`, ...) before login. Keys are
    /// upper-cased; the session checks the peer is trusted.
    XClient(Vec<(String, String)>),
}

impl Command {
    /// The command name as used in metrics and logs, e.g. `UID FETCH`.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Capability => "CAPABILITY",
            Command::Noop => "NOOP",
            Command::Logout => "LOGOUT",
            Command::Id(_) => "ID",
            Command::StartTls => "STARTTLS",
            Command::Authenticate { .. } => "AUTHENTICATE",
            Command::Login { .. } => "LOGIN",
            Command::Enable(_) => "ENABLE",
            Command::Select(_) => "SELECT",
            Command::Examine(_) => "EXAMINE",
            Command::Create { .. } => "CREATE",
            Command::Delete(_) => "DELETE",
            Command::Rename { .. } => "RENAME",
            Command::Subscribe(_) => "SUBSCRIBE",
            Command::Unsubscribe(_) => "UNSUBSCRIBE",
            Command::List(_) => "LIST",
            Command::Lsub { .. } => "LSUB",
            Command::Namespace => "NAMESPACE",
            Command::Status { .. } => "STATUS",
            Command::Append { .. } => "APPEND",
            Command::Idle => "IDLE",
            Command::Check => "CHECK",
            Command::Close => "CLOSE",
            Command::Unselect => "UNSELECT",
            Command::Expunge => "EXPUNGE",
            Command::UidExpunge(_) => "UID EXPUNGE",
            Command::Search(s) => s.name(),
            Command::Fetch { uid: true, .. } => "UID FETCH",
            Command::Fetch { .. } => "FETCH",
            Command::Store(s) if s.uid => "UID STORE",
            Command::Store(_) => "STORE",
            Command::Copy { uid: true, .. } => "UID COPY",
            Command::Copy { .. } => "COPY",
            Command::Move { uid: true, .. } => "UID MOVE",
            Command::Move { .. } => "MOVE",
            Command::CancelUpdate(_) => "CANCELUPDATE",
            Command::GetQuota(_) => "GETQUOTA",
            Command::GetQuotaRoot(_) => "GETQUOTAROOT",
            Command::SetQuota { .. } => "SETQUOTA",
            Command::GetMetadata { .. } => "GETMETADATA",
            Command::SetMetadata { .. } => "SETMETADATA",
            Command::Notify(_) => "NOTIFY",
            Command::Compress(_) => "COMPRESS",
            Command::GenUrlAuth(_) => "GENURLAUTH",
            Command::ResetKey { .. } => "RESETKEY",
            Command::UrlFetch(_) => "URLFETCH",
            Command::XClient(_) => "XCLIENT",
        }
    }
}

/// SELECT / EXAMINE with their RFC 7162 parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Select {
    /// Mailbox to open.
    pub mailbox: Mailbox,
    /// `(CONDSTORE)` was given.
    pub condstore: bool,
    /// `(QRESYNC (...))` was given.
    pub qresync: Option<QResync>,
}

/// QRESYNC parameters of SELECT/EXAMINE (RFC 7162 §3.2.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QResync {
    /// Last known UIDVALIDITY.
    pub uidvalidity: u32,
    /// Last known HIGHESTMODSEQ.
    pub modseq: u64,
    /// UIDs the client knows about.
    pub known_uids: Option<SequenceSet>,
    /// Sequence-number/UID match data.
    pub seq_match: Option<(SequenceSet, SequenceSet)>,
}

/// How STORE changes flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// `FLAGS`: replace.
    Replace,
    /// `+FLAGS`: add.
    Add,
    /// `-FLAGS`: remove.
    Remove,
}

/// `[UID] STORE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    /// UID STORE.
    pub uid: bool,
    /// Messages.
    pub set: SequenceSet,
    /// `UNCHANGEDSINCE` (RFC 7162).
    pub unchanged_since: Option<u64>,
    /// Replace / add / remove.
    pub mode: StoreMode,
    /// `.SILENT`.
    pub silent: bool,
    /// The flags.
    pub flags: Vec<Flag>,
}

/// One message of an APPEND parsed in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendMessage {
    /// Initial flags.
    pub flags: Vec<Flag>,
    /// INTERNALDATE to set.
    pub date: Option<DateTime>,
    /// The message content.
    pub data: AppendData,
}

/// The content of one APPENDed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendData {
    /// A literal (`binary` for literal8, RFC 3516).
    Literal {
        /// The message.
        data: Vec<u8>,
        /// Sent as `~{n}`.
        binary: bool,
    },
    /// `UTF8 (~{n}...)` (RFC 6855).
    Utf8(Vec<u8>),
    /// `CATENATE (...)` (RFC 4469).
    Catenate(Vec<CatPart>),
}

/// One CATENATE part (RFC 4469).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatPart {
    /// `URL "/mailbox;UIDVALIDITY=x/;UID=y"`.
    Url(String),
    /// `TEXT {n}` literal data.
    Text(Vec<u8>),
}

/// GETMETADATA DEPTH (RFC 5464 §4.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetadataDepth {
    /// Only the entry itself (default).
    #[default]
    Zero,
    /// The entry and its immediate children.
    One,
    /// The whole subtree.
    Infinity,
}

/// `NOTIFY SET [STATUS] (filter events)...` (RFC 5465 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifySet {
    /// `STATUS` indicator.
    pub status: bool,
    /// Event groups.
    pub groups: Vec<NotifyGroup>,
}

/// One `(filter-mailboxes events)` group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyGroup {
    /// Which mailboxes.
    pub filter: NotifyFilter,
    /// Which events; empty means `NONE`.
    pub events: Vec<NotifyEvent>,
}

/// RFC 5465 filter-mailboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyFilter {
    /// `SELECTED`
    Selected,
    /// `SELECTED-DELAYED`
    SelectedDelayed,
    /// `INBOXES`
    Inboxes,
    /// `PERSONAL`
    Personal,
    /// `SUBSCRIBED`
    Subscribed,
    /// `SUBTREE mailboxes`
    Subtree(Vec<Mailbox>),
    /// `MAILBOXES mailboxes`
    Mailboxes(Vec<Mailbox>),
}

/// RFC 5465 event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyEvent {
    /// `MessageNew [(fetch-att...)]`
    MessageNew(Vec<FetchAttr>),
    /// `MessageExpunge`
    MessageExpunge,
    /// `FlagChange`
    FlagChange,
    /// `AnnotationChange`
    AnnotationChange,
    /// `MailboxName`
    MailboxName,
    /// `SubscriptionChange`
    SubscriptionChange,
    /// `MailboxMetadataChange`
    MailboxMetadataChange,
    /// `ServerMetadataChange`
    ServerMetadataChange,
    /// Another event name (upper-cased); the session answers
    /// `[BADEVENT]`.
    Other(String),
}

/// One URLFETCH argument (RFC 4467 §7, RFC 5524 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlFetchItem {
    /// The URL.
    pub url: String,
    /// `BODYPARTSTRUCTURE` requested.
    pub body_part_structure: bool,
    /// `BINARY` requested.
    pub binary: bool,
    /// `BODY` requested.
    pub body: bool,
    /// The RFC 5524 parameter list was present.
    pub extended: bool,
}
