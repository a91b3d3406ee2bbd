//! The simulator's engine on small traces whose right answers are known.

use gpuq_sim::trace::parse;
use gpuq_sim::{report, run, Cluster, PolicyName, SimOptions};

fn opts(policy: PolicyName, nodes: u32, gpus: u32) -> SimOptions {
    on(policy, Cluster::uniform(nodes, gpus))
}

fn on(policy: PolicyName, cluster: Cluster) -> SimOptions {
    SimOptions {
        cluster,
        policy,
        ..Default::default()
    }
}

fn jct(trace: &str, o: &SimOptions) -> Vec<f64> {
    let t = parse(trace, "t").unwrap();
    let r = run(&t, o);
    r.outcomes
        .iter()
        .map(|x| {
            x.map(|o| (o.end - o.submit) as f64 / 1000.0)
                .unwrap_or(-1.0)
        })
        .collect()
}

#[test]
fn fifo_blocks_behind_a_big_job() {
    // One node of 2 GPUs: a 1-GPU job runs 100 s; a 2-GPU job waits; a short 1-GPU job arrives.
    let trace = "submit,duration,gpus,user\n0,100,1,a\n1,10,2,a\n2,5,1,a\n";
    let fifo = jct(trace, &opts(PolicyName::Fifo, 1, 2));
    // FIFO: the short job waits behind the 2-GPU job: starts at 110, ends 115.
    assert_eq!(fifo, [100.0, 109.0, 113.0]);
    // gpuq's backfill needs time limits to prove a later job cannot delay the
    // head's reservation; a trace without them gets no backfill on the reserved node.
    let gpuq = jct(trace, &opts(PolicyName::Gpuq, 1, 2));
    assert_eq!(gpuq, fifo);
    // With a second node the short job starts there at once, while FIFO still blocks it.
    let gpuq = jct(trace, &opts(PolicyName::Gpuq, 2, 2));
    let fifo2 = jct(trace, &opts(PolicyName::Fifo, 2, 2));
    assert_eq!(gpuq[2], 5.0);
    assert_eq!(
        fifo2[2], 5.0,
        "the 2-GPU job also starts on the free node: nothing blocks"
    );
}

#[test]
fn sjf_oracle_and_tiresias_favour_short_jobs() {
    // One GPU: a long job first, then three short ones.
    let trace = "submit,duration,gpus,user\n0,1000,1,a\n1,10,1,b\n2,10,1,b\n3,10,1,b\n";
    let avg = |v: Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    let fifo = avg(jct(trace, &opts(PolicyName::Fifo, 1, 1)));
    let sjf = avg(jct(trace, &opts(PolicyName::SjfOracle, 1, 1)));
    let mut las_opts = opts(PolicyName::Tiresias, 1, 1);
    las_opts.restart_penalty_s = 0.0;
    let t = parse(trace, "t").unwrap();
    let las = run(&t, &las_opts);
    let las_jct: Vec<f64> = las
        .outcomes
        .iter()
        .map(|o| {
            let o = o.unwrap();
            (o.end - o.submit) as f64 / 1000.0
        })
        .collect();
    // Non-preemptive SJF cannot stop the long job already running; LAS can once
    // it has attained more than the first queue's 3,250 GPU-seconds — it has not
    // here (1,000 s), so the short jobs wait as in FIFO.
    assert!(sjf <= fifo, "{sjf} {fifo}");
    assert_eq!(
        las_jct[0],
        1000.0 + 0.0 * las.outcomes[0].unwrap().preemptions as f64
    );
    // A long job past the threshold is preempted for newcomers, paying the restart penalty.
    let long = "submit,duration,gpus,user\n0,5000,1,a\n3300,10,1,b\n";
    let mut o = opts(PolicyName::Tiresias, 1, 1);
    o.restart_penalty_s = 30.0;
    let t = parse(long, "t").unwrap();
    let r = run(&t, &o);
    let (a, b) = (r.outcomes[0].unwrap(), r.outcomes[1].unwrap());
    assert_eq!(a.preemptions, 1);
    assert_eq!((b.end - b.submit) / 1000, 10, "the newcomer ran at once");
    assert_eq!(
        a.end / 1000,
        5000 + 10 + 30,
        "the long job lost its restart penalty"
    );
    // Queueing counts the wait after the preemption too (10 s while the
    // newcomer ran), not only the wait before the first start (none).
    assert_eq!((a.first_start - a.submit, a.waited_ms), (0, 10_000));
    assert_eq!(b.waited_ms, 0);
}

