//! Scenario tests: a builder sets up nodes, running jobs and a queue, then
//! asserts on the decisions of one scheduling pass.

use super::*;
use std::collections::HashMap;

mod multinode;
mod properties;
mod resources;

#[derive(Default)]
struct Scenario {
    now: Millis,
    nodes: Vec<Node>,
    running: Vec<RunningJob>,
    pending: Vec<PendingJob>,
    states: HashMap<JobId, DependencyState>,
    drained: bool,
    policy: Policy,
}

impl Scenario {
    fn node(mut self, gpus: u32) -> Self {
        let name = format!("n{}", self.nodes.len());
        self.nodes.push(Node {
            name,
            gpus: (0..gpus).collect(),
            slots: 64,
            ..Default::default()
        });
        self
    }
    fn slots(mut self, node: usize, slots: u32) -> Self {
        self.nodes[node].slots = slots;
        self
    }
    fn running(mut self, id: JobId, node: usize, gpus: &[u32], ends_by: Option<Millis>) -> Self {
        self.running.push(RunningJob {
            id,
            user: "u".into(),
            project: None,
            placement: Placement::single(node, gpus.to_vec()),
            ends_by,
            priority: Priority::Normal,
            preemptible: false,
            stopping: false,
            group: None,
            resources: JobResources::default(),
        });
        self
    }
    /// Changes the last running job.
    fn with_last_running(mut self, f: impl FnOnce(&mut RunningJob)) -> Self {
        f(self.running.last_mut().unwrap());
        self
    }
    fn queued(self, id: JobId, gpus: u32) -> Self {
        self.queued_with(id, gpus, |_| {})
    }
    fn queued_with(mut self, id: JobId, gpus: u32, f: impl FnOnce(&mut PendingJob)) -> Self {
        let mut job = PendingJob {
            id,
            user: "u".into(),
            project: None,
            priority: Priority::Normal,
            submitted_at: id as Millis,
            gpus,
            nodes: None,
            time_limit_ms: None,
            after: vec![],
            held: false,
            eligible_at: None,
            gpu_type: None,
            gpu_mem_mib: None,
            group: None,
            waits_on: None,
            resources: JobResources::default(),
        };
        f(&mut job);
        self.pending.push(job);
        self
    }
    fn dep(mut self, id: JobId, state: DependencyState) -> Self {
        self.states.insert(id, state);
        self
    }
    fn run(mut self) -> Vec<Decision> {
        self.pending.sort_by_key(PendingJob::queue_key);
        let states = self.states;
        let lookup = move |id: JobId| states.get(&id).cloned().unwrap_or(DependencyState::Missing);
        let input = ScheduleInput {
            now: self.now,
            nodes: &self.nodes,
            running: &self.running,
            dependency: &lookup,
            drained: self.drained,
            policy: &self.policy,
        };
        schedule(&input, &self.pending)
    }
}

/// A start on one node.
fn start(job: JobId, node: usize, gpus: Vec<u32>) -> Decision {
    Decision::Start {
        job,
        placement: Placement::single(node, gpus),
    }
}

fn started(decisions: &[Decision]) -> Vec<JobId> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Start { job, .. } => Some(*job),
            _ => None,
        })
        .collect()
}

#[test]
fn gang_allocation_waits_for_all_gpus() {
    let d = Scenario::default()
        .node(4)
        .running(1, 0, &[0, 1, 2], None)
        .queued(2, 2)
        .run();
    assert!(d.is_empty(), "{d:?}");
    let d = Scenario::default()
        .node(4)
        .running(1, 0, &[0, 1], None)
        .queued(2, 2)
        .run();
    assert_eq!(d, vec![start(2, 0, vec![2, 3])]);
}

#[test]
fn priority_class_before_submit_order() {
    let d = Scenario::default()
        .node(1)
        .queued(1, 1)
        .queued_with(2, 1, |j| j.priority = Priority::High)
        .queued_with(3, 1, |j| j.priority = Priority::Low)
        .run();
    assert_eq!(started(&d), vec![2]);
}

#[test]
fn submit_order_within_a_class() {
    let d = Scenario::default()
        .node(2)
        .queued(5, 1)
        .queued(3, 1)
        .queued(9, 1)
        .run();
    assert_eq!(started(&d), vec![3, 5]);
}

