//! Address lists (RFC 5322 §3.4) into ENVELOPE addresses (RFC 9051
//! §7.5.2), and the ENVELOPE itself.
//!
//! Like Dovecot 2.3 the parser is forgiving: a missing local part becomes
//! `MISSING_MAILBOX`, a missing domain `MISSING_DOMAIN`; a comment after a
//! bare addr-spec serves as the display name; groups become a start entry
//! `(NIL NIL "name" NIL)` and an end entry `(NIL NIL NIL NIL)`. Names are
//! not RFC 2047-decoded (the client does that).

use yarilo_imap_proto::response::{Address, Envelope};

use crate::header::{self, Field};
use crate::token::{lex, Flavor, Lexed, Token};

const MISSING_MAILBOX: &[u8] = b"MISSING_MAILBOX";
const MISSING_DOMAIN: &[u8] = b"MISSING_DOMAIN";

/// ENVELOPE of a header section; see [`crate::envelope`].
pub(crate) fn envelope(header: &[u8]) -> Envelope {
    let fields = header::fields(header);
    let first = |name: &str| -> Option<&Field<'_>> { fields.iter().find(|f| f.is(name)) };
    let string = |name: &str| first(name).map(|f| f.unfolded());
    let addrs = |name: &str| {
        first(name)
            .map(|f| parse_list(&f.unfolded()))
            .unwrap_or_default()
    };

    let from = addrs("From");
    let mut sender = addrs("Sender");
    let mut reply_to = addrs("Reply-To");
    // RFC 9051 §7.5.2: sender and reply-to default to from; an empty
    // field counts as absent (Dovecot does the same).
    if sender.is_empty() {
        sender = from.clone();
    }
    if reply_to.is_empty() {
        reply_to = from.clone();
    }
    Envelope {
        date: string("Date"),
        subject: string("Subject"),
        from,
        sender,
        reply_to,
        to: addrs("To"),
        cc: addrs("Cc"),
        bcc: addrs("Bcc"),
        in_reply_to: string("In-Reply-To"),
        message_id: string("Message-ID"),
    }
}

/// `a` with the `MISSING_MAILBOX` / `MISSING_DOMAIN` placeholders of
/// ENVELOPE taken out again.
pub(crate) fn without_placeholders(mut a: Address) -> Address {
    if a.mailbox.as_deref() == Some(MISSING_MAILBOX) {
        a.mailbox = None;
    }
    if a.host.as_deref() == Some(MISSING_DOMAIN) {
        a.host = None;
    }
    a
}

/// The text SEARCH FROM/TO/CC/BCC match against (RFC 9051 §6.4.4, as
/// Dovecot): the parsed list written back canonically, so comments and
/// folding inside an addr-spec are gone, groups show their members, and
/// display names (RFC 2047-decoded) remain: `Name <user@host>, g: a@b;`.
/// `None` when the value holds no address at all.
pub(crate) fn search_text(value: &[u8]) -> Option<String> {
    let list = parse_list(value);
    if list.is_empty() {
        return None;
    }
    let mut out = String::new();
    let mut first_in_group = false;
    for a in &list {
        match (&a.mailbox, &a.host) {
            // Group start.
            (Some(name), None) => {
                if !out.is_empty() {
                    out.push_str(", ");
                }
                out.push_str(&crate::decode::header_value(name));
                out.push_str(": ");
                first_in_group = true;
                continue;
            }
            // Group end.
            (None, None) => {
                out.push(';');
                continue;
            }
            _ => {}
        }
        if !out.is_empty() && !first_in_group {
            out.push_str(", ");
        }
        first_in_group = false;
        let local = a
            .mailbox
            .as_deref()
            .filter(|m| *m != MISSING_MAILBOX)
            .unwrap_or_default();
        let host = a
            .host
            .as_deref()
            .filter(|h| *h != MISSING_DOMAIN)
            .unwrap_or_default();
        let mut spec = String::from_utf8_lossy(local).into_owned();
        if !host.is_empty() {
            spec.push('@');
            spec.push_str(&String::from_utf8_lossy(host));
        }
        match a.name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => {
                out.push_str(&crate::decode::header_value(name));
                out.push_str(" <");
                out.push_str(&spec);
                out.push('>');
            }
            None => out.push_str(&spec),
        }
    }
    Some(out)
}

