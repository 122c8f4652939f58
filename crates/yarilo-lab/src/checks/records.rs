//! The backends' own records of whom they served, read from their logs:
//! `preamble accepted` (session start, with `user`, `session`, `service`),
//! `session end` (with `session`), and LMTP `delivery` lines (with `user`,
//! `result`). JSON log lines (`log.format: json`) and the text format
//! (`key=value` after the message) are both read.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::Served;
use crate::substrate::LogLine;

/// The message and fields of one log line.
pub fn parse_line(text: &str) -> Option<(String, BTreeMap<String, String>)> {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        let fields = v.get("fields")?;
        let msg = fields.get("message")?.as_str()?.to_string();
        let mut m = BTreeMap::new();
        let mut add = |obj: &serde_json::Value| {
            if let Some(o) = obj.as_object() {
                for (k, v) in o {
                    let s = v
                        .as_str()
                        .map(String::from)
                        .unwrap_or_else(|| v.to_string());
                    m.insert(k.clone(), s);
                }
            }
        };
        if let Some(spans) = v.get("spans").and_then(|s| s.as_array()) {
            for s in spans {
                add(s);
            }
        }
        if let Some(span) = v.get("span") {
            add(span);
        }
        add(fields);
        return Some((msg, m));
    }
    // Text: `<time> LEVEL target: message key=value key="v"`.
    for msg in ["preamble accepted", "session end", "delivery"] {
        if let Some(i) = text.find(msg) {
            let rest = &text[i + msg.len()..];
            let mut m = BTreeMap::new();
            for part in rest.split_whitespace() {
                if let Some((k, v)) = part.split_once('=') {
                    m.insert(k.to_string(), v.trim_matches('"').to_string());
                }
            }
            // Span fields sit before the message (`lmtp{session=…}:`).
            for part in text[..i].split(['{', '}', ' ', ':']) {
                if let Some((k, v)) = part.split_once('=') {
                    m.entry(k.to_string())
                        .or_insert_with(|| v.trim_matches('"').to_string());
                }
            }
            return Some((msg.to_string(), m));
        }
    }
    None
}

/// Served intervals from backend log lines (pod, line); open sessions end
/// at the pod's end (`ends`: pod → ms) or at `run_end`.
pub fn served(
    lines: &[(String, LogLine)],
    start: SystemTime,
    ends: &BTreeMap<String, u64>,
    run_end: u64,
) -> (Vec<Served>, BTreeMap<String, String>) {
    let ms = |t: SystemTime| {
        t.duration_since(start)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    };
    let mut open: BTreeMap<(String, String), (String, u64, String)> = BTreeMap::new();
    let mut out = Vec::new();
    // LMTP session id → pod (the id is in the 250 reply the client got).
    let mut lmtp_sessions = BTreeMap::new();
    let mut sorted: Vec<&(String, LogLine)> = lines.iter().collect();
    sorted.sort_by_key(|(_, l)| l.time);
    for (pod, l) in sorted {
        let Some((msg, f)) = parse_line(&l.text) else {
            continue;
        };
        let t = ms(l.time);
        match msg.as_str() {
            "preamble accepted" => {
                if let (Some(user), Some(session)) = (f.get("user"), f.get("session")) {
                    let service = f.get("service").cloned().unwrap_or_default();
                    open.insert((pod.clone(), session.clone()), (user.clone(), t, service));
                }
            }
            "session end" => {
                if let Some(session) = f.get("session") {
                    if let Some((user, from, service)) =
                        open.remove(&(pod.clone(), session.clone()))
                    {
                        out.push(Served {
                            user,
                            pod: pod.clone(),
                            from_ms: from,
                            to_ms: t,
                            what: service,
                        });
                    }
                }
            }
            "delivery" if f.get("result").map(String::as_str) == Some("ok") => {
                if let Some(user) = f.get("user") {
                    out.push(Served {
                        user: user.clone(),
                        pod: pod.clone(),
                        from_ms: t,
                        to_ms: t,
                        what: "lmtp".into(),
                    });
                }
                if let Some(s) = f.get("session") {
                    lmtp_sessions.insert(s.clone(), pod.clone());
                }
            }
            _ => {}
        }
    }
    for ((pod, _), (user, from, service)) in open {
        let to = ends.get(&pod).copied().unwrap_or(run_end).max(from);
        out.push(Served {
            user,
            pod,
            from_ms: from,
            to_ms: to,
            what: format!("{service} (no end record)"),
        });
    }
    (out, lmtp_sessions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn json_and_text_lines_parse() {
        let j = r#"{"timestamp":"x","level":"INFO","fields":{"message":"preamble accepted","service":"imap","session":"ab12","user":"user001"},"target":"yarilo_login::gate"}"#;
        let (m, f) = parse_line(j).unwrap();
        assert_eq!(m, "preamble accepted");
        assert_eq!(f["user"], "user001");
        let t = r#"2026-12-01T18:00:00Z  INFO lmtp{session=9f peer=10.0.0.1:5}: yarilo_smtp::lmtp::deliver: delivery user=user002 rcpt=user002 result="ok""#;
        let (m, f) = parse_line(t).unwrap();
        assert_eq!(m, "delivery");
        assert_eq!(f["user"], "user002");
        assert_eq!(f["result"], "ok");
        assert_eq!(f["session"], "9f");
    }

    #[test]
    fn sessions_become_intervals_and_open_ones_end_with_their_pod() {
        let start = SystemTime::UNIX_EPOCH;
        let at = |ms| start + Duration::from_millis(ms);
        let line = |pod: &str, ms, text: &str| {
            (
                pod.to_string(),
                LogLine {
                    time: at(ms),
                    text: text.into(),
                },
            )
        };
        let lines = vec![
            line(
                "b-0",
                10,
                r#"{"fields":{"message":"preamble accepted","service":"imap","session":"s1","user":"u"}}"#,
            ),
            line(
                "b-0",
                50,
                r#"{"fields":{"message":"session end","session":"s1","user":"u"}}"#,
            ),
            line(
                "b-1",
                60,
                r#"{"fields":{"message":"preamble accepted","service":"imap","session":"s2","user":"u"}}"#,
            ),
        ];
        let ends = BTreeMap::from([("b-1".to_string(), 90u64)]);
        let (s, _) = served(&lines, start, &ends, 1000);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].from_ms, s[0].to_ms), (10, 50));
        assert_eq!((s[1].from_ms, s[1].to_ms), (60, 90));
    }
}