#[test]
fn best_fit_picks_the_tightest_node() {
    let d = Scenario::default()
        .node(4)
        .node(4)
        .running(1, 1, &[0, 1], None)
        .queued(2, 2)
        .run();
    assert_eq!(d, vec![start(2, 1, vec![2, 3])]);
}

#[test]
fn dependency_waits_then_starts_then_fails() {
    let waiting = Scenario::default()
        .node(1)
        .dep(1, DependencyState::Pending)
        .queued_with(2, 0, |j| j.after = vec![1])
        .run();
    assert!(waiting.is_empty());
    let ok = Scenario::default()
        .node(1)
        .dep(1, DependencyState::Succeeded)
        .queued_with(2, 0, |j| j.after = vec![1])
        .run();
    assert_eq!(started(&ok), vec![2]);
    let failed = Scenario::default()
        .node(1)
        .dep(1, DependencyState::Ended("failed".into()))
        .queued_with(2, 0, |j| j.after = vec![1])
        .run();
    assert_eq!(
        failed,
        vec![Decision::Fail {
            job: 2,
            reason: "dependency job 1 failed".into()
        }]
    );
}

#[test]
fn too_large_a_job_fails_with_the_largest_node() {
    let d = Scenario::default().node(4).node(2).queued(1, 9).run();
    assert_eq!(
        d,
        vec![Decision::Fail {
            job: 1,
            reason: "job asks for 9 GPUs; the largest node has 4".into()
        }]
    );
}

#[test]
fn drained_queue_starts_nothing() {
    let mut s = Scenario::default().node(2).queued(1, 1);
    s.drained = true;
    assert!(s.run().is_empty());
}

#[test]
fn slots_bound_cpu_only_jobs() {
    let d = Scenario::default()
        .node(0)
        .slots(0, 2)
        .queued(1, 0)
        .queued(2, 0)
        .queued(3, 0)
        .run();
    assert_eq!(started(&d), vec![1, 2]);
}

#[test]
fn backfill_starts_a_short_job_that_ends_before_the_reservation() {
    // Job 1 holds 3 of 4 GPUs until t=1000; job 2 needs 4 and is reserved at 1000.
    let base = || {
        Scenario::default()
            .node(4)
            .running(1, 0, &[0, 1, 2], Some(1000))
            .queued(2, 4)
    };
    let short = base()
        .queued_with(3, 1, |j| j.time_limit_ms = Some(500))
        .run();
    assert_eq!(started(&short), vec![3]);
    let long = base()
        .queued_with(3, 1, |j| j.time_limit_ms = Some(5000))
        .run();
    assert!(started(&long).is_empty(), "a long job would delay the head");
    let unlimited = base().queued(3, 1).run();
    assert!(
        started(&unlimited).is_empty(),
        "a job without a limit could delay the head"
    );
}

#[test]
fn backfill_may_use_gpus_the_head_does_not_need() {
    // 8 GPUs; job 1 holds 6 until t=1000. Head needs 4: at t=1000 there are 8 free, 4 spare.
    let d = Scenario::default()
        .node(8)
        .running(1, 0, &[0, 1, 2, 3, 4, 5], Some(1000))
        .queued(2, 4)
        .queued(3, 1)
        .queued(4, 1)
        .run();
    assert_eq!(started(&d), vec![3, 4]);
}

#[test]
fn held_jobs_and_jobs_in_back_off_wait() {
    let d = Scenario::default()
        .node(2)
        .queued_with(1, 1, |j| j.held = true)
        .queued_with(2, 1, |j| j.eligible_at = Some(500))
        .queued(3, 1)
        .run();
    assert_eq!(started(&d), vec![3]);
    let mut later = Scenario::default()
        .node(2)
        .queued_with(2, 1, |j| j.eligible_at = Some(500));
    later.now = 500;
    assert_eq!(started(&later.run()), vec![2]);
}

fn preemptible(priority: Priority) -> impl FnOnce(&mut RunningJob) {
    move |r| {
        r.preemptible = true;
        r.priority = priority;
    }
}

