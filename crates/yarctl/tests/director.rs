#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `yarctl director` against a real director (in this process) over HTTP.

use std::process::Command;

const YARCTL: &str = env!("CARGO_BIN_EXE_yarctl");

fn yarctl(api: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(YARCTL)
        .args(["director", "--api", api])
        .args(args)
        .env("YARILO_DIRECTOR_TOKEN", "t0ken")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_director_command_works_end_to_end() {
    let yaml = "director_service:\n  listen: 127.0.0.1:0\n  user_kick_delay: -1\n  api:\n    listen: 127.0.0.1:0\n    token: t0ken\n  mail_servers:\n    - host: 127.0.0.2\n      port: 143\n";
    let config = yarilo_config::Config::from_yaml(yaml, "test").unwrap();
    let director = yarilo_director::DirectorComponent::from_config(&config)
        .await
        .unwrap();
    let api = format!("http://{}", director.api_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(director.serve(async {
        let _ = stopped.await;
    }));

    let api2 = api.clone();
    tokio::task::spawn_blocking(move || {
        let api = api2.as_str();
        let (ok, out, err) = yarctl(api, &["status"]);
        assert!(ok, "{err}");
        assert!(out.contains('{'), "{out}");
        assert!(yarctl(api, &["members"]).0);

        let (ok, _, err) = yarctl(
            api,
            &[
                "backends",
                "add",
                "127.0.0.3",
                "--port",
                "143",
                "--vhosts",
                "50",
            ],
        );
        assert!(ok, "{err}");
        let (_, out, _) = yarctl(api, &["backends", "list"]);
        assert!(
            out.contains("127.0.0.2") && out.contains("127.0.0.3"),
            "{out}"
        );
        assert!(yarctl(api, &["backends", "update", "127.0.0.3", "--vhosts", "10"]).0);

        let (ok, out, err) = yarctl(api, &["map", "alice@example.org"]);
        assert!(ok, "{err}");
        let target = if out.contains("127.0.0.2") {
            "127.0.0.3"
        } else {
            "127.0.0.2"
        };
        let (ok, _, err) = yarctl(api, &["move", "alice@example.org", target]);
        assert!(ok, "{err}");
        let (_, out, _) = yarctl(api, &["map", "alice@example.org"]);
        assert!(out.contains(target), "moved user maps to {target}: {out}");
        assert!(yarctl(api, &["kick", "alice@example.org"]).0);

        assert!(yarctl(api, &["backends", "flush", "127.0.0.3"]).0);
        assert!(yarctl(api, &["backends", "unflush", "127.0.0.3"]).0);
        assert!(yarctl(api, &["backends", "remove", "127.0.0.3"]).0);
        let (_, out, _) = yarctl(api, &["backends", "list"]);
        assert!(!out.contains("127.0.0.3"), "{out}");

        // Errors are explained, and exit non-zero.
        let out = Command::new(YARCTL)
            .args(["director", "--api", api, "--token", "wrong", "status"])
            .env_remove("YARILO_DIRECTOR_TOKEN")
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("401"));
        let (ok, _, err) = yarctl("http://127.0.0.1:1", &["status"]);
        assert!(!ok && err.contains("cannot reach"), "{err}");
    })
    .await
    .unwrap();
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