#[test]
fn runs_are_deterministic_and_never_overcommit() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/philly-sample.csv"
    ))
    .unwrap();
    let trace = parse(&text, "philly-sample.csv").unwrap();
    for policy in [
        PolicyName::Fifo,
        PolicyName::Gpuq,
        PolicyName::SjfOracle,
        PolicyName::Tiresias,
    ] {
        let o = opts(policy, 2, 8);
        let a = report(&trace, &run(&trace, &o), policy.as_str(), "2x8");
        let b = report(&trace, &run(&trace, &o), policy.as_str(), "2x8");
        assert_eq!(a.jcts, b.jcts, "{policy:?} is deterministic");
        assert_eq!(a.jobs + a.excluded, trace.len());
        assert!(
            a.allocation.iter().all(|(_, r)| (0.0..=1.0).contains(r)),
            "{policy:?}"
        );
        assert!(a.jct_avg_s >= a.jct_median_s * 0.0 && a.jct_p99_s >= a.jct_median_s);
        assert!(a.wait_avg_s >= 0.0 && a.fairness_jain > 0.0 && a.fairness_jain <= 1.0);
    }
}

#[test]
fn the_shortcut_passes_decide_what_full_passes_decide() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/philly-sample.csv"
    ))
    .unwrap();
    let trace = parse(&text, "philly-sample.csv").unwrap();
    // Uniform clusters (on 2x4 the 8-GPU jobs run on two nodes) and heterogeneous ones.
    for cluster in [
        "1x8",
        "2x4",
        "4x8",
        "1x8:V100,3x2:T4,2x4",
        "2x4:A,2x4:B,4x1",
    ] {
        let cluster = Cluster::parse(cluster).unwrap();
        for policy in [
            PolicyName::Fifo,
            PolicyName::Gpuq,
            PolicyName::SjfOracle,
            PolicyName::Tiresias,
        ] {
            let short = on(policy, cluster.clone());
            let full = SimOptions {
                full_passes: true,
                ..short.clone()
            };
            let a = run(&trace, &short);
            let b = run(&trace, &full);
            let ends = |r: &gpuq_sim::engine::Run| {
                r.outcomes
                    .iter()
                    .map(|o| o.map(|o| (o.first_start, o.end)))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ends(&a), ends(&b), "{policy:?} on {cluster}");
        }
    }
}

#[test]
fn jobs_larger_than_a_node_run_on_whole_nodes_and_only_impossible_ones_are_left_out() {
    // 2 nodes of 8: the 16-GPU job takes both for 100 s; the 4-GPU job waits for it;
    // the 32-GPU job can never run.
    let trace = parse(
        "submit,duration,gpus,user\n0,100,16,a\n1,10,4,b\n2,10,32,c\n",
        "t",
    )
    .unwrap();
    let o = opts(PolicyName::Gpuq, 2, 8);
    let r = run(&trace, &o);
    let rep = report(&trace, &r, "gpuq", "2x8");
    assert_eq!((rep.jobs, rep.excluded, rep.multi_node_jobs), (2, 1, 1));
    let first = r.outcomes[0].unwrap();
    assert_eq!((first.nodes, first.end), (2, 100_000));
    assert_eq!(r.outcomes[1].unwrap().end, 110_000);
    assert!(r.outcomes[2].is_none());
    // On a cluster of two kinds the gang stays on one kind: the T4 pair is 4 GPUs, too few.
    let hetero = Cluster::parse("2x8:V100,2x2:T4").unwrap();
    let r = run(&trace, &on(PolicyName::Fifo, hetero));
    assert_eq!(r.outcomes[0].unwrap().nodes, 2);
    assert!(r.outcomes[2].is_none());
}

