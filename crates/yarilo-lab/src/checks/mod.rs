//! The checkers. Each reads the run's records — the clients' history, the
//! faults, the mailboxes after the heal, the backends' own session records,
//! the directors' views, the certificates presented — and gives a verdict:
//! true (the property held), false (violated, with the violations and the
//! window around each), or unknown (the run did not give enough to tell).

pub mod records;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::history::{FaultRecord, Op};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    True,
    False,
    Unknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// The window around it, ms since the workload started.
    pub from_ms: u64,
    pub to_ms: u64,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub check: String,
    pub verdict: Verdict,
    pub expected: bool,
    pub as_expected: bool,
    pub summary: String,
    pub figures: serde_json::Value,
    pub violations: Vec<Violation>,
}

impl CheckResult {
    pub fn new(
        check: &str,
        verdict: Verdict,
        expected: bool,
        summary: String,
        figures: serde_json::Value,
        violations: Vec<Violation>,
    ) -> CheckResult {
        let as_expected = matches!(
            (verdict, expected),
            (Verdict::True, true) | (Verdict::False, false)
        );
        CheckResult {
            check: check.into(),
            verdict,
            expected,
            as_expected,
            summary,
            figures,
            violations,
        }
    }
}

/// A user's mailbox after the heal.
pub type FinalState = Vec<(String, u32, Vec<(u32, String)>)>;

/// Every acknowledged delivery and APPEND present exactly once.
pub fn delivered(
    history: &[Op],
    final_state: Option<&FinalState>,
) -> (Verdict, String, serde_json::Value, Vec<Violation>) {
    let Some(fs) = final_state else {
        return (
            Verdict::Unknown,
            "the mailboxes could not be read after the heal".into(),
            serde_json::json!({}),
            vec![],
        );
    };
    let mut present: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (user, _, msgs) in fs {
        for (_, mid) in msgs {
            *present.entry((user.as_str(), mid.as_str())).or_default() += 1;
        }
    }
    let mut lost = Vec::new();
    let mut dup = Vec::new();
    let mut acked = 0;
    for op in history {
        if !op.ok || !(op.kind == "lmtp" || op.kind == "imap_append") {
            continue;
        }
        let Some(mid) = &op.message_id else { continue };
        acked += 1;
        match present
            .get(&(op.user.as_str(), mid.as_str()))
            .copied()
            .unwrap_or(0)
        {
            0 => lost.push(op),
            1 => {}
            n => dup.push((op, n)),
        }
    }
    let mut v = Vec::new();
    for op in &lost {
        v.push(Violation {
            from_ms: op.t_ms,
            to_ms: op.t_ms + op.dur_ms,
            detail: format!(
                "lost: {} for {} ({} acknowledged {})",
                op.message_id.as_deref().unwrap_or(""),
                op.user,
                op.kind,
                op.reply.as_deref().unwrap_or("OK")
            ),
        });
    }
    for (op, n) in &dup {
        v.push(Violation {
            from_ms: op.t_ms,
            to_ms: op.t_ms + op.dur_ms,
            detail: format!(
                "duplicated ×{n}: {} for {}",
                op.message_id.as_deref().unwrap_or(""),
                op.user
            ),
        });
    }
    let verdict = if acked == 0 {
        Verdict::Unknown
    } else if v.is_empty() {
        Verdict::True
    } else {
        Verdict::False
    };
    (
        verdict,
        format!(
            "{acked} acknowledged, {} lost, {} duplicated",
            lost.len(),
            dup.len()
        ),
        serde_json::json!({
            "acknowledged": acked,
            "lost": lost.len(),
            "duplicated": dup.len(),
            "lost_ids": lost.iter().filter_map(|o| o.message_id.clone()).collect::<Vec<_>>(),
            "duplicated_ids": dup.iter().filter_map(|(o, _)| o.message_id.clone()).collect::<Vec<_>>(),
        }),
        v,
    )
}

