//! URLAUTH (RFC 4467): GENURLAUTH signs an IMAP URL to one of the user's
//! messages with the mailbox's access key (mechanism INTERNAL, HMAC-SHA1),
//! URLFETCH returns what a signed URL names, RESETKEY revokes. Keys live in
//! the store, one per mailbox. This session only serves the user's own
//! URLs; `submit+` URLs are for the submission server (BURL) and are NIL
//! here, as the RFC asks.
//!
//! URLAUTH=BINARY (RFC 5524): `URLFETCH (url [BODYPARTSTRUCTURE] [BODY |
//! BINARY])` answers with one parenthesised element per item. A URL that
//! names nothing is NIL as in RFC 4467; a part whose transfer encoding
//! cannot be undone gets `(BINARY NIL)` (RFC 5524 §3.2); BODYPARTSTRUCTURE
//! describes the data as returned, so after BINARY decoding its encoding
//! and size are those of the decoded octets.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use yarilo_imap_proto::command::UrlFetchItem;
use yarilo_imap_proto::response::{
    BodyStructure, Code, Data, Response, SinglePartKind, UrlFetchData, UrlFetchValue,
};
use yarilo_imap_proto::{Date, Mailbox};

use crate::imap_url::{self, MessageUrl};
use crate::selected::store_no;
use crate::session::Session;

type HmacSha1 = Hmac<Sha1>;

/// An authorised URL taken apart.
struct Rump<'a> {
    /// The message URL without `;EXPIRE=` and `;URLAUTH=`.
    message: &'a str,
    user: &'a str,
    expire: Option<i64>,
    access: &'a str,
}

