//! `history.jsonl` and `faults.jsonl`: one JSON object per line, written
//! as things happen (so a run that dies still leaves its history), times in
//! milliseconds since the workload started.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::{LabError, Result};

/// One client operation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Op {
    /// Start, ms since the workload began.
    pub t_ms: u64,
    pub dur_ms: u64,
    /// `lmtp`, `imap_login`, `imap_append`, `imap_fetch`, `imap_store`,
    /// `imap_idle`, `pop3`, `lookup`.
    pub kind: String,
    pub user: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// The endpoint (login pod) the client reached.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub via: Option<String>,
    /// What the director answered for this user just before (backend IP).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub director: Option<String>,
    /// The backend pod that served it (filled in after the run from the
    /// backends' own records).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message_id: Option<String>,
    /// The server's reply (LMTP 250 text: it names the backend session).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reply: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uidvalidity: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uidnext: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub highestmodseq: Option<u64>,
    /// FETCH: the (uid, Message-ID) pairs the client saw.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub seen: Vec<(u32, String)>,
}

/// One fault as executed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRecord {
    pub t_ms: u64,
    /// When the fault's effect ended (heal, resume, rollout done).
    pub end_ms: u64,
    pub fault: String,
    pub targets: Vec<String>,
    pub detail: String,
    pub ok: bool,
}

pub struct Journal<T> {
    file: Mutex<std::io::BufWriter<std::fs::File>>,
    items: Mutex<Vec<T>>,
}

impl<T: Serialize + Clone> Journal<T> {
    pub fn create(path: &Path) -> Result<Journal<T>> {
        let f = std::fs::File::create(path).map_err(LabError::io(path))?;
        Ok(Journal {
            file: Mutex::new(std::io::BufWriter::new(f)),
            items: Mutex::new(Vec::new()),
        })
    }

    pub fn push(&self, item: T) {
        if let Ok(line) = serde_json::to_string(&item) {
            if let Ok(mut f) = self.file.lock() {
                let _ = writeln!(f, "{line}");
            }
        }
        if let Ok(mut v) = self.items.lock() {
            v.push(item);
        }
    }

    pub fn flush(&self) {
        if let Ok(mut f) = self.file.lock() {
            let _ = f.flush();
        }
    }

    pub fn all(&self) -> Vec<T> {
        self.items.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Rewrites the file with the given items (after enrichment).
    pub fn rewrite(&self, path: &Path, items: &[T]) -> Result<()> {
        let mut out = String::new();
        for i in items {
            if let Ok(l) = serde_json::to_string(i) {
                out.push_str(&l);
                out.push('\n');
            }
        }
        std::fs::write(path, out).map_err(LabError::io(path))
    }
}

/// Milliseconds since `start`.
pub fn ms(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}
