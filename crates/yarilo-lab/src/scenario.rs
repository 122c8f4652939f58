//! The scenario file: what a run sets up, what it does to the system, and
//! what it expects to find. `scenarios/schema.json` is generated from these
//! types (`yarilo-lab schema`); a file is checked against them at load,
//! unknown keys included, and then against the substrate it is run on: a
//! fault the substrate cannot produce fails the load, never the verdict.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use yarilo_config::serde_yaml as yaml;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::LabError;

/// One scenario file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, the file's stem.
    pub name: String,
    /// What the scenario shows, for the report.
    pub description: String,
    /// Substrates the scenario runs on; the first is the default.
    pub substrates: Vec<SubstrateKind>,
    /// Seed of every random choice (fault targets, workload mix, proxy
    /// picks); `--seed` overrides it.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// How long the workload runs, seconds, after the cluster is ready.
    pub duration_seconds: f64,
    /// The short variant CI runs (`--smoke`): its own duration, and faults
    /// later than it are dropped.
    #[serde(default)]
    pub smoke: Option<Smoke>,
    /// What is deployed.
    pub topology: Topology,
    /// The load the clients put on it while faults happen.
    #[serde(default)]
    pub workload: Workload,
    /// What is done to the system, in time order.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// The checkers and the verdict each must reach.
    pub checks: Vec<Check>,
    /// Set on a negative control: the scenario this one breaks on purpose.
    #[serde(default)]
    pub control_of: Option<String>,
}

fn default_seed() -> u64 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Smoke {
    pub duration_seconds: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubstrateKind {
    /// Containers on one private Docker network (runs here and in CI).
    Docker,
    /// `helm install` into a kind cluster; planned and tested, not run here.
    Kind,
    /// qemu guests on a bridge (issue 26; not built yet).
    Vm,
}

impl SubstrateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SubstrateKind::Docker => "docker",
            SubstrateKind::Kind => "kind",
            SubstrateKind::Vm => "vm",
        }
    }
}

impl std::str::FromStr for SubstrateKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "docker" => Ok(SubstrateKind::Docker),
            "kind" => Ok(SubstrateKind::Kind),
            "vm" => Ok(SubstrateKind::Vm),
            _ => Err(format!("unknown substrate `{s}` (docker, kind, vm)")),
        }
    }
}

/// What is deployed: rendered manifests (from the charts with
/// `helm template`, or from files), plus what the lab supplies as an
/// operator would (users, certificates, images).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Where the Kubernetes objects come from, installed in this order
    /// (each release ready before the next, as `helm install --wait`).
    pub releases: Vec<Release>,
    /// Namespace the objects live in (DNS: `<svc>.<ns>.svc.cluster.local`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Users the lab writes into the passdb Secret (`user001` …).
    #[serde(default = "default_users")]
    pub users: u32,
    /// Extra userdb fields on every user's passwd-file line (for example
    /// `director_tag=a`, the tag the user's LOOKUPs carry).
    #[serde(default)]
    pub user_fields: String,
    /// The Secret (and key) holding the passwd-file the auth service reads.
    #[serde(default = "default_passdb_secret")]
    pub passdb_secret: SecretKey,
    /// Internal mTLS material the lab issues (root → intermediate → leaf
    /// per role) into Secrets named `<tls_secret_prefix><role>`.
    #[serde(default)]
    pub internal_tls: Option<InternalTlsPlan>,
    /// Replica counts replacing the manifests' (`deployment/name: 3`).
    #[serde(default)]
    pub scale: BTreeMap<String, u32>,
    /// Changes made to the rendered objects on purpose (negative
    /// controls).
    #[serde(default)]
    pub mutations: Vec<Mutation>,
    /// Pods (by workload) whose `role=master` label follows the Redis
    /// Sentinel's view of the primary, as a Sentinel-aware chart's
    /// relabelling hook does.
    #[serde(default)]
    pub sentinel: Option<SentinelPlan>,
    /// Workloads whose pods record sessions for the single-writer check
    /// (their logs carry `session start`/`session end` records).
    #[serde(default)]
    pub backends: Vec<String>,
    /// Workloads whose pods are directors (their admin API is read by the
    /// convergence check).
    #[serde(default)]
    pub directors: Vec<String>,
    /// Bearer token of the directors' admin API (a Secret key).
    #[serde(default)]
    pub director_api_token: Option<SecretKey>,
    /// How a ClusterIP Service spreads new connections over its ready
    /// endpoints: `random` (kube-proxy's iptables mode, the default) or
    /// `round_robin` (its IPVS `rr` mode: each pod's successive
    /// connections take successive endpoints, pods starting one apart in
    /// creation order).
    #[serde(default)]
    pub service_proxy: ServiceProxy,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServiceProxy {
    #[default]
    Random,
    RoundRobin,
}

