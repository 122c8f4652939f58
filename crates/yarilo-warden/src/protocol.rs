//! The warden wire protocol, sans-I/O.
//!
//! TAB-separated, LF-terminated lines escaped as `yarilo-wire` does; the
//! first line each side sends is `VERSION\twarden\t1\t0`. Requests are
//! answered in order.
//!
//! ```text
//! CONNECT\t<conn_id>\t<ip>               OK\t<penalty> | REFUSED\t<why>
//! DISCONNECT\t<conn_id>\t<ip>            OK
//! CHECK\t<user>\t<ip>                    OK | REFUSED\t<why>
//! SESSION_START\t<id>\t<user>\t<ip>      OK | REFUSED\t<why>
//! SESSION_END\t<id>\t<user>\t<ip>        OK
//! AUTH_FAIL\t<ip>                        OK\t<failures>
//! AUTH_OK\t<ip>                          OK
//! PENALTY\t<ip>                          OK\t<failures>
//! SESSIONS\t<user>                       OK\t<count>
//! DELIVERY_START\t<id>\t<user>           OK | REFUSED\tuser_deliveries
//! DELIVERY_END\t<id>\t<user>             OK
//! EMIT\t<user>\t<reason>                 OK            (kick bus)
//! SUBSCRIBE                              OK, then KICK\t<user>\t<reason> lines
//! ```
//!
//! `<why>` is one of `ip_connections`, `user_sessions`, `user_ip_sessions`,
//! `penalty`, `user_deliveries`. `DELIVERY_START`/`END` are what
//! `lmtp-login` sends per recipient (the deployment seed's "CONNECT /
//! DISCONNECT per recipient"): concurrent deliveries per user, limited by
//! `warden_service.limits.max_deliveries_per_user`, counted apart from
//! mail sessions. A bad request is answered `ERROR\t<text>` and the connection
//! goes on. Connections and sessions a client registered are released when
//! its connection closes, so a crashed login or session process leaves no
//! stale count behind.

use std::net::IpAddr;

/// Longest user name, id or reason accepted.
pub const MAX_FIELD: usize = 512;
/// Longest line, LF included.
pub const MAX_LINE: usize = 4096;
/// Service name in the VERSION line.
pub const SERVICE: &str = "warden";
pub const MAJOR: u32 = 1;
pub const MINOR: u32 = 0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Connect {
        id: String,
        ip: IpAddr,
    },
    Disconnect {
        id: String,
        ip: IpAddr,
    },
    Check {
        user: String,
        ip: IpAddr,
    },
    SessionStart {
        id: String,
        user: String,
        ip: IpAddr,
    },
    SessionEnd {
        id: String,
        user: String,
        ip: IpAddr,
    },
    AuthFail {
        ip: IpAddr,
    },
    AuthOk {
        ip: IpAddr,
    },
    Penalty {
        ip: IpAddr,
    },
    Sessions {
        user: String,
    },
    DeliveryStart {
        id: String,
        user: String,
    },
    DeliveryEnd {
        id: String,
        user: String,
    },
    Emit {
        user: String,
        reason: String,
    },
    Subscribe,
}

