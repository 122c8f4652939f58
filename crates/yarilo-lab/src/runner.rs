//! One run, end to end: load and check the scenario, render the objects,
//! supply what an operator supplies (users, certificates, images), bring
//! the cluster up release by release, run the workload and the faults,
//! heal, judge, report, clean up (also after a failure or Ctrl-C).

use rustls::pki_types::pem::PemObject;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use yarilo_config::serde_yaml as yaml;

use anyhow::{anyhow, bail, Context};
use tokio::sync::watch;

use crate::certs::Chain;
use crate::checks::{self, CheckResult, TlsProbe, ViewSample};
use crate::history::{FaultRecord, Journal, Op};
use crate::manifests::Objects;
use crate::report::{self, Results};
use crate::scenario::{self, CheckKind, Scenario, SubstrateKind, Target};
use crate::substrate::cluster::{Cluster, Phase};
use crate::substrate::docker::DockerRuntime;
use crate::substrate::PodRuntime;
use crate::workload::{self, Reach};

pub struct RunOptions {
    pub scenario: PathBuf,
    pub substrate: Option<SubstrateKind>,
    pub seed: Option<u64>,
    pub out: Option<PathBuf>,
    pub smoke: bool,
    pub images: Option<PathBuf>,
    pub binary: Option<PathBuf>,
    pub keep: bool,
}

pub struct Outcome {
    pub summary: String,
    pub all_as_expected: bool,
}

const INSTALL_TIMEOUT: Duration = Duration::from_secs(180);

/// Renders every release into objects: `helm template` for charts, the
/// files for manifests.
pub fn render(s: &Scenario, root: &Path) -> anyhow::Result<Objects> {
    let mut objects = Objects::default();
    for r in &s.topology.releases {
        if let Some(chart) = &r.chart {
            let chart = scenario::repo_path(root, chart);
            let helm = std::env::var("HELM").unwrap_or_else(|_| "helm".into());
            let values = tempfile_path(&format!("values-{}.yaml", r.name));
            std::fs::write(&values, yaml::to_string(&r.values)?)?;
            let out = std::process::Command::new(&helm)
                .args(["template", &r.name])
                .arg(&chart)
                .args(["--namespace", &s.topology.namespace, "-f"])
                .arg(&values)
                .output()
                .with_context(|| {
                    format!("running `{helm} template` (install helm: scripts/setup-dev)")
                })?;
            let _ = std::fs::remove_file(&values);
            if !out.status.success() {
                bail!(
                    "helm template {} {}: {}",
                    r.name,
                    chart.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            objects.add_yaml(&String::from_utf8_lossy(&out.stdout), &r.name)?;
        }
        for m in &r.manifests {
            let p = scenario::repo_path(root, m);
            let text =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            objects.add_yaml(&text, &r.name)?;
        }
    }
    for (id, n) in &s.topology.scale {
        objects
            .workload_mut(id)
            .ok_or_else(|| anyhow!("topology.scale: no workload {id}"))?
            .replicas = *n;
    }
    Ok(objects)
}

fn tempfile_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("yarilo-lab-{}-{name}", std::process::id()))
}

/// The passwd-file the auth service reads: `user001 … userNNN`.
pub fn passwd(users: u32, fields: &str) -> String {
    (0..users)
        .map(|i| {
            format!(
                "{}:{{PLAIN}}{}::::::{fields}\n",
                workload::user(i),
                workload::PASSWORD
            )
        })
        .collect()
}

fn repo_root() -> PathBuf {
    let mut d = std::env::current_dir().unwrap_or_default();
    loop {
        if d.join("scenarios").is_dir() && d.join("Cargo.toml").is_file() {
            return d;
        }
        if !d.pop() {
            return std::env::current_dir().unwrap_or_default();
        }
    }
}

