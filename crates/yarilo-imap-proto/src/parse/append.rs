//! APPEND (RFC 9051 §6.3.12) with MULTIAPPEND (RFC 3502), BINARY literal8
//! (RFC 3516), UTF8=ACCEPT (RFC 6855 §4) and CATENATE (RFC 4469).
//!
//! Two entry points share the grammar: [`append`] parses a whole command
//! held in memory (tests, fuzzing), and [`append_step`] parses the part of a
//! command received since the last streamed literal, so the
//! [`Receiver`](crate::Receiver) can hand message data to the session in
//! chunks instead of buffering it.

use super::{date_time, flag_list, mailbox, ParseOptions};
use crate::command::{AppendData, AppendMessage, CatPart, Command, Tag};
use crate::lexer::{Cursor, LiteralAnnounce, PResult};
use crate::{DateTime, Flag, Mailbox, ParseError};

/// The most messages one MULTIAPPEND may carry.
pub const MAX_APPEND_MESSAGES: u32 = 10_000;
/// The most parts one CATENATE may carry.
const MAX_CAT_PARTS: usize = 1_000;

/// Flags and date preceding a message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct AppendHeader {
    pub(crate) flags: Vec<Flag>,
    pub(crate) date: Option<DateTime>,
}

/// How a message's data begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataStart {
    /// `{n}` or `~{n}`: the message follows.
    Literal(LiteralAnnounce),
    /// `UTF8 (~{n}`: the message follows, then `)`.
    Utf8(LiteralAnnounce),
    /// `CATENATE (`: parts follow.
    Catenate,
}

/// SP [flag-list SP] [date-time SP], leaving the cursor on append-data.
pub(crate) fn append_message_header(c: &mut Cursor<'_>) -> PResult<AppendHeader> {
    c.sp()?;
    let mut h = AppendHeader::default();
    if c.peek() == Some(b'(') {
        h.flags = flag_list(c)?;
        c.sp()?;
    }
    if c.peek() == Some(b'"') {
        h.date = Some(date_time(c)?);
        c.sp()?;
    }
    Ok(h)
}

/// append-data up to and including the first literal announcement (or the
/// `(` of CATENATE).
pub(crate) fn append_data_start(c: &mut Cursor<'_>) -> PResult<DataStart> {
    match c.peek() {
        Some(b'{' | b'~') => Ok(DataStart::Literal(c.literal_announce()?)),
        Some(_) => {
            let a = c.atom()?.to_ascii_uppercase();
            c.sp()?;
            c.expect(b'(', "(")?;
            match a.as_str() {
                "UTF8" => {
                    let ann = c.literal_announce()?;
                    if !ann.binary {
                        return Err(ParseError::Expected("literal8"));
                    }
                    Ok(DataStart::Utf8(ann))
                }
                "CATENATE" => Ok(DataStart::Catenate),
                _ => Err(ParseError::Expected("append data")),
            }
        }
        None => Err(ParseError::Eof),
    }
}

/// cat-part up to the TEXT literal announcement.
enum CatStart {
    Url(String),
    Text(LiteralAnnounce),
}

fn cat_part_start(c: &mut Cursor<'_>) -> PResult<CatStart> {
    let a = c.atom()?.to_ascii_uppercase();
    c.sp()?;
    match a.as_str() {
        "URL" => {
            let url = c.astring()?;
            String::from_utf8(url.into_owned())
                .map(CatStart::Url)
                .map_err(|_| ParseError::Invalid("URL"))
        }
        "TEXT" => Ok(CatStart::Text(c.literal_announce()?)),
        _ => Err(ParseError::Expected("URL or TEXT")),
    }
}

