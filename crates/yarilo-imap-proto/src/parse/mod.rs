//! The command grammar (RFC 9051 §9 plus extensions), one file per command
//! family. Every function here takes a [`Cursor`] over one complete command
//! (literals inline) and either consumes exactly its production or fails.
//!
//! Invariant: no function panics on any input; recursion is bounded by
//! [`crate::lexer::MAX_DEPTH`].

mod append;
mod auth;
mod ext;
mod fetch;
mod mailbox;
mod search;
mod store;

pub(crate) use append::{append_step, AppendState, StepEnd};
pub use append::{AppendEvent, AppendKind, MAX_APPEND_MESSAGES};

use crate::command::{Command, Tag};
use crate::lexer::{Cursor, PResult};
use crate::{Date, DateTime, Flag, Mailbox, ParseError, SeqItem, SeqNum, SequenceSet};

/// Session facts that change how bytes are decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// Mailbox names are UTF-8 (IMAP4rev2 or UTF8=ACCEPT enabled) rather
    /// than modified UTF-7.
    pub utf8_names: bool,
}

/// Parses one complete command, CRLF included, literals inline as on the
/// wire. On error the tag is returned when it could be read, so the reply
/// can be a tagged BAD.
pub fn parse_command(
    buf: &[u8],
    opts: ParseOptions,
) -> Result<(Tag, Command), (Option<Tag>, ParseError)> {
    let mut c = Cursor::new(buf);
    let tag = match c.tag() {
        Ok(t) => t.to_owned(),
        Err(e) => return Err((None, e)),
    };
    let res = (|| {
        c.sp()?;
        let cmd = command(&mut c, opts)?;
        c.crlf()?;
        if !c.at_end() {
            return Err(ParseError::Trailing);
        }
        Ok(cmd)
    })();
    match res {
        Ok(cmd) => Ok((tag, cmd)),
        Err(e) => Err((Some(tag), e)),
    }
}

fn command(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    let name = c.atom()?.to_ascii_uppercase();
    let simple = |cmd: Command| Ok(cmd);
    match name.as_str() {
        "CAPABILITY" => simple(Command::Capability),
        "NOOP" => simple(Command::Noop),
        "LOGOUT" => simple(Command::Logout),
        "STARTTLS" => simple(Command::StartTls),
        "NAMESPACE" => simple(Command::Namespace),
        "IDLE" => simple(Command::Idle),
        "CHECK" => simple(Command::Check),
        "CLOSE" => simple(Command::Close),
        "UNSELECT" => simple(Command::Unselect),
        "EXPUNGE" => simple(Command::Expunge),
        "ID" => auth::id(c),
        "AUTHENTICATE" => auth::authenticate(c),
        "LOGIN" => auth::login(c),
        "ENABLE" => auth::enable(c),
        "SELECT" => mailbox::select(c, o).map(Command::Select),
        "EXAMINE" => mailbox::select(c, o).map(Command::Examine),
        "CREATE" => mailbox::create(c, o),
        "DELETE" => one_mailbox(c, o).map(Command::Delete),
        "SUBSCRIBE" => one_mailbox(c, o).map(Command::Subscribe),
        "UNSUBSCRIBE" => one_mailbox(c, o).map(Command::Unsubscribe),
        "RENAME" => mailbox::rename(c, o),
        "LIST" => mailbox::list(c, o),
        "LSUB" => mailbox::lsub(c, o),
        "STATUS" => mailbox::status(c, o),
        "APPEND" => append::append(c, o),
        "SEARCH" => search::search(c, false),
        "SORT" => search::sort(c, false),
        "THREAD" => search::thread(c, false),
        "FETCH" => fetch::fetch(c, false),
        "STORE" => store::store(c, false),
        "COPY" => store::copy_move(c, o, false, false),
        "MOVE" => store::copy_move(c, o, false, true),
        "UID" => {
            c.sp()?;
            let sub = c.atom()?.to_ascii_uppercase();
            match sub.as_str() {
                "SEARCH" => search::search(c, true),
                "SORT" => search::sort(c, true),
                "THREAD" => search::thread(c, true),
                "FETCH" => fetch::fetch(c, true),
                "STORE" => store::store(c, true),
                "COPY" => store::copy_move(c, o, true, false),
                "MOVE" => store::copy_move(c, o, true, true),
                "EXPUNGE" => {
                    c.sp()?;
                    Ok(Command::UidExpunge(sequence_set(c)?))
                }
                _ => Err(ParseError::UnknownCommand),
            }
        }
        "CANCELUPDATE" => ext::cancel_update(c),
        "GETQUOTA" => ext::get_quota(c),
        "GETQUOTAROOT" => one_mailbox(c, o).map(Command::GetQuotaRoot),
        "SETQUOTA" => ext::set_quota(c),
        "GETMETADATA" => ext::get_metadata(c, o),
        "SETMETADATA" => ext::set_metadata(c, o),
        "NOTIFY" => ext::notify(c, o),
        "COMPRESS" => {
            c.sp()?;
            Ok(Command::Compress(c.atom()?.to_ascii_uppercase()))
        }
        "GENURLAUTH" => ext::gen_url_auth(c),
        "RESETKEY" => ext::reset_key(c, o),
        "URLFETCH" => ext::url_fetch(c),
        "XCLIENT" => ext::xclient(c),
        _ => Err(ParseError::UnknownCommand),
    }
}

