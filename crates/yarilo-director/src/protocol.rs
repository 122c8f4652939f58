//! The director's LOOKUP protocol, sans-I/O.
//!
//! Framing is yarilo-wire's: TAB-separated escaped fields, LF-terminated,
//! bounded lines, `VERSION\tdirector\t1\t0` first from both sides.
//! Every request gets exactly one reply line, in order, so a client may
//! pipeline. Unknown commands and bad arguments are answered with `FAIL`,
//! never fatal.
//!
//! | request | reply |
//! |---|---|
//! | `LOOKUP <user> <tag> [proto]` | `OK <ip> <port>` / `FAIL NOBACKEND <msg>` |
//! | `SESSION-OPEN <id> <user> <tag> <backend-ip> [proto]` | `OK` / `FAIL NOTRACKED <msg>` |
//! | `SESSION-CLOSE <id>` | `OK` (also for an unknown id) |
//! | `BACKEND-UP <ip> <port> <tag> <vhosts> <seq>` | `OK` / `OK STALE` / `FAIL REFUSED` |
//! | `BACKEND-DOWN <ip> [seq]` | `OK` / `OK STALE` / `FAIL UNKNOWN-BACKEND` / `FAIL NOT-REGISTERED` |
//! | `BACKEND-FLUSH <ip> [seq]` | `OK` / `OK STALE` / `FAIL UNKNOWN-BACKEND` |
//! | `BACKEND-UNREACHABLE <ip> [reporter]` | `OK` |
//! | `KICK-WATCH` | `OK`, then pushed `USER-KICKED <user> <backend-ip>` lines |
//! | `PING` | `PONG` |
//! | `PONG` | (none: answers our keepalive) |
//!
//! A login pod that sends `KICK-WATCH` receives kick orders on that
//! connection, interleaved with replies (they start with `USER-KICKED`,
//! which no reply does): it ends its sessions of that user on that backend.
//!
//! The tag is mandatory on LOOKUP; an empty field is the untagged pool.
//! The port in a LOOKUP reply is `0` for a self-registered pod (its
//! BACKEND-UP port is nominal: one pod serves every protocol, each on its
//! own port) and for a static backend listed without a port: the login
//! dials its own protocol port on that IP. A static or admin backend with
//! a port gets that port. `login.<proto>.backend_port` overrides both.

use std::net::IpAddr;

use crate::director::{BackendOutcome, BackendUp, Confirmed, Director, LookupError, UpOutcome};
use crate::{Proto, Tick};

/// Service name in the VERSION line.
pub const SERVICE: &str = "director";
pub const MAJOR: u32 = 1;
pub const MINOR: u32 = 0;
/// Longest request line accepted.
pub const MAX_LINE: usize = 8 * 1024;

/// A parsed request, borrowing from the line's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Lookup {
        user: &'a str,
        tag: &'a str,
        proto: Option<Proto>,
    },
    SessionOpen {
        id: &'a str,
        user: &'a str,
        tag: &'a str,
        backend: IpAddr,
        proto: Proto,
    },
    SessionClose {
        id: &'a str,
    },
    BackendUp(BackendUp),
    BackendDown {
        ip: IpAddr,
        seq: Option<u64>,
    },
    BackendFlush {
        ip: IpAddr,
        seq: Option<u64>,
    },
    BackendUnreachable {
        ip: IpAddr,
        reporter: Option<&'a str>,
    },
    KickWatch,
    Ping,
    Pong,
}

/// Why a line is not a request. Answered with `FAIL`; the connection
/// goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown command {0}")]
    Unknown(String),
    #[error("{command}: {why}")]
    Syntax { command: &'static str, why: String },
}

impl ParseError {
    /// The reply line.
    pub fn reply(&self) -> Vec<String> {
        match self {
            ParseError::Unknown(c) => fail("UNKNOWN-COMMAND", &format!("unknown command {c}")),
            ParseError::Syntax { .. } => fail("SYNTAX", &self.to_string()),
        }
    }
}

fn fail(code: &str, msg: &str) -> Vec<String> {
    vec!["FAIL".into(), code.into(), msg.into()]
}

fn ok() -> Vec<String> {
    vec!["OK".into()]
}

fn syntax(command: &'static str, why: impl Into<String>) -> ParseError {
    ParseError::Syntax {
        command,
        why: why.into(),
    }
}

