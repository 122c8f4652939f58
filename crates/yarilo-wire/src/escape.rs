use std::borrow::Cow;

use crate::WireError;

const ESC: char = '\x01';

/// Escapes one field so it can sit between TABs on one line.
pub fn escape(field: &str) -> Cow<'_, str> {
    if !field.contains([ESC, '\t', '\n', '\r']) {
        return Cow::Borrowed(field);
    }
    let mut out = String::with_capacity(field.len() + 8);
    for c in field.chars() {
        match c {
            ESC => out.push_str("\x011"),
            '\t' => out.push_str("\x01t"),
            '\n' => out.push_str("\x01n"),
            '\r' => out.push_str("\x01r"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Reverses [`escape`].
pub fn unescape(field: &str) -> Result<Cow<'_, str>, WireError> {
    if !field.contains(ESC) {
        return Ok(Cow::Borrowed(field));
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != ESC {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('1') => ESC,
            Some('t') => '\t',
            Some('n') => '\n',
            Some('r') => '\r',
            _ => return Err(WireError::BadEscape),
        });
    }
    Ok(Cow::Owned(out))
}

/// Escapes and joins fields into one line, LF included.
pub fn join_line<S: AsRef<str>>(fields: &[S]) -> String {
    let mut line = String::new();
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            line.push('\t');
        }
        line.push_str(&escape(f.as_ref()));
    }
    line.push('\n');
    line
}

/// Splits a line (without its LF) into unescaped fields.
pub fn split_line(line: &str) -> Result<Vec<String>, WireError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.split('\t')
        .map(|f| unescape(f).map(Cow::into_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn separators_inside_a_field_do_not_split_it() {
        let line = join_line(&["LOOKUP", "a\tb\nc\x01d", ""]);
        assert_eq!(line.matches('\t').count(), 2);
        assert_eq!(line.matches('\n').count(), 1);
        assert_eq!(
            split_line(&line).unwrap(),
            vec!["LOOKUP", "a\tb\nc\x01d", ""]
        );
    }

    #[test]
    fn bad_escape_is_rejected() {
        assert_eq!(split_line("a\x01x"), Err(WireError::BadEscape));
        assert_eq!(split_line("a\x01"), Err(WireError::BadEscape));
    }

    proptest! {
        #[test]
        fn join_then_split_is_identity(fields in proptest::collection::vec(".*", 1..6)) {
            let line = join_line(&fields);
            prop_assert_eq!(split_line(&line).unwrap(), fields);
        }
    }
}
