//! The Kubernetes objects the lab understands, read from `helm template`
//! output (or files of the same shape): Deployments and StatefulSets with
//! their pod templates, Services (ClusterIP and headless), ConfigMaps,
//! Secrets and PersistentVolumeClaims. Fields a substrate cannot honour are
//! listed (`ignored`), never silently dropped, so a chart that depends on
//! one shows up in the report.

use std::collections::BTreeMap;
use yarilo_config::serde_yaml as yaml;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::{LabError, Result};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub value_from: Option<EnvSource>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvSource {
    #[serde(default)]
    pub secret_key_ref: Option<KeyRef>,
    #[serde(default)]
    pub config_map_key_ref: Option<KeyRef>,
    #[serde(default)]
    pub field_ref: Option<FieldRef>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    pub name: String,
    pub key: String,
    #[serde(default)]
    pub optional: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldRef {
    pub field_path: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvFrom {
    #[serde(default)]
    pub secret_ref: Option<NameRef>,
    #[serde(default)]
    pub config_map_ref: Option<NameRef>,
    #[serde(default)]
    pub prefix: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NameRef {
    pub name: String,
}

/// A port given as a number or by the container port's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PortRef {
    Number(u16),
    Name(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpGet {
    #[serde(default = "default_path")]
    pub path: String,
    pub port: PortRef,
    #[serde(default)]
    pub scheme: Option<String>,
}

fn default_path() -> String {
    "/".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TcpSocket {
    pub port: PortRef,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecAction {
    pub command: Vec<String>,
}

/// A probe, with the kubelet's defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    #[serde(default)]
    pub http_get: Option<HttpGet>,
    #[serde(default)]
    pub tcp_socket: Option<TcpSocket>,
    #[serde(default)]
    pub exec: Option<ExecAction>,
    #[serde(default)]
    pub initial_delay_seconds: u32,
    #[serde(default = "ten")]
    pub period_seconds: u32,
    #[serde(default = "one")]
    pub timeout_seconds: u32,
    #[serde(default = "three")]
    pub failure_threshold: u32,
    #[serde(default = "one")]
    pub success_threshold: u32,
}

fn ten() -> u32 {
    10
}
fn one() -> u32 {
    1
}
fn three() -> u32 {
    3
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(default)]
    pub name: Option<String>,
    pub container_port: u16,
    #[serde(default)]
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: String,
    pub mount_path: String,
    #[serde(default)]
    pub sub_path: Option<String>,
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: String,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub env_from: Vec<EnvFrom>,
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
    #[serde(default)]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(default)]
    pub readiness_probe: Option<Probe>,
    #[serde(default)]
    pub liveness_probe: Option<Probe>,
    #[serde(default)]
    pub startup_probe: Option<Probe>,
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Everything else the container spec says (resources, securityContext,
    /// …): reported as not honoured.
    #[serde(flatten)]
    pub other: BTreeMap<String, yaml::Value>,
}

impl Container {
    /// The port number a probe or Service names.
    pub fn resolve_port(&self, p: &PortRef) -> Option<u16> {
        match p {
            PortRef::Number(n) => Some(*n),
            PortRef::Name(name) => {
                if let Ok(n) = name.parse() {
                    return Some(n);
                }
                self.ports
                    .iter()
                    .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                    .map(|cp| cp.container_port)
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapVolume {
    pub name: String,
    #[serde(default)]
    pub items: Vec<KeyToPath>,
    #[serde(default)]
    pub default_mode: Option<u32>,
    #[serde(default)]
    pub optional: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretVolume {
    pub secret_name: String,
    #[serde(default)]
    pub items: Vec<KeyToPath>,
    #[serde(default)]
    pub default_mode: Option<u32>,
    #[serde(default)]
    pub optional: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PvcVolume {
    pub claim_name: String,
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(default)]
    pub config_map: Option<ConfigMapVolume>,
    #[serde(default)]
    pub secret: Option<SecretVolume>,
    #[serde(default)]
    pub persistent_volume_claim: Option<PvcVolume>,
    #[serde(default)]
    pub empty_dir: Option<yaml::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    pub containers: Vec<Container>,
    #[serde(default)]
    pub init_containers: Vec<Container>,
    #[serde(default)]
    pub volumes: Vec<Volume>,
    #[serde(default = "thirty")]
    pub termination_grace_period_seconds: u32,
    #[serde(flatten)]
    pub other: BTreeMap<String, yaml::Value>,
}

fn thirty() -> u32 {
    30
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PodTemplate {
    #[serde(default)]
    pub metadata: Meta,
    pub spec: PodSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
}

impl WorkloadKind {
    pub fn prefix(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployment",
            WorkloadKind::StatefulSet => "statefulset",
        }
    }
}

/// A Deployment or StatefulSet.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub meta: Meta,
    pub replicas: u32,
    pub selector: BTreeMap<String, String>,
    /// StatefulSet: the governing headless Service (pod DNS names).
    pub service_name: Option<String>,
    /// Deployment: `Recreate` or `RollingUpdate`.
    pub strategy: String,
    /// StatefulSet volumeClaimTemplates (name → per-pod claim).
    pub claim_templates: Vec<String>,
    pub template: PodTemplate,
    /// Which release rendered it.
    pub release: String,
}

impl Workload {
    /// `deployment/<name>` or `statefulset/<name>`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.kind.prefix(), self.meta.name)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default)]
    pub name: Option<String>,
    pub port: u16,
    #[serde(default)]
    pub target_port: Option<PortRef>,
    #[serde(default)]
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Service {
    pub meta: Meta,
    pub headless: bool,
    pub selector: BTreeMap<String, String>,
    pub ports: Vec<ServicePort>,
    pub publish_not_ready: bool,
    pub release: String,
}

/// What a cert-manager `Certificate` asks for.
#[derive(Debug, Clone, Serialize)]
pub struct CertRequest {
    pub name: String,
    pub secret: String,
    pub dns_names: Vec<String>,
    pub uris: Vec<String>,
}

/// Everything the lab read from one or more releases.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Objects {
    pub workloads: Vec<Workload>,
    pub services: Vec<Service>,
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    pub claims: Vec<String>,
    /// cert-manager Certificates: the lab issues them from its own chain,
    /// as cert-manager would from the internal CA issuer.
    pub certificates: Vec<CertRequest>,
    /// Objects of kinds the lab does not act on, as `Kind/name`.
    pub ignored_objects: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    kind: Option<String>,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: yaml::Value,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
}

fn spec_field<T: serde::de::DeserializeOwned>(
    spec: &yaml::Value,
    key: &str,
    what: &str,
) -> Result<Option<T>> {
    match spec.get(key) {
        None | Some(yaml::Value::Null) => Ok(None),
        Some(v) => yaml::from_value(v.clone())
            .map(Some)
            .map_err(|e| LabError::Manifest(format!("{what}: spec.{key}: {e}"))),
    }
}

impl Objects {
    /// Adds the objects of one multi-document YAML stream.
    pub fn add_yaml(&mut self, text: &str, release: &str) -> Result<()> {
        for doc in yaml::Deserializer::from_str(text) {
            let value = yaml::Value::deserialize(doc)
                .map_err(|e| LabError::Manifest(format!("release {release}: {e}")))?;
            if value.is_null() {
                continue;
            }
            if value.get("kind").and_then(|k| k.as_str()) == Some("List") {
                if let Some(items) = value.get("items").and_then(|i| i.as_sequence()) {
                    for item in items {
                        self.add_value(item.clone(), release)?;
                    }
                }
                continue;
            }
            self.add_value(value, release)?;
        }
        Ok(())
    }

    fn add_value(&mut self, value: yaml::Value, release: &str) -> Result<()> {
        let raw: Raw = yaml::from_value(value)
            .map_err(|e| LabError::Manifest(format!("release {release}: {e}")))?;
        let kind = raw.kind.clone().unwrap_or_default();
        let what = format!("{kind}/{}", raw.metadata.name);
        match kind.as_str() {
            "Deployment" | "StatefulSet" => {
                let wk = if kind == "Deployment" {
                    WorkloadKind::Deployment
                } else {
                    WorkloadKind::StatefulSet
                };
                let template: PodTemplate = spec_field(&raw.spec, "template", &what)?
                    .ok_or_else(|| LabError::Manifest(format!("{what}: no spec.template")))?;
                let replicas: Option<u32> = spec_field(&raw.spec, "replicas", &what)?;
                let selector = raw
                    .spec
                    .get("selector")
                    .and_then(|s| s.get("matchLabels"))
                    .map(|m| yaml::from_value(m.clone()))
                    .transpose()
                    .map_err(|e| LabError::Manifest(format!("{what}: selector: {e}")))?
                    .unwrap_or_default();
                let service_name: Option<String> = spec_field(&raw.spec, "serviceName", &what)?;
                let strategy = raw
                    .spec
                    .get("strategy")
                    .and_then(|s| s.get("type"))
                    .and_then(|t| t.as_str())
                    .unwrap_or("RollingUpdate")
                    .to_string();
                let claim_templates = raw
                    .spec
                    .get("volumeClaimTemplates")
                    .and_then(|v| v.as_sequence())
                    .map(|seq| {
                        seq.iter()
                            .filter_map(|c| {
                                c.get("metadata")
                                    .and_then(|m| m.get("name"))
                                    .and_then(|n| n.as_str())
                                    .map(str::to_string)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                self.workloads.push(Workload {
                    kind: wk,
                    meta: raw.metadata,
                    replicas: replicas.unwrap_or(1),
                    selector,
                    service_name,
                    strategy,
                    claim_templates,
                    template,
                    release: release.to_string(),
                });
            }
            "Service" => {
                let cluster_ip: Option<String> = spec_field(&raw.spec, "clusterIP", &what)?;
                let selector: Option<BTreeMap<String, String>> =
                    spec_field(&raw.spec, "selector", &what)?;
                let ports: Option<Vec<ServicePort>> = spec_field(&raw.spec, "ports", &what)?;
                let pnr: Option<bool> = spec_field(&raw.spec, "publishNotReadyAddresses", &what)?;
                self.services.push(Service {
                    meta: raw.metadata,
                    headless: cluster_ip.as_deref() == Some("None"),
                    selector: selector.unwrap_or_default(),
                    ports: ports.unwrap_or_default(),
                    publish_not_ready: pnr.unwrap_or(false),
                    release: release.to_string(),
                });
            }
            "ConfigMap" => {
                self.config_maps.insert(raw.metadata.name, raw.data);
            }
            "Secret" => {
                let mut data = BTreeMap::new();
                for (k, v) in raw.data {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .map_err(|e| LabError::Manifest(format!("{what}: data.{k}: {e}")))?;
                    data.insert(k, bytes);
                }
                for (k, v) in raw.string_data {
                    data.insert(k, v.into_bytes());
                }
                self.secrets.insert(raw.metadata.name, data);
            }
            "PersistentVolumeClaim" => self.claims.push(raw.metadata.name),
            "Certificate" => {
                let strings = |key: &str| -> Vec<String> {
                    raw.spec
                        .get(key)
                        .and_then(|v| v.as_sequence())
                        .map(|s| {
                            s.iter()
                                .filter_map(|x| x.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let secret = raw
                    .spec
                    .get("secretName")
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| LabError::Manifest(format!("{what}: no spec.secretName")))?
                    .to_string();
                self.certificates.push(CertRequest {
                    name: raw.metadata.name.clone(),
                    secret,
                    dns_names: strings("dnsNames"),
                    uris: strings("uris"),
                });
            }
            _ => self.ignored_objects.push(what),
        }
        Ok(())
    }

    pub fn workload(&self, id: &str) -> Option<&Workload> {
        self.workloads.iter().find(|w| w.id() == id)
    }

    pub fn workload_mut(&mut self, id: &str) -> Option<&mut Workload> {
        self.workloads.iter_mut().find(|w| w.id() == id)
    }

    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| s.meta.name == name)
    }

    /// Checks references: every mounted ConfigMap/Secret and env source
    /// exists (unless optional), every claim is declared, every Service
    /// selects some workload. A chart with a dangling reference fails here,
    /// as its pods would never start on a cluster.
    pub fn validate(&self) -> Result<Vec<String>> {
        let mut notes = Vec::new();
        for w in &self.workloads {
            let spec = &w.template.spec;
            for k in spec.other.keys() {
                if !matches!(
                    k.as_str(),
                    "securityContext"
                        | "serviceAccountName"
                        | "affinity"
                        | "tolerations"
                        | "nodeSelector"
                        | "automountServiceAccountToken"
                        | "enableServiceLinks"
                        | "restartPolicy"
                        | "dnsPolicy"
                        | "priorityClassName"
                        | "topologySpreadConstraints"
                ) {
                    notes.push(format!("{}: pod spec `{k}` is not honoured", w.id()));
                }
            }
            for v in &spec.volumes {
                if let Some(cm) = &v.config_map {
                    if !cm.optional && !self.config_maps.contains_key(&cm.name) {
                        return Err(LabError::Manifest(format!(
                            "{}: volume {} names ConfigMap {} which no release renders",
                            w.id(),
                            v.name,
                            cm.name
                        )));
                    }
                }
                if let Some(s) = &v.secret {
                    if !s.optional && !self.secrets.contains_key(&s.secret_name) {
                        return Err(LabError::Manifest(format!(
                            "{}: volume {} names Secret {} which no release renders (and the lab does not supply)",
                            w.id(),
                            v.name,
                            s.secret_name
                        )));
                    }
                }
                if let Some(p) = &v.persistent_volume_claim {
                    if !self.claims.contains(&p.claim_name) {
                        notes.push(format!(
                            "{}: claim {} is not rendered; the lab provides it as a shared directory",
                            w.id(),
                            p.claim_name
                        ));
                    }
                }
            }
            for c in spec.containers.iter().chain(&spec.init_containers) {
                for m in &c.volume_mounts {
                    let known = spec.volumes.iter().any(|v| v.name == m.name)
                        || w.claim_templates.contains(&m.name);
                    if !known {
                        return Err(LabError::Manifest(format!(
                            "{}: container {} mounts unknown volume {}",
                            w.id(),
                            c.name,
                            m.name
                        )));
                    }
                }
                for e in &c.env {
                    if let Some(src) = &e.value_from {
                        if let Some(r) = &src.secret_key_ref {
                            let ok = self
                                .secrets
                                .get(&r.name)
                                .is_some_and(|s| s.contains_key(&r.key));
                            if !ok && !r.optional {
                                return Err(LabError::Manifest(format!(
                                    "{}: container {} env {} needs Secret {} key {}",
                                    w.id(),
                                    c.name,
                                    e.name,
                                    r.name,
                                    r.key
                                )));
                            }
                        }
                        if let Some(r) = &src.config_map_key_ref {
                            let ok = self
                                .config_maps
                                .get(&r.name)
                                .is_some_and(|s| s.contains_key(&r.key));
                            if !ok && !r.optional {
                                return Err(LabError::Manifest(format!(
                                    "{}: container {} env {} needs ConfigMap {} key {}",
                                    w.id(),
                                    c.name,
                                    e.name,
                                    r.name,
                                    r.key
                                )));
                            }
                        }
                    }
                }
                for k in c.other.keys() {
                    if !matches!(
                        k.as_str(),
                        "resources"
                            | "securityContext"
                            | "imagePullPolicy"
                            | "lifecycle"
                            | "terminationMessagePolicy"
                    ) {
                        notes.push(format!(
                            "{}: container {} `{k}` is not honoured",
                            w.id(),
                            c.name
                        ));
                    }
                }
            }
        }
        for s in &self.services {
            if s.selector.is_empty() {
                notes.push(format!(
                    "Service/{}: no selector (no endpoints)",
                    s.meta.name
                ));
                continue;
            }
            let any = self
                .workloads
                .iter()
                .any(|w| labels_match(&s.selector, &w.template.metadata.labels));
            if !any {
                // Labels a hook sets at run time (a Redis `role=master`)
                // are not in any template: such a Service selects pods
                // once they are labelled.
                let later = self.workloads.iter().any(|w| {
                    let l = &w.template.metadata.labels;
                    s.selector
                        .iter()
                        .all(|(k, v)| l.get(k).is_none_or(|x| x == v))
                        && s.selector.keys().any(|k| l.contains_key(k))
                });
                if !later {
                    return Err(LabError::Manifest(format!(
                        "Service/{} selects no workload ({:?})",
                        s.meta.name, s.selector
                    )));
                }
                notes.push(format!(
                    "Service/{}: selects pods only once they carry {:?} (set at run time)",
                    s.meta.name, s.selector
                ));
            }
        }
        for o in &self.ignored_objects {
            notes.push(format!("{o}: kind not acted on"));
        }
        Ok(notes)
    }
}

/// Whether every selector label is on the pod.
pub fn labels_match(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: cfg }
data:
  yarilo.yaml: "telemetry: { listen: ':9090' }\n"
---
apiVersion: v1
kind: Secret
metadata: { name: sec }
data:
  token: c2VjcmV0
---
apiVersion: apps/v1
kind: StatefulSet
metadata: { name: backend }
spec:
  replicas: 2
  serviceName: backend-headless
  selector: { matchLabels: { app: backend } }
  template:
    metadata: { labels: { app: backend } }
    spec:
      containers:
        - name: imap
          image: yarilo:1
          command: [yarilo, imap]
          ports: [{ name: telemetry, containerPort: 9090 }]
          env:
            - { name: TOKEN, valueFrom: { secretKeyRef: { name: sec, key: token } } }
            - { name: POD_IP, valueFrom: { fieldRef: { fieldPath: status.podIP } } }
          readinessProbe: { httpGet: { path: /readyz, port: telemetry }, periodSeconds: 2 }
          volumeMounts: [{ name: cfg, mountPath: /etc/yarilo }]
          resources: { limits: { cpu: 1 } }
      volumes:
        - { name: cfg, configMap: { name: cfg } }
---
apiVersion: v1
kind: Service
metadata: { name: backend-headless }
spec:
  clusterIP: None
  selector: { app: backend }
  ports: [{ port: 10143, targetPort: 10143 }]
"#;

    #[test]
    fn a_rendered_stream_becomes_workloads_services_and_data() {
        let mut o = Objects::default();
        o.add_yaml(SAMPLE, "r").unwrap();
        let w = o.workload("statefulset/backend").unwrap();
        assert_eq!(w.replicas, 2);
        assert_eq!(w.service_name.as_deref(), Some("backend-headless"));
        let c = &w.template.spec.containers[0];
        let probe = c.readiness_probe.as_ref().unwrap();
        assert_eq!(probe.period_seconds, 2);
        assert_eq!(probe.failure_threshold, 3);
        assert_eq!(
            c.resolve_port(&probe.http_get.as_ref().unwrap().port),
            Some(9090)
        );
        assert_eq!(o.secrets["sec"]["token"], b"secret");
        assert!(o.service("backend-headless").unwrap().headless);
        let notes = o.validate().unwrap();
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn a_dangling_secret_reference_is_refused() {
        let mut o = Objects::default();
        o.add_yaml(&SAMPLE.replace("name: sec }", "name: other }"), "r")
            .unwrap();
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("needs Secret sec"), "{e}");
    }

    #[test]
    fn a_service_selecting_nothing_is_refused() {
        let mut o = Objects::default();
        o.add_yaml(
            &SAMPLE.replace(
                "selector: { app: backend }\n  ports",
                "selector: { app: nope }\n  ports",
            ),
            "r",
        )
        .unwrap();
        assert!(o.validate().is_err());
    }
}