#[test]
fn tiresias_preempts_a_multi_node_job_for_newcomers() {
    // The 16-GPU job on both nodes passes 3,250 GPU-seconds after 203 s; an 8-GPU
    // newcomer at 3,300 s outranks it: it is stopped, and resumes after.
    let trace = parse("submit,duration,gpus,user\n0,5000,16,a\n3300,10,8,b\n", "t").unwrap();
    let mut o = opts(PolicyName::Tiresias, 2, 8);
    o.restart_penalty_s = 30.0;
    let r = run(&trace, &o);
    let (a, b) = (r.outcomes[0].unwrap(), r.outcomes[1].unwrap());
    assert_eq!((a.preemptions, a.nodes), (1, 2));
    assert_eq!((b.end - b.submit) / 1000, 10, "the newcomer ran at once");
    assert_eq!(a.end / 1000, 5000 + 10 + 30);
}

#[test]
fn tiresias_keeps_a_job_for_its_quantum_and_promotes_a_starved_one() {
    let long = "submit,duration,gpus,user\n0,5000,1,a\n3300,10,1,b\n";
    let t = parse(long, "t").unwrap();
    // Within its quantum the long job is not preempted: the newcomer waits.
    let mut o = opts(PolicyName::Tiresias, 1, 1);
    o.las_quantum_s = 10_000.0;
    let r = run(&t, &o);
    let (a, b) = (r.outcomes[0].unwrap(), r.outcomes[1].unwrap());
    assert_eq!((a.preemptions, a.end / 1000), (0, 5000));
    assert_eq!(b.waited_ms, 1_700_000);
    // PROMOTEKNOB 0.5: the long job, preempted at 3,300 s after a run of
    // 3,300 s, is back in the top queue at 4,950 s. The 10,000 s newcomer is
    // in the top queue too then (1,650 GPU-seconds): no preemption within a
    // queue. It drops to the second queue at 6,550 s (3,250 GPU-seconds),
    // and the promoted job takes the GPU back at once.
    let two = "submit,duration,gpus,user\n0,5000,1,a\n3300,10000,1,b\n";
    let t = parse(two, "t").unwrap();
    let mut o = opts(PolicyName::Tiresias, 1, 1);
    o.restart_penalty_s = 30.0;
    o.las_promote_knob = 0.5;
    let r = run(&t, &o);
    let (a, b) = (r.outcomes[0].unwrap(), r.outcomes[1].unwrap());
    assert_eq!(a.preemptions, 1);
    assert_eq!(a.end / 1000, 6550 + 1700 + 30, "{a:?}");
    assert_eq!(a.waited_ms, 3_250_000);
    assert_eq!(b.preemptions, 1, "{b:?}");
    assert_eq!(b.end / 1000, 8280 + 6750 + 30, "{b:?}");
    // Without promotion the long job waits for the whole newcomer.
    o.las_promote_knob = 0.0;
    let r = run(&t, &o);
    assert_eq!(r.outcomes[0].unwrap().end / 1000, 3300 + 10_000 + 1700 + 30);
}

