use std::fmt;
use std::str::FromStr;

/// What an internal certificate allows its holder to do. Carried as a URI
/// SAN `yarilo-role:<name>` (what `yarctl certs` issues) or as a DNS SAN
/// `<name>.role.yarilo.internal` (the deployment seed's form, which
/// cert-manager certificates from the charts carry); either grants the
/// role. So one CA can issue narrower certificates (a backend-reg sidecar
/// that may only register, a login pod that may only LOOKUP) while the
/// shared dev certificate carries all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Login,
    Backend,
    BackendReg,
    Director,
    Auth,
    Warden,
    Locks,
    Fts,
    Admin,
}

pub(crate) const ROLE_URI_PREFIX: &str = "yarilo-role:";
/// The DNS form: `<role>` + this suffix.
pub(crate) const ROLE_DNS_SUFFIX: &str = ".role.yarilo.internal";

impl Role {
    pub const ALL: [Role; 9] = [
        Role::Login,
        Role::Backend,
        Role::BackendReg,
        Role::Director,
        Role::Auth,
        Role::Warden,
        Role::Locks,
        Role::Fts,
        Role::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Login => "login",
            Role::Backend => "backend",
            Role::BackendReg => "backend-reg",
            Role::Director => "director",
            Role::Auth => "auth",
            Role::Warden => "warden",
            Role::Locks => "locks",
            Role::Fts => "fts",
            Role::Admin => "admin",
        }
    }

    pub fn uri(self) -> String {
        format!("{ROLE_URI_PREFIX}{}", self.as_str())
    }

    /// The DNS SAN form, `<role>.role.yarilo.internal`.
    pub fn dns_name(self) -> String {
        format!("{}{ROLE_DNS_SUFFIX}", self.as_str())
    }

    /// The role a DNS SAN names (`director.role.yarilo.internal`, any
    /// case), if it is one.
    pub fn from_dns_name(name: &str) -> Option<Role> {
        let lower = name.to_ascii_lowercase();
        lower.strip_suffix(ROLE_DNS_SUFFIX)?.parse().ok()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Role::ALL.iter().map(|r| r.as_str()).collect();
                format!("unknown role `{s}` (one of {})", names.join(", "))
            })
    }
}
