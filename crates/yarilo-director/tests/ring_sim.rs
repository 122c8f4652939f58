//! The director ring in the deterministic simulator (`sim/`): scripted
//! scenarios from the ring history of the reference design, and
//! thousands of seeded random runs. Every scenario asserts that the live
//! members reach the same member set and the same user directory within a
//! bound of virtual time (the bounds are part of the behaviour: the
//! simulator's clock is not the machine's). A failure names its seed.
//!
//! `RING_SIM_RUNS` sets the number of random runs (default 2000);
//! `RING_SIM_SEED` replays one seed with a trace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim;

use std::net::IpAddr;

use rand::Rng;
use sim::{Seeds, Sim, Timing, BACKENDS};
use yarilo_config::{AssignmentPolicy, DirectorService};
use yarilo_director::Settings;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn short() -> Timing {
    Timing {
        ping_interval: 2_000,
        ping_timeout: 1_000,
        seed_poll: Some(1_000),
        seed_poll_idle: 2_000,
        anti_entropy: Some(1_000),
        tombstone_ttl: Some(600_000),
        min_members: 3,
    }
}

fn users(sim: &mut Sim, n: usize) {
    for i in 0..n {
        let live = sim.live();
        let pod = live[sim.rng.gen_range(0..live.len())];
        sim.lookup(pod, &format!("user{i}@example.org"));
    }
}

fn start(sim: &mut Sim, n: u8) -> Vec<usize> {
    (1..=n).map(|i| sim.spawn(Sim::addr(i))).collect()
}

#[test]
fn simultaneous_start_of_3_and_7_through_a_load_balanced_seed() {
    for n in [3u8, 7] {
        for seed in 0..20 {
            let timing = Timing {
                min_members: n as usize,
                ..Timing::default()
            };
            let mut sim = Sim::new(seed, timing, Seeds::LoadBalanced);
            start(&mut sim, n);
            sim.run_for(50);
            users(&mut sim, 50);
            let took = sim.converge(30_000).unwrap();
            if seed == 0 {
                println!("{n} directors behind a load balancer agree after {took} ms (virtual)");
            }
            // Each member dials only its right neighbour.
            for p in sim.live() {
                let dialled = sim.node(p).links().iter().filter(|l| l.2).count();
                assert!(dialled <= 1, "seed {seed}: pod{p} dials {dialled} members");
            }
        }
    }
}

#[test]
fn fully_disjoint_subrings_become_one_ring() {
    for seed in 0..20 {
        let mut sim = Sim::new(
            seed,
            Timing {
                min_members: 6,
                ..Timing::default()
            },
            Seeds::Headless,
        );
        let pods = start(&mut sim, 6);
        sim.split(&pods[..3], &pods[3..]);
        sim.run_for(100);
        for p in &pods[..3] {
            sim.lookup(*p, &format!("left{p}"));
        }
        for p in &pods[3..] {
            sim.lookup(*p, &format!("right{p}"));
        }
        sim.run_for(20_000);
        for p in &pods[..3] {
            assert_eq!(sim.node(*p).members().len(), 3, "seed {seed}: left subring");
        }
        for p in &pods[3..] {
            assert_eq!(
                sim.node(*p).members().len(),
                3,
                "seed {seed}: right subring"
            );
        }
        sim.heal();
        let took = sim.converge(20_000).unwrap();
        if seed == 0 {
            println!("two subrings of 3 merge {took} ms after the heal (virtual)");
        }
        for p in &pods {
            assert_eq!(sim.node(*p).members().len(), 6);
        }
    }
}

