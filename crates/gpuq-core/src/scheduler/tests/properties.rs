//! Properties over random workloads: no GPU held twice, no node's cores or
//! memory over-committed, placements of the shape asked for, only preemptible
//! lower-class victims, no group (a job array's `%N`) over its limit, and no
//! starvation of the backfill head.

use super::super::*;
use proptest::prelude::*;
use std::collections::HashMap;

/// A random workload on a random heterogeneous cluster: kinds of node (count,
/// GPUs, model, cores and memory) and submissions (GPUs, nodes, model wanted,
/// class, cores and memory) interleaved with job ends.
#[allow(clippy::type_complexity)]
fn ops() -> impl Strategy<Value = (Vec<(usize, u32, u8, u8)>, Vec<(bool, u32, u8, u8)>)> {
    (
        proptest::collection::vec((1usize..4, 0u32..6, 0u8..2, 0u8..4), 1..4),
        proptest::collection::vec((any::<bool>(), 0u32..14, 0u8..4, any::<u8>()), 1..80),
    )
}

/// Whether `job` can ever run on `nodes`, by the rules of the module doc,
/// computed apart from the scheduler: one node large enough; whole nodes of
/// one kind; or `nodes` nodes of one kind with `gpus` each.
/// Cores and memory count on nodes that count them: a node holds the job
/// only if its capacity covers the job's.
fn placeable(job: &PendingJob, nodes: &[Node]) -> bool {
    let r = &job.resources;
    let holds = |n: &Node| {
        (n.cpus == 0 || r.cpus <= n.cpus) && (n.memory_mib == 0 || r.memory_mib <= n.memory_mib)
    };
    if job.nodes.is_none_or(|c| c <= 1) && nodes.iter().any(|n| n.suitable(job) >= job.gpus) {
        return nodes
            .iter()
            .any(|n| n.suitable(job) >= job.gpus && holds(n));
    }
    // Per kind: the nodes of it that could hold the job.
    let mut kinds: Vec<(&Node, usize)> = Vec::new();
    for n in nodes {
        let add = usize::from(holds(n));
        match kinds
            .iter_mut()
            .find(|(k, _)| k.gpus.len() == n.gpus.len() && k.attrs == n.attrs)
        {
            Some((_, count)) => *count += add,
            None => kinds.push((n, add)),
        }
    }
    match job.nodes {
        Some(count) if count > 1 => kinds
            .iter()
            .any(|(k, c)| *c >= count as usize && k.suitable(job) >= job.gpus),
        _ => {
            nodes.iter().any(|n| n.suitable(job) >= job.gpus)
                || (job.nodes.is_none()
                    && kinds.iter().any(|(k, c)| {
                        let per = k.suitable(job);
                        *c >= 2 && per > 0 && job.gpus.div_ceil(per) as usize <= *c
                    }))
        }
    }
}