/// (UIDVALIDITY, UID) → Message-ID is a function per mailbox; UIDNEXT and
/// HIGHESTMODSEQ as clients see them never go back.
pub fn uid_invariants(
    history: &[Op],
    final_state: Option<&FinalState>,
) -> (Verdict, String, serde_json::Value, Vec<Violation>) {
    // (user, uidvalidity, uid) → (Message-ID, first seen ms)
    let mut map: BTreeMap<(String, u32, u32), (String, u64)> = BTreeMap::new();
    let mut v = Vec::new();
    let mut observations = 0u64;
    let mut note = |key: (String, u32, u32), mid: &str, t: u64, v: &mut Vec<Violation>| {
        if mid.is_empty() {
            return;
        }
        observations += 1;
        match map.get(&key) {
            Some((m, t0)) if m != mid => v.push(Violation {
                from_ms: (*t0).min(t),
                to_ms: (*t0).max(t),
                detail: format!(
                    "{} UIDVALIDITY {} UID {}: {} and {}",
                    key.0, key.1, key.2, m, mid
                ),
            }),
            Some(_) => {}
            None => {
                map.insert(key, (mid.to_string(), t));
            }
        }
    };
    for op in history.iter().filter(|o| o.ok) {
        if let (Some(vv), Some(uid), Some(mid)) = (op.uidvalidity, op.uid, &op.message_id) {
            if op.kind == "imap_append" {
                note((op.user.clone(), vv, uid), mid, op.t_ms, &mut v);
            }
        }
        if op.kind == "imap_fetch" {
            if let Some(vv) = op.uidvalidity {
                for (uid, mid) in &op.seen {
                    note((op.user.clone(), vv, *uid), mid, op.t_ms, &mut v);
                }
            }
        }
    }
    if let Some(fs) = final_state {
        for (user, vv, msgs) in fs {
            for (uid, mid) in msgs {
                note((user.clone(), *vv, *uid), mid, u64::MAX / 2, &mut v);
            }
        }
    }
    // Monotonic UIDNEXT / HIGHESTMODSEQ: an observation that started after
    // another ended must not be lower.
    let mut selects: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in history.iter().filter(|o| o.ok && o.kind == "imap_select") {
        selects.entry(op.user.as_str()).or_default().push(op);
    }
    let mut validity_changes = 0;
    observations += selects.values().map(|v| v.len() as u64).sum::<u64>();
    for (user, ops) in &selects {
        let mut ops = ops.clone();
        ops.sort_by_key(|o| o.t_ms);
        for (i, later) in ops.iter().enumerate() {
            for earlier in ops[..i].iter().filter(|e| e.t_ms + e.dur_ms <= later.t_ms) {
                if earlier.uidvalidity != later.uidvalidity {
                    validity_changes += 1;
                    v.push(Violation {
                        from_ms: earlier.t_ms,
                        to_ms: later.t_ms + later.dur_ms,
                        detail: format!(
                            "{user}: UIDVALIDITY changed {:?} → {:?}",
                            earlier.uidvalidity, later.uidvalidity
                        ),
                    });
                    continue;
                }
                if later.uidnext < earlier.uidnext {
                    v.push(Violation {
                        from_ms: earlier.t_ms,
                        to_ms: later.t_ms + later.dur_ms,
                        detail: format!(
                            "{user}: UIDNEXT went back {:?} → {:?}",
                            earlier.uidnext, later.uidnext
                        ),
                    });
                }
                if later.highestmodseq < earlier.highestmodseq {
                    v.push(Violation {
                        from_ms: earlier.t_ms,
                        to_ms: later.t_ms + later.dur_ms,
                        detail: format!(
                            "{user}: HIGHESTMODSEQ went back {:?} → {:?}",
                            earlier.highestmodseq, later.highestmodseq
                        ),
                    });
                }
            }
        }
    }
    // Only the first violation of a kind per window matters to a reader;
    // keep them all but bounded.
    v.sort_by_key(|x| x.from_ms);
    let total = v.len();
    v.truncate(200);
    let verdict = if observations == 0 {
        Verdict::Unknown
    } else if total == 0 {
        Verdict::True
    } else {
        Verdict::False
    };
    (
        verdict,
        format!(
            "{observations} (UIDVALIDITY, UID) observations, {} distinct, {total} violations",
            map.len()
        ),
        serde_json::json!({
            "observations": observations,
            "distinct_uids": map.len(),
            "violations": total,
            "uidvalidity_changes": validity_changes,
        }),
        v,
    )
}

/// A backend's record of serving a user.
#[derive(Debug, Clone, Serialize)]
pub struct Served {
    pub user: String,
    pub pod: String,
    pub from_ms: u64,
    pub to_ms: u64,
    pub what: String,
}

