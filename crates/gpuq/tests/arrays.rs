//! Job arrays end to end: a real daemon, real tasks, driven through the CLI.
//! `--array 0-5%2` runs each index once with GPUQ_ARRAY_INDEX and never more
//! than 2 at once, even across a `kill -9` of the daemon; one id addresses the
//! whole array (cancel, hold, release, requeue, wait, ls, show), `ID.K` one task.

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// A task that records its index, the array's variables and its start and end
/// (ns) in `file`, and sleeps `secs` in between.
fn recording_task(file: &Path, secs: &str) -> String {
    let f = file.display();
    format!(
        "echo \"start $GPUQ_ARRAY_INDEX $(date +%s%N) $GPUQ_ARRAY_ID $GPUQ_ARRAY_SIZE $GPUQ_JOB_ID\" >> {f}; \
         sleep {secs}; echo \"end $GPUQ_ARRAY_INDEX $(date +%s%N)\" >> {f}"
    )
}

/// Per index: its starts and ends (ns), from the file of `recording_task`.
/// Each index's runs: start and end, in ns.
type Spans = BTreeMap<u32, Vec<(u128, u128)>>;

fn recorded(file: &Path) -> (Spans, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut starts: BTreeMap<u32, Vec<u128>> = BTreeMap::new();
    let mut spans: Spans = BTreeMap::new();
    let mut lines = Vec::new();
    for line in text.lines() {
        let f: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        let (k, t): (u32, u128) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        match f[0].as_str() {
            "start" => starts.entry(k).or_default().push(t),
            _ => {
                let s = starts
                    .get_mut(&k)
                    .and_then(|v| v.pop())
                    .expect("an end after its start");
                spans.entry(k).or_default().push((s, t));
            }
        }
        lines.push(f);
    }
    (spans, lines)
}

