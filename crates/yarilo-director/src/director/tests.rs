use std::collections::HashMap;
use std::net::IpAddr;

use proptest::prelude::*;

use super::*;

const ME: DirectorId = DirectorId(1);
const SEC: Tick = 1000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn settings() -> Settings {
    Settings::defaults()
}

fn director_with(settings: Settings, backends: &[(&str, &str, u32)]) -> Director {
    let mut d = Director::new(settings, ME);
    for (addr, tag, vhosts) in backends {
        assert!(d.add_static(0, ip(addr), 993, tag, *vhosts));
    }
    d
}

fn user(i: usize) -> String {
    format!("user{i}@example{}.test", i % 13)
}

/// Where each of `n` users hashes (no pinning).
fn placement(d: &mut Director, n: usize, tag: &str) -> Vec<IpAddr> {
    (0..n)
        .map(|i| {
            let id = d.hashed_backend(&user(i), tag).unwrap();
            d.backends().get(id).unwrap().ip
        })
        .collect()
}

fn shares(p: &[IpAddr]) -> HashMap<IpAddr, f64> {
    let mut m = HashMap::new();
    for ip in p {
        *m.entry(*ip).or_insert(0.0) += 1.0 / p.len() as f64;
    }
    m
}

#[test]
fn distribution_is_proportional_to_vhosts_within_a_few_percent() {
    let weights = [
        ("10.0.0.1", 100),
        ("10.0.0.2", 100),
        ("10.0.0.3", 50),
        ("10.0.0.4", 25),
        ("10.0.0.5", 75),
    ];
    let total: u32 = weights.iter().map(|w| w.1).sum();
    let backends: Vec<_> = weights.iter().map(|(a, w)| (*a, "", *w)).collect();
    let mut d = director_with(settings(), &backends);
    let s = shares(&placement(&mut d, 100_000, ""));
    for (addr, w) in weights {
        let want = f64::from(w) / f64::from(total);
        let got = s[&ip(addr)];
        let rel = (got - want).abs() / want;
        eprintln!("{addr}: share {got:.4} want {want:.4}");
        assert!(
            rel < 0.05,
            "{addr}: share {got:.4}, want {want:.4} (off by {:.1}%)",
            rel * 100.0
        );
    }
}

#[test]
fn a_joining_backend_takes_only_its_share_and_only_for_itself() {
    let mut d = director_with(
        settings(),
        &[
            ("10.0.0.1", "", 100),
            ("10.0.0.2", "", 100),
            ("10.0.0.3", "", 100),
        ],
    );
    let before = placement(&mut d, 100_000, "");
    assert!(d.add_admin(0, ip("10.0.0.4"), 993, "", 100));
    let after = placement(&mut d, 100_000, "");
    let moved: Vec<_> = before.iter().zip(&after).filter(|(a, b)| a != b).collect();
    assert!(moved.iter().all(|(_, to)| **to == ip("10.0.0.4")));
    let frac = moved.len() as f64 / 100_000.0;
    assert!((frac - 0.25).abs() < 0.02, "moved {frac}");
}

#[test]
fn a_leaving_backend_moves_only_its_own_users() {
    let mut d = director_with(
        settings(),
        &[
            ("10.0.0.1", "", 100),
            ("10.0.0.2", "", 100),
            ("10.0.0.3", "", 100),
            ("10.0.0.4", "", 100),
        ],
    );
    let before = placement(&mut d, 50_000, "");
    d.remove_admin(ip("10.0.0.2")).unwrap();
    let after = placement(&mut d, 50_000, "");
    for (a, b) in before.iter().zip(&after) {
        if *a != ip("10.0.0.2") {
            assert_eq!(a, b);
        } else {
            assert_ne!(b, &ip("10.0.0.2"));
        }
    }
}

