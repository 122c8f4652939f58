//! The internal certificate chain, made with rcgen: one root, an
//! intermediate per generation, and per role a leaf carrying the pinned
//! `internal_tls.server_name`, the role's extra names (the director's
//! `<release>-director-ring` …) and the role SAN `yarilo-role:<role>`.
//! A rotation makes a new intermediate and new leaves under the same root,
//! so old and new members verify each other during the rollout.

use std::collections::BTreeMap;
use std::str::FromStr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use crate::scenario::InternalTlsPlan;
use crate::{LabError, Result};

fn err(e: impl std::fmt::Display) -> LabError {
    LabError::Other(format!("certificates: {e}"))
}

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// One generation of leaves.
#[derive(Clone)]
pub struct Generation {
    pub number: u32,
    pub intermediate_pem: String,
    /// role → (chain PEM: leaf then intermediate, key PEM, leaf DER).
    pub leaves: BTreeMap<String, (String, String, Vec<u8>)>,
}

pub struct Chain {
    root: Ca,
    pub root_pem: String,
    pub root_der: Vec<u8>,
    plan: InternalTlsPlan,
    /// Rendered cert-manager Certificates, issued under their own Secret
    /// names (`secret:<name>` keys in a generation's leaves).
    requests: Vec<crate::manifests::CertRequest>,
    pub generations: Vec<Generation>,
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_after = rcgen::date_time_ymd(2036, 1, 1);
    p
}

impl Chain {
    pub fn new(plan: &InternalTlsPlan) -> Result<Chain> {
        Self::with_requests(plan, Vec::new())
    }

    /// A chain that also issues every rendered Certificate.
    pub fn with_requests(
        plan: &InternalTlsPlan,
        requests: Vec<crate::manifests::CertRequest>,
    ) -> Result<Chain> {
        let key = KeyPair::generate().map_err(err)?;
        let cert = ca_params("yarilo lab root")
            .self_signed(&key)
            .map_err(err)?;
        let root_pem = cert.pem();
        let root_der = cert.der().to_vec();
        for r in &plan.roles {
            yarilo_tls::Role::from_str(r).map_err(err)?;
        }
        let mut c = Chain {
            root: Ca { cert, key },
            root_pem,
            root_der,
            plan: plan.clone(),
            requests,
            generations: Vec::new(),
        };
        c.rotate()?;
        Ok(c)
    }

    pub fn current(&self) -> &Generation {
        &self.generations[self.generations.len() - 1]
    }

    /// A new intermediate and new leaves for every role.
    pub fn rotate(&mut self) -> Result<&Generation> {
        let number = self.generations.len() as u32 + 1;
        let ikey = KeyPair::generate().map_err(err)?;
        let mut ip = ca_params(&format!("yarilo lab intermediate {number}"));
        ip.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let icert = ip
            .signed_by(&ikey, &self.root.cert, &self.root.key)
            .map_err(err)?;
        let mut leaves = BTreeMap::new();
        for role in &self.plan.roles {
            let mut names = vec![self.plan.server_name.clone()];
            names.extend(self.plan.extra_names.get(role).cloned().unwrap_or_default());
            let mut p = CertificateParams::default();
            let mut dn = DistinguishedName::new();
            dn.push(DnType::CommonName, format!("{role} (generation {number})"));
            p.distinguished_name = dn;
            p.not_after = rcgen::date_time_ymd(2036, 1, 1);
            p.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            for n in &names {
                p.subject_alt_names
                    .push(SanType::DnsName(n.as_str().try_into().map_err(err)?));
            }
            let uri = yarilo_tls::Role::from_str(role).map_err(err)?.uri();
            p.subject_alt_names
                .push(SanType::URI(uri.try_into().map_err(err)?));
            let key = KeyPair::generate().map_err(err)?;
            let cert = p.signed_by(&key, &icert, &ikey).map_err(err)?;
            let chain = format!("{}{}", cert.pem(), icert.pem());
            leaves.insert(
                role.clone(),
                (chain, key.serialize_pem(), cert.der().to_vec()),
            );
        }
        for r in &self.requests {
            let mut p = CertificateParams::default();
            let mut dn = DistinguishedName::new();
            dn.push(
                DnType::CommonName,
                format!("{} (generation {number})", r.name),
            );
            p.distinguished_name = dn;
            p.not_after = rcgen::date_time_ymd(2036, 1, 1);
            p.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            for n in &r.dns_names {
                p.subject_alt_names
                    .push(SanType::DnsName(n.as_str().try_into().map_err(err)?));
            }
            for u in &r.uris {
                p.subject_alt_names
                    .push(SanType::URI(u.as_str().try_into().map_err(err)?));
            }
            let key = KeyPair::generate().map_err(err)?;
            let cert = p.signed_by(&key, &icert, &ikey).map_err(err)?;
            let chain = format!("{}{}", cert.pem(), icert.pem());
            leaves.insert(
                format!("secret:{}", r.secret),
                (chain, key.serialize_pem(), cert.der().to_vec()),
            );
        }
        self.generations.push(Generation {
            number,
            intermediate_pem: icert.pem(),
            leaves,
        });
        Ok(self.current())
    }

