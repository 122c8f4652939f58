//! The docker substrate's runtime: one private network per run; a pod is a
//! pause container (its network namespace and address) plus one container
//! per pod container joined to that namespace (`network_mode:
//! container:<pause>`), as the kubelet's Docker runtime did. Packet rules
//! go into the pause container's namespace with `iptables-restore` (the
//! tool kube-proxy itself drives). Every object carries the run's label and
//! suffix; [`clean`] removes what a dead runner left.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use bollard::models::{ContainerCreateBody, HostConfig, NetworkCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListNetworksOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder,
};
use bollard::Docker;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::{ContainerPlan, ContainerState, LogLine, NetRules, PodRuntime, SandboxPlan, Signal};
use crate::scenario::{Capability, SubstrateKind};
use crate::{LabError, Result};

/// Label on every object of a run: its suffix.
pub const RUN_LABEL: &str = "yarilo-lab.run";
/// Label naming the runner's process id (to tell abandoned runs).
pub const PID_LABEL: &str = "yarilo-lab.pid";

pub struct DockerRuntime {
    docker: Docker,
    suffix: String,
    network: String,
    subnet: (IpAddr, u8),
    gateway: IpAddr,
    /// Manifest image repository (last path element, no tag) → local tag.
    images: BTreeMap<String, String>,
    helper_image: String,
    /// Images this run loaded (removed at teardown).
    loaded: Vec<String>,
    hooked: Mutex<HashSet<String>>,
    pids: Mutex<HashMap<String, i64>>,
    next_ip: std::sync::atomic::AtomicU32,
}

/// Connects to the local engine, downgrading the API to what it speaks
/// (Docker 20.10 speaks 1.41).
pub async fn connect() -> Result<Docker> {
    let docker = Docker::connect_with_local_defaults()?;
    let docker = docker.negotiate_version().await.map_err(|e| {
        LabError::Substrate(format!(
            "cannot reach the Docker engine ({e}); the docker substrate needs a running dockerd \
             and access to its socket (scripts/setup-dev checks it)"
        ))
    })?;
    Ok(docker)
}

fn labels(suffix: &str) -> HashMap<String, String> {
    HashMap::from([
        (RUN_LABEL.to_string(), suffix.to_string()),
        (PID_LABEL.to_string(), std::process::id().to_string()),
    ])
}

impl DockerRuntime {
    /// Creates the run's network.
    pub async fn new(
        docker: Docker,
        suffix: &str,
        images: BTreeMap<String, String>,
        helper_image: String,
        loaded: Vec<String>,
    ) -> Result<DockerRuntime> {
        let network = format!("ylab-{suffix}");
        let create = |ipam: Option<bollard::models::Ipam>| NetworkCreateRequest {
            name: network.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels(suffix)),
            ipam,
            ..Default::default()
        };
        // Let the engine pick a free subnet, then re-create the network
        // with that subnet stated: only a network with a configured subnet
        // takes the pod addresses the lab assigns (never reused within a
        // run, as a replacement pod on a cluster gets a new one).
        docker.create_network(create(None)).await?;
        let first = docker
            .inspect_network(
                &network,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await?;
        docker.remove_network(&network).await?;
        docker
            .create_network(create(first.ipam.map(|i| bollard::models::Ipam {
                driver: i.driver,
                config: i.config,
                options: None,
            })))
            .await?;
        let info = docker
            .inspect_network(
                &network,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await?;
        let cfg = info
            .ipam
            .and_then(|i| i.config)
            .and_then(|c| c.into_iter().next())
            .ok_or_else(|| LabError::Substrate("network without IPAM config".into()))?;
        let subnet = cfg
            .subnet
            .ok_or_else(|| LabError::Substrate("network without subnet".into()))?;
        let (addr, len) = subnet
            .split_once('/')
            .ok_or_else(|| LabError::Substrate(format!("subnet {subnet}")))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| LabError::Substrate(format!("subnet {subnet}")))?;
        let len: u8 = len
            .parse()
            .map_err(|_| LabError::Substrate(format!("subnet {subnet}")))?;
        let gateway: IpAddr = cfg
            .gateway
            .and_then(|g| g.parse().ok())
            .ok_or_else(|| LabError::Substrate("network without gateway".into()))?;
        Ok(DockerRuntime {
            docker,
            suffix: suffix.to_string(),
            network,
            subnet: (addr, len),
            gateway,
            images,
            helper_image,
            loaded,
            hooked: Mutex::new(HashSet::new()),
            pids: Mutex::new(HashMap::new()),
            next_ip: std::sync::atomic::AtomicU32::new(2),
        })
    }

