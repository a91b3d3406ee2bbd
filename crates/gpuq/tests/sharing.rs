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