#[test]
fn preemption_stops_the_fewest_lower_class_preemptible_jobs() {
    let d = Scenario::default()
        .node(4)
        .running(1, 0, &[0], None)
        .with_last_running(preemptible(Priority::Low))
        .running(2, 0, &[1, 2], None)
        .with_last_running(preemptible(Priority::Low))
        .running(3, 0, &[3], None)
        .queued_with(9, 2, |j| j.priority = Priority::High)
        .run();
    assert_eq!(
        d,
        vec![Decision::Preempt { job: 2, for_job: 9 }],
        "one 2-GPU victim beats two 1-GPU ones"
    );
}

#[test]
fn preemption_never_touches_non_preemptible_or_equal_class_jobs() {
    let not_preemptible = Scenario::default()
        .node(2)
        .running(1, 0, &[0, 1], None)
        .queued_with(2, 1, |j| j.priority = Priority::High)
        .run();
    assert!(not_preemptible.is_empty());
    let same_class = Scenario::default()
        .node(2)
        .running(1, 0, &[0, 1], None)
        .with_last_running(preemptible(Priority::Normal))
        .queued(2, 1)
        .run();
    assert!(same_class.is_empty());
    let not_enough = Scenario::default()
        .node(4)
        .running(1, 0, &[0], None)
        .with_last_running(preemptible(Priority::Low))
        .running(2, 0, &[1, 2, 3], None)
        .queued_with(3, 4, |j| j.priority = Priority::High)
        .run();
    assert!(
        not_enough.is_empty(),
        "preempting job 1 alone cannot make room: stop nothing"
    );
}

#[test]
fn no_second_preemption_while_victims_are_stopping() {
    let d = Scenario::default()
        .node(2)
        .running(1, 0, &[0, 1], None)
        .with_last_running(|r| {
            r.preemptible = true;
            r.priority = Priority::Low;
            r.stopping = true;
        })
        .queued_with(2, 2, |j| j.priority = Priority::High)
        .run();
    assert!(d.is_empty());
}

fn reasons(s: Scenario) -> HashMap<JobId, WaitReason> {
    let mut s = s;
    s.pending.sort_by_key(PendingJob::queue_key);
    let states = s.states;
    let lookup = move |id: JobId| states.get(&id).cloned().unwrap_or(DependencyState::Missing);
    let input = ScheduleInput {
        now: s.now,
        nodes: &s.nodes,
        running: &s.running,
        dependency: &lookup,
        drained: s.drained,
        policy: &s.policy,
    };
    let (decisions, why) = explain(&input, &s.pending);
    assert_eq!(
        decisions,
        schedule(&input, &s.pending),
        "explain decides exactly what schedule decides"
    );
    why.into_iter().collect()
}

#[test]
fn every_waiting_job_gets_the_rule_that_holds_it() {
    let why = reasons(
        Scenario::default()
            .node(4)
            .running(1, 0, &[0, 1, 2], Some(1000))
            .queued(2, 4)
            .queued_with(3, 1, |j| j.time_limit_ms = Some(5000))
            .queued_with(4, 0, |j| j.after = vec![99])
            .queued_with(5, 1, |j| j.held = true)
            .queued_with(6, 1, |j| j.eligible_at = Some(50))
            .dep(99, DependencyState::Pending),
    );
    assert_eq!(
        why[&2],
        WaitReason::Resources {
            gpus: 4,
            most_free: 1,
            reserved: Some(Some(1000))
        }
    );
    assert_eq!(
        why[&3],
        WaitReason::Reservation {
            for_job: 2,
            start: Some(1000)
        }
    );
    assert_eq!(why[&4], WaitReason::Dependency(99));
    assert_eq!(why[&5], WaitReason::Held);
    assert_eq!(why[&6], WaitReason::BackOff { until: 50 });
    assert_eq!(why.len(), 5);
}

#[test]
fn full_slots_and_drain_are_named() {
    let why = reasons(
        Scenario::default()
            .node(0)
            .slots(0, 1)
            .running(1, 0, &[], None)
            .queued(2, 0),
    );
    assert_eq!(why[&2], WaitReason::Slots);
    let mut drained = Scenario::default().node(1).queued(1, 1);
    drained.drained = true;
    assert_eq!(reasons(drained)[&1], WaitReason::Drained);
}

fn by(user: &str) -> impl FnOnce(&mut PendingJob) + '_ {
    move |j| j.user = user.into()
}