fn find_ci(hay: &str, needle: &str) -> Option<usize> {
    hay.to_ascii_lowercase().find(&needle.to_ascii_lowercase())
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` → unix seconds.
fn rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    if b.len() < 20
        || b.get(4) != Some(&b'-')
        || b.get(10).map(u8::to_ascii_uppercase) != Some(b'T')
    {
        return None;
    }
    let date = Date::new(num(0..4)? as u16, num(5..7)? as u8, num(8..10)? as u8)?;
    let secs =
        date.days_since_epoch() * 86_400 + num(11..13)? * 3600 + num(14..16)? * 60 + num(17..19)?;
    let mut rest = s.get(19..)?;
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    if rest.eq_ignore_ascii_case("z") {
        return Some(secs);
    }
    let sign = match rest.as_bytes().first() {
        Some(b'+') => -1,
        Some(b'-') => 1,
        _ => return None,
    };
    let off =
        rest.get(1..3)?.parse::<i64>().ok()? * 3600 + rest.get(4..6)?.parse::<i64>().ok()? * 60;
    Some(secs + sign * off)
}

fn parse_rump(rump: &str) -> Option<Rump<'_>> {
    let auth_at = find_ci(rump, ";urlauth=")?;
    let access = rump.get(auth_at + 9..)?;
    let before = rump.get(..auth_at)?;
    let (message, expire) = match find_ci(before, ";expire=") {
        Some(i) => (before.get(..i)?, Some(rfc3339(before.get(i + 8..)?)?)),
        None => (before, None),
    };
    let rest = message
        .strip_prefix("imap://")
        .or_else(|| message.strip_prefix("IMAP://"))?;
    let at = rest.find('@')?;
    let user = rest.get(..at)?;
    let user = user.split(';').next()?;
    let valid_access = access.eq_ignore_ascii_case("anonymous")
        || access.eq_ignore_ascii_case("authuser")
        || access.to_ascii_lowercase().starts_with("user+")
        || access.to_ascii_lowercase().starts_with("submit+");
    valid_access.then_some(Rump {
        message,
        user,
        expire,
        access,
    })
}

fn sign(key: &[u8], rump: &str) -> Option<String> {
    let mut mac = HmacSha1::new_from_slice(key).ok()?;
    mac.update(rump.as_bytes());
    Some(hex::encode(mac.finalize().into_bytes()))
}

impl Session {
    fn own_url(&self, user: &str) -> bool {
        self.user
            .as_ref()
            .is_some_and(|u| u.name.eq_ignore_ascii_case(user))
    }

    async fn url_mailbox(
        &self,
        tag: &str,
        u: &MessageUrl,
    ) -> Option<(String, yarilo_store::Mailbox)> {
        let name = u.mailbox.as_ref()?;
        let store_name = self.store_name(tag, &Mailbox::new(name.clone())).ok()?;
        let mbox = self.user_store()?.open(&store_name).await.ok()?;
        Some((store_name, mbox))
    }

    pub(crate) async fn genurlauth(&mut self, tag: &str, items: Vec<(String, String)>) -> Response {
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let mut out = Vec::new();
        for (url, mech) in items {
            if !mech.eq_ignore_ascii_case("INTERNAL") {
                return Response::no(tag, None, format!("Unsupported URLAUTH mechanism {mech}."));
            }
            let bad = || Response::no(tag, Some(Code::BadUrl(url.clone())), "Bad URL.");
            let Some(r) = parse_rump(&url) else {
                return bad();
            };
            if !self.own_url(r.user) {
                return bad();
            }
            let Some(u) = imap_url::parse(r.message).filter(|u| u.mailbox.is_some()) else {
                return bad();
            };
            let Some((store_name, _)) = self.url_mailbox(tag, &u).await else {
                return bad();
            };
            let key = match store.urlauth_key(&store_name, true).await {
                Ok(Some(k)) => k,
                Ok(None) => return bad(),
                Err(e) => return store_no(tag, &e),
            };
            let Some(token) = sign(&key, &url) else {
                return bad();
            };
            out.push(format!("{url}:internal:{token}"));
        }
        self.conn.send(&Response::Data(Data::GenUrlAuth(out)));
        Response::ok(tag, None, "Genurlauth completed.")
    }

    pub(crate) async fn resetkey(
        &mut self,
        tag: &str,
        mailbox: Option<Mailbox>,
        mechs: Vec<String>,
    ) -> Response {
        if mechs.iter().any(|m| !m.eq_ignore_ascii_case("INTERNAL")) {
            return Response::no(tag, None, "Unsupported URLAUTH mechanism.");
        }
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let name = match &mailbox {
            Some(m) => match self.store_name(tag, m) {
                Ok(n) => {
                    if let Err(e) = store.open(&n).await {
                        return store_no(tag, &e);
                    }
                    Some(n)
                }
                Err(r) => return r,
            },
            None => None,
        };
        match store.reset_urlauth_keys(name.as_deref()).await {
            Ok(()) => Response::ok(tag, None, "Resetkey completed."),
            Err(e) => store_no(tag, &e),
        }
    }

    /// The mailbox and message URL a signed URL names, once its token,
    /// access and expiry have been checked; `None` is answered NIL.
    async fn urlfetch_target(
        &self,
        tag: &str,
        full: &str,
    ) -> Option<(yarilo_store::Mailbox, MessageUrl)> {
        let (rest, token) = full.rsplit_once(':')?;
        let (rump, mech) = rest.rsplit_once(':')?;
        if !mech.eq_ignore_ascii_case("internal") {
            return None;
        }
        let r = parse_rump(rump)?;
        let access = r.access.to_ascii_lowercase();
        let allowed = access == "anonymous"
            || access == "authuser"
            || access
                .strip_prefix("user+")
                .is_some_and(|u| self.own_url(u));
        if !allowed || !self.own_url(r.user) {
            return None;
        }
        if let Some(exp) = r.expire {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs() as i64;
            if now >= exp {
                return None;
            }
        }
        let u = imap_url::parse(r.message)?;
        let (store_name, mbox) = self.url_mailbox(tag, &u).await?;
        let key = self
            .user_store()?
            .urlauth_key(&store_name, false)
            .await
            .ok()??;
        let mut mac = HmacSha1::new_from_slice(&key).ok()?;
        mac.update(rump.as_bytes());
        mac.verify_slice(&hex::decode(token).ok()?).ok()?;
        Some((mbox, u))
    }

    pub(crate) async fn urlfetch(&mut self, tag: &str, items: Vec<UrlFetchItem>) -> Response {
        // RFC 5524 §3.1: BODY and BINARY ask for the same data in two
        // forms; one URL may have only one (Dovecot answers BAD too).
        if items.iter().any(|it| it.body && it.binary) {
            return Response::bad(
                Some(tag.to_string()),
                None,
                "URL cannot have both BODY and BINARY fetch parameters.",
            );
        }
        let mut out = Vec::new();
        for it in items {
            let value = match self.urlfetch_target(tag, &it.url).await {
                None => UrlFetchValue::Simple(None),
                Some((mbox, u)) if !it.extended => {
                    UrlFetchValue::Simple(self.url_content(&mbox, &u).await.map(Bytes::from))
                }
                Some((mbox, u)) => match self.url_message(&mbox, &u).await {
                    Some(raw) => extended(&raw, &u, &it),
                    None => UrlFetchValue::Simple(None),
                },
            };
            out.push((it.url, value));
        }
        self.conn.send(&Response::Data(Data::UrlFetch(out)));
        Response::ok(tag, None, "Urlfetch completed.")
    }
}

/// The RFC 5524 answer for one URL into `raw` (the whole message). NIL
/// when the URL names nothing there, or BODYPARTSTRUCTURE was asked of
/// something that is not a body part (a HEADER, TEXT or MIME section).
fn extended(raw: &[u8], u: &MessageUrl, it: &UrlFetchItem) -> UrlFetchValue {
    extended_inner(raw, u, it).unwrap_or(UrlFetchValue::Simple(None))
}

fn extended_inner(raw: &[u8], u: &MessageUrl, it: &UrlFetchItem) -> Option<UrlFetchValue> {
    let is_part = u.section.text.is_none();
    let mut structure = if it.body_part_structure {
        if !is_part {
            return None;
        }
        Some(yarilo_mime::part_structure(raw, &u.section.part)?)
    } else {
        None
    };
    // Extended with no item at all: the data as stored, as Dovecot does.
    let want_body = it.body || (!it.binary && !it.body_part_structure);
    let data = if want_body {
        let d = yarilo_mime::section(raw, &u.section)?;
        Some(UrlFetchData::Body(Bytes::from(
            crate::fetch::apply_partial(d, u.partial),
        )))
    } else if it.binary {
        // A HEADER/TEXT/MIME section has no transfer encoding of its own
        // to undo (RFC 3516 BINARY takes part numbers only).
        let decoded = if is_part {
            match yarilo_mime::binary(raw, &u.section.part) {
                Ok(Some(d)) => Ok(d),
                Ok(None) => return None,
                Err(yarilo_mime::UnknownCte) => Err(()),
            }
        } else {
            Ok(yarilo_mime::section(raw, &u.section)?)
        };
        match decoded {
            Ok(d) => {
                if let Some(s) = structure.as_mut() {
                    // A message/rfc822 or multipart part: describe the
                    // decoded parts inside; a leaf: its decoded octets.
                    match yarilo_mime::decoded_part_structure(raw, &u.section.part) {
                        Some(mut inner) => {
                            // The part itself now carries decoded octets.
                            if let BodyStructure::Single { encoding, .. } = &mut inner {
                                if d.contains(&0) {
                                    *encoding = b"binary".to_vec();
                                } else if !d.is_ascii() {
                                    *encoding = b"8bit".to_vec();
                                }
                            }
                            *s = inner;
                        }
                        None => describe_decoded(s, &d),
                    }
                }
                Some(UrlFetchData::Binary(Some(Bytes::from(
                    crate::fetch::apply_partial(d, u.partial),
                ))))
            }
            // RFC 5524 §3.2: the part is there but cannot be decoded.
            Err(()) => Some(UrlFetchData::Binary(None)),
        }
    } else {
        None
    };
    Some(UrlFetchValue::Extended {
        body_part_structure: structure.map(Box::new),
        data,
    })
}

/// Makes a leaf's structure describe its decoded octets: the encoding
/// becomes their domain (`7bit`, `8bit` or `binary`), the size and text
/// line count theirs. Only base64 and quoted-printable change anything.
fn describe_decoded(s: &mut BodyStructure, data: &[u8]) {
    let BodyStructure::Single {
        encoding,
        size,
        kind,
        ..
    } = s
    else {
        return;
    };
    let was_encoded = encoding.eq_ignore_ascii_case(b"base64")
        || encoding.eq_ignore_ascii_case(b"quoted-printable");
    if !was_encoded {
        return;
    }
    *encoding = if data.contains(&0) {
        b"binary".to_vec()
    } else if data.is_ascii() {
        b"7bit".to_vec()
    } else {
        b"8bit".to_vec()
    };
    *size = u32::try_from(data.len()).unwrap_or(u32::MAX);
    if let SinglePartKind::Text { lines } = kind {
        let n = data.iter().filter(|&&b| b == b'\n').count();
        *lines = u32::try_from(n).unwrap_or(u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yarilo_imap_proto::response::EncodeOptions;

    const MIXED: &str = "Subject: x\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\ncaf=C3=A9\r\n--B\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\nAAEC\r\n--B\r\nContent-Type: application/x-y\r\nContent-Transfer-Encoding: x-rot13\r\n\r\nuryyb\r\n--B--\r\n";

    fn ask(url: &str, bps: bool, binary: bool, body: bool) -> String {
        let u = imap_url::parse(url).unwrap();
        let it = UrlFetchItem {
            url: "U".into(),
            body_part_structure: bps,
            binary,
            body,
            extended: true,
        };
        let v = extended(MIXED.as_bytes(), &u, &it);
        let r = Response::Data(Data::UrlFetch(vec![("U".into(), v)]));
        String::from_utf8_lossy(&r.to_bytes(EncodeOptions::default())).into_owned()
    }

    #[test]
    fn extended_urlfetch_items() {
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=1", true, true, false),
            "* URLFETCH U (BODYPARTSTRUCTURE (\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"8bit\" 5 0 NIL NIL NIL NIL)) (BINARY {5}\r\ncafé)\r\n"
        );
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=2", false, true, false),
            "* URLFETCH U (BINARY ~{3}\r\n\0\u{1}\u{2})\r\n"
        );
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=2/;PARTIAL=1.1", false, true, false),
            "* URLFETCH U (BINARY \"\u{1}\")\r\n"
        );
        // Stored form and structure, untouched.
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=2", true, false, true),
            "* URLFETCH U (BODYPARTSTRUCTURE (\"application\" \"octet-stream\" NIL NIL NIL \"base64\" 4 NIL NIL NIL NIL)) (BODY \"AAEC\")\r\n"
        );
        // An encoding nobody can undo: the part is there, its data NIL.
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=3", false, true, false),
            "* URLFETCH U (BINARY NIL)\r\n"
        );
        // No items: the data as stored.
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=3", false, false, false),
            "* URLFETCH U (BODY \"uryyb\")\r\n"
        );
        // Only the structure.
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=3", true, false, false),
            "* URLFETCH U (BODYPARTSTRUCTURE (\"application\" \"x-y\" NIL NIL NIL \"x-rot13\" 5 NIL NIL NIL NIL))\r\n"
        );
        // No such part; a structure of a HEADER section.
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=9", false, true, false),
            "* URLFETCH U NIL\r\n"
        );
        assert_eq!(
            ask("/INBOX/;UID=1/;SECTION=HEADER", true, false, true),
            "* URLFETCH U NIL\r\n"
        );
    }

    #[test]
    fn rumps_and_dates() {
        let r = parse_rump("imap://joe@example.com/INBOX/;uid=20/;section=1.2;urlauth=submit+fred")
            .unwrap();
        assert_eq!((r.user, r.access), ("joe", "submit+fred"));
        assert_eq!(
            r.message,
            "imap://joe@example.com/INBOX/;uid=20/;section=1.2"
        );
        let r =
            parse_rump("imap://joe@h/INBOX/;UID=1;EXPIRE=2026-12-01T10:00:00Z;URLAUTH=anonymous")
                .unwrap();
        assert_eq!(r.expire, Some(1_796_119_200));
        assert!(parse_rump("imap://joe@h/INBOX/;UID=1;URLAUTH=bogus").is_none());
        assert_eq!(rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(rfc3339("2026-12-01T10:00:00.5Z"), Some(1_796_119_200));
    }
}