#[test]
fn tiresias_preempts_only_what_lets_the_newcomer_start() {
    // Two nodes of 3 GPUs. Long 1-GPU jobs X (node 0) and Z (node 1) pass
    // 3,250 GPU-seconds at 3,250 s; 2-GPU jobs P and Q fill both nodes at
    // 3,300 s. A 2-GPU newcomer at 3,400 s outranks X and Z, and by GPU count
    // their two GPUs would do, but no node would have two free: nothing is
    // stopped. When P and Q fall to the second queue (1,625 s of 2 GPUs), one
    // of them makes room on its node and is the only job stopped.
    let trace = parse(
        "submit,duration,gpus,user\n\
         0,100000,1,x\n0,100,2,f\n0,100000,1,z\n\
         3300,100000,2,p\n3300,100000,2,q\n3400,10,2,n\n",
        "t",
    )
    .unwrap();
    let mut o = opts(PolicyName::Tiresias, 2, 3);
    o.las_promote_knob = 0.0;
    let r = run(&trace, &o);
    let out: Vec<_> = r.outcomes.iter().map(|o| o.unwrap()).collect();
    assert_eq!(
        (out[0].preemptions, out[2].preemptions),
        (0, 0),
        "X and Z ran on"
    );
    assert_eq!(out[5].first_start / 1000, 3300 + 1625, "{:?}", out[5]);
    let stopped: u32 = out.iter().map(|o| o.preemptions).sum();
    assert_eq!(stopped, 1, "{out:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Tiresias on random traces, with and without its quantum and
    /// promotion: every job finishes after at least its duration of running,
    /// no GPU is ever given twice, and the shortcut passes decide what full
    /// passes decide.
    #[test]
    fn tiresias_runs_every_job_and_never_overcommits(
        jobs in proptest::collection::vec(
            (0u32..20_000, 1u32..20_000, proptest::sample::select(vec![1u32, 1, 1, 2, 3, 4, 8])),
            1..40,
        ),
        cluster in proptest::sample::select(vec!["1x8", "2x4", "1x8:V100,2x2:T4,1x4"]),
        quantum in proptest::sample::select(vec![0.0, 600.0]),
        knob in proptest::sample::select(vec![0.0, 8.0]),
    ) {
        let mut text = String::from("submit,duration,gpus,user\n");
        let mut jobs = jobs;
        jobs.sort();
        for (i, (submit, duration, gpus)) in jobs.iter().enumerate() {
            text.push_str(&format!("{submit},{duration},{gpus},u{}\n", i % 3));
        }
        let trace = parse(&text, "t").unwrap();
        let mut o = on(PolicyName::Tiresias, Cluster::parse(cluster).unwrap());
        o.las_quantum_s = quantum;
        o.las_promote_knob = knob;
        o.sample_every_s = 60.0;
        let r = run(&trace, &o);
        for (j, out) in trace.iter().zip(&r.outcomes) {
            let out = out.expect("every job fits these clusters");
            proptest::prop_assert!(out.end - out.first_start >= (j.duration_s * 1000.0) as i64);
            proptest::prop_assert!(out.first_start >= out.submit && out.waited_ms >= 0);
        }
        proptest::prop_assert!(r.allocation.iter().all(|&(_, used)| used <= r.total_gpus));
        let full = run(&trace, &SimOptions { full_passes: true, ..o.clone() });
        let ends = |r: &gpuq_sim::engine::Run| {
            r.outcomes.iter().map(|o| o.map(|o| (o.first_start, o.end))).collect::<Vec<_>>()
        };
        proptest::prop_assert_eq!(ends(&r), ends(&full));
    }
}

#[test]
fn gpuq_preempts_preemptible_lower_class_jobs_as_the_daemon_does() {
    // One node of 2 GPUs. A low-priority job holds both from 0 s for 1,000 s;
    // a high-priority 1-GPU job arrives at 100 s and runs at once if the low
    // one is preemptible (which then restarts at 110 s with the restart
    // penalty), else waits for it.
    let run_with = |preemptible: &str| {
        let text = format!(
            "submit,duration,gpus,user,priority,preemptible\n\
             0,1000,2,a,low,{preemptible}\n100,10,1,b,high,false\n"
        );
        let trace = parse(&text, "t").unwrap();
        let mut o = opts(PolicyName::Gpuq, 1, 2);
        o.restart_penalty_s = 30.0;
        let r = run(&trace, &o);
        (r.outcomes[0].unwrap(), r.outcomes[1].unwrap())
    };
    let (low, high) = run_with("true");
    assert_eq!((high.first_start, high.end), (100_000, 110_000));
    assert_eq!(low.preemptions, 1);
    assert_eq!(low.end, 110_000 + 900_000 + 30_000, "{low:?}");
    let (low, high) = run_with("false");
    assert_eq!((low.preemptions, low.end), (0, 1_000_000));
    assert_eq!(high.first_start, 1_000_000);
}
