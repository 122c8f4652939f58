//! `yarctl director`: the director's admin API from the command line.
//! Every command is one HTTP request; the answer is printed as JSON.

use anyhow::{bail, Context};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct DirectorArgs {
    /// Base URL of the admin API (`director_service.api.listen`).
    #[arg(
        long,
        env = "YARILO_DIRECTOR_API",
        default_value = "http://127.0.0.1:9103",
        global = true
    )]
    api: String,
    /// Bearer token (`director_service.api.token`).
    #[arg(
        long,
        env = "YARILO_DIRECTOR_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,
    #[command(subcommand)]
    command: DirectorCmd,
}

#[derive(clap::Subcommand)]
enum DirectorCmd {
    /// Counts, policy, hash mode, template.
    Status,
    /// Ring members.
    Members,
    /// Backends: list, add, remove, change weight, flush.
    Backends {
        #[command(subcommand)]
        command: BackendsCmd,
    },
    /// Where a user goes (pins the user, as a LOOKUP would).
    Map {
        user: String,
        #[arg(long, default_value = "")]
        tag: String,
    },
    /// Move a user to another backend (kicks its sessions on the old one).
    Move {
        user: String,
        /// IP address of the target backend.
        backend: String,
        #[arg(long, default_value = "")]
        tag: String,
    },
    /// Kick a user's sessions.
    Kick {
        user: String,
        #[arg(long, default_value = "")]
        tag: String,
    },
}

#[derive(clap::Subcommand)]
enum BackendsCmd {
    List,
    /// Add a backend by hand (it never expires).
    Add {
        ip: String,
        #[arg(long, default_value_t = 0)]
        port: u16,
        #[arg(long, default_value = "")]
        tag: String,
        #[arg(long, default_value_t = 100)]
        vhosts: u32,
    },
    /// Remove a backend: its users are re-placed and their sessions kicked.
    Remove {
        ip: String,
    },
    /// Change a backend's weight (0–100).
    Update {
        ip: String,
        #[arg(long)]
        vhosts: u32,
    },
    /// Drain a backend: no new users; with --force, kick its users now.
    Flush {
        ip: String,
        #[arg(long)]
        force: bool,
    },
    /// End a flush.
    Unflush {
        ip: String,
    },
}

pub async fn run(args: DirectorArgs) -> anyhow::Result<()> {
    let base = args.api.trim_end_matches('/').to_string();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()?;
    let (method, path, body): (Method, String, Option<Value>) = match args.command {
        DirectorCmd::Status => (Method::GET, "/api/director/status".into(), None),
        DirectorCmd::Members => (Method::GET, "/api/director/members".into(), None),
        DirectorCmd::Map { user, tag } => (
            Method::GET,
            format!(
                "/api/director/map?user={}&tag={}",
                encode(&user),
                encode(&tag)
            ),
            None,
        ),
        DirectorCmd::Move { user, backend, tag } => (
            Method::POST,
            "/api/director/users/move".into(),
            Some(json!({"user": user, "tag": tag, "backend": backend})),
        ),
        DirectorCmd::Kick { user, tag } => (
            Method::POST,
            "/api/director/users/kick".into(),
            Some(json!({"user": user, "tag": tag})),
        ),
        DirectorCmd::Backends { command } => match command {
            BackendsCmd::List => (Method::GET, "/api/director/backends".into(), None),
            BackendsCmd::Add {
                ip,
                port,
                tag,
                vhosts,
            } => (
                Method::POST,
                "/api/director/backends".into(),
                Some(json!({"ip": ip, "port": port, "tag": tag, "vhosts": vhosts})),
            ),
            BackendsCmd::Remove { ip } => (
                Method::DELETE,
                format!("/api/director/backends/{}", encode(&ip)),
                None,
            ),
            BackendsCmd::Update { ip, vhosts } => (
                Method::PUT,
                format!("/api/director/backends/{}", encode(&ip)),
                Some(json!({ "vhosts": vhosts })),
            ),
            BackendsCmd::Flush { ip, force } => (
                Method::POST,
                format!("/api/director/backends/{}/flush?force={force}", encode(&ip)),
                None,
            ),
            BackendsCmd::Unflush { ip } => (
                Method::DELETE,
                format!("/api/director/backends/{}/flush", encode(&ip)),
                None,
            ),
        },
    };
    let mut req = client.request(method, format!("{base}{path}"));
    if let Some(token) = &args.token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("cannot reach the director admin API at {base}"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    let shown = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(text);
    if status.is_success() {
        println!("{shown}");
        return Ok(());
    }
    match status {
        StatusCode::UNAUTHORIZED => {
            bail!("401: wrong or missing token (--token or YARILO_DIRECTOR_TOKEN): {shown}")
        }
        StatusCode::FORBIDDEN => {
            bail!("403: this address is not in director_service.api.allowed_nets: {shown}")
        }
        s => bail!("{s}: {shown}"),
    }
}

/// Percent-encodes a query or path component.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
