//! Sharing the box: fair share between users, quotas, and `gpuq usage`.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn after_a_heavy_user_the_light_user_goes_first() {
    // The users here are labels: jobs run as the daemon's user.
    let d = Daemon::start_with_config("sim:1", "single_user = true\n");
    // alice has used the GPU; bob has not.
    let used = d.submit_as("alice", 1, &["sleep", "0.5"]);
    assert_eq!(d.wait(used)["state"], "succeeded");
    let blocker = d.submit_as("carol", 1, &["sleep", "0.5"]);
    assert!(eventually(Duration::from_secs(10), || d.show(blocker)
        ["state"]
        == "running"));
    let alice = d.submit_as("alice", 1, &["true"]);
    let bob = d.submit_as("bob", 1, &["true"]);
    let (a, b) = (d.wait(alice), d.wait(bob));
    assert!(
        b["started_at"].as_i64() < a["started_at"].as_i64(),
        "bob (no usage) starts before alice, who came first"
    );

    let usage: serde_json::Value = serde_json::from_str(&d.ok(&["usage", "--json"])).unwrap();
    let user = |name: &str| {
        usage["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["user"] == name)
            .unwrap()
            .clone()
    };
    assert!(user("alice")["gpu_hours"].as_f64().unwrap() > 0.5 / 3600.0 * 0.9);
    assert!(user("alice")["standing"].as_f64() > user("bob")["standing"].as_f64());
    let table = d.ok(&["usage"]);
    assert!(table.contains("alice") && table.contains("TURN"), "{table}");
}

#[test]
fn quotas_cap_gpus_at_once_and_queued_jobs() {
    let d = Daemon::start_with_config(
        "sim:4",
        "single_user = true\n[scheduler]\ndefault_max_gpus = 2\n[users.bob]\nmax_gpus = 3\nmax_queued = 2\n[projects.nlp]\nmax_queued = 1\n",
    );
    let a1 = d.submit_as("alice", 2, &["sleep", "1"]);
    let a2 = d.submit_as("alice", 1, &["true"]);
    let b1 = d.submit_as("bob", 2, &["sleep", "1"]);
    d.wait_running(b1);
    assert_eq!(
        d.show(a2)["state"],
        "queued",
        "alice holds her 2 GPUs; the free ones are not hers to take"
    );
    let why = d.ok(&["explain", &a2.to_string()]);
    assert!(
        why.contains("alice already uses 2 of a quota of 2 GPUs"),
        "{why}"
    );
    assert_eq!(d.wait(a1)["state"], "succeeded");
    assert_eq!(d.wait(a2)["state"], "succeeded");

    // bob: at most 2 queued jobs (drained, so nothing starts meanwhile).
    d.ok(&["drain"]);
    let q1 = d.submit_as("bob", 2, &["true"]);
    let q2 = d.submit_as("bob", 2, &["true"]);
    let body = d.post_job(r#"{"spec":{"command":["true"],"gpus":1},"cwd":"/tmp","user":"bob"}"#);
    assert!(
        body.contains("bob already has 2 queued jobs, the most allowed (2)"),
        "{body}"
    );
    let nlp = r#"{"spec":{"command":["true"],"project":"nlp"},"cwd":"/tmp","user":"carol"}"#;
    assert!(d.post_job(nlp).contains("\"state\":\"queued\""));
    assert!(d
        .post_job(nlp)
        .contains("project nlp already has 1 queued jobs, the most allowed (1)"));
    d.ok(&["undrain"]);
    for id in [q1, q2] {
        assert_eq!(d.wait(id)["state"], "succeeded");
    }
}

#[test]
fn one_users_flood_stops_at_the_default_queue_cap_and_others_still_submit() {
    // Nothing about queues in gpuq.toml: the default cap applies. (Users are labels.)
    let d = Daemon::start_with_config("sim:1", "single_user = true\n");
    d.ok(&["drain"]);
    // An array counts its tasks: 10,000 of them fill the default in one submit.
    submit_array_as(&d, "alice", "0-9999");
    let one_more = d.post_job(r#"{"spec":{"command":["true"]},"cwd":"/tmp","user":"alice"}"#);
    assert!(
        one_more.contains(
            "alice already has 10000 queued jobs, the most allowed (10000) by `[scheduler] default_max_queued` in gpuq.toml"
        ),
        "{one_more}"
    );
    // The command line says the same with exit status 2 (its user is another label).
    let me = d.json(&["whoami", "--json"])["user"]
        .as_str()
        .unwrap()
        .to_string();
    let mine = submit_array_as(&d, &me, "0-9999");
    let out = d.gpuq(&["submit", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("default_max_queued"),
        "{}",
        stderr(&out)
    );
    // Held jobs still count; cancelling makes room.
    d.ok(&["hold", &format!("{mine}.5")]);
    assert_eq!(d.gpuq(&["submit", "--", "true"]).status.code(), Some(2));
    d.ok(&["cancel", &format!("{mine}.5")]);
    d.ok(&["submit", "--", "true"]);
    // Another user is not held back by their floods.
    let bob = d.submit_as("bob", 0, &["true"]);
    assert_eq!(d.show(bob)["state"], "queued");
    // What everyone waits on: one listing with 20,000 jobs queued.
    let started = std::time::Instant::now();
    d.ok(&["ls"]);
    eprintln!(
        "gpuq ls with 20,001 queued jobs: {} ms",
        started.elapsed().as_millis()
    );
}

/// Submits an array of `true` as `user` through the API; the array's id.
fn submit_array_as(d: &Daemon, user: &str, array: &str) -> u64 {
    let body = serde_json::json!({
        "spec": { "command": ["true"], "array": array },
        "cwd": "/tmp",
        "user": user,
    });
    let answer = d.post_job(&body.to_string());
    serde_json::from_str::<serde_json::Value>(&answer)
        .ok()
        .and_then(|v| v["id"].as_u64())
        .unwrap_or_else(|| panic!("the array was refused: {answer}"))
}
