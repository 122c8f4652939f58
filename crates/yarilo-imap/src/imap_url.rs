//! IMAP URLs (RFC 5092) as CATENATE (RFC 4469) uses them: a message or a
//! part of one in a mailbox of the same user, absolute
//! (`imap://user@host/INBOX;UIDVALIDITY=7/;UID=20/;SECTION=1.2`), server-
//! relative (`/INBOX/;UID=20`) or relative to the selected mailbox
//! (`;UID=20`).

use yarilo_imap_proto::command::{Partial, Section, SectionText};

use crate::session::Session;

/// A parsed message URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageUrl {
    /// `None`: the selected mailbox.
    pub mailbox: Option<String>,
    pub uidvalidity: Option<u32>,
    pub uid: u32,
    pub section: Section,
    pub partial: Option<Partial>,
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn section(s: &str) -> Option<Section> {
    let s = s.to_ascii_uppercase();
    let mut part = Vec::new();
    let mut text = None;
    for (i, piece) in s.split('.').enumerate() {
        if let Ok(n) = piece.parse::<u32>() {
            if text.is_some() || n == 0 {
                return None;
            }
            part.push(n);
            continue;
        }
        let rest: Vec<&str> = s.split('.').skip(i).collect();
        text = Some(match rest.join(".").as_str() {
            "HEADER" => SectionText::Header,
            "TEXT" => SectionText::Text,
            "MIME" if !part.is_empty() => SectionText::Mime,
            _ => return None,
        });
        break;
    }
    Some(Section { part, text })
}

/// Parses a URL; `None` when it is not a message URL we can serve (the
/// caller answers `[BADURL]`). URLAUTH-authorised URLs are refused here.
pub(crate) fn parse(url: &str) -> Option<MessageUrl> {
    if url.len() > 8192 || url.contains(";URLAUTH=") || url.contains(";urlauth=") {
        return None;
    }
    // Drop `imap://user;auth@host:port`, keeping the path.
    let path = if let Some(rest) = url
        .strip_prefix("imap://")
        .or_else(|| url.strip_prefix("IMAP://"))
    {
        &rest[rest.find('/')?..]
    } else {
        url
    };
    let (mailbox, rest) = if let Some(p) = path.strip_prefix('/') {
        let end = p.find("/;").unwrap_or(p.len());
        (Some(&p[..end]), &p[end..])
    } else {
        (None, path)
    };
    let mut mailbox_name = None;
    let mut uidvalidity = None;
    if let Some(m) = mailbox {
        let (name, params) = match m.split_once(';') {
            Some((n, p)) => (n, Some(p)),
            None => (m, None),
        };
        if let Some(p) = params {
            let v = p
                .strip_prefix("UIDVALIDITY=")
                .or_else(|| p.strip_prefix("uidvalidity="))?;
            uidvalidity = Some(v.parse().ok()?);
        }
        mailbox_name = Some(percent_decode(name)?);
    }
    let mut uid = None;
    let mut sec = Section::default();
    let mut partial = None;
    for piece in rest.split('/').filter(|p| !p.is_empty()) {
        let piece = piece.strip_prefix(';')?;
        let (k, v) = piece.split_once('=')?;
        match k.to_ascii_uppercase().as_str() {
            "UID" => uid = Some(v.parse::<u32>().ok().filter(|&u| u > 0)?),
            "SECTION" => sec = section(&percent_decode(v)?)?,
            "PARTIAL" => {
                let (o, l) = match v.split_once('.') {
                    Some((o, l)) => (o.parse().ok()?, l.parse().ok()?),
                    None => (v.parse().ok()?, u32::MAX),
                };
                partial = Some(Partial {
                    origin: o,
                    count: l,
                });
            }
            _ => return None,
        }
    }
    Some(MessageUrl {
        mailbox: mailbox_name,
        uidvalidity,
        uid: uid?,
        section: sec,
        partial,
    })
}

impl Session {
    /// The bytes `u` names in `mailbox` (its section, then its partial),
    /// or `None` when the URL names nothing there (wrong UIDVALIDITY, no
    /// such message or part). Shared by CATENATE and URLFETCH.
    pub(crate) async fn url_content(
        &self,
        mailbox: &yarilo_store::Mailbox,
        u: &MessageUrl,
    ) -> Option<Vec<u8>> {
        let raw = self.url_message(mailbox, u).await?;
        let data = yarilo_mime::section(&raw, &u.section)?;
        Some(crate::fetch::apply_partial(data, u.partial))
    }

    /// The whole message `u` names (CRLF line ends, as FETCH sees it), or
    /// `None` for a wrong UIDVALIDITY or a missing message.
    pub(crate) async fn url_message(
        &self,
        mailbox: &yarilo_store::Mailbox,
        u: &MessageUrl,
    ) -> Option<Vec<u8>> {
        let view = mailbox.refresh().await.ok()?;
        if u.uidvalidity.is_some_and(|v| v != view.uidvalidity()) {
            return None;
        }
        Some(crate::fetch::crlf(mailbox.read_message(u.uid).await.ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let u = parse("/Drafts;UIDVALIDITY=385759045/;UID=20").unwrap();
        assert_eq!(u.mailbox.as_deref(), Some("Drafts"));
        assert_eq!((u.uidvalidity, u.uid), (Some(385759045), 20));
        let u = parse("imap://joe@example.com/INBOX/;UID=5/;SECTION=1.2.MIME").unwrap();
        assert_eq!(u.mailbox.as_deref(), Some("INBOX"));
        assert_eq!(u.section.part, vec![1, 2]);
        assert_eq!(u.section.text, Some(SectionText::Mime));
        let u = parse(";UID=3/;PARTIAL=0.10").unwrap();
        assert_eq!(u.mailbox, None);
        assert_eq!(
            u.partial,
            Some(Partial {
                origin: 0,
                count: 10
            })
        );
        let u = parse("/a%20b/;UID=1/;SECTION=TEXT").unwrap();
        assert_eq!(u.mailbox.as_deref(), Some("a b"));
        assert!(parse("/INBOX/;UID=0").is_none());
        assert!(parse("/INBOX").is_none());
        assert!(parse("/INBOX/;UID=1;URLAUTH=anonymous").is_none());
        assert!(parse("/INBOX/;UID=1/;SECTION=0").is_none());
    }
}
