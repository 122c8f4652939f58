//! Inbound client-IP forwarding into the login layer (deployment seed:
//! "Client-IP forwarding into the login layer … haproxy protocol / native
//! inbound (ID/XCLIENT) / none, chosen per protocol").
//!
//! A proxy in front of a login listener (an MTA's LMTP client, a webmail,
//! another IMAP proxy) may say who the real client is:
//!
//! | protocol | command | answer |
//! |---|---|---|
//! | IMAP | `<tag> XCLIENT ADDR=<ip>` | `<tag> OK XCLIENT` |
//! | IMAP | `<tag> ID ("x-originating-ip" "<ip>" …)` (RFC 2971, Dovecot's field) | the usual ID answer |
//! | POP3 | `XCLIENT ADDR=<ip>` | `+OK XCLIENT accepted` |
//! | SMTP, LMTP | `XCLIENT ADDR=<ip>` | `220 2.0.0 OK`; the client greets again |
//!
//! (the wire forms of the earlier director seed). Honoured only on a
//! listener whose `services.<name>.xclient_protocol` is set while
//! `general.xclient.enabled` is, and only from a peer inside
//! `general.xclient.trusted_nets`; anyone else gets the protocol's
//! refusal (the ID field is then simply ignored). The forwarded address
//! replaces the TCP peer for everything that follows: `allow_nets`, warden's
//! per-IP count and penalty, the preamble's `ADDR`, logs. Only `ADDR` is
//! read; other attributes (`PORT`, `NAME`, `HELO`, …) are accepted and
//! ignored.

use std::net::IpAddr;

use ipnet::IpNet;
use yarilo_smtp::command::Param;

/// A forwarded `ADDR` that is not an address (a syntax error for the
/// forwarder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("XCLIENT ADDR is not an IP address")]
pub struct BadAddr;

/// Which listeners accept forwarding, from whom.
#[derive(Debug, Clone, Default)]
pub struct XclientPolicy {
    /// `services.<name>` entries with `xclient_protocol` (empty while
    /// `general.xclient.enabled` is off).
    services: Vec<String>,
    trusted: Vec<IpNet>,
}

impl XclientPolicy {
    /// Nobody may forward.
    pub fn disabled() -> XclientPolicy {
        XclientPolicy::default()
    }

    /// From `general.xclient` and every `services.<name>.xclient_protocol`.
    pub fn from_config(c: &yarilo_config::Config) -> XclientPolicy {
        if !c.general.xclient.enabled {
            return XclientPolicy::disabled();
        }
        let services = yarilo_config::ServiceName::ALL
            .into_iter()
            .filter(|n| c.services.get(*n).xclient_protocol)
            .map(|n| n.as_str().to_string())
            .collect();
        XclientPolicy {
            services,
            trusted: c.general.xclient.trusted_nets.clone(),
        }
    }

    /// Whether `peer` may forward a client address on `service`.
    pub fn allows(&self, service: &str, peer: IpAddr) -> bool {
        let peer = unmapped(peer);
        self.services.iter().any(|s| s == service) && self.trusted.iter().any(|n| n.contains(&peer))
    }
}

fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// An `ADDR` value: an IPv4 or IPv6 address, the latter optionally as
/// Postfix writes it (`IPV6:` prefix) or in brackets.
pub fn parse_addr(v: &str) -> Option<IpAddr> {
    let v = v.trim();
    let v = v
        .strip_prefix("IPV6:")
        .or_else(|| v.strip_prefix("ipv6:"))
        .unwrap_or(v);
    let v = v
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(v);
    v.parse().ok().map(unmapped)
}

/// `ADDR` of an SMTP/LMTP XCLIENT: `Ok(None)` when absent (or
/// `[UNAVAILABLE]`), `Err` when malformed.
pub fn smtp_addr(params: &[Param]) -> Result<Option<IpAddr>, BadAddr> {
    match params
        .iter()
        .find(|p| p.keyword.eq_ignore_ascii_case("ADDR"))
    {
        None => Ok(None),
        Some(p) => attr_addr(p.value.as_deref().unwrap_or("")),
    }
}

fn attr_addr(v: &str) -> Result<Option<IpAddr>, BadAddr> {
    if v.eq_ignore_ascii_case("[UNAVAILABLE]") || v.eq_ignore_ascii_case("[TEMPUNAVAIL]") {
        return Ok(None);
    }
    parse_addr(v).map(Some).ok_or(BadAddr)
}

