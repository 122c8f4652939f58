//! ENVELOPE and BODY/BODYSTRUCTURE as typed values (RFC 9051 §7.5.2,
//! formal syntax `envelope`, `body`), with their encoding.
//!
//! Values taken from message headers are raw bytes: the writer picks
//! quoted or literal so 8-bit header text is never corrupted.

use super::Writer;

/// A nullable string from a message (`nstring`).
pub type NString = Option<Vec<u8>>;

/// One address of an envelope (RFC 9051 `address`). A group start has
/// `host: None` and the group name in `mailbox`; a group end has all NIL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Address {
    /// Display name.
    pub name: NString,
    /// Source route (always NIL in practice).
    pub adl: NString,
    /// Local part, or group name.
    pub mailbox: NString,
    /// Domain; NIL marks group syntax.
    pub host: NString,
}

/// ENVELOPE.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Envelope {
    /// Date header, verbatim.
    pub date: NString,
    /// Subject header, verbatim.
    pub subject: NString,
    /// From.
    pub from: Vec<Address>,
    /// Sender (defaults to From, RFC 9051 §7.5.2).
    pub sender: Vec<Address>,
    /// Reply-To (defaults to From).
    pub reply_to: Vec<Address>,
    /// To.
    pub to: Vec<Address>,
    /// Cc.
    pub cc: Vec<Address>,
    /// Bcc.
    pub bcc: Vec<Address>,
    /// In-Reply-To.
    pub in_reply_to: NString,
    /// Message-ID.
    pub message_id: NString,
}

/// Content-Disposition: type and parameters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Disposition {
    /// e.g. `attachment`.
    pub kind: Vec<u8>,
    /// Parameters (`filename`, ...).
    pub params: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Extension data shared by both body kinds (BODYSTRUCTURE only).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BodyExt {
    /// Content-Disposition.
    pub disposition: Option<Disposition>,
    /// Content-Language values.
    pub language: Vec<Vec<u8>>,
    /// Content-Location.
    pub location: NString,
}

/// What distinguishes the single-part kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinglePartKind {
    /// Any type other than text/* and message/rfc822 (or message/global).
    Basic,
    /// text/*: line count.
    Text {
        /// Lines of the encoded body.
        lines: u32,
    },
    /// message/rfc822: the encapsulated message.
    Message {
        /// Its envelope.
        envelope: Box<Envelope>,
        /// Its structure.
        body: Box<BodyStructure>,
        /// Lines of the encoded body.
        lines: u32,
    },
}

/// BODY / BODYSTRUCTURE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyStructure {
    /// A leaf part.
    Single {
        /// Media type, e.g. `TEXT`.
        media_type: Vec<u8>,
        /// Subtype, e.g. `PLAIN`.
        subtype: Vec<u8>,
        /// Content-Type parameters.
        params: Vec<(Vec<u8>, Vec<u8>)>,
        /// Content-ID.
        id: NString,
        /// Content-Description.
        description: NString,
        /// Content-Transfer-Encoding (default `7BIT`).
        encoding: Vec<u8>,
        /// Size in octets of the encoded body.
        size: u32,
        /// Kind-specific fields.
        kind: SinglePartKind,
        /// Content-MD5 (extension data).
        md5: NString,
        /// Further extension data.
        ext: BodyExt,
    },
    /// multipart/*.
    Multi {
        /// The parts (at least one).
        parts: Vec<BodyStructure>,
        /// Subtype, e.g. `MIXED`.
        subtype: Vec<u8>,
        /// Content-Type parameters (extension data).
        params: Vec<(Vec<u8>, Vec<u8>)>,
        /// Further extension data.
        ext: BodyExt,
    },
}

impl Writer<'_> {
    fn addresses(&mut self, a: &[Address]) {
        if a.is_empty() {
            return self.nil();
        }
        self.raw(b"(");
        for addr in a {
            self.raw(b"(");
            self.nstring(addr.name.as_deref());
            self.sp();
            self.nstring(addr.adl.as_deref());
            self.sp();
            self.nstring(addr.mailbox.as_deref());
            self.sp();
            self.nstring(addr.host.as_deref());
            self.raw(b")");
        }
        self.raw(b")");
    }

    /// Writes an ENVELOPE value.
    pub fn envelope(&mut self, e: &Envelope) {
        self.raw(b"(");
        self.nstring(e.date.as_deref());
        self.sp();
        self.nstring(e.subject.as_deref());
        for list in [&e.from, &e.sender, &e.reply_to, &e.to, &e.cc, &e.bcc] {
            self.sp();
            self.addresses(list);
        }
        self.sp();
        self.nstring(e.in_reply_to.as_deref());
        self.sp();
        self.nstring(e.message_id.as_deref());
        self.raw(b")");
    }

    fn params(&mut self, p: &[(Vec<u8>, Vec<u8>)]) {
        if p.is_empty() {
            return self.nil();
        }
        self.raw(b"(");
        for (i, (k, v)) in p.iter().enumerate() {
            if i > 0 {
                self.sp();
            }
            self.string(k);
            self.sp();
            self.string(v);
        }
        self.raw(b")");
    }

    fn body_ext(&mut self, e: &BodyExt) {
        self.sp();
        match &e.disposition {
            None => self.nil(),
            Some(d) => {
                self.raw(b"(");
                self.string(&d.kind);
                self.sp();
                self.params(&d.params);
                self.raw(b")");
            }
        }
        self.sp();
        match e.language.as_slice() {
            [] => self.nil(),
            [one] => self.string(one),
            many => self.list(many, |w, l| w.string(l)),
        }
        self.sp();
        self.nstring(e.location.as_deref());
    }

    /// Writes BODY (`extended == false`) or BODYSTRUCTURE.
    pub fn body_structure(&mut self, b: &BodyStructure, extended: bool) {
        self.raw(b"(");
        match b {
            BodyStructure::Multi {
                parts,
                subtype,
                params,
                ext,
            } => {
                for p in parts {
                    self.body_structure(p, extended);
                }
                self.sp();
                self.string(subtype);
                if extended {
                    self.sp();
                    self.params(params);
                    self.body_ext(ext);
                }
            }
            BodyStructure::Single {
                media_type,
                subtype,
                params,
                id,
                description,
                encoding,
                size,
                kind,
                md5,
                ext,
            } => {
                self.string(media_type);
                self.sp();
                self.string(subtype);
                self.sp();
                self.params(params);
                self.sp();
                self.nstring(id.as_deref());
                self.sp();
                self.nstring(description.as_deref());
                self.sp();
                self.string(encoding);
                self.sp();
                self.num(size);
                match kind {
                    SinglePartKind::Basic => {}
                    SinglePartKind::Text { lines } => {
                        self.sp();
                        self.num(lines);
                    }
                    SinglePartKind::Message {
                        envelope,
                        body,
                        lines,
                    } => {
                        self.sp();
                        self.envelope(envelope);
                        self.sp();
                        self.body_structure(body, extended);
                        self.sp();
                        self.num(lines);
                    }
                }
                if extended {
                    self.sp();
                    self.nstring(md5.as_deref());
                    self.body_ext(ext);
                }
            }
        }
        self.raw(b")");
    }
}
