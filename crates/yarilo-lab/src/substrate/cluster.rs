//! The part of Kubernetes the charts rely on, emulated over a
//! [`PodRuntime`]:
//!
//! - **controllers**: a Deployment keeps `replicas` pods (random names,
//!   surge during a rollout); a StatefulSet keeps `<name>-0 … <name>-(n-1)`,
//!   created in order, each only once the lower ones are Ready
//!   (OrderedReady), removed from the top;
//! - **the kubelet**: init containers in order, then every container;
//!   startup, liveness and readiness probes (httpGet, tcpSocket, exec) with
//!   the manifest's periods and thresholds; a failed liveness restarts the
//!   container, an exited container is restarted with the kubelet's
//!   back-off (0, 10, 20, 40 … 300 s); a deleted pod gets SIGTERM, its
//!   grace period, then SIGKILL;
//! - **Services**: a headless Service's name resolves to every Ready pod
//!   (every pod with `publishNotReadyAddresses`), a StatefulSet pod to
//!   `<pod>.<service>`, a ClusterIP Service to a virtual IP that every pod
//!   DNATs to a random Ready endpoint per connection;
//! - **Secrets and ConfigMaps** as mounted files in the kubelet's layout
//!   (`..data` → a timestamped directory, keys as symlinks into it), swapped
//!   atomically when the lab updates a Secret, as a kubelet sync does.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use yarilo_config::serde_yaml as yaml;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::watch;

use super::{
    ContainerPlan, ContainerState, Mount, NetRules, PodRuntime, SandboxPlan, Signal, VipRule,
};
use crate::manifests::{labels_match, Container, Objects, Probe, Workload, WorkloadKind};
use crate::scenario::Mutation;
use crate::{LabError, Result};

/// The cluster domain pods resolve Services under.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
const TICK: Duration = Duration::from_millis(200);

/// Something that happened to a pod (for the report and the timeline).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterEvent {
    pub time_ms: u64,
    pub pod: String,
    pub event: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    Pending,
    Running,
    Terminating,
    Gone,
}

/// What the rest of the lab may read about a pod.
#[derive(Debug, Clone, Serialize)]
pub struct PodInfo {
    pub name: String,
    pub workload: String,
    pub index: u32,
    pub ip: Option<IpAddr>,
    pub ready: bool,
    pub phase: Phase,
    pub labels: BTreeMap<String, String>,
    pub restarts: u32,
    #[serde(skip)]
    pub sandbox: Option<String>,
    /// Every container id the pod ran, by container name (for logs).
    #[serde(skip)]
    pub container_ids: Vec<(String, String)>,
    #[serde(skip)]
    pub current: BTreeMap<String, String>,
}

struct PodEntry {
    info: PodInfo,
    /// Creation order (round-robin start of its Service picks).
    seq: u32,
    /// Set to ask the pod's kubelet task to delete it (`true`: graceful).
    delete: watch::Sender<Option<bool>>,
    /// Ports by name, per container, for Service targetPorts.
    ports: Vec<(Option<String>, u16)>,
}

struct WorkloadState {
    spec: Workload,
    installed: bool,
    replicas: u32,
    surge: u32,
}

struct Partition {
    id: u64,
    a: BTreeSet<String>,
    b: BTreeSet<String>,
}

struct State {
    pods: BTreeMap<String, PodEntry>,
    workloads: BTreeMap<String, WorkloadState>,
    vips: BTreeMap<String, IpAddr>,
    partitions: Vec<Partition>,
    next_partition: u64,
    rng: StdRng,
    applied: BTreeMap<String, NetRules>,
    created: u32,
}

pub struct Cluster<R: PodRuntime> {
    pub rt: Arc<R>,
    state: Arc<Mutex<State>>,
    objects: Arc<Mutex<Objects>>,
    mutations: Vec<Mutation>,
    round_robin: bool,
    dir: PathBuf,
    pub namespace: String,
    start: Instant,
    events: Arc<Mutex<Vec<ClusterEvent>>>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    logs_dir: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<R: PodRuntime> Cluster<R> {
    /// A cluster with the given objects; nothing runs until [`install`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rt: R,
        objects: Objects,
        mutations: Vec<Mutation>,
        round_robin: bool,
        dir: &Path,
        namespace: &str,
        seed: u64,
        start: Instant,
    ) -> Result<Arc<Cluster<R>>> {
        std::fs::create_dir_all(dir.join("pods")).map_err(LabError::io(dir))?;
        std::fs::create_dir_all(dir.join("claims")).map_err(LabError::io(dir))?;
        let logs_dir = dir.join("logs");
        std::fs::create_dir_all(&logs_dir).map_err(LabError::io(&logs_dir))?;
        let mut objects = objects;
        for m in &mutations {
            if let Mutation::Config {
                config_map,
                key,
                merge,
            } = m
            {
                let cm = objects.config_maps.get_mut(config_map).ok_or_else(|| {
                    LabError::Manifest(format!("mutation: no ConfigMap {config_map}"))
                })?;
                let text = cm.get(key).ok_or_else(|| {
                    LabError::Manifest(format!("mutation: ConfigMap {config_map} has no key {key}"))
                })?;
                let mut value: yaml::Value = yaml::from_str(text)
                    .map_err(|e| LabError::Manifest(format!("{config_map}/{key}: {e}")))?;
                merge_yaml(&mut value, merge);
                let out = yaml::to_string(&value)
                    .map_err(|e| LabError::Manifest(format!("{config_map}/{key}: {e}")))?;
                cm.insert(key.clone(), out);
            }
        }
        for m in &mutations {
            if let Mutation::LocalVolume { workload, volume } = m {
                let w = objects.workload_mut(workload).ok_or_else(|| {
                    LabError::Manifest(format!("mutation: no workload {workload}"))
                })?;
                let v = w
                    .template
                    .spec
                    .volumes
                    .iter_mut()
                    .find(|v| &v.name == volume)
                    .ok_or_else(|| {
                        LabError::Manifest(format!("mutation: {workload} has no volume {volume}"))
                    })?;
                v.persistent_volume_claim = None;
                v.config_map = None;
                v.secret = None;
                v.empty_dir = Some(yaml::Value::Mapping(Default::default()));
            }
        }
        for m in &mutations {
            if let Mutation::Container {
                workload,
                container,
                merge,
            } = m
            {
                let w = objects.workload_mut(workload).ok_or_else(|| {
                    LabError::Manifest(format!("mutation: no workload {workload}"))
                })?;
                let c = w
                    .template
                    .spec
                    .containers
                    .iter_mut()
                    .find(|c| &c.name == container)
                    .ok_or_else(|| {
                        LabError::Manifest(format!(
                            "mutation: {workload} has no container {container}"
                        ))
                    })?;
                let mut v = yaml::to_value(&*c).map_err(|e| LabError::Manifest(e.to_string()))?;
                merge_yaml(&mut v, merge);
                *c = yaml::from_value(v).map_err(|e| {
                    LabError::Manifest(format!("mutation of {workload}/{container}: {e}"))
                })?;
            }
        }
        let mut workloads = BTreeMap::new();
        for w in &objects.workloads {
            workloads.insert(
                w.id(),
                WorkloadState {
                    spec: w.clone(),
                    installed: false,
                    replicas: w.replicas,
                    surge: 0,
                },
            );
        }
        let mut vips = BTreeMap::new();
        for (n, s) in objects.services.iter().filter(|s| !s.headless).enumerate() {
            vips.insert(s.meta.name.clone(), rt.vip(n as u32));
        }
        let (stop, _) = watch::channel(false);
        Ok(Arc::new(Cluster {
            rt: Arc::new(rt),
            state: Arc::new(Mutex::new(State {
                pods: BTreeMap::new(),
                workloads,
                vips,
                partitions: Vec::new(),
                next_partition: 1,
                rng: StdRng::seed_from_u64(seed),
                applied: BTreeMap::new(),
                created: 0,
            })),
            objects: Arc::new(Mutex::new(objects)),
            mutations,
            round_robin,
            dir: dir.to_path_buf(),
            namespace: namespace.to_string(),
            start,
            events: Arc::new(Mutex::new(Vec::new())),
            stop,
            tasks: Mutex::new(Vec::new()),
            logs_dir,
        }))
    }

