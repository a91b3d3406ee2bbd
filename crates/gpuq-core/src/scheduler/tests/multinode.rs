//! Scenarios on clusters of several kinds of node and with jobs larger than
//! one node: placement by kind, gangs of whole nodes, reservations and
//! backfill across nodes, preemption across nodes, and what `explain` says.

use super::*;

impl Scenario {
    /// `count` nodes of `gpus` GPUs of `model` ("" for unknown).
    fn kind(mut self, count: usize, gpus: u32, model: &str) -> Self {
        for _ in 0..count {
            self = self.node(gpus);
            if !model.is_empty() {
                let attrs = GpuAttrs {
                    model: model.into(),
                    memory_mib: 16384,
                };
                self.nodes.last_mut().unwrap().attrs = vec![attrs; gpus as usize];
            }
        }
        self
    }
    /// A running job over several nodes: `(node, GPUs)` in rank order.
    fn running_on(mut self, id: JobId, parts: &[(usize, &[u32])], ends_by: Option<Millis>) -> Self {
        self = self.running(id, 0, &[], ends_by);
        self.running.last_mut().unwrap().placement = Placement(
            parts
                .iter()
                .map(|&(node, gpus)| NodeGpus {
                    node,
                    gpus: gpus.to_vec(),
                })
                .collect(),
        );
        self
    }
}

fn all(n: u32) -> Vec<u32> {
    (0..n).collect()
}