fn ip(command: &'static str, s: &str) -> Result<IpAddr, ParseError> {
    s.parse()
        .map_err(|_| syntax(command, format!("`{s}` is not an IP address")))
}

fn num<T: std::str::FromStr>(command: &'static str, what: &str, s: &str) -> Result<T, ParseError> {
    s.parse()
        .map_err(|_| syntax(command, format!("{what} `{s}` is not a number in range")))
}

/// Parses one request line.
pub fn parse(fields: &[String]) -> Result<Request<'_>, ParseError> {
    let Some(cmd) = fields.first() else {
        return Err(ParseError::Unknown(String::new()));
    };
    let args: Vec<&str> = fields[1..].iter().map(String::as_str).collect();
    match cmd.as_str() {
        "LOOKUP" => match args[..] {
            [user, tag] => Ok(Request::Lookup {
                user,
                tag,
                proto: None,
            }),
            [user, tag, proto] => Ok(Request::Lookup {
                user,
                tag,
                proto: (!proto.is_empty()).then(|| Proto::parse(proto)),
            }),
            _ => Err(syntax("LOOKUP", "expected LOOKUP <user> <tag> [proto]")),
        },
        "SESSION-OPEN" => match args[..] {
            [id, user, tag, backend] | [id, user, tag, backend, _] => Ok(Request::SessionOpen {
                id,
                user,
                tag,
                backend: ip("SESSION-OPEN", backend)?,
                proto: args.get(4).map_or(Proto::Other, |p| Proto::parse(p)),
            }),
            _ => Err(syntax(
                "SESSION-OPEN",
                "expected SESSION-OPEN <id> <user> <tag> <backend-ip> [proto]",
            )),
        },
        "SESSION-CLOSE" => match args[..] {
            [id] => Ok(Request::SessionClose { id }),
            _ => Err(syntax("SESSION-CLOSE", "expected SESSION-CLOSE <id>")),
        },
        "BACKEND-UP" => match args[..] {
            [addr, port, tag, vhosts, seq] => {
                let vhosts: u32 = num("BACKEND-UP", "vhosts", vhosts)?;
                if vhosts > 100 {
                    return Err(syntax("BACKEND-UP", "vhosts must be from 0 to 100"));
                }
                Ok(Request::BackendUp(BackendUp {
                    ip: ip("BACKEND-UP", addr)?,
                    port: num("BACKEND-UP", "port", port)?,
                    tag: tag.to_string(),
                    vhosts,
                    seq: num("BACKEND-UP", "seq", seq)?,
                }))
            }
            _ => Err(syntax(
                "BACKEND-UP",
                "expected BACKEND-UP <ip> <port> <tag> <vhosts> <seq>",
            )),
        },
        "BACKEND-DOWN" | "BACKEND-FLUSH" => {
            let name: &'static str = if cmd == "BACKEND-DOWN" {
                "BACKEND-DOWN"
            } else {
                "BACKEND-FLUSH"
            };
            let (addr, seq) = match args[..] {
                [addr] => (addr, None),
                [addr, seq] => (addr, Some(num(name, "seq", seq)?)),
                _ => return Err(syntax(name, "expected <ip> [seq]")),
            };
            let ip = ip(name, addr)?;
            Ok(if name == "BACKEND-DOWN" {
                Request::BackendDown { ip, seq }
            } else {
                Request::BackendFlush { ip, seq }
            })
        }
        "BACKEND-UNREACHABLE" => match args[..] {
            [addr] => Ok(Request::BackendUnreachable {
                ip: ip("BACKEND-UNREACHABLE", addr)?,
                reporter: None,
            }),
            [addr, reporter] => Ok(Request::BackendUnreachable {
                ip: ip("BACKEND-UNREACHABLE", addr)?,
                reporter: Some(reporter),
            }),
            _ => Err(syntax(
                "BACKEND-UNREACHABLE",
                "expected BACKEND-UNREACHABLE <ip> [reporter]",
            )),
        },
        "KICK-WATCH" => Ok(Request::KickWatch),
        "PING" => Ok(Request::Ping),
        "PONG" => Ok(Request::Pong),
        other => Err(ParseError::Unknown(other.chars().take(64).collect())),
    }
}

/// What a connection's peer may do, from the role SANs of its client
/// certificate (mTLS). Plain TCP (internal TLS off) allows everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerRoles {
    pub login: bool,
    pub backend_reg: bool,
    pub director: bool,
    pub admin: bool,
}