/// `yarilo-lab plan`: what a substrate would do.
pub fn plan(path: &Path, kind: SubstrateKind) -> anyhow::Result<String> {
    let s = scenario::load(path)?;
    let root = repo_root();
    match kind {
        SubstrateKind::Kind => crate::substrate::kind::plan(&s, &root),
        SubstrateKind::Docker => {
            let objects = render(&s, &root)?;
            let mut out = String::new();
            for w in &objects.workloads {
                out.push_str(&format!(
                    "{} replicas {} (release {})\n",
                    w.id(),
                    w.replicas,
                    w.release
                ));
            }
            for svc in &objects.services {
                out.push_str(&format!(
                    "service {} {} ports {:?}\n",
                    svc.meta.name,
                    if svc.headless {
                        "headless"
                    } else {
                        "clusterIP"
                    },
                    svc.ports.iter().map(|p| p.port).collect::<Vec<_>>()
                ));
            }
            Ok(out)
        }
        SubstrateKind::Vm => bail!("the vm substrate is not built yet (issue 26)"),
    }
}

pub async fn run(opts: RunOptions) -> anyhow::Result<Outcome> {
    let root = repo_root();
    let mut s = scenario::load(&opts.scenario)?;
    if opts.smoke {
        s = s.for_smoke();
    }
    if let Some(seed) = opts.seed {
        s.seed = seed;
    }
    let kind = opts.substrate.unwrap_or(s.substrates[0]);
    match kind {
        SubstrateKind::Docker => {}
        SubstrateKind::Kind => {
            s.check_substrate(kind, crate::substrate::kind::CAPABILITIES)
                .map_err(|e| anyhow!(e))?;
            let text = crate::substrate::kind::plan(&s, &root)?;
            bail!(
                "the kind substrate is a plan on this machine (no kind here); its objects and API calls:\n{text}"
            );
        }
        SubstrateKind::Vm => bail!("the vm substrate is not built yet (issue 26)"),
    }
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| root.join("lab-runs").join(format!("{}-{stamp}", s.name)));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let suffix = format!("{:x}{:04x}", stamp % 0xffffff, std::process::id() % 0xffff);
    let state = std::env::temp_dir().join(format!("yarilo-lab-{suffix}"));
    let docker = crate::substrate::docker::connect().await?;

    let mut objects = render(&s, &root)?;
    // What an operator supplies: the users, the certificates.
    let pk = &s.topology.passdb_secret;
    objects
        .secrets
        .entry(pk.secret.clone())
        .or_default()
        .insert(
            pk.key.clone(),
            passwd(s.topology.users, &s.topology.user_fields).into_bytes(),
        );
    let chain = match &s.topology.internal_tls {
        Some(plan) => {
            // The lab plays cert-manager for every rendered Certificate.
            let c = Chain::with_requests(plan, objects.certificates.clone())?;
            for (name, data) in c.secrets() {
                objects.secrets.insert(name, data);
            }
            Some(tokio::sync::Mutex::new(c))
        }
        None => None,
    };
    let mut notes = objects.validate()?;
    let images = crate::images::prepare(
        &docker,
        &suffix,
        opts.images.as_deref(),
        opts.binary.as_deref(),
    )
    .await?;
    let rt = DockerRuntime::new(
        docker,
        &suffix,
        images.by_name.clone(),
        images.helper.clone(),
        images.refs.clone(),
    )
    .await?;
    s.check_substrate(kind, rt.capabilities())
        .map_err(|e| anyhow!(e))?;
    let start = Instant::now();
    let start_wall = SystemTime::now();
    let round_robin = s.topology.service_proxy == crate::scenario::ServiceProxy::RoundRobin;
    let cluster = Cluster::new(
        rt,
        objects,
        s.topology.mutations.clone(),
        round_robin,
        &state,
        &s.topology.namespace,
        s.seed,
        start,
    )?;

    let body = run_body(
        &s,
        &cluster,
        &out,
        chain.as_ref(),
        start,
        start_wall,
        &mut notes,
        &images.digests,
        &opts,
    );
    let result = tokio::select! {
        r = body => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    let failed = !matches!(&result, Ok(o) if o.all_as_expected);
    if failed || opts.keep {
        let logs = cluster.collect_logs().await;
        let dest = out.join("logs");
        let _ = copy_dir(&logs, &dest);
    }
    if opts.keep {
        eprintln!(
            "yarilo-lab: kept the run's containers; remove them with `yarilo-lab clean {suffix}`"
        );
    } else {
        let n = cluster.shutdown().await;
        tracing::info!(removed = n, "cleaned up");
        let _ = std::fs::remove_dir_all(&state);
    }
    result
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn run_body<R: PodRuntime>(
    s: &Scenario,
    cluster: &Arc<Cluster<R>>,
    out: &Path,
    chain: Option<&tokio::sync::Mutex<Chain>>,
    start: Instant,
    _start_wall: SystemTime,
    notes: &mut Vec<String>,
    digests: &BTreeMap<String, String>,
    opts: &RunOptions,
) -> anyhow::Result<Outcome> {
    let dns_addr = SocketAddr::new(cluster.rt.dns_address(), 53);
    let _dns = crate::dns::serve(dns_addr, cluster.clone())
        .await
        .with_context(|| {
            format!("binding the cluster DNS on {dns_addr} (the docker substrate runs as root)")
        })?;
    cluster.start();
    let (stop_tx, stop_rx) = watch::channel(false);
    if let Some(plan) = &s.topology.sentinel {
        tokio::spawn(crate::faults::follow_sentinel(
            cluster.clone(),
            plan.clone(),
            stop_rx.clone(),
        ));
    }
    let releases: Vec<String> = s.topology.releases.iter().map(|r| r.name.clone()).collect();
    cluster.install(&releases, INSTALL_TIMEOUT).await?;
    let ready_at = start.elapsed();
    tracing::info!(seconds = ready_at.as_secs_f64(), "cluster ready");

    // From here times count from the workload's start.
    let wstart = Instant::now();
    let wstart_wall = SystemTime::now();
    let history: Arc<Journal<Op>> = Arc::new(Journal::create(&out.join("history.jsonl"))?);
    let faults_j: Journal<FaultRecord> = Journal::create(&out.join("faults.jsonl"))?;
    let c2 = cluster.clone();
    let reach: Reach = Arc::new(move |svc: &str, port: u16| c2.pick_endpoint(svc, port));
    let director_tls = match chain {
        Some(c) => Some(director_tls(&*c.lock().await)?),
        None => None,
    };
    let run = workload::Run::new(
        wstart,
        history.clone(),
        reach.clone(),
        s.seed,
        stop_rx.clone(),
        s.workload
            .director
            .clone()
            .or_else(|| s.workload.lookup.as_ref().map(|l| l.target.clone())),
        director_tls,
        s.workload.tag.clone(),
    );
    let tasks = workload::start(&run, &s.workload);

    let samples = Arc::new(std::sync::Mutex::new(Vec::<ViewSample>::new()));
    let sampler = if s
        .checks
        .iter()
        .any(|c| matches!(c.kind, CheckKind::Convergence { .. }))
    {
        Some(tokio::spawn(sample_views(
            cluster.clone(),
            s.clone(),
            wstart,
            samples.clone(),
            stop_rx.clone(),
        )))
    } else {
        None
    };

    let env = crate::faults::FaultEnv {
        cluster,
        start: wstart,
        journal: &faults_j,
        chain,
        sentinel: s.topology.sentinel.as_ref(),
    };
    for f in &s.faults {
        let at = Duration::from_secs_f64(f.at_seconds);
        let now = wstart.elapsed();
        if at > now {
            tokio::time::sleep(at - now).await;
        }
        let rec = env.run(&f.action).await;
        tracing::info!(fault = %rec.fault, targets = ?rec.targets, ok = rec.ok, detail = %rec.detail, "fault");
        if !rec.ok {
            notes.push(format!("fault {} failed: {}", rec.fault, rec.detail));
        }
    }
    let end = Duration::from_secs_f64(s.duration_seconds);
    let now = wstart.elapsed();
    if end > now {
        tokio::time::sleep(end - now).await;
    }
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(20), t).await;
    }
    if let Some(t) = sampler {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    history.flush();
    let run_end = wstart.elapsed().as_millis() as u64;

    // Heal: every workload back at full strength, then read the mailboxes.
    for w in cluster.workload_ids() {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !cluster.workload_ready(&w) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let read_target: Option<Target> = s.workload.imap.as_ref().map(|i| i.target.clone());
    let final_state = match &read_target {
        Some(t) => match workload::final_state(&reach, t, s.workload.users).await {
            Ok(f) => Some(f),
            Err(e) => {
                notes.push(e);
                None
            }
        },
        None => None,
    };

    // The backends' own records.
    let mut lines = Vec::new();
    for w in &s.topology.backends {
        for (pod, _, l) in cluster.workload_logs(w).await {
            lines.push((pod, l));
        }
    }
    let ends: BTreeMap<String, u64> = cluster
        .events()
        .iter()
        .filter(|e| {
            e.event == "gone" || e.event.starts_with("killed") || e.event.starts_with("terminating")
        })
        .map(|e| {
            (
                e.pod.clone(),
                e.time_ms.saturating_sub(ready_at.as_millis() as u64),
            )
        })
        .collect();
    let (served, lmtp_sessions) = checks::records::served(&lines, wstart_wall, &ends, run_end);
    let mut ops = history.all();
    enrich(&mut ops, &served, &lmtp_sessions);
    history.rewrite(&out.join("history.jsonl"), &ops)?;
    let faults = faults_j.all();

    let mut probes = Vec::new();
    if let (Some(chain), Some(CheckKind::Tls { .. })) = (
        chain,
        s.checks
            .iter()
            .map(|c| &c.kind)
            .find(|k| matches!(k, CheckKind::Tls { .. })),
    ) {
        let ch = chain.lock().await;
        probes = probe_tls(cluster, &ch, s, wstart).await;
    }
    let current_gen = match chain {
        Some(c) => c.lock().await.current().number,
        None => 0,
    };
    let samples = samples.lock().map(|v| v.clone()).unwrap_or_default();

    let mut results = Vec::new();
    for c in &s.checks {
        let (v, summary, figures, violations) = match &c.kind {
            CheckKind::Delivered => checks::delivered(&ops, final_state.as_ref()),
            CheckKind::UidInvariants => checks::uid_invariants(&ops, final_state.as_ref()),
            CheckKind::SingleWriter => checks::single_writer(&served),
            CheckKind::Availability {
                min_success_ratio,
                max_p99_ms,
            } => checks::availability(&ops, &faults, *min_success_ratio, *max_p99_ms),
            CheckKind::Convergence { bound_seconds } => {
                // The addresses each fault took away, from the pods' events.
                let ips: BTreeMap<String, String> = cluster
                    .events()
                    .iter()
                    .filter_map(|e| {
                        e.event
                            .strip_prefix("sandbox up at ")
                            .map(|ip| (e.pod.clone(), ip.to_string()))
                    })
                    .collect();
                let gone: Vec<Vec<String>> = faults
                    .iter()
                    .map(|f| {
                        if matches!(f.fault.as_str(), "kill" | "term") {
                            f.targets
                                .iter()
                                .filter_map(|t| ips.get(t).cloned())
                                .collect()
                        } else {
                            Vec::new()
                        }
                    })
                    .collect();
                checks::convergence(&samples, &faults, &gone, *bound_seconds)
            }
            CheckKind::Tls { .. } => checks::tls(&probes, current_gen),
            CheckKind::NoRestarts { workloads } => {
                no_restarts(cluster, workloads, &faults, ready_at.as_millis() as u64)
            }
        };
        results.push(CheckResult::new(
            c.kind.name(),
            v,
            c.expect,
            summary,
            figures,
            violations,
        ));
    }
    let all = results.iter().all(|r| r.as_expected);
    let reproduce = format!(
        "lab/run {} --substrate {} --seed {}{}",
        opts.scenario.display(),
        SubstrateKind::Docker.as_str(),
        s.seed,
        if opts.smoke { " --smoke" } else { "" }
    );
    let r = Results {
        scenario: s.name.clone(),
        substrate: "docker".into(),
        seed: s.seed,
        smoke: opts.smoke,
        duration_seconds: s.duration_seconds,
        all_as_expected: all,
        checks: results,
        notes: notes.clone(),
        reproduce: reproduce.clone(),
        faults: faults.clone(),
        operations: ops.len(),
    };
    report::write_json(&out.join("results.json"), &r)?;
    std::fs::write(out.join("junit.xml"), report::junit(&r))?;
    std::fs::write(out.join("reproduce.txt"), format!("{reproduce}\n"))?;
    std::fs::write(
        out.join("timeline.html"),
        report::timeline(&r, &ops, &cluster.events()),
    )?;
    report::write_json(&out.join("events.json"), &cluster.events())?;
    let mut env = cluster.rt.fingerprint().await;
    env.insert("seed".into(), s.seed.to_string());
    env.insert("scenario".into(), s.name.clone());
    env.insert(
        "kernel".into(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
    );
    env.insert("lab.version".into(), env!("CARGO_PKG_VERSION").into());
    env.insert(
        "cluster.ready_seconds".into(),
        format!("{:.1}", ready_at.as_secs_f64()),
    );
    for (k, v) in digests {
        env.insert(format!("image.{k}.config"), v.clone());
    }
    for rel in &s.topology.releases {
        let version = rel
            .chart
            .as_ref()
            .and_then(|c| {
                std::fs::read_to_string(scenario::repo_path(&repo_root(), c).join("Chart.yaml"))
                    .ok()
            })
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("version:"))
                    .map(|l| l.trim_start_matches("version:").trim().to_string())
            })
            .unwrap_or_else(|| format!("manifests {:?}", rel.manifests));
        env.insert(format!("release.{}", rel.name), version);
    }
    report::write_json(&out.join("environment.json"), &env)?;
    let mut summary = format!("{} ({}s, seed {}):", s.name, s.duration_seconds, s.seed);
    for c in &r.checks {
        summary.push_str(&format!(
            "\n  {:<15} {:<7} expected {:<5} {} {}",
            c.check,
            format!("{:?}", c.verdict).to_lowercase(),
            c.expected,
            if c.as_expected { "ok " } else { "BAD" },
            c.summary
        ));
    }
    summary.push_str(&format!("\n  report: {}", out.display()));
    Ok(Outcome {
        summary,
        all_as_expected: all,
    })
}

