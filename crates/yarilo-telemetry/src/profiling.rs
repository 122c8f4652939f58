//! Profiling a live component on its telemetry port (deployment seed,
//! "Profiling a live pod"), off by default, in Rust terms:
//!
//! | switch | serves | built on |
//! |---|---|---|
//! | `telemetry.pprof.enabled` | `/debug/pprof/profile?seconds=N` (CPU), `tasks` (the runtime's tasks), `block` and `mutex` (time spent waiting), `cmdline` | pprof-rs (SIGPROF sampling, pprof protobuf) and this module's wait sampler |
//! | `telemetry.pprof.heap_enabled` | `/debug/pprof/heap` | jemalloc's heap profiler (jemalloc_pprof) |
//!
//! Every profile is the gzipped `profile.proto` format `go tool pprof`
//! reads; [`top`] is this project's reader for machines without Go
//! (`yarctl pprof top`). There is no `/debug/pprof/` index page.
//!
//! `block` and `mutex` stay empty until their sampling rates are set
//! (`block_profile_rate`: one sample per that many nanoseconds of blocked
//! time; `mutex_profile_fraction`: one in that many contention events):
//! serving a route is free, sampling is paid by every wait. The waits
//! sampled are the ones the process declares ([`record_block`],
//! [`record_contention`]): lock-service acquisitions, the director's state
//! lock.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pprof::protos::{Function, Line, Location, Message, Profile, Sample, ValueType};

/// `telemetry.pprof.*`, resolved.
#[derive(Debug, Clone, Copy, Default)]
pub struct PprofSettings {
    pub enabled: bool,
    pub heap_enabled: bool,
    pub block_profile_rate: u64,
    pub mutex_profile_fraction: u64,
}

impl PprofSettings {
    pub fn from_config(c: &yarilo_config::Pprof) -> PprofSettings {
        PprofSettings {
            enabled: c.enabled,
            heap_enabled: c.heap_enabled,
            block_profile_rate: c.block_profile_rate,
            mutex_profile_fraction: c.mutex_profile_fraction,
        }
    }

    /// What is exposed, for the warning every start logs while any of it
    /// is on; `None` when nothing is.
    pub fn exposure(&self) -> Option<String> {
        let mut on = Vec::new();
        if self.enabled {
            on.push("CPU, task and wait profiles (telemetry.pprof.enabled)".to_string());
        }
        if self.heap_enabled {
            on.push("the heap profile (telemetry.pprof.heap_enabled)".to_string());
        }
        if self.block_profile_rate > 0 {
            on.push(format!(
                "block sampling every {} ns of blocked time (telemetry.pprof.block_profile_rate)",
                self.block_profile_rate
            ));
        }
        if self.mutex_profile_fraction > 0 {
            on.push(format!(
                "mutex sampling of one in {} contention events (telemetry.pprof.mutex_profile_fraction)",
                self.mutex_profile_fraction
            ));
        }
        (!on.is_empty()).then(|| on.join("; "))
    }
}

/// Why a profile could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Another CPU profile is being taken (SIGPROF is process-wide).
    #[error("a CPU profile is already being taken")]
    Busy,
    #[error("profiler: {0}")]
    Profiler(String),
    /// The allocator is not jemalloc with profiling (a library test, or
    /// a build without it).
    #[error("heap profiling unavailable: {0}")]
    Heap(String),
    #[error("not a profile: {0}")]
    Decode(String),
}

static CPU_BUSY: AtomicBool = AtomicBool::new(false);

/// CPU sampling rate of `/debug/pprof/profile` (Go's is 100 Hz; 99 keeps
/// clear of lockstep with 100 Hz timers).
pub const CPU_FREQUENCY_HZ: i32 = 99;

/// Samples the CPU for `seconds` and returns the gzipped profile. Runs
/// on a blocking thread; one at a time.
pub async fn cpu_profile(seconds: u64) -> Result<Vec<u8>, ProfileError> {
    if CPU_BUSY.swap(true, Ordering::AcqRel) {
        return Err(ProfileError::Busy);
    }
    let result = tokio::task::spawn_blocking(move || {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(CPU_FREQUENCY_HZ)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|e| ProfileError::Profiler(e.to_string()))?;
        std::thread::sleep(Duration::from_secs(seconds));
        let report = guard
            .report()
            .build()
            .map_err(|e| ProfileError::Profiler(e.to_string()))?;
        let profile = report
            .pprof()
            .map_err(|e| ProfileError::Profiler(e.to_string()))?;
        Ok(gzip(&profile.encode_to_vec()))
    })
    .await
    .unwrap_or_else(|e| Err(ProfileError::Profiler(e.to_string())));
    CPU_BUSY.store(false, Ordering::Release);
    result
}

