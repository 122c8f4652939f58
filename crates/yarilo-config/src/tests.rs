use super::*;

#[test]
fn empty_file_is_all_defaults() {
    let config = Config::from_yaml("", "t.yaml").unwrap();
    assert_eq!(config.services.imaps.port, 993);
    let config = Config::from_yaml("# only a comment\n", "t.yaml").unwrap();
    assert_eq!(config.telemetry.listen, ":9090");
}

#[test]
fn misspelt_key_names_path_and_line() {
    let text = "general:\n  hostname: mx\nservices:\n  imaps:\n    port: 1993\n    ssl_mod: ssl\n";
    let err = Config::from_yaml(text, "y.yaml").unwrap_err().to_string();
    assert!(err.contains("services.imaps.ssl_mod"), "{err}");
    assert!(err.starts_with("y.yaml:6:"), "{err}");
    assert!(err.contains("unknown field `ssl_mod`"), "{err}");
}

#[test]
fn unknown_top_level_section_is_refused() {
    let err = Config::from_yaml("servics: {}\n", "y.yaml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("servics"), "{err}");
    assert!(err.starts_with("y.yaml:1:"), "{err}");
}

#[test]
fn wrong_type_names_the_key() {
    let err = Config::from_yaml("services:\n  imap:\n    port: lots\n", "y.yaml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("services.imap.port"), "{err}");
}

#[test]
fn partial_service_keeps_its_own_defaults() {
    let config = Config::from_yaml("services:\n  imaps:\n    address: 127.0.0.1\n", "t").unwrap();
    assert_eq!(config.services.imaps.port, 993);
    assert_eq!(config.services.imaps.ssl_mode, SslMode::Ssl);
    assert_eq!(config.services.imaps.address, "127.0.0.1");
    assert_eq!(config.services.pop3.port, 110);
}

#[test]
fn quoted_no_is_an_ssl_mode() {
    let config = Config::from_yaml("services:\n  lmtp:\n    ssl_mode: \"no\"\n", "t").unwrap();
    assert_eq!(config.services.lmtp.ssl_mode, SslMode::No);
}

#[test]
fn port_clash_is_refused() {
    let text = "services:\n  imap:\n    port: 993\n";
    let err = Config::from_yaml(text, "t").unwrap_err().to_string();
    assert!(
        err.contains("services.imaps.port") && err.contains("services.imap"),
        "{err}"
    );
}

#[test]
fn internal_tls_without_server_name_fails_loudly() {
    let text = "internal_tls:\n  enabled: true\n  cert: a\n  key: b\n  ca: c\n";
    let err = Config::from_yaml(text, "t").unwrap_err().to_string();
    assert!(err.contains("internal_tls.server_name"), "{err}");
}

#[test]
fn watchdog_timeout_must_be_shorter_than_interval() {
    let text = "telemetry:\n  liveness_watchdog:\n    liveness_watchdog_interval_seconds: 2\n    liveness_watchdog_timeout_seconds: 2\n";
    let err = Config::from_yaml(text, "t").unwrap_err().to_string();
    assert!(err.contains("liveness_watchdog_timeout_seconds"), "{err}");
}

#[test]
fn secrets_come_from_the_environment_and_never_render() {
    #[derive(Debug, serde::Deserialize)]
    struct Holder {
        password: Secret,
    }
    std::env::set_var("YARILO_CONFIG_TEST_SECRET", "s3cret");
    let h: Holder = serde_yaml::from_str("password: env:YARILO_CONFIG_TEST_SECRET").unwrap();
    assert_eq!(h.password.expose(), "s3cret");
    assert_eq!(format!("{:?}", h.password), "<hidden>");
    let missing = serde_yaml::from_str::<Holder>("password: env:YARILO_CONFIG_TEST_UNSET");
    assert!(missing
        .unwrap_err()
        .to_string()
        .contains("YARILO_CONFIG_TEST_UNSET"));
}

#[test]
fn dump_round_trips() {
    let config = Config::from_yaml("log:\n  format: json\n", "t").unwrap();
    let text = config.to_yaml().unwrap();
    let again = Config::from_yaml(&text, "dump").unwrap();
    assert_eq!(again.log.format, LogFormat::Json);
    assert_eq!(again.services, config.services);
}

#[test]
fn quota_status_defaults_are_dovecots_and_bad_values_name_the_key() {
    let q = Config::from_yaml("", "t").unwrap().quota_status;
    assert_eq!(q.listen, ":12340");
    assert_eq!(q.quota_status_success, "OK");
    assert_eq!(q.quota_status_nouser, "REJECT Unknown user");
    assert_eq!(q.quota_status_overquota, "554 5.2.2 %{error}");
    assert_eq!(q.quota_status_toolarge, "");
    for (text, key) in [
        ("quota_status:\n  listen: nowhere\n", "quota_status.listen"),
        (
            "quota_status:\n  quota_status_success: ''\n",
            "quota_status.quota_status_success",
        ),
        (
            "quota_status:\n  quota_status_toolarge: \"a\\nb\"\n",
            "quota_status.quota_status_toolarge",
        ),
        (
            "quota_status:\n  max_line_length: 100\n",
            "quota_status.max_line_length",
        ),
        (
            "quota_status:\n  read_timeout_seconds: 0\n",
            "quota_status.read_timeout_seconds",
        ),
        (
            "quota_status:\n  max_connections: 0\n",
            "quota_status.max_connections",
        ),
    ] {
        let err = Config::from_yaml(text, "t").unwrap_err().to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}

#[test]
fn session_bounds_have_defaults_and_refuse_nonsense() {
    let config = Config::from_yaml("", "t").unwrap();
    assert_eq!(config.imap.starttls_timeout_seconds, 30);
    assert_eq!(config.imap.write_timeout_seconds, 300);
    assert_eq!(config.imap.preauth_timeout_seconds, 180);
    assert_eq!(config.imap.append_buffer_bytes, 256 << 20);
    assert_eq!(config.submission.starttls_timeout_seconds, 30);
    for (text, key) in [
        (
            "imap:\n  write_timeout_seconds: 0\n",
            "imap.write_timeout_seconds",
        ),
        (
            "imap:\n  preauth_timeout_seconds: 0\n",
            "imap.preauth_timeout_seconds",
        ),
        (
            "imap:\n  append_limit: 1000\n  append_buffer_bytes: 999\n",
            "imap.append_buffer_bytes",
        ),
        (
            "submission:\n  starttls_timeout_seconds: 0\n",
            "submission.timeout_seconds",
        ),
    ] {
        let err = Config::from_yaml(text, "t").unwrap_err().to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}