    fn image_for(&self, manifest_image: &str) -> Result<String> {
        let repo = manifest_image
            .rsplit_once('@')
            .map(|(r, _)| r)
            .unwrap_or(manifest_image);
        let last = repo.rsplit('/').next().unwrap_or(repo);
        let name = last.split(':').next().unwrap_or(last);
        self.images.get(name).cloned().ok_or_else(|| {
            LabError::Substrate(format!(
                "image `{manifest_image}`: no loaded image named `{name}` (loaded: {:?})",
                self.images.keys().collect::<Vec<_>>()
            ))
        })
    }

    async fn pid_of(&self, sandbox: &str) -> Result<i64> {
        if let Some(p) = self.pids.lock().map_err(poisoned)?.get(sandbox) {
            return Ok(*p);
        }
        let info = self
            .docker
            .inspect_container(
                sandbox,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await?;
        let pid = info
            .state
            .and_then(|s| s.pid)
            .filter(|p| *p > 0)
            .ok_or_else(|| LabError::Substrate(format!("sandbox {sandbox} has no process")))?;
        self.pids
            .lock()
            .map_err(poisoned)?
            .insert(sandbox.to_string(), pid);
        Ok(pid)
    }

    /// The next pod address: upward from .2, skipping the gateway, below
    /// the virtual IPs at the top of the subnet.
    fn assign_ip(&self) -> Result<IpAddr> {
        let IpAddr::V4(base) = self.subnet.0 else {
            return Err(LabError::Substrate(
                "IPv6 pod networks are not supported".into(),
            ));
        };
        let size = 1u32 << (32 - u32::from(self.subnet.1));
        loop {
            let n = self
                .next_ip
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n + 64 >= size {
                return Err(LabError::Substrate(
                    "the run's subnet has no pod addresses left".into(),
                ));
            }
            let ip = IpAddr::V4((u32::from(base) + n).into());
            if ip != self.gateway {
                return Ok(ip);
            }
        }
    }

    pub fn network_name(&self) -> &str {
        &self.network
    }
}

fn poisoned<T>(_: T) -> LabError {
    LabError::Other("lock poisoned".into())
}

fn bind(m: &super::Mount) -> String {
    format!(
        "{}:{}:{}",
        m.host.display(),
        m.container,
        if m.read_only { "ro" } else { "rw" }
    )
}

impl PodRuntime for DockerRuntime {
    fn kind(&self) -> SubstrateKind {
        SubstrateKind::Docker
    }

    fn capabilities(&self) -> &'static [Capability] {
        &[
            Capability::Kill,
            Capability::Stop,
            Capability::Term,
            Capability::Partition,
            Capability::Scale,
            Capability::Secrets,
        ]
    }

    fn dns_address(&self) -> IpAddr {
        self.gateway
    }

    fn vip(&self, n: u32) -> IpAddr {
        // From the top of the subnet down: Docker hands out container
        // addresses from the bottom up.
        match self.subnet.0 {
            IpAddr::V4(a) => {
                let base = u32::from(a);
                let size = 1u32 << (32 - u32::from(self.subnet.1));
                IpAddr::V4((base + size - 2 - n).into())
            }
            v6 => v6,
        }
    }

