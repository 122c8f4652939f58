//! The kind substrate, as a plan: the exact commands and Kubernetes API
//! calls a run would make — create the cluster, load the images, create
//! the namespace and the Secrets the lab supplies, `helm install --wait`
//! each release in order, then per fault the API calls that produce it,
//! and the teardown. These machines have no kind, so the plan is what the
//! test suite checks; nothing here has been run against a real cluster.

use std::path::Path;

use serde::Serialize;

use crate::scenario::{Capability, FaultAction, Pick, PickName, PodSelector, Scenario};

/// Everything kind can produce through the API. SIGSTOP needs an
/// ephemeral debug container sharing the target's process namespace (the
/// yarilo image has no `kill`).
pub const CAPABILITIES: &[Capability] = &[
    Capability::Kill,
    Capability::Stop,
    Capability::Term,
    Capability::Partition,
    Capability::Scale,
    Capability::Secrets,
];

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Step {
    /// A command line.
    Cli { argv: Vec<String> },
    /// A Kubernetes API request.
    Api {
        method: String,
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        body: Option<serde_json::Value>,
    },
    /// Wait for something.
    Wait { what: String, seconds: f64 },
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultPlan {
    pub at_seconds: f64,
    pub fault: String,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub scenario: String,
    pub cluster: String,
    pub namespace: String,
    pub setup: Vec<Step>,
    pub faults: Vec<FaultPlan>,
    pub teardown: Vec<Step>,
}

fn cli(argv: &[&str]) -> Step {
    Step::Cli {
        argv: argv.iter().map(|s| s.to_string()).collect(),
    }
}

fn api(method: &str, path: String, body: Option<serde_json::Value>) -> Step {
    Step::Api {
        method: method.into(),
        path,
        body,
    }
}

fn workload_path(ns: &str, w: &str) -> String {
    let (kind, name) = w.split_once('/').unwrap_or(("deployment", w));
    let plural = if kind == "statefulset" {
        "statefulsets"
    } else {
        "deployments"
    };
    format!("/apis/apps/v1/namespaces/{ns}/{plural}/{name}")
}

/// Pods of a selector: list them by the workload's selector, then pick.
fn pick_steps(ns: &str, s: &PodSelector) -> (Step, String) {
    let list = api(
        "GET",
        format!(
            "{}/../../pods?labelSelector=<{}.spec.selector>",
            workload_path(ns, &s.workload),
            s.workload
        ),
        None,
    );
    let which = match &s.pick {
        Pick::Index(i) => format!("{{pod {i} of {}}}", s.workload),
        Pick::Name(PickName::All) => format!("{{every pod of {}}}", s.workload),
        Pick::Name(PickName::Random) => format!("{{seeded random pod of {}}}", s.workload),
    };
    (list, which)
}

fn pod_path(ns: &str, pod: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{pod}")
}

fn signal_steps(ns: &str, pod: &str, sig: &str) -> Vec<Step> {
    vec![
        api(
            "PATCH",
            format!("{}/ephemeralcontainers", pod_path(ns, pod)),
            Some(serde_json::json!({"spec": {"ephemeralContainers": [{
                "name": format!("lab-{}", sig.to_lowercase()),
                "image": "yarilo-lab-helper:lab",
                "command": ["/bin/busybox", "sleep", "3600"],
                "targetContainerName": "<each container>",
            }]}})),
        ),
        api(
            "POST",
            format!("{}/exec?container=lab-{}&command=/bin/busybox&command=kill&command=-{sig}&command=1", pod_path(ns, pod), sig.to_lowercase()),
            None,
        ),
    ]
}

/// The plan for one scenario.
pub fn plan_for(s: &Scenario) -> Plan {
    let ns = s.topology.namespace.clone();
    let cluster = format!("yarilo-lab-{}", s.name);
    let mut setup = vec![
        cli(&[
            "kind", "create", "cluster", "--name", &cluster, "--wait", "120s",
        ]),
        cli(&["images/build", "lab-images"]),
    ];
    for image in ["yarilo", "redis"] {
        setup.push(cli(&[
            "kind",
            "load",
            "image-archive",
            &format!("lab-images/{image}.tar"),
            "--name",
            &cluster,
        ]));
    }
    setup.push(api(
        "POST",
        "/api/v1/namespaces".into(),
        Some(serde_json::json!({"metadata": {"name": ns}})),
    ));
    setup.push(api(
        "POST",
        format!("/api/v1/namespaces/{ns}/secrets"),
        Some(serde_json::json!({"metadata": {"name": s.topology.passdb_secret.secret}, "stringData": {s.topology.passdb_secret.key.clone(): format!("<{} users>", s.topology.users)}})),
    ));
    if let Some(tls) = &s.topology.internal_tls {
        for role in &tls.roles {
            setup.push(api(
                "POST",
                format!("/api/v1/namespaces/{ns}/secrets"),
                Some(serde_json::json!({"metadata": {"name": format!("{}{role}", tls.secret_prefix)}, "type": "kubernetes.io/tls",
                    "data": {"tls.crt": "<leaf+intermediate>", "tls.key": "<key>", "ca.crt": "<root>"}})),
            ));
        }
    }
    for r in &s.topology.releases {
        match &r.chart {
            Some(chart) => setup.push(cli(&[
                "helm",
                "install",
                &r.name,
                chart,
                "--namespace",
                &ns,
                "-f",
                &format!("<values of {}>", r.name),
                "--wait",
                "--timeout",
                "180s",
            ])),
            None => {
                for m in &r.manifests {
                    setup.push(cli(&["kubectl", "apply", "--namespace", &ns, "-f", m]));
                }
                setup.push(cli(&[
                    "kubectl",
                    "wait",
                    "--namespace",
                    &ns,
                    "--for=condition=Ready",
                    "pods",
                    "--all",
                    "--timeout=180s",
                ]));
            }
        }
    }
    for (id, n) in &s.topology.scale {
        setup.push(api(
            "PATCH",
            format!("{}/scale", workload_path(&ns, id)),
            Some(serde_json::json!({"spec": {"replicas": n}})),
        ));
    }
    let mut faults = Vec::new();
    for f in &s.faults {
        let mut steps = Vec::new();
        match &f.action {
            FaultAction::Kill { target } => {
                let (list, which) = pick_steps(&ns, target);
                steps.push(list);
                steps.push(api(
                    "DELETE",
                    format!("{}?gracePeriodSeconds=0", pod_path(&ns, &which)),
                    None,
                ));
            }
            FaultAction::Term { target } => {
                let (list, which) = pick_steps(&ns, target);
                steps.push(list);
                steps.push(api("DELETE", pod_path(&ns, &which), None));
            }
            FaultAction::Stop { target, seconds } => {
                let (list, which) = pick_steps(&ns, target);
                steps.push(list);
                steps.extend(signal_steps(&ns, &which, "STOP"));
                steps.push(Step::Wait {
                    what: "pause".into(),
                    seconds: *seconds,
                });
                steps.extend(signal_steps(&ns, &which, "CONT"));
            }
            FaultAction::RollingRestart { workload } => {
                steps.push(api(
                    "PATCH",
                    workload_path(&ns, workload),
                    Some(serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "<now>"}}}}})),
                ));
                steps.push(cli(&[
                    "kubectl",
                    "rollout",
                    "status",
                    "--namespace",
                    &ns,
                    workload,
                    "--timeout=180s",
                ]));
            }
            FaultAction::Partition { a, b, seconds } => {
                let name = format!("lab-partition-{}", faults.len());
                let sel =
                    |v: &Vec<PodSelector>| v.iter().map(|p| p.workload.clone()).collect::<Vec<_>>();
                for (from, to, suffix) in [(sel(a), sel(b), "a"), (sel(b), sel(a), "b")] {
                    steps.push(api(
                        "POST",
                        format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"),
                        Some(serde_json::json!({"metadata": {"name": format!("{name}-{suffix}")},
                            "spec": {"podSelector": {"matchLabels": format!("<pods of {from:?}>")},
                                     "policyTypes": ["Ingress", "Egress"],
                                     "ingress": [{"from": [{"podSelector": {"matchExpressions": format!("<not pods of {to:?}>")}}]}],
                                     "egress": [{"to": [{"podSelector": {"matchExpressions": format!("<not pods of {to:?}>")}}]}]}})),
                    ));
                }
                steps.push(Step::Wait {
                    what: "partition".into(),
                    seconds: *seconds,
                });
                for suffix in ["a", "b"] {
                    steps.push(api("DELETE", format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}-{suffix}"), None));
                }
            }
            FaultAction::Scale { workload, replicas } => {
                steps.push(api(
                    "PATCH",
                    format!("{}/scale", workload_path(&ns, workload)),
                    Some(serde_json::json!({"spec": {"replicas": replicas}})),
                ));
            }
            FaultAction::RingChurn {
                workload,
                low,
                high,
                rounds,
                every_seconds,
            } => {
                for _ in 0..*rounds {
                    for n in [high, low] {
                        steps.push(api(
                            "PATCH",
                            format!("{}/scale", workload_path(&ns, workload)),
                            Some(serde_json::json!({"spec": {"replicas": n}})),
                        ));
                        steps.push(cli(&[
                            "kubectl",
                            "rollout",
                            "status",
                            "--namespace",
                            &ns,
                            workload,
                        ]));
                        steps.push(Step::Wait {
                            what: "churn".into(),
                            seconds: *every_seconds,
                        });
                    }
                }
            }
            FaultAction::BackendFlap {
                target,
                times,
                down_seconds,
                up_seconds,
            } => {
                let (list, which) = pick_steps(&ns, target);
                steps.push(list);
                for _ in 0..*times {
                    steps.extend(signal_steps(&ns, &which, "STOP"));
                    steps.push(Step::Wait {
                        what: "down".into(),
                        seconds: *down_seconds,
                    });
                    steps.extend(signal_steps(&ns, &which, "CONT"));
                    steps.push(Step::Wait {
                        what: "up".into(),
                        seconds: *up_seconds,
                    });
                }
            }
            FaultAction::RedisFailover => {
                if let Some(p) = &s.topology.sentinel {
                    steps.push(api(
                        "GET",
                        format!("/api/v1/namespaces/{ns}/pods?labelSelector=role%3Dmaster"),
                        None,
                    ));
                    steps.push(api(
                        "DELETE",
                        format!(
                            "{}?gracePeriodSeconds=0",
                            pod_path(&ns, &format!("{{primary of {}}}", p.redis))
                        ),
                        None,
                    ));
                }
            }
            FaultAction::LocksReplicaLoss { workload } => {
                let (list, which) = pick_steps(
                    &ns,
                    &PodSelector {
                        workload: workload.clone(),
                        pick: Pick::default(),
                    },
                );
                steps.push(list);
                steps.push(api(
                    "DELETE",
                    format!("{}?gracePeriodSeconds=0", pod_path(&ns, &which)),
                    None,
                ));
            }
            FaultAction::CertRotation { restart } => {
                if let Some(tls) = &s.topology.internal_tls {
                    for role in &tls.roles {
                        steps.push(api(
                            "PUT",
                            format!(
                                "/api/v1/namespaces/{ns}/secrets/{}{role}",
                                tls.secret_prefix
                            ),
                            Some(serde_json::json!({"data": "<generation n+1>"})),
                        ));
                    }
                    if *restart {
                        steps.push(cli(&[
                            "kubectl",
                            "rollout",
                            "restart",
                            "--namespace",
                            &ns,
                            "<every workload mounting one>",
                        ]));
                    }
                }
            }
        }
        faults.push(FaultPlan {
            at_seconds: f.at_seconds,
            fault: f.action.name().into(),
            steps,
        });
    }
    let teardown = vec![cli(&["kind", "delete", "cluster", "--name", &cluster])];
    Plan {
        scenario: s.name.clone(),
        cluster,
        namespace: ns,
        setup,
        faults,
        teardown,
    }
}

pub fn plan(s: &Scenario, _root: &Path) -> anyhow::Result<String> {
    s.check_substrate(crate::scenario::SubstrateKind::Kind, CAPABILITIES)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(serde_json::to_string_pretty(&plan_for(s))? + "\n")
}
