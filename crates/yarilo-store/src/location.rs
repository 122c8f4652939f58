//! `mail_location` in Dovecot syntax:
//! `maildir:<root>[:LAYOUT=fs][:INDEX=<dir>|MEMORY][:INBOX=<dir>]`,
//! with `%u` (user), `%n` (user part), `%d` (domain), `%h` (home), `%%`,
//! the `L` modifier for lower case (`%Lu`, `%Ln`, `%Ld`), the long forms
//! `%{user}`, `%{username}`, `%{domain}`, `%{home}`, and a leading `~/`
//! for the home directory.

use std::path::PathBuf;

/// Where one user's mail lives, after expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserLocation {
    /// The Maildir root (holds the folders; INBOX too unless `INBOX=`).
    pub root: PathBuf,
    /// INBOX's Maildir.
    pub inbox: PathBuf,
    /// Where yarilo's index files go; `None` = memory only (`INDEX=MEMORY`).
    pub index_root: Option<PathBuf>,
    pub layout: Layout,
}

/// Folder layout on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Maildir++: `.A.B` under the root, hierarchy separator `.`.
    MaildirPlusPlus,
    /// `LAYOUT=fs`: `A/B` directories, hierarchy separator `/`.
    Fs,
}

impl Layout {
    pub fn separator(self) -> char {
        match self {
            Layout::MaildirPlusPlus => '.',
            Layout::Fs => '/',
        }
    }
}

/// A parsed, unexpanded `mail_location`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailLocation {
    root: String,
    layout: Layout,
    index: Option<String>,
    inbox: Option<String>,
}

/// What the userdb says about a user, for `%` expansion.
#[derive(Debug, Clone, Default)]
pub struct UserInfo {
    /// The full login name (`%u`), e.g. `alice@example.org`.
    pub user: String,
    /// Home directory (`%h`, `~`); empty if the userdb gave none.
    pub home: String,
}

/// Why a `mail_location` cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocationError {
    #[error("mail_location: only the maildir format is supported, got {0:?}")]
    Format(String),
    #[error("mail_location: unknown option {0:?}")]
    Option(String),
    #[error("mail_location: {0}")]
    Invalid(String),
    #[error("mail_location uses %h or ~ but user {0:?} has no home directory")]
    NoHome(String),
}

