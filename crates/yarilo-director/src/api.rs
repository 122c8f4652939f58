//! The admin HTTP API (`director_service.api.listen`, default `:9103`).
//!
//! Every request needs `Authorization: Bearer <token>` (compared in
//! constant time) and, when `allowed_nets` is set, a source address in
//! one of them. With no token configured every request is refused: the
//! API is closed until an operator sets one.
//!
//! Routes (JSON in and out):
//! - `GET /api/director/status`
//! - `GET /api/director/members`
//! - `GET /api/director/backends`
//! - `POST /api/director/backends` `{ip, port, tag, vhosts}`
//! - `PUT /api/director/backends/{ip}` `{vhosts}`
//! - `DELETE /api/director/backends/{ip}`
//! - `POST /api/director/backends/{ip}/flush[?force=true]`,
//!   `DELETE /api/director/backends/{ip}/flush`
//! - `GET /api/director/map?user=<u>&tag=<t>` — resolves (and pins) with
//!   the same precedence as LOOKUP
//! - `POST /api/director/users/move` `{user, tag, backend}`
//! - `POST /api/director/users/kick` `{user, tag}`

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tracing::info;
use yarilo_config::DirectorApi;

use crate::director::MoveError;
use crate::service::Shared;

/// Access rules of the API.
#[derive(Debug, Clone, Default)]
pub struct ApiAccess {
    /// `None`: every request is refused.
    pub token: Option<String>,
    /// Empty: every source address.
    pub allowed_nets: Vec<ipnet::IpNet>,
}

impl ApiAccess {
    pub fn from_config(c: &DirectorApi) -> ApiAccess {
        ApiAccess {
            token: c
                .token
                .as_ref()
                .map(|t| t.expose().to_string())
                .filter(|t| !t.is_empty()),
            allowed_nets: c.allowed_nets.clone(),
        }
    }
}

#[derive(Clone)]
struct Api {
    shared: Arc<Shared>,
    access: Arc<ApiAccess>,
}

/// Serves the API on `listener` until `shutdown` completes.
pub async fn run_api(
    shared: Arc<Shared>,
    listener: TcpListener,
    access: ApiAccess,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router(shared, access).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// The API's routes (for embedding or tests).
pub fn router(shared: Arc<Shared>, access: ApiAccess) -> Router {
    let api = Api {
        shared,
        access: Arc::new(access),
    };
    Router::new()
        .route("/api/director/status", get(status))
        .route("/api/director/members", get(members))
        .route(
            "/api/director/backends",
            get(list_backends).post(add_backend),
        )
        .route(
            "/api/director/backends/{ip}",
            put(update_backend).delete(remove_backend),
        )
        .route(
            "/api/director/backends/{ip}/flush",
            post(flush_backend).delete(unflush_backend),
        )
        .route("/api/director/map", get(map_user))
        .route("/api/director/users/move", post(move_user))
        .route("/api/director/users/kick", post(kick_user))
        .layer(middleware::from_fn_with_state(api.clone(), guard))
        .with_state(api)
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({ "error": msg.into() }))).into_response()
}

async fn guard(State(api): State<Api>, request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if !api.access.allowed_nets.is_empty()
        && !peer.is_some_and(|ip| api.access.allowed_nets.iter().any(|n| n.contains(&ip)))
    {
        return error(StatusCode::FORBIDDEN, "source address not allowed");
    }
    let Some(token) = api.access.token.as_deref() else {
        return error(
            StatusCode::UNAUTHORIZED,
            "no API token configured (director_service.api.token)",
        );
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
        return error(StatusCode::UNAUTHORIZED, "bad or missing bearer token");
    }
    next.run(request).await
}

async fn status(State(api): State<Api>) -> Json<Value> {
    let members = api.shared.ring().map_or(1, |r| r.members().len());
    let d = api.shared.director();
    let s = d.settings();
    Json(json!({
        "director_id": d.id().0,
        "members": members,
        "ring": api.shared.ring().is_some(),
        "lamport": d.lamport(),
        "backends": d.backends().len(),
        "users": d.users().len(),
        "user_table_bytes": d.users().table_bytes(),
        "sessions": d.sessions().len(),
        "assignment_policy": format!("{:?}", s.policy).to_lowercase(),
        "hash_mode": format!("{:?}", s.hash_mode).to_lowercase(),
        "username_hash": s.template.as_str(),
    }))
}

async fn members(State(api): State<Api>) -> Json<Value> {
    let id = api.shared.director().id().0;
    let Some(ring) = api.shared.ring() else {
        // No ring_secret: a ring of one.
        return Json(json!([{ "id": id, "self": true, "state": "up" }]));
    };
    let view = ring.membership();
    let links = ring.links();
    let (left, right) = (view.left(), view.right());
    let list: Vec<Value> = view
        .member_list()
        .into_iter()
        .map(|(addr, inc)| {
            json!({
                "addr": addr.to_string(),
                "id": crate::DirectorId::from_addr(addr).0,
                "incarnation": inc,
                "self": addr == ring.me(),
                "state": "up",
                "left_neighbour": Some(addr) == left,
                "right_neighbour": Some(addr) == right,
                "dialled": links.iter().any(|l| l.0 == addr && l.1),
                "accepted": links.iter().any(|l| l.0 == addr && !l.1),
            })
        })
        .collect();
    Json(Value::Array(list))
}

