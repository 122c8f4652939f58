//! The auth service's line protocol (`yarilo_wire` framing: TAB-separated,
//! LF-terminated, escaped fields, bounded lines).
//!
//! ```text
//! C: VERSION  auth  1  0                    S: VERSION  auth  1  0
//! C: MECHS    <id>  ip=<ip>  [secured]      S: MECHS  <id>  PLAIN  LOGIN …
//! C: AUTH     <id>  <mech>  service=<s>  ip=<client ip>  session=<sid>
//!             [local_ip=<ip>]  [secured]  [resp=<base64>]
//! S: CONT     <id>  <base64 challenge>
//! C: CONT     <id>  <base64 response> | *      (* cancels)
//! S: OK       <id>  user=<u>  token=<64 hex>  [resp=<base64>]  <key=value>…
//! S: FAIL     <id>  code=<kind>  reason=<text>  [user=<u>]
//! C: VERIFY   <id>  token=<hex>  session=<sid>  service=<s>  [user=<u>]
//! S: OK       <id>  user=<u>  <key=value>…   |   FAIL <id> code=token reason=…
//! C: USER     <id>  user=<u>  service=<s>
//! S: USER     <id>  user=<u>  <key=value>…   |   NOTFOUND <id>   |   FAIL <id> …
//! S: ERROR    <id or ->  <text>                 (unknown command, bad syntax)
//! ```
//!
//! Request ids are chosen by the client (at most [`MAX_ID`] bytes) and
//! let one connection carry many requests at once; answers may come in
//! any order. A SASL exchange lives on the connection that started it.
//! Extra fields never use the reserved keys `user`, `token`, `resp`.

use std::net::IpAddr;

use yarilo_wire::Version;

/// This protocol's VERSION line.
pub fn version() -> Version {
    Version::new("auth", 1, 0)
}

/// Longest request id accepted.
pub const MAX_ID: usize = 64;

/// Longest line either side sends (a base64 SASL message of
/// `sasl::MAX_MESSAGE` bytes fits easily).
pub const MAX_LINE: usize = 64 * 1024;

/// Keys the service sets itself on OK lines.
pub const RESERVED: &[&str] = &["user", "token", "resp", "code", "reason"];

/// A parsed client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Mechs {
        id: String,
        ip: Option<IpAddr>,
        secured: bool,
    },
    Auth {
        id: String,
        mechanism: String,
        service: String,
        ip: IpAddr,
        local_ip: Option<IpAddr>,
        session: String,
        secured: bool,
        /// Base64 initial response (`resp=`, may be empty).
        initial: Option<String>,
    },
    Cont {
        id: String,
        /// Base64 response, `None` for `*` (cancel).
        response: Option<String>,
    },
    Verify {
        id: String,
        token: String,
        session: String,
        service: String,
        user: String,
    },
    User {
        id: String,
        user: String,
        service: String,
        /// With `service=lmtp`: the delivery's session id; the answer then
        /// carries a `token=` for the LMTP hop's preamble.
        session: Option<String>,
    },
}

/// Why a line is not a request; the service answers `ERROR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    /// The id, when the line had one.
    pub id: Option<String>,
    pub message: String,
}

fn kv(fields: &[String]) -> impl Iterator<Item = (&str, &str)> {
    fields.iter().map(|f| match f.split_once('=') {
        Some((k, v)) => (k, v),
        None => (f.as_str(), ""),
    })
}

fn get<'a>(fields: &'a [String], key: &str) -> Option<&'a str> {
    kv(fields).find(|(k, _)| *k == key).map(|(_, v)| v)
}

fn has(fields: &[String], key: &str) -> bool {
    kv(fields).any(|(k, _)| k == key)
}