#[test]
fn a_member_killed_outright_is_gone_within_two_seconds() {
    for seed in 0..30 {
        let mut sim = Sim::new(seed, Timing::default(), Seeds::Headless);
        let pods = start(&mut sim, 5);
        sim.run_for(100);
        users(&mut sim, 100);
        sim.converge(20_000).unwrap();
        let victim = pods[sim.rng.gen_range(0..5)];
        sim.kill(victim);
        let took = sim.converge(2_000).unwrap();
        if seed == 0 {
            println!("kill -9 of one of 5: agreement after {took} ms (virtual, default intervals)");
        }
        // It restarts with a new incarnation and comes back.
        sim.start(victim);
        let took = sim.converge(5_000).unwrap();
        if seed == 0 {
            println!("the killed member restarted: back after {took} ms (virtual)");
        }
    }
}

#[test]
fn a_graceful_leave_is_seen_at_once() {
    for seed in 0..30 {
        let mut sim = Sim::new(seed, Timing::default(), Seeds::Headless);
        let pods = start(&mut sim, 5);
        sim.run_for(100);
        users(&mut sim, 50);
        sim.converge(20_000).unwrap();
        let victim = pods[sim.rng.gen_range(0..5)];
        sim.terminate(victim);
        let took = sim.converge(2_000).unwrap();
        if seed == 0 {
            println!("SIGTERM of one of 5: agreement after {took} ms (virtual)");
        }
        // Nobody declared it dead: it said goodbye.
        for p in sim.live() {
            assert_eq!(sim.node(p).deaths_declared(), 0, "seed {seed}");
        }
    }
}

#[test]
fn a_hung_member_is_evicted_and_comes_back_when_it_resumes() {
    for seed in 0..20 {
        let timing = Timing::default();
        let silence = timing.ping_interval + timing.ping_timeout;
        let mut sim = Sim::new(seed, timing, Seeds::Headless);
        let pods = start(&mut sim, 5);
        sim.run_for(100);
        users(&mut sim, 50);
        sim.converge(20_000).unwrap();
        let victim = pods[sim.rng.gen_range(0..5)];
        sim.hang(victim);
        // Silence, then probes that time out (no RST from a hung process).
        let took = sim.converge(silence + 10_000).unwrap();
        if seed == 0 {
            println!(
                "SIGSTOP of one of 5: evicted after {took} ms (virtual): a seed poll gets no \
                 greeting, the probes time out (silence alone: {silence} ms)"
            );
        }
        assert!(!sim
            .node(pods[(victim + 1) % 5])
            .members()
            .contains(&Sim::addr(victim as u8 + 1)));
        sim.resume(victim);
        let took = sim.converge(10_000).unwrap();
        if seed == 0 {
            println!("SIGCONT: the hung member refuted its tombstone and is back after {took} ms (virtual)");
        }
    }
}

#[test]
fn a_rolling_restart_onto_new_addresses_leaves_no_phantoms() {
    for seed in 0..20 {
        for graceful in [true, false] {
            let mut sim = Sim::new(seed, Timing::default(), Seeds::Headless);
            let mut pods = start(&mut sim, 3);
            sim.run_for(100);
            users(&mut sim, 50);
            sim.converge(20_000).unwrap();
            for (i, pod) in pods.clone().into_iter().enumerate() {
                let old = sim.pods[pod].addr;
                if graceful {
                    sim.terminate(pod);
                } else {
                    sim.kill(pod);
                }
                let pause = sim.rng.gen_range(0..3_000);
                sim.run_for(pause);
                // The respawned pod has a new address; DNS still lists
                // the dead one for a while (a phantom).
                let new = sim.spawn(Sim::addr(20 + i as u8));
                pods[i] = new;
                sim.run_for(30_000);
                sim.dns.retain(|a| *a != old);
                sim.converge(10_000).unwrap();
                for p in sim.live() {
                    assert!(
                        !sim.node(p).members().contains(&old),
                        "seed {seed}: pod{p} still lists {old}"
                    );
                }
            }
            assert_eq!(sim.live().len(), 3);
        }
    }
}

