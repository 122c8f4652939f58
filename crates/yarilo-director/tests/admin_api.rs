//! The admin HTTP API over real TCP: token and source checks, backends,
//! the user map (same precedence as LOOKUP), move, kick, flush.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use yarilo_config::{DirectorService, MailServer};
use yarilo_director::api::{run_api, ApiAccess};
use yarilo_director::service::Shared;
use yarilo_director::DirectorId;

const T: Duration = Duration::from_secs(10);

/// One HTTP/1.1 request with `Connection: close`; returns status and JSON.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let status: u16 = text[9..12].parse().unwrap();
    let json = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

async fn start(access: ApiAccess) -> SocketAddr {
    let config = DirectorService {
        user_kick_delay: 0,
        mail_servers: vec![
            MailServer {
                host: "127.0.0.11".into(),
                port: 143,
                tag: String::new(),
                vhosts: 100,
            },
            MailServer {
                host: "127.0.0.12".into(),
                port: 143,
                tag: String::new(),
                vhosts: 100,
            },
        ],
        ..DirectorService::default()
    };
    let shared = Shared::from_config(&config, DirectorId(1)).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(run_api(shared, listener, access, std::future::pending()));
    addr
}

fn access(token: &str) -> ApiAccess {
    ApiAccess {
        token: Some(token.into()),
        allowed_nets: vec![],
    }
}

#[tokio::test]
async fn requests_need_the_token_and_an_allowed_source() {
    let addr = start(ApiAccess::default()).await;
    let (status, _) = http(addr, "GET", "/api/director/status", Some("x"), None).await;
    assert_eq!(status, 401, "no token configured: closed");

    let addr = start(access("s3cret")).await;
    assert_eq!(
        http(addr, "GET", "/api/director/status", None, None)
            .await
            .0,
        401
    );
    assert_eq!(
        http(addr, "GET", "/api/director/status", Some("wrong"), None)
            .await
            .0,
        401
    );
    let (status, body) = http(addr, "GET", "/api/director/status", Some("s3cret"), None).await;
    assert_eq!(status, 200);
    assert_eq!(body["backends"], 2);

    let addr = start(ApiAccess {
        token: Some("t".into()),
        allowed_nets: vec!["10.0.0.0/8".parse().unwrap()],
    })
    .await;
    assert_eq!(
        http(addr, "GET", "/api/director/status", Some("t"), None)
            .await
            .0,
        403
    );
}

