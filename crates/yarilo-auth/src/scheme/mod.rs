//! Password schemes with Dovecot 2.3's `{SCHEME}` prefixes.
//!
//! A stored password is `{SCHEME}value` or `{SCHEME.HEX}` / `{SCHEME.B64}`
//! for an explicit encoding of binary digests; without a prefix the
//! passdb's default scheme applies. Hashes made by `doveadm pw` verify here
//! and hashes made here verify in Dovecot.
//!
//! Invariants: every comparison of secret-derived bytes is constant-time;
//! nothing here panics on a malformed stored value (it simply never
//! verifies); slow schemes say so through [`StoredPassword::is_slow`] so
//! callers run them off the async threads.

mod crypt;
pub(crate) mod md5_state;
pub(crate) mod scram_keys;

use std::fmt;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use rand::Rng as _;
use sha1::Digest as _;
use subtle::ConstantTimeEq as _;

pub use scram_keys::ScramKeys;

/// A password hashing scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Clear text (`PLAIN`, `CLEAR`, `CLEARTEXT`).
    Plain,
    /// Clear text, compared on the stored length only (`PLAIN-TRUNC`).
    PlainTrunc,
    /// MD5 of the password, hex (`PLAIN-MD5`).
    PlainMd5,
    /// MD5 of the password, base64 (`LDAP-MD5`).
    LdapMd5,
    /// Salted MD5, base64 (`SMD5`).
    Smd5,
    /// SHA-1 (`SHA`, `SHA1`).
    Sha1,
    /// Salted SHA-1.
    Ssha,
    Sha256,
    Ssha256,
    Sha512,
    Ssha512,
    /// `$1$` crypt.
    Md5Crypt,
    /// `MD5`: `$1$` crypt when the value looks like one, else PLAIN-MD5.
    Md5,
    /// `$5$` crypt.
    Sha256Crypt,
    /// `$6$` crypt.
    Sha512Crypt,
    /// bcrypt (`$2y$`, `$2a$`, `$2b$`).
    BlfCrypt,
    Argon2i,
    Argon2id,
    /// Dovecot's `$1$salt$rounds$hex` PBKDF2-HMAC-SHA1.
    Pbkdf2,
    /// HMAC-MD5 contexts (lets CRAM-MD5 work without the clear text).
    CramMd5,
    /// RFC 5802 keys (lets SCRAM work without the clear text).
    ScramSha1,
    ScramSha256,
}

/// How a binary digest is written down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// The scheme's own encoding (and Dovecot's length-based guess).
    Default,
    Hex,
    Base64,
}

/// Why a scheme name or value could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemeError {
    /// The `{NAME}` is not one we know. The password never verifies.
    #[error("unknown password scheme `{0}`")]
    Unknown(String),
    /// The scheme cannot be generated (only verified), or its parameters
    /// were refused.
    #[error("cannot generate a `{0}` hash")]
    CannotGenerate(&'static str),
}

const ALL: &[(&str, Scheme)] = &[
    ("PLAIN", Scheme::Plain),
    ("CLEAR", Scheme::Plain),
    ("CLEARTEXT", Scheme::Plain),
    ("PLAIN-TRUNC", Scheme::PlainTrunc),
    ("PLAIN-MD5", Scheme::PlainMd5),
    ("LDAP-MD5", Scheme::LdapMd5),
    ("SMD5", Scheme::Smd5),
    ("SHA", Scheme::Sha1),
    ("SHA1", Scheme::Sha1),
    ("SSHA", Scheme::Ssha),
    ("SHA256", Scheme::Sha256),
    ("SSHA256", Scheme::Ssha256),
    ("SHA512", Scheme::Sha512),
    ("SSHA512", Scheme::Ssha512),
    ("MD5-CRYPT", Scheme::Md5Crypt),
    ("MD5", Scheme::Md5),
    ("SHA256-CRYPT", Scheme::Sha256Crypt),
    ("SHA512-CRYPT", Scheme::Sha512Crypt),
    ("BLF-CRYPT", Scheme::BlfCrypt),
    ("ARGON2I", Scheme::Argon2i),
    ("ARGON2ID", Scheme::Argon2id),
    ("PBKDF2", Scheme::Pbkdf2),
    ("CRAM-MD5", Scheme::CramMd5),
    ("HMAC-MD5", Scheme::CramMd5),
    ("SCRAM-SHA-1", Scheme::ScramSha1),
    ("SCRAM-SHA-256", Scheme::ScramSha256),
];

