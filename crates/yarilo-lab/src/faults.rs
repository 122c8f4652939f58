//! Faults, executed on the cluster at their time and recorded in
//! `faults.jsonl` with when their effect began and ended.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::certs::Chain;
use crate::history::{FaultRecord, Journal};
use crate::scenario::{FaultAction, Pick, PickName, PodSelector, SentinelPlan};
use crate::substrate::cluster::Cluster;
use crate::substrate::{PodRuntime, Signal};
use crate::{LabError, Result};

const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(180);

/// Pods a selector names now.
pub fn select<R: PodRuntime>(c: &Cluster<R>, s: &PodSelector) -> Result<Vec<String>> {
    let pods = c.pods_of(&s.workload);
    if pods.is_empty() {
        return Err(LabError::Substrate(format!("{}: no live pods", s.workload)));
    }
    Ok(match &s.pick {
        Pick::Name(PickName::All) => pods.into_iter().map(|p| p.name).collect(),
        Pick::Name(PickName::Random) => vec![pods[c.random(pods.len())].name.clone()],
        // The i-th live pod in index order (a StatefulSet's ordinal when
        // all its pods are there).
        Pick::Index(i) => vec![pods
            .get(*i as usize)
            .ok_or_else(|| {
                LabError::Substrate(format!("{}: fewer than {} live pods", s.workload, i + 1))
            })?
            .name
            .clone()],
    })
}

pub struct FaultEnv<'a, R: PodRuntime> {
    pub cluster: &'a Arc<Cluster<R>>,
    pub start: Instant,
    pub journal: &'a Journal<FaultRecord>,
    pub chain: Option<&'a tokio::sync::Mutex<Chain>>,
    pub sentinel: Option<&'a SentinelPlan>,
}

