//! Typed server responses (RFC 9051 §7 and the extensions' data) and their
//! encoder. The session builds values; [`Response::encode`] spells them with
//! the quoting rules of [`Writer`].

mod body;
mod code;
mod data;
mod writer;

pub use body::{Address, BodyExt, BodyStructure, Disposition, Envelope, NString, SinglePartKind};
pub use code::Code;
pub use data::{
    Data, ESearch, ESearchItem, FetchItem, ListExtended, ListItem, MetadataEntries, NamespaceDesc,
    StatusValue, ThreadNode, UrlFetchData, UrlFetchValue,
};
pub use writer::{EncodeOptions, Writer};

use crate::Tag;

/// The status of a status response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusKind {
    /// `OK`
    Ok,
    /// `NO`
    No,
    /// `BAD`
    Bad,
    /// `PREAUTH` (greeting only)
    PreAuth,
    /// `BYE`
    Bye,
}

impl StatusKind {
    fn as_str(self) -> &'static str {
        match self {
            StatusKind::Ok => "OK",
            StatusKind::No => "NO",
            StatusKind::Bad => "BAD",
            StatusKind::PreAuth => "PREAUTH",
            StatusKind::Bye => "BYE",
        }
    }
}

/// One response line (possibly with literals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `tag OK [code] text`, or untagged `* OK/NO/BAD/PREAUTH/BYE ...`.
    Status {
        /// `None` for untagged.
        tag: Option<Tag>,
        /// The status.
        kind: StatusKind,
        /// Optional response code.
        code: Option<Code>,
        /// Human-readable text (CR/LF are replaced when written).
        text: String,
    },
    /// `+ text` continuation request.
    Continue(String),
    /// `+ base64` SASL challenge (already base64, may be empty).
    Challenge(String),
    /// `* ...` untagged data.
    Data(Data),
}

impl Response {
    /// A tagged OK.
    pub fn ok(tag: impl Into<Tag>, code: Option<Code>, text: impl Into<String>) -> Self {
        Response::Status {
            tag: Some(tag.into()),
            kind: StatusKind::Ok,
            code,
            text: text.into(),
        }
    }

    /// A tagged NO.
    pub fn no(tag: impl Into<Tag>, code: Option<Code>, text: impl Into<String>) -> Self {
        Response::Status {
            tag: Some(tag.into()),
            kind: StatusKind::No,
            code,
            text: text.into(),
        }
    }

    /// A BAD, tagged when the tag is known.
    pub fn bad(tag: Option<Tag>, code: Option<Code>, text: impl Into<String>) -> Self {
        Response::Status {
            tag,
            kind: StatusKind::Bad,
            code,
            text: text.into(),
        }
    }

    /// Appends the wire form (CRLF included) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>, opts: EncodeOptions) {
        let mut w = Writer::new(out, opts);
        match self {
            Response::Status {
                tag,
                kind,
                code,
                text,
            } => {
                match tag {
                    Some(t) => w.text(t),
                    None => w.raw(b"*"),
                }
                w.sp();
                w.text(kind.as_str());
                if let Some(c) = code {
                    w.sp();
                    c.write(&mut w);
                }
                // RFC 3501 requires text; RFC 9051 makes it optional.
                // Send something so IMAP4rev1 clients parse us.
                w.sp();
                if text.is_empty() {
                    w.text(kind.as_str().to_ascii_lowercase().as_str());
                } else {
                    w.resp_text(text);
                }
            }
            Response::Continue(text) => {
                w.raw(b"+ ");
                w.resp_text(if text.is_empty() { "OK" } else { text });
            }
            Response::Challenge(b64) => {
                w.raw(b"+ ");
                w.resp_text(b64);
            }
            Response::Data(d) => {
                w.raw(b"* ");
                d.write(&mut w);
            }
        }
        w.raw(b"\r\n");
    }

    /// The wire form as a new buffer.
    pub fn to_bytes(&self, opts: EncodeOptions) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out, opts);
        out
    }
}
