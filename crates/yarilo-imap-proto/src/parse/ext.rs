//! Issue 6 extensions: CANCELUPDATE (RFC 5267), QUOTA (RFC 9208), METADATA
//! (RFC 5464), NOTIFY (RFC 5465), URLAUTH (RFC 4467, RFC 5524).

use super::{fetch::fetch_att, mailbox, ParseOptions};
use crate::command::{
    Command, MetadataDepth, NotifyEvent, NotifyFilter, NotifyGroup, NotifySet, UrlFetchItem,
};
use crate::lexer::{Cursor, PResult};
use crate::{Mailbox, ParseError};

/// Bounds the number of arguments of the list-shaped commands below.
const MAX_ARGS: usize = 1_000;

fn utf8(b: std::borrow::Cow<'_, [u8]>) -> PResult<String> {
    String::from_utf8(b.into_owned()).map_err(|_| ParseError::Invalid("UTF-8"))
}

/// Repeats `f` after each SP, at least once.
fn sp_repeat<T>(
    c: &mut Cursor<'_>,
    mut f: impl FnMut(&mut Cursor<'_>) -> PResult<T>,
) -> PResult<Vec<T>> {
    let mut v = Vec::new();
    while c.eat(b' ') {
        v.push(f(c)?);
        if v.len() > MAX_ARGS {
            return Err(ParseError::Invalid("too many arguments"));
        }
    }
    if v.is_empty() {
        return Err(if c.at_end() {
            ParseError::Eof
        } else {
            ParseError::Expected("SP")
        });
    }
    Ok(v)
}

pub(super) fn cancel_update(c: &mut Cursor<'_>) -> PResult<Command> {
    // RFC 5267 says quoted; a literal is accepted too.
    let tags = sp_repeat(c, |c| utf8(c.string()?))?;
    Ok(Command::CancelUpdate(tags))
}

pub(super) fn get_quota(c: &mut Cursor<'_>) -> PResult<Command> {
    c.sp()?;
    Ok(Command::GetQuota(utf8(c.astring()?)?))
}

pub(super) fn set_quota(c: &mut Cursor<'_>) -> PResult<Command> {
    c.sp()?;
    let root = utf8(c.astring()?)?;
    c.sp()?;
    let limits = c.paren_list0(|c| {
        let name = c.atom()?.to_ascii_uppercase();
        c.sp()?;
        Ok((name, c.number64()?))
    })?;
    Ok(Command::SetQuota { root, limits })
}

/// A METADATA mailbox: "" addresses the server.
fn metadata_mailbox(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Option<Mailbox>> {
    let m = mailbox(c, o)?;
    Ok((!m.as_str().is_empty()).then_some(m))
}

/// True when `(` opens GETMETADATA options rather than an entry list.
fn at_metadata_options(c: &Cursor<'_>) -> bool {
    let r = c.rest();
    let word = |w: &[u8]| {
        r.len() > w.len() + 1 && r[1..=w.len()].eq_ignore_ascii_case(w) && r[w.len() + 1] == b' '
    };
    r.first() == Some(&b'(') && (word(b"MAXSIZE") || word(b"DEPTH"))
}

pub(super) fn get_metadata(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    let mut max_size = None;
    let mut depth = MetadataDepth::Zero;
    let mut options = |c: &mut Cursor<'_>| {
        c.paren_list(|c| {
            if c.keyword("MAXSIZE") {
                c.sp()?;
                max_size = Some(c.number()?);
            } else if c.keyword("DEPTH") {
                c.sp()?;
                depth = if c.keyword("0") {
                    MetadataDepth::Zero
                } else if c.keyword("1") {
                    MetadataDepth::One
                } else if c.keyword("INFINITY") {
                    MetadataDepth::Infinity
                } else {
                    return Err(ParseError::Expected("depth"));
                };
            } else {
                return Err(ParseError::Expected("GETMETADATA option"));
            }
            Ok(())
        })
        .map(|_| ())
    };
    // RFC 5464 §4.2 puts options before the mailbox; some clients send
    // them after it, which Dovecot accepts too.
    let before = at_metadata_options(c);
    if before {
        options(c)?;
        c.sp()?;
    }
    let mailbox = metadata_mailbox(c, o)?;
    c.sp()?;
    if !before && at_metadata_options(c) {
        options(c)?;
        c.sp()?;
    }
    let entries = if c.peek() == Some(b'(') {
        c.paren_list(|c| utf8(c.astring()?))?
    } else {
        vec![utf8(c.astring()?)?]
    };
    Ok(Command::GetMetadata {
        max_size,
        depth,
        mailbox,
        entries,
    })
}

pub(super) fn set_metadata(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    let mailbox = metadata_mailbox(c, o)?;
    c.sp()?;
    let entries = c.paren_list(|c| {
        let entry = utf8(c.astring()?)?;
        c.sp()?;
        // value = nstring / literal8
        let value = if c.peek() == Some(b'~') {
            Some(c.literal_or_literal8()?.0.to_vec())
        } else {
            c.nstring()?.map(|v| v.into_owned())
        };
        Ok((entry, value))
    })?;
    Ok(Command::SetMetadata { mailbox, entries })
}

fn one_or_more_mailbox(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Vec<Mailbox>> {
    c.sp()?;
    if c.peek() == Some(b'(') {
        c.paren_list(|c| mailbox(c, o))
    } else {
        Ok(vec![mailbox(c, o)?])
    }
}

fn notify_group(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<NotifyGroup> {
    c.expect(b'(', "(")?;
    c.enter()?;
    let name = c.atom()?.to_ascii_uppercase();
    let filter = match name.as_str() {
        "SELECTED" => NotifyFilter::Selected,
        "SELECTED-DELAYED" => NotifyFilter::SelectedDelayed,
        "INBOXES" => NotifyFilter::Inboxes,
        "PERSONAL" => NotifyFilter::Personal,
        "SUBSCRIBED" => NotifyFilter::Subscribed,
        "SUBTREE" => NotifyFilter::Subtree(one_or_more_mailbox(c, o)?),
        "MAILBOXES" => NotifyFilter::Mailboxes(one_or_more_mailbox(c, o)?),
        _ => return Err(ParseError::Expected("filter-mailboxes")),
    };
    c.sp()?;
    let events = if c.keyword("NONE") {
        Vec::new()
    } else {
        c.paren_list(|c| {
            let n = c.atom()?.to_ascii_uppercase();
            Ok(match n.as_str() {
                "MESSAGENEW" => {
                    if c.peek() == Some(b' ') && c.peek_at(1) == Some(b'(') {
                        c.sp()?;
                        NotifyEvent::MessageNew(c.paren_list(fetch_att)?)
                    } else {
                        NotifyEvent::MessageNew(Vec::new())
                    }
                }
                "MESSAGEEXPUNGE" => NotifyEvent::MessageExpunge,
                "FLAGCHANGE" => NotifyEvent::FlagChange,
                "ANNOTATIONCHANGE" => NotifyEvent::AnnotationChange,
                "MAILBOXNAME" => NotifyEvent::MailboxName,
                "SUBSCRIPTIONCHANGE" => NotifyEvent::SubscriptionChange,
                "MAILBOXMETADATACHANGE" => NotifyEvent::MailboxMetadataChange,
                "SERVERMETADATACHANGE" => NotifyEvent::ServerMetadataChange,
                _ => NotifyEvent::Other(n),
            })
        })?
    };
    c.expect(b')', ")")?;
    c.leave();
    Ok(NotifyGroup { filter, events })
}

pub(super) fn notify(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    if c.keyword("NONE") {
        return Ok(Command::Notify(None));
    }
    if !c.keyword("SET") {
        return Err(ParseError::Expected("SET or NONE"));
    }
    let mut status = false;
    if c.peek() == Some(b' ')
        && c.rest()
            .get(1..7)
            .is_some_and(|r| r.eq_ignore_ascii_case(b"STATUS"))
    {
        c.sp()?;
        status = c.keyword("STATUS");
        if !status {
            return Err(ParseError::Expected("STATUS"));
        }
    }
    let groups = sp_repeat(c, |c| notify_group(c, o))?;
    Ok(Command::Notify(Some(NotifySet { status, groups })))
}

pub(super) fn gen_url_auth(c: &mut Cursor<'_>) -> PResult<Command> {
    let pairs = sp_repeat(c, |c| {
        let url = utf8(c.astring()?)?;
        c.sp()?;
        Ok((url, c.atom()?.to_ascii_uppercase()))
    })?;
    Ok(Command::GenUrlAuth(pairs))
}

pub(super) fn reset_key(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    let mut mailbox_name = None;
    let mut mechanisms = Vec::new();
    if c.eat(b' ') {
        mailbox_name = Some(mailbox(c, o)?);
        while c.eat(b' ') {
            mechanisms.push(c.atom()?.to_ascii_uppercase());
            if mechanisms.len() > MAX_ARGS {
                return Err(ParseError::Invalid("too many arguments"));
            }
        }
    }
    Ok(Command::ResetKey {
        mailbox: mailbox_name,
        mechanisms,
    })
}

pub(super) fn url_fetch(c: &mut Cursor<'_>) -> PResult<Command> {
    let items = sp_repeat(c, |c| {
        if c.peek() == Some(b'(') {
            c.expect(b'(', "(")?;
            let mut item = UrlFetchItem {
                url: utf8(c.astring()?)?,
                body_part_structure: false,
                binary: false,
                body: false,
                extended: true,
            };
            while c.eat(b' ') {
                let a = c.atom()?.to_ascii_uppercase();
                match a.as_str() {
                    "BODYPARTSTRUCTURE" => item.body_part_structure = true,
                    "BINARY" => item.binary = true,
                    "BODY" => item.body = true,
                    _ => return Err(ParseError::Expected("URLFETCH parameter")),
                }
            }
            c.expect(b')', ")")?;
            Ok(item)
        } else {
            Ok(UrlFetchItem {
                url: utf8(c.astring()?)?,
                body_part_structure: false,
                binary: false,
                body: false,
                extended: false,
            })
        }
    })?;
    Ok(Command::UrlFetch(items))
}

/// `XCLIENT 1*(SP key "=" value)`; values are atoms (IPv6 colons included).
pub(super) fn xclient(c: &mut Cursor<'_>) -> PResult<Command> {
    let pairs = sp_repeat(c, |c| {
        let a = c.atom()?;
        let (k, v) = a.split_once('=').ok_or(ParseError::Expected("KEY=value"))?;
        if k.is_empty() {
            return Err(ParseError::Expected("KEY=value"));
        }
        Ok((k.to_ascii_uppercase(), v.to_owned()))
    })?;
    Ok(Command::XClient(pairs))
}