/// The most intervals that overlap at one instant.
fn most_at_once(spans: &[(u128, u128)]) -> usize {
    let mut edges: Vec<(u128, i32)> = spans.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    // At the same instant an end comes before a start: touching is not overlapping.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// The array's tasks as `gpuq ls ID --json` lists them.
fn tasks(d: &Daemon, array: u64) -> Vec<Value> {
    d.json(&["ls", &array.to_string(), "--json"])
        .as_array()
        .unwrap()
        .clone()
}

fn states(d: &Daemon, array: u64) -> Vec<String> {
    tasks(d, array)
        .iter()
        .map(|t| t["state"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_index_runs_once_and_never_more_than_the_limit_at_once() {
    let d = Daemon::start("sim:4");
    let file = d.path().join("ran.txt");
    let out = d.json(&[
        "submit",
        "--json",
        "--gpus",
        "1",
        "--name",
        "infer",
        "--array",
        "0-5%2",
        "--",
        "sh",
        "-c",
        &recording_task(&file, "0.6"),
    ]);
    let id = out["id"].as_u64().unwrap();
    assert_eq!(
        (out["size"].as_u64(), out["limit"].as_u64()),
        (Some(6), Some(2)),
        "{out}"
    );
    assert_eq!(out["indices"], "0-5");
    let listed = out["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 6, "{out}");
    assert_eq!(
        listed[0]["id"].as_u64(),
        Some(id),
        "the array's id is its first task's"
    );

    // While it runs: never more than 2 tasks running, as the listing shows them.
    let mut most_listed = 0;
    let ended = eventually(Duration::from_secs(60), || {
        let states = states(&d, id);
        most_listed = most_listed.max(states.iter().filter(|s| *s == "running").count());
        states.iter().all(|s| s == "succeeded")
    });
    assert!(ended, "{:?}\n{}", states(&d, id), d.daemon_log_tail(30));
    assert!(
        most_listed <= 2,
        "{most_listed} tasks were listed running at once"
    );

    let (spans, lines) = recorded(&file);
    assert_eq!(
        spans.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert!(
        spans.values().all(|v| v.len() == 1),
        "each index ran exactly once: {spans:?}"
    );
    let all: Vec<(u128, u128)> = spans.values().flatten().copied().collect();
    assert!(most_at_once(&all) <= 2, "more than 2 at once: {lines:?}");
    assert_eq!(
        most_at_once(&all),
        2,
        "the 4 GPUs let 2 run together: {lines:?}"
    );
    let ts = tasks(&d, id);
    for l in lines.iter().filter(|l| l[0] == "start") {
        let k: usize = l[1].parse().unwrap();
        assert_eq!(l[3], id.to_string(), "GPUQ_ARRAY_ID: {l:?}");
        assert_eq!(l[4], "6", "GPUQ_ARRAY_SIZE: {l:?}");
        assert_eq!(l[5], ts[k]["id"].to_string(), "task {k} is its own job");
        assert_eq!(ts[k]["array_index"].as_u64(), Some(k as u64));
        assert_eq!(ts[k]["array_id"].as_u64(), Some(id));
        assert_eq!(ts[k]["name"], format!("infer[{k}]"));
    }

    // One row for the array in `ls`, one per task with `ls ID`; ID.K everywhere.
    let ls = d.ok(&["ls"]);
    assert_eq!(ls.lines().count(), 2, "{ls}");
    assert!(
        ls.contains(&format!("{id}.[0-5%2]")) && ls.contains("6 succeeded"),
        "{ls}"
    );
    let ls_tasks = d.ok(&["ls", &id.to_string()]);
    assert!(ls_tasks.contains(&format!("{id}.5 ")), "{ls_tasks}");
    assert_eq!(d.gpuq(&["wait", &id.to_string()]).status.code(), Some(0));
    let log = d.ok(&["logs", &format!("{id}.4")]);
    assert!(
        log.is_empty(),
        "the task wrote to its file, not its log: {log}"
    );
    let shown = d.json(&["show", &format!("{id}.3"), "--json"]);
    assert_eq!(shown["array_index"], 3, "{shown}");
    let array = d.ok(&["show", &id.to_string()]);
    assert!(
        array.contains("6 tasks [0-5], at most 2 at once"),
        "{array}"
    );
    // The plain job listing still has every task, with its array fields.
    let all = d.json(&["ls", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 6);
    assert!(all
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["array_id"].as_u64() == Some(id)));
}

#[test]
fn the_limit_is_explained_and_cancel_takes_one_task_or_the_rest() {
    let d = Daemon::start("sim:4");
    let id = d.submit(&["--array", "0-5%2", "--", "sleep", "30"]);
    let two = eventually(Duration::from_secs(10), || {
        states(&d, id).iter().filter(|s| *s == "running").count() == 2
    });
    assert!(two, "{:?}", states(&d, id));
    let why = d.ok(&["explain", &format!("{id}.4")]);
    assert!(
        why.contains(&format!("its array {id} runs at most 2 tasks at once")),
        "{why}"
    );
    let whole = d.ok(&["explain", &id.to_string()]);
    assert!(
        whole.contains(&format!(
            "tasks {id}.[2-5] wait: its array {id} runs at most 2"
        )),
        "{whole}"
    );

    // ID.3: that task only.
    let out = d.ok(&["cancel", &format!("{id}.3")]);
    assert!(out.contains(&format!("job {id}.3: cancelled")), "{out}");
    assert_eq!(
        states(&d, id),
        [
            "running",
            "running",
            "queued",
            "cancelled",
            "queued",
            "queued"
        ]
    );
    // ID: everything that has not ended; the queued tasks never start.
    let out = d.ok(&["cancel", &id.to_string()]);
    assert!(
        out.contains(&format!("array {id}: 5 tasks [0-2,4-5] cancelled")),
        "{out}"
    );
    let (status, _) = d.wait_within(id, Duration::from_secs(20));
    assert_eq!(status, Some(1), "a cancelled array did not succeed");
    let ts = tasks(&d, id);
    assert!(ts.iter().all(|t| t["state"] == "cancelled"), "{ts:?}");
    for k in [2, 3, 4, 5] {
        assert_eq!(ts[k]["attempt"], 0, "task {k} never started");
    }
    let again = d.gpuq(&["cancel", &id.to_string()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("already ended"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn hold_and_release_act_on_the_whole_array_or_one_task() {
    let d = Daemon::start("sim:4");
    let blocker = d.submit(&["--gpus", "4", "--", "sleep", "30"]);
    d.wait_running(blocker);
    let id = d.submit(&["--gpus", "1", "--array", "0-3", "--", "true"]);
    let out = d.ok(&["hold", &format!("{id}.2")]);
    assert!(out.contains(&format!("job {id}.2: held by")), "{out}");
    let out = d.ok(&["hold", &id.to_string()]);
    assert!(
        out.contains(&format!("array {id}: 3 tasks [0-1,3] held")),
        "{out}"
    );
    let ts = tasks(&d, id);
    assert!(ts.iter().all(|t| t["held_by"].is_string()), "{ts:?}");
    let held = d.gpuq(&["hold", &id.to_string()]);
    assert_eq!(held.status.code(), Some(2), "nothing left to hold");

    // The GPUs free up; held tasks still do not start.
    d.ok(&["cancel", &blocker.to_string()]);
    d.wait_within(blocker, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(states(&d, id), ["queued"; 4]);
    let why = d.ok(&["explain", &id.to_string()]);
    assert!(why.contains(&format!("`gpuq release {id}`")), "{why}");

    let out = d.ok(&["release", &id.to_string()]);
    assert!(
        out.contains(&format!("array {id}: 4 tasks [0-3] released")),
        "{out}"
    );
    let (status, _) = d.wait_within(id, Duration::from_secs(20));
    assert_eq!(status, Some(0));
    assert_eq!(states(&d, id), ["succeeded"; 4]);
}

#[test]
fn wait_succeeds_only_when_every_task_did_and_requeue_retries_the_failed() {
    let d = Daemon::start("sim:2");
    // Task 1 fails on its first attempt only.
    let id = d.submit(&[
        "--array",
        "0-3",
        "--",
        "sh",
        "-c",
        "[ \"$GPUQ_ARRAY_INDEX\" = 1 ] && [ \"$GPUQ_ATTEMPT\" = 1 ] && exit 3; exit 0",
    ]);
    let out = output_within(
        &mut d.cmd(&["wait", &id.to_string()]),
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("3 succeeded, 1 failed"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains(&format!("task {id}.1: failed")),
        "{}",
        stdout(&out)
    );
    let one = d.gpuq(&["wait", &format!("{id}.1")]);
    assert_eq!(one.status.code(), Some(3), "one task: its own exit code");
    assert_eq!(d.gpuq(&["wait", &format!("{id}.2")]).status.code(), Some(0));

    let out = d.ok(&["requeue", &id.to_string()]);
    assert!(
        out.contains(&format!("array {id}: 1 task [1] queued again")),
        "{out}"
    );
    let (status, _) = d.wait_within(id, Duration::from_secs(30));
    assert_eq!(status, Some(0));
    let attempts: Vec<u64> = tasks(&d, id)
        .iter()
        .map(|t| t["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2, 1, 1], "only the failed task ran again");
}

#[test]
fn bad_arrays_are_refused_with_the_field_and_nothing_is_queued() {
    let d = Daemon::start_with_config(
        "sim:2",
        "[scheduler]\nmax_array_tasks = 4\ndefault_max_queued = 5\n",
    );
    for (bad, says) in [
        ("5-3", "write 3-5"),
        ("0-9%0", "%1"),
        ("x", "not a whole number"),
        ("0-20000", "at most 10000"),
        ("1,1", "given twice"),
        ("", "empty"),
    ] {
        let out = d.gpuq(&["submit", "--array", bad, "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(
            e.contains("--array") && e.contains(says) && e.contains("write it like 0-99"),
            "{bad:?}: {e}"
        );
    }
    // Over the daemon's own limit, and over the queued-jobs quota counted in tasks.
    let out = d.gpuq(&["submit", "--array", "0-4", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("array: 5 tasks; this daemon takes at most 4"),
        "{}",
        stderr(&out)
    );
    d.ok(&["drain"]);
    let first = d.submit(&["--array", "0-3", "--", "true"]);
    let out = d.gpuq(&["submit", "--array", "0-1", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("4 queued jobs and this array adds 2 tasks"),
        "{}",
        stderr(&out)
    );

    // A spec file takes `array:` too, and names it when it is wrong.
    let spec = d.path().join("bad.yaml");
    std::fs::write(&spec, "command: [\"true\"]\narray: \"3-1\"\n").unwrap();
    let out = d.gpuq(&["submit", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("array") && stderr(&out).contains("write 1-3"),
        "{}",
        stderr(&out)
    );
    // `gpuq run` follows one job: an array is refused before anything is queued.
    let out = d.gpuq(&["run", "--array", "0-1", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("gpuq submit --array"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        d.json(&["ls", "--json"]).as_array().unwrap().len(),
        4,
        "only the first array was queued"
    );

    let good = d.path().join("good.yaml");
    std::fs::write(&good, "command: [\"true\"]\narray: 7\n").unwrap();
    d.ok(&["cancel", &first.to_string()]);
    d.ok(&["undrain"]);
    let id = d.submit(&[good.to_str().unwrap()]);
    let (status, _) = d.wait_within(id, Duration::from_secs(20));
    assert_eq!(status, Some(0));
    assert_eq!(tasks(&d, id)[0]["array_index"], 7);

    // References that name nothing are bad input, with the fix.
    for (arg, says) in [
        (
            format!("{id}.3"),
            format!("array {id} has no task 3; its tasks are 7"),
        ),
        (
            format!("{}.0", first + 1),
            format!(
                "job {} is not an array: it is task 1 of array {first}",
                first + 1
            ),
        ),
        ("99.1".to_string(), "array 99 does not exist".to_string()),
        ("1.x".to_string(), "ID.K for task K of array ID".to_string()),
    ] {
        let out = d.gpuq(&["cancel", &arg]);
        assert_eq!(out.status.code(), Some(2), "{arg}: {}", stderr(&out));
        assert!(stderr(&out).contains(&says), "{arg}: {}", stderr(&out));
    }
}

#[test]
fn another_user_cannot_touch_someones_array() {
    let d = Daemon::start_with_config("sim:2", "single_user = true\n");
    let token = |user: &str| {
        d.ok(&["token", "create", "--user", user])
            .trim()
            .to_string()
    };
    let (bob, carol) = (token("bob"), token("carol"));
    let as_user = |token: &str, args: &[&str]| {
        let mut c = d.cmd(args);
        c.env("GPUQ_TOKEN", token);
        c.output().unwrap()
    };
    let out = as_user(&bob, &["submit", "--array", "0-2", "--", "sleep", "30"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    for args in [
        vec!["cancel", id.as_str()],
        vec!["hold", id.as_str()],
        vec!["requeue", id.as_str()],
    ] {
        let refused = as_user(&carol, &args);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&refused)
        );
        assert!(
            stderr(&refused).contains("belongs to bob"),
            "{args:?}: {}",
            stderr(&refused)
        );
    }
    let task = format!("{id}.1");
    let refused = as_user(&carol, &["cancel", &task]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("belongs to bob"),
        "{}",
        stderr(&refused)
    );
    let id: u64 = id.parse().unwrap();
    assert!(
        tasks(&d, id)
            .iter()
            .all(|t| t["state"] != "cancelled" && t["held_by"].is_null()),
        "nothing changed"
    );
    // Its owner may; so may an admin (the daemon's own token).
    let out = as_user(&bob, &["cancel", &task]);
    assert!(out.status.success(), "{}", stderr(&out));
    d.ok(&["cancel", &id.to_string()]);
    d.wait_within(id, Duration::from_secs(20));
}

#[test]
fn a_killed_daemon_keeps_the_limit_and_runs_no_task_twice() {
    let mut d = Daemon::start("sim:4");
    let file = d.path().join("ran.txt");
    let id = d.submit(&[
        "--gpus",
        "1",
        "--array",
        "0-7%2",
        "--",
        "sh",
        "-c",
        &recording_task(&file, "1.2"),
    ]);
    // Half done: some tasks ended, two running.
    let half = eventually(Duration::from_secs(30), || {
        let s = states(&d, id);
        s.iter().filter(|s| *s == "succeeded").count() >= 2
            && s.iter().filter(|s| *s == "running").count() == 2
    });
    assert!(half, "{:?}", states(&d, id));
    d.kill();
    // The two running tasks carry on under their supervisors; nothing starts meanwhile.
    std::thread::sleep(Duration::from_millis(300));
    d.restart();
    let (status, _) = d.wait_within(id, Duration::from_secs(60));
    assert_eq!(
        status,
        Some(0),
        "{:?}\n{}",
        states(&d, id),
        d.daemon_log_tail(30)
    );
    let (spans, lines) = recorded(&file);
    assert_eq!(
        spans.keys().copied().collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>(),
        "{lines:?}"
    );
    assert!(
        spans.values().all(|v| v.len() == 1),
        "a task ran twice: {lines:?}"
    );
    let all: Vec<(u128, u128)> = spans.values().flatten().copied().collect();
    assert!(
        most_at_once(&all) <= 2,
        "more than 2 at once across the restart: {lines:?}"
    );
    assert!(tasks(&d, id).iter().all(|t| t["state"] == "succeeded"));
}

#[test]
fn after_an_array_waits_for_every_task_and_after_id_k_for_one() {
    let d = Daemon::start("sim:2");
    let id = d.submit(&["--array", "0-2%1", "--", "sleep", "0.4"]);
    let after_all = d.submit(&["--after", &id.to_string(), "--", "true"]);
    let after_one = d.submit(&["--after", &format!("{id}.0"), "--", "true"]);
    let why = d.ok(&["explain", &after_all.to_string()]);
    assert!(
        why.contains(&format!("waits for task {id}.0 to succeed")),
        "{why}"
    );
    let (status, all) = d.wait_within(after_all, Duration::from_secs(30));
    assert_eq!(status, Some(0), "{all}");
    let (status, one) = d.wait_within(after_one, Duration::from_secs(30));
    assert_eq!(status, Some(0), "{one}");
    let ts = tasks(&d, id);
    let ended = |k: usize| ts[k]["ended_at"].as_i64().unwrap();
    assert!(
        all["started_at"].as_i64().unwrap() >= ended(2),
        "after the last task: {all} {ts:?}"
    );
    assert!(
        one["started_at"].as_i64().unwrap() >= ended(0),
        "after task 0: {one}"
    );

    // A task that fails fails what waits for the array.
    let bad = d.submit(&["--array", "0-1", "--", "sh", "-c", "exit $GPUQ_ARRAY_INDEX"]);
    let dep = d.submit(&["--after", &bad.to_string(), "--", "true"]);
    let (status, dep) = d.wait_within(dep, Duration::from_secs(30));
    assert_ne!(status, Some(0));
    assert_eq!(dep["state"], "failed", "{dep}");
    assert!(dep["reason"].as_str().unwrap().contains("failed"), "{dep}");
    let out = d.gpuq(&["submit", "--after", "99.1", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--after 99.1: array 99 does not exist"),
        "{}",
        stderr(&out)
    );
}
