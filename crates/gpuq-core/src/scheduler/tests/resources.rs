//! Cores and memory as resources: placement, the reservation's rule for
//! CPU-only jobs, preemption, failures and `explain`'s reasons.

use super::super::*;
use super::{reasons, start, started, Scenario};
use crate::JobResources;

const GIB: u64 = 1024;

fn res(cpus: u32, memory_gib: u64) -> JobResources {
    JobResources {
        cpus,
        memory_mib: memory_gib * GIB,
    }
}

impl Scenario {
    /// A node of `gpus` GPUs, `cpus` cores and `memory_gib` of memory for jobs.
    fn host(mut self, gpus: u32, cpus: u32, memory_gib: u64) -> Self {
        self = self.node(gpus);
        let n = self.nodes.last_mut().unwrap();
        n.cpus = cpus;
        n.memory_mib = memory_gib * GIB;
        self
    }
    fn holding(self, r: JobResources) -> Self {
        self.with_last_running(|j| j.resources = r)
    }
    fn queued_res(self, id: JobId, gpus: u32, r: JobResources) -> Self {
        self.queued_with(id, gpus, |j| j.resources = r)
    }
}

#[test]
fn a_job_starts_only_where_its_cores_and_memory_are_free() {
    // 8 GPUs, 16 cores: two jobs of 2 GPUs and 8 cores fill the cores; the
    // third waits although 4 GPUs are free.
    let d = Scenario::default()
        .host(8, 16, 256)
        .queued_res(1, 2, res(8, 32))
        .queued_res(2, 2, res(8, 32))
        .queued_res(3, 2, res(8, 32))
        .run();
    assert_eq!(started(&d), vec![1, 2]);
    // Memory alike.
    let d = Scenario::default()
        .host(8, 64, 100)
        .queued_res(1, 1, res(1, 60))
        .queued_res(2, 1, res(1, 60))
        .queued_res(3, 1, res(1, 40))
        .run();
    assert_eq!(started(&d), vec![1, 3]);
}