fn literal_data<'a>(c: &mut Cursor<'a>, ann: LiteralAnnounce) -> PResult<&'a [u8]> {
    let size = usize::try_from(ann.size).map_err(|_| ParseError::Invalid("literal size"))?;
    let data = c.rest().get(..size).ok_or(ParseError::Eof)?;
    if !ann.binary && data.contains(&0) {
        return Err(ParseError::Invalid("NUL in literal"));
    }
    c.skip(size);
    Ok(data)
}

/// A whole APPEND command in memory.
pub(super) fn append(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    let mailbox = mailbox(c, o)?;
    let mut messages = Vec::new();
    loop {
        let h = append_message_header(c)?;
        let data = match append_data_start(c)? {
            DataStart::Literal(ann) => AppendData::Literal {
                data: literal_data(c, ann)?.to_vec(),
                binary: ann.binary,
            },
            DataStart::Utf8(ann) => {
                let d = literal_data(c, ann)?.to_vec();
                c.expect(b')', ")")?;
                AppendData::Utf8(d)
            }
            DataStart::Catenate => {
                let mut parts = Vec::new();
                loop {
                    parts.push(match cat_part_start(c)? {
                        CatStart::Url(u) => CatPart::Url(u),
                        CatStart::Text(ann) => CatPart::Text(literal_data(c, ann)?.to_vec()),
                    });
                    if parts.len() > MAX_CAT_PARTS {
                        return Err(ParseError::Invalid("too many CATENATE parts"));
                    }
                    if c.eat(b')') {
                        break;
                    }
                    c.sp()?;
                }
                AppendData::Catenate(parts)
            }
        };
        messages.push(AppendMessage {
            flags: h.flags,
            date: h.date,
            data,
        });
        if messages.len() as u32 > MAX_APPEND_MESSAGES {
            return Err(ParseError::Invalid("too many messages"));
        }
        if c.peek() != Some(b' ') {
            break;
        }
    }
    Ok(Command::Append { mailbox, messages })
}

/// Where an APPEND being streamed stands between two streamed literals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AppendState {
    /// Nothing parsed yet: `tag APPEND mailbox` comes first.
    Start,
    /// After the mailbox or a complete message: SP + message, or CRLF.
    BetweenMessages {
        /// At least one message was seen (CRLF allowed).
        any: bool,
    },
    /// After the literal8 of `UTF8 (`: `)` comes next.
    AfterUtf8,
    /// Inside `CATENATE (`; `first` when no part was read yet.
    InCatenate {
        /// No part yet (a part is required).
        first: bool,
    },
}

/// What the session is told about an APPEND (RFC 3502: the messages of one
/// command are committed together, at [`AppendEvent::Done`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendEvent {
    /// A message starts. For [`AppendKind::Literal`] and
    /// [`AppendKind::Utf8`] its data follows as [`AppendEvent::Chunk`]s
    /// closed by [`AppendEvent::LiteralEnd`]; for [`AppendKind::Catenate`]
    /// parts follow until [`AppendEvent::CatEnd`]. When the announced
    /// literal is synchronizing the driver must send a continuation (or call
    /// [`Receiver::reject_literal`](crate::Receiver::reject_literal) and
    /// reply with a tagged NO/BAD).
    Message {
        /// Target mailbox.
        mailbox: Mailbox,
        /// Initial flags.
        flags: Vec<Flag>,
        /// INTERNALDATE to set.
        date: Option<DateTime>,
        /// How the data is sent.
        kind: AppendKind,
    },
    /// A CATENATE URL part.
    CatUrl(String),
    /// A CATENATE TEXT part starts; its data follows as chunks.
    CatText(LiteralAnnounce),
    /// A piece of the current literal, in order.
    Chunk(bytes::Bytes),
    /// The current literal is complete.
    LiteralEnd,
    /// The current CATENATE message has no more parts.
    CatEnd,
    /// The command ended with CRLF: commit every message.
    Done,
}

/// How an APPENDed message is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendKind {
    /// A literal or literal8.
    Literal(LiteralAnnounce),
    /// `UTF8 (literal8)` (RFC 6855).
    Utf8(LiteralAnnounce),
    /// `CATENATE (...)` (RFC 4469).
    Catenate,
}