async fn list_backends(State(api): State<Api>) -> Json<Value> {
    let now = api.shared.now();
    let d = api.shared.director();
    let list: Vec<Value> = d
        .backends()
        .iter()
        .map(|(_, b)| {
            json!({
                "ip": b.ip.to_string(),
                "port": b.port,
                "tag": d.backends().tag_name(b.tag),
                "vhosts": b.vhosts,
                "source": b.source.as_str(),
                "draining": b.draining,
                "flushed": b.admin_drain,
                "sessions": b.sessions,
                "last_seen_ms_ago": now.saturating_sub(b.last_seen),
            })
        })
        .collect();
    Json(Value::Array(list))
}

#[derive(Deserialize)]
struct AddBackend {
    ip: IpAddr,
    #[serde(default)]
    port: u16,
    #[serde(default)]
    tag: String,
    #[serde(default = "default_vhosts")]
    vhosts: u32,
}

fn default_vhosts() -> u32 {
    100
}

async fn add_backend(State(api): State<Api>, Json(b): Json<AddBackend>) -> Response {
    if b.vhosts > 100 {
        return error(StatusCode::BAD_REQUEST, "vhosts must be from 0 to 100");
    }
    let now = api.shared.now();
    if api
        .shared
        .director()
        .add_admin(now, b.ip, b.port, &b.tag, b.vhosts)
    {
        info!(ip = %b.ip, tag = %b.tag, "backend added by admin");
        (StatusCode::CREATED, Json(json!({ "ip": b.ip.to_string() }))).into_response()
    } else {
        error(
            StatusCode::CONFLICT,
            "backend exists (or a limit is reached)",
        )
    }
}

#[derive(Deserialize)]
struct UpdateBackend {
    vhosts: u32,
}

async fn update_backend(
    State(api): State<Api>,
    Path(ip): Path<IpAddr>,
    Json(u): Json<UpdateBackend>,
) -> Response {
    if u.vhosts > 100 {
        return error(StatusCode::BAD_REQUEST, "vhosts must be from 0 to 100");
    }
    if api.shared.director().set_vhosts(ip, u.vhosts) {
        Json(json!({ "ip": ip.to_string(), "vhosts": u.vhosts })).into_response()
    } else {
        error(StatusCode::NOT_FOUND, "no such backend")
    }
}

async fn remove_backend(State(api): State<Api>, Path(ip): Path<IpAddr>) -> Response {
    let removal = api.shared.director().remove_admin(ip);
    match removal {
        Some(r) => {
            info!(%ip, users = r.users_unpinned, "backend removed by admin");
            api.shared.kick_removed(&r);
            Json(json!({
                "ip": ip.to_string(),
                "users_unpinned": r.users_unpinned,
                "sessions_kicked": r.sessions.len(),
            }))
            .into_response()
        }
        None => error(StatusCode::NOT_FOUND, "no such backend"),
    }
}

#[derive(Deserialize)]
struct FlushQuery {
    #[serde(default)]
    force: bool,
}

async fn flush_backend(
    State(api): State<Api>,
    Path(ip): Path<IpAddr>,
    Query(q): Query<FlushQuery>,
) -> Response {
    let users = api.shared.director().admin_flush(ip);
    let Some(users) = users else {
        return error(StatusCode::NOT_FOUND, "no such backend");
    };
    let n = users.len();
    info!(%ip, users = n, force = q.force, "backend flushed by admin");
    api.shared.drain_flushed(ip, users, q.force);
    Json(json!({ "ip": ip.to_string(), "users_to_move": n, "force": q.force })).into_response()
}

async fn unflush_backend(State(api): State<Api>, Path(ip): Path<IpAddr>) -> Response {
    if api.shared.director().admin_unflush(ip) {
        Json(json!({ "ip": ip.to_string(), "flushed": false })).into_response()
    } else {
        error(StatusCode::NOT_FOUND, "no such backend")
    }
}

#[derive(Deserialize)]
struct MapQuery {
    user: String,
    #[serde(default)]
    tag: String,
}

async fn map_user(State(api): State<Api>, Query(q): Query<MapQuery>) -> Response {
    // Same path as LOOKUP: a fresh resolve pins; a held user waits.
    let resolved = api.shared.resolve_user(&q.user, &q.tag).await;
    let now = api.shared.now();
    let mut d = api.shared.director();
    let hashed = d
        .hashed_backend(&q.user, &q.tag)
        .and_then(|id| d.backends().get(id))
        .map(|b| b.ip.to_string());
    match resolved {
        Ok(route) => {
            let expires = d.pin_of(now, &q.user, &q.tag).map(|(_, e)| e);
            Json(json!({
                "user": q.user,
                "tag": q.tag,
                "backend": route.ip.to_string(),
                "port": route.port,
                "hashed": hashed,
                "fresh": route.fresh,
                "expires_at_secs": expires,
            }))
            .into_response()
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[derive(Deserialize)]
struct MoveBody {
    user: String,
    #[serde(default)]
    tag: String,
    backend: IpAddr,
}

async fn move_user(State(api): State<Api>, Json(m): Json<MoveBody>) -> Response {
    match api.shared.move_user(&m.user, &m.tag, m.backend) {
        Ok(moved) => Json(json!({
            "user": m.user,
            "from": moved.from.map(|ip| ip.to_string()),
            "to": moved.to.to_string(),
        }))
        .into_response(),
        Err(e @ MoveError::UnknownBackend(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ MoveError::WrongTag { .. }) => error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

#[derive(Deserialize)]
struct KickBody {
    user: String,
    #[serde(default)]
    tag: String,
}

async fn kick_user(State(api): State<Api>, Json(k): Json<KickBody>) -> Json<Value> {
    let n = api.shared.kick_user(&k.user, &k.tag);
    Json(json!({ "user": k.user, "kicks": n }))
}