#[test]
fn with_two_members_only_the_lower_dials() {
    for seed in 0..20 {
        let mut sim = Sim::new(
            seed,
            Timing {
                min_members: 2,
                ..Timing::default()
            },
            Seeds::Headless,
        );
        let pods = start(&mut sim, 2);
        sim.run_for(100);
        users(&mut sim, 20);
        sim.converge(20_000).unwrap();
        sim.run_for(5_000);
        let low = sim.node(pods[0]).links();
        let high = sim.node(pods[1]).links();
        assert_eq!(
            low.iter().filter(|l| l.2).count(),
            1,
            "seed {seed}: {low:?}"
        );
        assert_eq!(
            high.iter().filter(|l| l.2).count(),
            0,
            "seed {seed}: {high:?}"
        );
        // The higher one notices the lower one's death through the
        // accepted connection alone.
        sim.kill(pods[0]);
        sim.converge(2_000).unwrap();
        sim.start(pods[0]);
        sim.converge(5_000).unwrap();
        sim.kill(pods[1]);
        sim.converge(2_000).unwrap();
        sim.start(pods[1]);
        sim.converge(5_000).unwrap();
    }
}

#[test]
fn after_a_partition_heals_the_higher_stamp_wins_and_the_loser_kicks() {
    for seed in 0..20 {
        let mut sim = Sim::new(seed, short(), Seeds::Headless);
        let pods = start(&mut sim, 3);
        sim.run_for(100);
        sim.converge(20_000).unwrap();
        let first = sim.lookup(pods[0], "x@example.org").unwrap();
        sim.converge(1_000).unwrap();
        let others: Vec<IpAddr> = BACKENDS
            .iter()
            .map(|b| ip(b))
            .filter(|b| *b != first)
            .collect();
        sim.split(&pods[..1], &pods[1..]);
        // Minority side: x moves to one backend, and a session opens there.
        sim.move_user(pods[0], "x@example.org", others[0]);
        sim.session(pods[0], "s1", "x@example.org", others[0]);
        // Majority side: more work (its Lamport clock runs ahead), then x
        // moves to another backend.
        for i in 0..10 {
            sim.lookup(pods[1], &format!("busy{i}"));
        }
        sim.run_for(1_000);
        sim.move_user(pods[2], "x@example.org", others[1]);
        sim.run_for(15_000);
        assert_eq!(sim.node(pods[0]).members().len(), 1, "seed {seed}: split");
        sim.heal();
        let took = sim.converge(20_000).unwrap();
        if seed == 0 {
            println!("partition healed: one view after {took} ms (virtual)");
        }
        for p in sim.live() {
            assert_eq!(
                sim.pin(p, "x@example.org"),
                Some(others[1]),
                "seed {seed}: pod{p}; first {first}, minority moved to {}",
                others[0]
            );
        }
        assert!(
            sim.kicks(pods[0])
                .contains(&("x@example.org".to_string(), others[0])),
            "seed {seed}: the losing side must kick x on its old backend; kicks {:?}",
            sim.kicks(pods[0])
        );
    }
}

#[test]
fn a_heartbeat_landing_on_one_director_keeps_the_lease_alive_on_all() {
    let mut sim = Sim::new(7, Timing::default(), Seeds::Headless);
    let pods = start(&mut sim, 3);
    sim.run_for(100);
    sim.converge(20_000).unwrap();
    let reg = ip("10.9.1.1");
    let has = |sim: &Sim, p: usize| {
        sim.pods[p]
            .proc
            .as_ref()
            .unwrap()
            .dir
            .backends()
            .by_ip(reg)
            .is_some()
    };
    // Heartbeats every 5 s, always to the first director, for two
    // minutes: four times the default 30 s lease.
    for seq in 1..=24 {
        sim.heartbeat(pods[0], reg, seq);
        sim.run_for(5_000);
        for p in &pods {
            assert!(has(&sim, *p), "pod{p} lost the lease at heartbeat {seq}");
        }
    }
    // They stop: the lease runs out everywhere.
    sim.run_for(40_000);
    for p in &pods {
        assert!(!has(&sim, *p), "pod{p} still holds an expired lease");
    }
}