fn one_mailbox(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Mailbox> {
    c.sp()?;
    mailbox(c, o)
}

/// mailbox = "INBOX" / astring, decoded.
pub(crate) fn mailbox(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Mailbox> {
    // Any astring is a mailbox name (RFC 9051 §9); one that does not
    // decode names no mailbox, which the command answers with NO.
    let raw = c.astring()?;
    Ok(Mailbox::from_wire_lossy(&raw, o.utf8_names))
}

/// Decodes a list-mailbox / reference (wildcards kept). A pattern that is
/// not a valid encoding is matched as spelled, so it finds nothing rather
/// than failing the command (as Dovecot does).
pub(crate) fn decode_name(raw: &[u8], o: ParseOptions) -> PResult<String> {
    let decoded = if o.utf8_names {
        String::from_utf8(raw.to_vec()).ok()
    } else {
        crate::utf7::decode(raw).ok()
    };
    Ok(decoded.unwrap_or_else(|| String::from_utf8_lossy(raw).into_owned()))
}

fn seq_num(c: &mut Cursor<'_>) -> PResult<SeqNum> {
    if c.eat(b'*') {
        Ok(SeqNum::Largest)
    } else {
        Ok(SeqNum::Value(c.nz_number()?))
    }
}

/// The most items one sequence set may hold; more is a BAD (bounds memory).
const MAX_SEQ_ITEMS: usize = 100_000;

/// sequence-set / "$" (RFC 5182).
pub(crate) fn sequence_set(c: &mut Cursor<'_>) -> PResult<SequenceSet> {
    if c.eat(b'$') {
        return Ok(SequenceSet::Saved);
    }
    let mut items = Vec::new();
    loop {
        let a = seq_num(c)?;
        let item = if c.eat(b':') {
            SeqItem::Range(a, seq_num(c)?)
        } else {
            SeqItem::One(a)
        };
        items.push(item);
        if items.len() > MAX_SEQ_ITEMS {
            return Err(ParseError::Invalid("sequence set too long"));
        }
        if !c.eat(b',') {
            break;
        }
    }
    Ok(SequenceSet::Set(items))
}

/// True when the next byte can start a sequence set.
pub(crate) fn starts_sequence_set(c: &Cursor<'_>) -> bool {
    matches!(c.peek(), Some(b'0'..=b'9' | b'*' | b'$'))
}

/// flag (RFC 9051): `\Word`, keyword atom. `\*` only when `allow_wildcard`.
pub(crate) fn flag(c: &mut Cursor<'_>) -> PResult<Flag> {
    if c.eat(b'\\') {
        if c.eat(b'*') {
            return Ok(Flag::Wildcard);
        }
        let a = c.atom()?;
        let f = Flag::parse(&format!("\\{a}"));
        if f == Flag::Recent {
            // RFC 9051 §2.3.2: \Recent cannot be set by a client.
            return Err(ParseError::Invalid("flag \\Recent"));
        }
        Ok(f)
    } else {
        Ok(Flag::Keyword(c.atom()?.to_owned()))
    }
}

/// flag-list = "(" [flag *(SP flag)] ")"
pub(crate) fn flag_list(c: &mut Cursor<'_>) -> PResult<Vec<Flag>> {
    let flags = c.paren_list0(flag)?;
    if flags.contains(&Flag::Wildcard) {
        return Err(ParseError::Invalid("flag"));
    }
    Ok(flags)
}

fn fixed_digits(c: &mut Cursor<'_>, n: usize) -> PResult<u32> {
    let mut v = 0u32;
    for _ in 0..n {
        match c.peek() {
            Some(b @ b'0'..=b'9') => {
                v = v * 10 + u32::from(b - b'0');
                c.skip(1);
            }
            Some(_) => return Err(ParseError::Expected("digit")),
            None => return Err(ParseError::Eof),
        }
    }
    Ok(v)
}

fn month(c: &mut Cursor<'_>) -> PResult<u8> {
    let m = c.rest().get(..3).ok_or(ParseError::Eof)?;
    let m = Date::month_from_name(m).ok_or(ParseError::Invalid("month"))?;
    c.skip(3);
    Ok(m)
}

/// date = date-text / DQUOTE date-text DQUOTE; date-text = 1*2DIGIT "-" Mon "-" 4DIGIT
pub(crate) fn date(c: &mut Cursor<'_>) -> PResult<Date> {
    let quoted = c.eat(b'"');
    let d = c.digits()?;
    if d.len() > 2 {
        return Err(ParseError::Invalid("date"));
    }
    let day = d.iter().fold(0u8, |a, b| a * 10 + (b - b'0'));
    c.expect(b'-', "-")?;
    let m = month(c)?;
    c.expect(b'-', "-")?;
    let y = fixed_digits(c, 4)?;
    if quoted {
        c.expect(b'"', "\"")?;
    }
    Date::new(y as u16, m, day).ok_or(ParseError::Invalid("date"))
}

/// date-time = DQUOTE date-day-fixed "-" date-month "-" date-year SP time SP zone DQUOTE
pub(crate) fn date_time(c: &mut Cursor<'_>) -> PResult<DateTime> {
    c.expect(b'"', "date-time")?;
    let day = if c.eat(b' ') {
        fixed_digits(c, 1)?
    } else {
        fixed_digits(c, 2)?
    };
    c.expect(b'-', "-")?;
    let m = month(c)?;
    c.expect(b'-', "-")?;
    let y = fixed_digits(c, 4)?;
    c.sp()?;
    let hour = fixed_digits(c, 2)?;
    c.expect(b':', ":")?;
    let minute = fixed_digits(c, 2)?;
    c.expect(b':', ":")?;
    let second = fixed_digits(c, 2)?;
    c.sp()?;
    let sign: i16 = match c.peek() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err(ParseError::Expected("zone")),
    };
    c.skip(1);
    let zh = fixed_digits(c, 2)?;
    let zm = fixed_digits(c, 2)?;
    c.expect(b'"', "\"")?;
    if hour > 23 || minute > 59 || second > 60 || zh > 23 || zm > 59 {
        return Err(ParseError::Invalid("date-time"));
    }
    let date = Date::new(y as u16, m, day as u8).ok_or(ParseError::Invalid("date-time"))?;
    Ok(DateTime {
        date,
        hour: hour as u8,
        minute: minute as u8,
        second: second as u8,
        zone_minutes: sign * (zh as i16 * 60 + zm as i16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_time_parses_space_padded_day() {
        let mut c = Cursor::new(br#"" 7-Feb-1994 21:52:25 -0800""#);
        let dt = date_time(&mut c).unwrap();
        assert_eq!(dt.date, Date::new(1994, 2, 7).unwrap());
        assert_eq!(dt.zone_minutes, -480);
        assert_eq!(dt.to_string(), " 7-Feb-1994 21:52:25 -0800");
    }

    #[test]
    fn sequence_set_round_trips() {
        for s in ["1", "1:*", "2,4:7,9,12:*", "*:4", "$"] {
            let mut c = Cursor::new(s.as_bytes());
            assert_eq!(sequence_set(&mut c).unwrap().to_string(), s);
        }
        assert!(sequence_set(&mut Cursor::new(b"0")).is_err());
    }
}
