//! SELECT/EXAMINE (RFC 9051 §6.3.2–3 with RFC 7162 parameters), CREATE
//! (RFC 6154 USE), RENAME, LIST (RFC 5258, RFC 5819), LSUB, STATUS.

use super::{decode_name, mailbox, sequence_set, ParseOptions};
use crate::command::{Command, ListCommand, ListReturn, ListSelect, QResync, Select, StatusItem};
use crate::lexer::{Cursor, PResult};
use crate::ParseError;

pub(super) fn select(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Select> {
    c.sp()?;
    let mailbox = mailbox(c, o)?;
    let mut sel = Select {
        mailbox,
        condstore: false,
        qresync: None,
    };
    if c.eat(b' ') {
        c.paren_list(|c| {
            if c.keyword("CONDSTORE") {
                sel.condstore = true;
                Ok(())
            } else if c.keyword("QRESYNC") {
                c.sp()?;
                sel.qresync = Some(qresync(c)?);
                Ok(())
            } else {
                Err(ParseError::Expected("select parameter"))
            }
        })?;
    }
    Ok(sel)
}

/// "(" uidvalidity SP mod-sequence-value [SP known-uids] [SP seq-match-data] ")"
fn qresync(c: &mut Cursor<'_>) -> PResult<QResync> {
    c.expect(b'(', "(")?;
    c.enter()?;
    let uidvalidity = c.nz_number()?;
    c.sp()?;
    let modseq = c.number64()?;
    let mut q = QResync {
        uidvalidity,
        modseq,
        known_uids: None,
        seq_match: None,
    };
    if c.eat(b' ') {
        if c.peek() != Some(b'(') {
            q.known_uids = Some(sequence_set(c)?);
            if c.eat(b' ') {
                q.seq_match = Some(seq_match(c)?);
            }
        } else {
            q.seq_match = Some(seq_match(c)?);
        }
    }
    c.expect(b')', ")")?;
    c.leave();
    Ok(q)
}

fn seq_match(c: &mut Cursor<'_>) -> PResult<(crate::SequenceSet, crate::SequenceSet)> {
    c.expect(b'(', "(")?;
    let seqs = sequence_set(c)?;
    c.sp()?;
    let uids = sequence_set(c)?;
    c.expect(b')', ")")?;
    Ok((seqs, uids))
}

pub(super) fn create(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    let mailbox = mailbox(c, o)?;
    let mut special_use = Vec::new();
    if c.eat(b' ') {
        c.paren_list(|c| {
            if !c.keyword("USE") {
                return Err(ParseError::Expected("USE"));
            }
            c.sp()?;
            let uses = c.paren_list0(|c| {
                c.expect(b'\\', "special-use attribute")?;
                Ok(format!("\\{}", c.atom()?))
            })?;
            special_use.extend(uses);
            Ok(())
        })?;
    }
    Ok(Command::Create {
        mailbox,
        special_use,
    })
}

pub(super) fn rename(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    let from = mailbox(c, o)?;
    c.sp()?;
    let to = mailbox(c, o)?;
    Ok(Command::Rename { from, to })
}

fn status_items(c: &mut Cursor<'_>) -> PResult<Vec<StatusItem>> {
    c.paren_list(|c| StatusItem::from_name(c.atom()?).ok_or(ParseError::Expected("status item")))
}

pub(super) fn status(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    let mailbox = mailbox(c, o)?;
    c.sp()?;
    let items = status_items(c)?;
    Ok(Command::Status { mailbox, items })
}

pub(super) fn list(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    let mut l = ListCommand::default();
    c.sp()?;
    if c.peek() == Some(b'(') {
        l.extended = true;
        l.select = c.paren_list0(|c| {
            let a = c.atom()?.to_ascii_uppercase();
            Ok(match a.as_str() {
                "SUBSCRIBED" => ListSelect::Subscribed,
                "REMOTE" => ListSelect::Remote,
                "RECURSIVEMATCH" => ListSelect::RecursiveMatch,
                "SPECIAL-USE" => ListSelect::SpecialUse,
                _ => return Err(ParseError::Expected("selection option")),
            })
        })?;
        // RFC 5258 §3.1: RECURSIVEMATCH needs another option to modify.
        if l.select.contains(&ListSelect::RecursiveMatch)
            && !l
                .select
                .iter()
                .any(|s| matches!(s, ListSelect::Subscribed | ListSelect::SpecialUse))
        {
            return Err(ParseError::Invalid("RECURSIVEMATCH alone"));
        }
        c.sp()?;
    }
    let reference = c.astring()?;
    l.reference = decode_name(&reference, o)?;
    c.sp()?;
    if c.peek() == Some(b'(') {
        l.extended = true;
        l.patterns = c.paren_list(|c| decode_name(&c.list_mailbox()?, o))?;
    } else {
        l.patterns = vec![decode_name(&c.list_mailbox()?, o)?];
    }
    if c.eat(b' ') {
        if !c.keyword("RETURN") {
            return Err(ParseError::Expected("RETURN"));
        }
        l.extended = true;
        c.sp()?;
        l.ret = c.paren_list0(|c| {
            let a = c.atom()?.to_ascii_uppercase();
            Ok(match a.as_str() {
                "SUBSCRIBED" => ListReturn::Subscribed,
                "CHILDREN" => ListReturn::Children,
                "SPECIAL-USE" => ListReturn::SpecialUse,
                "MYRIGHTS" => ListReturn::MyRights,
                "STATUS" => {
                    c.sp()?;
                    ListReturn::Status(status_items(c)?)
                }
                _ => return Err(ParseError::Expected("return option")),
            })
        })?;
    }
    Ok(Command::List(l))
}

pub(super) fn lsub(c: &mut Cursor<'_>, o: ParseOptions) -> PResult<Command> {
    c.sp()?;
    let reference = decode_name(&c.astring()?, o)?;
    c.sp()?;
    let pattern = decode_name(&c.list_mailbox()?, o)?;
    Ok(Command::Lsub { reference, pattern })
}