#[test]
fn fair_share_puts_a_light_user_before_a_heavy_one() {
    let mut s = Scenario::default()
        .node(1)
        .queued_with(1, 1, by("alice"))
        .queued_with(2, 1, by("alice"))
        .queued_with(3, 1, by("bob"));
    s.policy.standing = HashMap::from([("alice".into(), 3600.0 * 40.0), ("bob".into(), 60.0)]);
    assert_eq!(
        started(&s.run()),
        vec![3],
        "bob used less: he goes first although he came last"
    );
    let mut class = Scenario::default()
        .node(1)
        .queued_with(1, 1, |j| {
            j.user = "alice".into();
            j.priority = Priority::High;
        })
        .queued_with(2, 1, by("bob"));
    class.policy.standing = HashMap::from([("alice".into(), 1e9)]);
    assert_eq!(
        started(&class.run()),
        vec![1],
        "the priority class still comes first"
    );
}

#[test]
fn user_and_project_quotas_hold_jobs_back_without_blocking_others() {
    let mut s = Scenario::default()
        .node(8)
        .running(1, 0, &[0, 1, 2], None)
        .with_last_running(|r| r.user = "alice".into())
        .queued_with(2, 2, by("alice"))
        .queued_with(3, 1, by("alice"))
        .queued_with(4, 2, by("bob"));
    s.policy.user_max_gpus = HashMap::from([("alice".into(), 4)]);
    let why = reasons(s.clone_scenario());
    assert_eq!(
        why[&2],
        WaitReason::UserQuota {
            user: "alice".into(),
            used: 3,
            limit: 4
        }
    );
    assert_eq!(
        started(&s.run()),
        vec![3, 4],
        "alice fills her quota, bob is not held up"
    );

    let mut p = Scenario::default()
        .node(8)
        .queued_with(1, 3, |j| j.project = Some("nlp".into()))
        .queued_with(2, 3, |j| j.project = Some("nlp".into()))
        .queued_with(3, 3, |j| j.project = Some("vision".into()));
    p.policy.project_max_gpus = HashMap::from([("nlp".into(), 4)]);
    assert_eq!(started(&p.run()), vec![1, 3]);
}

impl Scenario {
    fn clone_scenario(&self) -> Scenario {
        Scenario {
            now: self.now,
            nodes: self.nodes.clone(),
            running: self.running.clone(),
            pending: self.pending.clone(),
            states: self.states.clone(),
            drained: self.drained,
            policy: self.policy.clone(),
        }
    }
}

#[test]
fn gpu_type_and_memory_constraints_pick_matching_gpus() {
    let attrs = |m: &str, mem: u64| GpuAttrs {
        model: m.into(),
        memory_mib: mem,
    };
    let mut s = Scenario::default().node(4);
    s.nodes[0].attrs = vec![
        attrs("NVIDIA A100-SXM4-80GB", 81920),
        attrs("NVIDIA A100-SXM4-80GB", 81920),
        attrs("NVIDIA L4", 23034),
        attrs("NVIDIA L4", 23034),
    ];
    let with = |mut s: Scenario, f: &dyn Fn(&mut PendingJob)| {
        let mut j = s.pending.pop().unwrap();
        f(&mut j);
        s.pending.push(j);
        s
    };
    let l4 = with(s.clone_scenario().queued(1, 2), &|j| {
        j.gpu_type = Some("l4".into())
    })
    .run();
    assert_eq!(l4, vec![start(1, 0, vec![2, 3])]);
    let big = with(s.clone_scenario().queued(1, 1), &|j| {
        j.gpu_mem_mib = Some(40 * 1024)
    })
    .run();
    assert_eq!(big, vec![start(1, 0, vec![0])]);
    let none = with(s.clone_scenario().queued(1, 1), &|j| {
        j.gpu_type = Some("H100".into())
    })
    .run();
    assert!(
        matches!(&none[..], [Decision::Fail { reason, .. }] if reason.contains("largest node has 0")),
        "{none:?}"
    );
    let taken = with(s.running(7, 0, &[2, 3], None).queued(1, 1), &|j| {
        j.gpu_type = Some("L4".into())
    });
    assert!(
        taken.run().is_empty(),
        "both L4s are busy: the free A100s do not count"
    );
}

