//! `director_service.*` (the routing core and its ring) and
//! `backend_register.*` (the backend-reg sidecar). Operator documentation
//! with every default: `docs/director.md`.

use serde::{Deserialize, Serialize};

use crate::{parse_listen, ConfigError, Secret};

/// How a user's first (unpinned) assignment picks a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AssignmentPolicy {
    /// The consistent-hash backend for the user's tag (reference semantics).
    #[default]
    Hash,
    /// The least-loaded backend of the tag, by sessions per vhost.
    LeastSessions,
    /// The domain is placed on the least-loaded backend; its users follow.
    Domain,
}

/// Which hash layout the ring uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HashMode {
    /// yarilo's own layout (little-endian fold, finer ring).
    #[default]
    Yarilo,
    /// Places users exactly as a Dovecot 2.3 director would, so a site can
    /// switch from Dovecot directors without moving anyone.
    Dovecot,
}

/// One `director_service.mail_servers` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MailServer {
    /// Host name or IP literal; every address it resolves to joins the ring.
    /// No default: required.
    pub host: String,
    /// Port the login pod dials. Default 0 (the login's own protocol port).
    pub port: u16,
    /// Pool label. Default "" (the untagged pool).
    pub tag: String,
    /// Ring weight 0..=100. Default 100. 0 routes no new users here.
    pub vhosts: u32,
}

impl Default for MailServer {
    fn default() -> Self {
        MailServer {
            host: String::new(),
            port: 0,
            tag: String::new(),
            vhosts: 100,
        }
    }
}

/// `director_service.*`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectorService {
    /// LOOKUP and ring address. Default `:9102`.
    pub listen: String,
    /// Seconds an idle sticky assignment lives. Default 900.
    pub user_expire: u64,
    /// Seconds without a heartbeat before a registered backend is removed.
    /// Default 30.
    pub backend_expire: u64,
    /// Seconds between keepalive PINGs. Default 30.
    pub ping_interval: u64,
    /// Seconds to wait for a PONG. Default 10.
    pub ping_timeout: u64,
    /// Seconds one reply write may take; 0 is no bound. Default 10.
    pub write_timeout: u64,
    /// Seconds the director keeps running after SIGTERM: it leaves the
    /// ring and lets in-flight LOOKUPs finish within it. Default 30.
    pub session_grace_period: u64,
    /// Seconds a moved or kicked user's LOOKUPs are held while its old
    /// sessions close (the confirmed-kill hold) before they are let
    /// through anyway. Default 30.
    pub user_kill_timeout: u64,
    /// Ring seeds (ring formation): `ip:port` literals or `host:port`
    /// names resolved on every poll. Default [].
    pub peers: Vec<String>,
    /// `ip:port` the other directors reach this one at (its ring identity).
    /// Default "": the listen address when it names an IP, else `$POD_IP`
    /// with the listen port. Port 0 means the listen port.
    pub ring_address: String,
    /// Distinct login pods that must report a backend unreachable before it
    /// is evicted early. Default 2.
    pub backend_unreachable_reporters: u32,
    /// Seconds those reports must fall in. Default 5.
    pub backend_unreachable_window: u64,
    /// CIDRs a ring join is accepted from; empty allows all. Default [].
    pub join_allowed_nets: Vec<ipnet::IpNet>,
    /// Seconds between ring view re-sends; 0 turns it off. Default 3.
    pub anti_entropy_interval: u64,
    /// Seconds a dead member's tombstone is kept; 0 keeps it. Default 600.
    pub tombstone_ttl: u64,
    /// Seconds between seed polls below `min_members`; negative polls once.
    /// Default 2.
    pub seed_poll_interval: i64,
    /// Seconds between seed polls at `min_members`. Default 2.
    pub seed_poll_idle_interval: u64,
    /// Ring size seed polling aims for. Default 3.
    pub min_members: u32,
    /// Authenticates ring joins; none means the director runs alone.
    pub ring_secret: Option<Secret>,
    /// Name a ring dial verifies. Default none.
    pub ring_tls_server_name: Option<String>,
    /// Static backends. Default [].
    pub mail_servers: Vec<MailServer>,
    /// Lowercase usernames when `username_hash` is empty. Default true.
    pub username_hash_lowercase: bool,
    /// Username → hash-key template (`%u %n %d`, `%L`, `%%`). Default "",
    /// which means `%Lu` or `%u` per `username_hash_lowercase`.
    pub username_hash: String,
    /// Ring hash layout. Default `yarilo`.
    pub hash_mode: HashMode,
    /// Placement of a new user. Default `hash`.
    pub assignment_policy: AssignmentPolicy,
    /// Seconds a domain placement lives after its last use (policy
    /// `domain`). Default 900.
    pub director_domain_expire: u64,
    /// Seconds between domain rebalance passes (policy `domain`); 0 turns
    /// rebalancing off. Default 0.
    pub domain_rebalance_interval: u64,
    /// A domain moves when its backend's load (sessions per vhost) exceeds
    /// the least-loaded backend's by this many percent. Default 50.
    pub domain_rebalance_threshold: u32,
    /// Seconds an admin kick waits; negative is immediate. Default 2.
    pub user_kick_delay: i64,
    /// Backend-down kicks per batch; negative is unbatched. Default 100.
    pub max_parallel_kicks: i64,
    /// Confirmed-kill window of a graceful flush. Default 5.
    pub max_parallel_moves: u32,
    /// Program run after a confirmed move; "" disables. Default "".
    pub flush_program: String,
    /// Seconds the flush program may run; 0 selects the default 10.
    pub flush_program_timeout: u64,
    /// The admin API.
    pub api: DirectorApi,
}

