//! Which backend an authenticated session goes to: `backend_addr`
//! (standalone: one address, a Service that load-balances) or a LOOKUP to
//! the director at `director_addr` (`LOOKUP <user> <tag> <proto>` →
//! `OK <ip> <port>`). `backend_addr` wins when both are set.
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
    /// Tag pool for LOOKUPs; empty: the user's `director_tag` field.
    director_tag: String,
    /// `imap`, `pop3`, … (the LOOKUP's proto field).
    proto: &'static str,
    tls: Option<InternalTls>,
    timeout: Duration,
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

/// A director's choice, for SESSION-OPEN.
#[derive(Debug, Clone)]
pub struct DirectorRoute {
    pub link: DirectorLink,
    pub backend: std::net::IpAddr,
    pub tag: String,
}

impl Router {
    /// From `login.<proto>`; `key` names it in errors. Fails when neither
    /// `backend_addr` nor `director_addr` is set.
    pub fn from_config(
        route: &LoginRoute,
        key: &str,
        proto: &'static str,
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
            director_tag: route.director_tag.clone(),
            proto,
            tls,
            timeout,
            sessions: None,
        })
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
                let tag = if self.director_tag.is_empty() {
                    fields.get("director_tag").unwrap_or_default()
                } else {
                    self.director_tag.as_str()
                };
                let (ip, port) = tokio::time::timeout(
                    self.timeout,
                    lookup(
                        director,
                        self.tls.as_ref(),
                        self.timeout,
                        user,
                        tag,
                        self.proto,
                    ),
                )
                .await
                .map_err(|_| HopError::Route(format!("director {director} did not answer")))??;
                let port = if self.backend_port != 0 {
                    self.backend_port
                } else {
                    port
                };
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

/// One LOOKUP on a fresh connection.
async fn lookup(
    director: &str,
    tls: Option<&InternalTls>,
    timeout: Duration,
    user: &str,
    tag: &str,
    proto: &str,
) -> Result<(std::net::IpAddr, u16), HopError> {
    let route_err = |m: String| HopError::Route(format!("director {director}: {m}"));
    let mut s = dial_director(director, tls, timeout, MAX_REPLY)
        .await
        .map_err(route_err)?;
    s.write_all(join_line(&["LOOKUP", user, tag, proto]).as_bytes())
        .await
        .map_err(|e| route_err(e.to_string()))?;
    let mut line = Vec::with_capacity(64);
    let mut b = [0u8; 256];
    loop {
        let n = s.read(&mut b).await.map_err(|e| route_err(e.to_string()))?;
        if n == 0 {
            return Err(route_err("closed".into()));
        }
        line.extend_from_slice(b.get(..n).unwrap_or_default());
        if let Some(pos) = line.iter().position(|&c| c == b'\n') {
            line.truncate(pos);
            break;
        }
        if line.len() > MAX_REPLY {
            return Err(route_err("reply too long".into()));
        }
    }
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
        let r = Router::from_config(&route, "login.imap", "imap", None, Duration::from_secs(5))
            .unwrap();
        let mut fields = ExtraFields::new();
        fields.set("director_tag", "blue");
        assert_eq!(
            r.backend_for("alice", &fields).await.unwrap(),
            "10.1.2.3:1143"
        );
    }
}
