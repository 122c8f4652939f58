use super::*;

const GENERATED: &[Scheme] = &[
    Scheme::Plain,
    Scheme::PlainMd5,
    Scheme::LdapMd5,
    Scheme::Smd5,
    Scheme::Sha1,
    Scheme::Ssha,
    Scheme::Sha256,
    Scheme::Ssha256,
    Scheme::Sha512,
    Scheme::Ssha512,
    Scheme::Md5Crypt,
    Scheme::Sha256Crypt,
    Scheme::Sha512Crypt,
    Scheme::BlfCrypt,
    Scheme::Argon2i,
    Scheme::Pbkdf2,
    Scheme::CramMd5,
    Scheme::ScramSha1,
    Scheme::ScramSha256,
];

#[test]
fn every_generated_hash_verifies_and_rejects_a_wrong_password() {
    for &scheme in GENERATED {
        let stored = hash_password(scheme, "Corr3ct horse").unwrap();
        assert!(
            stored.starts_with(&format!("{{{}}}", scheme.name())),
            "{stored}"
        );
        let parsed = StoredPassword::parse(&stored, Scheme::Plain).unwrap();
        assert_eq!(parsed.scheme, scheme);
        assert!(parsed.verify(b"Corr3ct horse"), "{scheme}");
        assert!(!parsed.verify(b"corr3ct horse"), "{scheme}");
        assert!(!parsed.verify(b""), "{scheme}");
    }
}

#[test]
fn scheme_names_parse_case_insensitively_with_encodings() {
    assert_eq!(
        Scheme::parse("sha256.hex").unwrap(),
        (Scheme::Sha256, Encoding::Hex)
    );
    assert_eq!(
        Scheme::parse("PLAIN.B64").unwrap(),
        (Scheme::Plain, Encoding::Base64)
    );
    assert!(matches!(
        Scheme::parse("ROT13"),
        Err(SchemeError::Unknown(_))
    ));
}

#[test]
fn value_without_prefix_uses_the_default_scheme() {
    let p = StoredPassword::parse("secret", Scheme::Plain).unwrap();
    assert!(p.verify(b"secret"));
    let p = StoredPassword::parse("{PLAIN-MD5}5ebe2294ecd0e0f08eab7690d2a6ee69", Scheme::Plain)
        .unwrap();
    assert!(p.verify(b"secret"));
}

#[test]
fn malformed_stored_values_never_verify_nor_panic() {
    for stored in [
        "{SSHA}",
        "{SSHA}!!!",
        "{SHA512-CRYPT}$6$",
        "{BLF-CRYPT}$2y$99$xx",
        "{ARGON2ID}$argon2id$v=19$m=1",
        "{PBKDF2}$1$salt$0$00",
        "{PBKDF2}$1$salt$99999999999$00",
        "{CRAM-MD5}zz",
        "{SCRAM-SHA-256}4096,a,b",
        "{MD5-CRYPT}$1$",
        "{PLAIN-TRUNC}x-abc",
        "{unterminated",
    ] {
        let Ok(p) = StoredPassword::parse(stored, Scheme::Plain) else {
            continue;
        };
        let _ = p.verify(b"anything");
        let _ = p.verify(b"");
    }
}
