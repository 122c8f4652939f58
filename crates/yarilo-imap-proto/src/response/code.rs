//! Response codes (RFC 9051 §7.1 and the extensions' own codes: RFC 4315
//! UIDPLUS, RFC 7162 CONDSTORE/QRESYNC, RFC 3516 BINARY, RFC 4978 COMPRESS,
//! RFC 5464 METADATA, RFC 5465 NOTIFY, RFC 4467 URLAUTH, RFC 4469 CATENATE,
//! RFC 7889 APPENDLIMIT / RFC 4469 TOOBIG, RFC 6154 USEATTR, RFC 5182
//! NOTSAVED, RFC 5530 codes).

use super::Writer;
use crate::{Flag, SequenceSet};

/// A response code inside `[...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    /// `ALERT`: show the text to the user.
    Alert,
    /// `ALREADYEXISTS`
    AlreadyExists,
    /// `APPENDUID uidvalidity uids` (RFC 4315)
    AppendUid {
        /// UIDVALIDITY of the target.
        uidvalidity: u32,
        /// UIDs assigned.
        uids: SequenceSet,
    },
    /// `AUTHENTICATIONFAILED`
    AuthenticationFailed,
    /// `AUTHORIZATIONFAILED`
    AuthorizationFailed,
    /// `BADCHARSET [(charsets)]`
    BadCharset(Vec<String>),
    /// `CANNOT`
    Cannot,
    /// `CAPABILITY caps`
    Capability(Vec<String>),
    /// `CLIENTBUG`
    ClientBug,
    /// `CLOSED` (RFC 7162)
    Closed,
    /// `CONTACTADMIN`
    ContactAdmin,
    /// `COPYUID uidvalidity from to` (RFC 4315)
    CopyUid {
        /// UIDVALIDITY of the target.
        uidvalidity: u32,
        /// Source UIDs.
        from: SequenceSet,
        /// Target UIDs, in the same order.
        to: SequenceSet,
    },
    /// `CORRUPTION`
    Corruption,
    /// `EXPIRED`
    Expired,
    /// `EXPUNGEISSUED`
    ExpungeIssued,
    /// `HASCHILDREN`
    HasChildren,
    /// `INUSE`
    InUse,
    /// `LIMIT`
    Limit,
    /// `NONEXISTENT`
    NonExistent,
    /// `NOPERM`
    NoPerm,
    /// `OVERQUOTA`
    OverQuota,
    /// `PARSE`
    Parse,
    /// `PERMANENTFLAGS (flags)`
    PermanentFlags(Vec<Flag>),
    /// `PRIVACYREQUIRED`
    PrivacyRequired,
    /// `READ-ONLY`
    ReadOnly,
    /// `READ-WRITE`
    ReadWrite,
    /// `SERVERBUG`
    ServerBug,
    /// `TRYCREATE`
    TryCreate,
    /// `UIDNEXT n`
    UidNext(u32),
    /// `UIDNOTSTICKY`
    UidNotSticky,
    /// `UIDVALIDITY n`
    UidValidity(u32),
    /// `UNAVAILABLE`
    Unavailable,
    /// `UNKNOWN-CTE` (RFC 3516)
    UnknownCte,
    /// `UNSEEN n` (IMAP4rev1)
    Unseen(u32),
    /// `HIGHESTMODSEQ n` (RFC 7162)
    HighestModSeq(u64),
    /// `NOMODSEQ` (RFC 7162)
    NoModSeq,
    /// `MODIFIED set` (RFC 7162)
    Modified(SequenceSet),
    /// `COMPRESSIONACTIVE` (RFC 4978)
    CompressionActive,
    /// `TOOBIG` (RFC 4469, RFC 7889)
    TooBig,
    /// `USEATTR` (RFC 6154)
    UseAttr,
    /// `NOTSAVED` (RFC 5182)
    NotSaved,
    /// `BADURL url` (RFC 4469)
    BadUrl(String),
    /// `BADEVENT (events)` (RFC 5465)
    BadEvent(Vec<String>),
    /// `NOTIFICATIONOVERFLOW` (RFC 5465)
    NotificationOverflow,
    /// `METADATA LONGENTRIES n` (RFC 5464)
    MetadataLongEntries(u32),
    /// `METADATA MAXSIZE n` (RFC 5464)
    MetadataMaxSize(u32),
    /// `METADATA TOOMANY` (RFC 5464)
    MetadataTooMany,
    /// `METADATA NOPRIVATE` (RFC 5464)
    MetadataNoPrivate,
    /// `CONTEXT` is not a code; `NOUPDATE "tag"` (RFC 5267)
    NoUpdate(String),
    /// `UNKNOWN-CTE` sibling for SORT/THREAD: `BADCOMPARATOR` is not used;
    /// any other code: name and optional raw argument text.
    Other(String, Option<String>),
}