impl MailLocation {
    pub fn parse(s: &str) -> Result<MailLocation, LocationError> {
        let Some(rest) = s.strip_prefix("maildir:") else {
            let fmt = s.split(':').next().unwrap_or("").to_string();
            return Err(LocationError::Format(fmt));
        };
        let mut parts = rest.split(':');
        let root = parts.next().unwrap_or("").to_string();
        if root.is_empty() {
            return Err(LocationError::Invalid("empty maildir path".into()));
        }
        let mut loc = MailLocation {
            root,
            layout: Layout::MaildirPlusPlus,
            index: None,
            inbox: None,
        };
        for opt in parts {
            let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
            match k {
                "LAYOUT" => {
                    loc.layout = match v {
                        "fs" => Layout::Fs,
                        "maildir++" => Layout::MaildirPlusPlus,
                        _ => return Err(LocationError::Option(opt.to_string())),
                    }
                }
                "INDEX" if !v.is_empty() => loc.index = Some(v.to_string()),
                "INBOX" if !v.is_empty() => loc.inbox = Some(v.to_string()),
                _ => return Err(LocationError::Option(opt.to_string())),
            }
        }
        Ok(loc)
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Expands the templates for one user.
    pub fn for_user(&self, u: &UserInfo) -> Result<UserLocation, LocationError> {
        let root = PathBuf::from(expand(&self.root, u)?);
        let index_root = match self.index.as_deref() {
            Some("MEMORY") => None,
            Some(t) => Some(PathBuf::from(expand(t, u)?)),
            None => Some(root.clone()),
        };
        let inbox = match &self.inbox {
            Some(t) => PathBuf::from(expand(t, u)?),
            // Dovecot 2.3 keeps INBOX at the root in both layouts.
            None => root.clone(),
        };
        Ok(UserLocation {
            root,
            inbox,
            index_root,
            layout: self.layout,
        })
    }
}

/// Expands `%` variables and a leading `~/`.
pub fn expand(template: &str, u: &UserInfo) -> Result<String, LocationError> {
    let (name, domain) = match u.user.rsplit_once('@') {
        Some((n, d)) => (n, d),
        None => (u.user.as_str(), ""),
    };
    let need_home = || {
        if u.home.is_empty() {
            Err(LocationError::NoHome(u.user.clone()))
        } else {
            Ok(u.home.clone())
        }
    };
    let mut out = String::new();
    let mut rest = template;
    if let Some(r) = rest.strip_prefix("~/") {
        out.push_str(&need_home()?);
        out.push('/');
        rest = r;
    } else if rest == "~" {
        return need_home();
    }
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut lower = false;
        let mut var = chars.next();
        if var == Some('L') {
            lower = true;
            var = chars.next();
        }
        let value = match var {
            Some('%') => "%".to_string(),
            Some('u') => u.user.clone(),
            Some('n') => name.to_string(),
            Some('d') => domain.to_string(),
            Some('h') => need_home()?,
            Some('{') => {
                let long: String = chars.by_ref().take_while(|&c| c != '}').collect();
                match long.as_str() {
                    "user" => u.user.clone(),
                    "username" => name.to_string(),
                    "domain" => domain.to_string(),
                    "home" => need_home()?,
                    _ => return Err(LocationError::Invalid(format!("unknown %{{{long}}}"))),
                }
            }
            other => {
                return Err(LocationError::Invalid(format!(
                    "unknown variable %{}",
                    other.map(String::from).unwrap_or_default()
                )))
            }
        };
        // A user name must never climb out of its directory.
        if value.contains('/') && var != Some('h') && var != Some('{') {
            return Err(LocationError::Invalid(format!(
                "user {:?} contains '/'",
                u.user
            )));
        }
        if value == ".." || value == "." {
            return Err(LocationError::Invalid(format!("bad user {:?}", u.user)));
        }
        out.push_str(&if lower { value.to_lowercase() } else { value });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> UserInfo {
        UserInfo {
            user: "Alice@Example.org".into(),
            home: "/home/alice".into(),
        }
    }

    #[test]
    fn expands_dovecot_variables() {
        let l = MailLocation::parse("maildir:/srv/mail/%Ld/%Ln:INDEX=/idx/%u").unwrap();
        let u = l.for_user(&alice()).unwrap();
        assert_eq!(u.root, PathBuf::from("/srv/mail/example.org/alice"));
        assert_eq!(u.inbox, u.root);
        assert_eq!(u.index_root, Some(PathBuf::from("/idx/Alice@Example.org")));
        let l = MailLocation::parse("maildir:~/Maildir:LAYOUT=fs:INDEX=MEMORY").unwrap();
        let u = l.for_user(&alice()).unwrap();
        assert_eq!(u.root, PathBuf::from("/home/alice/Maildir"));
        assert_eq!(u.inbox, PathBuf::from("/home/alice/Maildir"));
        assert_eq!(u.index_root, None);
        assert_eq!(u.layout.separator(), '/');
    }

    #[test]
    fn rejects_bad_input() {
        assert!(MailLocation::parse("mbox:~/mail").is_err());
        assert!(MailLocation::parse("maildir:~/M:FOO=1").is_err());
        let l = MailLocation::parse("maildir:/m/%u").unwrap();
        let bad = UserInfo {
            user: "../x/y".into(),
            home: String::new(),
        };
        assert!(l.for_user(&bad).is_err());
        let l = MailLocation::parse("maildir:%h/M").unwrap();
        assert!(l
            .for_user(&UserInfo {
                user: "a".into(),
                home: String::new()
            })
            .is_err());
    }
}