#[test]
fn tags_are_isolated() {
    let mut d = director_with(
        settings(),
        &[
            ("10.0.0.1", "", 100),
            ("10.0.0.2", "", 100),
            ("10.1.0.1", "blue", 100),
            ("10.1.0.2", "blue", 100),
        ],
    );
    let blue = placement(&mut d, 5_000, "blue");
    assert!(blue.iter().all(|i| i.to_string().starts_with("10.1.")));
    let plain = placement(&mut d, 5_000, "");
    assert!(plain.iter().all(|i| i.to_string().starts_with("10.0.")));
    // Changing one tag never moves users of another.
    d.add_admin(0, ip("10.0.0.3"), 993, "", 100);
    d.remove_admin(ip("10.1.0.1"));
    let plain_blue_after: Vec<_> = placement(&mut d, 5_000, "blue");
    assert!(plain_blue_after.iter().all(|i| *i == ip("10.1.0.2")));
    d.add_admin(0, ip("10.1.0.1"), 993, "blue", 100);
    assert_eq!(placement(&mut d, 5_000, "blue"), blue);
    // An unknown tag is not the untagged pool.
    assert_eq!(
        d.lookup(0, "u", "green", None),
        Err(LookupError::NoBackend {
            tag: "green".into()
        })
    );
}

#[test]
fn pins_are_sticky_until_they_expire_and_sessions_keep_them() {
    let mut s = settings();
    s.user_expire_secs = 100;
    let mut d = director_with(s, &[("10.0.0.1", "", 100)]);
    let first = d.lookup(0, "alice@d.test", "", None).unwrap();
    assert!(first.fresh);
    assert_eq!(first.stamp.seq, 1);
    // A new backend would take part of the ring, but the pin holds.
    for i in 2..=20 {
        d.add_admin(0, ip(&format!("10.0.0.{i}")), 993, "", 100);
    }
    let again = d.lookup(10 * SEC, "ALICE@d.test", "", None).unwrap();
    assert_eq!(again.ip, first.ip);
    assert!(!again.fresh, "%Lu: case variants share the pin");
    // A session keeps it past user_expire.
    assert!(d.session_open(20 * SEC, "s1", "alice@d.test", "", first.ip, Proto::Imap));
    for t in (30..400).step_by(10) {
        d.tick(t * SEC);
    }
    let held = d.lookup(400 * SEC, "alice@d.test", "", None).unwrap();
    assert_eq!(held.ip, first.ip);
    assert!(!held.fresh);
    // Session gone: the pin lapses after user_expire and the user
    // returns to the hash.
    assert!(d.session_close("s1").0);
    d.tick(501 * SEC);
    let back = d.lookup(502 * SEC, "alice@d.test", "", None).unwrap();
    assert!(back.fresh);
    assert_eq!(Some(back.backend), d.hashed_backend("alice@d.test", ""));
}

#[test]
fn flush_drains_without_moving_anyone() {
    let mut d = director_with(settings(), &[("10.0.0.1", "", 100), ("10.0.0.2", "", 100)]);
    // Pin some users on each.
    let pinned: Vec<Route> = (0..200)
        .map(|i| d.lookup(0, &user(i), "", None).unwrap())
        .collect();
    let hashed_before = placement(&mut d, 2_000, "");
    assert_eq!(
        d.backend_flush(SEC, ip("10.0.0.1"), None),
        BackendOutcome::Draining
    );
    // Pinned users keep their backend.
    for (i, r) in pinned.iter().enumerate() {
        assert_eq!(d.lookup(2 * SEC, &user(i), "", None).unwrap().ip, r.ip);
    }
    // New users avoid the draining backend.
    for i in 1000..1500 {
        assert_eq!(
            d.lookup(2 * SEC, &user(i), "", None).unwrap().ip,
            ip("10.0.0.2")
        );
    }
    // The slice did not move: once back up, the hash is what it was.
    d.backend_up(
        3 * SEC,
        &BackendUp {
            ip: ip("10.0.0.1"),
            port: 993,
            tag: String::new(),
            vhosts: 100,
            seq: 1,
        },
    );
    assert_eq!(placement(&mut d, 2_000, ""), hashed_before);
}