proptest! {
    /// Whatever the cluster and the sequence of submits and exits: no GPU is
    /// ever held by two running jobs, every start has the shape its job asked
    /// for (one node; whole nodes of one kind; `nodes` nodes of one kind with
    /// `gpus` each), a job fails only when it could never run, only
    /// preemptible, lower-class jobs are preempted, once, and no group runs
    /// more of its jobs at once than its limit.
    #[test]
    fn no_gpu_is_shared_and_counts_are_honoured((kinds, ops) in ops()) {
        let classes = [Priority::Low, Priority::Normal, Priority::High];
        let mut nodes: Vec<Node> = Vec::new();
        for &(count, gpus, model, host) in &kinds {
            // Not counted; 4 cores and 4 GiB; 8 cores, memory not counted; 16 cores and 8 GiB.
            let (cpus, memory_mib) = [(0, 0), (4, 4096), (8, 0), (16, 8192)][host as usize];
            for _ in 0..count {
                let attrs = vec![GpuAttrs { model: format!("m{model}"), memory_mib: 1024 }; gpus as usize];
                nodes.push(Node { name: format!("n{}", nodes.len()), gpus: (0..gpus).collect(), slots: 4, attrs, cpus, memory_mib, ..Default::default() });
            }
        }
        let mut running: Vec<RunningJob> = Vec::new();
        let mut pending: Vec<PendingJob> = Vec::new();
        let mut asked: HashMap<JobId, PendingJob> = HashMap::new();
        let mut class: HashMap<JobId, (Priority, bool)> = HashMap::new();
        let mut next_id: JobId = 1;
        let mut now: Millis = 0;
        for (submit, gpus, shape, pick) in ops {
            now += 10;
            if submit {
                let job = PendingJob {
                    id: next_id,
                    user: "u".into(),
                    project: None,
                    priority: classes[pick as usize % 3],
                    submitted_at: now,
                    gpus: if shape >= 2 { gpus % 4 } else { gpus },
                    nodes: (shape >= 2).then_some(shape as u32),
                    time_limit_ms: (pick % 2 == 0).then_some(pick as u64 * 10),
                    after: vec![],
                    held: false,
                    eligible_at: None,
                    gpu_type: (shape == 1).then(|| "m1".into()),
                    gpu_mem_mib: None,
                    // Two arrays: at most 1 and at most 2 of their tasks at once.
                    group: (pick % 3 != 0).then(|| JobGroup { id: 1000 + (pick % 2) as u64, limit: 1 + (pick % 2) as u32 }),
                    waits_on: None,
                    resources: JobResources {
                        cpus: [0, 1, 2, 4, 8, 20][pick as usize % 6],
                        memory_mib: [0, 1024, 3000, 9000][(pick as usize / 6) % 4],
                    },
                };
                asked.insert(next_id, job.clone());
                class.insert(next_id, (classes[pick as usize % 3], pick % 5 < 2));
                pending.push(job);
                next_id += 1;
            } else if !running.is_empty() {
                running.remove(pick as usize % running.len());
            }
            pending.sort_by_key(PendingJob::queue_key);
            let lookup = |_| DependencyState::Succeeded;
            let policy = Policy::default();
            let input = ScheduleInput { now, nodes: &nodes, running: &running, dependency: &lookup, drained: false, policy: &policy };
            for d in schedule(&input, &pending) {
                match d {
                    Decision::Start { job, placement } => {
                        let p = &asked[&job];
                        let parts = &placement.0;
                        prop_assert!(!parts.is_empty());
                        for part in parts {
                            prop_assert!(part.gpus.iter().all(|g| nodes[part.node].suits(p, *g)), "GPUs of the node, of the model asked");
                        }
                        let distinct: std::collections::HashSet<usize> = placement.nodes().collect();
                        prop_assert_eq!(distinct.len(), parts.len(), "a node once per placement");
                        let first = &nodes[parts[0].node];
                        prop_assert!(parts.iter().all(|q| nodes[q.node].same_kind(first)), "one kind of node");
                        let largest = nodes.iter().map(|n| n.suitable(p)).max().unwrap_or(0);
                        match p.nodes {
                            Some(n) if n > 1 => {
                                prop_assert_eq!(parts.len(), n as usize);
                                prop_assert!(parts.iter().all(|q| q.gpus.len() as u32 == p.gpus));
                            }
                            _ if p.gpus <= largest => {
                                prop_assert_eq!(parts.len(), 1);
                                prop_assert_eq!(placement.gpu_count(), p.gpus);
                            }
                            _ => {
                                let per = first.suitable(p);
                                prop_assert!(parts.len() >= 2);
                                prop_assert!(parts.iter().all(|q| q.gpus.len() as u32 == per), "whole nodes");
                                prop_assert!(placement.gpu_count() >= p.gpus && placement.gpu_count() - p.gpus < per, "rounded up by less than a node");
                            }
                        }
                        pending.retain(|q| q.id != job);
                        running.push(RunningJob {
                            id: job,
                            user: "u".into(),
                            project: None,
                            placement,
                            ends_by: None,
                            priority: class[&job].0,
                            preemptible: class[&job].1,
                            stopping: false,
                            group: p.group,
                            resources: p.resources,
                        });
                    }
                    Decision::Fail { job, .. } => {
                        prop_assert!(!placeable(&asked[&job], &nodes), "job {} failed but could run", job);
                        prop_assert!(!can_ever_place(&asked[&job], &nodes));
                        pending.retain(|p| p.id != job);
                    }
                    Decision::Preempt { job, for_job } => {
                        let victim = running.iter_mut().find(|r| r.id == job).unwrap();
                        prop_assert!(victim.preemptible && !victim.stopping, "only preemptible jobs are stopped, once");
                        prop_assert!(victim.priority < class[&for_job].0, "only for a higher class");
                        victim.stopping = true;
                    }
                }
            }
            let mut held = std::collections::HashSet::new();
            for r in &running {
                for part in &r.placement.0 {
                    for g in &part.gpus {
                        prop_assert!(held.insert((part.node, *g)), "GPU {} on node {} held twice", g, part.node);
                    }
                }
            }
            for g in running.iter().filter_map(|r| r.group) {
                let n = running.iter().filter(|r| r.group == Some(g)).count() as u32;
                prop_assert!(n <= g.limit, "{} jobs of group {} run, limit {}", n, g.id, g.limit);
            }
            let per_node = |n: usize| running.iter().filter(|r| r.placement.nodes().any(|m| m == n)).count() as u32;
            prop_assert!((0..nodes.len()).all(|n| per_node(n) <= nodes[n].slots));
            for (n, node) in nodes.iter().enumerate() {
                let on: Vec<&RunningJob> = running.iter().filter(|r| r.placement.nodes().any(|m| m == n)).collect();
                let cpus: u32 = on.iter().map(|r| r.resources.cpus).sum();
                let mib: u64 = on.iter().map(|r| r.resources.memory_mib).sum();
                prop_assert!(node.cpus == 0 || cpus <= node.cpus, "node {} has {} cores, {} are held", n, node.cpus, cpus);
                prop_assert!(node.memory_mib == 0 || mib <= node.memory_mib, "node {} has {} MiB, {} are held", n, node.memory_mib, mib);
            }
        }
    }
}