/// Which limit refused an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    IpConnections,
    UserSessions,
    UserIpSessions,
    Penalty,
    UserDeliveries,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::IpConnections => "ip_connections",
            Refusal::UserSessions => "user_sessions",
            Refusal::UserIpSessions => "user_ip_sessions",
            Refusal::Penalty => "penalty",
            Refusal::UserDeliveries => "user_deliveries",
        }
    }

    pub fn parse(s: &str) -> Option<Refusal> {
        Some(match s {
            "ip_connections" => Refusal::IpConnections,
            "user_sessions" => Refusal::UserSessions,
            "user_ip_sessions" => Refusal::UserIpSessions,
            "penalty" => Refusal::Penalty,
            "user_deliveries" => Refusal::UserDeliveries,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ok(Option<String>),
    Refused(Refusal),
    Error(String),
    Kick { user: String, reason: String },
}

impl Request {
    pub fn command(&self) -> &'static str {
        match self {
            Request::Connect { .. } => "CONNECT",
            Request::Disconnect { .. } => "DISCONNECT",
            Request::Check { .. } => "CHECK",
            Request::SessionStart { .. } => "SESSION_START",
            Request::SessionEnd { .. } => "SESSION_END",
            Request::AuthFail { .. } => "AUTH_FAIL",
            Request::AuthOk { .. } => "AUTH_OK",
            Request::Penalty { .. } => "PENALTY",
            Request::Sessions { .. } => "SESSIONS",
            Request::DeliveryStart { .. } => "DELIVERY_START",
            Request::DeliveryEnd { .. } => "DELIVERY_END",
            Request::Emit { .. } => "EMIT",
            Request::Subscribe => "SUBSCRIBE",
        }
    }

    pub fn parse(fields: &[String]) -> Result<Request, String> {
        let Some((cmd, args)) = fields.split_first() else {
            return Err("empty line".into());
        };
        for a in args {
            if a.len() > MAX_FIELD {
                return Err(format!("field longer than {MAX_FIELD} bytes"));
            }
        }
        let ip = |s: &String| -> Result<IpAddr, String> {
            s.parse().map_err(|_| format!("`{s}` is not an IP address"))
        };
        let nonempty = |s: &String, what: &str| -> Result<String, String> {
            if s.is_empty() {
                Err(format!("{what} is empty"))
            } else {
                Ok(s.clone())
            }
        };
        Ok(match (cmd.as_str(), args) {
            ("CONNECT", [id, a]) => Request::Connect {
                id: nonempty(id, "id")?,
                ip: ip(a)?,
            },
            ("DISCONNECT", [id, a]) => Request::Disconnect {
                id: nonempty(id, "id")?,
                ip: ip(a)?,
            },
            ("CHECK", [u, a]) => Request::Check {
                user: nonempty(u, "user")?,
                ip: ip(a)?,
            },
            ("SESSION_START", [id, u, a]) => Request::SessionStart {
                id: nonempty(id, "id")?,
                user: nonempty(u, "user")?,
                ip: ip(a)?,
            },
            ("SESSION_END", [id, u, a]) => Request::SessionEnd {
                id: nonempty(id, "id")?,
                user: nonempty(u, "user")?,
                ip: ip(a)?,
            },
            ("AUTH_FAIL", [a]) => Request::AuthFail { ip: ip(a)? },
            ("AUTH_OK", [a]) => Request::AuthOk { ip: ip(a)? },
            ("PENALTY", [a]) => Request::Penalty { ip: ip(a)? },
            ("SESSIONS", [u]) => Request::Sessions {
                user: nonempty(u, "user")?,
            },
            ("DELIVERY_START", [id, u]) => Request::DeliveryStart {
                id: nonempty(id, "id")?,
                user: nonempty(u, "user")?,
            },
            ("DELIVERY_END", [id, u]) => Request::DeliveryEnd {
                id: nonempty(id, "id")?,
                user: nonempty(u, "user")?,
            },
            ("EMIT", [u, r]) => Request::Emit {
                user: nonempty(u, "user")?,
                reason: r.clone(),
            },
            ("SUBSCRIBE", []) => Request::Subscribe,
            (
                "CONNECT" | "DISCONNECT" | "CHECK" | "SESSION_START" | "SESSION_END" | "AUTH_FAIL"
                | "AUTH_OK" | "PENALTY" | "SESSIONS" | "EMIT" | "SUBSCRIBE" | "DELIVERY_START"
                | "DELIVERY_END",
                _,
            ) => return Err(format!("wrong number of arguments for {cmd}")),
            _ => return Err(format!("unknown command {cmd:?}")),
        })
    }

    pub fn to_fields(&self) -> Vec<String> {
        let s = |x: &str| x.to_string();
        match self {
            Request::Connect { id, ip } => vec![s("CONNECT"), id.clone(), ip.to_string()],
            Request::Disconnect { id, ip } => vec![s("DISCONNECT"), id.clone(), ip.to_string()],
            Request::Check { user, ip } => vec![s("CHECK"), user.clone(), ip.to_string()],
            Request::SessionStart { id, user, ip } => {
                vec![s("SESSION_START"), id.clone(), user.clone(), ip.to_string()]
            }
            Request::SessionEnd { id, user, ip } => {
                vec![s("SESSION_END"), id.clone(), user.clone(), ip.to_string()]
            }
            Request::AuthFail { ip } => vec![s("AUTH_FAIL"), ip.to_string()],
            Request::AuthOk { ip } => vec![s("AUTH_OK"), ip.to_string()],
            Request::Penalty { ip } => vec![s("PENALTY"), ip.to_string()],
            Request::Sessions { user } => vec![s("SESSIONS"), user.clone()],
            Request::DeliveryStart { id, user } => {
                vec![s("DELIVERY_START"), id.clone(), user.clone()]
            }
            Request::DeliveryEnd { id, user } => vec![s("DELIVERY_END"), id.clone(), user.clone()],
            Request::Emit { user, reason } => vec![s("EMIT"), user.clone(), reason.clone()],
            Request::Subscribe => vec![s("SUBSCRIBE")],
        }
    }
}

impl Reply {
    pub fn to_fields(&self) -> Vec<String> {
        match self {
            Reply::Ok(None) => vec!["OK".into()],
            Reply::Ok(Some(v)) => vec!["OK".into(), v.clone()],
            Reply::Refused(r) => vec!["REFUSED".into(), r.as_str().into()],
            Reply::Error(t) => vec!["ERROR".into(), t.clone()],
            Reply::Kick { user, reason } => vec!["KICK".into(), user.clone(), reason.clone()],
        }
    }

    pub fn parse(fields: &[String]) -> Option<Reply> {
        let f: Vec<&str> = fields.iter().map(String::as_str).collect();
        Some(match f.as_slice() {
            ["OK"] => Reply::Ok(None),
            ["OK", v] => Reply::Ok(Some(v.to_string())),
            ["REFUSED", why] => Reply::Refused(Refusal::parse(why)?),
            ["ERROR", t] => Reply::Error(t.to_string()),
            ["KICK", u, r] => Reply::Kick {
                user: u.to_string(),
                reason: r.to_string(),
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        for r in [
            Request::Connect {
                id: "c1".into(),
                ip,
            },
            Request::Disconnect {
                id: "c1".into(),
                ip,
            },
            Request::Check {
                user: "u".into(),
                ip,
            },
            Request::SessionStart {
                id: "s".into(),
                user: "u\tx".into(),
                ip,
            },
            Request::SessionEnd {
                id: "s".into(),
                user: "u".into(),
                ip,
            },
            Request::AuthFail { ip },
            Request::AuthOk { ip },
            Request::Penalty { ip },
            Request::Sessions { user: "u".into() },
            Request::Emit {
                user: "u".into(),
                reason: "moved".into(),
            },
            Request::Subscribe,
        ] {
            let line = yarilo_wire::join_line(&r.to_fields());
            let fields = yarilo_wire::split_line(&line).unwrap();
            assert_eq!(Request::parse(&fields).unwrap(), r);
        }
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(Request::parse(&f(&["CONNECT", "c", "not-an-ip"])).is_err());
        assert!(Request::parse(&f(&["CONNECT", "c"])).is_err());
        assert!(Request::parse(&f(&["NOPE"])).is_err());
        assert!(Request::parse(&f(&["SESSIONS", &"u".repeat(MAX_FIELD + 1)])).is_err());
        for r in [
            Reply::Ok(None),
            Reply::Ok(Some("3".into())),
            Reply::Refused(Refusal::Penalty),
            Reply::Error("x".into()),
            Reply::Kick {
                user: "u".into(),
                reason: "r".into(),
            },
        ] {
            assert_eq!(Reply::parse(&r.to_fields()), Some(r));
        }
    }
}