fn up(addr: &str, tag: &str, seq: u64) -> BackendUp {
    BackendUp {
        ip: ip(addr),
        port: 143,
        tag: tag.into(),
        vhosts: 100,
        seq,
    }
}

#[test]
fn registration_lease_expires_and_the_last_of_a_tag_is_kept() {
    let mut s = settings();
    s.backend_expire_ms = 30 * SEC;
    let mut d = Director::new(s, ME);
    assert_eq!(d.backend_up(0, &up("10.0.0.1", "", 100)), UpOutcome::Added);
    assert_eq!(d.backend_up(0, &up("10.0.0.2", "", 100)), UpOutcome::Added);
    let r = d.lookup(SEC, "bob", "", None).unwrap();
    // Only 10.0.0.1 keeps heartbeating.
    for t in 1..=40 {
        assert_eq!(
            d.backend_up(t * SEC, &up("10.0.0.1", "", 100 + t)),
            UpOutcome::Refreshed
        );
        d.tick(t * SEC);
    }
    assert!(d.backends().by_ip(ip("10.0.0.2")).is_none());
    assert_eq!(
        d.lookup(41 * SEC, "bob", "", None).unwrap().ip,
        ip("10.0.0.1")
    );
    if r.ip == ip("10.0.0.2") {
        assert!(d.lookup(41 * SEC, "bob", "", None).is_ok());
    }
    // Now the survivor goes silent: it is the last of its tag, so it stays.
    let report = d.tick(200 * SEC);
    assert_eq!(report.kept_last, vec![ip("10.0.0.1")]);
    assert!(d.tick(201 * SEC).kept_last.is_empty(), "reported once");
    assert!(d.backends().by_ip(ip("10.0.0.1")).is_some());
}

#[test]
fn stale_heartbeats_never_resurrect_a_backend() {
    let mut d = Director::new(settings(), ME);
    d.add_static(0, ip("10.0.0.9"), 1, "", 100);
    assert_eq!(d.backend_up(0, &up("10.0.0.1", "", 10)), UpOutcome::Added);
    assert_eq!(d.backend_up(0, &up("10.0.0.1", "", 10)), UpOutcome::Stale);
    assert!(matches!(
        d.backend_down(SEC, ip("10.0.0.1"), Some(11)),
        BackendOutcome::Removed(_)
    ));
    // A heartbeat sent before the DOWN arrives late.
    assert_eq!(
        d.backend_up(2 * SEC, &up("10.0.0.1", "", 9)),
        UpOutcome::Stale
    );
    assert!(d.backends().by_ip(ip("10.0.0.1")).is_none());
    // A restart resumes above (seq seeded from start time).
    assert_eq!(
        d.backend_up(3 * SEC, &up("10.0.0.1", "", 5000)),
        UpOutcome::Added
    );
}

#[test]
fn backend_down_removes_and_rehashes_its_users() {
    let mut d = Director::new(settings(), ME);
    d.backend_up(0, &up("10.0.0.1", "", 1));
    d.backend_up(0, &up("10.0.0.2", "", 1));
    let routes: Vec<Route> = (0..100)
        .map(|i| d.lookup(0, &user(i), "", None).unwrap())
        .collect();
    let on_1 = routes.iter().filter(|r| r.ip == ip("10.0.0.1")).count();
    assert!(on_1 > 0);
    d.session_open(0, "s", &user(0), "", routes[0].ip, Proto::Imap);
    let BackendOutcome::Removed(removal) = d.backend_down(SEC, ip("10.0.0.1"), None) else {
        panic!("not removed");
    };
    assert_eq!(removal.users_unpinned, on_1);
    assert_eq!(removal.reason, RemovalReason::Down);
    for i in 0..100 {
        assert_eq!(
            d.lookup(2 * SEC, &user(i), "", None).unwrap().ip,
            ip("10.0.0.2")
        );
    }
}

