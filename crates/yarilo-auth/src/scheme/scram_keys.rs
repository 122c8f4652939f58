//! RFC 5802 §3 key derivation, and Dovecot's `{SCRAM-SHA-*}` layout
//! `iterations,salt_b64,stored_key_b64,server_key_b64`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha1::Digest as _;
use subtle::ConstantTimeEq as _;

use super::Scheme;

/// What a server needs to run SCRAM: salt, iteration count and the two keys.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramKeys {
    /// `ScramSha1` or `ScramSha256`.
    pub scheme: Scheme,
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScramKeys({}, i={})", self.scheme, self.iterations)
    }
}

/// Upper bound on iterations we compute for a stored or derived key; keeps
/// a bad passdb row from pinning a worker for minutes.
pub(crate) const MAX_ITERATIONS: u32 = 1_000_000;

impl ScramKeys {
    /// Parses Dovecot's stored form.
    pub fn parse(scheme: Scheme, value: &str) -> Option<ScramKeys> {
        let mut it = value.split(',');
        let iterations: u32 = it.next()?.parse().ok()?;
        let salt = B64.decode(it.next()?).ok()?;
        let stored_key = B64.decode(it.next()?).ok()?;
        let server_key = B64.decode(it.next()?).ok()?;
        if it.next().is_some() || iterations == 0 || iterations > MAX_ITERATIONS {
            return None;
        }
        let size = hash_len(scheme)?;
        if stored_key.len() != size || server_key.len() != size {
            return None;
        }
        Some(ScramKeys {
            scheme,
            iterations,
            salt,
            stored_key,
            server_key,
        })
    }

    pub fn to_stored(&self) -> String {
        format!(
            "{},{},{},{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(&self.stored_key),
            B64.encode(&self.server_key)
        )
    }

    /// Derives the keys from a clear-text password.
    pub fn derive(scheme: Scheme, password: &[u8], salt: &[u8], iterations: u32) -> ScramKeys {
        let salted = salted_password(scheme, password, salt, iterations);
        let client_key = hmac(scheme, &salted, b"Client Key");
        ScramKeys {
            scheme,
            iterations,
            salt: salt.to_vec(),
            stored_key: hash(scheme, &client_key),
            server_key: hmac(scheme, &salted, b"Server Key"),
        }
    }

    pub fn verify_password(&self, password: &[u8]) -> bool {
        let other = ScramKeys::derive(self.scheme, password, &self.salt, self.iterations);
        bool::from(other.stored_key.ct_eq(&self.stored_key))
    }
}

pub(crate) fn hash_len(scheme: Scheme) -> Option<usize> {
    match scheme {
        Scheme::ScramSha1 => Some(20),
        Scheme::ScramSha256 => Some(32),
        _ => None,
    }
}

pub(crate) fn hmac(scheme: Scheme, key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length, so new_from_slice cannot fail.
    match scheme {
        Scheme::ScramSha1 => match Hmac::<sha1::Sha1>::new_from_slice(key) {
            Ok(mut m) => {
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Err(_) => Vec::new(),
        },
        _ => match Hmac::<sha2::Sha256>::new_from_slice(key) {
            Ok(mut m) => {
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Err(_) => Vec::new(),
        },
    }
}

pub(crate) fn hash(scheme: Scheme, data: &[u8]) -> Vec<u8> {
    match scheme {
        Scheme::ScramSha1 => sha1::Sha1::digest(data).to_vec(),
        _ => sha2::Sha256::digest(data).to_vec(),
    }
}

fn salted_password(scheme: Scheme, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let iterations = iterations.clamp(1, MAX_ITERATIONS);
    match scheme {
        Scheme::ScramSha1 => {
            let mut out = vec![0u8; 20];
            let _ = pbkdf2::pbkdf2::<Hmac<sha1::Sha1>>(password, salt, iterations, &mut out);
            out
        }
        _ => {
            let mut out = vec![0u8; 32];
            let _ = pbkdf2::pbkdf2::<Hmac<sha2::Sha256>>(password, salt, iterations, &mut out);
            out
        }
    }
}