impl Request {
    pub fn parse(fields: &[String]) -> Result<Request, BadRequest> {
        let Some(cmd) = fields.first() else {
            return Err(BadRequest {
                id: None,
                message: "empty line".into(),
            });
        };
        let id = match fields.get(1) {
            Some(id) if !id.is_empty() && id.len() <= MAX_ID => id.clone(),
            _ => {
                return Err(BadRequest {
                    id: None,
                    message: format!("{cmd}: missing or over-long request id"),
                })
            }
        };
        let bad = |message: String| BadRequest {
            id: Some(id.clone()),
            message,
        };
        let rest = &fields[2..];
        let ip_of = |key: &str| -> Result<Option<IpAddr>, BadRequest> {
            match get(rest, key) {
                None | Some("") => Ok(None),
                Some(v) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| bad(format!("{key}={v} is not an IP address"))),
            }
        };
        match cmd.as_str() {
            "MECHS" => Ok(Request::Mechs {
                ip: ip_of("ip")?,
                secured: has(rest, "secured"),
                id,
            }),
            "AUTH" => {
                let Some(mechanism) = rest.first().filter(|m| !m.contains('=')) else {
                    return Err(bad("AUTH needs a mechanism".into()));
                };
                let params = &rest[1..];
                let service = get(params, "service").unwrap_or("").to_string();
                if service.is_empty() {
                    return Err(bad("AUTH needs service=".into()));
                }
                let Some(ip) = ip_of("ip")? else {
                    return Err(bad("AUTH needs ip= (the real client address)".into()));
                };
                Ok(Request::Auth {
                    mechanism: mechanism.clone(),
                    service,
                    ip,
                    local_ip: ip_of("local_ip")?,
                    session: get(params, "session").unwrap_or("").to_string(),
                    secured: has(params, "secured"),
                    initial: get(params, "resp").map(str::to_string),
                    id,
                })
            }
            "CONT" => {
                let Some(data) = rest.first() else {
                    return Err(bad("CONT needs data".into()));
                };
                Ok(Request::Cont {
                    response: (data != "*").then(|| data.clone()),
                    id,
                })
            }
            "VERIFY" => {
                let token = get(rest, "token").unwrap_or("").to_string();
                let session = get(rest, "session").unwrap_or("").to_string();
                let service = get(rest, "service").unwrap_or("").to_string();
                if token.is_empty() || service.is_empty() {
                    return Err(bad("VERIFY needs token= and service=".into()));
                }
                Ok(Request::Verify {
                    token,
                    session,
                    service,
                    user: get(rest, "user").unwrap_or("").to_string(),
                    id,
                })
            }
            "USER" => {
                let user = get(rest, "user").unwrap_or("").to_string();
                if user.is_empty() {
                    return Err(bad("USER needs user=".into()));
                }
                Ok(Request::User {
                    user,
                    service: get(rest, "service").unwrap_or("").to_string(),
                    session: get(rest, "session").map(str::to_string),
                    id,
                })
            }
            other => Err(bad(format!("unknown command {other}"))),
        }
    }
}

/// Appends `key=value` extra fields, leaving out reserved keys.
pub(crate) fn push_fields(out: &mut Vec<String>, fields: &crate::ExtraFields) {
    for (k, v) in fields.iter() {
        if !RESERVED.contains(&k) {
            out.push(format!("{k}={v}"));
        }
    }
}

/// Splits `key=value` fields into reserved values and extra fields.
pub(crate) fn parse_fields(fields: &[String]) -> (Vec<(String, String)>, crate::ExtraFields) {
    let mut reserved = Vec::new();
    let mut extra = crate::ExtraFields::new();
    for (k, v) in kv(fields) {
        if RESERVED.contains(&k) {
            reserved.push((k.to_string(), v.to_string()));
        } else {
            extra.set(k, v);
        }
    }
    (reserved, extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn auth_lines_parse() {
        let r = Request::parse(&f(&[
            "AUTH",
            "7",
            "PLAIN",
            "service=imap",
            "ip=192.0.2.1",
            "session=s",
            "secured",
            "resp=AGEAYg==",
        ]))
        .unwrap();
        assert_eq!(
            r,
            Request::Auth {
                id: "7".into(),
                mechanism: "PLAIN".into(),
                service: "imap".into(),
                ip: "192.0.2.1".parse().unwrap(),
                local_ip: None,
                session: "s".into(),
                secured: true,
                initial: Some("AGEAYg==".into()),
            }
        );
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        for line in [
            &[][..],
            &["AUTH"][..],
            &["AUTH", "1"][..],
            &["AUTH", "1", "PLAIN", "service=imap"][..],
            &["AUTH", "1", "PLAIN", "service=imap", "ip=nope"][..],
            &["VERIFY", "1", "token=x"][..],
            &["FOO", "1"][..],
        ] {
            assert!(Request::parse(&f(line)).is_err(), "{line:?}");
        }
        let long_id = "x".repeat(MAX_ID + 1);
        assert!(Request::parse(&f(&["MECHS", &long_id])).is_err());
    }
}
