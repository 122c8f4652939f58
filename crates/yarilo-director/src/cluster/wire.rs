//! The ring's line protocol, sans-I/O: parse and format, and the join
//! proof. Framing is yarilo-wire's (TAB fields, LF, escaping, bounded
//! lines) on the director port, after the usual
//! `VERSION\tdirector\t1\t<minor>` exchange.
//!
//! Join (the dialer D, the acceptor A; both prove they hold
//! `ring_secret`, each over the other's fresh nonce, so a captured
//! exchange cannot be replayed and one side cannot reflect the other's
//! proof):
//!
//! ```text
//! D: DIRECTOR-HELLO     <D addr> <D nonce>
//! A: DIRECTOR-CHALLENGE <A addr> <A nonce> <A proof>      | JOIN-FAIL <reason>
//! D: DIRECTOR-JOIN      <D addr> <D inc> <ring|poll> <D proof>
//! A: JOIN-OK <A inc>                                       | JOIN-FAIL <reason>
//! ```
//!
//! `A proof = hex(HMAC-SHA256(secret, "yarilo-ring-1\tA\t" D-nonce \t A-nonce \t A-addr \t D-addr))`,
//! `D proof = hex(HMAC-SHA256(secret, "yarilo-ring-1\tD\t" A-nonce \t D-nonce \t D-addr \t A-addr \t D-inc \t mode))`.
//!
//! Then, on a `ring` connection both sides send their snapshot — the
//! member list (`DIRECTOR-ADD`, `DIRECTOR-REMOVE`), the backends
//! (`BACKEND`), the sticky users (`USER`), the tracked sessions
//! (`SESSION-OPEN`), `SYNC-DONE` — and from then on
//! events, `PING`/`PONG` and finally `QUIT <reason>`. A `poll` connection
//! gets the member list and `SYNC-DONE`, then `QUIT`.
//!
//! Unknown commands on an established ring connection are ignored (and
//! logged): gossip has no one to answer to, and answering a FAIL to a peer
//! that does not know FAIL either would loop.

use std::net::{IpAddr, SocketAddr};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::backend::Source;
use crate::director::{BackendState, BackendUp, RingEvent, SessionRecord, UserRecord};
use crate::directory::{DirectorId, Stamp};
use crate::session::{MAX_SESSION_ID, MAX_USERNAME};
use crate::{Proto, Tick};

/// What a dialer wants from the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinMode {
    /// A ring link: full snapshot both ways, then events.
    Ring,
    /// A seed poll: the member list, then QUIT.
    Poll,
}

impl JoinMode {
    pub fn as_str(self) -> &'static str {
        match self {
            JoinMode::Ring => "ring",
            JoinMode::Poll => "poll",
        }
    }
}

/// One ring line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingMsg {
    Hello {
        addr: SocketAddr,
        nonce: String,
    },
    Challenge {
        addr: SocketAddr,
        nonce: String,
        proof: String,
    },
    Join {
        addr: SocketAddr,
        inc: u64,
        mode: JoinMode,
        proof: String,
    },
    JoinOk {
        inc: u64,
    },
    JoinFail {
        reason: String,
    },
    /// A member (list entry or event).
    Add {
        addr: SocketAddr,
        inc: u64,
    },
    /// A tombstone (list entry or event); `ttl_ms` None: kept for good.
    Remove {
        addr: SocketAddr,
        inc: u64,
        ttl_ms: Option<Tick>,
    },
    /// A replicated routing-state change or snapshot entry.
    Event(RingEvent),
    /// A snapshot entry of the user directory (`USER`; the live event is
    /// `USER-ASSIGN`, [`RingEvent::Assign`]).
    User(UserRecord),
    /// End of a snapshot; `digest`: of the routing state it carried
    /// (a ring snapshot; none after a poll's member list).
    SyncDone {
        digest: Option<u64>,
    },
    Ping,
    Pong,
    Quit {
        reason: String,
    },
}

/// A line that is not a ring message. The connection goes on (ignored)
/// unless it was expected as a handshake step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingParseError {
    #[error("unknown ring command {0}")]
    Unknown(String),
    #[error("{command}: {why}")]
    Syntax { command: String, why: String },
}

fn syntax(command: &str, why: impl Into<String>) -> RingParseError {
    RingParseError::Syntax {
        command: command.to_string(),
        why: why.into(),
    }
}

