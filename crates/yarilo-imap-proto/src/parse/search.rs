//! SEARCH (RFC 9051 §6.4.4), SORT and THREAD (RFC 5256), with ESEARCH
//! return options (RFC 4731, RFC 5182, RFC 5267, RFC 9394).

use super::{date, sequence_set, starts_sequence_set};
use crate::command::search::SearchKind;
use crate::command::{Command, SearchCommand, SearchKey, SearchReturn, SortCriterion, SortKey};
use crate::lexer::{Cursor, PResult};
use crate::ParseError;

/// The most keys one command may hold (bounds memory for hostile input).
const MAX_KEYS: usize = 10_000;

fn return_opts(c: &mut Cursor<'_>) -> PResult<Option<Vec<SearchReturn>>> {
    if !(c.peek() == Some(b' ')
        && c.rest()
            .get(1..7)
            .is_some_and(|r| r.eq_ignore_ascii_case(b"RETURN")))
    {
        return Ok(None);
    }
    c.sp()?;
    c.keyword("RETURN")
        .then_some(())
        .ok_or(ParseError::Expected("RETURN"))?;
    c.sp()?;
    let opts = c.paren_list0(|c| {
        let a = c.atom()?.to_ascii_uppercase();
        Ok(match a.as_str() {
            "MIN" => SearchReturn::Min,
            "MAX" => SearchReturn::Max,
            "ALL" => SearchReturn::All,
            "COUNT" => SearchReturn::Count,
            "SAVE" => SearchReturn::Save,
            "UPDATE" => SearchReturn::Update,
            "CONTEXT" => SearchReturn::Context,
            "PARTIAL" => {
                c.sp()?;
                let neg = c.eat(b'-');
                let a = i64::from(c.nz_number()?);
                c.expect(b':', ":")?;
                if neg {
                    c.expect(b'-', "-")?;
                }
                let b = i64::from(c.nz_number()?);
                if neg {
                    SearchReturn::Partial(-a, -b)
                } else {
                    // RFC 5267 §4.4: `4:2` is the range 2:4, and the
                    // response names it so.
                    SearchReturn::Partial(a.min(b), a.max(b))
                }
            }
            _ => return Err(ParseError::Expected("search return option")),
        })
    })?;
    Ok(Some(opts))
}

/// charset = atom / quoted (a literal is accepted too, like Dovecot).
fn charset(c: &mut Cursor<'_>) -> PResult<String> {
    let raw = c.astring()?.into_owned();
    String::from_utf8(raw)
        .map(|s| s.to_ascii_uppercase())
        .map_err(|_| ParseError::Invalid("charset"))
}

/// search-key *(SP search-key), at least one.
fn keys(c: &mut Cursor<'_>) -> PResult<Vec<SearchKey>> {
    let mut keys = vec![search_key(c)?];
    while c.peek() == Some(b' ') {
        c.sp()?;
        keys.push(search_key(c)?);
        if keys.len() > MAX_KEYS {
            return Err(ParseError::Invalid("too many search keys"));
        }
    }
    Ok(keys)
}

pub(super) fn search(c: &mut Cursor<'_>, uid: bool) -> PResult<Command> {
    let ret = return_opts(c)?;
    c.sp()?;
    let mut charset_name = None;
    if c.keyword("CHARSET") {
        c.sp()?;
        charset_name = Some(charset(c)?);
        c.sp()?;
    }
    Ok(Command::Search(SearchCommand {
        uid,
        kind: SearchKind::Search,
        ret,
        charset: charset_name,
        keys: keys(c)?,
    }))
}

pub(super) fn sort(c: &mut Cursor<'_>, uid: bool) -> PResult<Command> {
    let ret = return_opts(c)?;
    c.sp()?;
    let criteria = c.paren_list(|c| {
        let reverse = c.keyword("REVERSE");
        if reverse {
            c.sp()?;
        }
        let a = c.atom()?.to_ascii_uppercase();
        let key = match a.as_str() {
            "ARRIVAL" => SortKey::Arrival,
            "CC" => SortKey::Cc,
            "DATE" => SortKey::Date,
            "FROM" => SortKey::From,
            "SIZE" => SortKey::Size,
            "SUBJECT" => SortKey::Subject,
            "TO" => SortKey::To,
            "DISPLAYFROM" => SortKey::DisplayFrom,
            "DISPLAYTO" => SortKey::DisplayTo,
            _ => return Err(ParseError::Expected("sort key")),
        };
        Ok(SortCriterion { reverse, key })
    })?;
    c.sp()?;
    let cs = charset(c)?;
    c.sp()?;
    Ok(Command::Search(SearchCommand {
        uid,
        kind: SearchKind::Sort(criteria),
        ret,
        charset: Some(cs),
        keys: keys(c)?,
    }))
}