fn default_namespace() -> String {
    "yarilo".into()
}
fn default_users() -> u32 {
    20
}
fn default_passdb_secret() -> SecretKey {
    SecretKey {
        secret: "yarilo-passdb".into(),
        key: "passwd".into(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretKey {
    pub secret: String,
    pub key: String,
}

/// One release: a chart rendered with `helm template`, or manifest files
/// standing in for one.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Release {
    pub name: String,
    /// Chart directory, relative to the repository (`helm/yarilo-backend`).
    #[serde(default)]
    pub chart: Option<String>,
    /// Values passed to `helm template` (as a values file).
    #[serde(default)]
    #[schemars(with = "serde_json::Value")]
    pub values: yaml::Value,
    /// Rendered manifests (multi-document YAML), relative to the
    /// repository; instead of `chart`.
    #[serde(default)]
    pub manifests: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InternalTlsPlan {
    /// Secret name prefix; the role is appended (`yarilo-tls-director`).
    #[serde(default = "default_tls_prefix")]
    pub secret_prefix: String,
    /// The name every internal client pins (`internal_tls.server_name`).
    pub server_name: String,
    /// Extra DNS SANs per role (the director's ring name, …).
    #[serde(default)]
    pub extra_names: BTreeMap<String, Vec<String>>,
    /// Roles to issue a leaf for.
    pub roles: Vec<String>,
}

fn default_tls_prefix() -> String {
    "yarilo-tls-".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SentinelPlan {
    /// Workload of the Redis pods (`statefulset/redis`).
    pub redis: String,
    /// Workload of the Sentinel pods.
    pub sentinels: String,
    /// Sentinel port.
    #[serde(default = "default_sentinel_port")]
    pub port: u16,
    /// The monitored master's name.
    #[serde(default = "default_master_name")]
    pub master: String,
}

fn default_sentinel_port() -> u16 {
    26379
}
fn default_master_name() -> String {
    "mymaster".into()
}

/// A deliberate change to the rendered objects.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Mutation {
    /// Set an environment variable on every container of a workload, or
    /// one value per pod (by the pod's index) with `per_pod`.
    Env {
        workload: String,
        #[serde(default)]
        container: Option<String>,
        name: String,
        #[serde(default)]
        value: Option<String>,
        #[serde(default)]
        per_pod: Vec<String>,
    },
    /// Replace a pod volume's source with an emptyDir (node-local,
    /// per-pod storage instead of, say, the tag's shared RWX claim).
    LocalVolume { workload: String, volume: String },
    /// Merge YAML into a container's spec (a probe, a command, …).
    Container {
        workload: String,
        container: String,
        #[schemars(with = "serde_json::Value")]
        merge: yaml::Value,
    },
    /// Merge YAML into a config file held in a ConfigMap key.
    Config {
        config_map: String,
        key: String,
        #[schemars(with = "serde_json::Value")]
        merge: yaml::Value,
    },
}

/// Client load. Every operation is recorded in `history.jsonl`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// LMTP deliveries with unique Message-IDs.
    #[serde(default)]
    pub lmtp: Option<LmtpLoad>,
    /// IMAP sessions: APPEND, FETCH, STORE, IDLE waiting for deliveries.
    #[serde(default)]
    pub imap: Option<ImapLoad>,
    /// POP3 sessions (STAT, UIDL, RETR).
    #[serde(default)]
    pub pop3: Option<Pop3Load>,
    /// Director LOOKUPs straight to the director Service.
    #[serde(default)]
    pub lookup: Option<LookupLoad>,
    /// The users the workload uses (the first N of `topology.users`).
    #[serde(default = "default_workload_users")]
    pub users: u32,
    /// The tag the workload's own LOOKUPs carry (the users' tag).
    #[serde(default)]
    pub tag: String,
    /// The director Service every login and delivery asks first (LOOKUP),
    /// so each operation records the director's answer; defaults to the
    /// `lookup` load's target.
    #[serde(default)]
    pub director: Option<Target>,
}

fn default_workload_users() -> u32 {
    8
}

/// Where a workload connects: a Service and port, as a client outside
/// the cluster reaches it (a load balancer picking a ready endpoint).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub service: String,
    pub port: u16,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LmtpLoad {
    pub target: Target,
    /// Deliveries per second (one recipient each).
    pub rate_per_second: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImapLoad {
    pub target: Target,
    /// Concurrent client loops, each on its own user.
    pub sessions: u32,
    /// Pause between operations of one loop.
    #[serde(default = "default_op_interval")]
    pub op_interval_ms: u64,
    /// One more loop per user that IDLEs and records when deliveries
    /// arrive.
    #[serde(default)]
    pub idle: bool,
}

fn default_op_interval() -> u64 {
    200
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pop3Load {
    pub target: Target,
    pub sessions: u32,
    #[serde(default = "default_pop3_interval")]
    pub interval_ms: u64,
}

fn default_pop3_interval() -> u64 {
    1000
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LookupLoad {
    pub target: Target,
    pub rate_per_second: f64,
    #[serde(default)]
    pub tag: String,
}

/// One fault: what, to whom, when. (Unknown keys are refused by the
/// fault's own variant: `deny_unknown_fields` cannot sit on a struct with
/// a flattened field.)
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Fault {
    /// Seconds after the workload starts.
    pub at_seconds: f64,
    #[serde(flatten)]
    pub action: FaultAction,
}

/// Which pods a fault hits.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PodSelector {
    /// `deployment/<name>` or `statefulset/<name>`.
    pub workload: String,
    /// `random` (seeded), `all`, or a pod index.
    #[serde(default)]
    pub pick: Pick,
}

/// A pod index, or `random` / `all`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Pick {
    Index(u32),
    Name(PickName),
}

impl Default for Pick {
    fn default() -> Self {
        Pick::Name(PickName::Random)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PickName {
    Random,
    All,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, tag = "fault", rename_all = "snake_case")]
pub enum FaultAction {
    /// kill -9 every container of the pod; the controller recreates it.
    Kill { target: PodSelector },
    /// SIGSTOP every container of the pod, SIGCONT after `seconds`.
    Stop { target: PodSelector, seconds: f64 },
    /// Delete the pod gracefully (SIGTERM, grace period, SIGKILL).
    Term { target: PodSelector },
    /// Graceful restart of every pod of a workload in turn, each ready
    /// before the next (`kubectl rollout restart`).
    RollingRestart { workload: String },
    /// Cut traffic between two groups of pods, healed after `seconds`.
    Partition {
        a: Vec<PodSelector>,
        b: Vec<PodSelector>,
        seconds: f64,
    },
    /// Change a workload's replica count.
    Scale { workload: String, replicas: u32 },
    /// Repeated add/remove of directors: `rounds` times scale up to
    /// `high`, wait, scale down to `low`.
    RingChurn {
        workload: String,
        low: u32,
        high: u32,
        rounds: u32,
        every_seconds: f64,
    },
    /// A backend pod drops out and comes back `times` times: SIGSTOP for
    /// `down_seconds`, resumed, `up_seconds` apart.
    BackendFlap {
        target: PodSelector,
        times: u32,
        down_seconds: f64,
        up_seconds: f64,
    },
    /// kill -9 the Redis primary; Sentinel promotes a replica.
    RedisFailover,
    /// kill -9 one replica of the locks Deployment.
    LocksReplicaLoss { workload: String },
    /// Replace every internal certificate (new intermediate, new leaves),
    /// then roll every workload that mounts one, unless `restart: false`.
    CertRotation {
        #[serde(default = "default_true")]
        restart: bool,
    },
}

fn default_true() -> bool {
    true
}

impl FaultAction {
    /// The capability a substrate needs to produce this fault.
    pub fn capability(&self) -> Capability {
        match self {
            FaultAction::Kill { .. } | FaultAction::RedisFailover => Capability::Kill,
            FaultAction::LocksReplicaLoss { .. } => Capability::Kill,
            FaultAction::Stop { .. } | FaultAction::BackendFlap { .. } => Capability::Stop,
            FaultAction::Term { .. } | FaultAction::RollingRestart { .. } => Capability::Term,
            FaultAction::Partition { .. } => Capability::Partition,
            FaultAction::Scale { .. } | FaultAction::RingChurn { .. } => Capability::Scale,
            FaultAction::CertRotation { .. } => Capability::Secrets,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            FaultAction::Kill { .. } => "kill",
            FaultAction::Stop { .. } => "stop",
            FaultAction::Term { .. } => "term",
            FaultAction::RollingRestart { .. } => "rolling_restart",
            FaultAction::Partition { .. } => "partition",
            FaultAction::Scale { .. } => "scale",
            FaultAction::RingChurn { .. } => "ring_churn",
            FaultAction::BackendFlap { .. } => "backend_flap",
            FaultAction::RedisFailover => "redis_failover",
            FaultAction::LocksReplicaLoss { .. } => "locks_replica_loss",
            FaultAction::CertRotation { .. } => "cert_rotation",
        }
    }
}

/// What a substrate can do to a pod or the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Kill,
    Stop,
    Term,
    Partition,
    Scale,
    Secrets,
}

/// A checker and the verdict it must reach.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Check {
    #[serde(flatten)]
    pub kind: CheckKind,
    /// The verdict this scenario must produce: true (the property held) or
    /// false (a negative control: it must be violated).
    #[serde(default = "default_true")]
    pub expect: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, tag = "check", rename_all = "snake_case")]
pub enum CheckKind {
    /// Every acknowledged delivery and APPEND is present exactly once
    /// after the heal.
    Delivered,
    /// Per mailbox, (UIDVALIDITY, UID) → Message-ID is a function; UIDNEXT
    /// and HIGHESTMODSEQ seen by clients never go back.
    UidInvariants,
    /// No user is served by two backends at the same time, from the
    /// backends' own session records.
    SingleWriter,
    /// All directors agree on members, backends and pins within
    /// `bound_seconds` after each fault.
    Convergence {
        #[serde(default = "default_convergence_bound")]
        bound_seconds: f64,
    },
    /// Share of operations that succeeded and their p99 latency, in each
    /// fault window and overall.
    Availability {
        min_success_ratio: f64,
        max_p99_ms: f64,
    },
    /// No container of these workloads restarted or was replaced other
    /// than by a fault aimed at it (components recover on their own).
    NoRestarts { workloads: Vec<String> },
    /// Every internal listener presents a certificate of the chain in use
    /// and refuses a client without one: every endpoint of these Service
    /// ports is probed after the run.
    Tls { services: Vec<Target> },
}

fn default_convergence_bound() -> f64 {
    2.0
}

impl CheckKind {
    pub fn name(&self) -> &'static str {
        match self {
            CheckKind::Delivered => "delivered",
            CheckKind::UidInvariants => "uid_invariants",
            CheckKind::SingleWriter => "single_writer",
            CheckKind::Convergence { .. } => "convergence",
            CheckKind::Availability { .. } => "availability",
            CheckKind::Tls { .. } => "tls",
            CheckKind::NoRestarts { .. } => "no_restarts",
        }
    }
}

