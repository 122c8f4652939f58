//! The locks wire protocol, sans-I/O: one line in, one typed value out.
//!
//! TAB-separated fields, LF-terminated, escaped as `yarilo-wire` does. The
//! same byte stream runs over the unix socket (embedded mode) and over TCP
//! with mTLS (remote mode):
//!
//! ```text
//! > VERSION\t1                          < VERSION\t1\tOK
//! > LOCK\t<resource>\t<owner>\t<ttl_ms> < OK\t<lock_id> | BUSY\t<current_owner>
//! > UNLOCK\t<lock_id>                   < OK | NOT_FOUND
//! > RENEW\t<lock_id>\t<new_ttl_ms>      < OK | EXPIRED
//! > EVENT\t<resource>\t<type>\t<payload>  (no reply: fire and forget)
//! ```
//!
//! Extensions (not in the design document, needed to carry events to
//! other processes): `SUBSCRIBE` turns the connection into a push-only
//! stream — `OK`, then one `EVENT\t<resource>\t<type>\t<payload>` line per
//! event. Anything the server cannot do is answered
//! `ERROR\t<class>\t<text>` with class `syntax` (bad request; the
//! connection goes on), `version` (handshake refused; the connection
//! closes) or `unavailable` (the state store did not answer; nothing
//! changed, the client may retry).
//!
//! Invariants: requests are answered in the order they arrive, so a client
//! may pipeline; `EVENT` never produces a reply, not even an error, so a
//! pipelining client never loses count.

use std::time::Duration;

/// The only protocol version there is.
pub const PROTOCOL_VERSION: &str = "1";

/// Longest resource name accepted (`mbox:<user>:<folder>` fits easily).
pub const MAX_RESOURCE: usize = 1024;
/// Longest owner accepted.
pub const MAX_OWNER: usize = 256;
/// Longest event payload accepted.
pub const MAX_PAYLOAD: usize = 16 * 1024;
/// Longest line, LF included.
pub const MAX_LINE: usize = 24 * 1024;

/// A request line from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Version(String),
    Lock {
        resource: String,
        owner: String,
        ttl: Duration,
    },
    Unlock {
        lock_id: String,
    },
    Renew {
        lock_id: String,
        ttl: Duration,
    },
    Event {
        resource: String,
        kind: String,
        payload: String,
    },
    Subscribe,
}

/// Why a request line was refused. The connection goes on (`syntax`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SyntaxError(pub String);

impl Request {
    /// Name of the command, for metrics labels.
    pub fn command(&self) -> &'static str {
        match self {
            Request::Version(_) => "VERSION",
            Request::Lock { .. } => "LOCK",
            Request::Unlock { .. } => "UNLOCK",
            Request::Renew { .. } => "RENEW",
            Request::Event { .. } => "EVENT",
            Request::Subscribe => "SUBSCRIBE",
        }
    }

    /// Parses one line's fields. `max_ttl` bounds what a client may ask for.
    pub fn parse(fields: &[String], max_ttl: Duration) -> Result<Request, SyntaxError> {
        let err = |m: &str| SyntaxError(m.to_string());
        let Some((cmd, args)) = fields.split_first() else {
            return Err(err("empty line"));
        };
        let ttl = |s: &str| -> Result<Duration, SyntaxError> {
            let ms: u64 = s
                .parse()
                .map_err(|_| err("ttl is not a number of milliseconds"))?;
            let ttl = Duration::from_millis(ms);
            if ms == 0 || ttl > max_ttl {
                return Err(SyntaxError(format!(
                    "ttl must be 1..={} ms",
                    max_ttl.as_millis()
                )));
            }
            Ok(ttl)
        };
        let resource = |s: &str| -> Result<String, SyntaxError> {
            if s.is_empty() || s.len() > MAX_RESOURCE {
                return Err(SyntaxError(format!(
                    "resource must be 1..={MAX_RESOURCE} bytes"
                )));
            }
            Ok(s.to_string())
        };
        match (cmd.as_str(), args) {
            ("VERSION", [v]) => Ok(Request::Version(v.clone())),
            ("LOCK", [r, owner, t]) => {
                if owner.len() > MAX_OWNER {
                    return Err(SyntaxError(format!("owner longer than {MAX_OWNER} bytes")));
                }
                Ok(Request::Lock {
                    resource: resource(r)?,
                    owner: owner.clone(),
                    ttl: ttl(t)?,
                })
            }
            ("UNLOCK", [id]) if !id.is_empty() => Ok(Request::Unlock {
                lock_id: id.clone(),
            }),
            ("RENEW", [id, t]) if !id.is_empty() => Ok(Request::Renew {
                lock_id: id.clone(),
                ttl: ttl(t)?,
            }),
            ("EVENT", [r, kind, payload]) => {
                if payload.len() > MAX_PAYLOAD {
                    return Err(err("payload too long"));
                }
                Ok(Request::Event {
                    resource: resource(r)?,
                    kind: kind.clone(),
                    payload: payload.clone(),
                })
            }
            ("SUBSCRIBE", []) => Ok(Request::Subscribe),
            ("VERSION" | "LOCK" | "UNLOCK" | "RENEW" | "EVENT" | "SUBSCRIBE", _) => {
                Err(SyntaxError(format!("wrong number of arguments for {cmd}")))
            }
            _ => Err(SyntaxError(format!("unknown command {cmd:?}"))),
        }
    }

    /// The request as fields, for a client to send.
    pub fn to_fields(&self) -> Vec<String> {
        match self {
            Request::Version(v) => vec!["VERSION".into(), v.clone()],
            Request::Lock {
                resource,
                owner,
                ttl,
            } => vec![
                "LOCK".into(),
                resource.clone(),
                owner.clone(),
                ttl_ms(*ttl).to_string(),
            ],
            Request::Unlock { lock_id } => vec!["UNLOCK".into(), lock_id.clone()],
            Request::Renew { lock_id, ttl } => {
                vec!["RENEW".into(), lock_id.clone(), ttl_ms(*ttl).to_string()]
            }
            Request::Event {
                resource,
                kind,
                payload,
            } => vec![
                "EVENT".into(),
                resource.clone(),
                kind.clone(),
                payload.clone(),
            ],
            Request::Subscribe => vec!["SUBSCRIBE".into()],
        }
    }

    /// Whether the server answers this request.
    pub fn expects_reply(&self) -> bool {
        !matches!(self, Request::Event { .. })
    }
}