#[test]
fn sessions_replicate_so_every_director_places_with_the_cluster_view() {
    for seed in 0..10 {
        let mut sim = Sim::new(seed, Timing::default(), Seeds::Headless);
        sim.settings = Settings::from_config(&DirectorService {
            assignment_policy: AssignmentPolicy::LeastSessions,
            ..DirectorService::default()
        })
        .unwrap();
        let pods = start(&mut sim, 3);
        sim.run_for(100);
        sim.converge(20_000).unwrap();
        // Logins report 30 sessions on the first backend, all to pod0.
        let busy = ip(BACKENDS[0]);
        for i in 0..30 {
            sim.session(pods[0], &format!("s{i}"), &format!("u{i}"), busy);
        }
        let took = sim.converge(2_000).unwrap();
        if seed == 0 {
            println!("30 session reports on one director reach the others in {took} ms (virtual)");
        }
        for p in &pods {
            assert_eq!(sim.sessions_on(*p, busy), 30, "seed {seed}: pod{p}");
        }
        // A director that heard none of them places away from the busy
        // backend (least_sessions with the cluster's counts).
        for i in 0..4 {
            let at = sim.lookup(pods[2], &format!("new{i}")).unwrap();
            assert_ne!(
                at, busy,
                "seed {seed}: pod2 placed new{i} on the busy backend"
            );
        }
        // The login reconnects through another director and closes ten.
        for i in 0..10 {
            sim.session_close(pods[1], &format!("s{i}"));
        }
        sim.converge(2_000).unwrap();
        for p in &pods {
            assert_eq!(sim.sessions_on(*p, busy), 20, "seed {seed}: pod{p}");
        }
        // An admin kick through pod2 reaches every director's watchers.
        assert_eq!(sim.admin_kick(pods[2], "u20"), 1);
        sim.run_for(1_000);
        for p in &pods {
            assert!(
                sim.kicks(*p).contains(&("u20".to_string(), busy)),
                "seed {seed}: pod{p} did not kick u20: {:?}",
                sim.kicks(*p)
            );
        }
    }
}

#[test]
fn an_admin_remove_during_a_partition_is_not_undone_by_the_heal() {
    for seed in 0..10 {
        let mut sim = Sim::new(seed, short(), Seeds::Headless);
        let pods = start(&mut sim, 3);
        sim.run_for(100);
        let extra = ip("10.9.2.1");
        sim.admin_backend(pods[1], extra, true);
        sim.converge(20_000).unwrap();
        for p in &pods {
            assert!(
                sim.has_backend(*p, extra),
                "seed {seed}: admin add reached pod{p}"
            );
        }
        sim.split(&pods[..1], &pods[1..]);
        sim.admin_backend(pods[0], extra, false);
        sim.run_for(15_000);
        assert!(
            sim.has_backend(pods[2], extra),
            "the other side still has it"
        );
        sim.heal();
        sim.converge(20_000).unwrap();
        for p in &pods {
            assert!(
                !sim.has_backend(*p, extra),
                "seed {seed}: pod{p} brought it back"
            );
        }
        // A later re-add wins over the tombstone everywhere.
        sim.admin_backend(pods[2], extra, true);
        sim.converge(5_000).unwrap();
        for p in &pods {
            assert!(
                sim.has_backend(*p, extra),
                "seed {seed}: re-add missing at pod{p}"
            );
        }
    }
}

