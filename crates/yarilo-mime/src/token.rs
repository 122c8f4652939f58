//! Lexical tokens of structured header values (RFC 5322 §3.2, RFC 2045
//! §5.1): atoms, quoted strings, comments, domain literals and specials.
//!
//! The lexer never fails: bytes that fit nowhere become one-byte specials
//! so the parsers above can skip them and always make progress.

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    /// A run of atom characters. `mime` lexing also allows `.` inside
    /// (RFC 2045 `token`), address lexing keeps `.` as a special.
    Atom(Vec<u8>),
    /// A quoted string, unquoted (backslash escapes resolved).
    Quoted(Vec<u8>),
    /// A comment's inner text (nested comments kept as text).
    Comment(Vec<u8>),
    /// `[...]` kept with its brackets.
    Literal(Vec<u8>),
    /// Any other single byte.
    Special(u8),
}

/// A token and whether whitespace or a comment came before it (needed to
/// rebuild phrases with single spaces).
#[derive(Debug, Clone)]
pub(crate) struct Lexed {
    pub token: Token,
    pub spaced: bool,
}

/// Which atom alphabet to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// RFC 5322 atext; `.` is a special.
    Address,
    /// RFC 2045 token characters (tspecials are specials).
    Mime,
}

fn is_atom_char(b: u8, flavor: Flavor) -> bool {
    if b <= b' ' || b == 0x7f {
        return false;
    }
    match flavor {
        // 8-bit bytes are accepted as atom text (RFC 6532 and real mail).
        Flavor::Address => !b"()<>[]:;@\\,.\"".contains(&b),
        Flavor::Mime => !b"()<>@,;:\\\"/[]?=".contains(&b),
    }
}

/// Splits a value into tokens; whitespace and line breaks separate them.
pub(crate) fn lex(v: &[u8], flavor: Flavor) -> Vec<Lexed> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut spaced = false;
    while let Some(&b) = v.get(i) {
        if matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
            spaced = true;
            i += 1;
            continue;
        }
        let token = match b {
            b'"' => {
                let (s, n) = quoted(v, i + 1);
                i = n;
                Token::Quoted(s)
            }
            b'(' => {
                let (s, n) = comment(v, i + 1);
                i = n;
                Token::Comment(s)
            }
            b'[' => {
                let end = v
                    .get(i..)
                    .and_then(|r| r.iter().position(|&c| c == b']'))
                    .map_or(v.len(), |p| i + p + 1);
                let s = v.get(i..end).unwrap_or_default().to_vec();
                i = end;
                Token::Literal(s)
            }
            _ if is_atom_char(b, flavor) => {
                let start = i;
                while v.get(i).is_some_and(|&c| is_atom_char(c, flavor)) {
                    i += 1;
                }
                Token::Atom(v.get(start..i).unwrap_or_default().to_vec())
            }
            _ => {
                i += 1;
                Token::Special(b)
            }
        };
        let is_comment = matches!(token, Token::Comment(_));
        out.push(Lexed { token, spaced });
        // A comment separates like whitespace does.
        spaced = is_comment;
    }
    out
}

/// A quoted string body starting after the opening quote: (text, index
/// after the closing quote). An unterminated string runs to the end.
fn quoted(v: &[u8], mut i: usize) -> (Vec<u8>, usize) {
    let mut s = Vec::new();
    while let Some(&b) = v.get(i) {
        i += 1;
        match b {
            b'"' => return (s, i),
            b'\\' => {
                if let Some(&n) = v.get(i) {
                    s.push(n);
                    i += 1;
                }
            }
            // Folding inside quoted strings is removed, the WSP kept.
            b'\r' | b'\n' => {}
            _ => s.push(b),
        }
    }
    (s, i)
}

/// A comment body starting after `(`: (inner text, index after `)`).
fn comment(v: &[u8], mut i: usize) -> (Vec<u8>, usize) {
    let mut s = Vec::new();
    let mut depth = 1usize;
    while let Some(&b) = v.get(i) {
        i += 1;
        match b {
            b'(' => {
                depth += 1;
                s.push(b);
            }
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return (s, i);
                }
                s.push(b);
            }
            b'\\' => {
                if let Some(&n) = v.get(i) {
                    s.push(n);
                    i += 1;
                }
            }
            b'\r' | b'\n' => {}
            _ => s.push(b),
        }
    }
    (s, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexes_quoted_comment_and_specials() {
        let t: Vec<Token> = lex(br#""a\"b" (c (d)) x.y@z"#, Flavor::Address)
            .into_iter()
            .map(|l| l.token)
            .collect();
        assert_eq!(
            t,
            vec![
                Token::Quoted(b"a\"b".to_vec()),
                Token::Comment(b"c (d)".to_vec()),
                Token::Atom(b"x".to_vec()),
                Token::Special(b'.'),
                Token::Atom(b"y".to_vec()),
                Token::Special(b'@'),
                Token::Atom(b"z".to_vec()),
            ]
        );
    }
}