/// Container restarts and pod replacements in the given workloads that
/// no fault aimed at.
fn no_restarts<R: PodRuntime>(
    cluster: &Arc<Cluster<R>>,
    workloads: &[String],
    faults: &[FaultRecord],
    offset_ms: u64,
) -> (
    checks::Verdict,
    String,
    serde_json::Value,
    Vec<checks::Violation>,
) {
    let pods: std::collections::BTreeSet<String> = cluster
        .pods()
        .into_iter()
        .filter(|p| workloads.contains(&p.workload))
        .map(|p| p.name)
        .chain(
            cluster
                .events()
                .iter()
                .filter(|e| e.event == "created")
                .map(|e| e.pod.clone()),
        )
        .collect();
    let prefixes: Vec<String> = workloads
        .iter()
        .filter_map(|w| w.split_once('/').map(|(_, n)| format!("{n}-")))
        .collect();
    let targeted: std::collections::BTreeSet<&String> =
        faults.iter().flat_map(|f| f.targets.iter()).collect();
    let mut v = Vec::new();
    for e in cluster.events() {
        if e.time_ms < offset_ms
            || !pods.contains(&e.pod)
            || !prefixes.iter().any(|p| e.pod.starts_with(p))
        {
            continue;
        }
        let restart = e.event.contains("exited")
            || e.event.contains("restarting")
            || e.event.contains("liveness");
        if restart && !targeted.contains(&e.pod) {
            let t = e.time_ms - offset_ms;
            v.push(checks::Violation {
                from_ms: t,
                to_ms: t,
                detail: format!("{}: {}", e.pod, e.event),
            });
        }
    }
    let verdict = if v.is_empty() {
        checks::Verdict::True
    } else {
        checks::Verdict::False
    };
    (
        verdict,
        format!(
            "{} restarts in {:?} not caused by a fault",
            v.len(),
            workloads
        ),
        serde_json::json!({ "restarts": v.len() }),
        v,
    )
}