impl Scheme {
    /// Parses a scheme name, case-insensitively, with an optional
    /// `.HEX` / `.B64` / `.BASE64` suffix.
    pub fn parse(name: &str) -> Result<(Scheme, Encoding), SchemeError> {
        let upper = name.trim().to_ascii_uppercase();
        let (base, encoding) = match upper.rsplit_once('.') {
            Some((b, "HEX")) => (b, Encoding::Hex),
            Some((b, "B64" | "BASE64")) => (b, Encoding::Base64),
            _ => (upper.as_str(), Encoding::Default),
        };
        ALL.iter()
            .find(|(n, _)| *n == base)
            .map(|(_, s)| (*s, encoding))
            .ok_or_else(|| SchemeError::Unknown(name.to_string()))
    }

    /// The canonical name written inside `{}`.
    pub fn name(self) -> &'static str {
        ALL.iter()
            .find(|(_, s)| *s == self)
            .map(|(n, _)| *n)
            .unwrap_or("PLAIN")
    }

    /// Schemes that cost real CPU on purpose; run them off the async threads.
    pub fn is_slow(self) -> bool {
        matches!(
            self,
            Scheme::Md5Crypt
                | Scheme::Md5
                | Scheme::Sha256Crypt
                | Scheme::Sha512Crypt
                | Scheme::BlfCrypt
                | Scheme::Argon2i
                | Scheme::Argon2id
                | Scheme::Pbkdf2
                | Scheme::ScramSha1
                | Scheme::ScramSha256
        )
    }

    /// Names of every scheme we verify, for `yarctl pw --list`.
    pub fn names() -> Vec<&'static str> {
        ALL.iter().map(|(n, _)| *n).collect()
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A password as a passdb stores it.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredPassword {
    pub scheme: Scheme,
    pub encoding: Encoding,
    /// The part after `{SCHEME}`.
    pub value: String,
}

impl fmt::Debug for StoredPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoredPassword({{{}}}<hidden>)", self.scheme)
    }
}

impl StoredPassword {
    /// Splits `{SCHEME}value`; a value without a prefix uses `default`.
    pub fn parse(stored: &str, default: Scheme) -> Result<StoredPassword, SchemeError> {
        if let Some(rest) = stored.strip_prefix('{') {
            if let Some((name, value)) = rest.split_once('}') {
                let (scheme, encoding) = Scheme::parse(name)?;
                return Ok(StoredPassword {
                    scheme,
                    encoding,
                    value: value.to_string(),
                });
            }
        }
        Ok(StoredPassword {
            scheme: default,
            encoding: Encoding::Default,
            value: stored.to_string(),
        })
    }

    pub fn is_slow(&self) -> bool {
        self.scheme.is_slow()
    }

    /// The clear-text password, when the scheme keeps it.
    pub fn plaintext(&self) -> Option<Vec<u8>> {
        match self.scheme {
            Scheme::Plain | Scheme::PlainTrunc => decode_explicit(&self.value, self.encoding),
            _ => None,
        }
    }