#[test]
fn static_and_admin_backends_ignore_lease_and_down() {
    let mut s = settings();
    s.backend_expire_ms = SEC;
    let mut d = Director::new(s, ME);
    d.add_static(0, ip("10.0.0.1"), 1, "", 100);
    d.add_admin(0, ip("10.0.0.2"), 1, "", 100);
    d.tick(1000 * SEC);
    assert_eq!(d.backends().len(), 2);
    assert_eq!(
        d.backend_down(SEC, ip("10.0.0.1"), None),
        BackendOutcome::NotRegistered
    );
    assert_eq!(
        d.backend_up(SEC, &up("10.0.0.1", "", 1)),
        UpOutcome::Permanent
    );
}

#[test]
fn unreachable_reports_from_distinct_reporters_evict_early() {
    let mut s = settings();
    s.unreachable_reporters = 2;
    s.unreachable_window_ms = 5 * SEC;
    let mut d = Director::new(s, ME);
    d.backend_up(0, &up("10.0.0.1", "", 1));
    d.backend_up(0, &up("10.0.0.2", "", 1));
    let bad = ip("10.0.0.1");
    assert_eq!(
        d.backend_unreachable(0, bad, "login-a"),
        BackendOutcome::Reported(1)
    );
    // The same reporter twice is one reporter.
    assert_eq!(
        d.backend_unreachable(SEC, bad, "login-a"),
        BackendOutcome::Reported(1)
    );
    // Outside the window the old report no longer counts.
    assert_eq!(
        d.backend_unreachable(10 * SEC, bad, "login-b"),
        BackendOutcome::Reported(1)
    );
    assert!(matches!(
        d.backend_unreachable(11 * SEC, bad, "login-c"),
        BackendOutcome::Removed(Removal {
            reason: RemovalReason::Unreachable,
            ..
        })
    ));
    // The survivor is the last of its tag: never evicted by reports.
    let last = ip("10.0.0.2");
    d.backend_unreachable(12 * SEC, last, "login-a");
    assert_eq!(
        d.backend_unreachable(12 * SEC, last, "login-b"),
        BackendOutcome::KeptLast
    );
}

#[test]
fn retagging_moves_a_backend_between_pools() {
    let mut d = Director::new(settings(), ME);
    d.backend_up(0, &up("10.0.0.1", "a", 1));
    d.backend_up(0, &up("10.0.0.2", "a", 1));
    assert!(matches!(
        d.backend_up(SEC, &up("10.0.0.1", "b", 2)),
        UpOutcome::Retagged(_)
    ));
    assert_eq!(d.lookup(SEC, "x", "b", None).unwrap().ip, ip("10.0.0.1"));
    for i in 0..50 {
        assert_eq!(
            d.lookup(SEC, &user(i), "a", None).unwrap().ip,
            ip("10.0.0.2")
        );
    }
}