/// No user is served by two backends at the same time.
pub fn single_writer(served: &[Served]) -> (Verdict, String, serde_json::Value, Vec<Violation>) {
    let mut by_user: BTreeMap<&str, Vec<&Served>> = BTreeMap::new();
    for s in served {
        by_user.entry(s.user.as_str()).or_default().push(s);
    }
    let mut v = Vec::new();
    let mut users_split = BTreeSet::new();
    for (user, list) in &by_user {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if a.pod == b.pod {
                    continue;
                }
                let from = a.from_ms.max(b.from_ms);
                let to = a.to_ms.min(b.to_ms);
                let instant = a.from_ms == a.to_ms || b.from_ms == b.to_ms;
                if from < to || (instant && from <= to) {
                    users_split.insert(user.to_string());
                    if v.len() < 200 {
                        v.push(Violation {
                            from_ms: from,
                            to_ms: to,
                            detail: format!(
                                "{user}: {} on {} [{}..{}] and {} on {} [{}..{}]",
                                a.what,
                                a.pod,
                                a.from_ms,
                                a.to_ms,
                                b.what,
                                b.pod,
                                b.from_ms,
                                b.to_ms
                            ),
                        });
                    }
                }
            }
        }
    }
    let verdict = if served.is_empty() {
        Verdict::Unknown
    } else if v.is_empty() {
        Verdict::True
    } else {
        Verdict::False
    };
    (
        verdict,
        format!(
            "{} backend session records, {} users served by two backends at once",
            served.len(),
            users_split.len()
        ),
        serde_json::json!({
            "records": served.len(),
            "users": by_user.len(),
            "users_split": users_split,
        }),
        v,
    )
}

fn p99(mut lat: Vec<u64>) -> u64 {
    if lat.is_empty() {
        return 0;
    }
    lat.sort_unstable();
    let i = ((lat.len() as f64) * 0.99).ceil() as usize;
    lat[i.saturating_sub(1).min(lat.len() - 1)]
}

/// Share of operations that succeeded, and p99 latency, in each fault
/// window (from the fault to 5 s after its effect ended) and overall.
pub fn availability(
    history: &[Op],
    faults: &[FaultRecord],
    min_ratio: f64,
    max_p99_ms: f64,
) -> (Verdict, String, serde_json::Value, Vec<Violation>) {
    let window = |from: u64, to: u64| {
        let ops: Vec<&Op> = history
            .iter()
            .filter(|o| o.t_ms >= from && o.t_ms <= to)
            .collect();
        let ok = ops.iter().filter(|o| o.ok).count();
        let lat: Vec<u64> = ops.iter().filter(|o| o.ok).map(|o| o.dur_ms).collect();
        (ops.len(), ok, p99(lat))
    };
    let (n, ok, p) = window(0, u64::MAX);
    let mut figures = vec![serde_json::json!({
        "window": "whole run", "ops": n, "ok": ok,
        "success_ratio": if n > 0 { ok as f64 / n as f64 } else { 0.0 }, "p99_ms": p,
    })];
    let mut v = Vec::new();
    let mut worst: f64 = if n > 0 { ok as f64 / n as f64 } else { 1.0 };
    let mut worst_p99 = p;
    for f in faults {
        let to = f.end_ms + 5000;
        let (n, ok, p) = window(f.t_ms, to);
        let ratio = if n > 0 { ok as f64 / n as f64 } else { 1.0 };
        worst = worst.min(ratio);
        worst_p99 = worst_p99.max(p);
        figures.push(serde_json::json!({
            "window": format!("{} {}", f.fault, f.targets.join(",")),
            "from_ms": f.t_ms, "to_ms": to, "ops": n, "ok": ok, "success_ratio": ratio, "p99_ms": p,
        }));
        if ratio < min_ratio || (p as f64) > max_p99_ms {
            v.push(Violation {
                from_ms: f.t_ms,
                to_ms: to,
                detail: format!(
                    "{}: {ok}/{n} ok ({:.1}%), p99 {p} ms (bounds {:.0}%, {max_p99_ms} ms)",
                    f.fault,
                    ratio * 100.0,
                    min_ratio * 100.0
                ),
            });
        }
    }
    if n > 0 && ((ok as f64 / n as f64) < min_ratio || (p as f64) > max_p99_ms) {
        v.push(Violation {
            from_ms: 0,
            to_ms: history.iter().map(|o| o.t_ms + o.dur_ms).max().unwrap_or(0),
            detail: format!("whole run: {ok}/{n} ok, p99 {p} ms"),
        });
    }
    let verdict = if n == 0 {
        Verdict::Unknown
    } else if v.is_empty() {
        Verdict::True
    } else {
        Verdict::False
    };
    (
        verdict,
        format!(
            "{ok}/{n} ok overall; worst window {:.1}% ok, worst p99 {worst_p99} ms",
            worst * 100.0
        ),
        serde_json::Value::Array(figures),
        v,
    )
}

