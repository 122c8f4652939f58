//! A pod's packet rules as `iptables-restore` input: Service virtual IPs
//! as DNAT with the `statistic` match (kube-proxy's iptables mode: each
//! new connection picks a ready endpoint at random; established ones keep
//! theirs through conntrack), and partitions as DROP to and from the
//! other side. Installed inside the pod's network namespace, so the
//! client's own address is kept (no proxy hop), as on a cluster.

use std::fmt::Write;

use crate::substrate::NetRules;

/// Chain names (in the pod's own namespace, so no per-run suffix).
pub const SVC_CHAIN: &str = "YLAB-SERVICES";
pub const PART_CHAIN: &str = "YLAB-PARTITION";

/// The restore text replacing both chains. With `first`, it also hooks the
/// chains into OUTPUT / INPUT (done once per pod).
pub fn restore_text(rules: &NetRules, first: bool) -> String {
    let mut s = String::new();
    s.push_str("*nat\n");
    let _ = writeln!(s, ":{SVC_CHAIN} - [0:0]");
    if first {
        let _ = writeln!(s, "-A OUTPUT -j {SVC_CHAIN}");
    }
    for r in &rules.services {
        let n = r.endpoints.len();
        if n == 0 {
            // No ready endpoint: refuse at once, as kube-proxy does with a
            // REJECT in the filter table (here: DNAT to nowhere would
            // hang, so the filter part below rejects).
            continue;
        }
        let mut eps = r.endpoints.clone();
        if let Some(o) = rules.round_robin {
            eps.rotate_left(o as usize % n);
        }
        for (i, (ip, port)) in eps.iter().enumerate() {
            let left = n - i;
            let mut line = format!("-A {SVC_CHAIN} -d {}/32 -p tcp --dport {}", r.vip, r.port);
            if left > 1 {
                // The i-th of n rules catches 1/(n-i) of what reaches it
                // (at random, or every (n-i)-th packet that reaches it),
                // so every endpoint gets 1/n. Only a connection's first
                // packet traverses nat; conntrack carries the rest.
                match rules.round_robin {
                    None => {
                        let _ = write!(
                            line,
                            " -m statistic --mode random --probability {:.10}",
                            1.0 / left as f64
                        );
                    }
                    Some(_) => {
                        let _ = write!(line, " -m statistic --mode nth --every {left} --packet 0");
                    }
                }
            }
            let _ = write!(line, " -j DNAT --to-destination {ip}:{port}");
            s.push_str(&line);
            s.push('\n');
        }
    }
    s.push_str("COMMIT\n*filter\n");
    let _ = writeln!(s, ":{PART_CHAIN} - [0:0]");
    if first {
        let _ = writeln!(s, "-A INPUT -j {PART_CHAIN}");
        let _ = writeln!(s, "-A OUTPUT -j {PART_CHAIN}");
    }
    for r in &rules.services {
        if r.endpoints.is_empty() {
            let _ = writeln!(
                s,
                "-A {PART_CHAIN} -d {}/32 -p tcp --dport {} -j REJECT --reject-with tcp-reset",
                r.vip, r.port
            );
        }
    }
    for ip in &rules.blocked {
        // Silence, not a reset: a cut link looks like a hung peer.
        let _ = writeln!(s, "-A {PART_CHAIN} -s {ip}/32 -j DROP");
        let _ = writeln!(s, "-A {PART_CHAIN} -d {ip}/32 -j DROP");
    }
    s.push_str("COMMIT\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::substrate::VipRule;

    #[test]
    fn three_endpoints_get_a_third_each() {
        let rules = NetRules {
            services: vec![VipRule {
                vip: "10.9.255.1".parse().unwrap(),
                port: 9102,
                endpoints: vec![
                    ("10.9.0.2".parse().unwrap(), 9102),
                    ("10.9.0.3".parse().unwrap(), 9102),
                    ("10.9.0.4".parse().unwrap(), 9102),
                ],
            }],
            blocked: vec!["10.9.0.7".parse().unwrap()],
            round_robin: None,
        };
        let t = restore_text(&rules, true);
        assert!(t.contains("--probability 0.3333333333 -j DNAT --to-destination 10.9.0.2:9102"));
        assert!(t.contains("--probability 0.5000000000 -j DNAT --to-destination 10.9.0.3:9102"));
        assert!(t.contains("--dport 9102 -j DNAT --to-destination 10.9.0.4:9102"));
        assert!(t.contains("-A OUTPUT -j YLAB-SERVICES"));
        assert!(t.contains("-A YLAB-PARTITION -d 10.9.0.7/32 -j DROP"));
        let again = restore_text(&rules, false);
        assert!(!again.contains("-A OUTPUT"));
        let rr = NetRules {
            round_robin: Some(1),
            ..rules
        };
        let t = restore_text(&rr, false);
        assert!(
            t.contains("--mode nth --every 3 --packet 0 -j DNAT --to-destination 10.9.0.3:9102"),
            "{t}"
        );
        assert!(
            t.contains("--mode nth --every 2 --packet 0 -j DNAT --to-destination 10.9.0.4:9102")
        );
    }

    #[test]
    fn a_service_without_endpoints_is_refused_not_hung() {
        let rules = NetRules {
            services: vec![VipRule {
                vip: "10.9.255.1".parse().unwrap(),
                port: 24,
                endpoints: vec![],
            }],
            blocked: vec![],
            round_robin: None,
        };
        let t = restore_text(&rules, false);
        assert!(t.contains("--dport 24 -j REJECT"));
        assert!(!t.contains("DNAT"));
    }
}