#[tokio::test]
async fn backends_map_move_kick_and_flush() {
    let addr = start(access("t")).await;
    let tok = Some("t");
    // Add, list, update, remove.
    let (s, _) = http(
        addr,
        "POST",
        "/api/director/backends",
        tok,
        Some(r#"{"ip":"127.0.0.13","port":143,"vhosts":50}"#),
    )
    .await;
    assert_eq!(s, 201);
    let (s, _) = http(
        addr,
        "POST",
        "/api/director/backends",
        tok,
        Some(r#"{"ip":"127.0.0.13"}"#),
    )
    .await;
    assert_eq!(s, 409);
    let (s, list) = http(addr, "GET", "/api/director/backends", tok, None).await;
    assert_eq!(s, 200);
    let added = list
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["ip"] == "127.0.0.13")
        .unwrap();
    assert_eq!(added["source"], "admin");
    assert_eq!(added["vhosts"], 50);
    let (s, _) = http(
        addr,
        "PUT",
        "/api/director/backends/127.0.0.13",
        tok,
        Some(r#"{"vhosts":100}"#),
    )
    .await;
    assert_eq!(s, 200);

    // Map pins like LOOKUP; a second call is not fresh.
    let (s, m) = http(
        addr,
        "GET",
        "/api/director/map?user=frank@d.test",
        tok,
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(m["fresh"], true);
    assert_eq!(m["backend"], m["hashed"]);
    let at = m["backend"].as_str().unwrap().to_string();
    let (_, m2) = http(
        addr,
        "GET",
        "/api/director/map?user=FRANK@d.test",
        tok,
        None,
    )
    .await;
    assert_eq!(m2["fresh"], false);
    assert_eq!(m2["backend"], at.as_str());

    // Move to another backend.
    let target = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
        .into_iter()
        .find(|i| *i != at)
        .unwrap();
    let body = format!(r#"{{"user":"frank@d.test","backend":"{target}"}}"#);
    let (s, mv) = http(addr, "POST", "/api/director/users/move", tok, Some(&body)).await;
    assert_eq!(s, 200, "{mv}");
    assert_eq!(mv["from"], at.as_str());
    let (_, m3) = http(
        addr,
        "GET",
        "/api/director/map?user=frank@d.test",
        tok,
        None,
    )
    .await;
    assert_eq!(m3["backend"], target);
    let (s, _) = http(
        addr,
        "POST",
        "/api/director/users/move",
        tok,
        Some(r#"{"user":"u","backend":"127.0.0.99"}"#),
    )
    .await;
    assert_eq!(s, 404);
    let (s, k) = http(
        addr,
        "POST",
        "/api/director/users/kick",
        tok,
        Some(r#"{"user":"frank@d.test"}"#),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(k["kicks"], 1);

    // Flush the pinned backend: the pin is dropped, new placements avoid it.
    let (s, _) = http(
        addr,
        "POST",
        &format!("/api/director/backends/{target}/flush?force=true"),
        tok,
        None,
    )
    .await;
    assert_eq!(s, 200);
    let (_, m4) = http(
        addr,
        "GET",
        "/api/director/map?user=frank@d.test",
        tok,
        None,
    )
    .await;
    assert_ne!(m4["backend"], target);
    assert_eq!(m4["fresh"], true);
    let (s, _) = http(
        addr,
        "DELETE",
        &format!("/api/director/backends/{target}/flush"),
        tok,
        None,
    )
    .await;
    assert_eq!(s, 200);

    let (s, r) = http(
        addr,
        "DELETE",
        "/api/director/backends/127.0.0.13",
        tok,
        None,
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        http(
            addr,
            "DELETE",
            "/api/director/backends/127.0.0.13",
            tok,
            None
        )
        .await
        .0,
        404
    );
    let (_, members) = http(addr, "GET", "/api/director/members", tok, None).await;
    assert_eq!(members.as_array().unwrap().len(), 1);
}

/// The binary's entry point: both ports from one YAML configuration,
/// metrics registered, and a clean stop.
#[tokio::test]
async fn director_component_serves_lookup_and_api_from_yaml() {
    use futures::{SinkExt, StreamExt};
    let yaml = "director_service:\n  listen: 127.0.0.1:0\n  api:\n    listen: 127.0.0.1:0\n    token: tok\n  mail_servers:\n    - host: 127.0.0.11\n      port: 993\n";
    let config = yarilo_config::Config::from_yaml(yaml, "t.yaml").unwrap();
    let component = yarilo_director::DirectorComponent::from_config(&config)
        .await
        .unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    component.register_metrics(&mut registry);
    let lookup = component.local_addr().unwrap();
    let api = component.api_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(component.serve(async {
        let _ = rx.await;
    }));
    let mut c = tokio_util::codec::Framed::new(
        TcpStream::connect(lookup).await.unwrap(),
        yarilo_wire::LineCodec::default(),
    );
    c.next().await.unwrap().unwrap().unwrap();
    c.send(&["VERSION", "director", "1", "0"][..])
        .await
        .unwrap();
    c.send(&["LOOKUP", "x", ""][..]).await.unwrap();
    let r = c.next().await.unwrap().unwrap().unwrap();
    assert_eq!(r, ["OK", "127.0.0.11", "993"]);
    let (s, body) = http(api, "GET", "/api/director/status", Some("tok"), None).await;
    assert_eq!(s, 200);
    assert_eq!(body["users"], 1);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("yarilo_director_lookups_total{result=\"ok\"} 1"),
        "{text}"
    );
    tx.send(()).unwrap();
    tokio::time::timeout(T, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