pub(super) fn thread(c: &mut Cursor<'_>, uid: bool) -> PResult<Command> {
    c.sp()?;
    let alg = c.atom()?.to_ascii_uppercase();
    c.sp()?;
    let cs = charset(c)?;
    c.sp()?;
    Ok(Command::Search(SearchCommand {
        uid,
        kind: SearchKind::Thread(alg),
        ret: None,
        charset: Some(cs),
        keys: keys(c)?,
    }))
}

fn string_arg(c: &mut Cursor<'_>) -> PResult<Vec<u8>> {
    c.sp()?;
    Ok(c.astring()?.into_owned())
}

fn date_arg(c: &mut Cursor<'_>) -> PResult<crate::Date> {
    c.sp()?;
    date(c)
}

fn atom_arg(c: &mut Cursor<'_>) -> PResult<String> {
    c.sp()?;
    Ok(c.atom()?.to_owned())
}

fn search_key(c: &mut Cursor<'_>) -> PResult<SearchKey> {
    c.enter()?;
    let k = search_key_inner(c);
    c.leave();
    k
}

fn search_key_inner(c: &mut Cursor<'_>) -> PResult<SearchKey> {
    use SearchKey as K;
    if c.peek() == Some(b'(') {
        c.expect(b'(', "(")?;
        let ks = keys(c)?;
        c.expect(b')', ")")?;
        return Ok(K::And(ks));
    }
    if starts_sequence_set(c) {
        return Ok(K::SequenceSet(sequence_set(c)?));
    }
    let name = c.atom()?.to_ascii_uppercase();
    Ok(match name.as_str() {
        "ALL" => K::All,
        "ANSWERED" => K::Answered,
        "BCC" => K::Bcc(string_arg(c)?),
        "BEFORE" => K::Before(date_arg(c)?),
        "BODY" => K::Body(string_arg(c)?),
        "CC" => K::Cc(string_arg(c)?),
        "DELETED" => K::Deleted,
        "DRAFT" => K::Draft,
        "FLAGGED" => K::Flagged,
        "FROM" => K::From(string_arg(c)?),
        "HEADER" => {
            let field = String::from_utf8(string_arg(c)?)
                .map_err(|_| ParseError::Invalid("header name"))?;
            K::Header(field, string_arg(c)?)
        }
        "KEYWORD" => K::Keyword(atom_arg(c)?),
        "LARGER" => {
            c.sp()?;
            K::Larger(c.number64()?)
        }
        "NEW" => K::New,
        "NOT" => {
            c.sp()?;
            K::Not(Box::new(search_key(c)?))
        }
        "OLD" => K::Old,
        "ON" => K::On(date_arg(c)?),
        "OR" => {
            c.sp()?;
            let a = search_key(c)?;
            c.sp()?;
            K::Or(Box::new(a), Box::new(search_key(c)?))
        }
        "RECENT" => K::Recent,
        "SEEN" => K::Seen,
        "SENTBEFORE" => K::SentBefore(date_arg(c)?),
        "SENTON" => K::SentOn(date_arg(c)?),
        "SENTSINCE" => K::SentSince(date_arg(c)?),
        "SINCE" => K::Since(date_arg(c)?),
        "SMALLER" => {
            c.sp()?;
            K::Smaller(c.number64()?)
        }
        "SUBJECT" => K::Subject(string_arg(c)?),
        "TEXT" => K::Text(string_arg(c)?),
        "TO" => K::To(string_arg(c)?),
        "UID" => {
            c.sp()?;
            K::Uid(sequence_set(c)?)
        }
        "UNANSWERED" => K::Unanswered,
        "UNDELETED" => K::Undeleted,
        "UNDRAFT" => K::Undraft,
        "UNFLAGGED" => K::Unflagged,
        "UNKEYWORD" => K::Unkeyword(atom_arg(c)?),
        "UNSEEN" => K::Unseen,
        "MODSEQ" => {
            c.sp()?;
            let entry = if matches!(c.peek(), Some(b'"' | b'{')) {
                let name = String::from_utf8(c.string()?.into_owned())
                    .map_err(|_| ParseError::Invalid("entry name"))?;
                let kind = atom_arg(c)?.to_ascii_lowercase();
                if !matches!(kind.as_str(), "priv" | "shared" | "all") {
                    return Err(ParseError::Expected("entry type"));
                }
                c.sp()?;
                Some((name, kind))
            } else {
                None
            };
            K::ModSeq {
                entry,
                modseq: c.number64()?,
            }
        }
        "YOUNGER" => {
            c.sp()?;
            K::Younger(u64::from(c.nz_number()?))
        }
        "OLDER" => {
            c.sp()?;
            K::Older(u64::from(c.nz_number()?))
        }
        "SAVEDBEFORE" => K::SavedBefore(date_arg(c)?),
        "SAVEDON" => K::SavedOn(date_arg(c)?),
        "SAVEDSINCE" => K::SavedSince(date_arg(c)?),
        "SAVEDATESUPPORTED" => K::SaveDateSupported,
        "EMAILID" => K::EmailId(atom_arg(c)?),
        "THREADID" => K::ThreadId(atom_arg(c)?),
        _ => return Err(ParseError::Expected("search key")),
    })
}