/// The result of one [`append_step`].
#[derive(Debug)]
pub(crate) enum StepEnd {
    /// A literal to stream follows; continue in `after` once it is done.
    Stream {
        ann: LiteralAnnounce,
        after: AppendState,
    },
    /// The command is complete.
    Done,
}

/// Parses `buf` (everything since the last streamed literal, complete
/// lines only) from `state`. `Err(Eof)` means a small literal inside the
/// syntax (a mailbox or URL) must be read first. `mailbox` is filled in by
/// the `Start` state and read by later ones.
pub(crate) fn append_step(
    buf: &[u8],
    mut state: AppendState,
    o: ParseOptions,
    tag_out: &mut Option<Tag>,
    mailbox_slot: &mut Option<Mailbox>,
    events: &mut Vec<AppendEvent>,
) -> PResult<StepEnd> {
    let mut c = Cursor::new(buf);
    loop {
        match state {
            AppendState::Start => {
                *tag_out = Some(c.tag()?.to_owned());
                c.sp()?;
                if !c.keyword("APPEND") {
                    return Err(ParseError::Expected("APPEND"));
                }
                c.sp()?;
                *mailbox_slot = Some(mailbox(&mut c, o)?);
                state = AppendState::BetweenMessages { any: false };
            }
            AppendState::BetweenMessages { any } => {
                if any && c.peek() == Some(b'\r') {
                    c.crlf()?;
                    if !c.at_end() {
                        return Err(ParseError::Trailing);
                    }
                    events.push(AppendEvent::Done);
                    return Ok(StepEnd::Done);
                }
                let h = append_message_header(&mut c)?;
                let start = append_data_start(&mut c)?;
                let mailbox = mailbox_slot
                    .clone()
                    .ok_or(ParseError::Expected("mailbox"))?;
                let kind = match start {
                    DataStart::Literal(a) => AppendKind::Literal(a),
                    DataStart::Utf8(a) => AppendKind::Utf8(a),
                    DataStart::Catenate => AppendKind::Catenate,
                };
                events.push(AppendEvent::Message {
                    mailbox,
                    flags: h.flags,
                    date: h.date,
                    kind,
                });
                match start {
                    DataStart::Literal(ann) => {
                        return finish_stream(&c, ann, AppendState::BetweenMessages { any: true })
                    }
                    DataStart::Utf8(ann) => return finish_stream(&c, ann, AppendState::AfterUtf8),
                    DataStart::Catenate => state = AppendState::InCatenate { first: true },
                }
            }
            AppendState::AfterUtf8 => {
                c.expect(b')', ")")?;
                state = AppendState::BetweenMessages { any: true };
            }
            AppendState::InCatenate { first } => {
                if !first {
                    if c.eat(b')') {
                        events.push(AppendEvent::CatEnd);
                        state = AppendState::BetweenMessages { any: true };
                        continue;
                    }
                    c.sp()?;
                }
                if events.len() > MAX_CAT_PARTS {
                    return Err(ParseError::Invalid("too many CATENATE parts"));
                }
                match cat_part_start(&mut c)? {
                    CatStart::Url(u) => {
                        events.push(AppendEvent::CatUrl(u));
                        state = AppendState::InCatenate { first: false };
                    }
                    CatStart::Text(ann) => {
                        events.push(AppendEvent::CatText(ann));
                        return finish_stream(&c, ann, AppendState::InCatenate { first: false });
                    }
                }
            }
        }
    }
}

fn finish_stream(c: &Cursor<'_>, ann: LiteralAnnounce, after: AppendState) -> PResult<StepEnd> {
    // A data literal is always the last thing of the lines received so far.
    if !c.at_end() {
        return Err(ParseError::Trailing);
    }
    Ok(StepEnd::Stream { ann, after })
}
