//! STORE (RFC 9051 §6.4.6, UNCHANGEDSINCE from RFC 7162), COPY (§6.4.7),
//! MOVE (RFC 6851).

use super::{flag, mailbox, sequence_set, ParseOptions};
use crate::command::{Command, Store, StoreMode};
use crate::lexer::{Cursor, PResult};
use crate::ParseError;

pub(super) fn store(c: &mut Cursor<'_>, uid: bool) -> PResult<Command> {
    c.sp()?;
    let set = sequence_set(c)?;
    c.sp()?;
    let mut unchanged_since = None;
    if c.peek() == Some(b'(') {
        c.paren_list(|c| {
            if !c.keyword("UNCHANGEDSINCE") {
                return Err(ParseError::Expected("store modifier"));
            }
            c.sp()?;
            unchanged_since = Some(c.number64()?);
            Ok(())
        })?;
        c.sp()?;
    }
    let mode = if c.eat(b'+') {
        StoreMode::Add
    } else if c.eat(b'-') {
        StoreMode::Remove
    } else {
        StoreMode::Replace
    };
    let silent = if c.keyword("FLAGS") {
        false
    } else if c.keyword("FLAGS.SILENT") {
        true
    } else {
        return Err(ParseError::Expected("FLAGS"));
    };
    c.sp()?;
    // store-att-flags: flag-list / (flag *(SP flag))
    let flags = if c.peek() == Some(b'(') {
        super::flag_list(c)?
    } else {
        let mut v = vec![flag(c)?];
        while c.eat(b' ') {
            v.push(flag(c)?);
        }
        if v.contains(&crate::Flag::Wildcard) {
            return Err(ParseError::Invalid("flag"));
        }
        v
    };
    Ok(Command::Store(Store {
        uid,
        set,
        unchanged_since,
        mode,
        silent,
        flags,
    }))
}

pub(super) fn copy_move(
    c: &mut Cursor<'_>,
    o: ParseOptions,
    uid: bool,
    is_move: bool,
) -> PResult<Command> {
    c.sp()?;
    let set = sequence_set(c)?;
    c.sp()?;
    let mailbox = mailbox(c, o)?;
    Ok(if is_move {
        Command::Move { uid, set, mailbox }
    } else {
        Command::Copy { uid, set, mailbox }
    })
}
