//! The crypt-style schemes we implement around library primitives:
//! MD5-crypt (the `$1$` algorithm of FreeBSD's crypt), Argon2 PHC strings
//! and Dovecot's PBKDF2 layout.

use md5::{Digest as _, Md5};
use rand::Rng as _;
use subtle::ConstantTimeEq as _;

const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `n` random characters of the crypt alphabet.
pub(super) fn random_salt(n: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..n)
        .map(|_| ITOA64[rng.gen_range(0..64)] as char)
        .collect()
}

fn to64(out: &mut String, mut v: u32, n: usize) {
    for _ in 0..n {
        out.push(ITOA64[(v & 0x3f) as usize] as char);
        v >>= 6;
    }
}

/// `$1$salt$hash` for `password`; the salt is cut at 8 bytes and at `$`.
pub(super) fn md5_crypt(password: &[u8], salt: &str) -> String {
    let salt = salt.split('$').next().unwrap_or("");
    let salt = &salt.as_bytes()[..salt.len().min(8)];
    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let alt = alt.finalize();

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(b"$1$");
    ctx.update(salt);
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut f = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(f);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(f);
        } else {
            c.update(password);
        }
        f = c.finalize();
    }
    let mut out = String::with_capacity(34);
    out.push_str("$1$");
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        let v = (u32::from(f[a]) << 16) | (u32::from(f[b]) << 8) | u32::from(f[c]);
        to64(&mut out, v, 4);
    }
    to64(&mut out, u32::from(f[11]), 2);
    out
}

pub(super) fn md5_crypt_verify(password: &[u8], stored: &str) -> bool {
    let Some(rest) = stored.strip_prefix("$1$") else {
        return false;
    };
    let Some((salt, _)) = rest.split_once('$') else {
        return false;
    };
    let computed = md5_crypt(password, salt);
    computed.len() == stored.len() && bool::from(computed.as_bytes().ct_eq(stored.as_bytes()))
}

pub(super) fn argon2_verify(password: &[u8], stored: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier as _};
    match PasswordHash::new(stored) {
        Ok(hash) => argon2::Argon2::default()
            .verify_password(password, &hash)
            .is_ok(),
        Err(_) => false,
    }
}

pub(super) fn argon2_hash(
    password: &[u8],
    algorithm: argon2::Algorithm,
    memory_kib: u32,
    iterations: u32,
) -> Option<String> {
    use argon2::password_hash::{PasswordHasher as _, SaltString};
    let mut salt = [0u8; 16];
    rand::thread_rng().fill(&mut salt);
    let salt = SaltString::encode_b64(&salt).ok()?;
    let params = argon2::Params::new(memory_kib, iterations, 1, Some(32)).ok()?;
    let hasher = argon2::Argon2::new(algorithm, argon2::Version::V0x13, params);
    hasher
        .hash_password(password, &salt)
        .ok()
        .map(|h| h.to_string())
}

/// Dovecot PBKDF2: `$1$<salt>$<rounds>$<hex of 20-byte PBKDF2-HMAC-SHA1>`,
/// the salt used as its text bytes.
pub(super) fn pbkdf2_verify(password: &[u8], stored: &str) -> bool {
    let mut parts = stored.split('$');
    let (Some(""), Some("1"), Some(salt), Some(rounds), Some(hash), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let Ok(rounds) = rounds.parse::<u32>() else {
        return false;
    };
    // Refuse absurd costs a hostile passdb row could use to pin a CPU.
    if rounds == 0 || rounds > 10_000_000 {
        return false;
    }
    let Ok(want) = hex::decode(hash) else {
        return false;
    };
    if want.is_empty() || want.len() > 64 {
        return false;
    }
    let mut got = vec![0u8; want.len()];
    if pbkdf2::pbkdf2::<hmac::Hmac<sha1::Sha1>>(password, salt.as_bytes(), rounds, &mut got)
        .is_err()
    {
        return false;
    }
    bool::from(got.ct_eq(&want))
}

pub(super) fn pbkdf2_hash(password: &[u8], rounds: u32) -> String {
    let salt = random_salt(16).replace(['.', '/'], "x");
    let mut out = [0u8; 20];
    // Only fails for an output longer than the PRF allows; 20 bytes is fine.
    let _ = pbkdf2::pbkdf2::<hmac::Hmac<sha1::Sha1>>(password, salt.as_bytes(), rounds, &mut out);
    format!("$1${salt}${rounds}${}", hex::encode(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_crypt_matches_a_known_vector() {
        // From doveadm pw -s MD5-CRYPT -p 'sécret pw'.
        assert!(md5_crypt_verify(
            "sécret pw".as_bytes(),
            "$1$sA4ScOPH$ehGl4qXZx5iL6dvavkp4B/"
        ));
        assert!(!md5_crypt_verify(
            b"secret pw",
            "$1$sA4ScOPH$ehGl4qXZx5iL6dvavkp4B/"
        ));
    }
}
