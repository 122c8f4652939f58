//! Dovecot-style `%` variables: `%u` user, `%n` user part, `%d` domain,
//! `%r` remote (client) IP, `%l` local IP, `%s` service, `%w` new password
//! hash (admin writes only), `%%` a percent sign; `%L<x>` lower-cases.
//!
//! For SQL a template is compiled once into a statement with bind
//! placeholders: every `%x`, and every quoted literal containing one, is
//! replaced by a parameter. Values are never spliced into SQL text.

use std::net::IpAddr;

/// The values a template may refer to.
#[derive(Debug, Clone, Default)]
pub struct Vars<'a> {
    pub user: &'a str,
    pub service: &'a str,
    pub remote_ip: Option<IpAddr>,
    pub local_ip: Option<IpAddr>,
    pub password: Option<&'a str>,
}

impl Vars<'_> {
    fn value(&self, var: char) -> Option<String> {
        let (n, d) = match self.user.rsplit_once('@') {
            Some((n, d)) => (n, d),
            None => (self.user, ""),
        };
        Some(match var {
            'u' => self.user.to_string(),
            'n' => n.to_string(),
            'd' => d.to_string(),
            'r' => self.remote_ip.map(|i| i.to_string()).unwrap_or_default(),
            'l' => self.local_ip.map(|i| i.to_string()).unwrap_or_default(),
            's' => self.service.to_string(),
            'w' => self.password.unwrap_or("").to_string(),
            _ => return None,
        })
    }
}

/// Expands `%` variables in `text` (static fields, file paths).
/// Unknown variables stay as written.
pub fn expand(text: &str, vars: &Vars<'_>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut lower = false;
        let Some(mut v) = chars.next() else {
            out.push('%');
            break;
        };
        if v == '%' {
            out.push('%');
            continue;
        }
        if v == 'L' {
            lower = true;
            match chars.next() {
                Some(n) => v = n,
                None => {
                    out.push_str("%L");
                    break;
                }
            }
        }
        match vars.value(v) {
            Some(val) if lower => out.push_str(&val.to_lowercase()),
            Some(val) => out.push_str(&val),
            None => {
                out.push('%');
                if lower {
                    out.push('L');
                }
                out.push(v);
            }
        }
    }
    out
}

/// Placeholder syntax of the SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholders {
    /// `?` (SQLite, MySQL/MariaDB).
    Question,
    /// `$1`, `$2`, … (PostgreSQL).
    Dollar,
}

/// A query with its variables turned into bind parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlTemplate {
    /// The statement with placeholders.
    pub sql: String,
    /// One template per placeholder, expanded with [`expand`] at bind time.
    pub params: Vec<String>,
}

impl SqlTemplate {
    pub fn compile(query: &str, style: Placeholders) -> SqlTemplate {
        let mut sql = String::with_capacity(query.len());
        let mut params = Vec::new();
        let mut push_param = |sql: &mut String, template: String| {
            params.push(template);
            match style {
                Placeholders::Question => sql.push('?'),
                Placeholders::Dollar => sql.push_str(&format!("${}", params.len())),
            }
        };
        let chars: Vec<char> = query.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' || c == '"' {
                // A quoted literal: find its end ('' / "" escape a quote).
                let mut j = i + 1;
                let mut literal = String::new();
                while j < chars.len() {
                    if chars[j] == c {
                        if chars.get(j + 1) == Some(&c) {
                            literal.push(c);
                            j += 2;
                            continue;
                        }
                        break;
                    }
                    literal.push(chars[j]);
                    j += 1;
                }
                if has_var(&literal) {
                    push_param(&mut sql, literal);
                } else {
                    // Keep the literal, with `%%` meaning `%` as everywhere else.
                    let quote = c.to_string();
                    sql.push(c);
                    sql.push_str(
                        &literal
                            .replace("%%", "%")
                            .replace(c, &format!("{quote}{quote}")),
                    );
                    sql.push(c);
                }
                i = j + 1;
                continue;
            }
            if c == '%' {
                match chars.get(i + 1) {
                    Some('%') => {
                        sql.push('%');
                        i += 2;
                    }
                    Some('L') if chars.get(i + 2).is_some_and(|v| is_var(*v)) => {
                        push_param(&mut sql, chars[i..i + 3].iter().collect());
                        i += 3;
                    }
                    Some(v) if is_var(*v) => {
                        push_param(&mut sql, chars[i..i + 2].iter().collect());
                        i += 2;
                    }
                    _ => {
                        sql.push('%');
                        i += 1;
                    }
                }
                continue;
            }
            sql.push(c);
            i += 1;
        }
        SqlTemplate { sql, params }
    }

    /// The parameter values for one lookup, in placeholder order.
    pub fn bind_values(&self, vars: &Vars<'_>) -> Vec<String> {
        self.params.iter().map(|p| expand(p, vars)).collect()
    }
}

fn is_var(c: char) -> bool {
    matches!(c, 'u' | 'n' | 'd' | 'r' | 'l' | 's' | 'w')
}

fn has_var(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('L') if chars.peek().is_some_and(|v| is_var(*v)) => return true,
                Some(v) if is_var(v) => return true,
                _ => {}
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(user: &str) -> Vars<'_> {
        Vars {
            user,
            service: "imap",
            remote_ip: Some("192.0.2.1".parse().unwrap()),
            ..Vars::default()
        }
    }

    #[test]
    fn expands_user_parts() {
        let v = vars("Alice@Example.org");
        assert_eq!(
            expand("/srv/%Ld/%n %r %s 100%%", &v),
            "/srv/example.org/Alice 192.0.2.1 imap 100%"
        );
    }

    #[test]
    fn quoted_variables_become_parameters() {
        let t = SqlTemplate::compile(
            "SELECT password, 'x' AS y FROM users WHERE username = '%n' AND domain = '%d' AND ip <> %r",
            Placeholders::Dollar,
        );
        assert_eq!(
            t.sql,
            "SELECT password, 'x' AS y FROM users WHERE username = $1 AND domain = $2 AND ip <> $3"
        );
        let hostile = "' OR 1=1 --@x";
        assert_eq!(
            t.bind_values(&vars(hostile)),
            vec!["' OR 1=1 --", "x", "192.0.2.1"]
        );
    }

    #[test]
    fn a_literal_mixing_text_and_variables_is_one_parameter() {
        let t = SqlTemplate::compile(
            "SELECT 1 WHERE u = '%n@%d' AND k LIKE 'a%%'",
            Placeholders::Question,
        );
        assert_eq!(t.sql, "SELECT 1 WHERE u = ? AND k LIKE 'a%'");
        assert_eq!(t.bind_values(&vars("bob@ex")), vec!["bob@ex"]);
    }
}
