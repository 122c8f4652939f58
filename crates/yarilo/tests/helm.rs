//! The Helm charts under `helm/`, checked against this build of the binary.
//!
//! Each test runs one check of `helm/tests/charttest.py` (see its header):
//! the charts rendered with every values set under `helm/tests/values/`,
//! linted, validated against the Kubernetes schemas, every rendered
//! `yarilo.yaml` passed through `yarilo config check`, every container
//! command and port matched to what the binary really does. helm and
//! kubernetes-validate come from `scripts/setup-dev`; without them the
//! check fails and says so.

use std::path::PathBuf;
use std::process::Command;

fn charttest(check: &str) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("helm/tests/charttest.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--yarilo")
        .arg(env!("CARGO_BIN_EXE_yarilo"))
        .arg(check)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run python3 {}: {e} (run scripts/setup-dev)",
                script.display()
            )
        });
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "charttest.py {check} failed");
}

#[test]
fn charts_pass_helm_lint_strict_with_every_values_set() {
    charttest("lint");
}

#[test]
fn rendered_objects_validate_against_three_kubernetes_versions_strictly() {
    charttest("kubernetes");
}

#[test]
fn every_rendered_config_passes_yarilo_config_check() {
    charttest("configs");
}

#[test]
fn every_container_runs_a_real_yarilo_subcommand() {
    charttest("commands");
}

#[test]
fn every_service_and_probe_port_is_one_the_config_listens_on() {
    charttest("ports");
}

#[test]
fn chart_unit_tests_and_refused_values() {
    charttest("unit");
}

#[test]
fn schemas_readmes_and_common_values_are_generated_and_current() {
    charttest("generated");
}

#[test]
fn object_counts_per_chart_and_values_set() {
    charttest("counts");
}