    /// Secret name → data, for every role of the current generation.
    pub fn secrets(&self) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
        let g = self.current();
        g.leaves
            .iter()
            .map(|(role, (chain, key, _))| {
                let mut d = BTreeMap::new();
                d.insert("tls.crt".to_string(), chain.clone().into_bytes());
                d.insert("tls.key".to_string(), key.clone().into_bytes());
                d.insert("ca.crt".to_string(), self.root_pem.clone().into_bytes());
                match role.strip_prefix("secret:") {
                    Some(secret) => (secret.to_string(), d),
                    None => (format!("{}{role}", self.plan.secret_prefix), d),
                }
            })
            .collect()
    }

    /// Which generation issued a leaf (by its DER), if any.
    pub fn generation_of(&self, leaf: &[u8]) -> Option<(u32, String)> {
        for g in &self.generations {
            for (role, (_, _, der)) in &g.leaves {
                if der == leaf {
                    return Some((g.number, role.clone()));
                }
            }
        }
        None
    }

    pub fn server_name(&self) -> &str {
        &self.plan.server_name
    }

    /// (chain PEM, key PEM) of a role in the current generation.
    pub fn leaf(&self, role: &str) -> Option<(String, String)> {
        self.current()
            .leaves
            .get(role)
            .map(|(c, k, _)| (c.clone(), k.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;

    #[test]
    fn leaves_chain_to_the_root_through_each_generation() {
        let plan = InternalTlsPlan {
            secret_prefix: "t-".into(),
            server_name: "yarilo-internal".into(),
            extra_names: BTreeMap::from([(
                "director".to_string(),
                vec!["lab-director-ring".to_string()],
            )]),
            roles: vec!["director".into(), "login".into()],
        };
        let mut c = Chain::new(&plan).unwrap();
        let first = c.current().leaves["director"].2.clone();
        c.rotate().unwrap();
        let second = c.current().leaves["director"].2.clone();
        assert_ne!(first, second);
        assert_eq!(c.generation_of(&first).unwrap().0, 1);
        assert_eq!(c.generation_of(&second).unwrap().0, 2);
        let s = c.secrets();
        assert!(s.contains_key("t-director") && s.contains_key("t-login"));
        let chain = String::from_utf8(s["t-director"]["tls.crt"].clone()).unwrap();
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
        // rustls accepts the chain for the pinned name.
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(c.root_der.clone()))
            .unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let certs = yarilo_tls::parse_certs(chain.as_bytes()).unwrap();
        verifier
            .verify_server_cert(
                &certs[0],
                &certs[1..],
                &rustls::pki_types::ServerName::try_from("yarilo-internal").unwrap(),
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .unwrap();
    }
}