    async fn create_sandbox(&self, plan: &SandboxPlan) -> Result<(String, IpAddr)> {
        let name = format!("ylab-{}-{}", self.suffix, plan.pod);
        let mut l = labels(&self.suffix);
        l.insert("yarilo-lab.pod".into(), plan.pod.clone());
        let ip = self.assign_ip()?;
        let body = ContainerCreateBody {
            networking_config: Some(bollard::models::NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    self.network.clone(),
                    bollard::models::EndpointSettings {
                        ipam_config: Some(bollard::models::EndpointIpamConfig {
                            ipv4_address: Some(ip.to_string()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                )])),
            }),
            image: Some(self.helper_image.clone()),
            entrypoint: Some(vec!["/usr/local/bin/yarilo-lab".into(), "pause".into()]),
            hostname: Some(plan.pod.chars().take(63).collect()),
            labels: Some(l),
            host_config: Some(HostConfig {
                network_mode: Some(self.network.clone()),
                binds: Some(vec![format!(
                    "{}:/etc/resolv.conf:ro",
                    plan.resolv_conf.display()
                )]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await?;
        self.docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await?;
        let info = self
            .docker
            .inspect_container(
                &created.id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await?;
        let ip = info
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|mut n| n.remove(&self.network))
            .and_then(|e| e.ip_address)
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| LabError::Substrate(format!("pod {} got no address", plan.pod)))?;
        if let Some(pid) = info.state.and_then(|s| s.pid) {
            self.pids
                .lock()
                .map_err(poisoned)?
                .insert(created.id.clone(), pid);
        }
        Ok((created.id, ip))
    }

    async fn start_container(
        &self,
        sandbox: &str,
        plan: &ContainerPlan,
        attempt: u32,
    ) -> Result<String> {
        let info = self
            .docker
            .inspect_container(
                sandbox,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await?;
        let pod = info
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get("yarilo-lab.pod").cloned())
            .unwrap_or_default();
        let name = format!("ylab-{}-{}-{}-{}", self.suffix, pod, plan.name, attempt);
        let mut l = labels(&self.suffix);
        l.insert("yarilo-lab.pod".into(), pod.clone());
        l.insert("yarilo-lab.container".into(), plan.name.clone());
        let mut binds: Vec<String> = plan.mounts.iter().map(bind).collect();
        if let Some(rc) = info
            .host_config
            .as_ref()
            .and_then(|h| h.binds.as_ref())
            .and_then(|b| b.iter().find(|b| b.contains(":/etc/resolv.conf")))
        {
            binds.push(rc.clone());
        }
        let body = ContainerCreateBody {
            image: Some(self.image_for(&plan.image)?),
            entrypoint: (!plan.command.is_empty()).then(|| plan.command.clone()),
            cmd: (!plan.args.is_empty()).then(|| plan.args.clone()),
            env: Some(plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: plan.working_dir.clone(),
            user: plan.user.clone(),
            labels: Some(l),
            host_config: Some(HostConfig {
                network_mode: Some(format!("container:{sandbox}")),
                binds: Some(binds),
                group_add: (!plan.group_add.is_empty())
                    .then(|| plan.group_add.iter().map(|g| g.to_string()).collect()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await?;
        self.docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await?;
        Ok(created.id)
    }

    async fn state(&self, container: &str) -> Result<ContainerState> {
        use bollard::models::ContainerStateStatusEnum as S;
        match self
            .docker
            .inspect_container(
                container,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
        {
            Ok(info) => {
                let st = info.state.unwrap_or_default();
                Ok(match st.status {
                    Some(S::RUNNING) | Some(S::RESTARTING) | Some(S::CREATED) => {
                        ContainerState::Running
                    }
                    Some(S::PAUSED) => ContainerState::Paused,
                    _ => ContainerState::Exited {
                        code: st.exit_code.unwrap_or(-1),
                    },
                })
            }
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(ContainerState::Gone),
            Err(e) => Err(e.into()),
        }
    }

    async fn signal(&self, container: &str, sig: Signal) -> Result<()> {
        let r = self
            .docker
            .kill_container(
                container,
                Some(
                    KillContainerOptionsBuilder::new()
                        .signal(sig.name())
                        .build(),
                ),
            )
            .await;
        match r {
            Ok(()) => Ok(()),
            // Not running (any more): nothing to signal.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409 | 404,
                ..
            }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn remove_container(&self, container: &str) -> Result<()> {
        // Kill, wait for the engine to see the exit, then remove: removing
        // a container while its exit is still being handled can leave a
        // stale network endpoint behind (Docker 20.10).
        let _ = self.signal(container, Signal::Kill).await;
        for _ in 0..50 {
            match self.state(container).await {
                Ok(ContainerState::Running) | Ok(ContainerState::Paused) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                _ => break,
            }
        }
        let r = self
            .docker
            .remove_container(
                container,
                Some(
                    RemoveContainerOptionsBuilder::new()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await;
        match r {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn remove_sandbox(&self, sandbox: &str) -> Result<()> {
        self.pids.lock().map_err(poisoned)?.remove(sandbox);
        self.hooked.lock().map_err(poisoned)?.remove(sandbox);
        let _ = self.signal(sandbox, Signal::Kill).await;
        for _ in 0..50 {
            match self.state(sandbox).await {
                Ok(ContainerState::Running) | Ok(ContainerState::Paused) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                _ => break,
            }
        }
        let _ = self
            .docker
            .disconnect_network(
                &self.network,
                bollard::models::NetworkDisconnectRequest {
                    container: sandbox.to_string(),
                    force: Some(true),
                },
            )
            .await;
        self.remove_container(sandbox).await
    }

    async fn exec(&self, container: &str, cmd: &[String], timeout: Duration) -> Result<i64> {
        let exec = self
            .docker
            .create_exec(
                container,
                bollard::exec::CreateExecOptions {
                    cmd: Some(cmd.to_vec()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        let run = async {
            if let bollard::exec::StartExecResults::Attached { mut output, .. } =
                self.docker.start_exec(&exec.id, None).await?
            {
                while let Some(chunk) = output.next().await {
                    chunk?;
                }
            }
            let info = self.docker.inspect_exec(&exec.id).await?;
            Ok::<_, LabError>(info.exit_code.unwrap_or(-1))
        };
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| LabError::Substrate(format!("exec {cmd:?} timed out")))?
    }

    async fn logs(&self, container: &str) -> Result<Vec<LogLine>> {
        let mut stream = self.docker.logs(
            container,
            Some(
                LogsOptionsBuilder::new()
                    .stdout(true)
                    .stderr(true)
                    .timestamps(true)
                    .build(),
            ),
        );
        let mut buf = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(out) => buf.extend_from_slice(&out.into_bytes()),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => break,
                Err(e) => return Err(e.into()),
            }
        }
        let text = String::from_utf8_lossy(&buf);
        Ok(text
            .lines()
            .map(|l| {
                let (ts, rest) = l.split_once(' ').unwrap_or(("", l));
                LogLine {
                    time: parse_rfc3339(ts).unwrap_or(SystemTime::UNIX_EPOCH),
                    text: rest.to_string(),
                }
            })
            .collect())
    }

    async fn set_rules(&self, sandbox: &str, rules: &NetRules) -> Result<()> {
        let pid = self.pid_of(sandbox).await?;
        let first = !self.hooked.lock().map_err(poisoned)?.contains(sandbox);
        let text = crate::netfilter::restore_text(rules, first);
        let mut child = tokio::process::Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-n", "iptables-restore", "--noflush"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                LabError::Substrate(format!(
                    "nsenter/iptables-restore: {e} (the docker substrate needs util-linux and iptables; run as root)"
                ))
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(text.as_bytes())
                .await
                .map_err(LabError::io("iptables-restore stdin"))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(LabError::io("iptables-restore"))?;
        if !out.status.success() {
            return Err(LabError::Substrate(format!(
                "iptables-restore in pod namespace failed: {}\n{text}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        if first {
            self.hooked
                .lock()
                .map_err(poisoned)?
                .insert(sandbox.to_string());
        }
        Ok(())
    }

    async fn teardown(&self) -> Result<usize> {
        let mut n = remove_run(&self.docker, &self.suffix).await?;
        for image in &self.loaded {
            if self
                .docker
                .remove_image(
                    image,
                    Some(RemoveImageOptionsBuilder::new().force(true).build()),
                    None,
                )
                .await
                .is_ok()
            {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn fingerprint(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        if let Ok(v) = self.docker.version().await {
            m.insert("docker.version".into(), v.version.unwrap_or_default());
            m.insert("docker.api".into(), v.api_version.unwrap_or_default());
        }
        m.insert("docker.network".into(), self.network.clone());
        for (name, tag) in &self.images {
            if let Ok(img) = self.docker.inspect_image(tag).await {
                m.insert(format!("image.{name}"), img.id.unwrap_or_default());
            }
        }
        m
    }
}

async fn remove_run(docker: &Docker, suffix: &str) -> Result<usize> {
    let filters = HashMap::from([("label", vec![format!("{RUN_LABEL}={suffix}")])]);
    let list = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await?;
    let mut n = 0;
    // App containers first, sandboxes (which they share a namespace with)
    // after.
    let (apps, sandboxes): (Vec<_>, Vec<_>) = list.into_iter().partition(|c| {
        c.labels
            .as_ref()
            .is_some_and(|l| l.contains_key("yarilo-lab.container"))
    });
    let net = format!("ylab-{suffix}");
    for c in apps.into_iter().chain(sandboxes) {
        if let Some(id) = c.id {
            let _ = docker
                .kill_container(
                    &id,
                    Some(KillContainerOptionsBuilder::new().signal("SIGKILL").build()),
                )
                .await;
            let _ = docker
                .disconnect_network(
                    &net,
                    bollard::models::NetworkDisconnectRequest {
                        container: id.clone(),
                        force: Some(true),
                    },
                )
                .await;
            let r = docker
                .remove_container(
                    &id,
                    Some(
                        RemoveContainerOptionsBuilder::new()
                            .force(true)
                            .v(true)
                            .build(),
                    ),
                )
                .await;
            if r.is_ok() {
                n += 1;
            }
        }
    }
    let nets = docker
        .list_networks(Some(
            ListNetworksOptionsBuilder::new().filters(&filters).build(),
        ))
        .await?;
    for net in nets {
        if let Some(name) = net.name {
            // The engine may still be detaching the last endpoints.
            for _ in 0..20 {
                if docker.remove_network(&name).await.is_ok() {
                    n += 1;
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
    }
    Ok(n)
}

/// Removes a run's containers and network by suffix, or every run whose
/// runner process is gone.
pub async fn clean(suffix: Option<&str>) -> Result<usize> {
    let docker = connect().await?;
    if let Some(s) = suffix {
        return remove_run(&docker, s).await;
    }
    let filters = HashMap::from([("label", vec![RUN_LABEL.to_string()])]);
    let list = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await?;
    let mut dead = BTreeMap::new();
    for c in list {
        let l = c.labels.unwrap_or_default();
        let (Some(run), Some(pid)) = (l.get(RUN_LABEL), l.get(PID_LABEL)) else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .ok()
            .is_some_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            dead.insert(run.clone(), ());
        }
    }
    let mut n = 0;
    for run in dead.keys() {
        n += remove_run(&docker, run).await?;
    }
    Ok(n)
}

/// `2026-12-01T18:00:00.123456789Z` → time (Docker's log timestamps).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-');
    let y: i64 = d.next()?.parse().ok()?;
    let mo: i64 = d.next()?.parse().ok()?;
    let da: i64 = d.next()?.parse().ok()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':');
    let h: i64 = t.next()?.parse().ok()?;
    let mi: i64 = t.next()?.parse().ok()?;
    let se: i64 = t.next()?.parse().ok()?;
    let nanos: u32 = format!("{frac:0<9}").get(..9)?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = if y2 >= 0 { y2 } else { y2 - 399 } / 400;
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + h * 3600 + mi * 60 + se;
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_timestamps_parse() {
        let t = parse_rfc3339("2026-12-01T18:00:00.5Z").unwrap();
        let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(d.as_secs(), 1_796_148_000);
        assert_eq!(d.subsec_millis(), 500);
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:01.000000001Z").unwrap(),
            SystemTime::UNIX_EPOCH + Duration::new(1, 1)
        );
    }
}
