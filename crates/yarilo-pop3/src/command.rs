//! The POP3 command grammar (RFC 1939 §3, RFC 2449 §3, RFC 5034 §4).
//!
//! A command is a case-insensitive keyword and arguments separated by a
//! space. `PASS` takes the rest of the line (passwords may hold spaces,
//! RFC 1939 §7 allows it and every client sends them so). Message numbers
//! are decimal and at least 1.

/// The commands yarilo knows, by keyword (the `command` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandName {
    User,
    Pass,
    Apop,
    Auth,
    Capa,
    Stls,
    Stat,
    List,
    Retr,
    Top,
    Dele,
    Rset,
    Uidl,
    Noop,
    Quit,
}

impl CommandName {
    pub const ALL: [CommandName; 15] = [
        CommandName::User,
        CommandName::Pass,
        CommandName::Apop,
        CommandName::Auth,
        CommandName::Capa,
        CommandName::Stls,
        CommandName::Stat,
        CommandName::List,
        CommandName::Retr,
        CommandName::Top,
        CommandName::Dele,
        CommandName::Rset,
        CommandName::Uidl,
        CommandName::Noop,
        CommandName::Quit,
    ];

    pub fn parse(keyword: &str) -> Option<CommandName> {
        CommandName::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(keyword))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CommandName::User => "USER",
            CommandName::Pass => "PASS",
            CommandName::Apop => "APOP",
            CommandName::Auth => "AUTH",
            CommandName::Capa => "CAPA",
            CommandName::Stls => "STLS",
            CommandName::Stat => "STAT",
            CommandName::List => "LIST",
            CommandName::Retr => "RETR",
            CommandName::Top => "TOP",
            CommandName::Dele => "DELE",
            CommandName::Rset => "RSET",
            CommandName::Uidl => "UIDL",
            CommandName::Noop => "NOOP",
            CommandName::Quit => "QUIT",
        }
    }
}

/// A parsed command.
#[derive(Clone, PartialEq, Eq)]
pub enum Command {
    User(String),
    Pass(String),
    Apop {
        user: String,
        digest: String,
    },
    /// `AUTH` alone lists the mechanisms; `initial` is the RFC 5034
    /// initial response as sent (base64, or `=` for empty).
    Auth {
        mechanism: Option<String>,
        initial: Option<String>,
    },
    Capa,
    Stls,
    Stat,
    List(Option<u32>),
    Retr(u32),
    Top {
        msg: u32,
        lines: u64,
    },
    Dele(u32),
    Rset,
    Uidl(Option<u32>),
    Noop,
    Quit,
}

impl std::fmt::Debug for Command {
    // Never log a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Pass(_) => f.write_str("Pass(<hidden>)"),
            Command::Auth { mechanism, .. } => f
                .debug_struct("Auth")
                .field("mechanism", mechanism)
                .finish_non_exhaustive(),
            Command::Apop { user, .. } => f
                .debug_struct("Apop")
                .field("user", user)
                .finish_non_exhaustive(),
            Command::User(u) => f.debug_tuple("User").field(u).finish(),
            Command::List(n) => f.debug_tuple("List").field(n).finish(),
            Command::Retr(n) => f.debug_tuple("Retr").field(n).finish(),
            Command::Top { msg, lines } => f
                .debug_struct("Top")
                .field("msg", msg)
                .field("lines", lines)
                .finish(),
            Command::Dele(n) => f.debug_tuple("Dele").field(n).finish(),
            Command::Uidl(n) => f.debug_tuple("Uidl").field(n).finish(),
            other => f.write_str(other.name().as_str()),
        }
    }
}

impl Command {
    pub fn name(&self) -> CommandName {
        match self {
            Command::User(_) => CommandName::User,
            Command::Pass(_) => CommandName::Pass,
            Command::Apop { .. } => CommandName::Apop,
            Command::Auth { .. } => CommandName::Auth,
            Command::Capa => CommandName::Capa,
            Command::Stls => CommandName::Stls,
            Command::Stat => CommandName::Stat,
            Command::List(_) => CommandName::List,
            Command::Retr(_) => CommandName::Retr,
            Command::Top { .. } => CommandName::Top,
            Command::Dele(_) => CommandName::Dele,
            Command::Rset => CommandName::Rset,
            Command::Uidl(_) => CommandName::Uidl,
            Command::Noop => CommandName::Noop,
            Command::Quit => CommandName::Quit,
        }
    }
}

/// Why a line is not a command. State is unchanged; the session answers
/// `-ERR` and counts a bad command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("Unknown command.")]
    Unknown,
    #[error("{0}")]
    Syntax(&'static str),
}

