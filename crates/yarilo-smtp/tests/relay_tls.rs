//! The relay's certificate is checked against the platform's roots by
//! default, or against `submission.relay_ssl_ca_file` when it is set: a
//! loopback relay with a certificate from a test CA is trusted only
//! through the override.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use yarilo_config::{Config, RelaySsl};
use yarilo_smtp::relay::{relay_roots_with_source, RelayConnector, RelayError, RootSource};
use yarilo_smtp::SubmissionSettings;

/// A relay speaking implicit TLS on 127.0.0.1:0 with a certificate for
/// `127.0.0.1` issued by a fresh test CA; answers the greeting, EHLO and
/// QUIT. Returns its port and the CA's PEM file.
async fn tls_relay(dir: &std::path::Path) -> (u16, std::path::PathBuf) {
    let ca = yarilo_tls::ca::Authority::generate("yarilo test relay CA").unwrap();
    let leaf = ca.issue(&["127.0.0.1".to_string()], &[]).unwrap();
    let (cert, key) = yarilo_tls::ca::write_pair(dir, "relay", &leaf).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(yarilo_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            yarilo_tls::load_certs(&cert).unwrap(),
            yarilo_tls::load_key(&key).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that does not trust us ends the handshake.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (r, mut w) = tokio::io::split(tls);
                let mut lines = BufReader::new(r).lines();
                let _ = w.write_all(b"220 relay.test ESMTP\r\n").await;
                while let Ok(Some(l)) = lines.next_line().await {
                    let verb = l.split(' ').next().unwrap_or("").to_ascii_uppercase();
                    let reply: &[u8] = match verb.as_str() {
                        "EHLO" => b"250 relay.test\r\n",
                        "QUIT" => b"221 2.0.0 Bye\r\n",
                        _ => b"502 5.5.1 Not here\r\n",
                    };
                    let _ = w.write_all(reply).await;
                    if verb == "QUIT" {
                        return;
                    }
                }
            });
        }
    });
    (port, ca_file)
}

fn settings(yaml: &str, port: u16) -> SubmissionSettings {
    let config = Config::from_yaml(yaml, "test").unwrap();
    let mut s = SubmissionSettings::from_config(&config);
    s.relay.host = "127.0.0.1".into();
    s.relay.port = port;
    s.relay.ssl = RelaySsl::Ssl;
    s.relay.connect_timeout = Duration::from_secs(10);
    s.relay.command_timeout = Duration::from_secs(10);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_a_private_ca_is_trusted_through_the_ca_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let (port, ca_file) = tls_relay(dir.path()).await;

    // Without the override: the platform's roots, which do not hold the
    // test CA.
    let s = settings("submission: {}\n", port);
    assert_eq!(s.relay.ssl_ca_file, "");
    assert!(s.relay.ssl_verify);
    match RelayConnector::new(s.relay).connect().await {
        Err(RelayError::Tls(e)) => assert!(e.contains("UnknownIssuer"), "{e}"),
        Err(e) => panic!("expected a TLS refusal, got {e}"),
        Ok(_) => panic!("a certificate from an unknown CA was trusted"),
    }

    // With it: the handshake, greeting and EHLO go through.
    let s = settings(
        &format!(
            "submission: {{ relay_ssl_ca_file: '{}' }}\n",
            ca_file.display()
        ),
        port,
    );
    assert_eq!(s.relay.ssl_ca_file, ca_file.display().to_string());
    let relay = RelayConnector::new(s.relay)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("relay with the test CA refused: {e}"));
    relay.quit().await;
}

#[test]
fn the_default_roots_come_from_the_platform_or_the_builtin_list() {
    let (roots, source) = relay_roots_with_source("").unwrap();
    assert!(!roots.is_empty());
    assert!(
        matches!(source, RootSource::Platform | RootSource::Builtin),
        "{source:?}"
    );
}

#[test]
fn a_ca_file_override_is_used_alone_and_must_hold_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = yarilo_tls::ca::Authority::generate("override CA").unwrap();
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, &ca.cert_pem).unwrap();
    let (roots, source) = relay_roots_with_source(path.to_str().unwrap()).unwrap();
    assert_eq!((roots.len(), source), (1, RootSource::File));

    let missing = dir.path().join("missing.pem");
    let e = relay_roots_with_source(missing.to_str().unwrap()).unwrap_err();
    assert!(e.contains("missing.pem"), "{e}");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let e = relay_roots_with_source(empty.to_str().unwrap()).unwrap_err();
    assert!(e.contains("empty.pem"), "{e}");
}