impl<R: PodRuntime> FaultEnv<'_, R> {
    fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Runs one fault to its end (a stop waits out its pause, a partition
    /// its duration, a rollout its last pod).
    pub async fn run(&self, action: &FaultAction) -> FaultRecord {
        let t = self.ms();
        let mut targets = Vec::new();
        let r = self.exec(action, &mut targets).await;
        let rec = FaultRecord {
            t_ms: t,
            end_ms: self.ms(),
            fault: action.name().to_string(),
            targets,
            detail: match &r {
                Ok(d) => d.clone(),
                Err(e) => format!("failed: {e}"),
            },
            ok: r.is_ok(),
        };
        self.journal.push(rec.clone());
        self.journal.flush();
        rec
    }

    async fn exec(&self, action: &FaultAction, targets: &mut Vec<String>) -> Result<String> {
        let c = self.cluster;
        match action {
            FaultAction::Kill { target } => {
                let pods = select(c, target)?;
                for p in &pods {
                    c.delete_pod(p, false)?;
                }
                targets.extend(pods);
                Ok("SIGKILL to every container; the controller recreates the pod".into())
            }
            FaultAction::Term { target } => {
                let pods = select(c, target)?;
                for p in &pods {
                    c.delete_pod(p, true)?;
                }
                targets.extend(pods);
                Ok("graceful delete (SIGTERM, grace period)".into())
            }
            FaultAction::Stop { target, seconds } => {
                let pods = select(c, target)?;
                for p in &pods {
                    c.signal_pod(p, Signal::Stop).await?;
                }
                targets.extend(pods.clone());
                tokio::time::sleep(Duration::from_secs_f64(*seconds)).await;
                for p in &pods {
                    c.signal_pod(p, Signal::Cont).await?;
                }
                Ok(format!("SIGSTOP for {seconds}s, then SIGCONT"))
            }
            FaultAction::RollingRestart { workload } => {
                targets.push(workload.clone());
                c.rollout_restart(workload, ROLLOUT_TIMEOUT).await?;
                Ok("every pod replaced in turn".into())
            }
            FaultAction::Partition { a, b, seconds } => {
                let mut pa = Vec::new();
                for s in a {
                    pa.extend(select(c, s)?);
                }
                let mut pb = Vec::new();
                for s in b {
                    pb.extend(select(c, s)?);
                }
                targets.extend(pa.iter().cloned());
                targets.push("|".into());
                targets.extend(pb.iter().cloned());
                let id = c.partition(pa, pb);
                tokio::time::sleep(Duration::from_secs_f64(*seconds)).await;
                c.heal(id);
                Ok(format!("cut for {seconds}s, healed"))
            }
            FaultAction::Scale { workload, replicas } => {
                targets.push(workload.clone());
                c.set_replicas(workload, *replicas)?;
                self.wait_replicas(workload, *replicas).await?;
                Ok(format!("scaled to {replicas}"))
            }
            FaultAction::RingChurn {
                workload,
                low,
                high,
                rounds,
                every_seconds,
            } => {
                targets.push(workload.clone());
                for _ in 0..*rounds {
                    c.set_replicas(workload, *high)?;
                    self.wait_replicas(workload, *high).await?;
                    tokio::time::sleep(Duration::from_secs_f64(*every_seconds)).await;
                    c.set_replicas(workload, *low)?;
                    self.wait_replicas(workload, *low).await?;
                    tokio::time::sleep(Duration::from_secs_f64(*every_seconds)).await;
                }
                Ok(format!("{rounds} rounds {low}→{high}→{low}"))
            }
            FaultAction::BackendFlap {
                target,
                times,
                down_seconds,
                up_seconds,
            } => {
                let pods = select(c, target)?;
                targets.extend(pods.clone());
                for _ in 0..*times {
                    for p in &pods {
                        c.signal_pod(p, Signal::Stop).await?;
                    }
                    tokio::time::sleep(Duration::from_secs_f64(*down_seconds)).await;
                    for p in &pods {
                        c.signal_pod(p, Signal::Cont).await?;
                    }
                    tokio::time::sleep(Duration::from_secs_f64(*up_seconds)).await;
                }
                Ok(format!("{times}× down {down_seconds}s / up {up_seconds}s"))
            }
            FaultAction::RedisFailover => {
                let plan = self.sentinel.ok_or_else(|| {
                    LabError::Substrate("redis_failover needs topology.sentinel".into())
                })?;
                let primary = c
                    .pods_of(&plan.redis)
                    .into_iter()
                    .find(|p| p.labels.get("role").map(String::as_str) == Some("master"))
                    .ok_or_else(|| LabError::Substrate("no pod labelled role=master".into()))?;
                targets.push(primary.name.clone());
                c.delete_pod(&primary.name, false)?;
                // Until Sentinel has promoted a replica (the relabel hook
                // moves role=master).
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let now = c
                        .pods_of(&plan.redis)
                        .into_iter()
                        .find(|p| p.labels.get("role").map(String::as_str) == Some("master"));
                    if let Some(p) =
                        now.filter(|p| p.name != primary.name || p.index != primary.index)
                    {
                        if p.name != primary.name {
                            return Ok(format!(
                                "primary {} killed; {} promoted",
                                primary.name, p.name
                            ));
                        }
                    }
                    if Instant::now() > deadline {
                        return Err(LabError::Substrate(
                            "Sentinel promoted no replica within 60s".into(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            FaultAction::LocksReplicaLoss { workload } => {
                let pods = c.pods_of(workload);
                let p = pods
                    .get(c.random(pods.len()))
                    .ok_or_else(|| LabError::Substrate(format!("{workload}: no pods")))?;
                targets.push(p.name.clone());
                c.delete_pod(&p.name, false)?;
                Ok("one locks replica killed".into())
            }
            FaultAction::CertRotation { restart } => {
                let chain = self.chain.ok_or_else(|| {
                    LabError::Substrate("cert_rotation needs topology.internal_tls".into())
                })?;
                let secrets = {
                    let mut ch = chain.lock().await;
                    ch.rotate()?;
                    ch.secrets()
                };
                let mut workloads = std::collections::BTreeSet::new();
                for (name, data) in secrets {
                    c.update_secret(&name, data)?;
                    workloads.extend(c.workloads_mounting(&name));
                }
                targets.extend(workloads.iter().cloned());
                if *restart {
                    for w in &workloads {
                        c.rollout_restart(w, ROLLOUT_TIMEOUT).await?;
                    }
                    Ok("new intermediate and leaves; every workload mounting one rolled".into())
                } else {
                    Ok("new intermediate and leaves written; nothing restarted".into())
                }
            }
        }
    }

    async fn wait_replicas(&self, workload: &str, n: u32) -> Result<()> {
        let deadline = Instant::now() + ROLLOUT_TIMEOUT;
        loop {
            let pods = self.cluster.pods_of(workload);
            if pods.len() as u32 == n && pods.iter().all(|p| p.ready) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(LabError::Substrate(format!(
                    "{workload}: not at {n} ready replicas in time"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The relabelling hook: every 500 ms asks a Sentinel which pod is the
/// primary and moves the `role=master` label there (what a
/// Sentinel-aware chart's client-reconfig script does).
pub async fn follow_sentinel<R: PodRuntime>(
    c: Arc<Cluster<R>>,
    plan: SentinelPlan,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Some(ip) = sentinel_primary(&c, &plan).await {
            for p in c.pods_of(&plan.redis) {
                let is = p.ip.map(|a| a.to_string()) == Some(ip.clone());
                let has = p.labels.get("role").map(String::as_str) == Some("master");
                if is && !has {
                    c.set_label(&p.name, "role", Some("master"));
                } else if !is && has {
                    c.set_label(&p.name, "role", Some("replica"));
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn sentinel_primary<R: PodRuntime>(c: &Cluster<R>, plan: &SentinelPlan) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for s in c.pods_of(&plan.sentinels) {
        let Some(ip) = s.ip else { continue };
        let r = async {
            let mut conn = tokio::net::TcpStream::connect((ip, plan.port)).await.ok()?;
            let cmd = format!(
                "*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n${}\r\n{}\r\n",
                plan.master.len(),
                plan.master
            );
            conn.write_all(cmd.as_bytes()).await.ok()?;
            let mut buf = vec![0u8; 512];
            let n = conn.read(&mut buf).await.ok()?;
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            // *2\r\n$<n>\r\n<ip>\r\n$<n>\r\n<port>\r\n
            let parts: Vec<&str> = text.split("\r\n").collect();
            parts
                .get(2)
                .map(|s| s.to_string())
                .filter(|s| !s.is_empty())
        };
        if let Ok(Some(ip)) = tokio::time::timeout(Duration::from_secs(1), r).await {
            return Some(ip);
        }
    }
    None
}