impl Code {
    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        w.raw(b"[");
        let simple = |w: &mut Writer<'_>, s: &str| w.text(s);
        match self {
            Code::Alert => simple(w, "ALERT"),
            Code::AlreadyExists => simple(w, "ALREADYEXISTS"),
            Code::AppendUid { uidvalidity, uids } => {
                w.text("APPENDUID ");
                w.num(uidvalidity);
                w.sp();
                w.text(&uids.to_string());
            }
            Code::AuthenticationFailed => simple(w, "AUTHENTICATIONFAILED"),
            Code::AuthorizationFailed => simple(w, "AUTHORIZATIONFAILED"),
            Code::BadCharset(v) => {
                w.text("BADCHARSET");
                if !v.is_empty() {
                    w.sp();
                    w.list(v, |w, s| w.astring(s.as_bytes()));
                }
            }
            Code::Cannot => simple(w, "CANNOT"),
            Code::Capability(caps) => {
                w.text("CAPABILITY");
                for c in caps {
                    w.sp();
                    w.text(c);
                }
            }
            Code::ClientBug => simple(w, "CLIENTBUG"),
            Code::Closed => simple(w, "CLOSED"),
            Code::ContactAdmin => simple(w, "CONTACTADMIN"),
            Code::CopyUid {
                uidvalidity,
                from,
                to,
            } => {
                w.text("COPYUID ");
                w.num(uidvalidity);
                w.sp();
                w.text(&from.to_string());
                w.sp();
                w.text(&to.to_string());
            }
            Code::Corruption => simple(w, "CORRUPTION"),
            Code::Expired => simple(w, "EXPIRED"),
            Code::ExpungeIssued => simple(w, "EXPUNGEISSUED"),
            Code::HasChildren => simple(w, "HASCHILDREN"),
            Code::InUse => simple(w, "INUSE"),
            Code::Limit => simple(w, "LIMIT"),
            Code::NonExistent => simple(w, "NONEXISTENT"),
            Code::NoPerm => simple(w, "NOPERM"),
            Code::OverQuota => simple(w, "OVERQUOTA"),
            Code::Parse => simple(w, "PARSE"),
            Code::PermanentFlags(flags) => {
                w.text("PERMANENTFLAGS ");
                w.list(flags, |w, f| w.text(&f.to_string()));
            }
            Code::PrivacyRequired => simple(w, "PRIVACYREQUIRED"),
            Code::ReadOnly => simple(w, "READ-ONLY"),
            Code::ReadWrite => simple(w, "READ-WRITE"),
            Code::ServerBug => simple(w, "SERVERBUG"),
            Code::TryCreate => simple(w, "TRYCREATE"),
            Code::UidNext(n) => {
                w.text("UIDNEXT ");
                w.num(n);
            }
            Code::UidNotSticky => simple(w, "UIDNOTSTICKY"),
            Code::UidValidity(n) => {
                w.text("UIDVALIDITY ");
                w.num(n);
            }
            Code::Unavailable => simple(w, "UNAVAILABLE"),
            Code::UnknownCte => simple(w, "UNKNOWN-CTE"),
            Code::Unseen(n) => {
                w.text("UNSEEN ");
                w.num(n);
            }
            Code::HighestModSeq(n) => {
                w.text("HIGHESTMODSEQ ");
                w.num(n);
            }
            Code::NoModSeq => simple(w, "NOMODSEQ"),
            Code::Modified(set) => {
                w.text("MODIFIED ");
                w.text(&set.to_string());
            }
            Code::CompressionActive => simple(w, "COMPRESSIONACTIVE"),
            Code::TooBig => simple(w, "TOOBIG"),
            Code::UseAttr => simple(w, "USEATTR"),
            Code::NotSaved => simple(w, "NOTSAVED"),
            Code::BadUrl(u) => {
                w.text("BADURL ");
                // The URL runs to the `]`; keep it free of it and of CRLF.
                w.resp_text(&u.replace(']', "%5D"));
            }
            Code::BadEvent(v) => {
                w.text("BADEVENT ");
                w.list(v, |w, s| w.text(s));
            }
            Code::NotificationOverflow => simple(w, "NOTIFICATIONOVERFLOW"),
            Code::MetadataLongEntries(n) => {
                w.text("METADATA LONGENTRIES ");
                w.num(n);
            }
            Code::MetadataMaxSize(n) => {
                w.text("METADATA MAXSIZE ");
                w.num(n);
            }
            Code::MetadataTooMany => simple(w, "METADATA TOOMANY"),
            Code::MetadataNoPrivate => simple(w, "METADATA NOPRIVATE"),
            Code::NoUpdate(tag) => {
                w.text("NOUPDATE ");
                w.string(tag.as_bytes());
            }
            Code::Other(name, arg) => {
                w.resp_text(&name.replace(']', ""));
                if let Some(a) = arg {
                    w.sp();
                    w.resp_text(&a.replace(']', ""));
                }
            }
        }
        w.raw(b"]");
    }
}