    /// Checks `password` against this stored value. Malformed stored
    /// values never verify.
    pub fn verify(&self, password: &[u8]) -> bool {
        let v = self.value.as_str();
        match self.scheme {
            Scheme::Plain => match decode_explicit(v, self.encoding) {
                Some(stored) => ct_eq(&stored, password),
                None => false,
            },
            Scheme::PlainTrunc => {
                // Dovecot's PLAIN-TRUNC: `<len>-<text>`, compares the first len bytes.
                let Some((len, text)) = v.split_once('-') else {
                    return ct_eq(v.as_bytes(), password);
                };
                let Ok(len) = len.parse::<usize>() else {
                    return false;
                };
                let pw = &password[..password.len().min(len)];
                ct_eq(text.as_bytes(), pw)
            }
            Scheme::PlainMd5 => self.digest_matches(&md5::Md5::digest(password), Encoding::Hex),
            Scheme::LdapMd5 => self.digest_matches(&md5::Md5::digest(password), Encoding::Base64),
            Scheme::Md5 => {
                if v.starts_with("$1$") {
                    crypt::md5_crypt_verify(password, v)
                } else {
                    self.digest_matches(&md5::Md5::digest(password), Encoding::Hex)
                }
            }
            Scheme::Sha1 => self.digest_matches(&sha1::Sha1::digest(password), Encoding::Base64),
            Scheme::Sha256 => {
                self.digest_matches(&sha2::Sha256::digest(password), Encoding::Base64)
            }
            Scheme::Sha512 => {
                self.digest_matches(&sha2::Sha512::digest(password), Encoding::Base64)
            }
            Scheme::Smd5 => self.salted_matches::<md5::Md5>(password),
            Scheme::Ssha => self.salted_matches::<sha1::Sha1>(password),
            Scheme::Ssha256 => self.salted_matches::<sha2::Sha256>(password),
            Scheme::Ssha512 => self.salted_matches::<sha2::Sha512>(password),
            Scheme::Md5Crypt => crypt::md5_crypt_verify(password, v),
            Scheme::Sha256Crypt => match std::str::from_utf8(password) {
                Ok(p) => sha_crypt::sha256_check(p, v).is_ok(),
                Err(_) => false,
            },
            Scheme::Sha512Crypt => match std::str::from_utf8(password) {
                Ok(p) => sha_crypt::sha512_check(p, v).is_ok(),
                Err(_) => false,
            },
            Scheme::BlfCrypt => bcrypt::verify(password, v).unwrap_or(false),
            Scheme::Argon2i | Scheme::Argon2id => crypt::argon2_verify(password, v),
            Scheme::Pbkdf2 => crypt::pbkdf2_verify(password, v),
            Scheme::CramMd5 => match self.decode_binary(Encoding::Hex) {
                Some(bytes) => {
                    let (i, o) = md5_state::hmac_contexts(password);
                    ct_eq(&md5_state::encode_contexts(i, o), &bytes)
                }
                None => false,
            },
            Scheme::ScramSha1 | Scheme::ScramSha256 => match ScramKeys::parse(self.scheme, v) {
                Some(keys) => keys.verify_password(password),
                None => false,
            },
        }
    }

    fn decode_binary(&self, default: Encoding) -> Option<Vec<u8>> {
        decode_digest(&self.value, self.encoding, default, None)
    }

    fn digest_matches(&self, digest: &[u8], default: Encoding) -> bool {
        match decode_digest(&self.value, self.encoding, default, Some(digest.len())) {
            Some(stored) => ct_eq(&stored, digest),
            None => false,
        }
    }