fn field<T: std::str::FromStr>(cmd: &str, what: &str, s: &str) -> Result<T, RingParseError> {
    s.parse()
        .map_err(|_| syntax(cmd, format!("bad {what} `{}`", truncate(s))))
}

fn opt_u64(cmd: &str, what: &str, s: &str) -> Result<Option<u64>, RingParseError> {
    if s.is_empty() {
        Ok(None)
    } else {
        field(cmd, what, s).map(Some)
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn flag(cmd: &str, s: &str) -> Result<bool, RingParseError> {
    match s {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(syntax(cmd, "flag must be 0 or 1")),
    }
}

fn source(cmd: &str, s: &str) -> Result<Source, RingParseError> {
    match s {
        "static" => Ok(Source::Static),
        "admin" => Ok(Source::Admin),
        "registered" => Ok(Source::Registered),
        _ => Err(syntax(cmd, "source must be static, admin or registered")),
    }
}

fn user(cmd: &str, a: &[&str]) -> Result<UserRecord, RingParseError> {
    match a {
        [hash, backend, seq, by, weak] => Ok(UserRecord {
            hash: field(cmd, "hash", hash)?,
            backend: field(cmd, "backend", backend)?,
            stamp: Stamp {
                seq: field::<u64>(cmd, "seq", seq)?.min(crate::directory::MAX_SEQ),
                by: DirectorId(field(cmd, "director id", by)?),
            },
            weak: flag(cmd, weak)?,
        }),
        _ => Err(syntax(cmd, "expected <hash> <backend> <seq> <by> <weak>")),
    }
}

fn bounded(cmd: &str, what: &str, s: &str, max: usize) -> Result<String, RingParseError> {
    if s.is_empty() && what != "tag" {
        return Err(syntax(cmd, format!("empty {what}")));
    }
    if s.len() > max {
        return Err(syntax(cmd, format!("{what} longer than {max} bytes")));
    }
    Ok(s.to_string())
}

fn vhosts(cmd: &str, s: &str) -> Result<u32, RingParseError> {
    let v: u32 = field(cmd, "vhosts", s)?;
    if v > 100 {
        return Err(syntax(cmd, "vhosts must be from 0 to 100"));
    }
    Ok(v)
}

impl RingMsg {
    /// Parses one line's fields.
    pub fn parse(fields: &[String]) -> Result<RingMsg, RingParseError> {
        let Some(cmd) = fields.first() else {
            return Err(RingParseError::Unknown(String::new()));
        };
        let cmd = cmd.as_str();
        let a: Vec<&str> = fields[1..].iter().map(String::as_str).collect();
        let wrong = |shape: &str| syntax(cmd, format!("expected {cmd} {shape}"));
        Ok(match cmd {
            "DIRECTOR-HELLO" => match a[..] {
                [addr, nonce] => RingMsg::Hello {
                    addr: field(cmd, "address", addr)?,
                    nonce: nonce.to_string(),
                },
                _ => return Err(wrong("<addr> <nonce>")),
            },
            "DIRECTOR-CHALLENGE" => match a[..] {
                [addr, nonce, proof] => RingMsg::Challenge {
                    addr: field(cmd, "address", addr)?,
                    nonce: nonce.to_string(),
                    proof: proof.to_string(),
                },
                _ => return Err(wrong("<addr> <nonce> <proof>")),
            },
            "DIRECTOR-JOIN" => match a[..] {
                [addr, inc, mode, proof] => RingMsg::Join {
                    addr: field(cmd, "address", addr)?,
                    inc: field(cmd, "incarnation", inc)?,
                    mode: match mode {
                        "ring" => JoinMode::Ring,
                        "poll" => JoinMode::Poll,
                        _ => return Err(syntax(cmd, "mode must be ring or poll")),
                    },
                    proof: proof.to_string(),
                },
                _ => return Err(wrong("<addr> <inc> <ring|poll> <proof>")),
            },
            "JOIN-OK" => match a[..] {
                [inc] => RingMsg::JoinOk {
                    inc: field(cmd, "incarnation", inc)?,
                },
                _ => return Err(wrong("<inc>")),
            },
            "JOIN-FAIL" => RingMsg::JoinFail {
                reason: a
                    .first()
                    .map(|r| truncate(r).to_string())
                    .unwrap_or_default(),
            },
            "DIRECTOR-ADD" => match a[..] {
                [addr, inc] => RingMsg::Add {
                    addr: field(cmd, "address", addr)?,
                    inc: field(cmd, "incarnation", inc)?,
                },
                _ => return Err(wrong("<addr> <inc>")),
            },
            "DIRECTOR-REMOVE" => match a[..] {
                [addr, inc, ttl] => RingMsg::Remove {
                    addr: field(cmd, "address", addr)?,
                    inc: field(cmd, "incarnation", inc)?,
                    ttl_ms: opt_u64(cmd, "ttl", ttl)?,
                },
                _ => return Err(wrong("<addr> <inc> <ttl-ms>")),
            },
            "USER" => RingMsg::User(user(cmd, &a)?),
            "USER-ASSIGN" => RingMsg::Event(RingEvent::Assign(user(cmd, &a)?)),
            "BACKEND" => match a[..] {
                [ip, port, tag, v, src, seq, draining, added] => {
                    RingMsg::Event(RingEvent::Backend(BackendState {
                        ip: field(cmd, "ip", ip)?,
                        port: field(cmd, "port", port)?,
                        tag: tag.to_string(),
                        vhosts: vhosts(cmd, v)?,
                        source: source(cmd, src)?,
                        seq: opt_u64(cmd, "seq", seq)?,
                        draining: flag(cmd, draining)?,
                        added: field(cmd, "added", added)?,
                    }))
                }
                _ => {
                    return Err(wrong(
                        "<ip> <port> <tag> <vhosts> <source> <seq> <draining> <added>",
                    ))
                }
            },
            "BACKEND-UP" => match a[..] {
                [ip, port, tag, v, seq] => RingMsg::Event(RingEvent::Up(BackendUp {
                    ip: field(cmd, "ip", ip)?,
                    port: field(cmd, "port", port)?,
                    tag: tag.to_string(),
                    vhosts: vhosts(cmd, v)?,
                    seq: field(cmd, "seq", seq)?,
                })),
                _ => return Err(wrong("<ip> <port> <tag> <vhosts> <seq>")),
            },
            "BACKEND-DOWN" | "BACKEND-FLUSH" => match a[..] {
                [ip, seq] => {
                    let ip: IpAddr = field(cmd, "ip", ip)?;
                    let seq = opt_u64(cmd, "seq", seq)?;
                    RingMsg::Event(if cmd == "BACKEND-DOWN" {
                        RingEvent::Down { ip, seq }
                    } else {
                        RingEvent::Flush { ip, seq }
                    })
                }
                _ => return Err(wrong("<ip> <seq>")),
            },
            "BACKEND-REMOVE" => match a[..] {
                [ip, seq] => RingMsg::Event(RingEvent::Remove {
                    ip: field(cmd, "ip", ip)?,
                    seq: field(cmd, "seq", seq)?,
                }),
                _ => return Err(wrong("<ip> <seq>")),
            },
            "BACKEND-VHOSTS" => match a[..] {
                [ip, v] => RingMsg::Event(RingEvent::Vhosts {
                    ip: field(cmd, "ip", ip)?,
                    vhosts: vhosts(cmd, v)?,
                }),
                _ => return Err(wrong("<ip> <vhosts>")),
            },
            "SESSION-OPEN" => match a[..] {
                [id, user, tag, backend, proto, origin, seq] => {
                    RingMsg::Event(RingEvent::SessionOpen(SessionRecord {
                        id: bounded(cmd, "id", id, MAX_SESSION_ID)?,
                        user: bounded(cmd, "user", user, MAX_USERNAME)?,
                        tag: bounded(cmd, "tag", tag, MAX_USERNAME)?,
                        backend: field(cmd, "backend", backend)?,
                        proto: Proto::parse(proto),
                        origin: DirectorId(field(cmd, "origin", origin)?),
                        seq: field(cmd, "seq", seq)?,
                    }))
                }
                _ => return Err(wrong("<id> <user> <tag> <backend> <proto> <origin> <seq>")),
            },
            "SESSION-CLOSE" => match a[..] {
                [id, origin, seq] => RingMsg::Event(RingEvent::SessionClose {
                    id: bounded(cmd, "id", id, MAX_SESSION_ID)?,
                    origin: DirectorId(field(cmd, "origin", origin)?),
                    seq: field(cmd, "seq", seq)?,
                }),
                _ => return Err(wrong("<id> <origin> <seq>")),
            },
            "USER-KICKED" => match a[..] {
                [user, backend, origin, seq] => RingMsg::Event(RingEvent::Kick {
                    user: bounded(cmd, "user", user, MAX_USERNAME)?,
                    backend: field(cmd, "backend", backend)?,
                    origin: DirectorId(field(cmd, "origin", origin)?),
                    seq: field(cmd, "seq", seq)?,
                }),
                _ => return Err(wrong("<user> <backend> <origin> <seq>")),
            },
            "SYNC-DONE" => RingMsg::SyncDone {
                digest: match a.first() {
                    Some(d) if !d.is_empty() => Some(field(cmd, "digest", d)?),
                    _ => None,
                },
            },
            "PING" => RingMsg::Ping,
            "PONG" => RingMsg::Pong,
            "QUIT" => RingMsg::Quit {
                reason: a
                    .first()
                    .map(|r| truncate(r).to_string())
                    .unwrap_or_default(),
            },
            other => return Err(RingParseError::Unknown(truncate(other).to_string())),
        })
    }

    /// The line's fields.
    pub fn to_fields(&self) -> Vec<String> {
        let s = |x: &dyn ToString| x.to_string();
        let opt = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_default();
        let b = |x: bool| if x { "1" } else { "0" }.to_string();
        let user = |cmd: &str, r: &UserRecord| {
            vec![
                cmd.to_string(),
                s(&r.hash),
                s(&r.backend),
                s(&r.stamp.seq),
                s(&r.stamp.by.0),
                b(r.weak),
            ]
        };
        match self {
            RingMsg::Hello { addr, nonce } => vec!["DIRECTOR-HELLO".into(), s(addr), nonce.clone()],
            RingMsg::Challenge { addr, nonce, proof } => vec![
                "DIRECTOR-CHALLENGE".into(),
                s(addr),
                nonce.clone(),
                proof.clone(),
            ],
            RingMsg::Join {
                addr,
                inc,
                mode,
                proof,
            } => vec![
                "DIRECTOR-JOIN".into(),
                s(addr),
                s(inc),
                mode.as_str().into(),
                proof.clone(),
            ],
            RingMsg::JoinOk { inc } => vec!["JOIN-OK".into(), s(inc)],
            RingMsg::JoinFail { reason } => vec!["JOIN-FAIL".into(), reason.clone()],
            RingMsg::Add { addr, inc } => vec!["DIRECTOR-ADD".into(), s(addr), s(inc)],
            RingMsg::Remove { addr, inc, ttl_ms } => {
                vec!["DIRECTOR-REMOVE".into(), s(addr), s(inc), opt(*ttl_ms)]
            }
            RingMsg::User(r) => user("USER", r),
            RingMsg::Event(e) => match e {
                RingEvent::Assign(r) => user("USER-ASSIGN", r),
                RingEvent::Backend(st) => vec![
                    "BACKEND".into(),
                    s(&st.ip),
                    s(&st.port),
                    st.tag.clone(),
                    s(&st.vhosts),
                    st.source.as_str().into(),
                    opt(st.seq),
                    b(st.draining),
                    s(&st.added),
                ],
                RingEvent::Up(up) => vec![
                    "BACKEND-UP".into(),
                    s(&up.ip),
                    s(&up.port),
                    up.tag.clone(),
                    s(&up.vhosts),
                    s(&up.seq),
                ],
                RingEvent::Down { ip, seq } => vec!["BACKEND-DOWN".into(), s(ip), opt(*seq)],
                RingEvent::Flush { ip, seq } => vec!["BACKEND-FLUSH".into(), s(ip), opt(*seq)],
                RingEvent::Remove { ip, seq } => vec!["BACKEND-REMOVE".into(), s(ip), s(seq)],
                RingEvent::Vhosts { ip, vhosts } => {
                    vec!["BACKEND-VHOSTS".into(), s(ip), s(vhosts)]
                }
                RingEvent::SessionOpen(r) => vec![
                    "SESSION-OPEN".into(),
                    r.id.clone(),
                    r.user.clone(),
                    r.tag.clone(),
                    s(&r.backend),
                    r.proto.as_str().into(),
                    s(&r.origin.0),
                    s(&r.seq),
                ],
                RingEvent::SessionClose { id, origin, seq } => {
                    vec!["SESSION-CLOSE".into(), id.clone(), s(&origin.0), s(seq)]
                }
                RingEvent::Kick {
                    user,
                    backend,
                    origin,
                    seq,
                } => vec![
                    "USER-KICKED".into(),
                    user.clone(),
                    s(backend),
                    s(&origin.0),
                    s(seq),
                ],
            },
            RingMsg::SyncDone { digest: None } => vec!["SYNC-DONE".into()],
            RingMsg::SyncDone { digest: Some(d) } => vec!["SYNC-DONE".into(), s(d)],
            RingMsg::Ping => vec!["PING".into()],
            RingMsg::Pong => vec!["PONG".into()],
            RingMsg::Quit { reason } => vec!["QUIT".into(), reason.clone()],
        }
    }
}

const LABEL: &str = "yarilo-ring-1";

fn mac(secret: &[u8], parts: &[&str]) -> Option<Hmac<Sha256>> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    m.update(LABEL.as_bytes());
    for p in parts {
        m.update(b"\t");
        m.update(p.as_bytes());
    }
    Some(m)
}

fn prove(secret: &[u8], parts: &[&str]) -> String {
    mac(secret, parts)
        .map(|m| hex::encode(m.finalize().into_bytes()))
        .unwrap_or_default()
}

fn check(secret: &[u8], parts: &[&str], proof: &str) -> bool {
    let Ok(bytes) = hex::decode(proof) else {
        return false;
    };
    mac(secret, parts).is_some_and(|m| m.verify_slice(&bytes).is_ok())
}

/// The acceptor's proof (in DIRECTOR-CHALLENGE).
pub fn acceptor_proof(
    secret: &[u8],
    dialer_nonce: &str,
    acceptor_nonce: &str,
    acceptor: SocketAddr,
    dialer: SocketAddr,
) -> String {
    prove(
        secret,
        &[
            "A",
            dialer_nonce,
            acceptor_nonce,
            &acceptor.to_string(),
            &dialer.to_string(),
        ],
    )
}

/// Checks the acceptor's proof (constant time).
pub fn check_acceptor_proof(
    secret: &[u8],
    dialer_nonce: &str,
    acceptor_nonce: &str,
    acceptor: SocketAddr,
    dialer: SocketAddr,
    proof: &str,
) -> bool {
    check(
        secret,
        &[
            "A",
            dialer_nonce,
            acceptor_nonce,
            &acceptor.to_string(),
            &dialer.to_string(),
        ],
        proof,
    )
}

/// The dialer's proof (in DIRECTOR-JOIN).
pub fn dialer_proof(
    secret: &[u8],
    acceptor_nonce: &str,
    dialer_nonce: &str,
    dialer: SocketAddr,
    acceptor: SocketAddr,
    inc: u64,
    mode: JoinMode,
) -> String {
    prove(
        secret,
        &[
            "D",
            acceptor_nonce,
            dialer_nonce,
            &dialer.to_string(),
            &acceptor.to_string(),
            &inc.to_string(),
            mode.as_str(),
        ],
    )
}

/// Checks the dialer's proof (constant time).
#[allow(clippy::too_many_arguments)]
pub fn check_dialer_proof(
    secret: &[u8],
    acceptor_nonce: &str,
    dialer_nonce: &str,
    dialer: SocketAddr,
    acceptor: SocketAddr,
    inc: u64,
    mode: JoinMode,
    proof: &str,
) -> bool {
    check(
        secret,
        &[
            "D",
            acceptor_nonce,
            dialer_nonce,
            &dialer.to_string(),
            &acceptor.to_string(),
            &inc.to_string(),
            mode.as_str(),
        ],
        proof,
    )
}

/// A fresh nonce: 16 random bytes, hex.
pub fn nonce() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Longest nonce accepted from a peer.
pub const MAX_NONCE: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(m: RingMsg) {
        let fields = m.to_fields();
        assert_eq!(RingMsg::parse(&fields).unwrap(), m, "{fields:?}");
    }

    #[test]
    fn every_message_round_trips() {
        let a: SocketAddr = "10.0.0.1:9102".parse().unwrap();
        let ip: IpAddr = "10.1.0.1".parse().unwrap();
        let r = UserRecord {
            hash: 0xdead_beef,
            backend: ip,
            stamp: Stamp {
                seq: 42,
                by: DirectorId(7),
            },
            weak: false,
        };
        for m in [
            RingMsg::Hello {
                addr: a,
                nonce: "n".into(),
            },
            RingMsg::Challenge {
                addr: a,
                nonce: "n".into(),
                proof: "p".into(),
            },
            RingMsg::Join {
                addr: a,
                inc: 3,
                mode: JoinMode::Poll,
                proof: "p".into(),
            },
            RingMsg::JoinOk { inc: 9 },
            RingMsg::JoinFail {
                reason: "shutting down".into(),
            },
            RingMsg::Add { addr: a, inc: 1 },
            RingMsg::Remove {
                addr: a,
                inc: 1,
                ttl_ms: Some(5),
            },
            RingMsg::Remove {
                addr: a,
                inc: 1,
                ttl_ms: None,
            },
            RingMsg::User(r),
            RingMsg::Event(RingEvent::Assign(r)),
            RingMsg::Event(RingEvent::Backend(BackendState {
                ip,
                port: 143,
                tag: "blue\tgreen".into(),
                vhosts: 50,
                source: Source::Registered,
                seq: Some(8),
                draining: true,
                added: 12,
            })),
            RingMsg::Event(RingEvent::Up(BackendUp {
                ip,
                port: 1,
                tag: "".into(),
                vhosts: 100,
                seq: 4,
            })),
            RingMsg::Event(RingEvent::Down { ip, seq: None }),
            RingMsg::Event(RingEvent::Flush { ip, seq: Some(2) }),
            RingMsg::Event(RingEvent::Remove { ip, seq: 3 }),
            RingMsg::Event(RingEvent::Vhosts { ip, vhosts: 0 }),
            RingMsg::SyncDone { digest: None },
            RingMsg::SyncDone {
                digest: Some(u64::MAX),
            },
            RingMsg::Ping,
            RingMsg::Pong,
            RingMsg::Quit {
                reason: "retarget".into(),
            },
        ] {
            roundtrip(m);
        }
    }

    #[test]
    fn proofs_bind_the_secret_both_nonces_and_both_addresses() {
        let d: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let a: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let p = acceptor_proof(b"s", "dn", "an", a, d);
        assert!(check_acceptor_proof(b"s", "dn", "an", a, d, &p));
        assert!(!check_acceptor_proof(b"t", "dn", "an", a, d, &p));
        assert!(!check_acceptor_proof(b"s", "dX", "an", a, d, &p));
        assert!(!check_acceptor_proof(b"s", "dn", "an", d, a, &p));
        let q = dialer_proof(b"s", "an", "dn", d, a, 5, JoinMode::Ring);
        let dialer =
            |inc, mode, proof: &str| check_dialer_proof(b"s", "an", "dn", d, a, inc, mode, proof);
        assert!(dialer(5, JoinMode::Ring, &q));
        assert!(!dialer(6, JoinMode::Ring, &q));
        assert!(!dialer(5, JoinMode::Poll, &q));
        // The acceptor's proof is not a dialer's proof (no reflection).
        assert!(!dialer(5, JoinMode::Ring, &p));
        assert!(!dialer(5, JoinMode::Ring, "zz"));
    }

    proptest::proptest! {
        #[test]
        fn hostile_lines_never_panic(
            cmd in proptest::sample::select(vec![
                "DIRECTOR-HELLO", "DIRECTOR-CHALLENGE", "DIRECTOR-JOIN", "JOIN-OK", "JOIN-FAIL",
                "DIRECTOR-ADD", "DIRECTOR-REMOVE", "USER", "USER-ASSIGN", "BACKEND", "BACKEND-UP",
                "BACKEND-DOWN", "BACKEND-FLUSH", "BACKEND-REMOVE", "BACKEND-VHOSTS", "SYNC-DONE",
                "SESSION-OPEN", "SESSION-CLOSE", "USER-KICKED",
                "PING", "QUIT", "X",
            ]),
            args in proptest::collection::vec("[ -~\\t:.0-9]{0,24}", 0..8),
        ) {
            let mut fields = vec![cmd.to_string()];
            fields.extend(args);
            if let Ok(m) = RingMsg::parse(&fields) {
                let again = RingMsg::parse(&m.to_fields());
                proptest::prop_assert_eq!(again, Ok(m));
            }
        }
    }
}
