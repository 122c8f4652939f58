//! The `username_hash` template: which part of a username is hashed.
//!
//! Syntax (the reference's username-hash expression, so an existing
//! template migrates verbatim): `%u` the whole username, `%n` the local
//! part (before the first `@`; the whole name when there is none), `%d` the
//! domain (after the first `@`; empty when there is none), each optionally
//! as `%Lu` / `%Ln` / `%Ld` (ASCII lowercase, as the reference's `%L`), and
//! `%%` for a literal percent. Anything else after `%` is a start-up error.

use crate::DirectorError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    User,
    Local,
    Domain,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Var { var: Var, lowercase: bool },
}

/// A parsed template. Expanding it allocates nothing when the template is
/// a single variable (the common `%Lu` / `%u` / `%Ld`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsernameTemplate {
    source: String,
    parts: Vec<Part>,
}

impl UsernameTemplate {
    /// Parses a template; an invalid one is [`DirectorError::Template`].
    pub fn parse(template: &str) -> Result<UsernameTemplate, DirectorError> {
        let bad = |why: String| DirectorError::Template {
            template: template.to_string(),
            why,
        };
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = template.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                literal.push(c);
                continue;
            }
            let (lowercase, v) = match chars.next() {
                Some('%') => {
                    literal.push('%');
                    continue;
                }
                Some('L') => (true, chars.next()),
                other => (false, other),
            };
            let var = match v {
                Some('u') => Var::User,
                Some('n') => Var::Local,
                Some('d') => Var::Domain,
                Some(other) => return Err(bad(format!("unknown variable %{other}"))),
                None => return Err(bad("ends inside a % sequence".to_string())),
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            parts.push(Part::Var { var, lowercase });
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(UsernameTemplate {
            source: template.to_string(),
            parts,
        })
    }

    /// The template as configured.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the template folds case: then `User@D` and `user@d` are one
    /// key for sticky assignments too.
    pub fn lowercases(&self) -> bool {
        self.parts.iter().any(|p| {
            matches!(
                p,
                Part::Var {
                    lowercase: true,
                    ..
                }
            )
        })
    }

    /// Expands the template for `username` into `out` (cleared first).
    pub fn expand_into(&self, username: &str, out: &mut Vec<u8>) {
        out.clear();
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.extend_from_slice(s.as_bytes()),
                Part::Var { var, lowercase } => {
                    let value = var_value(*var, username);
                    let start = out.len();
                    out.extend_from_slice(value.as_bytes());
                    if *lowercase {
                        out[start..].make_ascii_lowercase();
                    }
                }
            }
        }
    }

    /// Expands the template for `username`.
    pub fn expand(&self, username: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(username.len());
        self.expand_into(username, &mut out);
        out
    }
}

fn var_value(var: Var, username: &str) -> &str {
    match var {
        Var::User => username,
        Var::Local => username.split_once('@').map_or(username, |(l, _)| l),
        Var::Domain => username.split_once('@').map_or("", |(_, d)| d),
    }
}

/// The domain part used by `assignment_policy: domain` (after the first
/// `@`, ASCII-lowercased; empty for a domain-less name).
pub fn domain_of(username: &str) -> String {
    var_value(Var::Domain, username).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(t: &str, u: &str) -> String {
        String::from_utf8(UsernameTemplate::parse(t).unwrap().expand(u)).unwrap()
    }

    #[test]
    fn variables_follow_reference_semantics() {
        assert_eq!(exp("%u", "User@D.Test"), "User@D.Test");
        assert_eq!(exp("%Lu", "User@D.Test"), "user@d.test");
        assert_eq!(exp("%n", "User@D.Test"), "User");
        assert_eq!(exp("%Ln", "User@D.Test"), "user");
        assert_eq!(exp("%d", "User@D.Test"), "D.Test");
        assert_eq!(exp("%Ld", "User@D.Test"), "d.test");
        // First @ splits; the domain keeps later ones.
        assert_eq!(exp("%n|%d", "a@b@c"), "a|b@c");
    }

    #[test]
    fn domainless_name_is_all_local_part_and_empty_domain() {
        assert_eq!(exp("%n", "bob"), "bob");
        assert_eq!(exp("%d", "bob"), "");
        assert_eq!(exp("[%d]", "bob"), "[]");
    }

    #[test]
    fn percent_escape_and_literals() {
        assert_eq!(exp("%%", "x"), "%");
        assert_eq!(exp("%Ln%%x%d", "Ab@C"), "ab%xC");
        assert_eq!(exp("static", "anyone"), "static");
        assert_eq!(exp("", "anyone"), "");
    }

    #[test]
    fn lowercase_is_ascii_only_like_the_reference() {
        assert_eq!(exp("%Lu", "ÄRGER@X"), "Ärger@x");
    }

    proptest::proptest! {
        /// Any template either parses or is refused; expanding a parsed one
        /// never panics and a `%%`-free literal survives verbatim.
        #[test]
        fn templates_parse_or_refuse_without_panic(t in "[a-z%LundX@.]{0,10}", u in "\\PC{0,12}") {
            if let Ok(p) = UsernameTemplate::parse(&t) {
                let _ = p.expand(&u);
            }
            if !t.contains('%') {
                proptest::prop_assert_eq!(UsernameTemplate::parse(&t).unwrap().expand(&u), t.as_bytes());
            }
        }
    }

    #[test]
    fn invalid_templates_are_refused() {
        for bad in ["%", "%L", "%x", "%Lx", "a%", "%Lq@%d", "%U"] {
            assert!(UsernameTemplate::parse(bad).is_err(), "{bad}");
        }
        assert!(UsernameTemplate::parse("%Lu").unwrap().lowercases());
        assert!(!UsernameTemplate::parse("%u").unwrap().lowercases());
    }
}