/// The JSON Schema of scenario files.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(Scenario);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

/// Reads and validates a scenario file (shape, then sense).
pub fn load(path: &Path) -> Result<Scenario, LabError> {
    let text = std::fs::read_to_string(path).map_err(|e| LabError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    parse(&text, path)
}

pub fn parse(text: &str, path: &Path) -> Result<Scenario, LabError> {
    let de = yaml::Deserializer::from_str(text);
    let scenario: Scenario =
        serde_path_to_error::deserialize(de).map_err(|e| LabError::Scenario {
            path: path.to_path_buf(),
            message: format!("{}: {}", e.path(), e.inner()),
        })?;
    scenario.validate().map_err(|message| LabError::Scenario {
        path: path.to_path_buf(),
        message,
    })?;
    Ok(scenario)
}

impl Scenario {
    fn validate(&self) -> Result<(), String> {
        if self.substrates.is_empty() {
            return Err("substrates: name at least one".into());
        }
        if !(self.duration_seconds > 0.0 && self.duration_seconds <= 3600.0) {
            return Err("duration_seconds: between 0 and 3600".into());
        }
        if self.topology.releases.is_empty() {
            return Err("topology.releases: at least one".into());
        }
        for r in &self.topology.releases {
            if r.chart.is_some() != r.manifests.is_empty() {
                return Err(format!(
                    "topology.releases.{}: give either `chart` or `manifests`",
                    r.name
                ));
            }
        }
        if self.checks.is_empty() {
            return Err("checks: at least one".into());
        }
        let mut last = 0.0;
        for (i, f) in self.faults.iter().enumerate() {
            if f.at_seconds < last {
                return Err(format!(
                    "faults.{i}.at_seconds: faults must be in time order"
                ));
            }
            if f.at_seconds > self.duration_seconds {
                return Err(format!(
                    "faults.{i}.at_seconds: {} is after the run ends ({})",
                    f.at_seconds, self.duration_seconds
                ));
            }
            last = f.at_seconds;
        }
        if self.workload.users > self.topology.users {
            return Err("workload.users: more than topology.users".into());
        }
        if self.control_of.is_some() && self.checks.iter().all(|c| c.expect) {
            return Err("control_of: a negative control expects at least one check false".into());
        }
        for c in &self.checks {
            if let CheckKind::Availability {
                min_success_ratio, ..
            } = c.kind
            {
                if !(0.0..=1.0).contains(&min_success_ratio) {
                    return Err("checks.availability.min_success_ratio: between 0 and 1".into());
                }
            }
        }
        Ok(())
    }

    /// Refuses a substrate that cannot produce every fault of the
    /// scenario, or that the scenario does not name.
    pub fn check_substrate(&self, kind: SubstrateKind, caps: &[Capability]) -> Result<(), String> {
        if !self.substrates.contains(&kind) {
            return Err(format!(
                "scenario `{}` does not run on the {} substrate (it names {:?})",
                self.name,
                kind.as_str(),
                self.substrates
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
            ));
        }
        for f in &self.faults {
            let need = f.action.capability();
            if !caps.contains(&need) {
                return Err(format!(
                    "fault `{}` needs {:?}, which the {} substrate cannot produce",
                    f.action.name(),
                    need,
                    kind.as_str()
                ));
            }
        }
        Ok(())
    }

    /// The run's duration and faults, shortened for `--smoke`.
    pub fn for_smoke(mut self) -> Scenario {
        if let Some(s) = &self.smoke {
            self.duration_seconds = s.duration_seconds;
            let end = self.duration_seconds;
            self.faults.retain(|f| f.at_seconds <= end);
        }
        self
    }
}

/// Resolves a path in a scenario against the repository root.
pub fn repo_path(root: &Path, rel: &str) -> PathBuf {
    let p = Path::new(rel);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}
