//! What a newcomer meets on the tour: a daemon without GPUs, a misspelt spec
//! file, logs of jobs that did not run (or ran several times), the queue's
//! columns, and the wording of counts, durations and figures.

mod common;
use common::*;
use std::time::Duration;

/// The cell under `column` in the `ls` row of job `id` (columns found from the header).
fn ls_cell(table: &str, id: u64, column: &str) -> String {
    let header = table.lines().next().expect("a header");
    // Every column name is one word: the header says which there are.
    let names: Vec<&str> = header.split_whitespace().collect();
    let starts: Vec<usize> = names.iter().map(|n| header.find(n).unwrap()).collect();
    let i = names.iter().position(|n| *n == column).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("no row for job {id}: {table}"));
    let end = starts
        .get(i + 1)
        .copied()
        .unwrap_or(row.len())
        .min(row.len());
    row.get(starts[i]..end).unwrap_or("").trim().to_string()
}

#[test]
fn a_daemon_without_gpus_says_how_to_try_the_tour_anyway() {
    let d = Daemon::start("none");
    let out = d.gpuq(&["submit", "--gpus", "1", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("job asks for 1 GPU; the largest node has 0"),
        "{err}"
    );
    assert!(err.contains("`gpuq server --gpus sim:4`"), "{err}");
    let out = d.gpuq(&["submit", "--gpus", "2", "--", "true"]);
    assert!(
        stderr(&out).contains("job asks for 2 GPUs;"),
        "{}",
        stderr(&out)
    );
    d.ok(&["submit", "--", "true"]);
}

#[test]
fn a_queued_gpu_job_that_meets_a_daemon_without_gpus_is_told_how_to_go_on() {
    let mut d = Daemon::start("sim:1");
    d.ok(&["drain"]);
    let id = d.submit(&["--gpus", "1", "--", "true"]);
    d.set_gpus("none");
    d.restart();
    d.ok(&["undrain"]);
    let job = d.wait(id);
    assert_eq!(job["state"], "failed", "{job}");
    let reason = job["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("the largest node has 0"), "{job}");
    assert!(reason.contains("`gpuq server --gpus sim:4`"), "{job}");
}

#[test]
fn server_stop_stops_the_daemon_of_the_home_and_says_so() {
    let mut d = Daemon::start("sim:1");
    d.ok(&["ls"]);
    let out = d.gpuq(&["server", "stop"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(&format!(
            "stopped the gpuq daemon of {} (pid ",
            d.path().display()
        )),
        "{}",
        stdout(&out)
    );
    assert!(d.stop(), "the daemon had exited when stop returned");
    let again = d.gpuq(&["server", "stop"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("no gpuq daemon is running for GPUQ_HOME="),
        "{}",
        stderr(&again)
    );
}

#[test]
fn a_misspelt_spec_file_is_refused_not_queued_as_a_command() {
    let d = Daemon::start("sim:2");
    let out = d.gpuq(&["submit", "jobb.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("jobb.yaml: no such spec file"),
        "{}",
        stderr(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yml");
    std::fs::write(&spec, "command: [echo, hi]\n").unwrap();
    let spec = spec.to_str().unwrap();
    let out = d.gpuq(&["submit", spec, "--gpus", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("put gpuq's flags before it"),
        "{}",
        stderr(&out)
    );
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&d.ok(&["ls", "--json"])).unwrap();
    assert!(jobs.is_empty(), "nothing was queued: {jobs:?}");

    // --help and the behaviour agree: `--` is optional.
    let help = d.ok(&["submit", "--help"]);
    assert!(
        help.contains("`--` before the command is optional"),
        "{help}"
    );
    let id = d.submit(&["echo", "no", "--dashes"]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    assert_eq!(d.ok(&["logs", &id.to_string()]), "no --dashes\n");
    let id = d.submit(&[spec]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    assert_eq!(d.ok(&["logs", &id.to_string()]), "hi\n");
}

#[test]
fn logs_say_when_there_is_no_log_and_which_attempt_is_shown() {
    let d = Daemon::start("sim:1");
    let blocker = d.submit(&["--gpus", "1", "--", "sleep", "30"]);
    d.wait_running(blocker);
    let waiting = d.submit(&["--gpus", "1", "--", "true"]);
    let out = d.gpuq(&["logs", &waiting.to_string()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains(&format!(
            "job {waiting} has not started yet (it is queued; `gpuq explain {waiting}` says why)"
        )),
        "{}",
        stderr(&out)
    );
    d.ok(&["cancel", &waiting.to_string()]);
    let out = d.gpuq(&["logs", &waiting.to_string()]);
    assert!(
        stderr(&out).contains(&format!("job {waiting} never started")),
        "{}",
        stderr(&out)
    );
    d.ok(&["cancel", &blocker.to_string()]);

    let retried = d.submit(&[
        "--retries",
        "2",
        "--retry-delay",
        "100ms",
        "--",
        "sh",
        "-c",
        "echo try $GPUQ_ATTEMPT; exit 1",
    ]);
    assert_eq!(d.wait(retried)["state"], "failed");
    let out = d.gpuq(&["logs", &retried.to_string()]);
    assert_eq!(stdout(&out), "try 3\n");
    assert!(
        stderr(&out).contains(&format!(
            "job {retried}: attempt 3 of 3; earlier: --attempt 1, 2"
        )),
        "{}",
        stderr(&out)
    );
    let first = d.gpuq(&["logs", &retried.to_string(), "--attempt", "1"]);
    assert_eq!(stdout(&first), "try 1\n");
    assert_eq!(stderr(&first), "", "no note when the attempt is chosen");
}

#[test]
fn a_retry_in_its_back_off_holds_no_gpus_and_its_wait_is_not_runtime() {
    let d = Daemon::start("sim:2");
    let id = d.submit(&[
        "--name",
        "flaky",
        "--gpus",
        "1",
        "--retries",
        "1",
        "--retry-delay",
        "1h",
        "--",
        "sh",
        "-c",
        "sleep 0.2; exit 1",
    ]);
    assert!(
        eventually(Duration::from_secs(10), || {
            let j = d.show(id);
            j["state"] == "queued" && j["attempt"] == 1
        }),
        "job {id} is back in the queue"
    );
    let table = d.ok(&["ls"]);
    assert_eq!(
        ls_cell(&table, id, "GPUS"),
        "1",
        "requested, none held: {table}"
    );
    assert_eq!(ls_cell(&table, id, "RUNTIME"), "", "{table}");
    assert!(
        ls_cell(&table, id, "REASON").starts_with("a retry waiting out its back-off until "),
        "{table}"
    );
    let why = d.ok(&["explain", &id.to_string()]);
    assert!(
        why.starts_with(&format!(
            "job {id} is a retry waiting out its back-off until "
        )),
        "a sentence: {why}"
    );
    let shown = d.ok(&["show", &id.to_string()]);
    assert!(shown.contains("gpus         1 requested\n"), "{shown}");

    std::thread::sleep(Duration::from_millis(1100));
    d.ok(&["cancel", &id.to_string()]);
    let table = d.ok(&["ls"]);
    assert_eq!(ls_cell(&table, id, "STATE"), "cancelled");
    assert_eq!(ls_cell(&table, id, "GPUS"), "1", "{table}");
    assert_eq!(
        ls_cell(&table, id, "RUNTIME"),
        "",
        "the back-off is not runtime: {table}"
    );
    let attempts = &d.show(id)["attempts"];
    assert_eq!(
        attempts[0]["gpus"].as_array().unwrap().len(),
        1,
        "the attempt keeps its GPUs"
    );
}

#[test]
fn a_long_reason_in_ls_keeps_the_telling_words() {
    let d = Daemon::start("sim:2");
    let a = d.submit(&["--gpus", "1", "--time-limit", "1h", "--", "sleep", "30"]);
    let b = d.submit(&["--gpus", "1", "--", "sleep", "30"]);
    d.wait_running(a);
    d.wait_running(b);
    let big = d.submit(&["--gpus", "2", "--", "true"]);
    let table = d.ok(&["ls"]);
    let reason = ls_cell(&table, big, "REASON");
    assert!(
        reason.starts_with("waits for 2 GPUs: all 2 are in use by jobs")
            && reason.contains("it is next"),
        "in a pipe the whole reason: {reason}"
    );
    d.ok(&["cancel", &a.to_string(), &b.to_string(), &big.to_string()]);
}

#[test]
fn counts_durations_figures_and_sources_read_naturally() {
    let d = Daemon::start_with_config("sim:2", "single_user = true\n[users.ana]\nmax_gpus = 1\n");
    let held = d.submit_as("ana", 1, &["sleep", "30"]);
    d.wait_running(held);
    let waiting = d.submit_as("ana", 1, &["true"]);
    let why = d.ok(&["explain", &waiting.to_string()]);
    assert_eq!(
        why.trim(),
        format!("job {waiting} waits: ana already uses 1 of a quota of 1 GPU at once")
    );
    d.ok(&["cancel", &held.to_string(), &waiting.to_string()]);

    let usage = d.ok(&["usage"]);
    assert!(usage.contains("usage halves every 7 days;"), "{usage}");
    assert!(!usage.contains("-0.00"), "{usage}");

    let prices = d.ok(&["prices", "--gpu", "H100"]);
    let header = prices.lines().next().unwrap();
    assert!(header.ends_with("SOURCE (AS OF)"), "{prices}");
    let at = header.find("SOURCE").unwrap();
    for row in prices.lines().skip(1).filter(|l| l.contains(" × ")) {
        let source: String = row.chars().skip(at).collect(); // the header is ASCII
        let source = source.trim();
        assert!(
            source.contains(" (") && !source.contains("https://"),
            "{row}"
        );
        assert!(source.chars().count() <= 48 + 13, "trimmed to fit: {row}");
    }
    assert!(d
        .ok(&["prices", "--gpu", "H100", "--sources"])
        .contains("https://"));
}

#[test]
fn advise_and_show_read_the_same_telemetry() {
    let d = Daemon::start_with_config("sim:1", "[telemetry]\ninterval = \"1s\"\n");
    let id = d.submit(&["--gpus", "1", "--", "sleep", "1.5"]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    let usage = d.show(id)["gpu_usage"].clone();
    assert!(
        usage["memory_peak_mib"].is_u64(),
        "sampled at least once in 1.5 s: {usage}"
    );
    assert!(
        usage["util_avg_percent"].is_f64(),
        "one reading is enough for the utilisation: {usage}"
    );
    let advice = d.json(&["advise", &id.to_string(), "--json"]);
    let basis = advice["basis"].as_str().unwrap();
    assert!(!basis.contains("no GPU telemetry"), "{basis}");
    assert!(basis.starts_with("1 GPU "), "{basis}");
    assert!(basis.contains("% average"), "{basis}");
}

#[test]
fn sim_names_a_file_it_cannot_read() {
    let out = std::process::Command::new(GPUQ)
        .args(["sim", "/no/such/trace.csv"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "gpuq: cannot read /no/such/trace.csv: No such file or directory\n"
    );
}
