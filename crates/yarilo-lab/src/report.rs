//! The run's report in `--out`: `results.json`, `junit.xml`,
//! `environment.json`, `reproduce.txt`, `timeline.html` (operations as
//! latency dots, failures in red, fault windows as bands; opens in any
//! browser, no scripts from elsewhere).

use std::fmt::Write;
use std::path::Path;

use serde::Serialize;

use crate::checks::CheckResult;
use crate::history::{FaultRecord, Op};
use crate::substrate::cluster::ClusterEvent;
use crate::{LabError, Result};

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub scenario: String,
    pub substrate: String,
    pub seed: u64,
    pub smoke: bool,
    pub duration_seconds: f64,
    pub all_as_expected: bool,
    pub checks: Vec<CheckResult>,
    pub notes: Vec<String>,
    pub reproduce: String,
    pub faults: Vec<FaultRecord>,
    pub operations: usize,
}

pub fn write_json(path: &Path, v: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| LabError::Other(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(LabError::io(path))
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn junit(r: &Results) -> String {
    let failures = r.checks.iter().filter(|c| !c.as_expected).count();
    let mut s = String::new();
    let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        s,
        r#"<testsuite name="lab.{}" tests="{}" failures="{failures}" time="{:.1}">"#,
        xml(&r.scenario),
        r.checks.len(),
        r.duration_seconds
    );
    for c in &r.checks {
        let _ = write!(
            s,
            r#"  <testcase classname="lab.{}" name="{}">"#,
            xml(&r.scenario),
            xml(&c.check)
        );
        if !c.as_expected {
            let detail: Vec<String> = c
                .violations
                .iter()
                .take(20)
                .map(|v| format!("[{}..{} ms] {}", v.from_ms, v.to_ms, v.detail))
                .collect();
            let _ = write!(
                s,
                r#"<failure message="verdict {:?}, expected {}">{}&#10;{}</failure>"#,
                c.verdict,
                c.expected,
                xml(&c.summary),
                xml(&detail.join("\n"))
            );
        }
        let _ = writeln!(s, "<system-out>{}</system-out></testcase>", xml(&c.summary));
    }
    let _ = writeln!(s, "</testsuite>");
    s
}

/// The HTML timeline: one SVG, x = time, y = latency (log scale), one row
/// band per fault.
pub fn timeline(r: &Results, ops: &[Op], events: &[ClusterEvent]) -> String {
    let end = ops
        .iter()
        .map(|o| o.t_ms + o.dur_ms)
        .chain(r.faults.iter().map(|f| f.end_ms))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let (w, h, left, top) = (1200.0, 420.0, 60.0, 20.0);
    let x = |t: u64| left + (t as f64 / end) * (w - left - 10.0);
    let y = |ms: u64| {
        let v = ((ms.max(1)) as f64).log10().min(5.0);
        top + (h - top - 30.0) * (1.0 - v / 5.0)
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" style="font:11px sans-serif">"#
    );
    for (i, f) in r.faults.iter().enumerate() {
        let x0 = x(f.t_ms);
        let x1 = x(f.end_ms).max(x0 + 2.0);
        let _ = write!(
            svg,
            r##"<rect x="{x0:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#f5c542" opacity="0.25"><title>{}</title></rect><text x="{x0:.1}" y="{:.1}" fill="#8a6d00">{}</text>"##,
            x1 - x0,
            h - top - 30.0,
            xml(&format!("{} {} {}", f.fault, f.targets.join(","), f.detail)),
            top + 10.0 + 12.0 * (i % 5) as f64,
            xml(&f.fault)
        );
    }
    for p in [1u64, 10, 100, 1000, 10000] {
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{w}" y1="{0:.1}" y2="{0:.1}" stroke="#ddd"/><text x="5" y="{0:.1}">{p} ms</text>"##,
            y(p)
        );
    }
    let colour = |k: &str| match k {
        "lmtp" => "#1f77b4",
        "imap_append" => "#2ca02c",
        "imap_fetch" | "imap_select" | "imap_store" => "#17becf",
        "imap_login" => "#9467bd",
        "imap_idle" => "#bcbd22",
        "pop3" => "#8c564b",
        "lookup" => "#7f7f7f",
        _ => "#333",
    };
    for o in ops {
        let (c, rr) = if o.ok {
            (colour(&o.kind), 1.5)
        } else {
            ("#d62728", 3.0)
        };
        let _ = write!(
            svg,
            r#"<circle cx="{:.1}" cy="{:.1}" r="{rr}" fill="{c}"><title>{}</title></circle>"#,
            x(o.t_ms),
            y(o.dur_ms),
            xml(&format!(
                "{} {} {} ms {}",
                o.kind,
                o.user,
                o.dur_ms,
                o.error.as_deref().unwrap_or("ok")
            ))
        );
    }
    for e in events.iter().filter(|e| {
        e.event.contains("ready") || e.event.contains("killed") || e.event.contains("terminating")
    }) {
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" stroke="#aaa" stroke-dasharray="2,2"><title>{3}</title></line>"##,
            x(e.time_ms),
            h - 28.0,
            h - 18.0,
            xml(&format!("{} {}", e.pod, e.event))
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{left}" y="{}">0 s</text><text x="{}" y="{}">{:.0} s</text></svg>"#,
        h - 5.0,
        w - 60.0,
        h - 5.0,
        end / 1000.0
    );
    let mut rows = String::new();
    for c in &r.checks {
        let _ = write!(
            rows,
            "<tr class=\"{}\"><td>{}</td><td>{:?}</td><td>{}</td><td>{}</td></tr>",
            if c.as_expected { "ok" } else { "bad" },
            xml(&c.check),
            c.verdict,
            c.expected,
            xml(&c.summary)
        );
    }
    let mut faults = String::new();
    for f in &r.faults {
        let _ = write!(
            faults,
            "<tr><td>{:.1}–{:.1} s</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.t_ms as f64 / 1000.0,
            f.end_ms as f64 / 1000.0,
            xml(&f.fault),
            xml(&f.targets.join(", ")),
            xml(&f.detail)
        );
    }
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>lab: {name}</title><style>body{{font-family:sans-serif;margin:1em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 6px}}tr.bad td{{background:#fdd}}tr.ok td{{background:#efe}}</style></head><body>\
<h1>{name}</h1><p>substrate {sub}, seed {seed}, {n} operations. Dots: operations (x time, y latency; red = failed). Bands: fault windows. Dashed ticks: pod events.</p>{svg}\
<h2>Verdicts</h2><table><tr><th>check</th><th>verdict</th><th>expected</th><th>summary</th></tr>{rows}</table>\
<h2>Faults</h2><table><tr><th>when</th><th>fault</th><th>targets</th><th>detail</th></tr>{faults}</table>\
<h2>Reproduce</h2><pre>{repro}</pre></body></html>\n",
        name = xml(&r.scenario),
        sub = xml(&r.substrate),
        seed = r.seed,
        n = ops.len(),
        repro = xml(&r.reproduce),
    )
}
