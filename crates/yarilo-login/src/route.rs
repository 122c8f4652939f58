//! Which backend an authenticated session goes to: `backend_addr`
//! (standalone: one address, a Service that load-balances) or a LOOKUP to
//! the director at `director_addr` (`LOOKUP <user> <tag> <proto>` →
//! `OK <ip> <port>`). `backend_addr` wins when both are set.
//!
//! The tag of a LOOKUP is the user's `director_tag` field from passdb or
//! userdb when it has a non-empty one, else `login.<proto>.director_tag`
//! (director seed, "Tag sharding models"). The port dialled is
//! `login.<proto>.backend_port` when set, else the LOOKUP's port when it
//! gives one, else this login's own protocol port (`services.<proto>.port`):
//! a self-registered pod's port is nominal, so the director answers 0 for
//! it. The wait for the LOOKUP's answer is `login.lookup_timeout_ms`
//! (longer than the director's confirmed-kill hold), the dial and VERSION
//! exchange before it `login.connect_timeout_ms`.
//!
//! A director-routed login process also keeps one standing connection to
//! the director ([`Router::with_director_sessions`],
//! [`crate::director_link`]) that reports the piped sessions and carries
//! the director's kicks.

use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use yarilo_auth::ExtraFields;
use yarilo_config::{LoginRoute, RouteTarget};
use yarilo_tls::internal::InternalTls;
use yarilo_wire::{join_line, split_line};

use crate::director_link::DirectorLink;
use crate::hop::{dial, UpstreamStream};
use crate::HopError;

/// Longest director reply line.
const MAX_REPLY: usize = 1024;

/// A protocol's routing, resolved at start-up.
#[derive(Debug, Clone)]
pub struct Router {
    target: RouteTarget,
    /// Replaces the port a LOOKUP returns (0: keep it).
    backend_port: u16,
    /// This login's own protocol port: dialled when the LOOKUP's port is
    /// 0 (a registered pod) and `backend_port` is 0.
    protocol_port: u16,
    /// Tag pool for users without a `director_tag` field.
    director_tag: String,
    /// `imap`, `pop3`, … (the LOOKUP's proto field).
    proto: &'static str,
    tls: Option<InternalTls>,
    /// Dial + VERSION exchange with the director.
    timeout: Duration,
    /// The director's answer to a LOOKUP (it may hold it while a moved
    /// user's old sessions close).
    lookup_timeout: Duration,
    /// Session reports and kicks (director routing only; not for LMTP).
    sessions: Option<DirectorLink>,
}

/// Where a session goes.
#[derive(Debug, Clone)]
pub struct Route {
    /// `host:port` to dial.
    pub addr: String,
    /// Set when a director LOOKUP chose the backend and the session is to
    /// be reported to it.
    pub director: Option<DirectorRoute>,
}

impl Route {
    /// After a failed dial of this route's backend: a director-chosen
    /// backend that took no TCP connection is reported to the director
    /// (BACKEND-UNREACHABLE, deduplicated by the link).
    pub fn report_if_unreachable(&self, e: &HopError) {
        if let (
            HopError::Connect {
                unreachable: true, ..
            },
            Some(d),
        ) = (e, &self.director)
        {
            d.link.report_unreachable(d.backend);
        }
    }
}

/// A director's choice, for SESSION-OPEN.
#[derive(Debug, Clone)]
pub struct DirectorRoute {
    pub link: DirectorLink,
    pub backend: std::net::IpAddr,
    pub tag: String,
}

impl Router {
    /// From `login.<proto>`; `key` names it in errors. Fails when neither
    /// `backend_addr` nor `director_addr` is set. `protocol_port` is the
    /// login's `services.<proto>.port`; the LOOKUP wait defaults to 35 s
    /// ([`Router::with_lookup_timeout`]).
    pub fn from_config(
        route: &LoginRoute,
        key: &str,
        proto: &'static str,
        protocol_port: u16,
        tls: Option<InternalTls>,
        timeout: Duration,
    ) -> Result<Router, yarilo_config::ConfigError> {
        let target = route.target(key)?;
        if matches!(target, RouteTarget::Backend(_)) && !route.director_addr.is_empty() {
            tracing::warn!(
                "{key}: both backend_addr and director_addr are set; backend_addr wins, \
                 director routing is off"
            );
        }
        Ok(Router {
            target,
            backend_port: route.backend_port,
            protocol_port,
            director_tag: route.director_tag.clone(),
            proto,
            tls,
            timeout,
            lookup_timeout: Duration::from_millis(
                yarilo_config::Login::default().lookup_timeout_ms,
            ),
            sessions: None,
        })
    }

