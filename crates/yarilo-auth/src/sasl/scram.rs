//! SCRAM-SHA-1 / SCRAM-SHA-256 server (RFC 5802 §5, RFC 7677), without
//! channel binding. Works with a PLAIN stored password (keys derived with
//! a fresh salt) or the matching `{SCRAM-SHA-*}` stored keys.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use subtle::ConstantTimeEq as _;

use super::{utf8, SaslError, SaslStep};
use crate::scheme::scram_keys::{hash, hmac};
use crate::scheme::{Scheme, ScramKeys, StoredPassword};

/// Iterations used when deriving keys from a clear-text password.
const PLAIN_ITERATIONS: u32 = 4096;

#[derive(Debug)]
enum Phase {
    /// Waiting for client-first.
    Start,
    /// client-first parsed, credentials requested.
    NeedKeys {
        gs2_header: String,
        client_first_bare: String,
        client_nonce: String,
        user: String,
        authzid: Option<String>,
    },
    /// server-first sent, waiting for client-final.
    SentServerFirst {
        gs2_header: String,
        auth_prefix: String,
        nonce: String,
        keys: ScramKeys,
        user: String,
        authzid: Option<String>,
    },
    Done,
}

#[derive(Debug)]
pub(super) struct Scram {
    scheme: Scheme,
    server_nonce: String,
    phase: Phase,
}

fn fail(e: SaslError) -> SaslStep {
    SaslStep::Failure(e)
}