impl PeerRoles {
    /// No TLS: no role checks.
    pub const ANY: PeerRoles = PeerRoles {
        login: true,
        backend_reg: true,
        director: true,
        admin: true,
    };
}

/// Whether `roles` may send `request`: lookups and session accounting
/// from login pods (or directors / admins), registration only from the
/// backend-reg sidecar. `Err` names the role needed.
pub fn permitted(request: &Request<'_>, roles: PeerRoles) -> Result<(), &'static str> {
    match request {
        Request::BackendUp(_) | Request::BackendDown { .. } | Request::BackendFlush { .. } => {
            if roles.backend_reg {
                Ok(())
            } else {
                Err("backend-reg")
            }
        }
        Request::Ping | Request::Pong => Ok(()),
        _ => {
            if roles.login || roles.director || roles.admin {
                Ok(())
            } else {
                Err("login")
            }
        }
    }
}

/// The reply to a request the peer's roles do not allow.
pub fn forbidden(request: &Request<'_>, role: &str) -> Vec<String> {
    let name = match request {
        Request::Lookup { .. } => "LOOKUP",
        Request::SessionOpen { .. } => "SESSION-OPEN",
        Request::SessionClose { .. } => "SESSION-CLOSE",
        Request::BackendUp(_) => "BACKEND-UP",
        Request::BackendDown { .. } => "BACKEND-DOWN",
        Request::BackendFlush { .. } => "BACKEND-FLUSH",
        Request::BackendUnreachable { .. } => "BACKEND-UNREACHABLE",
        Request::KickWatch => "KICK-WATCH",
        Request::Ping => "PING",
        Request::Pong => "PONG",
    };
    fail("FORBIDDEN", &format!("{name} needs the {role} role"))
}

/// What handling a request did, for metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    None,
    Lookup {
        ok: bool,
        fresh: bool,
    },
    BackendUp(UpOutcome),
    Backend(BackendOutcome),
    /// The connection asked for kick orders.
    Watch,
    /// The LOOKUP's user is held (confirmed-kill): no reply yet; retry
    /// when a hold is released or at `until`.
    Held {
        until: Tick,
    },
    /// A SESSION-CLOSE confirmed a relocation.
    Released(Confirmed),
}

/// Applies a request to the state machine; returns the reply line (None
/// for PONG, and for a held LOOKUP — see [`Effect::Held`]) and what
/// happened. `peer` names the connection (the default
/// reporter of BACKEND-UNREACHABLE).
pub fn handle(
    director: &mut Director,
    now: Tick,
    peer: &str,
    request: Request<'_>,
) -> (Option<Vec<String>>, Effect) {
    match request {
        Request::Lookup { user, tag, proto } => match director.lookup(now, user, tag, proto) {
            Ok(route) => (
                Some(vec![
                    "OK".into(),
                    route.ip.to_string(),
                    route.port.to_string(),
                ]),
                Effect::Lookup {
                    ok: true,
                    fresh: route.fresh,
                },
            ),
            Err(LookupError::Held { until }) => (None, Effect::Held { until }),
            Err(e) => (
                Some(fail("NOBACKEND", &e.to_string())),
                Effect::Lookup {
                    ok: false,
                    fresh: false,
                },
            ),
        },
        Request::SessionOpen {
            id,
            user,
            tag,
            backend,
            proto,
        } => {
            let reply = if director.session_open(now, id, user, tag, backend, proto) {
                ok()
            } else {
                fail(
                    "NOTRACKED",
                    "unknown backend or tag, a closed session id, or the session registry is full",
                )
            };
            (Some(reply), Effect::None)
        }
        Request::SessionClose { id } => {
            let (_, released) = director.session_close(id);
            (Some(ok()), released.map_or(Effect::None, Effect::Released))
        }
        Request::BackendUp(up) => {
            let outcome = director.backend_up(now, &up);
            let reply = match outcome {
                UpOutcome::Stale => vec!["OK".into(), "STALE".into()],
                UpOutcome::Refused => fail("REFUSED", "backend or tag limit reached"),
                _ => ok(),
            };
            (Some(reply), Effect::BackendUp(outcome))
        }
        Request::BackendDown { ip, seq } => backend_reply(director.backend_down(now, ip, seq)),
        Request::BackendFlush { ip, seq } => backend_reply(director.backend_flush(now, ip, seq)),
        Request::BackendUnreachable { ip, reporter } => {
            let outcome = director.backend_unreachable(now, ip, reporter.unwrap_or(peer));
            (Some(ok()), Effect::Backend(outcome))
        }
        Request::KickWatch => (Some(ok()), Effect::Watch),
        Request::Ping => (Some(vec!["PONG".into()]), Effect::None),
        Request::Pong => (None, Effect::None),
    }
}

