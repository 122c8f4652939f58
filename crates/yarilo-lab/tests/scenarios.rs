#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The scenario files, without running them: every file in `scenarios/`
//! loads, the committed schema is the one the runner's types generate, a
//! fault a substrate cannot produce fails the load, every checker has a
//! negative control, and the kind substrate's plan makes the API calls each
//! fault needs.

use std::path::{Path, PathBuf};

use yarilo_lab::scenario::{self, Capability, CheckKind, SubstrateKind};
use yarilo_lab::substrate::kind;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn all() -> Vec<(PathBuf, scenario::Scenario)> {
    let mut v: Vec<_> = std::fs::read_dir(root().join("scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let s = scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            (p, s)
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn every_scenario_file_loads_and_is_named_after_its_file() {
    let all = all();
    assert!(all.len() >= 12, "{} scenarios", all.len());
    for (p, s) in &all {
        assert_eq!(p.file_stem().unwrap().to_str().unwrap(), s.name);
    }
}

#[test]
fn the_committed_schema_is_the_generated_one() {
    let committed = std::fs::read_to_string(root().join("scenarios/schema.json")).unwrap();
    assert!(
        committed == scenario::schema_json(),
        "scenarios/schema.json is stale: run `yarilo-lab schema > scenarios/schema.json`"
    );
}

#[test]
fn the_issue_s_scenarios_are_all_there() {
    let names: Vec<String> = all().into_iter().map(|(_, s)| s.name).collect();
    for n in [
        "backend-failover",
        "backend-rolling",
        "ring-churn",
        "director-formation",
        "director-formation-lb",
        "redis-loss",
        "cert-rotation",
    ] {
        assert!(names.contains(&n.to_string()), "missing {n}");
    }
}

#[test]
fn every_checker_has_a_negative_control() {
    let all = all();
    let mut controlled = std::collections::BTreeSet::new();
    for (_, s) in &all {
        if s.control_of.is_some() {
            for c in &s.checks {
                if !c.expect {
                    controlled.insert(c.kind.name());
                }
            }
        }
    }
    let used: std::collections::BTreeSet<&str> = all
        .iter()
        .filter(|(_, s)| s.control_of.is_none())
        .flat_map(|(_, s)| s.checks.iter().map(|c| c.kind.name()))
        .collect();
    for c in used {
        assert!(
            controlled.contains(c),
            "checker {c} has no negative control"
        );
    }
}

#[test]
fn unknown_keys_and_impossible_faults_fail_the_load() {
    let base = std::fs::read_to_string(root().join("scenarios/backend-failover.yaml")).unwrap();
    let bad = base.replace("pick: 1 }", "pick: 1, colour: red }");
    let e = scenario::parse(&bad, Path::new("x.yaml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("colour"), "{e}");
    let s = scenario::parse(&base, Path::new("x.yaml")).unwrap();
    // A substrate that cannot kill refuses the scenario at load.
    let e = s
        .check_substrate(SubstrateKind::Docker, &[Capability::Stop])
        .unwrap_err();
    assert!(e.contains("kill"), "{e}");
    // A substrate the scenario does not name.
    assert!(s
        .check_substrate(SubstrateKind::Vm, &[Capability::Kill])
        .is_err());
    let late = base.replace("at_seconds: 15", "at_seconds: 500");
    assert!(scenario::parse(&late, Path::new("x.yaml")).is_err());
}

#[test]
fn the_kind_plan_makes_the_calls_each_fault_needs() {
    for (_, s) in all() {
        if !s.substrates.contains(&SubstrateKind::Kind) {
            continue;
        }
        let plan = kind::plan_for(&s);
        let text = serde_json::to_string(&plan).unwrap();
        assert!(
            text.contains("\"kind\",\"create\",\"cluster\""),
            "{}",
            s.name
        );
        assert!(
            text.contains("\"kind\",\"delete\",\"cluster\""),
            "{}",
            s.name
        );
        for r in &s.topology.releases {
            assert!(
                r.manifests
                    .first()
                    .is_some_and(|m| text.contains(m.as_str()))
                    || r.chart.as_ref().is_some_and(|c| text.contains(c.as_str())),
                "{}",
                s.name
            );
        }
        assert_eq!(plan.faults.len(), s.faults.len());
        for (f, p) in s.faults.iter().zip(&plan.faults) {
            let steps = serde_json::to_string(&p.steps).unwrap();
            let need = match f.action.name() {
                "kill" | "locks_replica_loss" | "redis_failover" => "gracePeriodSeconds=0",
                "term" => "\"DELETE\"",
                "stop" | "backend_flap" => "command=-STOP",
                "rolling_restart" => "kubectl.kubernetes.io/restartedAt",
                "partition" => "networkpolicies",
                "scale" | "ring_churn" => "/scale",
                "cert_rotation" => "/secrets/",
                other => panic!("no expectation for {other}"),
            };
            assert!(
                steps.contains(need),
                "{}: {} plan lacks {need}: {steps}",
                s.name,
                f.action.name()
            );
        }
        if s.checks
            .iter()
            .any(|c| matches!(c.kind, CheckKind::Tls { .. }))
        {
            assert!(text.contains("kubernetes.io/tls"), "{}", s.name);
        }
    }
}
