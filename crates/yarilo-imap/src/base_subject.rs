//! Base subject extraction (RFC 5256 §2.1), used by SORT SUBJECT and by
//! both subject-aware THREAD algorithms.
//!
//! The input is the Subject field already unfolded and RFC 2047-decoded
//! (step 1's charset conversion). The output keeps the original case; the
//! caller applies the collation ([`crate::collation`]) for comparisons.
//! Every step only removes text, so the loops end.

/// The base subject and whether extraction showed the message to be a
/// reply or forward (a `Re:`/`Fwd:` leader, a `(fwd)` trailer or a
/// `[fwd: ...]` wrapper were removed; RFC 5256 §5 step (5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BaseSubject {
    pub text: String,
    pub reply_or_forward: bool,
}

/// RFC 5256 §2.1 steps (1)–(7).
pub(crate) fn base_subject(decoded: &str) -> BaseSubject {
    // (1) Tabs and line breaks become spaces; runs of WSP one space.
    let mut s = String::with_capacity(decoded.len());
    let mut last_space = false;
    for c in decoded.chars() {
        let c = if matches!(c, '\t' | '\r' | '\n') {
            ' '
        } else {
            c
        };
        if c == ' ' && last_space {
            continue;
        }
        last_space = c == ' ';
        s.push(c);
    }
    let mut reply = false;
    let mut t: &str = &s;
    loop {
        // (2) subj-trailer = "(fwd)" / WSP, repeatedly.
        loop {
            if let Some(rest) = t.strip_suffix(' ') {
                t = rest;
            } else if t.len() >= 5
                && t.get(t.len() - 5..)
                    .is_some_and(|e| e.eq_ignore_ascii_case("(fwd)"))
            {
                t = t.get(..t.len() - 5).unwrap_or_default();
                reply = true;
            } else {
                break;
            }
        }
        // (3)–(5) leaders and blobs until neither matches.
        loop {
            let before = t.len();
            // (3) subj-leader = (*subj-blob subj-refwd) / WSP, repeatedly.
            loop {
                if let Some(rest) = t.strip_prefix(' ') {
                    t = rest;
                    continue;
                }
                let mut p = t;
                while let Some(after) = blob(p) {
                    p = after;
                }
                match refwd(p) {
                    Some(after) => {
                        t = after;
                        reply = true;
                    }
                    None => break,
                }
            }
            // (4) A leading subj-blob goes if a subj-base remains.
            if let Some(after) = blob(t) {
                if after.chars().any(|c| c != ' ') {
                    t = after;
                }
            }
            if t.len() == before {
                break;
            }
        }
        // (6) "[fwd:" ... "]" wrapper: strip and redo from (2).
        let wrapped = t.len() >= 6
            && t.get(..5).is_some_and(|h| h.eq_ignore_ascii_case("[fwd:"))
            && t.ends_with(']');
        if !wrapped {
            break;
        }
        t = t.get(5..t.len() - 1).unwrap_or_default();
        reply = true;
    }
    BaseSubject {
        text: t.to_string(),
        reply_or_forward: reply,
    }
}

/// subj-blob = "[" *BLOBCHAR "]" *WSP; the rest after it.
fn blob(t: &str) -> Option<&str> {
    let inner = t.strip_prefix('[')?;
    let end = inner.find(['[', ']'])?;
    if inner.as_bytes().get(end) != Some(&b']') {
        return None;
    }
    Some(inner.get(end + 1..)?.trim_start_matches(' '))
}

/// subj-refwd = ("re" / ("fw" ["d"])) *WSP [subj-blob] ":"; the rest.
fn refwd(t: &str) -> Option<&str> {
    let b = t.as_bytes();
    let n = if b.len() >= 3 && b.get(..3)?.eq_ignore_ascii_case(b"fwd") {
        3
    } else if b.len() >= 2
        && (b.get(..2)?.eq_ignore_ascii_case(b"fw") || b.get(..2)?.eq_ignore_ascii_case(b"re"))
    {
        2
    } else {
        return None;
    };
    let mut rest = t.get(n..)?.trim_start_matches(' ');
    if let Some(after) = blob(rest) {
        rest = after;
    }
    rest.strip_prefix(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(s: &str) -> (String, bool) {
        let b = base_subject(s);
        (b.text, b.reply_or_forward)
    }

    #[test]
    fn nested_forward_wrapper_with_replies() {
        assert_eq!(base("Re: [fwd: Re: x]"), ("x".into(), true));
    }

    #[test]
    fn blob_leader_and_fwd_trailer() {
        assert_eq!(base("[PATCH] Re: foo (fwd)"), ("foo".into(), true));
    }

    #[test]
    fn plain_subject_is_not_a_reply() {
        assert_eq!(base("  hello   world "), ("hello world".into(), false));
    }

    #[test]
    fn leaders_in_any_case_and_with_blobs() {
        assert_eq!(base("RE: Fwd: fw: re[2]: x"), ("x".into(), true));
        assert_eq!(base("Re:Re: x"), ("x".into(), true));
        assert_eq!(base("FWD:\tx (FWD) (fwd)"), ("x".into(), true));
    }

    #[test]
    fn blob_is_kept_when_it_is_all_there_is() {
        assert_eq!(base("[foo]"), ("[foo]".into(), false));
        assert_eq!(base("[list] topic"), ("topic".into(), false));
        assert_eq!(base("Re: [list]"), ("[list]".into(), true));
    }

    #[test]
    fn words_starting_with_re_are_not_leaders() {
        assert_eq!(base("Reply needed"), ("Reply needed".into(), false));
        assert_eq!(base("Fwdx: y"), ("Fwdx: y".into(), false));
    }

    #[test]
    fn empty_and_degenerate_inputs() {
        assert_eq!(base(""), (String::new(), false));
        assert_eq!(base("Re:"), (String::new(), true));
        assert_eq!(base("[fwd:]"), (String::new(), true));
        assert_eq!(base("[[["), ("[[[".into(), false));
        assert_eq!(base("é Re: ü"), ("é Re: ü".into(), false));
    }
}