#[test]
fn least_sessions_picks_by_protocol_then_total_per_vhost() {
    let mut s = settings();
    s.policy = AssignmentPolicy::LeastSessions;
    let mut d = director_with(
        s,
        &[
            ("10.0.0.1", "", 100),
            ("10.0.0.2", "", 50),
            ("10.0.0.3", "", 0),
        ],
    );
    // Empty: tie → lower IP; vhosts 0 never takes users.
    assert_eq!(
        d.lookup(0, "u0", "", Some(Proto::Imap)).unwrap().ip,
        ip("10.0.0.1")
    );
    // 2 IMAP sessions on .1 (load 2), 1 POP3 on .2 (load 1*100/50 = 2).
    d.session_open(0, "a", "x1", "", ip("10.0.0.1"), Proto::Imap);
    d.session_open(0, "b", "x2", "", ip("10.0.0.1"), Proto::Imap);
    d.session_open(0, "c", "x3", "", ip("10.0.0.2"), Proto::Pop3);
    // IMAP level: .1 has 2 imap → 2, .2 has 0 → goes to .2.
    assert_eq!(
        d.lookup(0, "u1", "", Some(Proto::Imap)).unwrap().ip,
        ip("10.0.0.2")
    );
    // POP3 level: .1 has 0 pop3 → .1.
    assert_eq!(
        d.lookup(0, "u2", "", Some(Proto::Pop3)).unwrap().ip,
        ip("10.0.0.1")
    );
    // No protocol (admin resolve): totals 200 vs 200 → tie → lower IP.
    assert_eq!(d.lookup(0, "u3", "", None).unwrap().ip, ip("10.0.0.1"));
    d.session_close("a");
    d.session_close("b");
    assert_eq!(d.lookup(0, "u4", "", None).unwrap().ip, ip("10.0.0.1"));
}

#[test]
fn domain_policy_keeps_a_domain_together_and_users_follow_moves() {
    let mut s = settings();
    s.policy = AssignmentPolicy::Domain;
    s.domain_rebalance_interval_ms = 10 * SEC;
    s.domain_rebalance_threshold = 50;
    let mut d = director_with(s, &[("10.0.0.1", "", 100), ("10.0.0.2", "", 100)]);
    let (x, y) = (ip("10.0.0.1"), ip("10.0.0.2"));
    let open = |d: &mut Director, id: &str, user: &str, at: IpAddr| {
        assert!(d.session_open(0, id, user, "", at, Proto::Imap));
    };
    // Empty: tie → lower IP. Every user of the domain follows, any case.
    assert_eq!(d.lookup(0, "a@big.test", "", None).unwrap().ip, x);
    for i in 0..50 {
        let r = d.lookup(0, &format!("u{i}@Big.Test"), "", None).unwrap();
        assert_eq!(r.ip, x, "every user of a domain lands together");
    }
    for i in 0..10 {
        open(&mut d, &format!("b{i}"), &format!("u{i}@big.test"), x);
    }
    // The next domain goes to the least-loaded backend.
    assert_eq!(d.lookup(0, "z@small.test", "", None).unwrap().ip, y);
    for i in 0..20 {
        open(&mut d, &format!("s{i}"), "z@small.test", y);
    }
    assert_eq!(d.lookup(0, "m0@mid.test", "", None).unwrap().ip, x);
    for i in 0..4 {
        open(&mut d, &format!("m{i}"), "m0@mid.test", x);
    }
    for i in 0..20 {
        d.session_close(&format!("s{i}"));
    }
    // x: 14 sessions, y: 0. big (10) would overshoot the gap; mid (4) moves.
    let report = d.tick(10 * SEC);
    assert_eq!(report.domains_moved, 1);
    // mid's pinned user follows at its next LOOKUP; big's stays.
    let m = d.lookup(11 * SEC, "m0@mid.test", "", None).unwrap();
    assert!(m.fresh);
    assert_eq!(m.ip, y);
    let b = d.lookup(11 * SEC, "u0@big.test", "", None).unwrap();
    assert!(!b.fresh);
    assert_eq!(b.ip, x);
    // Balanced enough now: nothing moves.
    assert_eq!(d.tick(20 * SEC).domains_moved, 0);
}