/// `director_service.api.*`: the admin HTTP API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectorApi {
    /// Address of the admin API. Default `:9103`; empty disables it.
    pub listen: String,
    /// CIDRs requests are accepted from, on top of the token. Default []
    /// (all).
    pub allowed_nets: Vec<ipnet::IpNet>,
    /// Bearer token every request must carry. Default none: every request
    /// is refused until one is set.
    pub token: Option<Secret>,
}

impl Default for DirectorApi {
    fn default() -> Self {
        DirectorApi {
            listen: ":9103".to_string(),
            allowed_nets: Vec::new(),
            token: None,
        }
    }
}

impl Default for DirectorService {
    fn default() -> Self {
        DirectorService {
            listen: ":9102".to_string(),
            user_expire: 900,
            backend_expire: 30,
            ping_interval: 30,
            ping_timeout: 10,
            write_timeout: 10,
            session_grace_period: 30,
            user_kill_timeout: 30,
            peers: Vec::new(),
            ring_address: String::new(),
            backend_unreachable_reporters: 2,
            backend_unreachable_window: 5,
            join_allowed_nets: Vec::new(),
            anti_entropy_interval: 3,
            tombstone_ttl: 600,
            seed_poll_interval: 2,
            seed_poll_idle_interval: 2,
            min_members: 3,
            ring_secret: None,
            ring_tls_server_name: None,
            mail_servers: Vec::new(),
            username_hash_lowercase: true,
            username_hash: String::new(),
            hash_mode: HashMode::Yarilo,
            assignment_policy: AssignmentPolicy::Hash,
            director_domain_expire: 900,
            domain_rebalance_interval: 0,
            domain_rebalance_threshold: 50,
            user_kick_delay: 2,
            max_parallel_kicks: 100,
            max_parallel_moves: 5,
            flush_program: String::new(),
            flush_program_timeout: 10,
            api: DirectorApi::default(),
        }
    }
}

impl DirectorService {
    /// The template actually used: `username_hash`, or the one
    /// `username_hash_lowercase` implies when it is empty.
    pub fn effective_username_hash(&self) -> &str {
        match (self.username_hash.is_empty(), self.username_hash_lowercase) {
            (false, _) => &self.username_hash,
            (true, true) => "%Lu",
            (true, false) => "%u",
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("director_service.{k}");
        parse_listen(&self.listen).map_err(|m| ConfigError::invalid(key("listen"), m))?;
        if !self.api.listen.is_empty() {
            parse_listen(&self.api.listen)
                .map_err(|m| ConfigError::invalid(key("api.listen"), m))?;
        }
        for (name, value) in [
            ("user_expire", self.user_expire),
            ("backend_expire", self.backend_expire),
            ("ping_interval", self.ping_interval),
            ("ping_timeout", self.ping_timeout),
            (
                "backend_unreachable_window",
                self.backend_unreachable_window,
            ),
            ("director_domain_expire", self.director_domain_expire),
            ("user_kill_timeout", self.user_kill_timeout),
            ("session_grace_period", self.session_grace_period),
        ] {
            if value == 0 {
                return Err(ConfigError::invalid(key(name), "must be at least 1"));
            }
        }
        if self.backend_unreachable_reporters == 0 {
            return Err(ConfigError::invalid(
                key("backend_unreachable_reporters"),
                "must be at least 1",
            ));
        }
        if !self.ring_address.is_empty()
            && self.ring_address.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(ConfigError::invalid(
                key("ring_address"),
                "must be ip:port (an IP literal; port 0 = the listen port)",
            ));
        }
        if self.min_members == 0 {
            return Err(ConfigError::invalid(
                key("min_members"),
                "must be at least 1",
            ));
        }
        if let Err(m) = check_username_hash(self.effective_username_hash()) {
            return Err(ConfigError::invalid(key("username_hash"), m));
        }
        for (i, server) in self.mail_servers.iter().enumerate() {
            let k = |f: &str| key(&format!("mail_servers[{i}].{f}"));
            if server.host.is_empty() {
                return Err(ConfigError::invalid(k("host"), "is required"));
            }
            if server.vhosts > 100 {
                return Err(ConfigError::invalid(k("vhosts"), "must be from 0 to 100"));
            }
        }
        Ok(())
    }
}