fn placement_of(decisions: &[Decision], id: JobId) -> Vec<(usize, Vec<u32>)> {
    decisions
        .iter()
        .find_map(|d| match d {
            Decision::Start { job, placement } if *job == id => Some(
                placement
                    .0
                    .iter()
                    .map(|p| (p.node, p.gpus.clone()))
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_else(|| panic!("job {id} did not start: {decisions:?}"))
}

fn t4(j: &mut PendingJob) {
    j.gpu_type = Some("T4".into());
}

#[test]
fn each_job_goes_to_the_kind_it_fits_best() {
    // Nodes 0-1: 8×V100; 2-3: 2×T4; 4: 4 GPUs of an unknown model.
    let cluster = || {
        Scenario::default()
            .kind(2, 8, "V100")
            .kind(2, 2, "T4")
            .kind(1, 4, "")
    };
    let d = cluster()
        .queued(1, 8)
        .queued_with(2, 2, t4)
        .queued(3, 3)
        .queued(4, 1)
        .run();
    assert_eq!(placement_of(&d, 1), [(0, all(8))], "only a V100 node has 8");
    assert_eq!(
        placement_of(&d, 2),
        [(2, all(2))],
        "the T4 job on a T4 node"
    );
    assert_eq!(
        placement_of(&d, 3),
        [(4, all(3))],
        "best fit: 1 left over, not 5"
    );
    assert_eq!(
        placement_of(&d, 4),
        [(4, vec![3])],
        "best fit: the last free GPU"
    );
    let t4_gang = cluster().queued_with(5, 4, t4).run();
    assert_eq!(
        placement_of(&t4_gang, 5),
        [(2, all(2)), (3, all(2))],
        "4 T4 GPUs: both T4 nodes, whole"
    );
    let too_many_t4 = cluster().queued_with(6, 6, t4).run();
    assert_eq!(
        too_many_t4,
        vec![Decision::Fail {
            job: 6,
            reason: "job asks for 6 GPUs; the largest node has 2 and the most on nodes of one \
                     kind is 4 (2 2×T4 nodes)"
                .into()
        }]
    );
}

#[test]
fn a_job_larger_than_a_node_gets_whole_nodes_of_one_kind_at_once() {
    let cluster = || Scenario::default().kind(4, 8, "V100").kind(2, 8, "A100");
    // 16 GPUs: two whole nodes, the lowest first (rank 0 = MASTER_ADDR).
    let d = cluster().running(1, 1, &[0], None).queued(2, 16).run();
    assert_eq!(placement_of(&d, 2), [(0, all(8)), (2, all(8))]);
    // 12 GPUs round up to 2 whole nodes (8 each: torchrun's nproc_per_node is equal).
    let d = cluster().queued(3, 12).run();
    assert_eq!(placement_of(&d, 3), [(0, all(8)), (1, all(8))]);
    // 24 GPUs with three V100 nodes busy: the two free A100 nodes and the free V100
    // node are 24 GPUs, but of two kinds: it waits.
    let d = cluster()
        .running(1, 0, &[0], None)
        .running(4, 1, &[0], None)
        .running(5, 2, &[0], None)
        .queued(6, 24)
        .run();
    assert!(started(&d).is_empty(), "{d:?}");
    // Gang: nothing starts on part of the nodes while the others are busy.
    let d = cluster()
        .running(1, 0, &[0], None)
        .running(4, 1, &[0], None)
        .running(5, 2, &[0], None)
        .queued(6, 32)
        .run();
    assert!(d.is_empty(), "{d:?}");
    // One V100 node is free, not two: the A100 kind takes it.
    let d = cluster()
        .running(1, 0, &[0], None)
        .running(4, 1, &[0], None)
        .running(5, 2, &[0], None)
        .queued(6, 16)
        .run();
    assert_eq!(placement_of(&d, 6), [(4, all(8)), (5, all(8))]);
}

#[test]
fn the_kind_with_the_least_rounding_then_the_fewest_nodes() {
    // 8 GPUs fit no node: two 4-GPU nodes waste nothing, three 3-GPU nodes waste 1.
    let d = Scenario::default()
        .kind(3, 3, "")
        .kind(2, 4, "L4")
        .kind(8, 1, "")
        .queued(1, 8)
        .run();
    assert_eq!(placement_of(&d, 1), [(3, all(4)), (4, all(4))]);
}

#[test]
fn explicit_nodes_take_gpus_per_node_and_leave_the_rest() {
    // `nodes: 3, gpus: 2`: 2 GPUs on each of 3 nodes of one kind, tightest first.
    let d = Scenario::default()
        .kind(4, 4, "A10")
        .running(1, 0, &[0, 1, 2], None)
        .running(2, 2, &[0, 1], None)
        .queued_with(3, 2, |j| j.nodes = Some(3))
        .queued(4, 2)
        .run();
    assert_eq!(
        placement_of(&d, 3),
        [(1, vec![0, 1]), (2, vec![2, 3]), (3, vec![0, 1])],
        "node 2 (2 free) fits tightest; node 0 (1 free) cannot"
    );
    assert_eq!(placement_of(&d, 4), [(1, vec![2, 3])]);
    let d = Scenario::default()
        .kind(2, 8, "V100")
        .kind(4, 4, "T4")
        .queued_with(5, 8, |j| j.nodes = Some(3))
        .run();
    assert_eq!(
        d,
        vec![Decision::Fail {
            job: 5,
            reason:
                "job asks for 3 nodes with 8 GPUs each; at most 2 nodes of one kind have that many"
                    .into()
        }]
    );
}

#[test]
fn jobs_that_can_never_run_fail_with_the_largest_kind() {
    let d = Scenario::default()
        .kind(32, 8, "V100")
        .kind(4, 2, "T4")
        .queued(1, 600)
        .queued_with(2, 10, t4)
        .run();
    assert_eq!(
        d,
        vec![
            Decision::Fail {
                job: 1,
                reason: "job asks for 600 GPUs; the largest node has 8 and the most on nodes \
                         of one kind is 256 (32 8×V100 nodes)"
                    .into()
            },
            Decision::Fail {
                job: 2,
                reason: "job asks for 10 GPUs; the largest node has 2 and the most on nodes \
                         of one kind is 8 (4 2×T4 nodes)"
                    .into()
            },
        ]
    );
    assert!(!can_ever_place(
        &Scenario::default().queued(1, 600).pending[0],
        &Scenario::default().kind(32, 8, "V100").nodes
    ));
}

#[test]
fn a_multi_node_head_reserves_several_nodes_and_backfill_keeps_off_them() {
    // Node 0 is busy until 1000, node 1 half busy until 2000, node 2 free. The head
    // (16 GPUs: 2 whole nodes) is reserved nodes 2 (now) and 0 (at 1000).
    let base = || {
        Scenario::default()
            .kind(3, 8, "")
            .running(1, 0, &all(8), Some(1000))
            .running(2, 1, &[0, 1, 2, 3], Some(2000))
            .queued(3, 16)
    };
    let d = base()
        .queued_with(4, 4, |j| j.time_limit_ms = Some(5000))
        .queued_with(5, 2, |j| j.time_limit_ms = Some(5000))
        .queued_with(6, 2, |j| j.time_limit_ms = Some(500))
        .run();
    assert_eq!(
        placement_of(&d, 4),
        [(1, vec![4, 5, 6, 7])],
        "outside the reservation"
    );
    assert_eq!(
        placement_of(&d, 6),
        [(2, vec![0, 1])],
        "on a reserved node, but it ends before the reserved start"
    );
    assert_eq!(started(&d), [4, 6], "job 5 would delay the head");
    let why = reasons(
        base()
            .queued_with(4, 4, |j| j.time_limit_ms = Some(5000))
            .queued_with(5, 2, |j| j.time_limit_ms = Some(5000)),
    );
    let WaitReason::Nodes(head) = &why[&3] else {
        panic!("{:?}", why[&3]);
    };
    assert_eq!(head.reserved, Some(Some(1000)));
    assert_eq!(head.to_string(), "needs 2 whole 8-GPU nodes; 1 is free");
    assert_eq!(
        why[&5],
        WaitReason::Reservation {
            for_job: 3,
            start: Some(1000)
        }
    );
}

#[test]
fn a_gang_keeps_off_the_node_reserved_for_a_single_node_head() {
    // The 4-GPU head is reserved node 0 (3 GPUs busy until 1000). Gangs of one
    // GPU on each of several nodes, without time limits, may not use node 0.
    let d = Scenario::default()
        .kind(3, 4, "")
        .running(1, 0, &[0, 1, 2], Some(1000))
        .running(7, 1, &[0, 1], None)
        .running(8, 2, &[0, 1], None)
        .queued(2, 4)
        .queued_with(3, 1, |j| j.nodes = Some(2))
        .queued_with(4, 1, |j| j.nodes = Some(3));
    let why = reasons(d.clone_scenario());
    let d = d.run();
    assert_eq!(placement_of(&d, 3), [(1, vec![2]), (2, vec![2])]);
    assert_eq!(started(&d), [3]);
    assert_eq!(
        why[&4],
        WaitReason::Reservation {
            for_job: 2,
            start: Some(1000)
        }
    );
}

#[test]
fn preemption_frees_whole_nodes_with_the_fewest_victims() {
    // Node 0: two 2-GPU victims; nodes 1 and 2: one 4-GPU victim each; node 3: a
    // job that is not preemptible. The head needs 2 whole 4-GPU nodes.
    let low = preemptible(Priority::Low);
    let d = Scenario::default()
        .kind(4, 4, "")
        .running(1, 0, &[0, 1], None)
        .with_last_running(preemptible(Priority::Low))
        .running(2, 0, &[2, 3], None)
        .with_last_running(preemptible(Priority::Low))
        .running(3, 1, &all(4), None)
        .with_last_running(low)
        .running(4, 2, &all(4), None)
        .with_last_running(preemptible(Priority::Low))
        .running(5, 3, &[0], None)
        .queued_with(9, 8, |j| j.priority = Priority::High)
        .run();
    assert_eq!(
        d,
        vec![
            Decision::Preempt { job: 3, for_job: 9 },
            Decision::Preempt { job: 4, for_job: 9 }
        ]
    );
}

#[test]
fn a_victim_on_several_nodes_is_stopped_once_and_frees_them_all() {
    let d = Scenario::default()
        .kind(2, 4, "")
        .running_on(1, &[(0, &[0, 1, 2, 3]), (1, &[0, 1, 2, 3])], None)
        .with_last_running(preemptible(Priority::Low))
        .queued_with(9, 8, |j| j.priority = Priority::High)
        .run();
    assert_eq!(d, vec![Decision::Preempt { job: 1, for_job: 9 }]);
    // While it stops, nothing more is preempted.
    let stopping = Scenario::default()
        .kind(2, 4, "")
        .running_on(1, &[(0, &[0, 1, 2, 3]), (1, &[0, 1, 2, 3])], None)
        .with_last_running(|r| {
            r.preemptible = true;
            r.priority = Priority::Low;
            r.stopping = true;
        })
        .queued_with(9, 8, |j| j.priority = Priority::High)
        .run();
    assert!(stopping.is_empty(), "{stopping:?}");
}

#[test]
fn multi_node_preemption_never_touches_protected_jobs() {
    // One node is held by a job that is not preemptible, the other by an equal-class
    // preemptible one: no set of victims frees two nodes, so nothing is stopped.
    let d = Scenario::default()
        .kind(3, 4, "")
        .running(1, 0, &[0], None)
        .running(2, 1, &[0], None)
        .with_last_running(preemptible(Priority::High))
        .running(3, 2, &[0], None)
        .with_last_running(preemptible(Priority::Low))
        .queued_with(9, 8, |j| j.priority = Priority::High)
        .run();
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn explain_names_the_kind_of_node_a_job_waits_for() {
    let why = reasons(
        Scenario::default()
            .kind(2, 8, "V100")
            .kind(2, 4, "T4")
            .running(1, 2, &[0, 1], None)
            .running(2, 3, &[0, 1, 2], None)
            .running(3, 0, &[0], None)
            .queued_with(4, 4, t4)
            .queued(5, 16),
    );
    let text = |id: JobId| match &why[&id] {
        WaitReason::Nodes(s) => s.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(text(4), "no 4×T4 node has 4 free GPUs (at most 2 on one)");
    assert_eq!(text(5), "needs 2 whole 8×V100 nodes; 1 is free");
    let shortage = NodeShortage {
        nodes: 3,
        gpus_per_node: 2,
        whole: false,
        kind: Some(NodeKind {
            gpus: 4,
            model: "T4".into(),
            interconnect: "InfiniBand".into(),
        }),
        ready: 0,
        most_free: 1,
        reserved: None,
    };
    assert_eq!(
        shortage.to_string(),
        "needs 3 4×T4 (InfiniBand) nodes with 2 free GPUs each; none has them"
    );
}

#[test]
fn nodes_of_another_interconnect_are_another_kind() {
    let mut s = Scenario::default().kind(3, 4, "A100").queued(1, 8);
    s.nodes[0].interconnect = "InfiniBand".into();
    s.nodes[1].interconnect = "Ethernet".into();
    s.nodes[2].interconnect = "InfiniBand".into();
    assert_eq!(placement_of(&s.run(), 1), [(0, all(4)), (2, all(4))]);
}