    /// A pod's own directory (volumes, resolv.conf): per incarnation, so
    /// an emptyDir dies with its pod even when a StatefulSet reuses the
    /// name.
    fn pod_dir(&self, pod: &str) -> PathBuf {
        let seq = lock(&self.state).pods.get(pod).map(|p| p.seq).unwrap_or(0);
        self.dir.join("pods").join(format!("{pod}.{seq}"))
    }

    fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn event(&self, pod: &str, what: impl Into<String>) {
        let e = ClusterEvent {
            time_ms: self.ms(),
            pod: pod.to_string(),
            event: what.into(),
        };
        tracing::info!(pod = %e.pod, t_ms = e.time_ms, "{}", e.event);
        lock(&self.events).push(e);
    }

    pub fn events(&self) -> Vec<ClusterEvent> {
        lock(&self.events).clone()
    }

    /// Starts the controller and the packet-rule sync.
    pub fn start(self: &Arc<Self>) {
        let me = self.clone();
        let mut stop = self.stop.subscribe();
        let controller = tokio::spawn(async move {
            loop {
                if let Err(e) = me.reconcile() {
                    tracing::warn!(error = %e, "controller");
                }
                tokio::select! {
                    _ = tokio::time::sleep(TICK) => {}
                    _ = stop.changed() => return,
                }
            }
        });
        let me = self.clone();
        let mut stop = self.stop.subscribe();
        let rules = tokio::spawn(async move {
            loop {
                me.sync_rules().await;
                tokio::select! {
                    _ = tokio::time::sleep(TICK) => {}
                    _ = stop.changed() => return,
                }
            }
        });
        lock(&self.tasks).extend([controller, rules]);
    }

    /// Installs releases in order, each ready before the next (as `helm
    /// install --wait`), within `timeout` each.
    pub async fn install(self: &Arc<Self>, releases: &[String], timeout: Duration) -> Result<()> {
        for release in releases {
            let ids: Vec<String> = {
                let mut st = lock(&self.state);
                let mut ids = Vec::new();
                for (id, w) in st.workloads.iter_mut() {
                    if &w.spec.release == release {
                        w.installed = true;
                        ids.push(id.clone());
                    }
                }
                ids
            };
            tracing::info!(release, workloads = ?ids, "installing");
            let deadline = Instant::now() + timeout;
            loop {
                if ids.iter().all(|id| self.workload_ready(id)) {
                    break;
                }
                if Instant::now() > deadline {
                    let pods = self.pods();
                    let waiting: Vec<String> = pods
                        .iter()
                        .filter(|p| ids.contains(&p.workload) && !p.ready)
                        .map(|p| format!("{} ({:?}, restarts {})", p.name, p.phase, p.restarts))
                        .collect();
                    return Err(LabError::Substrate(format!(
                        "release {release} not ready within {}s; waiting for {waiting:?} (pod logs in {})",
                        timeout.as_secs(),
                        self.logs_dir.display()
                    )));
                }
                tokio::time::sleep(TICK).await;
            }
            self.event(release, "release ready");
        }
        Ok(())
    }

    /// Whether a workload has its replica count of Ready pods.
    pub fn workload_ready(&self, id: &str) -> bool {
        let st = lock(&self.state);
        let Some(w) = st.workloads.get(id) else {
            return false;
        };
        let ready = st
            .pods
            .values()
            .filter(|p| p.info.workload == id && p.info.ready && p.info.phase == Phase::Running)
            .count() as u32;
        ready >= w.replicas
    }

    pub fn pods(&self) -> Vec<PodInfo> {
        lock(&self.state)
            .pods
            .values()
            .map(|p| p.info.clone())
            .collect()
    }

    pub fn pod(&self, name: &str) -> Option<PodInfo> {
        lock(&self.state).pods.get(name).map(|p| p.info.clone())
    }

    /// Live pods (not terminating) of a workload, by index.
    pub fn pods_of(&self, workload: &str) -> Vec<PodInfo> {
        let mut v: Vec<PodInfo> = lock(&self.state)
            .pods
            .values()
            .filter(|p| {
                p.info.workload == workload
                    && p.info.phase != Phase::Terminating
                    && p.info.phase != Phase::Gone
            })
            .map(|p| p.info.clone())
            .collect();
        v.sort_by_key(|p| p.index);
        v
    }

    pub fn workload_ids(&self) -> Vec<String> {
        lock(&self.state).workloads.keys().cloned().collect()
    }

    pub fn replicas(&self, workload: &str) -> Option<u32> {
        lock(&self.state)
            .workloads
            .get(workload)
            .map(|w| w.replicas)
    }

    pub fn set_replicas(&self, workload: &str, n: u32) -> Result<()> {
        let mut st = lock(&self.state);
        let w = st
            .workloads
            .get_mut(workload)
            .ok_or_else(|| LabError::Substrate(format!("no workload {workload}")))?;
        w.replicas = n;
        drop(st);
        self.event(workload, format!("scaled to {n}"));
        Ok(())
    }

    /// A random number from the cluster's seeded source.
    pub fn random(&self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        lock(&self.state).rng.gen_range(0..n)
    }

    /// Ready endpoints of a Service port (as `ip:targetPort`).
    pub fn endpoints(&self, service: &str, port: u16) -> Vec<(String, SocketAddr)> {
        let objects = lock(&self.objects);
        let Some(svc) = objects.service(service) else {
            return Vec::new();
        };
        let Some(sp) = svc.ports.iter().find(|p| p.port == port).cloned() else {
            return Vec::new();
        };
        let selector = svc.selector.clone();
        let pnr = svc.publish_not_ready;
        drop(objects);
        let st = lock(&self.state);
        let mut out = Vec::new();
        for p in st.pods.values() {
            let i = &p.info;
            if i.phase != Phase::Running || !labels_match(&selector, &i.labels) {
                continue;
            }
            if !(i.ready || pnr) {
                continue;
            }
            let Some(ip) = i.ip else { continue };
            let target = match &sp.target_port {
                None => Some(sp.port),
                Some(crate::manifests::PortRef::Number(n)) => Some(*n),
                Some(crate::manifests::PortRef::Name(name)) => p
                    .ports
                    .iter()
                    .find(|(n, _)| n.as_deref() == Some(name.as_str()))
                    .map(|(_, port)| *port)
                    .or_else(|| name.parse().ok()),
            };
            if let Some(t) = target {
                out.push((i.name.clone(), SocketAddr::new(ip, t)));
            }
        }
        out.sort_by_key(|(_, a)| *a);
        out
    }

    /// A random Ready endpoint, as an external load balancer picks one.
    pub fn pick_endpoint(&self, service: &str, port: u16) -> Option<SocketAddr> {
        let eps = self.endpoints(service, port);
        if eps.is_empty() {
            return None;
        }
        let i = self.random(eps.len());
        Some(eps[i].1)
    }