/// A TTL in whole milliseconds, at least 1 (0 would mean "no lease").
pub fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

/// Class of an `ERROR` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Syntax,
    Version,
    Unavailable,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Syntax => "syntax",
            ErrorClass::Version => "version",
            ErrorClass::Unavailable => "unavailable",
        }
    }
}

/// A reply line from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    VersionOk,
    /// `OK` with an optional lock id (LOCK) or none (UNLOCK, RENEW, SUBSCRIBE).
    Ok(Option<String>),
    Busy(String),
    NotFound,
    Expired,
    Error(ErrorClass, String),
    /// A pushed event on a subscribed connection.
    Event {
        resource: String,
        kind: String,
        payload: String,
    },
}

impl Reply {
    pub fn to_fields(&self) -> Vec<String> {
        match self {
            Reply::VersionOk => vec!["VERSION".into(), PROTOCOL_VERSION.into(), "OK".into()],
            Reply::Ok(None) => vec!["OK".into()],
            Reply::Ok(Some(id)) => vec!["OK".into(), id.clone()],
            Reply::Busy(owner) => vec!["BUSY".into(), owner.clone()],
            Reply::NotFound => vec!["NOT_FOUND".into()],
            Reply::Expired => vec!["EXPIRED".into()],
            Reply::Error(class, text) => {
                vec!["ERROR".into(), class.as_str().into(), text.clone()]
            }
            Reply::Event {
                resource,
                kind,
                payload,
            } => vec![
                "EVENT".into(),
                resource.clone(),
                kind.clone(),
                payload.clone(),
            ],
        }
    }

    /// Parses a reply line (client side). Unknown shapes are `None`.
    pub fn parse(fields: &[String]) -> Option<Reply> {
        let f: Vec<&str> = fields.iter().map(String::as_str).collect();
        Some(match f.as_slice() {
            ["VERSION", v, "OK"] if *v == PROTOCOL_VERSION => Reply::VersionOk,
            ["OK"] => Reply::Ok(None),
            ["OK", id] => Reply::Ok(Some(id.to_string())),
            ["BUSY", owner] => Reply::Busy(owner.to_string()),
            ["NOT_FOUND"] => Reply::NotFound,
            ["EXPIRED"] => Reply::Expired,
            ["ERROR", class, text] => Reply::Error(
                match *class {
                    "version" => ErrorClass::Version,
                    "unavailable" => ErrorClass::Unavailable,
                    _ => ErrorClass::Syntax,
                },
                text.to_string(),
            ),
            ["EVENT", r, k, p] => Reply::Event {
                resource: r.to_string(),
                kind: k.to_string(),
                payload: p.to_string(),
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    const MAX: Duration = Duration::from_secs(300);

    #[test]
    fn requests_round_trip_through_fields() {
        for r in [
            Request::Version("1".into()),
            Request::Lock {
                resource: "mbox:u:INBOX".into(),
                owner: "imap-1".into(),
                ttl: Duration::from_secs(30),
            },
            Request::Unlock {
                lock_id: "x".into(),
            },
            Request::Renew {
                lock_id: "x".into(),
                ttl: Duration::from_millis(5),
            },
            Request::Event {
                resource: "mbox:u:INBOX".into(),
                kind: "append".into(),
                payload: "".into(),
            },
            Request::Subscribe,
        ] {
            assert_eq!(Request::parse(&r.to_fields(), MAX).unwrap(), r);
        }
    }

    #[test]
    fn hostile_requests_are_refused_not_fatal() {
        assert!(Request::parse(&f(&["LOCK", "r", "o", "0"]), MAX).is_err());
        assert!(Request::parse(&f(&["LOCK", "r", "o", "99999999"]), MAX).is_err());
        assert!(Request::parse(&f(&["LOCK", "", "o", "10"]), MAX).is_err());
        assert!(Request::parse(&f(&["LOCK", "r", "o"]), MAX).is_err());
        assert!(Request::parse(&f(&["FOO"]), MAX).is_err());
        assert!(Request::parse(&f(&[""]), MAX).is_err());
        assert!(Request::parse(&[], MAX).is_err());
        let long = "x".repeat(MAX_RESOURCE + 1);
        assert!(Request::parse(&f(&["LOCK", &long, "o", "10"]), MAX).is_err());
    }

    #[test]
    fn replies_round_trip_through_fields() {
        for r in [
            Reply::VersionOk,
            Reply::Ok(None),
            Reply::Ok(Some("id".into())),
            Reply::Busy("imap-2".into()),
            Reply::NotFound,
            Reply::Expired,
            Reply::Error(ErrorClass::Unavailable, "redis".into()),
            Reply::Event {
                resource: "r".into(),
                kind: "k".into(),
                payload: "p".into(),
            },
        ] {
            assert_eq!(Reply::parse(&r.to_fields()), Some(r));
        }
        assert_eq!(
            yarilo_wire::join_line(&Reply::VersionOk.to_fields()),
            "VERSION\t1\tOK\n"
        );
    }
}
