//! The auth service behind internal mTLS (yarilo-tls): a client with a
//! certificate from the cluster CA and the pinned name gets in; plain TCP
//! and certificates from another CA do not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use yarilo_auth::client::{AuthClient, ClientSettings};
use yarilo_auth::db::{Db, StaticDb};
use yarilo_auth::service::{self, ServiceSettings};
use yarilo_auth::{AuthReply, Authenticator, Scheme};
use yarilo_tls::ca::{write_pair, Authority};
use yarilo_tls::internal::InternalTls;
use yarilo_tls::Role;

fn material(dir: &Path, ca_name: &str) -> InternalTls {
    let ca = Authority::generate(ca_name).unwrap();
    std::fs::write(dir.join("ca.crt"), &ca.cert_pem).unwrap();
    let issued = ca
        .issue(&["yarilo-internal".into()], &[Role::Auth, Role::Login])
        .unwrap();
    let (c, k) = write_pair(dir, "tls", &issued).unwrap();
    InternalTls::build(&c, &k, &dir.join("ca.crt"), "yarilo-internal").unwrap()
}

fn client(addr: std::net::SocketAddr, tls: Option<InternalTls>) -> AuthClient {
    AuthClient::new(ClientSettings {
        address: addr.to_string(),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        tls,
    })
}

#[tokio::test]
async fn auth_over_mutual_tls_with_the_pinned_name() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let tls = material(dir.path(), "cluster CA");
    let foreign = material(other.path(), "someone else's CA");

    let db = Db::Static(StaticDb::new("password=secret", Scheme::Plain));
    let auth = Arc::new(Authenticator::new(common::settings(), vec![db], vec![]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let acceptor = tls.acceptor();
    let server = tokio::spawn(async move {
        service::run(
            listener,
            auth,
            ServiceSettings::default(),
            Some(acceptor),
            async {
                let _ = stopped.await;
            },
        )
        .await
    });

    let good = client(addr, Some(tls.clone()));
    let r = common::request("192.0.2.3", "imap", "s");
    let AuthReply::Success(ok) = good.login_plain(&r, "anyone", "secret").await.unwrap() else {
        panic!("mTLS login failed");
    };
    assert!(good
        .verify(&ok.token, "s", "imap", "")
        .await
        .unwrap()
        .is_ok());

    assert!(client(addr, None)
        .login_plain(&r, "anyone", "secret")
        .await
        .is_err());
    assert!(client(addr, Some(foreign))
        .login_plain(&r, "anyone", "secret")
        .await
        .is_err());
    let wrong_name = tls.with_server_name("not-the-pinned-name").unwrap();
    assert!(client(addr, Some(wrong_name))
        .login_plain(&r, "anyone", "secret")
        .await
        .is_err());

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