    fn salted_matches<D: sha1::Digest>(&self, password: &[u8]) -> bool {
        let size = <D as sha1::Digest>::output_size();
        let Some(stored) = decode_digest(&self.value, self.encoding, Encoding::Base64, None) else {
            return false;
        };
        if stored.len() <= size {
            return false;
        }
        let (digest, salt) = stored.split_at(size);
        let mut h = D::new();
        h.update(password);
        h.update(salt);
        ct_eq(&h.finalize(), digest)
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

fn decode_explicit(value: &str, encoding: Encoding) -> Option<Vec<u8>> {
    match encoding {
        Encoding::Default => Some(value.as_bytes().to_vec()),
        Encoding::Hex => hex::decode(value).ok(),
        Encoding::Base64 => B64.decode(value).ok(),
    }
}

/// Dovecot guesses the encoding of a binary digest from its length when
/// the name does not say: hex when it is exactly twice the digest size.
fn decode_digest(
    value: &str,
    explicit: Encoding,
    default: Encoding,
    size: Option<usize>,
) -> Option<Vec<u8>> {
    match explicit {
        Encoding::Hex => return hex::decode(value).ok(),
        Encoding::Base64 => return B64.decode(value).ok(),
        Encoding::Default => {}
    }
    if let Some(size) = size {
        if value.len() == size * 2 {
            if let Ok(b) = hex::decode(value) {
                return Some(b);
            }
        }
        return B64.decode(value).ok();
    }
    match default {
        Encoding::Hex => hex::decode(value).ok().or_else(|| B64.decode(value).ok()),
        _ => B64.decode(value).ok().or_else(|| hex::decode(value).ok()),
    }
}

/// Hashes `password` with `scheme`, returning `{SCHEME}value`. Slow
/// schemes use Dovecot's default costs (ARGON2ID m=65536 t=3, BLF-CRYPT
/// cost 5, crypt 5000 rounds, PBKDF2 5000 rounds, SCRAM 4096).
pub fn hash_password(scheme: Scheme, password: &str) -> Result<String, SchemeError> {
    let pw = password.as_bytes();
    let value = match scheme {
        Scheme::Plain => password.to_string(),
        Scheme::PlainTrunc => format!("{}-{}", password.len(), password),
        Scheme::PlainMd5 | Scheme::Md5 => hex::encode(md5::Md5::digest(pw)),
        Scheme::LdapMd5 => B64.encode(md5::Md5::digest(pw)),
        Scheme::Sha1 => B64.encode(sha1::Sha1::digest(pw)),
        Scheme::Sha256 => B64.encode(sha2::Sha256::digest(pw)),
        Scheme::Sha512 => B64.encode(sha2::Sha512::digest(pw)),
        Scheme::Smd5 => salted::<md5::Md5>(pw),
        Scheme::Ssha => salted::<sha1::Sha1>(pw),
        Scheme::Ssha256 => salted::<sha2::Sha256>(pw),
        Scheme::Ssha512 => salted::<sha2::Sha512>(pw),
        Scheme::Md5Crypt => crypt::md5_crypt(pw, &crypt::random_salt(8)),
        Scheme::Sha256Crypt => {
            let params = sha_crypt::Sha256Params::new(5000)
                .map_err(|_| SchemeError::CannotGenerate("SHA256-CRYPT"))?;
            sha_crypt::sha256_simple(password, &params)
                .map_err(|_| SchemeError::CannotGenerate("SHA256-CRYPT"))?
        }
        Scheme::Sha512Crypt => {
            let params = sha_crypt::Sha512Params::new(5000)
                .map_err(|_| SchemeError::CannotGenerate("SHA512-CRYPT"))?;
            sha_crypt::sha512_simple(password, &params)
                .map_err(|_| SchemeError::CannotGenerate("SHA512-CRYPT"))?
        }
        Scheme::BlfCrypt => bcrypt::hash_with_result(pw, 5)
            .map_err(|_| SchemeError::CannotGenerate("BLF-CRYPT"))?
            .format_for_version(bcrypt::Version::TwoY),
        Scheme::Argon2i => crypt::argon2_hash(pw, argon2::Algorithm::Argon2i, 32768, 4)
            .ok_or(SchemeError::CannotGenerate("ARGON2I"))?,
        Scheme::Argon2id => crypt::argon2_hash(pw, argon2::Algorithm::Argon2id, 65536, 3)
            .ok_or(SchemeError::CannotGenerate("ARGON2ID"))?,
        Scheme::Pbkdf2 => crypt::pbkdf2_hash(pw, 5000),
        Scheme::CramMd5 => {
            let (i, o) = md5_state::hmac_contexts(pw);
            hex::encode(md5_state::encode_contexts(i, o))
        }
        Scheme::ScramSha1 | Scheme::ScramSha256 => {
            let mut salt = [0u8; 16];
            rand::thread_rng().fill(&mut salt);
            ScramKeys::derive(scheme, pw, &salt, 4096).to_stored()
        }
    };
    Ok(format!("{{{}}}{}", scheme.name(), value))
}

fn salted<D: sha1::Digest>(password: &[u8]) -> String {
    let mut salt = [0u8; 8];
    rand::thread_rng().fill(&mut salt);
    let mut h = D::new();
    h.update(password);
    h.update(salt);
    let mut out = h.finalize().to_vec();
    out.extend_from_slice(&salt);
    B64.encode(out)
}

#[cfg(test)]
mod tests;