    /// DNS: the addresses a name resolves to (`None`: no such name).
    pub fn resolve(&self, name: &str) -> Option<Vec<IpAddr>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let ns = self.namespace.to_ascii_lowercase();
        let rest = name
            .strip_suffix(&format!(".svc.{CLUSTER_DOMAIN}"))
            .or_else(|| name.strip_suffix(".svc"))
            .unwrap_or(&name);
        let labels: Vec<&str> = rest.split('.').collect();
        let (pod, svc) = match labels.as_slice() {
            [svc] => (None, *svc),
            [svc, n] if *n == ns => (None, *svc),
            [pod, svc, n] if *n == ns => (Some(*pod), *svc),
            _ => return None,
        };
        let objects = lock(&self.objects);
        let service = objects.service(svc)?.clone();
        drop(objects);
        if let Some(pod) = pod {
            let st = lock(&self.state);
            let p = st.pods.get(pod)?;
            let governed = st
                .workloads
                .get(&p.info.workload)
                .and_then(|w| w.spec.service_name.clone())
                .is_some_and(|s| s == svc);
            if !governed || p.info.phase != Phase::Running {
                return None;
            }
            return Some(p.info.ip.into_iter().collect());
        }
        if !service.headless {
            return lock(&self.state).vips.get(svc).map(|ip| vec![*ip]);
        }
        let st = lock(&self.state);
        let mut ips: Vec<IpAddr> = st
            .pods
            .values()
            .filter(|p| {
                p.info.phase == Phase::Running
                    && labels_match(&service.selector, &p.info.labels)
                    && (p.info.ready || service.publish_not_ready)
            })
            .filter_map(|p| p.info.ip)
            .collect();
        ips.sort();
        Some(ips)
    }

    pub fn vip(&self, service: &str) -> Option<IpAddr> {
        lock(&self.state).vips.get(service).copied()
    }

    /// Cuts traffic between two sets of pods until [`heal`].
    pub fn partition(&self, a: Vec<String>, b: Vec<String>) -> u64 {
        let mut st = lock(&self.state);
        let id = st.next_partition;
        st.next_partition += 1;
        st.partitions.push(Partition {
            id,
            a: a.into_iter().collect(),
            b: b.into_iter().collect(),
        });
        id
    }

    pub fn heal(&self, id: u64) {
        lock(&self.state).partitions.retain(|p| p.id != id);
    }

    /// Sets a label on a live pod (a relabelling hook).
    pub fn set_label(&self, pod: &str, key: &str, value: Option<&str>) {
        let mut st = lock(&self.state);
        if let Some(p) = st.pods.get_mut(pod) {
            match value {
                Some(v) => {
                    p.info.labels.insert(key.to_string(), v.to_string());
                }
                None => {
                    p.info.labels.remove(key);
                }
            }
        }
    }

    /// Asks a pod to go (graceful: SIGTERM and its grace period; else
    /// SIGKILL at once). Its controller replaces it.
    pub fn delete_pod(&self, pod: &str, graceful: bool) -> Result<()> {
        let st = lock(&self.state);
        let p = st
            .pods
            .get(pod)
            .ok_or_else(|| LabError::Substrate(format!("no pod {pod}")))?;
        let _ = p.delete.send(Some(graceful));
        Ok(())
    }

    /// Sends a signal to every running container of a pod.
    pub async fn signal_pod(&self, pod: &str, sig: Signal) -> Result<()> {
        let ids: Vec<String> = self
            .pod(pod)
            .ok_or_else(|| LabError::Substrate(format!("no pod {pod}")))?
            .current
            .values()
            .cloned()
            .collect();
        for id in ids {
            self.rt.signal(&id, sig).await?;
        }
        self.event(pod, sig.name());
        Ok(())
    }

    /// `kubectl rollout restart`: every pod replaced in turn, each
    /// replacement Ready before the next old pod goes.
    pub async fn rollout_restart(
        self: &Arc<Self>,
        workload: &str,
        timeout: Duration,
    ) -> Result<()> {
        let (kind, strategy) = {
            let st = lock(&self.state);
            let w = st
                .workloads
                .get(workload)
                .ok_or_else(|| LabError::Substrate(format!("no workload {workload}")))?;
            (w.spec.kind, w.spec.strategy.clone())
        };
        let mut old: Vec<PodInfo> = self.pods_of(workload);
        if kind == WorkloadKind::StatefulSet {
            old.reverse();
        }
        self.event(workload, "rollout restart");
        for pod in old {
            let deadline = Instant::now() + timeout;
            if kind == WorkloadKind::Deployment && strategy != "Recreate" {
                if let Some(w) = lock(&self.state).workloads.get_mut(workload) {
                    w.surge += 1;
                }
                let before: BTreeSet<String> =
                    self.pods_of(workload).into_iter().map(|p| p.name).collect();
                loop {
                    let fresh_ready = self
                        .pods_of(workload)
                        .into_iter()
                        .any(|p| !before.contains(&p.name) && p.ready);
                    if fresh_ready {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(LabError::Substrate(format!(
                            "{workload}: replacement for {} not ready in time",
                            pod.name
                        )));
                    }
                    tokio::time::sleep(TICK).await;
                }
                self.delete_pod(&pod.name, true)?;
                if let Some(w) = lock(&self.state).workloads.get_mut(workload) {
                    w.surge = w.surge.saturating_sub(1);
                }
                self.wait_gone(&pod.name, deadline).await?;
            } else {
                self.delete_pod(&pod.name, true)?;
                self.wait_gone(&pod.name, deadline).await?;
                loop {
                    let back = self
                        .pods_of(workload)
                        .into_iter()
                        .any(|p| p.index == pod.index && p.ready);
                    if back {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(LabError::Substrate(format!(
                            "{workload}: {} not back in time",
                            pod.name
                        )));
                    }
                    tokio::time::sleep(TICK).await;
                }
            }
        }
        self.event(workload, "rollout complete");
        Ok(())
    }

    async fn wait_gone(&self, pod: &str, deadline: Instant) -> Result<()> {
        loop {
            let gone = lock(&self.state)
                .pods
                .get(pod)
                .is_none_or(|p| p.info.phase == Phase::Gone);
            if gone {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(LabError::Substrate(format!(
                    "{pod} did not terminate in time"
                )));
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// Replaces a Secret's data and rewrites it in every pod that mounts
    /// it (atomic `..data` swap).
    pub fn update_secret(&self, name: &str, data: BTreeMap<String, Vec<u8>>) -> Result<()> {
        lock(&self.objects)
            .secrets
            .insert(name.to_string(), data.clone());
        let pods: Vec<(String, String)> = {
            let st = lock(&self.state);
            st.pods
                .values()
                .filter(|p| p.info.phase != Phase::Gone)
                .map(|p| (p.info.name.clone(), p.info.workload.clone()))
                .collect()
        };
        for (pod, workload) in pods {
            let spec = {
                let st = lock(&self.state);
                st.workloads
                    .get(&workload)
                    .map(|w| w.spec.template.spec.clone())
            };
            let Some(spec) = spec else { continue };
            for v in &spec.volumes {
                if let Some(s) = &v.secret {
                    if s.secret_name == name {
                        let dir = self.pod_dir(&pod).join("vol").join(&v.name);
                        let files = select_items(&data, &s.items);
                        let ids = RunAs::of(spec.other.get("securityContext"));
                        write_atomic_dir(
                            &dir,
                            &files,
                            s.default_mode.unwrap_or(0o644),
                            ids.fs_group,
                        )?;
                    }
                }
            }
        }
        self.event(name, "secret updated");
        Ok(())
    }

    pub fn secret(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        lock(&self.objects).secrets.get(name).cloned()
    }

    pub fn objects(&self) -> Objects {
        lock(&self.objects).clone()
    }

    /// Workloads whose pods mount a given Secret.
    pub fn workloads_mounting(&self, secret: &str) -> Vec<String> {
        let st = lock(&self.state);
        st.workloads
            .iter()
            .filter(|(_, w)| {
                w.installed
                    && w.spec
                        .template
                        .spec
                        .volumes
                        .iter()
                        .any(|v| v.secret.as_ref().is_some_and(|s| s.secret_name == secret))
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// One controller pass.
    fn reconcile(self: &Arc<Self>) -> Result<()> {
        let mut create: Vec<(String, u32, String)> = Vec::new();
        let mut delete: Vec<String> = Vec::new();
        {
            let mut st = lock(&self.state);
            st.pods.retain(|_, p| p.info.phase != Phase::Gone);
            let ids: Vec<String> = st.workloads.keys().cloned().collect();
            for id in ids {
                let (installed, kind, name, want) = {
                    let w = &st.workloads[&id];
                    (
                        w.installed,
                        w.spec.kind,
                        w.spec.meta.name.clone(),
                        w.replicas + w.surge,
                    )
                };
                if !installed {
                    continue;
                }
                let live: Vec<&PodEntry> = st
                    .pods
                    .values()
                    .filter(|p| p.info.workload == id && p.info.phase != Phase::Terminating)
                    .collect();
                match kind {
                    WorkloadKind::StatefulSet => {
                        let have: BTreeSet<u32> = live.iter().map(|p| p.info.index).collect();
                        // Any terminating pod of the set blocks its name.
                        let terminating: BTreeSet<u32> = st
                            .pods
                            .values()
                            .filter(|p| p.info.workload == id && p.info.phase == Phase::Terminating)
                            .map(|p| p.info.index)
                            .collect();
                        for i in 0..want {
                            if have.contains(&i) {
                                continue;
                            }
                            if terminating.contains(&i) {
                                break;
                            }
                            let lower_ready = live
                                .iter()
                                .filter(|p| p.info.index < i)
                                .all(|p| p.info.ready)
                                && (0..i).all(|j| have.contains(&j));
                            if lower_ready {
                                create.push((id.clone(), i, format!("{name}-{i}")));
                            }
                            break;
                        }
                        if let Some(top) = live
                            .iter()
                            .filter(|p| p.info.index >= want)
                            .max_by_key(|p| p.info.index)
                        {
                            delete.push(top.info.name.clone());
                        }
                    }
                    WorkloadKind::Deployment => {
                        let n = live.len() as u32;
                        if n < want {
                            let used: BTreeSet<u32> = st
                                .pods
                                .values()
                                .filter(|p| p.info.workload == id)
                                .map(|p| p.info.index)
                                .collect();
                            let mut idx = 0;
                            for _ in n..want {
                                while used.contains(&idx)
                                    || create.iter().any(|c| c.0 == id && c.1 == idx)
                                {
                                    idx += 1;
                                }
                                create.push((id.clone(), idx, String::new()));
                                idx += 1;
                            }
                        } else if n > want {
                            let mut newest: Vec<&&PodEntry> = live.iter().collect();
                            newest.sort_by_key(|p| std::cmp::Reverse(p.info.index));
                            for p in newest.into_iter().take((n - want) as usize) {
                                delete.push(p.info.name.clone());
                            }
                        }
                    }
                }
            }
            for (id, _, name) in create.iter_mut() {
                if name.is_empty() {
                    let base = st.workloads[id.as_str()].spec.meta.name.clone();
                    let tag: String = (0..5)
                        .map(|_| {
                            let c = st.rng.gen_range(0..36u8);
                            (if c < 10 { b'0' + c } else { b'a' + c - 10 }) as char
                        })
                        .collect();
                    *name = format!("{base}-{tag}");
                }
            }
        }
        for name in delete {
            let st = lock(&self.state);
            if let Some(p) = st.pods.get(&name) {
                let _ = p.delete.send(Some(true));
            }
        }
        for (id, index, name) in create {
            self.create_pod(&id, index, &name)?;
        }
        Ok(())
    }

    fn create_pod(self: &Arc<Self>, workload: &str, index: u32, name: &str) -> Result<()> {
        let spec = {
            let st = lock(&self.state);
            st.workloads[workload].spec.clone()
        };
        let (tx, rx) = watch::channel(None);
        let mut ports = Vec::new();
        for c in &spec.template.spec.containers {
            for p in &c.ports {
                ports.push((p.name.clone(), p.container_port));
            }
        }
        let info = PodInfo {
            name: name.to_string(),
            workload: workload.to_string(),
            index,
            ip: None,
            ready: false,
            phase: Phase::Pending,
            labels: spec.template.metadata.labels.clone(),
            restarts: 0,
            sandbox: None,
            container_ids: Vec::new(),
            current: BTreeMap::new(),
        };
        {
            let mut st = lock(&self.state);
            let seq = st.created;
            st.created += 1;
            st.pods.insert(
                name.to_string(),
                PodEntry {
                    info,
                    seq,
                    delete: tx,
                    ports,
                },
            );
        }
        self.event(name, "created");
        let me = self.clone();
        let pod = name.to_string();
        let task = tokio::spawn(async move {
            if let Err(e) = me.run_pod(&pod, &spec, index, rx).await {
                tracing::warn!(pod = %pod, error = %e, "pod failed");
                me.event(&pod, format!("failed: {e}"));
            }
            me.finish_pod(&pod).await;
        });
        lock(&self.tasks).push(task);
        Ok(())
    }

    fn update<F: FnOnce(&mut PodInfo)>(&self, pod: &str, f: F) {
        if let Some(p) = lock(&self.state).pods.get_mut(pod) {
            f(&mut p.info);
        }
    }

    /// Volumes and container plans of one pod.
    fn plan_pod(
        &self,
        pod: &str,
        spec: &Workload,
        index: u32,
        ip: IpAddr,
    ) -> Result<(Vec<ContainerPlan>, Vec<ContainerPlan>)> {
        let objects = lock(&self.objects).clone();
        let pod_dir = self.pod_dir(pod);
        let ids = RunAs::of(spec.template.spec.other.get("securityContext"));
        let mut vol_paths: BTreeMap<String, PathBuf> = BTreeMap::new();
        for v in &spec.template.spec.volumes {
            let dir = pod_dir.join("vol").join(&v.name);
            if let Some(cm) = &v.config_map {
                let data: BTreeMap<String, Vec<u8>> = objects
                    .config_maps
                    .get(&cm.name)
                    .map(|d| {
                        d.iter()
                            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                            .collect()
                    })
                    .unwrap_or_default();
                write_atomic_dir(
                    &dir,
                    &select_items(&data, &cm.items),
                    cm.default_mode.unwrap_or(0o644),
                    ids.fs_group,
                )?;
            } else if let Some(s) = &v.secret {
                let data = objects
                    .secrets
                    .get(&s.secret_name)
                    .cloned()
                    .unwrap_or_default();
                write_atomic_dir(
                    &dir,
                    &select_items(&data, &s.items),
                    s.default_mode.unwrap_or(0o644),
                    ids.fs_group,
                )?;
            } else if let Some(c) = &v.persistent_volume_claim {
                let d = self.dir.join("claims").join(&c.claim_name);
                make_shared_dir(&d)?;
                vol_paths.insert(v.name.clone(), d);
                continue;
            } else {
                make_shared_dir(&dir)?;
            }
            vol_paths.insert(v.name.clone(), dir);
        }
        for t in &spec.claim_templates {
            let d = self.dir.join("claims").join(format!("{t}-{pod}"));
            make_shared_dir(&d)?;
            vol_paths.insert(t.clone(), d);
        }
        let plan = |c: &Container| -> Result<ContainerPlan> {
            let mut env: Vec<(String, String)> = Vec::new();
            let lookup_key = |secret: bool, name: &str, key: &str| -> Option<String> {
                if secret {
                    objects
                        .secrets
                        .get(name)?
                        .get(key)
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                } else {
                    objects.config_maps.get(name)?.get(key).cloned()
                }
            };
            for ef in &c.env_from {
                let prefix = ef.prefix.clone().unwrap_or_default();
                if let Some(r) = &ef.secret_ref {
                    for (k, v) in objects.secrets.get(&r.name).cloned().unwrap_or_default() {
                        env.push((
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        ));
                    }
                }
                if let Some(r) = &ef.config_map_ref {
                    for (k, v) in objects
                        .config_maps
                        .get(&r.name)
                        .cloned()
                        .unwrap_or_default()
                    {
                        env.push((format!("{prefix}{k}"), v));
                    }
                }
            }
            for e in &c.env {
                let value = if let Some(v) = &e.value {
                    Some(expand(v, &env))
                } else if let Some(src) = &e.value_from {
                    if let Some(r) = &src.secret_key_ref {
                        lookup_key(true, &r.name, &r.key)
                    } else if let Some(r) = &src.config_map_key_ref {
                        lookup_key(false, &r.name, &r.key)
                    } else if let Some(f) = &src.field_ref {
                        Some(match f.field_path.as_str() {
                            "status.podIP" => ip.to_string(),
                            "metadata.name" => pod.to_string(),
                            "metadata.namespace" => self.namespace.clone(),
                            "spec.nodeName" => "lab-node".to_string(),
                            "status.hostIP" => self.rt.dns_address().to_string(),
                            other => {
                                return Err(LabError::Manifest(format!(
                                    "{}: fieldRef {other} is not supported",
                                    spec.id()
                                )))
                            }
                        })
                    } else {
                        None
                    }
                } else {
                    Some(String::new())
                };
                if let Some(v) = value {
                    env.retain(|(k, _)| k != &e.name);
                    env.push((e.name.clone(), v));
                }
            }
            for m in &self.mutations {
                if let Mutation::Env {
                    workload,
                    container,
                    name,
                    value,
                    per_pod,
                } = m
                {
                    if workload != &spec.id() || container.as_ref().is_some_and(|n| n != &c.name) {
                        continue;
                    }
                    let v = if per_pod.is_empty() {
                        value.clone()
                    } else {
                        per_pod.get(index as usize % per_pod.len()).cloned()
                    };
                    if let Some(v) = v {
                        env.retain(|(k, _)| k != name);
                        env.push((name.clone(), v));
                    }
                }
            }
            let mut mounts = Vec::new();
            for m in &c.volume_mounts {
                let base = vol_paths.get(&m.name).ok_or_else(|| {
                    LabError::Manifest(format!("{}: unknown volume {}", spec.id(), m.name))
                })?;
                let host = match &m.sub_path {
                    Some(sp) if !sp.is_empty() => {
                        let p = base.join(sp);
                        if !p.exists() {
                            make_shared_dir(&p)?;
                        }
                        p
                    }
                    _ => base.clone(),
                };
                mounts.push(Mount {
                    host,
                    container: m.mount_path.clone(),
                    read_only: m.read_only,
                });
            }
            let run_as = ids.with(c.other.get("securityContext"));
            Ok(ContainerPlan {
                user: run_as.user(),
                group_add: run_as.fs_group.into_iter().collect(),
                name: c.name.clone(),
                image: c.image.clone(),
                command: c.command.iter().map(|s| expand(s, &env)).collect(),
                args: c.args.iter().map(|s| expand(s, &env)).collect(),
                env,
                mounts,
                working_dir: c.working_dir.clone(),
            })
        };
        let init = spec
            .template
            .spec
            .init_containers
            .iter()
            .map(plan)
            .collect::<Result<Vec<_>>>()?;
        let main = spec
            .template
            .spec
            .containers
            .iter()
            .map(plan)
            .collect::<Result<Vec<_>>>()?;
        Ok((init, main))
    }

    fn resolv_conf(&self, pod: &str) -> Result<PathBuf> {
        let dir = self.pod_dir(pod);
        std::fs::create_dir_all(&dir).map_err(LabError::io(&dir))?;
        let path = dir.join("resolv.conf");
        let ns = &self.namespace;
        let text = format!(
            "nameserver {}\nsearch {ns}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\noptions ndots:5 timeout:1 attempts:2\n",
            self.rt.dns_address()
        );
        std::fs::write(&path, text).map_err(LabError::io(&path))?;
        Ok(path)
    }

    /// A pod's kubelet: sandbox, init containers, containers, probes,
    /// restarts, until it is deleted.
    async fn run_pod(
        self: &Arc<Self>,
        pod: &str,
        spec: &Workload,
        index: u32,
        mut delete: watch::Receiver<Option<bool>>,
    ) -> Result<()> {
        let resolv = self.resolv_conf(pod)?;
        let (sandbox, ip) = self
            .rt
            .create_sandbox(&SandboxPlan {
                pod: pod.to_string(),
                resolv_conf: resolv,
                labels: spec.template.metadata.labels.clone(),
            })
            .await?;
        self.update(pod, |p| {
            p.sandbox = Some(sandbox.clone());
            p.ip = Some(ip);
        });
        self.event(pod, format!("sandbox up at {ip}"));
        let (init, main) = self.plan_pod(pod, spec, index, ip)?;
        // Init containers, in order, each to a zero exit.
        for (n, c) in init.iter().enumerate() {
            let mut attempt = 0;
            loop {
                let asked = delete.borrow().is_some();
                if asked {
                    return Ok(());
                }
                let id = self.rt.start_container(&sandbox, c, attempt).await?;
                self.update(pod, |p| p.container_ids.push((c.name.clone(), id.clone())));
                let code = loop {
                    match self.rt.state(&id).await? {
                        ContainerState::Exited { code } => break code,
                        ContainerState::Gone => break -1,
                        _ => tokio::time::sleep(TICK).await,
                    }
                };
                if code == 0 {
                    break;
                }
                self.event(pod, format!("init container {} exited {code}", c.name));
                attempt += 1;
                tokio::time::sleep(backoff(attempt)).await;
            }
            let _ = n;
        }
        let mut cs: Vec<Kubelet> = Vec::new();
        for (c, m) in main.iter().zip(&spec.template.spec.containers) {
            let id = self.rt.start_container(&sandbox, c, 0).await?;
            self.update(pod, |p| {
                p.container_ids.push((c.name.clone(), id.clone()));
                p.current.insert(c.name.clone(), id.clone());
            });
            cs.push(Kubelet::new(c.clone(), m.clone(), id));
        }
        self.update(pod, |p| p.phase = Phase::Running);
        let mut was_ready = false;
        loop {
            let asked = *delete.borrow();
            if let Some(graceful) = asked {
                self.update(pod, |p| {
                    p.phase = Phase::Terminating;
                    p.ready = false;
                });
                self.event(
                    pod,
                    if graceful {
                        "terminating (SIGTERM)"
                    } else {
                        "killed (SIGKILL)"
                    },
                );
                self.terminate(
                    &cs,
                    graceful,
                    spec.template.spec.termination_grace_period_seconds,
                )
                .await;
                return Ok(());
            }
            let now = Instant::now();
            for k in cs.iter_mut() {
                let st = self.rt.state(&k.id).await.unwrap_or(ContainerState::Gone);
                match st {
                    ContainerState::Exited { code } => {
                        if k.restart_at.is_none() {
                            k.restarts += 1;
                            let wait = backoff(k.restarts);
                            k.restart_at = Some(now + wait);
                            k.ready = false;
                            self.event(
                                pod,
                                format!(
                                    "container {} exited {code}; restart in {}s",
                                    k.plan.name,
                                    wait.as_secs()
                                ),
                            );
                            self.update(pod, |p| p.restarts += 1);
                        }
                    }
                    ContainerState::Gone => {
                        if k.restart_at.is_none() {
                            k.restarts += 1;
                            k.restart_at = Some(now);
                            k.ready = false;
                        }
                    }
                    ContainerState::Running | ContainerState::Paused => {}
                }
                if let Some(at) = k.restart_at {
                    if now >= at {
                        match self.rt.start_container(&sandbox, &k.plan, k.restarts).await {
                            Ok(id) => {
                                self.update(pod, |p| {
                                    p.container_ids.push((k.plan.name.clone(), id.clone()));
                                    p.current.insert(k.plan.name.clone(), id.clone());
                                });
                                k.reset(id);
                                self.event(pod, format!("container {} restarted", k.plan.name));
                            }
                            Err(e) => {
                                tracing::warn!(pod, error = %e, "restart failed");
                                k.restart_at = Some(now + Duration::from_secs(1));
                            }
                        }
                    }
                    continue;
                }
                if st == ContainerState::Paused {
                    continue;
                }
                // Probes.
                if let Some(result) = self.probe_due(k, ip, ProbeKind::Startup, now).await {
                    if result {
                        k.started = true;
                    } else if k.fails[0]
                        >= k.spec
                            .startup_probe
                            .as_ref()
                            .map_or(3, |p| p.failure_threshold)
                    {
                        self.event(
                            pod,
                            format!("container {} startup probe failed; restarting", k.plan.name),
                        );
                        self.restart_container(
                            pod,
                            k,
                            spec.template.spec.termination_grace_period_seconds,
                        )
                        .await;
                        continue;
                    }
                }
                if !k.started {
                    continue;
                }
                if let Some(false) = self.probe_due(k, ip, ProbeKind::Liveness, now).await {
                    let th = k
                        .spec
                        .liveness_probe
                        .as_ref()
                        .map_or(3, |p| p.failure_threshold);
                    if k.fails[1] >= th {
                        self.event(
                            pod,
                            format!(
                                "container {} liveness failed {th} times; restarting",
                                k.plan.name
                            ),
                        );
                        self.restart_container(
                            pod,
                            k,
                            spec.template.spec.termination_grace_period_seconds,
                        )
                        .await;
                        continue;
                    }
                }
                match k.spec.readiness_probe.clone() {
                    None => k.ready = true,
                    Some(p) => {
                        if let Some(r) = self.probe_due(k, ip, ProbeKind::Readiness, now).await {
                            if r && k.oks[2] >= p.success_threshold {
                                k.ready = true;
                            }
                            if !r && k.fails[2] >= p.failure_threshold {
                                k.ready = false;
                            }
                        }
                    }
                }
            }
            let ready = cs.iter().all(|k| k.ready && k.restart_at.is_none());
            if ready != was_ready {
                was_ready = ready;
                self.update(pod, |p| p.ready = ready);
                self.event(pod, if ready { "ready" } else { "not ready" });
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = delete.changed() => {}
            }
        }
    }

    async fn restart_container(&self, pod: &str, k: &mut Kubelet, grace: u32) {
        let _ = self.rt.signal(&k.id, Signal::Term).await;
        let deadline = Instant::now() + Duration::from_secs(u64::from(grace));
        while Instant::now() < deadline {
            if !matches!(
                self.rt.state(&k.id).await,
                Ok(ContainerState::Running) | Ok(ContainerState::Paused)
            ) {
                break;
            }
            tokio::time::sleep(TICK).await;
        }
        let _ = self.rt.signal(&k.id, Signal::Kill).await;
        k.restarts += 1;
        k.ready = false;
        k.restart_at = Some(Instant::now());
        self.update(pod, |p| p.restarts += 1);
    }

    async fn terminate(&self, cs: &[Kubelet], graceful: bool, grace: u32) {
        if graceful {
            for k in cs {
                // A stopped process cannot handle SIGTERM; resume it first.
                let _ = self.rt.signal(&k.id, Signal::Cont).await;
                let _ = self.rt.signal(&k.id, Signal::Term).await;
            }
            let deadline = Instant::now() + Duration::from_secs(u64::from(grace));
            while Instant::now() < deadline {
                let mut any = false;
                for k in cs {
                    if matches!(
                        self.rt.state(&k.id).await,
                        Ok(ContainerState::Running) | Ok(ContainerState::Paused)
                    ) {
                        any = true;
                    }
                }
                if !any {
                    break;
                }
                tokio::time::sleep(TICK).await;
            }
        }
        for k in cs {
            let _ = self.rt.signal(&k.id, Signal::Kill).await;
        }
    }

    /// After a pod's kubelet ends: keep its logs, remove its containers
    /// and sandbox, mark it gone (its controller replaces it).
    async fn finish_pod(&self, pod: &str) {
        let info = self.pod(pod);
        if let Some(info) = &info {
            self.save_logs(info).await;
            for (_, id) in &info.container_ids {
                let _ = self.rt.remove_container(id).await;
            }
            if let Some(sb) = &info.sandbox {
                let _ = self.rt.remove_sandbox(sb).await;
            }
        }
        let _ = std::fs::remove_dir_all(self.pod_dir(pod));
        lock(&self.state).applied.remove(pod);
        self.update(pod, |p| {
            p.phase = Phase::Gone;
            p.ready = false;
        });
        self.event(pod, "gone");
    }

    async fn save_logs(&self, info: &PodInfo) {
        let dir = self.logs_dir.join(&info.name);
        let _ = std::fs::create_dir_all(&dir);
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for (name, id) in &info.container_ids {
            let n = counts.entry(name.clone()).or_insert(0);
            let path = dir.join(format!("{name}.{n}.log"));
            *n += 1;
            if let Ok(lines) = self.rt.logs(id).await {
                let text: String = lines
                    .iter()
                    .map(|l| format!("{} {}\n", fmt_time(l.time), l.text))
                    .collect();
                let _ = std::fs::write(&path, text);
            }
        }
    }

    /// Logs of every container every pod ran (live ones read now), written
    /// under `<dir>/logs/<pod>/<container>.<n>.log`; returns that dir.
    pub async fn collect_logs(&self) -> PathBuf {
        for info in self.pods() {
            if info.phase != Phase::Gone {
                self.save_logs(&info).await;
            }
        }
        self.logs_dir.clone()
    }

    /// Log lines of every container of a workload's pods, live and past:
    /// (pod, pod IP, line).
    pub async fn workload_logs(
        &self,
        workload: &str,
    ) -> Vec<(String, Option<IpAddr>, super::LogLine)> {
        let mut out = Vec::new();
        // Live pods from the runtime; gone ones from their saved files.
        let live: Vec<PodInfo> = self
            .pods()
            .into_iter()
            .filter(|p| p.workload == workload)
            .collect();
        let live_names: BTreeSet<String> = live.iter().map(|p| p.name.clone()).collect();
        for p in &live {
            for (_, id) in &p.container_ids {
                if let Ok(lines) = self.rt.logs(id).await {
                    out.extend(lines.into_iter().map(|l| (p.name.clone(), p.ip, l)));
                }
            }
        }
        let ips: BTreeMap<String, IpAddr> = lock(&self.events)
            .iter()
            .filter_map(|e| {
                e.event
                    .strip_prefix("sandbox up at ")
                    .and_then(|ip| ip.parse().ok())
                    .map(|ip| (e.pod.clone(), ip))
            })
            .collect();
        let prefix = {
            let st = lock(&self.state);
            st.workloads.get(workload).map(|w| w.spec.meta.name.clone())
        };
        if let (Some(prefix), Ok(rd)) = (prefix, std::fs::read_dir(&self.logs_dir)) {
            for ent in rd.flatten() {
                let pod = ent.file_name().to_string_lossy().into_owned();
                if live_names.contains(&pod) || !pod.starts_with(&format!("{prefix}-")) {
                    continue;
                }
                if let Ok(files) = std::fs::read_dir(ent.path()) {
                    for f in files.flatten() {
                        let text = std::fs::read_to_string(f.path()).unwrap_or_default();
                        for l in text.lines() {
                            let (ts, rest) = l.split_once(' ').unwrap_or(("", l));
                            out.push((
                                pod.clone(),
                                ips.get(&pod).copied(),
                                super::LogLine {
                                    time: super::docker::parse_rfc3339(ts)
                                        .unwrap_or(SystemTime::UNIX_EPOCH),
                                    text: rest.to_string(),
                                },
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    async fn probe_due(
        &self,
        k: &mut Kubelet,
        ip: IpAddr,
        kind: ProbeKind,
        now: Instant,
    ) -> Option<bool> {
        let i = kind as usize;
        let probe = match kind {
            ProbeKind::Startup => k.spec.startup_probe.clone(),
            ProbeKind::Liveness => k.spec.liveness_probe.clone(),
            ProbeKind::Readiness => k.spec.readiness_probe.clone(),
        };
        let Some(p) = probe else {
            if kind == ProbeKind::Startup {
                k.started = true;
            }
            return None;
        };
        if kind == ProbeKind::Startup && k.started {
            return None;
        }
        let first = k.started_at + Duration::from_secs(u64::from(p.initial_delay_seconds));
        if now < first || k.next[i].is_some_and(|t| now < t) {
            return None;
        }
        k.next[i] = Some(now + Duration::from_secs(u64::from(p.period_seconds.max(1))));
        let ok = self.run_probe(&p, &k.spec, &k.id, ip).await;
        if ok {
            k.oks[i] += 1;
            k.fails[i] = 0;
        } else {
            k.fails[i] += 1;
            k.oks[i] = 0;
        }
        Some(ok)
    }

    async fn run_probe(&self, p: &Probe, c: &Container, id: &str, ip: IpAddr) -> bool {
        let timeout = Duration::from_secs(u64::from(p.timeout_seconds.max(1)));
        if let Some(h) = &p.http_get {
            let Some(port) = c.resolve_port(&h.port) else {
                return false;
            };
            return http_probe(SocketAddr::new(ip, port), &h.path, timeout).await;
        }
        if let Some(t) = &p.tcp_socket {
            let Some(port) = c.resolve_port(&t.port) else {
                return false;
            };
            return tokio::time::timeout(timeout, tokio::net::TcpStream::connect((ip, port)))
                .await
                .is_ok_and(|r| r.is_ok());
        }
        if let Some(e) = &p.exec {
            return matches!(self.rt.exec(id, &e.command, timeout).await, Ok(0));
        }
        false
    }

    /// Installs changed packet rules in every running pod.
    async fn sync_rules(&self) {
        let pods: Vec<(String, String)> = {
            let st = lock(&self.state);
            st.pods
                .values()
                .filter(|p| p.info.phase == Phase::Running || p.info.phase == Phase::Pending)
                .filter_map(|p| p.info.sandbox.clone().map(|s| (p.info.name.clone(), s)))
                .collect()
        };
        let services: Vec<(String, IpAddr, Vec<u16>)> = {
            let objects = lock(&self.objects);
            let st = lock(&self.state);
            objects
                .services
                .iter()
                .filter_map(|s| {
                    st.vips.get(&s.meta.name).map(|ip| {
                        (
                            s.meta.name.clone(),
                            *ip,
                            s.ports.iter().map(|p| p.port).collect(),
                        )
                    })
                })
                .collect()
        };
        let mut vip_rules = Vec::new();
        for (name, vip, ports) in &services {
            for port in ports {
                let eps = self.endpoints(name, *port);
                vip_rules.push(VipRule {
                    vip: *vip,
                    port: *port,
                    endpoints: eps.iter().map(|(_, a)| (a.ip(), a.port())).collect(),
                });
            }
        }
        for (pod, sandbox) in pods {
            let round_robin = if self.round_robin {
                lock(&self.state).pods.get(&pod).map(|p| p.seq)
            } else {
                None
            };
            let blocked = {
                let st = lock(&self.state);
                let ip_of = |n: &String| st.pods.get(n).and_then(|p| p.info.ip);
                let mut b: Vec<IpAddr> = Vec::new();
                for part in &st.partitions {
                    if part.a.contains(&pod) {
                        b.extend(part.b.iter().filter_map(ip_of));
                    }
                    if part.b.contains(&pod) {
                        b.extend(part.a.iter().filter_map(ip_of));
                    }
                }
                b.sort();
                b.dedup();
                b
            };
            let rules = NetRules {
                services: vip_rules.clone(),
                blocked,
                round_robin,
            };
            let same = lock(&self.state).applied.get(&pod) == Some(&rules);
            if same {
                continue;
            }
            match self.rt.set_rules(&sandbox, &rules).await {
                Ok(()) => {
                    lock(&self.state).applied.insert(pod, rules);
                }
                Err(e) => tracing::debug!(pod, error = %e, "packet rules"),
            }
        }
    }

    /// Stops every task, kills every pod, removes what the runtime made.
    pub async fn shutdown(&self) -> usize {
        let _ = self.stop.send(true);
        let names: Vec<String> = lock(&self.state).pods.keys().cloned().collect();
        for n in &names {
            let _ = self.delete_pod(n, false);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let left = lock(&self.state)
                .pods
                .values()
                .filter(|p| p.info.phase != Phase::Gone)
                .count();
            if left == 0 {
                break;
            }
            tokio::time::sleep(TICK).await;
        }
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        self.rt.teardown().await.unwrap_or(0)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ProbeKind {
    Startup = 0,
    Liveness = 1,
    Readiness = 2,
}

struct Kubelet {
    plan: ContainerPlan,
    spec: Container,
    id: String,
    started_at: Instant,
    started: bool,
    ready: bool,
    restarts: u32,
    restart_at: Option<Instant>,
    next: [Option<Instant>; 3],
    fails: [u32; 3],
    oks: [u32; 3],
}

impl Kubelet {
    fn new(plan: ContainerPlan, spec: Container, id: String) -> Kubelet {
        Kubelet {
            plan,
            spec,
            id,
            started_at: Instant::now(),
            started: false,
            ready: false,
            restarts: 0,
            restart_at: None,
            next: [None; 3],
            fails: [0; 3],
            oks: [0; 3],
        }
    }

    fn reset(&mut self, id: String) {
        self.id = id;
        self.started_at = Instant::now();
        self.started = false;
        self.ready = false;
        self.restart_at = None;
        self.next = [None; 3];
        self.fails = [0; 3];
        self.oks = [0; 3];
    }
}

/// The kubelet's crash back-off: the first restart at once, then 10 s
/// doubling to 300 s.
fn backoff(restarts: u32) -> Duration {
    if restarts <= 1 {
        return Duration::ZERO;
    }
    let s = 10u64.saturating_mul(1 << (restarts - 2).min(5));
    Duration::from_secs(s.min(300))
}

async fn http_probe(addr: SocketAddr, path: &str, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let run = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.30\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = vec![0u8; 512];
        let mut n = 0;
        while n < 12 {
            let m = s.read(&mut buf[n..]).await.ok()?;
            if m == 0 {
                break;
            }
            n += m;
        }
        let head = std::str::from_utf8(&buf[..n]).ok()?;
        let code: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((200..400).contains(&code))
    };
    matches!(tokio::time::timeout(timeout, run).await, Ok(Some(true)))
}

/// `$(VAR)` references to earlier variables, as Kubernetes expands them in
/// env values, command and args (`$$` escapes).
fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$$") {
            out.push('$');
            rest = t;
        } else if let Some(t) = tail.strip_prefix("$(") {
            if let Some(end) = t.find(')') {
                let name = &t[..end];
                match env.iter().rev().find(|(k, _)| k == name) {
                    Some((_, v)) => out.push_str(v),
                    None => {
                        out.push_str("$(");
                        out.push_str(name);
                        out.push(')');
                    }
                }
                rest = &t[end + 1..];
            } else {
                out.push_str(tail);
                rest = "";
            }
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

fn select_items(
    data: &BTreeMap<String, Vec<u8>>,
    items: &[crate::manifests::KeyToPath],
) -> BTreeMap<String, Vec<u8>> {
    if items.is_empty() {
        return data.clone();
    }
    items
        .iter()
        .filter_map(|i| data.get(&i.key).map(|v| (i.path.clone(), v.clone())))
        .collect()
}

/// The identities a pod's `securityContext` asks for (pod level, then a
/// container's own): the lab honours `runAsUser`, `runAsGroup` and
/// `fsGroup` (a supplementary group that owns ConfigMap/Secret files), so
/// file modes behave as they do under a kubelet.
#[derive(Debug, Clone, Copy, Default)]
struct RunAs {
    user: Option<u32>,
    group: Option<u32>,
    fs_group: Option<u32>,
}

impl RunAs {
    fn of(ctx: Option<&yaml::Value>) -> Self {
        Self::default().with(ctx)
    }

    fn with(self, ctx: Option<&yaml::Value>) -> Self {
        let get = |k: &str| {
            ctx.and_then(|c| c.get(k))
                .and_then(|v| v.as_u64())
                .and_then(|v| u32::try_from(v).ok())
        };
        Self {
            user: get("runAsUser").or(self.user),
            group: get("runAsGroup").or(self.group),
            fs_group: get("fsGroup").or(self.fs_group),
        }
    }

    /// Docker's `--user`: `uid[:gid]`, or the image's own user.
    fn user(&self) -> Option<String> {
        match (self.user, self.group) {
            (Some(u), Some(g)) => Some(format!("{u}:{g}")),
            (Some(u), None) => Some(u.to_string()),
            // A group alone keeps the image's user: Docker needs a name
            // or uid first, and the kubelet does the same.
            (None, _) => None,
        }
    }
}

fn make_shared_dir(d: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(d).map_err(LabError::io(d))?;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).map_err(LabError::io(d))
}

/// Writes files as the kubelet lays out a ConfigMap/Secret volume:
/// `..<stamp>/<key>`, `..data` → `..<stamp>`, `<key>` → `..data/<key>`;
/// an update swaps `..data` with one rename.
/// With an `fsGroup`, files belong to that group and the group may read
/// them, as the kubelet's volume ownership does.
pub fn write_atomic_dir(
    dir: &Path,
    files: &BTreeMap<String, Vec<u8>>,
    mode: u32,
    fs_group: Option<u32>,
) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if fs_group.is_some() {
        mode | 0o040
    } else {
        mode
    };
    std::fs::create_dir_all(dir).map_err(LabError::io(dir))?;
    let stamp = format!(
        "..{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let data_dir = dir.join(&stamp);
    std::fs::create_dir_all(&data_dir).map_err(LabError::io(&data_dir))?;
    for (k, v) in files {
        let p = data_dir.join(k);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(LabError::io(parent))?;
        }
        std::fs::write(&p, v).map_err(LabError::io(&p))?;
        if let Some(g) = fs_group {
            std::os::unix::fs::chown(&p, None, Some(g)).map_err(LabError::io(&p))?;
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(LabError::io(&p))?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp).map_err(LabError::io(&tmp))?;
    let link = dir.join("..data");
    let old = std::fs::read_link(&link).ok();
    std::fs::rename(&tmp, &link).map_err(LabError::io(&link))?;
    for k in files.keys() {
        let top = k.split('/').next().unwrap_or(k);
        let p = dir.join(top);
        if std::fs::symlink_metadata(&p).is_err() {
            std::os::unix::fs::symlink(format!("..data/{top}"), &p).map_err(LabError::io(&p))?;
        }
    }
    if let Some(old) = old {
        if old != Path::new(&stamp) {
            let _ = std::fs::remove_dir_all(dir.join(old));
        }
    }
    Ok(())
}

fn merge_yaml(base: &mut yaml::Value, add: &yaml::Value) {
    match (base, add) {
        (yaml::Value::Mapping(b), yaml::Value::Mapping(a)) => {
            for (k, v) in a {
                match b.get_mut(k) {
                    Some(existing) => merge_yaml(existing, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, a) => *b = a.clone(),
    }
}

/// RFC 3339 with nanoseconds, UTC.
pub fn fmt_time(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let da = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{mo:02}-{da:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        d.subsec_nanos()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_as_kubernetes_does() {
        let env = vec![("POD_IP".to_string(), "10.0.0.5".to_string())];
        assert_eq!(expand("$(POD_IP):9102", &env), "10.0.0.5:9102");
        assert_eq!(expand("$$(POD_IP) $(NOPE)", &env), "$(POD_IP) $(NOPE)");
    }

    #[test]
    fn time_round_trips_through_the_docker_format() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_796_148_000, 123_456_789);
        let s = fmt_time(t);
        assert_eq!(s, "2026-12-01T18:00:00.123456789Z");
        assert_eq!(super::super::docker::parse_rfc3339(&s), Some(t));
    }

    #[test]
    fn security_context_gives_user_groups_and_group_readable_secrets() {
        use std::os::unix::fs::MetadataExt;
        let pod: yaml::Value =
            yaml::from_str("{runAsUser: 65532, runAsGroup: 65532, fsGroup: 4242}").unwrap();
        let container: yaml::Value = yaml::from_str("{runAsUser: 1000}").unwrap();
        let ids = RunAs::of(Some(&pod));
        assert_eq!(ids.user().as_deref(), Some("65532:65532"));
        assert_eq!(
            ids.with(Some(&container)).user().as_deref(),
            Some("1000:65532")
        );
        assert_eq!(RunAs::of(None).user(), None);
        assert_eq!(ids.fs_group, Some(4242));

        let d = tempfile::tempdir().unwrap();
        let mut files = BTreeMap::new();
        files.insert("tls.key".to_string(), b"k".to_vec());
        write_atomic_dir(d.path(), &files, 0o400, ids.fs_group).unwrap();
        let m = std::fs::metadata(d.path().join("tls.key")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o440, "the kubelet adds group read");
        assert_eq!(m.gid(), 4242);
    }

    #[test]
    fn secret_volumes_swap_atomically() {
        let d = tempfile::tempdir().unwrap();
        let mut files = BTreeMap::new();
        files.insert("tls.crt".to_string(), b"one".to_vec());
        write_atomic_dir(d.path(), &files, 0o644, None).unwrap();
        assert_eq!(std::fs::read(d.path().join("tls.crt")).unwrap(), b"one");
        files.insert("tls.crt".to_string(), b"two".to_vec());
        write_atomic_dir(d.path(), &files, 0o644, None).unwrap();
        assert_eq!(std::fs::read(d.path().join("tls.crt")).unwrap(), b"two");
        let stamps = std::fs::read_dir(d.path())
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(stamps, 1, "old generation removed");
    }

    #[test]
    fn the_crash_backoff_matches_the_kubelet() {
        assert_eq!(backoff(1), Duration::ZERO);
        assert_eq!(backoff(2), Duration::from_secs(10));
        assert_eq!(backoff(3), Duration::from_secs(20));
        assert_eq!(backoff(9), Duration::from_secs(300));
    }
}