/// One random run: formation, chaos, then everything heals; the live
/// members must agree within a bound.
fn random_run(seed: u64, trace: bool) -> Result<u64, String> {
    let mut sim = Sim::new(seed, short(), Seeds::Headless);
    sim.tracing = trace;
    let n: u8 = sim.rng.gen_range(2..=7);
    if sim.rng.gen_bool(0.3) {
        sim.seeds = Seeds::LoadBalanced;
    }
    sim.timing.min_members = n as usize;
    let pods = start(&mut sim, n);
    sim.run_for(100);
    let traced = |sim: &Sim, e: String| {
        if sim.tracing {
            format!("{e}\n{}", sim.trace.join("\n"))
        } else {
            e
        }
    };
    if let Err(e) = sim.converge(30_000) {
        return Err(traced(&sim, e));
    }
    let mut user = 0;
    let mut sessions = 0;
    for _ in 0..sim.rng.gen_range(3..10) {
        let pod = pods[sim.rng.gen_range(0..pods.len())];
        match sim.rng.gen_range(0..12) {
            11 => {
                let extra = ip(["10.9.2.1", "10.9.2.2"][sim.rng.gen_range(0..2)]);
                let add = sim.rng.gen_bool(0.5);
                if sim.pods[pod].proc.as_ref().is_some_and(|p| !p.hung) {
                    sim.admin_backend(pod, extra, add);
                }
            }
            9 => {
                for _ in 0..5 {
                    sessions += 1;
                    let live = sim.live();
                    if let Some(&p) = live.get(sim.rng.gen_range(0..live.len().max(1))) {
                        let b = ip(BACKENDS[sim.rng.gen_range(0..BACKENDS.len())]);
                        sim.session(p, &format!("s{sessions}"), &format!("u{sessions}"), b);
                    }
                }
            }
            10 => {
                for _ in 0..3 {
                    let live = sim.live();
                    if let Some(&p) = live.get(sim.rng.gen_range(0..live.len().max(1))) {
                        let id = sim.rng.gen_range(0..sessions.max(1) + 1);
                        sim.session_close(p, &format!("s{id}"));
                    }
                }
            }
            0 => sim.kill(pod),
            1 => {
                if sim.pods[pod].proc.is_none() {
                    sim.start(pod)
                }
            }
            2 => sim.hang(pod),
            3 => sim.resume(pod),
            4 => sim.terminate(pod),
            5 => {
                let cut = sim.rng.gen_range(1..pods.len().max(2));
                let (a, b) = pods.split_at(cut.min(pods.len()));
                sim.split(a, b);
            }
            6 => sim.heal(),
            7 => {
                let to = ip(BACKENDS[sim.rng.gen_range(0..BACKENDS.len())]);
                if sim.pods[pod].proc.as_ref().is_some_and(|p| !p.hung) {
                    sim.move_user(pod, &format!("u{}", user / 2), to);
                }
            }
            _ => {
                for _ in 0..10 {
                    user += 1;
                    let live = sim.live();
                    if let Some(&p) = live.get(sim.rng.gen_range(0..live.len().max(1))) {
                        sim.lookup(p, &format!("u{user}"));
                    }
                }
            }
        }
        let gap = sim.rng.gen_range(0..8_000);
        sim.run_for(gap);
    }
    sim.heal();
    for p in 0..sim.pods.len() {
        sim.resume(p);
    }
    if sim.live().is_empty() {
        sim.start(pods[0]);
    }
    let t = &sim.timing;
    let bound = 2 * (t.ping_interval + t.ping_timeout) + 4 * 3_400 + 10 * 1_000 + 20_000;
    match sim.converge(bound) {
        Ok(_) => Ok(sim.now),
        Err(e) => Err(traced(&sim, e)),
    }
}

#[test]
fn thousands_of_seeded_random_runs_converge() {
    if let Some(seed) = std::env::var("RING_SIM_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        match random_run(seed, true) {
            Ok(_) => println!("seed {seed} converged"),
            Err(e) => panic!("{e}"),
        }
        return;
    }
    let runs: u64 = std::env::var("RING_SIM_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    let mut simulated = 0;
    for seed in 0..runs {
        match random_run(seed, false) {
            Ok(ms) => simulated += ms,
            Err(e) => panic!("{e}\nreplay: RING_SIM_SEED={seed} cargo nextest run -p yarilo-director --test ring_sim --no-capture"),
        }
    }
    println!(
        "{runs} seeded random runs converged ({:.1} hours of ring time simulated)",
        simulated as f64 / 3_600_000.0
    );
}
