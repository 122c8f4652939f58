//! Extra fields: the `key=value` pairs a passdb or userdb returns beside
//! the password (Dovecot's "extra fields"). The ones that change a login:
//!
//! * `allow_nets=<cidr>,<cidr>` — the real client IP must be inside one;
//! * `nologin` (+ `reason=`) — refuse the login after a correct password,
//!   answering the reason;
//! * `director_tag` — the NFS shard for the director LOOKUP;
//! * `home`, `mail`, `uid`, `gid`, `quota_rule*` — for the mail session;
//! * `proxy` / `host` — passed through for the login layer.
//!
//! `userdb_<key>` in passdb results are userdb fields, as in Dovecot.

use std::net::IpAddr;

use ipnet::IpNet;

/// Ordered `key=value` pairs; later values replace earlier ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtraFields(Vec<(String, String)>);

/// Why [`ExtraFields::check_login`] refused a login whose password matched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginRefused {
    /// The client IP is outside `allow_nets`.
    #[error("client address {0} is not in allow_nets")]
    NotInAllowedNets(IpAddr),
    /// `nologin` is set; the text is `reason=` or a default.
    #[error("{0}")]
    Nologin(String),
}

impl ExtraFields {
    pub fn new() -> Self {
        ExtraFields(Vec::new())
    }

    /// Sets `key`, replacing an earlier value.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        if let Some(e) = self.0.iter_mut().find(|(k, _)| *k == key) {
            e.1 = value;
        } else {
            self.0.push((key, value));
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Copies every field of `other` over these.
    pub fn merge(&mut self, other: &ExtraFields) {
        for (k, v) in other.iter() {
            self.set(k, v);
        }
    }

    /// Parses Dovecot's space-separated `key=value` list; a bare `key`
    /// means `key=` (as `nologin`). Values cannot hold spaces.
    pub fn parse_dovecot(text: &str) -> ExtraFields {
        let mut f = ExtraFields::new();
        for item in text.split_ascii_whitespace() {
            match item.split_once('=') {
                Some((k, v)) => f.set(k, v),
                None => f.set(item, ""),
            }
        }
        f
    }

    /// The inverse of [`parse_dovecot`](Self::parse_dovecot).
    pub fn to_dovecot(&self) -> String {
        self.iter()
            .map(|(k, v)| {
                if v.is_empty() {
                    k.to_string()
                } else {
                    format!("{k}={v}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Splits passdb fields: `userdb_x=…` become userdb field `x`.
    pub fn split_userdb(self) -> (ExtraFields, ExtraFields) {
        let mut pass = ExtraFields::new();
        let mut user = ExtraFields::new();
        for (k, v) in self.0 {
            match k.strip_prefix("userdb_") {
                Some(u) => user.set(u, v),
                None => pass.set(k, v),
            }
        }
        (pass, user)
    }

    /// `allow_nets` and `nologin`, checked against the real client IP
    /// (the one from the PROXY header, not the login pod's). A malformed
    /// `allow_nets` entry refuses, never allows.
    pub fn check_login(&self, client_ip: IpAddr) -> Result<(), LoginRefused> {
        if let Some(nets) = self.get("allow_nets") {
            if !allow_nets_contains(nets, client_ip) {
                return Err(LoginRefused::NotInAllowedNets(client_ip));
            }
        }
        if self.contains("nologin") && !is_false(self.get("nologin").unwrap_or("")) {
            let reason = self
                .get("reason")
                .filter(|r| !r.is_empty())
                .unwrap_or("Login disabled for this user");
            return Err(LoginRefused::Nologin(reason.to_string()));
        }
        Ok(())
    }
}

fn is_false(v: &str) -> bool {
    matches!(v, "n" | "no" | "false" | "0")
}

/// Whether `ip` is inside the comma/space-separated CIDR list `nets`
/// (a bare address is a /32 or /128). IPv4-mapped IPv6 addresses match
/// IPv4 networks. `local` matches loopback, as in Dovecot.
pub fn allow_nets_contains(nets: &str, ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    nets.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .any(|item| {
            if item == "local" {
                return ip.is_loopback();
            }
            if let Ok(net) = item.parse::<IpNet>() {
                return net.contains(&ip);
            }
            item.parse::<IpAddr>().map(|a| a == ip).unwrap_or(false)
        })
}

impl FromIterator<(String, String)> for ExtraFields {
    fn from_iter<T: IntoIterator<Item = (String, String)>>(iter: T) -> Self {
        let mut f = ExtraFields::new();
        for (k, v) in iter {
            f.set(k, v);
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn allow_nets_uses_the_given_client_ip() {
        let f = ExtraFields::parse_dovecot("allow_nets=10.1.0.0/16,192.0.2.7");
        assert!(f.check_login(ip("10.1.2.3")).is_ok());
        assert!(f.check_login(ip("192.0.2.7")).is_ok());
        assert!(f.check_login(ip("::ffff:10.1.9.9")).is_ok());
        assert_eq!(
            f.check_login(ip("10.2.0.1")),
            Err(LoginRefused::NotInAllowedNets(ip("10.2.0.1")))
        );
        let bad = ExtraFields::parse_dovecot("allow_nets=garbage");
        assert!(bad.check_login(ip("10.1.2.3")).is_err());
    }

    #[test]
    fn nologin_refuses_with_its_reason() {
        let f = ExtraFields::parse_dovecot("nologin reason=Moved");
        assert_eq!(
            f.check_login(ip("127.0.0.1")),
            Err(LoginRefused::Nologin("Moved".into()))
        );
        let f = ExtraFields::parse_dovecot("nologin=n");
        assert!(f.check_login(ip("127.0.0.1")).is_ok());
    }

    #[test]
    fn userdb_prefixed_fields_are_split_off() {
        let f = ExtraFields::parse_dovecot(
            "director_tag=a userdb_home=/h userdb_quota_rule=*:storage=1G",
        );
        let (p, u) = f.split_userdb();
        assert_eq!(p.get("director_tag"), Some("a"));
        assert_eq!(u.get("home"), Some("/h"));
        assert_eq!(u.get("quota_rule"), Some("*:storage=1G"));
    }
}
