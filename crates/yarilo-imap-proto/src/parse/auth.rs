//! ID (RFC 2971), AUTHENTICATE with SASL-IR (RFC 9051 §6.2.2, RFC 4959),
//! LOGIN (§6.2.3), ENABLE (RFC 5161).

use crate::command::Command;
use crate::lexer::{Cursor, PResult};
use crate::ParseError;

/// RFC 2971 §3.3: at most 30 field-value pairs.
const MAX_ID_PAIRS: usize = 30;

pub(super) fn id(c: &mut Cursor<'_>) -> PResult<Command> {
    c.sp()?;
    if c.keyword("NIL") {
        return Ok(Command::Id(None));
    }
    let mut pairs = Vec::new();
    c.expect(b'(', "(")?;
    if !c.eat(b')') {
        loop {
            let k = c.string()?;
            c.sp()?;
            let v = c.nstring()?;
            let k = String::from_utf8_lossy(&k).into_owned();
            pairs.push((k, v.map(|v| String::from_utf8_lossy(&v).into_owned())));
            if pairs.len() > MAX_ID_PAIRS {
                return Err(ParseError::Invalid("ID list too long"));
            }
            if c.eat(b')') {
                break;
            }
            c.sp()?;
        }
    }
    Ok(Command::Id(Some(pairs)))
}

fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='
}

pub(super) fn authenticate(c: &mut Cursor<'_>) -> PResult<Command> {
    c.sp()?;
    let mechanism = c.atom()?.to_ascii_uppercase();
    let initial = if c.eat(b' ') {
        // RFC 4959: initial-resp = base64 / "="
        let s = c.take_while(is_base64);
        if s.is_empty() {
            return Err(ParseError::Expected("base64"));
        }
        Some(if s == b"=" { Vec::new() } else { s.to_vec() })
    } else {
        None
    };
    Ok(Command::Authenticate { mechanism, initial })
}

pub(super) fn login(c: &mut Cursor<'_>) -> PResult<Command> {
    c.sp()?;
    let username = c.astring()?.into_owned();
    c.sp()?;
    let password = c.astring()?.into_owned();
    Ok(Command::Login { username, password })
}

pub(super) fn enable(c: &mut Cursor<'_>) -> PResult<Command> {
    let mut caps = Vec::new();
    while c.eat(b' ') {
        caps.push(c.atom()?.to_ascii_uppercase());
    }
    if caps.is_empty() {
        return Err(ParseError::Expected("capability"));
    }
    Ok(Command::Enable(caps))
}
