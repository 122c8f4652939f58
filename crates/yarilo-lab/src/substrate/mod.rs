//! Substrates: what runs the pods.
//!
//! The Kubernetes behaviour the charts rely on — controllers keeping
//! replica counts, the kubelet running probes and restarting containers,
//! Services as DNS names and virtual IPs, Secrets and ConfigMaps as mounted
//! files — lives once, in [`cluster`], on top of a small [`PodRuntime`]:
//! create a pod's sandbox (its network identity), start a container in it,
//! signal, exec, read logs, install a pod's packet rules, remove. The
//! `docker` substrate implements it with containers sharing a pause
//! container's network namespace; the `vm` substrate (issue 26) implements
//! it with qemu guests (one guest per pod; hard crash = kill qemu, hang =
//! SIGSTOP of qemu) and adds the NFS faults. `kind` does not emulate
//! anything: it is a plan of `helm install` and API calls ([`kind`]).

pub mod cluster;
pub mod docker;
pub mod kind;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use crate::scenario::{Capability, SubstrateKind};
use crate::Result;

/// The signals faults send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Kill,
    Term,
    Stop,
    Cont,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Kill => "SIGKILL",
            Signal::Term => "SIGTERM",
            Signal::Stop => "SIGSTOP",
            Signal::Cont => "SIGCONT",
        }
    }
}

/// A pod's sandbox as the cluster asks for it.
#[derive(Debug, Clone)]
pub struct SandboxPlan {
    /// Pod name (also its hostname).
    pub pod: String,
    /// The resolver configuration every container of the pod gets.
    pub resolv_conf: PathBuf,
    pub labels: BTreeMap<String, String>,
}

/// One container, with everything resolved: image, command, environment
/// values, host paths of its mounts.
#[derive(Debug, Clone)]
pub struct ContainerPlan {
    pub name: String,
    /// The image as the manifest names it; the runtime maps it to what it
    /// loaded.
    pub image: String,
    /// Replaces the image's entrypoint when not empty.
    pub command: Vec<String>,
    /// Replaces the image's arguments when not empty.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    pub working_dir: Option<String>,
    /// `uid[:gid]` from the securityContext; `None`: the image's user.
    pub user: Option<String>,
    /// Supplementary groups (the pod's fsGroup).
    pub group_add: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
}

/// What a runtime reports about a container.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerState {
    Running,
    Paused,
    Exited { code: i64 },
    Gone,
}

/// The packet rules of one pod: Service virtual IPs (DNAT to ready
/// endpoints, picked at random per connection as kube-proxy's iptables
/// mode does) and partitions (drop to and from listed addresses).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetRules {
    pub services: Vec<VipRule>,
    pub blocked: Vec<IpAddr>,
    /// Round-robin start for this pod (`None`: random picks).
    pub round_robin: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VipRule {
    pub vip: IpAddr,
    pub port: u16,
    pub endpoints: Vec<(IpAddr, u16)>,
}

/// A log line with the time the runtime received it.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub time: SystemTime,
    pub text: String,
}

/// What a substrate must provide for the cluster emulation. Handles are
/// opaque strings (container ids, guest names).
pub trait PodRuntime: Send + Sync + 'static {
    fn kind(&self) -> SubstrateKind;
    /// Faults this runtime can produce.
    fn capabilities(&self) -> &'static [Capability];
    /// The address the cluster's DNS server binds, reachable from every
    /// pod, and the range virtual IPs may be taken from.
    fn dns_address(&self) -> IpAddr;
    fn vip(&self, n: u32) -> IpAddr;
    /// Creates and starts a pod's sandbox; returns its handle and IP.
    fn create_sandbox(
        &self,
        plan: &SandboxPlan,
    ) -> impl Future<Output = Result<(String, IpAddr)>> + Send;
    /// Creates and starts a container in a sandbox; returns its handle.
    fn start_container(
        &self,
        sandbox: &str,
        plan: &ContainerPlan,
        attempt: u32,
    ) -> impl Future<Output = Result<String>> + Send;
    fn state(&self, container: &str) -> impl Future<Output = Result<ContainerState>> + Send;
    fn signal(&self, container: &str, sig: Signal) -> impl Future<Output = Result<()>> + Send;
    /// Removes a container (killing it first).
    fn remove_container(&self, container: &str) -> impl Future<Output = Result<()>> + Send;
    fn remove_sandbox(&self, sandbox: &str) -> impl Future<Output = Result<()>> + Send;
    /// Runs a command in a running container; its exit code, or an error
    /// on timeout.
    fn exec(
        &self,
        container: &str,
        cmd: &[String],
        timeout: std::time::Duration,
    ) -> impl Future<Output = Result<i64>> + Send;
    fn logs(&self, container: &str) -> impl Future<Output = Result<Vec<LogLine>>> + Send;
    /// Installs a pod's packet rules (replacing the previous ones).
    fn set_rules(&self, sandbox: &str, rules: &NetRules)
        -> impl Future<Output = Result<()>> + Send;
    /// Removes everything the runtime created.
    fn teardown(&self) -> impl Future<Output = Result<usize>> + Send;
    /// What the runtime knows of itself for the environment fingerprint.
    fn fingerprint(&self) -> impl Future<Output = BTreeMap<String, String>> + Send;
}

/// The pause process: holds a pod's network namespace until it is killed
/// (the runtime removes sandboxes with SIGKILL; as PID 1 it would ignore a
/// default-disposition SIGTERM anyway).
pub fn pause() -> ExitCode {
    loop {
        std::thread::park();
    }
}