/// Turns jemalloc's heap sampling on (it must have been started with
/// `prof:true`, which the `yarilo` binary's allocator does).
pub fn activate_heap() -> Result<(), ProfileError> {
    let ctl = jemalloc_pprof::PROF_CTL
        .as_ref()
        .ok_or_else(|| ProfileError::Heap("jemalloc profiling is not compiled in".into()))?;
    let mut ctl = ctl
        .try_lock()
        .map_err(|_| ProfileError::Heap("profiling control busy".into()))?;
    ctl.activate()
        .map_err(|e| ProfileError::Heap(e.to_string()))
}

/// The live heap as jemalloc samples it, gzipped `profile.proto`.
pub async fn heap_profile() -> Result<Vec<u8>, ProfileError> {
    let ctl = jemalloc_pprof::PROF_CTL
        .as_ref()
        .ok_or_else(|| ProfileError::Heap("jemalloc profiling is not compiled in".into()))?;
    let mut ctl = ctl.lock().await;
    if !ctl.activated() {
        return Err(ProfileError::Heap(
            "heap sampling is not active (telemetry.pprof.heap_enabled)".into(),
        ));
    }
    ctl.dump_pprof()
        .map_err(|e| ProfileError::Heap(e.to_string()))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

/// A text view of the runtime's tasks (the seed's `goroutine`): worker
/// threads, live tasks, the injection queue.
pub fn tasks_view() -> String {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return "no tokio runtime\n".into();
    };
    let m = handle.metrics();
    format!(
        "workers {}\nalive_tasks {}\nglobal_queue_depth {}\n",
        m.num_workers(),
        m.num_alive_tasks(),
        m.global_queue_depth()
    )
}

// ---- waits ---------------------------------------------------------------

/// Distinct stacks kept per wait profile.
const MAX_STACKS: usize = 4096;
/// Frames kept per stack.
const MAX_FRAMES: usize = 64;

#[derive(Default)]
struct WaitTable {
    /// Stack (instruction pointers) → (events, nanoseconds).
    stacks: HashMap<Vec<usize>, (i64, i64)>,
}

struct Waits {
    block_rate: AtomicU64,
    mutex_fraction: AtomicU64,
    mutex_events: AtomicU64,
    block: Mutex<WaitTable>,
    mutex: Mutex<WaitTable>,
}

fn waits() -> &'static Waits {
    static WAITS: OnceLock<Waits> = OnceLock::new();
    WAITS.get_or_init(|| Waits {
        block_rate: AtomicU64::new(0),
        mutex_fraction: AtomicU64::new(0),
        mutex_events: AtomicU64::new(0),
        block: Mutex::new(WaitTable::default()),
        mutex: Mutex::new(WaitTable::default()),
    })
}

/// Sets the sampling rates (0 turns a profile off).
pub fn configure_waits(block_profile_rate: u64, mutex_profile_fraction: u64) {
    let w = waits();
    w.block_rate.store(block_profile_rate, Ordering::Relaxed);
    w.mutex_fraction
        .store(mutex_profile_fraction, Ordering::Relaxed);
}

/// A wait on something outside the process (a lock service, a socket):
/// sampled for the `block` profile with probability `waited / rate`
/// (always when it waited longer than the rate), as Go does.
pub fn record_block(waited: Duration) {
    let w = waits();
    let rate = w.block_rate.load(Ordering::Relaxed);
    if rate == 0 {
        return;
    }
    let nanos = waited.as_nanos().min(i64::MAX as u128) as u64;
    if nanos < rate && rand::random::<u64>() % rate >= nanos {
        return;
    }
    record(&w.block, nanos);
}