    /// Sets the wait for a LOOKUP's answer (`login.lookup_timeout_ms`).
    pub fn with_lookup_timeout(mut self, lookup_timeout: Duration) -> Router {
        self.lookup_timeout = lookup_timeout;
        self
    }

    /// The tag of `fields`' user: its own non-empty `director_tag`, else
    /// this login's static one.
    fn tag_for<'a>(&'a self, fields: &'a ExtraFields) -> &'a str {
        match fields.get("director_tag") {
            Some(t) if !t.is_empty() => t,
            _ => self.director_tag.as_str(),
        }
    }

    /// The port to dial on a LOOKUP's backend.
    fn port_for(&self, looked_up: u16) -> u16 {
        match (self.backend_port, looked_up) {
            (0, 0) => self.protocol_port,
            (0, p) => p,
            (p, _) => p,
        }
    }

    /// With director routing, starts the process's director connection
    /// (SESSION-OPEN/CLOSE of piped sessions, KICK-WATCH) and registers
    /// `yarilo_login_director_*`; with `backend_addr`, unchanged. Must run
    /// inside a tokio runtime.
    pub fn with_director_sessions(mut self, registry: &mut Registry) -> Router {
        if let RouteTarget::Director(addr) = &self.target {
            self.sessions = Some(DirectorLink::start(
                addr,
                self.tls.clone(),
                self.timeout,
                self.proto,
                registry,
            ));
        }
        self
    }

    /// `host:port` for `user`.
    pub async fn backend_for(&self, user: &str, fields: &ExtraFields) -> Result<String, HopError> {
        Ok(self.route_for(user, fields).await?.addr)
    }

    /// Where `user`'s session goes, and whether to report it.
    pub async fn route_for(&self, user: &str, fields: &ExtraFields) -> Result<Route, HopError> {
        match &self.target {
            RouteTarget::Backend(addr) => Ok(Route {
                addr: addr.clone(),
                director: None,
            }),
            RouteTarget::Director(director) => {
                let tag = self.tag_for(fields);
                let (ip, port) = lookup(
                    director,
                    self.tls.as_ref(),
                    self.timeout,
                    self.lookup_timeout,
                    user,
                    tag,
                    self.proto,
                )
                .await?;
                let port = self.port_for(port);
                let addr = match ip {
                    std::net::IpAddr::V6(v6) => format!("[{v6}]:{port}"),
                    v4 => format!("{v4}:{port}"),
                };
                Ok(Route {
                    addr,
                    director: self.sessions.as_ref().map(|link| DirectorRoute {
                        link: link.clone(),
                        backend: ip,
                        tag: tag.to_string(),
                    }),
                })
            }
        }
    }
}

/// One LOOKUP on a fresh connection: dial and VERSION within `timeout`,
/// the answer within `lookup_timeout`.
async fn lookup(
    director: &str,
    tls: Option<&InternalTls>,
    timeout: Duration,
    lookup_timeout: Duration,
    user: &str,
    tag: &str,
    proto: &str,
) -> Result<(std::net::IpAddr, u16), HopError> {
    let route_err = |m: String| HopError::Route(format!("director {director}: {m}"));
    let mut s = tokio::time::timeout(timeout, dial_director(director, tls, timeout, MAX_REPLY))
        .await
        .map_err(|_| route_err(format!("no connection within {timeout:?}")))?
        .map_err(route_err)?;
    let exchange = async {
        s.write_all(join_line(&["LOOKUP", user, tag, proto]).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut line = Vec::with_capacity(64);
        let mut b = [0u8; 256];
        loop {
            let n = s.read(&mut b).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("closed".to_string());
            }
            line.extend_from_slice(b.get(..n).unwrap_or_default());
            if let Some(pos) = line.iter().position(|&c| c == b'\n') {
                line.truncate(pos);
                return Ok(line);
            }
            if line.len() > MAX_REPLY {
                return Err("reply too long".to_string());
            }
        }
    };
    let line = tokio::time::timeout(lookup_timeout, exchange)
        .await
        .map_err(|_| route_err(format!("no answer to LOOKUP within {lookup_timeout:?}")))?
        .map_err(route_err)?;
    let text = String::from_utf8(line).map_err(|_| route_err("reply not UTF-8".into()))?;
    parse_lookup_reply(&text).map_err(route_err)
}