/// The lab's own client identity towards the director port: the admin
/// leaf (LOOKUP is allowed to login, director and admin roles).
fn director_tls(chain: &Chain) -> anyhow::Result<workload::DirectorTls> {
    let (cert, key) = chain.leaf("admin").ok_or_else(|| {
        anyhow!("topology.internal_tls.roles needs `admin` (the lab's own client certificate)")
    })?;
    let certs =
        yarilo_tls::parse_certs(cert.as_bytes()).map_err(|e| anyhow!("admin certificate: {e}"))?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes())
        .map_err(|e| anyhow!("admin key: {e:?}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(
        chain.root_der.clone(),
    ))?;
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_client_auth_cert(certs, key)?;
    Ok(workload::DirectorTls {
        connector: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
        name: rustls::pki_types::ServerName::try_from(chain.server_name().to_string())?,
    })
}

/// Fills in the backend each operation reached, from the backends' own
/// records: an LMTP delivery by its session id, a login by the session
/// the user opened on some backend right then.
fn enrich(ops: &mut [Op], served: &[checks::Served], lmtp: &BTreeMap<String, String>) {
    for op in ops.iter_mut() {
        if op.kind == "lmtp" {
            if let Some(reply) = &op.reply {
                // `250 2.0.0 <rcpt> <session> Saved`
                let sess = reply.split_whitespace().rev().nth(1).unwrap_or("");
                if let Some(pod) = lmtp.get(sess) {
                    op.backend = Some(pod.clone());
                }
            }
        } else if op.kind == "imap_login" && op.ok {
            let from = op.t_ms;
            let to = op.t_ms + op.dur_ms + 50;
            if let Some(s) = served.iter().find(|s| {
                s.user == op.user && s.from_ms + 50 >= from && s.from_ms <= to && s.what != "lmtp"
            }) {
                op.backend = Some(s.pod.clone());
            }
        }
    }
}

