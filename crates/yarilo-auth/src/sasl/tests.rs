use super::*;
use crate::scheme::{hash_password, ScramKeys};

fn stored(s: &str) -> StoredPassword {
    StoredPassword::parse(s, Scheme::Plain).unwrap()
}

#[test]
fn plain_with_initial_response_asks_to_verify_the_password() {
    let mut s = SaslServer::start(Mechanism::Plain, "mx");
    assert_eq!(
        s.begin(Some(b"\0alice\0s3cret")),
        SaslStep::VerifyPassword {
            authcid: "alice".into(),
            authzid: None,
            password: b"s3cret".to_vec()
        }
    );
    let mut s = SaslServer::start(Mechanism::Plain, "mx");
    assert_eq!(s.begin(None), SaslStep::Challenge(Vec::new()));
    assert!(matches!(
        s.step(b"no nuls"),
        SaslStep::Failure(SaslError::Malformed(_))
    ));
    let mut s = SaslServer::start(Mechanism::Plain, "mx");
    assert!(matches!(
        s.begin(Some(b"admin\0alice\0pw")),
        SaslStep::VerifyPassword {
            authzid: Some(_),
            ..
        }
    ));
}

#[test]
fn login_asks_user_then_password() {
    let mut s = SaslServer::start(Mechanism::Login, "mx");
    assert_eq!(s.begin(None), SaslStep::Challenge(b"Username:".to_vec()));
    assert_eq!(s.step(b"bob"), SaslStep::Challenge(b"Password:".to_vec()));
    assert_eq!(
        s.step(b"pw"),
        SaslStep::VerifyPassword {
            authcid: "bob".into(),
            authzid: None,
            password: b"pw".to_vec()
        }
    );
}

#[test]
fn cram_md5_works_with_plain_and_cram_md5_stored_passwords() {
    for st in [
        "{PLAIN}tanstaaftanstaaf".to_string(),
        hash_password(Scheme::CramMd5, "tanstaaftanstaaf").unwrap(),
    ] {
        let mut s = SaslServer::start(Mechanism::CramMd5, "mx.example");
        let SaslStep::Challenge(ch) = s.begin(None) else {
            panic!()
        };
        use hmac::Mac as _;
        let mut mac = hmac::Hmac::<md5::Md5>::new_from_slice(b"tanstaaftanstaaf").unwrap();
        mac.update(&ch);
        let resp = format!("tim {}", hex::encode(mac.finalize().into_bytes()));
        assert!(matches!(
            s.step(resp.as_bytes()),
            SaslStep::NeedCredentials { .. }
        ));
        assert!(matches!(
            s.credentials(&stored(&st)),
            SaslStep::Success { .. }
        ));

        let mut s = SaslServer::start(Mechanism::CramMd5, "mx.example");
        s.begin(None);
        s.step(b"tim 00112233445566778899aabbccddeeff");
        assert_eq!(
            s.credentials(&stored(&st)),
            SaslStep::Failure(SaslError::BadCredentials)
        );
    }
    let mut s = SaslServer::start(Mechanism::CramMd5, "mx");
    s.begin(None);
    s.step(b"tim 00");
    assert_eq!(
        s.credentials(&stored("{SHA256}x")),
        SaslStep::Failure(SaslError::CredentialsUnusable)
    );
}

/// RFC 7677 §3 example exchange.
#[test]
fn scram_sha_256_rfc7677_vector() {
    let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    let keys = ScramKeys::derive(Scheme::ScramSha256, b"pencil", &salt, 4096);
    let st = stored(&format!("{{SCRAM-SHA-256}}{}", keys.to_stored()));
    let mut s = SaslServer::start(Mechanism::ScramSha256, "mx");
    s.set_scram_nonce("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
    assert_eq!(
        s.begin(Some(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")),
        SaslStep::NeedCredentials {
            authcid: "user".into(),
            authzid: None
        }
    );
    assert_eq!(
        s.credentials(&st),
        SaslStep::Challenge(
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
                .to_vec()
        )
    );
    assert_eq!(
        s.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
        SaslStep::Success {
            authcid: "user".into(),
            authzid: None,
            additional: Some(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec())
        }
    );
}

#[test]
fn scram_rejects_wrong_proof_channel_binding_and_bad_grammar() {
    let mut s = SaslServer::start(Mechanism::ScramSha256, "mx");
    assert_eq!(
        s.begin(Some(b"p=tls-unique,,n=u,r=abc")),
        SaslStep::Failure(SaslError::ChannelBinding)
    );
    for bad in [
        &b"n,,"[..],
        b"n,,n=,r=x",
        b"x,,n=u,r=x",
        b"n,,n=u=ZZ,r=x",
        b"n,,m=ext,n=u,r=x",
    ] {
        let mut s = SaslServer::start(Mechanism::ScramSha1, "mx");
        assert!(
            matches!(s.begin(Some(bad)), SaslStep::Failure(_)),
            "{bad:?}"
        );
    }
    let mut s = SaslServer::start(Mechanism::ScramSha1, "mx");
    s.begin(Some(b"n,,n=u,r=abc"));
    let SaslStep::Challenge(first) = s.credentials(&stored("{PLAIN}pw")) else {
        panic!()
    };
    let first = String::from_utf8(first).unwrap();
    let nonce = first.split(',').next().unwrap();
    let fin = format!("c=biws,{nonce},p={}", B64.encode([0u8; 20]));
    assert_eq!(
        s.step(fin.as_bytes()),
        SaslStep::Failure(SaslError::BadCredentials)
    );
}

#[test]
fn over_long_messages_fail() {
    let mut s = SaslServer::start(Mechanism::Plain, "mx");
    assert_eq!(
        s.begin(Some(&vec![b'a'; MAX_MESSAGE + 1])),
        SaslStep::Failure(SaslError::TooLong)
    );
}

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

proptest::proptest! {
    #[test]
    fn arbitrary_client_messages_never_panic(
        first in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        second in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
    ) {
        for mech in Mechanism::ALL {
            let mut s = SaslServer::start(mech, "mx");
            let step = s.begin(Some(&first));
            if let SaslStep::NeedCredentials { .. } = step {
                let _ = s.credentials(&stored("{PLAIN}pw"));
            }
            let _ = s.step(&second);
            let _ = s.step(&first);
        }
    }

    #[test]
    fn arbitrary_scram_finals_never_panic(final_msg in "c=[a-zA-Z0-9=,]{0,20},r=[ -~]{0,40},p=[a-zA-Z0-9+/=]{0,60}") {
        let mut s = SaslServer::start(Mechanism::ScramSha256, "mx");
        s.begin(Some(b"n,,n=u,r=abc"));
        let _ = s.credentials(&stored("{PLAIN}pw"));
        let _ = s.step(final_msg.as_bytes());
    }
}