#[test]
fn running_jobs_hold_their_cores_and_memory() {
    let s = Scenario::default()
        .host(4, 8, 64)
        .running(1, 0, &[0], None)
        .holding(res(6, 16));
    let d = s.clone_scenario().queued_res(2, 1, res(4, 8)).run();
    assert!(d.is_empty(), "{d:?}");
    let d = s.clone_scenario().queued_res(2, 1, res(2, 48)).run();
    assert_eq!(d, vec![start(2, 0, vec![1])]);
    let d = s.queued_res(2, 1, res(2, 49)).run();
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn a_node_that_counts_nothing_places_by_gpus_alone() {
    // The simulator's traces and Slurm's nodes: capacity 0.
    let d = Scenario::default()
        .node(4)
        .queued_res(1, 2, res(64, 1000))
        .queued_res(2, 2, res(64, 1000))
        .run();
    assert_eq!(started(&d), vec![1, 2]);
}

#[test]
fn a_cpu_only_job_never_waits_behind_a_gpu_jobs_reservation_unless_it_takes_what_is_reserved() {
    // Job 1 holds 3 of 4 GPUs until t=100; job 2 (3 GPUs, 8 cores) is the
    // head and has the node reserved from t=100, with 8 of 16 cores.
    let base = || {
        Scenario::default()
            .host(4, 16, 64)
            .running(1, 0, &[0, 1, 2], Some(100))
            .holding(res(4, 8))
            .queued_res(2, 3, res(8, 16))
    };
    // A CPU-only job that reserves nothing starts at once.
    let d = base().queued_res(3, 0, JobResources::default()).run();
    assert_eq!(d, vec![start(3, 0, vec![])]);
    // One that takes cores the reservation leaves spare starts too: at t=100
    // all 16 cores are free, the head needs 8.
    let d = base().queued_res(3, 0, res(8, 0)).run();
    assert_eq!(d, vec![start(3, 0, vec![])]);
    // One that would take cores the head needs waits for it.
    let d = base().queued_res(3, 0, res(9, 0)).run();
    assert!(d.is_empty(), "{d:?}");
    let why = reasons(base().queued_res(3, 0, res(9, 0)));
    assert_eq!(
        why[&3],
        WaitReason::Reservation {
            for_job: 2,
            start: Some(100)
        }
    );
    // Memory alike: 64 GiB at t=100, the head needs 16.
    let d = base().queued_res(3, 0, res(0, 49)).run();
    assert!(d.is_empty(), "{d:?}");
    // Unless it ends before the reserved start.
    let d = base()
        .queued_with(3, 0, |j| {
            j.resources = res(9, 0);
            j.time_limit_ms = Some(50);
        })
        .run();
    assert_eq!(d, vec![start(3, 0, vec![])]);
}

#[test]
fn the_head_short_of_cores_gets_a_reservation_that_later_jobs_respect() {
    // 2 of 4 GPUs free but only 2 of 8 cores; the head needs 4 cores. Job 1
    // frees its 6 cores at t=100: the head is promised t=100, and a later
    // 1-GPU job taking 4 cores without a time limit would delay it.
    let s = Scenario::default()
        .host(4, 8, 64)
        .running(1, 0, &[0, 1], Some(100))
        .holding(res(6, 8))
        .queued_res(2, 1, res(4, 8))
        .queued_res(3, 1, res(2, 8));
    let d = s.clone_scenario().run();
    // Job 3 takes the 2 free cores: at t=100 8 are free, the head needs 4.
    assert_eq!(started(&d), vec![3]);
    let why = reasons(s);
    assert_eq!(
        why[&2],
        WaitReason::Cores {
            cpus: 4,
            most_free: 2,
            reserved: Some(Some(100))
        }
    );
}

#[test]
fn explain_names_the_resource_that_holds_a_job_back() {
    let s = Scenario::default()
        .host(4, 8, 32)
        .running(1, 0, &[0], None)
        .holding(res(6, 24));
    let why = reasons(s.clone_scenario().queued_res(2, 1, res(4, 1)));
    assert_eq!(
        why[&2],
        WaitReason::Cores {
            cpus: 4,
            most_free: 2,
            reserved: Some(None)
        }
    );
    let why = reasons(s.clone_scenario().queued_res(2, 1, res(1, 16)));
    assert_eq!(
        why[&2],
        WaitReason::Memory {
            mib: 16 * GIB,
            most_free_mib: 8 * GIB,
            reserved: Some(None)
        }
    );
    // GPUs short: the GPU reason, as before.
    let why = reasons(s.queued_res(2, 4, res(1, 1)));
    assert!(
        matches!(why[&2], WaitReason::Resources { gpus: 4, .. }),
        "{why:?}"
    );
}

#[test]
fn more_cores_or_memory_than_any_node_has_fails_with_the_largest() {
    let d = Scenario::default()
        .host(4, 8, 32)
        .queued_res(1, 1, res(16, 1))
        .queued_res(2, 1, res(1, 64))
        .run();
    let fails: Vec<(JobId, String)> = d
        .into_iter()
        .filter_map(|d| match d {
            Decision::Fail { job, reason } => Some((job, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        fails,
        vec![
            (
                1,
                "job asks for 16 cores; the largest node has 8 for jobs".to_string()
            ),
            (
                2,
                "job asks for 64 GiB of memory; the largest node has 32 GiB for jobs".to_string()
            ),
        ]
    );
    let nodes = Scenario::default().host(4, 8, 32).nodes;
    let probe = |r| PendingJob {
        resources: r,
        ..Scenario::default().queued(1, 1).pending.remove(0)
    };
    assert!(can_ever_place(&probe(res(8, 32)), &nodes));
    assert!(!can_ever_place(&probe(res(9, 32)), &nodes));
}

#[test]
fn preemption_frees_the_cores_the_head_needs() {
    // The head (high) needs 1 GPU and 6 cores; GPUs are free, cores are held
    // by two preemptible low jobs (CPU-only, 4 cores each) and one that is
    // not preemptible (0 cores).
    let d = Scenario::default()
        .host(4, 8, 64)
        .running(1, 0, &[], None)
        .holding(res(4, 0))
        .with_last_running(|r| {
            r.preemptible = true;
            r.priority = Priority::Low;
        })
        .running(2, 0, &[], None)
        .holding(res(4, 0))
        .with_last_running(|r| {
            r.preemptible = true;
            r.priority = Priority::Low;
        })
        .running(3, 0, &[0], None)
        .queued_with(4, 1, |j| {
            j.priority = Priority::High;
            j.resources = res(6, 1);
        })
        .run();
    let mut victims: Vec<JobId> = d
        .iter()
        .filter_map(|d| match d {
            Decision::Preempt { job, for_job: 4 } => Some(*job),
            _ => None,
        })
        .collect();
    victims.sort_unstable();
    assert_eq!(victims, vec![1, 2]);
    // Needing 4 cores: one victim is enough (the newest of the two).
    let d = Scenario::default()
        .host(4, 8, 64)
        .running(1, 0, &[], None)
        .holding(res(4, 0))
        .with_last_running(|r| {
            r.preemptible = true;
            r.priority = Priority::Low;
        })
        .running(2, 0, &[], None)
        .holding(res(4, 0))
        .with_last_running(|r| {
            r.preemptible = true;
            r.priority = Priority::Low;
        })
        .queued_with(4, 1, |j| {
            j.priority = Priority::High;
            j.resources = res(4, 1);
        })
        .run();
    assert_eq!(d, vec![Decision::Preempt { job: 2, for_job: 4 }]);
}

#[test]
fn a_multi_node_job_takes_nodes_with_its_cores_free_on_each() {
    // Two 4-GPU nodes of 8 cores; node 0 has 6 cores held. A job of 2 GPUs on
    // each of 2 nodes, 4 cores per node, waits; with 2 cores per node it starts.
    let s = Scenario::default()
        .host(4, 8, 64)
        .host(4, 8, 64)
        .running(1, 0, &[0], None)
        .holding(res(6, 0));
    let d = s
        .clone_scenario()
        .queued_with(2, 2, |j| {
            j.nodes = Some(2);
            j.resources = res(4, 1);
        })
        .run();
    assert!(d.is_empty(), "{d:?}");
    let d = s
        .queued_with(2, 2, |j| {
            j.nodes = Some(2);
            j.resources = res(2, 1);
        })
        .run();
    assert_eq!(started(&d), vec![2]);
}