/// Parses one line (without its line end).
pub fn parse(line: &[u8]) -> Result<(CommandName, Command), (Option<CommandName>, ParseError)> {
    // Commands are ASCII; arguments (user names, passwords) may be UTF-8.
    let text = String::from_utf8_lossy(line);
    let (keyword, rest) = match text.split_once(' ') {
        Some((k, r)) => (k, Some(r)),
        None => (text.as_ref(), None),
    };
    let Some(name) = CommandName::parse(keyword) else {
        return Err((None, ParseError::Unknown));
    };
    let fail = |m: &'static str| Err((Some(name), ParseError::Syntax(m)));
    let args: Vec<&str> = rest
        .map(|r| r.split(' ').filter(|a| !a.is_empty()).collect())
        .unwrap_or_default();
    let cmd = match name {
        CommandName::User => match args.as_slice() {
            [u] => Command::User((*u).to_string()),
            _ => return fail("USER: one argument expected."),
        },
        CommandName::Pass => match rest {
            Some(p) if !p.is_empty() => Command::Pass(p.to_string()),
            _ => return fail("PASS: password expected."),
        },
        CommandName::Apop => match args.as_slice() {
            [u, d] => Command::Apop {
                user: (*u).to_string(),
                digest: (*d).to_string(),
            },
            _ => return fail("APOP: user and digest expected."),
        },
        CommandName::Auth => match args.as_slice() {
            [] => Command::Auth {
                mechanism: None,
                initial: None,
            },
            [m] => Command::Auth {
                mechanism: Some((*m).to_string()),
                initial: None,
            },
            [m, i] => Command::Auth {
                mechanism: Some((*m).to_string()),
                initial: Some((*i).to_string()),
            },
            _ => return fail("AUTH: too many arguments."),
        },
        CommandName::List | CommandName::Uidl => {
            let n = match args.as_slice() {
                [] => None,
                [n] => match msg_number(n) {
                    Some(n) => Some(n),
                    None => return fail("Invalid message number."),
                },
                _ => return fail("Too many arguments."),
            };
            if name == CommandName::List {
                Command::List(n)
            } else {
                Command::Uidl(n)
            }
        }
        CommandName::Retr | CommandName::Dele => {
            let n = match args.as_slice() {
                [n] => match msg_number(n) {
                    Some(n) => n,
                    None => return fail("Invalid message number."),
                },
                _ => return fail("Message number expected."),
            };
            if name == CommandName::Retr {
                Command::Retr(n)
            } else {
                Command::Dele(n)
            }
        }
        CommandName::Top => match args.as_slice() {
            [m, l] => match (msg_number(m), l.parse::<u64>().ok()) {
                (Some(msg), Some(lines)) if is_digits(l) => Command::Top { msg, lines },
                (None, _) => return fail("Invalid message number."),
                _ => return fail("Invalid number of lines."),
            },
            _ => return fail("TOP: message number and line count expected."),
        },
        CommandName::Capa
        | CommandName::Stls
        | CommandName::Stat
        | CommandName::Rset
        | CommandName::Noop
        | CommandName::Quit => {
            if !args.is_empty() {
                return fail("No arguments expected.");
            }
            match name {
                CommandName::Capa => Command::Capa,
                CommandName::Stls => Command::Stls,
                CommandName::Stat => Command::Stat,
                CommandName::Rset => Command::Rset,
                CommandName::Noop => Command::Noop,
                _ => Command::Quit,
            }
        }
    };
    Ok((name, cmd))
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A message number: decimal digits, 1 or more (RFC 1939 §3: "msg" is
/// 1-based). Zero and overflow are invalid.
fn msg_number(s: &str) -> Option<u32> {
    if !is_digits(s) {
        return None;
    }
    s.parse::<u32>().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Command {
        parse(line.as_bytes()).map(|(_, c)| c).unwrap()
    }

    fn err(line: &str) -> (Option<CommandName>, ParseError) {
        parse(line.as_bytes()).unwrap_err()
    }

    #[test]
    fn keywords_are_case_insensitive() {
        assert_eq!(ok("stat"), Command::Stat);
        assert_eq!(ok("StAt"), Command::Stat);
        assert_eq!(ok("uidl 3"), Command::Uidl(Some(3)));
    }

    #[test]
    fn pass_keeps_the_rest_of_the_line_with_spaces() {
        assert_eq!(ok("PASS a b  c"), Command::Pass("a b  c".into()));
        assert!(err("PASS").1 != ParseError::Unknown);
    }

    #[test]
    fn message_numbers_must_be_positive_decimals() {
        assert_eq!(ok("RETR 1"), Command::Retr(1));
        for bad in [
            "RETR 0",
            "RETR -1",
            "RETR x",
            "RETR 99999999999",
            "RETR",
            "DELE +1",
        ] {
            assert!(err(bad).0.is_some(), "{bad}");
        }
        assert_eq!(ok("TOP 2 0"), Command::Top { msg: 2, lines: 0 });
        assert!(err("TOP 2 -1").0.is_some());
        assert!(err("TOP 2").0.is_some());
    }

    #[test]
    fn auth_takes_an_optional_mechanism_and_initial_response() {
        assert_eq!(
            ok("AUTH"),
            Command::Auth {
                mechanism: None,
                initial: None
            }
        );
        assert_eq!(
            ok("AUTH PLAIN ="),
            Command::Auth {
                mechanism: Some("PLAIN".into()),
                initial: Some("=".into())
            }
        );
    }

    #[test]
    fn unknown_commands_and_stray_arguments_are_refused() {
        assert_eq!(err("XYZZY").0, None);
        assert_eq!(err("").0, None);
        assert_eq!(err("LAST").0, None);
        assert!(err("QUIT now").0.is_some());
    }

    #[test]
    fn a_password_never_reaches_debug_output() {
        assert!(!format!("{:?}", ok("PASS secret")).contains("secret"));
        assert!(!format!("{:?}", ok("AUTH PLAIN c2VjcmV0")).contains("c2VjcmV0"));
    }

    #[test]
    fn non_utf8_input_does_not_panic() {
        let _ = parse(b"USER \xff\xfe");
        let _ = parse(b"\xff");
    }
}
