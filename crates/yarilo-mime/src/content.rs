//! The Content-* fields of one MIME header (RFC 2045 §5, §6; RFC 2183;
//! RFC 3066 Content-Language; RFC 2557 Content-Location; RFC 1864
//! Content-MD5).
//!
//! Values are kept as sent (case of types, subtypes and parameter names;
//! RFC 2231 parameters such as `name*0*` pass through untouched), only
//! quoting is removed. As in Dovecot 2.3, the first occurrence of each
//! field wins, and a Content-Type or Content-Transfer-Encoding that does
//! not parse counts as absent.

use crate::header::{self, Field};
use crate::token::{lex, Flavor, Lexed, Token};

/// A parameter list, `(name, value)` as sent.
pub(crate) type Params = Vec<(Vec<u8>, Vec<u8>)>;

/// `(type, subtype)` as sent.
pub(crate) type Media = (Vec<u8>, Vec<u8>);

/// The MIME facts of one part's header.
#[derive(Debug, Clone, Default)]
pub(crate) struct Content {
    /// Content-Type `type/subtype` as sent, when it parsed.
    pub media: Option<Media>,
    /// Content-Type parameters.
    pub params: Params,
    /// Content-Transfer-Encoding token as sent.
    pub encoding: Option<Vec<u8>>,
    pub id: Option<Vec<u8>>,
    pub description: Option<Vec<u8>>,
    pub md5: Option<Vec<u8>>,
    /// Content-Disposition type and parameters.
    pub disposition: Option<(Vec<u8>, Params)>,
    pub language: Vec<Vec<u8>>,
    pub location: Option<Vec<u8>>,
    /// A MIME-Version field was present.
    pub mime_version: bool,
}

impl Content {
    /// Reads the fields of a header section.
    pub fn parse(header: &[u8]) -> Content {
        let mut c = Content::default();
        let mut seen_type = false;
        let mut seen_cte = false;
        let mut seen_disposition = false;
        let mut seen_language = false;
        for f in header::fields(header) {
            if f.is("MIME-Version") {
                c.mime_version = true;
            } else if f.is("Content-Type") && !seen_type {
                seen_type = true;
                if let Some((media, params)) = content_type(&f) {
                    c.media = Some(media);
                    c.params = params;
                }
            } else if f.is("Content-Transfer-Encoding") && !seen_cte {
                seen_cte = true;
                c.encoding = single_token(&f);
            } else if f.is("Content-Disposition") && !seen_disposition {
                seen_disposition = true;
                c.disposition = disposition(&f);
            } else if f.is("Content-Language") && !seen_language {
                seen_language = true;
                c.language = language(&f);
            } else if f.is("Content-ID") {
                c.id.get_or_insert_with(|| f.unfolded());
            } else if f.is("Content-Description") {
                c.description.get_or_insert_with(|| f.unfolded());
            } else if f.is("Content-MD5") {
                c.md5.get_or_insert_with(|| f.unfolded());
            } else if f.is("Content-Location") {
                c.location.get_or_insert_with(|| f.unfolded());
            }
        }
        c
    }

    /// Type and subtype lower-cased for decisions (never for output).
    pub fn is(&self, media_type: &str, subtype: Option<&str>) -> bool {
        match &self.media {
            Some((t, s)) => {
                t.eq_ignore_ascii_case(media_type.as_bytes())
                    && subtype.is_none_or(|st| s.eq_ignore_ascii_case(st.as_bytes()))
            }
            None => false,
        }
    }

    /// A parameter value by name (case-insensitive).
    pub fn param(&self, name: &str) -> Option<&[u8]> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_slice())
    }

    /// The transfer encoding, lower-cased, `7bit` when absent.
    pub fn encoding_lower(&self) -> Vec<u8> {
        self.encoding
            .as_deref()
            .unwrap_or(b"7bit")
            .to_ascii_lowercase()
    }
}

fn content_type(f: &Field<'_>) -> Option<(Media, Params)> {
    let t = lex(f.value, Flavor::Mime);
    let mut i = skip_comments(&t, 0);
    let media_type = atom(&t, i)?;
    i = skip_comments(&t, i + 1);
    if special(&t, i) != Some(b'/') {
        return None;
    }
    i = skip_comments(&t, i + 1);
    let subtype = atom(&t, i)?;
    Some(((media_type, subtype), params(&t, i + 1)))
}