/// RFC 5802 §5.1 saslname: `=2C` is `,`, `=3D` is `=`, any other `=` is bad.
fn decode_saslname(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i + 1..i + 3) {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

impl Scram {
    pub(super) fn new(scheme: Scheme, nonce: &[u8]) -> Scram {
        Scram {
            scheme,
            server_nonce: B64.encode(nonce),
            phase: Phase::Start,
        }
    }

    pub(super) fn step(&mut self, data: &[u8]) -> SaslStep {
        let text = match utf8(data, "SCRAM message") {
            Ok(t) => t,
            Err(e) => return fail(e),
        };
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Start => self.client_first(&text),
            Phase::SentServerFirst {
                gs2_header,
                auth_prefix,
                nonce,
                keys,
                user,
                authzid,
            } => self.client_final(
                &text,
                &gs2_header,
                &auth_prefix,
                &nonce,
                &keys,
                user,
                authzid,
            ),
            Phase::NeedKeys { .. } | Phase::Done => fail(SaslError::OutOfOrder),
        }
    }

    fn client_first(&mut self, text: &str) -> SaslStep {
        // gs2-header: cbind-flag "," [authzid] ","
        let mut it = text.splitn(3, ',');
        let (Some(flag), Some(authz), Some(bare)) = (it.next(), it.next(), it.next()) else {
            return fail(SaslError::Malformed(
                "SCRAM client-first needs a gs2 header",
            ));
        };
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return fail(SaslError::ChannelBinding),
            _ => return fail(SaslError::Malformed("bad gs2 channel binding flag")),
        }
        let authzid = if authz.is_empty() {
            None
        } else if let Some(a) = authz.strip_prefix("a=") {
            match decode_saslname(a) {
                Some(a) => Some(a),
                None => return fail(SaslError::Malformed("bad authzid")),
            }
        } else {
            return fail(SaslError::Malformed("bad gs2 authzid"));
        };
        let gs2_header = format!("{flag},{authz},");
        let mut attrs = bare.split(',');
        let user = match attrs.next() {
            Some(m) if m.starts_with("m=") => {
                return fail(SaslError::Malformed("mandatory extension not supported"))
            }
            Some(n) => match n.strip_prefix("n=").and_then(decode_saslname) {
                Some(u) if !u.is_empty() => u,
                _ => return fail(SaslError::Malformed("SCRAM needs n=username")),
            },
            None => return fail(SaslError::Malformed("SCRAM needs n=username")),
        };
        let client_nonce = match attrs.next().and_then(|r| r.strip_prefix("r=")) {
            Some(r) if !r.is_empty() && r.bytes().all(|b| (0x21..=0x7e).contains(&b)) => r,
            _ => return fail(SaslError::Malformed("SCRAM needs r=nonce")),
        };
        let authzid = authzid.filter(|a| *a != user);
        self.phase = Phase::NeedKeys {
            gs2_header,
            client_first_bare: bare.to_string(),
            client_nonce: client_nonce.to_string(),
            user: user.clone(),
            authzid: authzid.clone(),
        };
        SaslStep::NeedCredentials {
            authcid: user,
            authzid,
        }
    }

    pub(super) fn credentials(&mut self, stored: &StoredPassword) -> SaslStep {
        let Phase::NeedKeys {
            gs2_header,
            client_first_bare,
            client_nonce,
            user,
            authzid,
        } = std::mem::replace(&mut self.phase, Phase::Done)
        else {
            return fail(SaslError::OutOfOrder);
        };
        let keys = if let Some(plain) = stored.plaintext() {
            let mut salt = [0u8; 16];
            use rand::Rng as _;
            rand::thread_rng().fill(&mut salt);
            ScramKeys::derive(self.scheme, &plain, &salt, PLAIN_ITERATIONS)
        } else if stored.scheme == self.scheme {
            match ScramKeys::parse(self.scheme, &stored.value) {
                Some(k) => k,
                None => return fail(SaslError::CredentialsUnusable),
            }
        } else {
            return fail(SaslError::CredentialsUnusable);
        };
        let nonce = format!("{client_nonce}{}", self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&keys.salt),
            keys.iterations
        );
        let auth_prefix = format!("{client_first_bare},{server_first},");
        self.phase = Phase::SentServerFirst {
            gs2_header,
            auth_prefix,
            nonce,
            keys,
            user,
            authzid,
        };
        SaslStep::Challenge(server_first.into_bytes())
    }

    #[allow(clippy::too_many_arguments)]
    fn client_final(
        &mut self,
        text: &str,
        gs2_header: &str,
        auth_prefix: &str,
        nonce: &str,
        keys: &ScramKeys,
        user: String,
        authzid: Option<String>,
    ) -> SaslStep {
        let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
            return fail(SaslError::Malformed("SCRAM client-final needs p=proof"));
        };
        let mut attrs = without_proof.split(',');
        let cbind = attrs.next().and_then(|c| c.strip_prefix("c="));
        let rnonce = attrs.next().and_then(|r| r.strip_prefix("r="));
        // RFC 5802 §5.1: c= is base64 of the gs2 header (no cbind data).
        if cbind.and_then(|c| B64.decode(c).ok()).as_deref() != Some(gs2_header.as_bytes()) {
            return fail(SaslError::Malformed("SCRAM channel binding data mismatch"));
        }
        if rnonce != Some(nonce) {
            return fail(SaslError::Malformed("SCRAM nonce mismatch"));
        }
        let Ok(proof) = B64.decode(proof) else {
            return fail(SaslError::Malformed("SCRAM proof is not base64"));
        };
        let auth_message = format!("{auth_prefix}{without_proof}");
        let client_signature = hmac(self.scheme, &keys.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return fail(SaslError::BadCredentials);
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        if !bool::from(hash(self.scheme, &client_key).ct_eq(&keys.stored_key)) {
            return fail(SaslError::BadCredentials);
        }
        let server_signature = hmac(self.scheme, &keys.server_key, auth_message.as_bytes());
        SaslStep::Success {
            authcid: user,
            authzid,
            additional: Some(format!("v={}", B64.encode(server_signature)).into_bytes()),
        }
    }
}

#[cfg(test)]
impl Scram {
    pub(super) fn set_server_nonce(&mut self, nonce: &str) {
        self.server_nonce = nonce.to_string();
    }
}
