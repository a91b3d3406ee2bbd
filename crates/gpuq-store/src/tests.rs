use super::*;

fn new_job(argv: &[&str]) -> NewJob {
    NewJob {
        spec: JobSpec {
            command: Some(argv.iter().map(|s| s.to_string()).collect()),
            gpus: 1,
            ..Default::default()
        },
        user: "alice".into(),
        cwd: "/tmp".into(),
        env: BTreeMap::from([("A".to_string(), "1".to_string())]),
        idempotency_key: None,
        repro: None,
    }
}

#[test]
fn a_job_goes_through_its_life_with_events() {
    let mut store = Store::open_in_memory().unwrap();
    let job = store.submit(&new_job(&["echo", "hi"]), 1000).unwrap();
    assert_eq!(
        (job.id, job.state, job.attempt, job.command.as_str()),
        (1, JobState::Queued, 0, "echo hi")
    );

    let attempts = store
        .start(
            &[StartRecord {
                job: 1,
                node: "local".into(),
                gpus: vec![2],
                rate: None,
                runtime: None,
            }],
            2000,
        )
        .unwrap();
    assert_eq!(attempts, vec![1]);
    let running = store.job(1).unwrap().unwrap();
    assert_eq!(
        (running.state, running.gpus.clone(), running.started_at),
        (JobState::Running, vec![2], Some(2000))
    );

    let end = AttemptEnd {
        job: 1,
        attempt: 1,
        exit_code: Some(0),
        signal: None,
        next_state: JobState::Succeeded,
        reason: "exit 0".into(),
        failures: 0,
        eligible_at: None,
        event: "succeeded".into(),
        gpu_usage: None,
        host_usage: Some(gpuq_core::job::HostUsage {
            oom_killed: false,
            memory_peak_bytes: Some(9 << 30),
            memory_limit_bytes: Some(64 << 30),
            cpu_seconds: Some(11_520.5),
            cpus: Some(8),
        }),
        held_by: None,
    };
    store.finish_attempt(&end, 3000).unwrap();
    // The cgroup's figures come back with the attempt, as they were counted.
    assert_eq!(
        store.attempts(1).unwrap()[0].host_usage,
        end.host_usage,
        "peak, limit, CPU time and cores of the attempt"
    );
    let done = store.job(1).unwrap().unwrap();
    assert_eq!(
        (done.state, done.exit_code, done.ended_at),
        (JobState::Succeeded, Some(0), Some(3000))
    );

    let kinds: Vec<String> = store
        .events(1)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["submitted", "started", "succeeded"]);
    assert_eq!(store.attempts(1).unwrap()[0].ended_at, Some(3000));
    let launch = store.launch_info(1).unwrap();
    assert_eq!(
        (launch.argv, launch.env["A"].as_str()),
        (vec!["echo".to_string(), "hi".to_string()], "1")
    );
}

#[test]
fn starting_a_job_twice_is_refused() {
    let mut store = Store::open_in_memory().unwrap();
    store.submit(&new_job(&["true"]), 0).unwrap();
    let start = [StartRecord {
        job: 1,
        node: "local".into(),
        gpus: vec![],
        rate: None,
        runtime: None,
    }];
    store.start(&start, 1).unwrap();
    assert!(
        store.start(&start, 2).is_err(),
        "a running job must not start again"
    );
    assert_eq!(store.attempts(1).unwrap().len(), 1);
}

#[test]
fn retry_requeues_and_the_next_attempt_counts_up() {
    let mut store = Store::open_in_memory().unwrap();
    store.submit(&new_job(&["false"]), 0).unwrap();
    store
        .start(
            &[StartRecord {
                job: 1,
                node: "local".into(),
                gpus: vec![0],
                rate: None,
                runtime: None,
            }],
            1,
        )
        .unwrap();
    let end = AttemptEnd {
        job: 1,
        attempt: 1,
        exit_code: Some(1),
        signal: None,
        next_state: JobState::Queued,
        reason: "exit 1".into(),
        failures: 1,
        eligible_at: Some(10),
        event: "retry".into(),
        gpu_usage: None,
        host_usage: None,
        held_by: None,
    };
    store.finish_attempt(&end, 2).unwrap();
    assert_eq!(store.job(1).unwrap().unwrap().state, JobState::Queued);
    let n = store
        .start(
            &[StartRecord {
                job: 1,
                node: "local".into(),
                gpus: vec![1],
                rate: None,
                runtime: None,
            }],
            3,
        )
        .unwrap();
    assert_eq!(n, vec![2]);
}