fn disposition(f: &Field<'_>) -> Option<(Vec<u8>, Params)> {
    let t = lex(f.value, Flavor::Mime);
    let i = skip_comments(&t, 0);
    let kind = atom(&t, i)?;
    Some((kind, params(&t, i + 1)))
}

/// The first token of a value (Content-Transfer-Encoding); anything else
/// after it is ignored, a value that starts with junk is absent.
fn single_token(f: &Field<'_>) -> Option<Vec<u8>> {
    let t = lex(f.value, Flavor::Mime);
    atom(&t, skip_comments(&t, 0))
}

/// `en, fi, se` → the atoms (RFC 3282 language tags).
fn language(f: &Field<'_>) -> Vec<Vec<u8>> {
    let t = lex(f.value, Flavor::Mime);
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        i = skip_comments(&t, i);
        let Some(a) = atom(&t, i) else { break };
        out.push(a);
        i = skip_comments(&t, i + 1);
        if special(&t, i) != Some(b',') {
            break;
        }
        i += 1;
    }
    out
}

/// `; name=value` pairs from token `i` on. A broken parameter ends the
/// list; what parsed before it is kept.
fn params(t: &[Lexed], mut i: usize) -> Params {
    let mut out = Params::new();
    loop {
        i = skip_comments(t, i);
        if special(t, i) != Some(b';') {
            break;
        }
        i = skip_comments(t, i + 1);
        let Some(name) = atom(t, i) else {
            // Tolerate `;;` and a trailing `;`.
            if special(t, i) == Some(b';') {
                continue;
            }
            break;
        };
        i = skip_comments(t, i + 1);
        if special(t, i) != Some(b'=') {
            break;
        }
        i = skip_comments(t, i + 1);
        let value = match t.get(i).map(|l| &l.token) {
            Some(Token::Atom(v) | Token::Quoted(v)) => v.clone(),
            _ => break,
        };
        i += 1;
        // Some senders leave 8-bit or specials unquoted (`name=a b.pdf`,
        // `x=a/b`): glue on what follows up to the next `;`.
        let mut value = value;
        while let Some(l) = t.get(i) {
            match &l.token {
                Token::Special(b';') => break,
                Token::Comment(_) => {}
                Token::Atom(v) | Token::Quoted(v) | Token::Literal(v) => {
                    if l.spaced {
                        value.push(b' ');
                    }
                    value.extend_from_slice(v);
                }
                Token::Special(b) => value.push(*b),
            }
            i += 1;
        }
        out.push((name, value));
    }
    out
}

fn skip_comments(t: &[Lexed], mut i: usize) -> usize {
    while matches!(t.get(i).map(|l| &l.token), Some(Token::Comment(_))) {
        i += 1;
    }
    i
}

fn atom(t: &[Lexed], i: usize) -> Option<Vec<u8>> {
    match t.get(i).map(|l| &l.token) {
        Some(Token::Atom(a)) => Some(a.clone()),
        _ => None,
    }
}

fn special(t: &[Lexed], i: usize) -> Option<u8> {
    match t.get(i).map(|l| &l.token) {
        Some(Token::Special(b)) => Some(*b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_type_keeps_case_and_unquotes() {
        let c = Content::parse(
            b"Content-Type: Text/HTML; CharSet=\"UTF-8\"; name*0*=utf-8''a%20b\r\n\r\n",
        );
        assert_eq!(c.media, Some((b"Text".to_vec(), b"HTML".to_vec())));
        assert_eq!(
            c.params,
            vec![
                (b"CharSet".to_vec(), b"UTF-8".to_vec()),
                (b"name*0*".to_vec(), b"utf-8''a%20b".to_vec())
            ]
        );
        assert!(c.is("text", Some("html")));
    }

    #[test]
    fn invalid_content_type_is_absent() {
        let c = Content::parse(b"Content-Type: text\r\n\r\n");
        assert_eq!(c.media, None);
        let c = Content::parse(b"Content-Transfer-Encoding: ?invalid\r\n\r\n");
        assert_eq!(c.encoding, None);
    }
}