/// `XCLIENT attr=value …` after the command word (POP3, IMAP): the `ADDR`
/// as [`smtp_addr`] reads it.
pub fn args_addr(args: &str) -> Result<Option<IpAddr>, BadAddr> {
    let mut found = None;
    for word in args.split_ascii_whitespace() {
        let (k, v) = word.split_once('=').ok_or(BadAddr)?;
        if k.eq_ignore_ascii_case("ADDR") {
            found = attr_addr(v)?;
        }
    }
    Ok(found)
}

/// An IMAP line `<tag> XCLIENT <args>` (CRLF optional): the tag and the
/// arguments; `None` for any other command.
pub fn imap_xclient(line: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(line).ok()?;
    let text = text.trim_end_matches(['\r', '\n']);
    let (tag, rest) = text.split_once(' ')?;
    let (cmd, args) = rest.split_once(' ').unwrap_or((rest, ""));
    if !cmd.eq_ignore_ascii_case("XCLIENT") || !crate::preamble::valid_tag(tag) {
        return None;
    }
    Some((tag.to_string(), args.to_string()))
}

/// The `x-originating-ip` field of an IMAP ID list (RFC 2971; Dovecot's
/// name for the forwarded client address).
pub fn id_originating_ip(fields: &[(String, Option<String>)]) -> Option<IpAddr> {
    fields
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-originating-ip"))
        .and_then(|(_, v)| v.as_deref())
        .and_then(parse_addr)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn addresses_parse_in_every_form_postfix_and_dovecot_send() {
        assert_eq!(parse_addr("192.0.2.7"), Some("192.0.2.7".parse().unwrap()));
        assert_eq!(
            parse_addr("IPV6:2001:db8::1"),
            Some("2001:db8::1".parse().unwrap())
        );
        assert_eq!(
            parse_addr("[2001:db8::2]"),
            Some("2001:db8::2".parse().unwrap())
        );
        assert_eq!(
            parse_addr("::ffff:10.1.2.3"),
            Some("10.1.2.3".parse().unwrap())
        );
        assert_eq!(parse_addr("nope"), None);
        assert_eq!(
            args_addr("ADDR=203.0.113.9 PORT=4711"),
            Ok(Some("203.0.113.9".parse().unwrap()))
        );
        assert_eq!(args_addr("NAME=x"), Ok(None));
        assert_eq!(args_addr("ADDR=[UNAVAILABLE]"), Ok(None));
        assert!(args_addr("ADDR=bogus").is_err());
        assert!(args_addr("ADDR").is_err());
        assert_eq!(
            imap_xclient(b"XCONN XCLIENT ADDR=192.0.2.1\r\n"),
            Some(("XCONN".into(), "ADDR=192.0.2.1".into()))
        );
        assert_eq!(imap_xclient(b"a1 LOGIN x y\r\n"), None);
        let id = vec![
            ("name".to_string(), Some("proxy".to_string())),
            (
                "X-Originating-IP".to_string(),
                Some("198.51.100.4".to_string()),
            ),
        ];
        assert_eq!(
            id_originating_ip(&id),
            Some("198.51.100.4".parse().unwrap())
        );
    }

    #[test]
    fn only_enabled_listeners_and_trusted_peers_may_forward() {
        let c = yarilo_config::Config::from_yaml(
            "general:\n  xclient:\n    enabled: true\n    trusted_nets: [10.0.0.0/8]\nservices:\n  imap:\n    xclient_protocol: true\n",
            "t",
        )
        .unwrap();
        let p = XclientPolicy::from_config(&c);
        assert!(p.allows("imap", "10.1.2.3".parse().unwrap()));
        assert!(p.allows("imap", "::ffff:10.1.2.3".parse().unwrap()));
        assert!(!p.allows("imap", "192.0.2.1".parse().unwrap()));
        assert!(!p.allows("pop3", "10.1.2.3".parse().unwrap()));
        let off = yarilo_config::Config::from_yaml(
            "services:\n  imap:\n    xclient_protocol: true\n",
            "t",
        )
        .unwrap();
        assert!(!XclientPolicy::from_config(&off).allows("imap", "127.0.0.1".parse().unwrap()));
    }
}
