//! The LOOKUP port under internal mTLS: certificates from a test CA, role
//! checks per command, and the backend-reg sidecar registering over TLS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use yarilo_config::DirectorService;
use yarilo_director::backend_reg::{self, RegSettings};
use yarilo_director::service::{serve_tls, Shared};
use yarilo_director::DirectorId;
use yarilo_tls::ca::{write_pair, Authority};
use yarilo_tls::internal::InternalTls;
use yarilo_tls::Role;
use yarilo_wire::LineCodec;

const T: Duration = Duration::from_secs(10);
const NAME: &str = "yarilo-internal";

fn tls_for(dir: &Path, ca: &Authority, stem: &str, roles: &[Role]) -> InternalTls {
    let issued = ca.issue(&[NAME.to_string()], roles).unwrap();
    let (cert, key) = write_pair(dir, stem, &issued).unwrap();
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, &ca.cert_pem).unwrap();
    InternalTls::build(&cert, &key, &ca_path, NAME).unwrap()
}

async fn call<S>(c: &mut Framed<S, LineCodec>, line: &[&str]) -> Vec<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    c.send(line).await.unwrap();
    tokio::time::timeout(T, c.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn roles_decide_which_commands_a_peer_may_send() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::generate("test CA").unwrap();
    let server = tls_for(dir.path(), &ca, "director", &[Role::Director]);
    let login = tls_for(dir.path(), &ca, "login", &[Role::Login]);
    let reg = tls_for(dir.path(), &ca, "reg", &[Role::BackendReg]);

    let shared = Shared::from_config(&DirectorService::default(), DirectorId(1))
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_tls(shared, listener, server, std::future::pending()));

    // The sidecar registers over TLS with its backend-reg certificate.
    let settings = RegSettings {
        director_addr: addr.to_string(),
        interval: Duration::from_secs(1),
        ip: "127.0.0.41".parse().unwrap(),
        port: 143,
        tag: String::new(),
        vhosts: 100,
        readyz_urls: vec![],
        overload_percent: 0,
        overload_clear_percent: 0,
        tls: Some(reg.clone()),
    };
    let sidecar = tokio::spawn(backend_reg::run(settings, std::future::pending()));

    // A login pod may LOOKUP (once the registration landed) but not register.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut l = Framed::new(login.connect(tcp).await.unwrap(), LineCodec::default());
    tokio::time::timeout(T, l.next()).await.unwrap();
    l.send(&["VERSION", "director", "1", "0"][..])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let r = call(&mut l, &["LOOKUP", "ivy@d.test", ""]).await;
        if r[0] == "OK" {
            assert_eq!(r[1], "127.0.0.41");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sidecar never registered: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = call(&mut l, &["BACKEND-UP", "127.0.0.66", "1", "", "100", "1"]).await;
    assert_eq!(r[..2], ["FAIL", "FORBIDDEN"]);

    // A backend-reg certificate may register but not LOOKUP.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut b = Framed::new(reg.connect(tcp).await.unwrap(), LineCodec::default());
    tokio::time::timeout(T, b.next()).await.unwrap();
    b.send(&["VERSION", "director", "1", "0"][..])
        .await
        .unwrap();
    assert_eq!(
        call(&mut b, &["LOOKUP", "ivy@d.test", ""]).await[..2],
        ["FAIL", "FORBIDDEN"]
    );
    assert_eq!(
        call(&mut b, &["BACKEND-UP", "127.0.0.42", "1", "", "100", "1"]).await,
        ["OK"]
    );
    assert_eq!(call(&mut b, &["PING"]).await, ["PONG"]);

    // No client certificate: the handshake fails.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut plain = Framed::new(tcp, LineCodec::default());
    plain
        .send(&["VERSION", "director", "1", "0"][..])
        .await
        .unwrap();
    let end = tokio::time::timeout(T, plain.next()).await.unwrap();
    assert!(
        !matches!(end, Some(Ok(Ok(ref f))) if f[0] == "VERSION"),
        "{end:?}"
    );
    sidecar.abort();
}

/// Certificates from cert-manager (the charts) carry the deployment
/// seed's role SANs as DNS names, `<role>.role.yarilo.internal`: they
/// grant the role like `yarilo-role:` URIs do.
#[tokio::test]
async fn dns_role_sans_from_the_charts_grant_their_roles() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::generate("test CA").unwrap();
    let server = tls_for(dir.path(), &ca, "director", &[Role::Director]);
    let dns_only = |stem: &str, role_name: &str| {
        let issued = ca
            .issue(&[NAME.to_string(), role_name.to_string()], &[])
            .unwrap();
        let (cert, key) = write_pair(dir.path(), stem, &issued).unwrap();
        InternalTls::build(&cert, &key, &dir.path().join("ca.crt"), NAME).unwrap()
    };
    let reg = dns_only("reg-dns", "backend-reg.role.yarilo.internal");
    let login = dns_only("login-dns", "login.role.yarilo.internal");

    let shared = Shared::from_config(&DirectorService::default(), DirectorId(1))
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_tls(shared, listener, server, std::future::pending()));

    let connect = |tls: InternalTls| async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut c = Framed::new(tls.connect(tcp).await.unwrap(), LineCodec::default());
        tokio::time::timeout(T, c.next()).await.unwrap();
        c.send(&["VERSION", "director", "1", "0"][..])
            .await
            .unwrap();
        c
    };
    let mut b = connect(reg).await;
    assert_eq!(
        call(&mut b, &["BACKEND-UP", "127.0.0.43", "0", "", "100", "1"]).await,
        ["OK"],
        "backend-reg.role.yarilo.internal may register"
    );
    assert_eq!(
        call(&mut b, &["LOOKUP", "ivy@d.test", ""]).await[..2],
        ["FAIL", "FORBIDDEN"]
    );
    let mut l = connect(login).await;
    let r = call(&mut l, &["LOOKUP", "ivy@d.test", ""]).await;
    assert_eq!(
        r[..2],
        ["OK", "127.0.0.43"],
        "login.role.yarilo.internal may LOOKUP"
    );
    assert_eq!(
        call(&mut l, &["BACKEND-UP", "127.0.0.44", "0", "", "100", "1"]).await[..2],
        ["FAIL", "FORBIDDEN"]
    );
}