/// A contended in-process lock: one in `mutex_profile_fraction` events is
/// sampled for the `mutex` profile, with the time it waited.
pub fn record_contention(waited: Duration) {
    let w = waits();
    let fraction = w.mutex_fraction.load(Ordering::Relaxed);
    if fraction == 0 {
        return;
    }
    if !w
        .mutex_events
        .fetch_add(1, Ordering::Relaxed)
        .is_multiple_of(fraction)
    {
        return;
    }
    record(&w.mutex, waited.as_nanos().min(i64::MAX as u128) as u64);
}

fn record(table: &Mutex<WaitTable>, nanos: u64) {
    let mut stack = Vec::with_capacity(MAX_FRAMES);
    backtrace::trace(|frame| {
        stack.push(frame.ip() as usize);
        stack.len() < MAX_FRAMES
    });
    let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
    let full = t.stacks.len() >= MAX_STACKS;
    if full && !t.stacks.contains_key(&stack) {
        return;
    }
    let e = t.stacks.entry(stack).or_default();
    e.0 += 1;
    e.1 = e.1.saturating_add(nanos as i64);
}

/// Which wait profile.
#[derive(Debug, Clone, Copy)]
pub enum WaitKind {
    Block,
    Mutex,
}

/// The `block` or `mutex` profile, gzipped `profile.proto` (empty until
/// its rate is set).
pub fn wait_profile(kind: WaitKind) -> Vec<u8> {
    let w = waits();
    let table = match kind {
        WaitKind::Block => &w.block,
        WaitKind::Mutex => &w.mutex,
    };
    let stacks: Vec<(Vec<usize>, (i64, i64))> = table
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .stacks
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let mut b = ProfileBuilder::default();
    let types = [("contentions", "count"), ("delay", "nanoseconds")];
    let mut profile = Profile {
        sample_type: types
            .iter()
            .map(|(t, u)| ValueType {
                ty: b.string(t),
                unit: b.string(u),
            })
            .collect(),
        ..Default::default()
    };
    for (stack, (count, nanos)) in stacks {
        let location_id = stack.iter().map(|ip| b.location(*ip)).collect();
        profile.sample.push(Sample {
            location_id,
            value: vec![count, nanos],
            ..Default::default()
        });
    }
    profile.location = b.locations;
    profile.function = b.functions;
    profile.string_table = b.strings;
    gzip(&profile.encode_to_vec())
}

/// Interning for a hand-built profile.
struct ProfileBuilder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: HashMap<String, u64>,
    locations: Vec<Location>,
    location_ids: HashMap<usize, u64>,
}

impl Default for ProfileBuilder {
    fn default() -> Self {
        ProfileBuilder {
            // string_table[0] must be "".
            strings: vec![String::new()],
            string_ids: HashMap::from([(String::new(), 0)]),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
        }
    }
}

impl ProfileBuilder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(id) = self.string_ids.get(s) {
            return *id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        if let Some(id) = self.function_ids.get(name) {
            return *id;
        }
        let id = self.functions.len() as u64 + 1;
        let (n, f) = (self.string(name), self.string(file));
        self.functions.push(Function {
            id,
            name: n,
            system_name: n,
            filename: f,
            ..Default::default()
        });
        self.function_ids.insert(name.to_string(), id);
        id
    }

    /// One location per instruction pointer, with every (inlined) frame
    /// it resolves to.
    fn location(&mut self, ip: usize) -> u64 {
        if let Some(id) = self.location_ids.get(&ip) {
            return *id;
        }
        let mut lines = Vec::new();
        let mut frames: Vec<(String, String, i64)> = Vec::new();
        backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
            let name = sym
                .name()
                .map(|n| format!("{n:#}"))
                .unwrap_or_else(|| format!("{ip:#x}"));
            let file = sym
                .filename()
                .map(|f| f.display().to_string())
                .unwrap_or_default();
            frames.push((name, file, i64::from(sym.lineno().unwrap_or(0))));
        });
        if frames.is_empty() {
            frames.push((format!("{ip:#x}"), String::new(), 0));
        }
        for (name, file, line) in frames {
            let function_id = self.function(&name, &file);
            lines.push(Line { function_id, line });
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            address: ip as u64,
            line: lines,
            ..Default::default()
        });
        self.location_ids.insert(ip, id);
        id
    }
}

// ---- reading -------------------------------------------------------------

