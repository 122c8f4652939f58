//! CRAM-MD5 (RFC 2195): the server sends `<random.time@host>`, the client
//! answers `user SP hex(HMAC-MD5(password, challenge))`. Works with a
//! PLAIN or `{CRAM-MD5}` stored password only.

use subtle::ConstantTimeEq as _;

use super::{utf8, SaslError, SaslStep};
use crate::scheme::md5_state;
use crate::scheme::{Scheme, StoredPassword};

#[derive(Debug)]
pub(super) struct CramMd5 {
    challenge: Vec<u8>,
    pending: Option<(String, Vec<u8>)>,
}

impl CramMd5 {
    pub(super) fn new(host: &str, nonce: &[u8]) -> CramMd5 {
        let word = |bytes: &[u8]| bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let n1 = word(&nonce[..nonce.len().min(8)]);
        let n2 = word(nonce.get(8..16).unwrap_or(&[]));
        let host: String = host
            .chars()
            .filter(|c| c.is_ascii_graphic() && *c != '>')
            .collect();
        CramMd5 {
            challenge: format!("<{n1}.{n2}@{host}>").into_bytes(),
            pending: None,
        }
    }

    pub(super) fn challenge(&self) -> Vec<u8> {
        self.challenge.clone()
    }

    pub(super) fn step(&mut self, data: &[u8]) -> SaslStep {
        if self.pending.is_some() {
            return SaslStep::Failure(SaslError::OutOfOrder);
        }
        let Some(space) = data.iter().rposition(|b| *b == b' ') else {
            return SaslStep::Failure(SaslError::Malformed("CRAM-MD5 needs user SP digest"));
        };
        let user = match utf8(&data[..space], "CRAM-MD5 user") {
            Ok(u) if !u.is_empty() => u,
            Ok(_) => return SaslStep::Failure(SaslError::Malformed("empty CRAM-MD5 user")),
            Err(e) => return SaslStep::Failure(e),
        };
        let Ok(digest) = hex::decode(&data[space + 1..]) else {
            return SaslStep::Failure(SaslError::Malformed("CRAM-MD5 digest is not hex"));
        };
        self.pending = Some((user.clone(), digest));
        SaslStep::NeedCredentials {
            authcid: user,
            authzid: None,
        }
    }

    pub(super) fn credentials(&mut self, stored: &StoredPassword) -> SaslStep {
        let Some((user, digest)) = self.pending.take() else {
            return SaslStep::Failure(SaslError::OutOfOrder);
        };
        let contexts = if let Some(plain) = stored.plaintext() {
            md5_state::hmac_contexts(&plain)
        } else if stored.scheme == Scheme::CramMd5 {
            let bytes = match stored.encoding {
                crate::scheme::Encoding::Base64 => {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .decode(&stored.value)
                        .ok()
                }
                _ => hex::decode(&stored.value).ok(),
            };
            match bytes.as_deref().and_then(md5_state::decode_contexts) {
                Some(c) => c,
                None => return SaslStep::Failure(SaslError::CredentialsUnusable),
            }
        } else {
            return SaslStep::Failure(SaslError::CredentialsUnusable);
        };
        let want = md5_state::hmac_from_contexts(contexts.0, contexts.1, &self.challenge);
        if want.len() == digest.len() && bool::from(want.ct_eq(&digest)) {
            SaslStep::Success {
                authcid: user,
                authzid: None,
                additional: None,
            }
        } else {
            SaslStep::Failure(SaslError::BadCredentials)
        }
    }
}