fn backend_reply(outcome: BackendOutcome) -> (Option<Vec<String>>, Effect) {
    let reply = match &outcome {
        BackendOutcome::Stale => vec!["OK".into(), "STALE".into()],
        BackendOutcome::Unknown => fail("UNKNOWN-BACKEND", "no such backend"),
        BackendOutcome::NotRegistered => fail(
            "NOT-REGISTERED",
            "static and admin backends change only through the admin API",
        ),
        _ => ok(),
    };
    (Some(reply), Effect::Backend(outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(line: &str) -> Vec<String> {
        line.split('\t').map(String::from).collect()
    }

    #[test]
    fn parses_every_command() {
        assert_eq!(
            parse(&f("LOOKUP\tu@d\t\timap")).unwrap(),
            Request::Lookup {
                user: "u@d",
                tag: "",
                proto: Some(Proto::Imap)
            }
        );
        assert_eq!(
            parse(&f("LOOKUP\tu@d\tblue")).unwrap(),
            Request::Lookup {
                user: "u@d",
                tag: "blue",
                proto: None
            }
        );
        assert!(matches!(
            parse(&f("BACKEND-UP\t10.0.0.1\t993\t\t100\t7")).unwrap(),
            Request::BackendUp(BackendUp {
                seq: 7,
                vhosts: 100,
                ..
            })
        ));
        assert!(matches!(
            parse(&f("BACKEND-DOWN\t10.0.0.1")).unwrap(),
            Request::BackendDown { seq: None, .. }
        ));
        assert!(matches!(
            parse(&f("BACKEND-FLUSH\t10.0.0.1\t9")).unwrap(),
            Request::BackendFlush { seq: Some(9), .. }
        ));
        assert!(matches!(
            parse(&f("SESSION-OPEN\ts1\tu\t\t10.0.0.1\tpop3")).unwrap(),
            Request::SessionOpen {
                proto: Proto::Pop3,
                ..
            }
        ));
        assert_eq!(parse(&f("PING")).unwrap(), Request::Ping);
    }

    proptest::proptest! {
        /// Any line from a peer parses or is refused; handling it never
        /// panics, whatever the state.
        #[test]
        fn hostile_lines_never_panic(
            cmd in proptest::sample::select(vec![
                "LOOKUP", "SESSION-OPEN", "SESSION-CLOSE", "BACKEND-UP", "BACKEND-DOWN",
                "BACKEND-FLUSH", "BACKEND-UNREACHABLE", "KICK-WATCH", "PING", "PONG", "X",
            ]),
            args in proptest::collection::vec("[ -~\\t%@.0-9:]{0,12}", 0..7),
        ) {
            let mut fields = vec![cmd.to_string()];
            fields.extend(args);
            let mut d = Director::new(crate::Settings::defaults(), crate::DirectorId(1));
            d.add_static(0, "10.0.0.1".parse().unwrap(), 1, "", 100);
            match parse(&fields) {
                Ok(req) => {
                    let (reply, _) = handle(&mut d, 1, "peer", req);
                    if let Some(r) = reply {
                        proptest::prop_assert!(!r.is_empty());
                    }
                }
                Err(e) => proptest::prop_assert_eq!(&e.reply()[0], "FAIL"),
            }
        }
    }

    #[test]
    fn tag_is_mandatory_and_bad_arguments_are_syntax_errors() {
        for line in [
            "LOOKUP\tu",
            "LOOKUP",
            "BACKEND-UP\tnot-an-ip\t1\t\t100\t1",
            "BACKEND-UP\t10.0.0.1\t1\t\t101\t1",
            "BACKEND-UP\t10.0.0.1\t99999\t\t100\t1",
            "BACKEND-DOWN\t10.0.0.1\tx",
            "SESSION-CLOSE",
        ] {
            let err = parse(&f(line)).unwrap_err();
            assert!(matches!(err, ParseError::Syntax { .. }), "{line}: {err:?}");
            assert_eq!(err.reply()[0], "FAIL");
        }
        assert_eq!(
            parse(&f("FROB\tx")).unwrap_err().reply()[1],
            "UNKNOWN-COMMAND"
        );
    }
}