/// Decodes a profile (gzipped or not).
pub fn decode(bytes: &[u8]) -> Result<Profile, ProfileError> {
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(512 * 1024 * 1024)
            .read_to_end(&mut out)
            .map_err(|e| ProfileError::Decode(format!("gzip: {e}")))?;
        out
    } else {
        bytes.to_vec()
    };
    Profile::decode(raw.as_slice()).map_err(|e| ProfileError::Decode(e.to_string()))
}

/// What `go tool pprof -top` prints: the `n` functions with the most flat
/// samples of the profile's last sample type, with their cumulative
/// share.
pub fn top(profile: &Profile, n: usize) -> String {
    let s = |i: i64| {
        profile
            .string_table
            .get(usize::try_from(i).unwrap_or(0))
            .map(String::as_str)
            .unwrap_or("")
    };
    let index = profile.sample_type.len().saturating_sub(1);
    let (ty, unit) = profile
        .sample_type
        .get(index)
        .map(|t| (s(t.ty), s(t.unit)))
        .unwrap_or(("", ""));
    let functions: HashMap<u64, &str> =
        profile.function.iter().map(|f| (f.id, s(f.name))).collect();
    // A location's innermost frame comes first in `line`.
    let names: HashMap<u64, Vec<&str>> = profile
        .location
        .iter()
        .map(|l| {
            let v = l
                .line
                .iter()
                .map(|line| functions.get(&line.function_id).copied().unwrap_or("?"))
                .collect();
            (l.id, v)
        })
        .collect();
    let mut flat: HashMap<&str, i64> = HashMap::new();
    let mut cum: HashMap<&str, i64> = HashMap::new();
    let mut total = 0i64;
    for sample in &profile.sample {
        let v = sample.value.get(index).copied().unwrap_or(0);
        total += v;
        let mut seen: Vec<&str> = Vec::new();
        for (i, loc) in sample.location_id.iter().enumerate() {
            for (j, name) in names.get(loc).into_iter().flatten().enumerate() {
                let name: &str = name;
                if i == 0 && j == 0 {
                    *flat.entry(name).or_default() += v;
                }
                if !seen.contains(&name) {
                    seen.push(name);
                    *cum.entry(name).or_default() += v;
                }
            }
        }
    }
    let mut rows: Vec<(&str, i64, i64)> = cum
        .iter()
        .map(|(name, c)| (*name, flat.get(name).copied().unwrap_or(0), *c))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
    let pct = |v: i64| {
        if total == 0 {
            0.0
        } else {
            v as f64 * 100.0 / total as f64
        }
    };
    let mut out = format!(
        "Type: {ty} ({unit})\nSamples: {}, total {total} {unit}\nShowing top {} of {} functions\n{:>14} {:>6} {:>6} {:>14} {:>6}\n",
        profile.sample.len(),
        n.min(rows.len()),
        rows.len(),
        "flat",
        "flat%",
        "sum%",
        "cum",
        "cum%"
    );
    let mut sum = 0.0;
    for (name, f, c) in rows.into_iter().take(n) {
        sum += pct(f);
        out.push_str(&format!(
            "{f:>14} {:>5.1}% {sum:>5.1}% {c:>14} {:>5.1}%  {name}\n",
            pct(f),
            pct(c)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn waiting_here() {
        record_block(Duration::from_millis(5));
        record_contention(Duration::from_millis(1));
    }

    #[test]
    fn waits_are_sampled_only_with_a_rate_and_read_back_with_their_stacks() {
        configure_waits(0, 0);
        waiting_here();
        let p = decode(&wait_profile(WaitKind::Block)).unwrap();
        assert!(p.sample.is_empty(), "no rate, no samples");
        configure_waits(1, 1);
        waiting_here();
        let p = decode(&wait_profile(WaitKind::Block)).unwrap();
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].value, vec![1, 5_000_000]);
        let text = top(&p, 50);
        assert!(text.starts_with("Type: delay (nanoseconds)"), "{text}");
        assert!(text.contains("waiting_here"), "{text}");
        let p = decode(&wait_profile(WaitKind::Mutex)).unwrap();
        assert_eq!(p.sample[0].value[1], 1_000_000);
        configure_waits(0, 0);
    }
}