#[test]
fn merge_assignment_follows_lamport_order_and_advances_the_clock() {
    let mut d = director_with(settings(), &[("10.0.0.1", "", 100), ("10.0.0.2", "", 100)]);
    let key = d.user_key("carol", "").unwrap();
    let local = d.lookup(0, "carol", "", None).unwrap();
    let other = if local.ip == ip("10.0.0.1") {
        "10.0.0.2"
    } else {
        "10.0.0.1"
    };
    // A remote pin with a higher seq wins and reports the move.
    let remote = Stamp {
        seq: 50,
        by: DirectorId(9),
    };
    assert_eq!(
        d.merge_assignment(SEC, key, ip(other), remote),
        Some(MergeOutcome::Replaced {
            moved_from: Some(local.backend)
        })
    );
    assert_eq!(d.lookup(SEC, "carol", "", None).unwrap().ip, ip(other));
    // Our next stamp is above what we saw.
    let fresh = d.lookup(SEC, "dave", "", None).unwrap();
    assert_eq!(fresh.stamp.seq, 51);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Adding a backend to any set moves users only onto it, about its
    /// share of the weight.
    #[test]
    fn join_moves_only_onto_the_new_backend(
        weights in proptest::collection::vec(1u32..=100, 1..6),
        new_weight in 1u32..=100,
    ) {
        let backends: Vec<(String, u32)> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| (format!("10.2.{}.{}", i / 200, i % 200 + 1), *w))
            .collect();
        let mut d = Director::new(settings(), ME);
        for (a, w) in &backends {
            d.add_static(0, ip(a), 1, "", *w);
        }
        let n = 10_000;
        let before = placement(&mut d, n, "");
        d.add_admin(0, ip("10.3.0.1"), 1, "", new_weight);
        let after = placement(&mut d, n, "");
        let mut moved = 0usize;
        for (a, b) in before.iter().zip(&after) {
            if a != b {
                prop_assert_eq!(*b, ip("10.3.0.1"));
                moved += 1;
            }
        }
        let total: u32 = weights.iter().sum::<u32>() + new_weight;
        let want = f64::from(new_weight) / f64::from(total);
        let got = moved as f64 / n as f64;
        prop_assert!((got - want).abs() < 0.04 + want * 0.1, "moved {} want {}", got, want);
    }
}

#[test]
fn moves_hold_lookups_until_old_sessions_are_confirmed_gone() {
    let mut d = director_with(settings(), &[("10.0.0.1", "", 100), ("10.0.0.2", "", 100)]);
    let a = d.lookup(0, "hank", "", None).unwrap().ip;
    let b = if a == ip("10.0.0.1") {
        ip("10.0.0.2")
    } else {
        ip("10.0.0.1")
    };
    // Offline user: confirmed after the grace, hook requested.
    let moved = d.move_user(0, "hank", "", b).unwrap();
    assert_eq!(moved.from, Some(a));
    assert!(matches!(
        d.lookup(10, "hank", "", None),
        Err(LookupError::Held { .. })
    ));
    let report = d.tick(USER_KILL_CONFIRM_GRACE);
    assert_eq!(report.released.len(), 1);
    assert!(report.released[0].confirmed && report.released[0].run_hook);
    assert_eq!(
        d.lookup(USER_KILL_CONFIRM_GRACE, "hank", "", None)
            .unwrap()
            .ip,
        b
    );

    // Live session that never closes: released at the timeout, unconfirmed.
    let t0 = 10 * SEC;
    d.session_open(t0, "h1", "hank", "", b, Proto::Imap);
    d.move_user(t0, "hank", "", a).unwrap();
    assert!(d.tick(t0 + USER_KILL_TIMEOUT - 1).released.is_empty());
    let report = d.tick(t0 + USER_KILL_TIMEOUT);
    assert!(!report.released[0].confirmed && !report.released[0].run_hook);

    // Live session that closes: released by SESSION-CLOSE.
    let t1 = 100 * SEC;
    d.session_close("h1");
    d.session_open(t1, "h2", "hank", "", a, Proto::Imap);
    d.move_user(t1, "hank", "", b).unwrap();
    assert!(d.lookup(t1, "hank", "", None).is_err());
    let (known, released) = d.session_close("h2");
    assert!(known);
    assert!(released.unwrap().confirmed);
    assert_eq!(d.lookup(t1, "hank", "", None).unwrap().ip, b);
}