/// Parses an address list (the unfolded field value).
pub(crate) fn parse_list(value: &[u8]) -> Vec<Address> {
    let tokens = lex(value, Flavor::Address);
    let mut p = Parser {
        t: &tokens,
        pos: 0,
        out: Vec::new(),
    };
    p.list();
    p.out
}

struct Parser<'a> {
    t: &'a [Lexed],
    pos: usize,
    out: Vec<Address>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.t.get(self.pos).map(|l| &l.token)
    }

    fn peek_special(&self) -> Option<u8> {
        match self.peek() {
            Some(Token::Special(b)) => Some(*b),
            _ => None,
        }
    }

    fn list(&mut self) {
        while self.pos < self.t.len() {
            let before = self.pos;
            self.skip_comments();
            match self.peek_special() {
                Some(b',') | Some(b';') => {
                    self.pos += 1;
                    continue;
                }
                None if self.peek().is_none() => break,
                _ => {}
            }
            self.address(true);
            if self.pos == before {
                // Malformed input: drop one token so the loop ends.
                self.pos += 1;
            }
        }
    }

    fn skip_comments(&mut self) -> Option<Vec<u8>> {
        let mut last = None;
        while let Some(Token::Comment(c)) = self.peek() {
            last = Some(c.clone());
            self.pos += 1;
        }
        last
    }

    /// One mailbox or group. `groups_allowed` is false inside a group.
    fn address(&mut self, groups_allowed: bool) {
        // Words up to the first delimiter: a display name (before `<` or
        // `:`) or the local part of a bare addr-spec (before `@`).
        let start = self.pos;
        let mut comment = None;
        while let Some(tok) = self.peek() {
            match tok {
                Token::Special(b'<' | b':' | b'@' | b',' | b';' | b'>') => break,
                Token::Comment(c) => comment = Some(c.clone()),
                _ => {}
            }
            self.pos += 1;
        }
        let words = self.t.get(start..self.pos).unwrap_or_default();
        match self.peek_special() {
            Some(b':') if groups_allowed => {
                self.pos += 1;
                self.group(phrase(words));
            }
            Some(b'<') => {
                self.pos += 1;
                let name = phrase(words);
                let (adl, mailbox, host) = self.angle_addr();
                let trailing = self.skip_comments();
                self.push(
                    name.or(trailing).filter(|n| !n.is_empty()),
                    adl,
                    mailbox,
                    host,
                );
            }
            Some(b'@') => {
                self.pos += 1;
                let mailbox = local_part(words);
                let host = self.domain();
                let trailing = self.skip_comments();
                self.push(trailing.or(comment), None, mailbox, host);
            }
            _ => {
                // No `@`: a local part alone (Dovecot: `user (hello)`).
                let mailbox = local_part(words);
                if mailbox.is_empty() && comment.is_none() {
                    // Only a stray delimiter such as `>`: skip it.
                    if self.pos == start {
                        self.pos += 1;
                    }
                    return;
                }
                self.push(comment, None, mailbox, Vec::new());
            }
        }
    }

    fn push(
        &mut self,
        name: Option<Vec<u8>>,
        adl: Option<Vec<u8>>,
        mailbox: Vec<u8>,
        host: Vec<u8>,
    ) {
        self.out.push(Address {
            name,
            adl,
            mailbox: Some(if mailbox.is_empty() {
                MISSING_MAILBOX.to_vec()
            } else {
                mailbox
            }),
            host: Some(if host.is_empty() {
                MISSING_DOMAIN.to_vec()
            } else {
                host
            }),
        });
    }

    /// After `name:` up to `;` (or the end).
    fn group(&mut self, name: Option<Vec<u8>>) {
        self.out.push(Address {
            name: None,
            adl: None,
            mailbox: Some(name.unwrap_or_default()),
            host: None,
        });
        while self.pos < self.t.len() {
            let before = self.pos;
            self.skip_comments();
            match self.peek_special() {
                Some(b';') => {
                    self.pos += 1;
                    break;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                None if self.peek().is_none() => break,
                _ => {}
            }
            self.address(false);
            if self.pos == before {
                self.pos += 1;
            }
        }
        self.out.push(Address::default());
    }

    /// After `<`: optional route, local part, `@`, domain, `>`.
    fn angle_addr(&mut self) -> (Option<Vec<u8>>, Vec<u8>, Vec<u8>) {
        let mut route: Vec<u8> = Vec::new();
        // obs-route: `@a,@b:` (Dovecot also takes `@a@b:`).
        let save = self.pos;
        loop {
            self.skip_comments();
            match self.peek_special() {
                Some(b'@') => {
                    self.pos += 1;
                    let d = self.domain();
                    if !route.is_empty() {
                        route.push(b',');
                    }
                    route.push(b'@');
                    route.extend_from_slice(&d);
                }
                Some(b',') if !route.is_empty() => self.pos += 1,
                Some(b':') if !route.is_empty() => {
                    self.pos += 1;
                    break;
                }
                _ => {
                    if !route.is_empty() {
                        // Not a route after all (`<@domain>`): reparse.
                        self.pos = save;
                        route.clear();
                    }
                    break;
                }
            }
        }
        let start = self.pos;
        while let Some(tok) = self.peek() {
            if matches!(tok, Token::Special(b'@' | b'>' | b',' | b';')) {
                break;
            }
            self.pos += 1;
        }
        let mailbox = local_part(self.t.get(start..self.pos).unwrap_or_default());
        let mut host = Vec::new();
        if self.peek_special() == Some(b'@') {
            self.pos += 1;
            host = self.domain();
        }
        // Skip to the closing bracket.
        while let Some(tok) = self.peek() {
            match tok {
                Token::Special(b'>') => {
                    self.pos += 1;
                    break;
                }
                Token::Special(b',' | b';') => break,
                _ => self.pos += 1,
            }
        }
        let adl = if route.is_empty() { None } else { Some(route) };
        (adl, mailbox, host)
    }

    /// Atoms, dots and domain literals, concatenated.
    fn domain(&mut self) -> Vec<u8> {
        let mut d = Vec::new();
        while let Some(tok) = self.peek() {
            match tok {
                Token::Atom(a) | Token::Literal(a) => d.extend_from_slice(a),
                Token::Special(b'.') => d.push(b'.'),
                // CFWS before the domain (RFC 5322 §3.4.1: `user@ (c)
                // domain.org`) is skipped.
                Token::Comment(_) if d.is_empty() => {}
                // A comment after it ends the domain: it may be the
                // display name.
                _ => break,
            }
            self.pos += 1;
        }
        d
    }
}

/// A display name: words joined by single spaces, quotes removed; a
/// `.` sticks to its neighbours unless whitespace was there.
fn phrase(words: &[Lexed]) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::new();
    let mut any = false;
    for w in words {
        let text: &[u8] = match &w.token {
            Token::Atom(a) | Token::Quoted(a) | Token::Literal(a) => a,
            Token::Special(b) => std::slice::from_ref(b),
            Token::Comment(_) => continue,
        };
        if any && w.spaced {
            out.push(b' ');
        }
        out.extend_from_slice(text);
        any = true;
    }
    any.then_some(out)
}

/// A local part: words concatenated as written, without quotes.
fn local_part(words: &[Lexed]) -> Vec<u8> {
    let mut out = Vec::new();
    for w in words {
        match &w.token {
            Token::Atom(a) | Token::Quoted(a) | Token::Literal(a) => out.extend_from_slice(a),
            Token::Special(b) => out.push(*b),
            Token::Comment(_) => {}
        }
    }
    out
}