#[test]
fn multi_gpu_jobs_get_the_best_connected_gpus() {
    // Two NVLink islands of four: {0..3} and {4..7}.
    let mut s = Scenario::default()
        .node(8)
        .running(1, 0, &[0, 1, 2], None)
        .queued(2, 2);
    s.nodes[0].links = (0..8)
        .map(|a: u32| {
            (0..8)
                .map(|b: u32| if a / 4 == b / 4 { 3 } else { 0 })
                .collect()
        })
        .collect();
    assert_eq!(
        s.run(),
        vec![start(2, 0, vec![4, 5])],
        "not 3 and 4, across islands"
    );
}

#[test]
fn preemption_only_frees_gpus_that_suit_the_waiting_job() {
    let attrs = |m: &str| GpuAttrs {
        model: m.into(),
        memory_mib: 81920,
    };
    let mut s = Scenario::default()
        .node(2)
        .running(1, 0, &[1], None)
        .with_last_running(preemptible(Priority::Low))
        .running(2, 0, &[0], None)
        .with_last_running(preemptible(Priority::Low))
        .queued_with(9, 1, |j| {
            j.priority = Priority::High;
            j.gpu_type = Some("A100".into());
        });
    s.nodes[0].attrs = vec![attrs("A100"), attrs("L4")];
    assert_eq!(
        s.run(),
        vec![Decision::Preempt { job: 2, for_job: 9 }],
        "the job on the A100, not the one on the L4"
    );
}

fn task_of(array: JobId, limit: u32) -> impl Fn(&mut PendingJob) {
    move |j| j.group = Some(JobGroup { id: array, limit })
}

#[test]
fn an_arrays_limit_caps_its_tasks_running_at_once() {
    // Array 10 with %2 on 4 free GPUs: two tasks start in one pass, the rest wait.
    let mut s = Scenario::default().node(4);
    for id in 10..16 {
        s = s.queued_with(id, 1, task_of(10, 2));
    }
    assert_eq!(started(&s.run()), vec![10, 11]);

    // One task runs already: one more starts; a plain job behind them is not held up.
    let mut s = Scenario::default()
        .node(4)
        .running(10, 0, &[0], None)
        .with_last_running(|r| r.group = Some(JobGroup { id: 10, limit: 2 }));
    for id in 11..16 {
        s = s.queued_with(id, 1, task_of(10, 2));
    }
    let d = s.queued(20, 1).run();
    assert_eq!(started(&d), vec![11, 20]);

    // A stopping task still runs, and still counts.
    let mut s = Scenario::default()
        .node(4)
        .running(10, 0, &[0], None)
        .with_last_running(|r| {
            r.group = Some(JobGroup { id: 10, limit: 1 });
            r.stopping = true;
        });
    s = s.queued_with(11, 1, task_of(10, 1));
    assert!(s.run().is_empty());
}

#[test]
fn the_limit_is_per_array_and_is_explained() {
    let why = reasons(
        Scenario::default()
            .node(8)
            .running(1, 0, &[0], None)
            .with_last_running(|r| r.group = Some(JobGroup { id: 1, limit: 1 }))
            .queued_with(2, 1, task_of(1, 1))
            .queued_with(3, 1, task_of(1, 1))
            .queued_with(5, 1, task_of(5, 3))
            .queued_with(6, 1, task_of(5, 3)),
    );
    let limited = WaitReason::GroupLimit {
        group: 1,
        running: 1,
        limit: 1,
    };
    assert_eq!((why.get(&2), why.get(&3)), (Some(&limited), Some(&limited)));
    assert!(!why.contains_key(&5) && !why.contains_key(&6), "{why:?}");
}

#[test]
fn a_task_held_back_by_its_limit_reserves_nothing() {
    // Task 3 waits for its array, not for GPUs: the 4-GPU job behind it may
    // not be blocked by a reservation made for it, and nothing is preempted.
    let d = Scenario::default()
        .node(4)
        .running(1, 0, &[0], None)
        .with_last_running(|r| {
            r.group = Some(JobGroup { id: 1, limit: 1 });
            r.preemptible = true;
            r.priority = Priority::Low;
        })
        .queued_with(3, 1, |j| {
            j.group = Some(JobGroup { id: 1, limit: 1 });
            j.priority = Priority::High;
        })
        .queued(4, 3)
        .run();
    assert_eq!(started(&d), vec![4]);
    assert!(
        !d.iter().any(|d| matches!(d, Decision::Preempt { .. })),
        "{d:?}"
    );
}
