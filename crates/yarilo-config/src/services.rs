//! `services.<name>.*`: the client-facing listeners. Each component binds
//! the services of its own protocol; `yarilo single` binds all that are
//! enabled and implemented.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// How TLS is offered on a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SslMode {
    /// Plain text only (LMTP inside the cluster, for instance).
    No,
    /// Plain text with STARTTLS/STLS offered.
    Starttls,
    /// TLS from the first byte (IMAPS, POP3S, SUBMISSIONS).
    Ssl,
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Service {
    pub enabled: bool,
    pub port: u16,
    /// Address to bind. Default `0.0.0.0`.
    pub address: String,
    pub ssl_mode: SslMode,
    /// Expect a PROXY header (with `general.haproxy.enabled`).
    pub haproxy_protocol: bool,
    /// Forward the client address to the backend with XCLIENT.
    pub xclient_protocol: bool,
}

impl Service {
    pub fn socket_addr(&self) -> Result<SocketAddr, String> {
        let ip: IpAddr = self
            .address
            .parse()
            .map_err(|_| format!("`{}` is not an IP address", self.address))?;
        Ok(SocketAddr::new(ip, self.port))
    }
}

/// The names a `services` entry may have, with their standard ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceName {
    Imap,
    Imaps,
    Pop3,
    Pop3s,
    Lmtp,
    Submission,
    Submissions,
    Managesieve,
    Jmap,
}

impl ServiceName {
    pub const ALL: [ServiceName; 9] = [
        ServiceName::Imap,
        ServiceName::Imaps,
        ServiceName::Pop3,
        ServiceName::Pop3s,
        ServiceName::Lmtp,
        ServiceName::Submission,
        ServiceName::Submissions,
        ServiceName::Managesieve,
        ServiceName::Jmap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServiceName::Imap => "imap",
            ServiceName::Imaps => "imaps",
            ServiceName::Pop3 => "pop3",
            ServiceName::Pop3s => "pop3s",
            ServiceName::Lmtp => "lmtp",
            ServiceName::Submission => "submission",
            ServiceName::Submissions => "submissions",
            ServiceName::Managesieve => "managesieve",
            ServiceName::Jmap => "jmap",
        }
    }

    fn standard(self) -> (u16, SslMode) {
        match self {
            ServiceName::Imap => (143, SslMode::Starttls),
            ServiceName::Imaps => (993, SslMode::Ssl),
            ServiceName::Pop3 => (110, SslMode::Starttls),
            ServiceName::Pop3s => (995, SslMode::Ssl),
            ServiceName::Lmtp => (24, SslMode::No),
            ServiceName::Submission => (587, SslMode::Starttls),
            ServiceName::Submissions => (465, SslMode::Ssl),
            ServiceName::Managesieve => (4190, SslMode::Starttls),
            ServiceName::Jmap => (8080, SslMode::Ssl),
        }
    }

    /// The listener with the standard port, on every interface, enabled.
    pub fn default_service(self) -> Service {
        let (port, ssl_mode) = self.standard();
        Service {
            enabled: true,
            port,
            address: "0.0.0.0".to_string(),
            ssl_mode,
            haproxy_protocol: false,
            xclient_protocol: false,
        }
    }
}

/// `services`: one entry per protocol listener. A partly written entry
/// keeps that protocol's defaults for the keys it leaves out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawServices")]
pub struct Services {
    pub imap: Service,
    pub imaps: Service,
    pub pop3: Service,
    pub pop3s: Service,
    pub lmtp: Service,
    pub submission: Service,
    pub submissions: Service,
    pub managesieve: Service,
    pub jmap: Service,
}

impl Default for Services {
    fn default() -> Self {
        RawServices::default().into()
    }
}

impl Services {
    pub fn get(&self, name: ServiceName) -> &Service {
        match name {
            ServiceName::Imap => &self.imap,
            ServiceName::Imaps => &self.imaps,
            ServiceName::Pop3 => &self.pop3,
            ServiceName::Pop3s => &self.pop3s,
            ServiceName::Lmtp => &self.lmtp,
            ServiceName::Submission => &self.submission,
            ServiceName::Submissions => &self.submissions,
            ServiceName::Managesieve => &self.managesieve,
            ServiceName::Jmap => &self.jmap,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let mut bound: Vec<(SocketAddr, ServiceName)> = Vec::new();
        for name in ServiceName::ALL {
            let service = self.get(name);
            let key = |k: &str| format!("services.{}.{k}", name.as_str());
            let addr = service
                .socket_addr()
                .map_err(|m| ConfigError::invalid(key("address"), m))?;
            if !service.enabled {
                continue;
            }
            if service.port == 0 {
                return Err(ConfigError::invalid(
                    key("port"),
                    "must not be 0 when enabled",
                ));
            }
            if let Some((_, other)) = bound.iter().find(|(a, _)| *a == addr) {
                return Err(ConfigError::invalid(
                    key("port"),
                    format!("{addr} is also used by services.{}", other.as_str()),
                ));
            }
            bound.push((addr, name));
        }
        Ok(())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawServices {
    imap: RawService,
    imaps: RawService,
    pop3: RawService,
    pop3s: RawService,
    lmtp: RawService,
    submission: RawService,
    submissions: RawService,
    managesieve: RawService,
    jmap: RawService,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawService {
    enabled: Option<bool>,
    port: Option<u16>,
    address: Option<String>,
    ssl_mode: Option<SslMode>,
    haproxy_protocol: Option<bool>,
    xclient_protocol: Option<bool>,
}

impl RawService {
    fn resolve(self, name: ServiceName) -> Service {
        let d = name.default_service();
        Service {
            enabled: self.enabled.unwrap_or(d.enabled),
            port: self.port.unwrap_or(d.port),
            address: self.address.unwrap_or(d.address),
            ssl_mode: self.ssl_mode.unwrap_or(d.ssl_mode),
            haproxy_protocol: self.haproxy_protocol.unwrap_or(d.haproxy_protocol),
            xclient_protocol: self.xclient_protocol.unwrap_or(d.xclient_protocol),
        }
    }
}

impl From<RawServices> for Services {
    fn from(raw: RawServices) -> Self {
        Services {
            imap: raw.imap.resolve(ServiceName::Imap),
            imaps: raw.imaps.resolve(ServiceName::Imaps),
            pop3: raw.pop3.resolve(ServiceName::Pop3),
            pop3s: raw.pop3s.resolve(ServiceName::Pop3s),
            lmtp: raw.lmtp.resolve(ServiceName::Lmtp),
            submission: raw.submission.resolve(ServiceName::Submission),
            submissions: raw.submissions.resolve(ServiceName::Submissions),
            managesieve: raw.managesieve.resolve(ServiceName::Managesieve),
            jmap: raw.jmap.resolve(ServiceName::Jmap),
        }
    }
}
