//! The `subscriptions` file at the Maildir root, version 2 as Dovecot 2.3
//! writes it: `V\t2`, an empty line, then one mailbox per line with the
//! hierarchy separator written as TAB. Version 1 (plain names) is read too.

/// Parses the file into mailbox names using `sep` as the hierarchy separator.
pub fn parse(text: &str, sep: char) -> Vec<String> {
    let mut lines = text.lines().peekable();
    let v2 = lines.peek().is_some_and(|l| *l == "V\t2");
    if v2 {
        lines.next();
    }
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            if v2 {
                l.replace('\t', &sep.to_string())
            } else {
                l.to_string()
            }
        })
        .collect()
}

pub fn serialize(names: &[String], sep: char) -> String {
    let mut s = String::from("V\t2\n\n");
    for n in names {
        s.push_str(&n.replace(sep, "\t"));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dovecot_v2() {
        let names = parse("V\t2\n\nSent\nFoo\tBar\n", '.');
        assert_eq!(names, vec!["Sent", "Foo.Bar"]);
        assert_eq!(serialize(&names, '.'), "V\t2\n\nSent\nFoo\tBar\n");
    }
}
