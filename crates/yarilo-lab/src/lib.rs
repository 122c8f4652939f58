//! The yarilo lab: runs `scenarios/*.yaml` against the complete system —
//! the images, the charts' rendered manifests, Redis with Sentinel, an
//! internal certificate chain — on a substrate (`docker` here; `kind` as a
//! tested plan; `vm` for issue 26), puts client load on it, breaks it on
//! purpose, and judges the outcome with checkers that each have a negative
//! control.
//!
//! Layout: [`scenario`] (the file format), [`manifests`] (the Kubernetes
//! objects the lab understands), [`substrate`] (what runs them), [`certs`],
//! [`workload`] (clients and `history.jsonl`), [`faults`] (`faults.jsonl`),
//! [`checks`] (verdicts), [`report`] (results, JUnit, timeline), and
//! [`runner`] tying them together.

pub mod certs;
pub mod checks;
pub mod dns;
pub mod faults;
pub mod history;
pub mod images;
pub mod manifests;
pub mod netfilter;
pub mod proto;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod substrate;
pub mod workload;

use std::path::PathBuf;

/// Errors of the lab's own machinery (a failing verdict is not an error).
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Scenario { path: PathBuf, message: String },
    #[error("manifests: {0}")]
    Manifest(String),
    #[error("substrate: {0}")]
    Substrate(String),
    #[error("docker: {0}")]
    Docker(#[from] bollard::errors::Error),
    #[error("{0}")]
    Other(String),
}

impl LabError {
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LabError {
        let path = path.into();
        move |source| LabError::Io { path, source }
    }
}

pub type Result<T, E = LabError> = std::result::Result<T, E>;