/// One director's view: members, backends, pins of the workload users.
pub type View = (Vec<String>, Vec<String>, Vec<String>);

/// One sample of every director's view.
#[derive(Debug, Clone, Serialize)]
pub struct ViewSample {
    pub t_ms: u64,
    /// director pod → (members, backends, pins of the workload users)
    pub views: BTreeMap<String, View>,
    /// What the cluster says is live: director addresses, backend IPs.
    pub live_directors: Vec<String>,
    pub live_backends: Vec<String>,
}

impl ViewSample {
    fn agreed(&self) -> bool {
        if self.views.len() != self.live_directors.len() || self.views.is_empty() {
            return false;
        }
        let mut it = self.views.values();
        let Some(first) = it.next() else { return false };
        if it.any(|x| x != first) {
            return false;
        }
        let members: BTreeSet<&String> = first.0.iter().collect();
        let live: BTreeSet<&String> = self.live_directors.iter().collect();
        let backends: BTreeSet<&String> = first.1.iter().collect();
        let live_b: BTreeSet<&String> = self.live_backends.iter().collect();
        members == live && backends == live_b
    }
}

/// After each fault's effect ends, how long until every live director
/// holds the same members (the live ones), backends (the live ones) and
/// pins. `gone[i]`: addresses fault i took away (a killed or deleted
/// director); the time from the fault until no director lists them is
/// reported as `evicted_after_s` (the ring's own goal), beside full
/// agreement (which also waits for a replacement pod to join).
pub fn convergence(
    samples: &[ViewSample],
    faults: &[FaultRecord],
    gone: &[Vec<String>],
    bound_s: f64,
) -> (Verdict, String, serde_json::Value, Vec<Violation>) {
    if samples.is_empty() {
        return (
            Verdict::Unknown,
            "no director views were sampled".into(),
            serde_json::json!([]),
            vec![],
        );
    }
    let mut figures = Vec::new();
    let mut v = Vec::new();
    let mut worst = 0.0f64;
    let mut unknown = false;
    for (i, f) in faults.iter().enumerate() {
        // Only samples where the fault shows: the pods it took away are no
        // longer in the live set (a killed pod is still listed for a tick).
        let g: &[String] = gone.get(i).map(Vec::as_slice).unwrap_or(&[]);
        let after: Vec<&ViewSample> = samples
            .iter()
            .filter(|s| s.t_ms >= f.end_ms)
            .filter(|s| {
                !g.iter()
                    .any(|ip| s.live_directors.contains(ip) || s.live_backends.contains(ip))
            })
            .collect();
        let evicted = gone.get(i).filter(|g| !g.is_empty()).and_then(|g| {
            samples
                .iter()
                .filter(|s| s.t_ms >= f.t_ms && !s.views.is_empty())
                .find(|s| s.views.values().all(|v| !v.0.iter().any(|m| g.contains(m))))
                .map(|s| (s.t_ms - f.t_ms) as f64 / 1000.0)
        });
        let t = after.iter().find(|s| s.agreed()).map(|s| s.t_ms);
        match t {
            Some(t) => {
                let secs = (t - f.end_ms) as f64 / 1000.0;
                worst = worst.max(secs);
                figures.push(serde_json::json!({"fault": f.fault, "targets": f.targets, "converged_after_s": secs, "evicted_after_s": evicted}));
                if secs > bound_s {
                    v.push(Violation {
                        from_ms: f.end_ms,
                        to_ms: t,
                        detail: format!(
                            "{} {}: converged after {secs:.2}s (bound {bound_s}s)",
                            f.fault,
                            f.targets.join(",")
                        ),
                    });
                }
            }
            None => {
                if after.is_empty() {
                    unknown = true;
                }
                let last = after.last().map(|s| s.t_ms).unwrap_or(f.end_ms);
                figures.push(serde_json::json!({"fault": f.fault, "targets": f.targets, "converged_after_s": null, "evicted_after_s": evicted}));
                let detail = after
                    .last()
                    .map(|s| {
                        format!(
                            "{:?} (live directors {:?}, backends {:?})",
                            s.views, s.live_directors, s.live_backends
                        )
                    })
                    .unwrap_or_default();
                v.push(Violation {
                    from_ms: f.end_ms,
                    to_ms: last,
                    detail: format!(
                        "{} {}: never converged; last views {detail}",
                        f.fault,
                        f.targets.join(",")
                    ),
                });
            }
        }
    }
    let verdict = if !v.is_empty() {
        Verdict::False
    } else if unknown || faults.is_empty() && !samples.iter().any(|s| s.agreed()) {
        Verdict::Unknown
    } else {
        Verdict::True
    };
    (
        verdict,
        if faults.is_empty() {
            format!(
                "{} samples, directors agreed: {}",
                samples.len(),
                samples.iter().any(|s| s.agreed())
            )
        } else {
            let never = figures
                .iter()
                .filter(|f| f["converged_after_s"].is_null())
                .count();
            if never > 0 {
                format!("never converged after {never} of {} faults; worst of the rest {worst:.2}s (bound {bound_s}s)", faults.len())
            } else {
                format!("worst convergence {worst:.2}s after a fault (bound {bound_s}s)")
            }
        },
        serde_json::Value::Array(figures),
        v,
    )
}

