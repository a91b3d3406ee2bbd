//! `gpuq explain` and the reason column of `gpuq ls`: the rule that holds each
//! waiting job, in words.

mod common;
use common::*;

fn explain(d: &Daemon, id: u64) -> String {
    let out = d.ok(&["explain", &id.to_string()]);
    out.trim()
        .strip_prefix(&format!("job {id} "))
        .unwrap_or(&out)
        .to_string()
}

#[test]
fn every_waiting_job_has_an_honest_explanation() {
    let d = Daemon::start("sim:4");
    let user = d.show(d.submit(&["--", "true"]))["user"]
        .as_str()
        .unwrap()
        .to_string();
    let a = d.submit(&["--gpus", "2", "--time-limit", "1h", "--", "sleep", "30"]);
    let b = d.submit(&["--gpus", "2", "--", "sleep", "30"]);
    d.wait_running(b);
    let big = d.submit(&["--gpus", "2", "--", "true"]);
    let dep = d.submit(&["--after", &big.to_string(), "--", "true"]);
    let held = d.submit(&["--gpus", "1", "--", "true"]);
    d.ok(&["hold", &held.to_string()]);

    let why = explain(&d, big);
    assert!(
        why.starts_with(&format!(
            "waits for 2 GPUs: all 4 are in use by jobs {a} ({user}, ends by "
        )),
        "{why}"
    );
    assert!(
        why.contains(&format!(
            "at its time limit) and {b} ({user}, no time limit)"
        )),
        "{why}"
    );
    assert!(why.contains("it is next"), "{why}");
    assert_eq!(
        explain(&d, dep),
        format!("waits for job {big} to succeed (it is queued)")
    );
    assert!(explain(&d, held).starts_with(&format!("is held by {user}")));
    assert!(explain(&d, a).starts_with("is running on GPUs"));

    let table = d.ok(&["ls"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("{big} ")))
        .unwrap();
    assert!(row.contains("waits for 2 GPUs"), "{table}");

    d.ok(&["drain"]);
    d.ok(&["release", &held.to_string()]);
    assert!(explain(&d, held).starts_with("waits: the queue is drained for maintenance"));
    let json: serde_json::Value =
        serde_json::from_str(&d.ok(&["explain", "--json", &dep.to_string()])).unwrap();
    assert_eq!(json["id"], dep);
    d.ok(&["cancel", &a.to_string(), &b.to_string()]);
}

#[test]
fn a_job_that_would_delay_the_reserved_one_says_so() {
    let d = Daemon::start("sim:2");
    let a = d.submit(&["--gpus", "1", "--time-limit", "10m", "--", "sleep", "30"]);
    d.wait_running(a);
    let head = d.submit(&["--gpus", "2", "--", "true"]);
    let long = d.submit(&["--gpus", "1", "--", "true"]);
    let why = explain(&d, long);
    assert!(
        why.contains(&format!("could delay job {head}, which has them reserved")),
        "{why}"
    );
    let short = d.submit(&["--gpus", "1", "--time-limit", "1m", "--", "true"]);
    assert_eq!(
        d.wait(short)["state"],
        "succeeded",
        "a job that ends before the reservation backfills"
    );
    d.ok(&["cancel", &a.to_string()]);
}