async fn http_json(addr: SocketAddr, path: &str, token: Option<&str>) -> Option<serde_json::Value> {
    let url = format!("http://{addr}{path}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(800))
        .build()
        .ok()?;
    let mut req = client.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.ok()?.json().await.ok()
}

/// Polls every director's admin API: members, backends, pins of the
/// workload's users.
async fn sample_views<R: PodRuntime>(
    cluster: Arc<Cluster<R>>,
    s: Scenario,
    wstart: Instant,
    out: Arc<std::sync::Mutex<Vec<ViewSample>>>,
    mut stop: watch::Receiver<bool>,
) {
    let token = s.topology.director_api_token.as_ref().and_then(|k| {
        cluster.secret(&k.secret).and_then(|d| {
            d.get(&k.key)
                .map(|v| String::from_utf8_lossy(v).trim().to_string())
        })
    });
    let api_port = |pod: &crate::substrate::cluster::PodInfo| {
        let o = cluster.objects();
        o.workload(&pod.workload)
            .and_then(|w| {
                w.template
                    .spec
                    .containers
                    .iter()
                    .flat_map(|c| c.ports.iter())
                    .find(|p| p.name.as_deref() == Some("api"))
                    .map(|p| p.container_port)
            })
            .unwrap_or(9103)
    };
    let mut round = 0u64;
    loop {
        let mut views = BTreeMap::new();
        let mut live_directors = Vec::new();
        for w in &s.topology.directors {
            for p in cluster.pods_of(w) {
                if !p.ready {
                    continue;
                }
                let Some(ip) = p.ip else { continue };
                live_directors.push(ip.to_string());
                let addr = SocketAddr::new(ip, api_port(&p));
                let members = http_json(addr, "/api/director/members", token.as_deref()).await;
                let backends = http_json(addr, "/api/director/backends", token.as_deref()).await;
                let (Some(m), Some(b)) = (members, backends) else {
                    continue;
                };
                let mut mv: Vec<String> = m
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| {
                                x.get("addr").and_then(|v| v.as_str()).map(|s| {
                                    s.rsplit_once(':')
                                        .map(|(h, _)| h.to_string())
                                        .unwrap_or(s.to_string())
                                })
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if mv.is_empty() {
                    mv.push(ip.to_string());
                }
                mv.sort();
                let mut bv: Vec<String> = b
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.get("ip").and_then(|v| v.as_str()).map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                bv.sort();
                let mut pins = Vec::new();
                if round.is_multiple_of(4) {
                    for i in 0..s.workload.users {
                        let u = workload::user(i);
                        if let Some(v) = http_json(
                            addr,
                            &format!("/api/director/map?user={u}"),
                            token.as_deref(),
                        )
                        .await
                        {
                            pins.push(format!(
                                "{u}={}",
                                v.get("backend").and_then(|b| b.as_str()).unwrap_or("?")
                            ));
                        }
                    }
                }
                views.insert(p.name.clone(), (mv, bv, pins));
            }
        }
        live_directors.sort();
        let mut live_backends: Vec<String> = s
            .topology
            .backends
            .iter()
            .flat_map(|w| cluster.pods_of(w))
            .filter(|p| p.ready && p.phase == Phase::Running)
            .filter_map(|p| p.ip.map(|i| i.to_string()))
            .collect();
        live_backends.sort();
        // Pins are only compared in the rounds that read them.
        if !round.is_multiple_of(4) {
            for v in views.values_mut() {
                v.2.clear();
            }
        }
        if let Ok(mut o) = out.lock() {
            o.push(ViewSample {
                t_ms: wstart.elapsed().as_millis() as u64,
                views,
                live_directors,
                live_backends,
            });
        }
        round += 1;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Connects to every endpoint of the listed Services with the current
/// chain (root only, pinned name, the admin leaf as client), and once
/// without a client certificate.
async fn probe_tls<R: PodRuntime>(
    cluster: &Arc<Cluster<R>>,
    chain: &Chain,
    s: &Scenario,
    wstart: Instant,
) -> Vec<TlsProbe> {
    let targets: Vec<Target> = s
        .checks
        .iter()
        .find_map(|c| match &c.kind {
            CheckKind::Tls { services } => Some(services.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let mut roots = rustls::RootCertStore::empty();
    let _ = roots.add(rustls::pki_types::CertificateDer::from(
        chain.root_der.clone(),
    ));
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client_leaf = chain.leaf("admin").or_else(|| chain.leaf("login"));
    let mut probes = Vec::new();
    for t in targets {
        for (pod, addr) in cluster.endpoints(&t.service, t.port) {
            let mut p = TlsProbe {
                t_ms: wstart.elapsed().as_millis() as u64,
                pod,
                addr: addr.to_string(),
                verified: false,
                generation: None,
                refuses_anonymous: false,
                error: None,
            };
            if let Some((cert, key)) = &client_leaf {
                let certs = yarilo_tls::parse_certs(cert.as_bytes()).unwrap_or_default();
                let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).ok();
                if let (Some(key), Ok(b)) = (
                    key,
                    rustls::ClientConfig::builder_with_provider(provider.clone())
                        .with_safe_default_protocol_versions(),
                ) {
                    match b
                        .with_root_certificates(roots.clone())
                        .with_client_auth_cert(certs, key)
                    {
                        Ok(cfg) => {
                            match handshake(Arc::new(cfg), addr, chain.server_name()).await {
                                Ok(leaf) => {
                                    p.verified = true;
                                    p.generation =
                                        leaf.and_then(|l| chain.generation_of(&l)).map(|g| g.0);
                                }
                                Err(e) => p.error = Some(e),
                            }
                        }
                        Err(e) => p.error = Some(e.to_string()),
                    }
                }
            }
            if let Ok(b) = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
            {
                let cfg = b
                    .with_root_certificates(roots.clone())
                    .with_no_client_auth();
                p.refuses_anonymous =
                    anonymous_refused(Arc::new(cfg), addr, chain.server_name()).await;
            }
            probes.push(p);
        }
    }
    probes
}

async fn handshake(
    cfg: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    name: &str,
) -> Result<Option<Vec<u8>>, String> {
    let tcp = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let sn =
        rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let tls = tokio::time::timeout(
        Duration::from_secs(3),
        tokio_rustls::TlsConnector::from(cfg).connect(sn, tcp),
    )
    .await
    .map_err(|_| "handshake timed out".to_string())?
    .map_err(|e| e.to_string())?;
    Ok(tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec()))
}

/// Whether a server refuses a client without a certificate: the handshake
/// fails, or the first read after it does (TLS 1.3 reports the missing
/// certificate after the client's Finished).
async fn anonymous_refused(cfg: Arc<rustls::ClientConfig>, addr: SocketAddr, name: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(Ok(tcp)) =
        tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr)).await
    else {
        return false;
    };
    let Ok(sn) = rustls::pki_types::ServerName::try_from(name.to_string()) else {
        return false;
    };
    match tokio::time::timeout(
        Duration::from_secs(3),
        tokio_rustls::TlsConnector::from(cfg).connect(sn, tcp),
    )
    .await
    {
        Ok(Err(_)) => true,
        Err(_) => false,
        Ok(Ok(mut s)) => {
            let _ = s.write_all(b"VERSION\t1\n").await;
            let mut buf = [0u8; 64];
            matches!(
                tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await,
                Ok(Err(_)) | Ok(Ok(0))
            )
        }
    }
}