/// Checks a username-hash template: `%u %n %d`, each optionally after
/// `%L`, and `%%`. (The director crate parses it again for use; this keeps
/// a bad template a configuration error that names the key.)
fn check_username_hash(template: &str) -> Result<(), String> {
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        match chars.next() {
            Some('%' | 'u' | 'n' | 'd') => {}
            Some('L') => match chars.next() {
                Some('u' | 'n' | 'd') => {}
                _ => return Err(format!("`{template}`: %L must be followed by u, n or d")),
            },
            Some(other) => {
                return Err(format!(
                    "`{template}`: unknown variable %{other} (use %u, %n, %d, %L… or %%)"
                ))
            }
            None => return Err(format!("`{template}`: ends with a lone %")),
        }
    }
    Ok(())
}

/// `backend_register.*`: the `yarilo backend-reg` sidecar.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendRegister {
    /// The director Service address (host:port). Default "" (sidecar off).
    pub director_addr: String,
    /// Seconds between heartbeats. Default 10.
    pub register_interval: u64,
    /// The pod's storage shard. Default "".
    pub tag: String,
    /// The pod's ring weight 0..=100. Default 100.
    pub vhosts: u32,
    /// The pod IP to register. Default "": the `POD_IP` environment
    /// variable (Kubernetes downward API).
    pub address: String,
    /// Nominal port sent in BACKEND-UP (logins use their own protocol
    /// port). Default 0.
    pub port: u16,
    /// Readiness URLs (`http://host:port/path`) of every protocol
    /// container; a heartbeat is sent only while all answer 200.
    /// Default [] (always ready).
    pub readyz_urls: Vec<String>,
    /// Load (percent, from each protocol container's `/loadz` on the host
    /// and port of its readiness URL) at which the sidecar sends
    /// BACKEND-FLUSH instead of BACKEND-UP: the pod keeps its users and
    /// its ring slice but takes no new ones. 0 turns it off. Default 90.
    pub overload_percent: u32,
    /// Load below which a flushed pod takes new users again (BACKEND-UP).
    /// Below `overload_percent`. Default 70.
    pub overload_clear_percent: u32,
}

impl Default for BackendRegister {
    fn default() -> Self {
        BackendRegister {
            director_addr: String::new(),
            register_interval: 10,
            tag: String::new(),
            vhosts: 100,
            address: String::new(),
            port: 0,
            readyz_urls: Vec::new(),
            overload_percent: 90,
            overload_clear_percent: 70,
        }
    }
}

impl BackendRegister {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.register_interval == 0 {
            return Err(ConfigError::invalid(
                "backend_register.register_interval",
                "must be at least 1",
            ));
        }
        if !self.address.is_empty() && self.address.parse::<std::net::IpAddr>().is_err() {
            return Err(ConfigError::invalid(
                "backend_register.address",
                "must be an IP address (or empty for $POD_IP)",
            ));
        }
        for url in &self.readyz_urls {
            if !url.starts_with("http://") {
                return Err(ConfigError::invalid(
                    "backend_register.readyz_urls",
                    format!("`{url}` must be an http:// URL"),
                ));
            }
        }
        if self.vhosts > 100 {
            return Err(ConfigError::invalid(
                "backend_register.vhosts",
                "must be from 0 to 100",
            ));
        }
        if self.overload_percent > 100 {
            return Err(ConfigError::invalid(
                "backend_register.overload_percent",
                "must be from 0 (off) to 100",
            ));
        }
        if self.overload_percent > 0 && self.overload_clear_percent >= self.overload_percent {
            return Err(ConfigError::invalid(
                "backend_register.overload_clear_percent",
                "must be below overload_percent",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn defaults_and_effective_template() {
        let c = Config::from_yaml("", "t").unwrap();
        assert_eq!(c.director_service.listen, ":9102");
        assert_eq!(c.director_service.effective_username_hash(), "%Lu");
        let c = Config::from_yaml("director_service:\n  username_hash_lowercase: false\n", "t")
            .unwrap();
        assert_eq!(c.director_service.effective_username_hash(), "%u");
        let c = Config::from_yaml(
            "director_service:\n  username_hash: \"%Ld\"\n  username_hash_lowercase: false\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.director_service.effective_username_hash(), "%Ld");
    }

    #[test]
    fn invalid_template_names_the_key() {
        for bad in ["%x", "%Lx", "abc%", "%L"] {
            let text = format!("director_service:\n  username_hash: \"{bad}\"\n");
            let err = Config::from_yaml(&text, "t").unwrap_err().to_string();
            assert!(err.contains("director_service.username_hash"), "{err}");
        }
    }

    #[test]
    fn mail_servers_and_policy_parse() {
        let text = "director_service:\n  assignment_policy: least_sessions\n  hash_mode: dovecot\n  mail_servers:\n    - host: 10.0.0.1\n      port: 993\n      tag: a\n";
        let c = Config::from_yaml(text, "t").unwrap();
        let d = &c.director_service;
        assert_eq!(d.assignment_policy, super::AssignmentPolicy::LeastSessions);
        assert_eq!(d.hash_mode, super::HashMode::Dovecot);
        assert_eq!(d.mail_servers[0].vhosts, 100);
        let err = Config::from_yaml(
            "director_service:\n  mail_servers:\n    - host: h\n      vhosts: 101\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("mail_servers[0].vhosts"), "{err}");
    }
}