/// One probe of an internal listener.
#[derive(Debug, Clone, Serialize)]
pub struct TlsProbe {
    pub t_ms: u64,
    pub pod: String,
    pub addr: String,
    /// Handshake with the current chain succeeded.
    pub verified: bool,
    /// Generation of the presented leaf (None: not one of ours).
    pub generation: Option<u32>,
    /// A client without a certificate was refused.
    pub refuses_anonymous: bool,
    pub error: Option<String>,
}

/// Every internal listener presents a leaf of the current generation,
/// verified against the chain in use, and refuses a client without a
/// certificate.
pub fn tls(
    probes: &[TlsProbe],
    current: u32,
) -> (Verdict, String, serde_json::Value, Vec<Violation>) {
    let mut v = Vec::new();
    for p in probes {
        if !p.verified || p.generation != Some(current) || !p.refuses_anonymous {
            v.push(Violation {
                from_ms: p.t_ms,
                to_ms: p.t_ms,
                detail: format!(
                    "{} {}: verified {}, generation {:?} (current {current}), refuses anonymous {} {}",
                    p.pod,
                    p.addr,
                    p.verified,
                    p.generation,
                    p.refuses_anonymous,
                    p.error.as_deref().unwrap_or("")
                ),
            });
        }
    }
    let verdict = if probes.is_empty() {
        Verdict::Unknown
    } else if v.is_empty() {
        Verdict::True
    } else {
        Verdict::False
    };
    (
        verdict,
        format!(
            "{} listeners probed, {} not on the current chain (generation {current})",
            probes.len(),
            v.len()
        ),
        serde_json::json!({"probes": probes.len(), "bad": v.len(), "generation": current}),
        v,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: &str, user: &str, t: u64, ok: bool, mid: &str) -> Op {
        Op {
            t_ms: t,
            dur_ms: 5,
            kind: kind.into(),
            user: user.into(),
            ok,
            message_id: Some(mid.into()),
            ..Default::default()
        }
    }

    #[test]
    fn delivered_counts_lost_and_duplicated() {
        let h = vec![
            op("lmtp", "u", 1, true, "<a>"),
            op("lmtp", "u", 2, true, "<b>"),
            op("imap_append", "u", 3, true, "<c>"),
            op("lmtp", "u", 4, false, "<d>"),
        ];
        let fs: FinalState = vec![(
            "u".into(),
            1,
            vec![(1, "<a>".into()), (2, "<c>".into()), (3, "<c>".into())],
        )];
        let (v, _, fig, viol) = delivered(&h, Some(&fs));
        assert_eq!(v, Verdict::False);
        assert_eq!(fig["lost"], 1);
        assert_eq!(fig["duplicated"], 1);
        assert_eq!(viol.len(), 2);
        let fs: FinalState = vec![(
            "u".into(),
            1,
            vec![(1, "<a>".into()), (2, "<b>".into()), (3, "<c>".into())],
        )];
        assert_eq!(delivered(&h, Some(&fs)).0, Verdict::True);
        assert_eq!(delivered(&h, None).0, Verdict::Unknown);
    }

    #[test]
    fn a_uid_naming_two_messages_is_a_violation() {
        let mut a = op("imap_append", "u", 1, true, "<a>");
        a.uidvalidity = Some(7);
        a.uid = Some(1);
        let mut b = op("imap_append", "u", 2, true, "<b>");
        b.uidvalidity = Some(7);
        b.uid = Some(1);
        assert_eq!(uid_invariants(&[a.clone()], None).0, Verdict::True);
        let (v, _, _, viol) = uid_invariants(&[a, b], None);
        assert_eq!(v, Verdict::False);
        assert!(viol[0].detail.contains("UID 1"));
    }

    #[test]
    fn uidnext_going_back_is_a_violation() {
        let mut s1 = op("imap_select", "u", 1, true, "");
        s1.uidvalidity = Some(7);
        s1.uidnext = Some(10);
        s1.highestmodseq = Some(5);
        let mut s2 = s1.clone();
        s2.t_ms = 100;
        s2.uidnext = Some(9);
        let (v, _, _, _) = uid_invariants(&[s1, s2], None);
        assert_eq!(v, Verdict::False);
    }

    #[test]
    fn overlapping_sessions_on_two_pods_split_a_user() {
        let s = |pod: &str, a, b| Served {
            user: "u".into(),
            pod: pod.into(),
            from_ms: a,
            to_ms: b,
            what: "imap".into(),
        };
        assert_eq!(
            single_writer(&[s("b-0", 0, 10), s("b-1", 10, 20)]).0,
            Verdict::True
        );
        assert_eq!(
            single_writer(&[s("b-0", 0, 10), s("b-0", 5, 20)]).0,
            Verdict::True
        );
        assert_eq!(
            single_writer(&[s("b-0", 0, 10), s("b-1", 5, 20)]).0,
            Verdict::False
        );
        // A delivery (an instant) inside another pod's session.
        assert_eq!(
            single_writer(&[s("b-0", 0, 10), s("b-1", 5, 5)]).0,
            Verdict::False
        );
        assert_eq!(single_writer(&[]).0, Verdict::Unknown);
    }

    #[test]
    fn availability_judges_each_fault_window() {
        let mut h: Vec<Op> = (0..100)
            .map(|i| op("lookup", "u", i * 10, true, ""))
            .collect();
        for o in h.iter_mut().skip(50).take(20) {
            o.ok = false;
        }
        let f = FaultRecord {
            t_ms: 500,
            end_ms: 600,
            fault: "kill".into(),
            targets: vec![],
            detail: String::new(),
            ok: true,
        };
        assert_eq!(
            availability(&h, std::slice::from_ref(&f), 0.5, 1000.0).0,
            Verdict::True
        );
        assert_eq!(availability(&h, &[f], 0.9, 1000.0).0, Verdict::False);
    }

    #[test]
    fn convergence_needs_agreement_on_the_live_set() {
        let view = |m: &[&str]| {
            (
                m.iter().map(|s| s.to_string()).collect(),
                vec!["b".to_string()],
                vec![],
            )
        };
        let sample = |t, a: &[&str], b: &[&str]| ViewSample {
            t_ms: t,
            views: BTreeMap::from([("d1".to_string(), view(a)), ("d2".to_string(), view(b))]),
            live_directors: vec!["x".into(), "y".into()],
            live_backends: vec!["b".into()],
        };
        let f = FaultRecord {
            t_ms: 0,
            end_ms: 100,
            fault: "kill".into(),
            targets: vec![],
            detail: String::new(),
            ok: true,
        };
        let s = vec![
            sample(100, &["x", "y", "z"], &["x", "y"]),
            sample(1600, &["x", "y"], &["x", "y"]),
        ];
        let (v, _, fig, _) = convergence(&s, std::slice::from_ref(&f), &[vec!["z".into()]], 2.0);
        assert_eq!(v, Verdict::True);
        assert_eq!(fig[0]["converged_after_s"], 1.5);
        assert_eq!(fig[0]["evicted_after_s"], 1.6);
        assert_eq!(convergence(&s, &[f], &[], 1.0).0, Verdict::False);
    }
}