proptest! {
    /// EASY backfill never starves the head: under a continuous stream of small
    /// jobs, a job that needs the whole node starts no later than the time
    /// limits of the jobs running when it arrived allow.
    #[test]
    fn the_head_is_never_starved_by_a_stream_of_small_jobs(
        initial in proptest::collection::vec((1u32..3, 1i64..50), 1..4),
        stream in proptest::collection::vec((1u32..3, 1i64..60), 1..200),
    ) {
        let nodes = vec![Node { name: "n".into(), gpus: (0..4).collect(), slots: 64, ..Default::default() }];
        let policy = Policy::default();
        let lookup = |_| DependencyState::Succeeded;
        let mut running: Vec<RunningJob> = Vec::new();
        let mut next_gpu = 0u32;
        for (i, (g, limit)) in initial.iter().enumerate() {
            let g = (*g).min(4 - next_gpu);
            if g == 0 { break; }
            running.push(RunningJob { id: 1000 + i as u64, user: "u".into(), project: None,
                placement: Placement::single(0, (next_gpu..next_gpu + g).collect()), ends_by: Some(*limit),
                priority: Priority::Normal, preemptible: false, stopping: false, group: None, resources: JobResources::default() });
            next_gpu += g;
        }
        // The head arrives at t=0 and can start, at the latest, when every job running then has ended.
        let deadline = running.iter().filter_map(|r| r.ends_by).max().unwrap_or(0);
        let head = PendingJob { id: 1, user: "u".into(), project: None, priority: Priority::Normal,
            submitted_at: 0, gpus: 4, nodes: None, time_limit_ms: Some(10), after: vec![], held: false, eligible_at: None, gpu_type: None, gpu_mem_mib: None, group: None , waits_on: None, resources: JobResources::default() };
        let mut pending = vec![head];
        let mut head_started = None;
        for (t, (g, limit)) in stream.iter().enumerate() {
            let now = t as i64;
            running.retain(|r| r.ends_by.is_none_or(|e| e > now));
            pending.push(PendingJob { id: 10 + t as u64, user: "u".into(), project: None,
                priority: Priority::Normal, submitted_at: now + 1, gpus: *g, nodes: None, time_limit_ms: Some(*limit as u64),
                after: vec![], held: false, eligible_at: None, gpu_type: None, gpu_mem_mib: None, group: None , waits_on: None, resources: JobResources::default() });
            let input = ScheduleInput { now, nodes: &nodes, running: &running, dependency: &lookup, drained: false, policy: &policy };
            for d in schedule(&input, &pending) {
                if let Decision::Start { job, placement } = d {
                    let p = pending.iter().find(|p| p.id == job).unwrap().clone();
                    if job == 1 { head_started = Some(now); }
                    running.push(RunningJob { id: job, user: "u".into(), project: None, placement,
                        ends_by: Some(now + p.time_limit_ms.unwrap() as i64), priority: p.priority,
                        preemptible: false, stopping: false, group: None, resources: JobResources::default() });
                    pending.retain(|q| q.id != job);
                }
            }
            if head_started.is_some() { break; }
        }
        if let Some(at) = head_started {
            prop_assert!(at <= deadline, "head started at {} after its reserved time {}", at, deadline);
        } else {
            prop_assert!((stream.len() as i64) <= deadline, "the stream ran past {} and the head never started", deadline);
        }
    }
}