/// `OK <ip> <port>` → the pair; `FAIL …` → its text.
fn parse_lookup_reply(line: &str) -> Result<(std::net::IpAddr, u16), String> {
    let fields = split_line(line).map_err(|e| e.to_string())?;
    match fields.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["OK", ip, port, ..] => Ok((
            ip.parse().map_err(|_| format!("bad backend ip {ip:?}"))?,
            port.parse()
                .map_err(|_| format!("bad backend port {port:?}"))?,
        )),
        ["FAIL", ref rest @ ..] => Err(format!("LOOKUP failed: {}", rest.join(" "))),
        _ => Err(format!("unexpected reply {line:?}")),
    }
}

/// Dials the director and exchanges `VERSION` lines (the LOOKUP path and
/// the director link share it); the whole exchange within `timeout`.
pub(crate) async fn dial_director(
    addr: &str,
    tls: Option<&InternalTls>,
    timeout: Duration,
    max_line: usize,
) -> Result<UpstreamStream, String> {
    let mut s = dial(addr, tls, timeout).await.map_err(|e| e.to_string())?;
    let hello = ["VERSION", "director", "1", "0"].map(String::from);
    let answer = tokio::time::timeout(timeout, yarilo_wire::handshake(&mut s, &hello, max_line))
        .await
        .map_err(|_| "no VERSION from the director".to_string())?
        .map_err(|e| e.to_string())?;
    match answer.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["VERSION", "director", "1", ..] => Ok(s),
        _ => Err(format!("unexpected VERSION {answer:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncBufReadExt;

    #[test]
    fn a_user_tag_wins_over_the_static_one_and_nominal_ports_become_the_protocol_port() {
        let route = LoginRoute {
            director_addr: "dir:9102".into(),
            director_tag: "a".into(),
            ..Default::default()
        };
        let r =
            Router::from_config(&route, "login.imap", "imap", 10143, None, Duration::ZERO).unwrap();
        let mut fields = ExtraFields::new();
        assert_eq!(r.tag_for(&fields), "a");
        fields.set("director_tag", "");
        assert_eq!(r.tag_for(&fields), "a", "an empty field falls back");
        fields.set("director_tag", "b");
        assert_eq!(r.tag_for(&fields), "b");
        assert_eq!(r.port_for(0), 10143);
        assert_eq!(r.port_for(993), 993);
        let route = LoginRoute {
            backend_port: 2143,
            ..route
        };
        let r =
            Router::from_config(&route, "login.imap", "imap", 10143, None, Duration::ZERO).unwrap();
        assert_eq!(r.port_for(0), 2143);
        assert_eq!(r.port_for(993), 2143);
    }

    #[test]
    fn lookup_replies_parse() {
        assert_eq!(
            parse_lookup_reply("OK\t10.0.0.7\t143").unwrap(),
            ("10.0.0.7".parse().unwrap(), 143)
        );
        assert!(parse_lookup_reply("FAIL\tNOBACKEND\tnone")
            .unwrap_err()
            .contains("NOBACKEND"));
        assert!(parse_lookup_reply("OK\tx\t1").is_err());
        assert!(parse_lookup_reply("WHAT").is_err());
    }

    #[tokio::test]
    async fn director_lookup_gives_the_backend_with_the_port_override() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut r = tokio::io::BufReader::new(r);
            let mut line = String::new();
            r.read_line(&mut line).await.unwrap();
            assert_eq!(line, "VERSION\tdirector\t1\t0\n");
            w.write_all(b"VERSION\tdirector\t1\t0\n").await.unwrap();
            line.clear();
            r.read_line(&mut line).await.unwrap();
            assert_eq!(line, "LOOKUP\talice\tblue\timap\n");
            w.write_all(b"OK\t10.1.2.3\t9143\n").await.unwrap();
        });
        let route = LoginRoute {
            director_addr: addr,
            backend_port: 1143,
            ..Default::default()
        };
        let r = Router::from_config(
            &route,
            "login.imap",
            "imap",
            143,
            None,
            Duration::from_secs(5),
        )
        .unwrap();
        let mut fields = ExtraFields::new();
        fields.set("director_tag", "blue");
        assert_eq!(
            r.backend_for("alice", &fields).await.unwrap(),
            "10.1.2.3:1143"
        );
    }
}