#[test]
fn reopening_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuq.db");
    {
        let mut store = Store::open(&path).unwrap();
        store.submit(&new_job(&["a"]), 0).unwrap();
        store
            .end_queued(&[(1, JobState::Cancelled, "cancelled by alice".into())], 5)
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let job = store.job(1).unwrap().unwrap();
    assert_eq!(
        (job.state, job.reason.as_deref()),
        (JobState::Cancelled, Some("cancelled by alice"))
    );
    assert_eq!(
        store
            .list(&ListFilter {
                states: vec![JobState::Cancelled],
                ..Default::default()
            })
            .unwrap()
            .len(),
        1
    );
    assert!(store
        .list(&ListFilter {
            states: vec![JobState::Queued],
            ..Default::default()
        })
        .unwrap()
        .is_empty());
}

#[test]
fn an_idempotency_key_makes_a_repeated_submit_return_the_first_job() {
    let mut store = Store::open_in_memory().unwrap();
    let mut job = new_job(&["true"]);
    job.idempotency_key = Some("k1".into());
    let first = store.submit(&job, 0).unwrap();
    let again = store.submit(&job, 5).unwrap();
    assert_eq!(first.id, again.id);
    assert_eq!(store.list(&ListFilter::default()).unwrap().len(), 1);
    job.user = "bob".into();
    let bobs = store.submit(&job, 6).unwrap();
    assert_ne!(
        bobs.id, first.id,
        "a key is per user: bob does not get alice's job"
    );
}

#[test]
fn hold_stop_meta_and_requeue_are_recorded() {
    let mut store = Store::open_in_memory().unwrap();
    store.submit(&new_job(&["true"]), 0).unwrap();
    store.set_held(1, Some("bob"), "bob", 1).unwrap();
    assert_eq!(
        store.job(1).unwrap().unwrap().held_by.as_deref(),
        Some("bob")
    );
    store.set_held(1, None, "alice", 2).unwrap();
    store
        .start(
            &[StartRecord {
                job: 1,
                node: "n".into(),
                gpus: vec![],
                rate: None,
                runtime: None,
            }],
            3,
        )
        .unwrap();
    store
        .set_stop(1, 1, "{\"cancel\":\"bob\"}", "cancel by bob", 4)
        .unwrap();
    assert_eq!(
        store.stop_of(1, 1).unwrap().as_deref(),
        Some("{\"cancel\":\"bob\"}")
    );
    store.end_queued(&[], 5).unwrap();
    store.set_meta("drained", "1").unwrap();
    store.set_meta("drained", "0").unwrap();
    assert_eq!(store.meta("drained").unwrap().as_deref(), Some("0"));
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn a_pass_is_committed_whole_or_not_at_all() {
    let mut store = Store::open_in_memory().unwrap();
    store.submit(&new_job(&["a"]), 0).unwrap();
    store.submit(&new_job(&["b"]), 0).unwrap();
    store
        .start(
            &[StartRecord {
                job: 2,
                node: "n".into(),
                gpus: vec![],
                rate: None,
                runtime: None,
            }],
            1,
        )
        .unwrap();
    // Job 2 is already running: starting it again must fail, and take the failure of job 1 with it.
    let fails = [(1, JobState::Failed, "dependency job 9 failed".to_string())];
    let again = [StartRecord {
        job: 2,
        node: "n".into(),
        gpus: vec![],
        rate: None,
        runtime: None,
    }];
    assert!(store.apply_pass(&fails, &again, 2).is_err());
    assert_eq!(
        store.job(1).unwrap().unwrap().state,
        JobState::Queued,
        "nothing of the pass was written"
    );
    assert_eq!(store.apply_pass(&fails, &[], 3).unwrap(), Vec::<u32>::new());
    assert_eq!(store.job(1).unwrap().unwrap().state, JobState::Failed);
}
