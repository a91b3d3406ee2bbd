//! Floods that would hurt everyone: a job that logs metrics as fast as it can
//! (through its metrics file and the MLflow API) and a job that prints without
//! end. Their excess is dropped and said; the database stays small, their ends
//! are recorded promptly, and everyone else's submits stay fast.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The database with its write-ahead log.
fn db_bytes(d: &Daemon) -> u64 {
    ["gpuq.db", "gpuq.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(d.path().join(f)).ok())
        .map(|m| m.len())
        .sum()
}

fn timed_submit(d: &Daemon) -> Duration {
    let t = Instant::now();
    d.submit(&["--", "true"]);
    t.elapsed()
}

/// Each round appends about 20 MB of lines (three points each) at the disk's
/// speed, then pauses; the job's very last act is to note when it exits.
const FILE_FLOOD: &str = r#"
for round in 1 2 3 4 5 6; do
  yes '{"step": 1, "loss": 0.5, "acc": 0.25}' | head -c 20000000 >> "$GPUQ_METRICS_FILE"
  sleep 0.5
done
date +%s%3N > "$GPUQ_OUTPUT_DIR/exited"
"#;

/// Batches of 1000 points through MLflow's REST API for five seconds (and
/// 20,000 points at least, however slow the machine).
const API_FLOOD: &str = r#"
import json, os, time, urllib.request
url = os.environ["MLFLOW_TRACKING_URI"] + "/api/2.0/mlflow/runs/log-batch"
head = {"authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"], "content-type": "application/json"}
sent, step, until = 0, 0, time.time() + 5
while (time.time() < until or sent < 20000) and time.time() < until + 60:
    metrics = [{"key": "m%d" % (i % 10), "value": 1.0, "timestamp": 1, "step": step + i} for i in range(1000)]
    step += 1000
    req = urllib.request.Request(url, data=json.dumps({"run_id": os.environ["MLFLOW_RUN_ID"], "metrics": metrics}).encode(), headers=head)
    urllib.request.urlopen(req).read()
    sent += len(metrics)
print("sent", sent, flush=True)
"#;

fn dropped(d: &Daemon, id: u64) -> (Value, u64) {
    let m: Value = serde_json::from_str(&d.get(&format!("/v1/jobs/{id}/metrics"))).unwrap();
    let stored = m["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    (m["dropped"].clone(), stored)
}

#[test]
fn a_metrics_flood_is_dropped_and_counted_and_hurts_nobody_else() {
    // Bursts smaller than the defaults, so that a slow machine's flood still
    // goes over them; the rates are the defaults.
    let d = Daemon::start_with_config(
        "none",
        "[output]\nmetrics_burst = 5000\nmetrics_user_burst = 10000\n",
    );
    let baseline = (0..3).map(|_| timed_submit(&d)).max().unwrap();
    let db_before = db_bytes(&d);

    let file = d.submit(&["--name", "file-flood", "--", "sh", "-c", FILE_FLOOD]);
    let api = d.submit(&["--name", "api-flood", "--", "python3", "-c", API_FLOOD]);
    d.wait_running(file);
    // Everyone else's submits while both floods run.
    let mut during = Vec::new();
    let flooding = Instant::now();
    while flooding.elapsed() < Duration::from_secs(4) {
        during.push(timed_submit(&d));
        std::thread::sleep(Duration::from_millis(200));
    }
    let slowest = during.iter().max().unwrap();
    assert!(
        *slowest < baseline * 20 + Duration::from_secs(5),
        "a submit took {slowest:?} during the flood (baseline {baseline:?}): {during:?}"
    );

    // The file flood's end is recorded within seconds of its exit, backlog or not.
    let exited = d.job_dir(file).join("outputs/exited");
    assert!(
        eventually(Duration::from_secs(90), || exited.exists()),
        "the flood ran: {}",
        d.show(file)
    );
    let seen_exit = Instant::now();
    let ended = eventually(Duration::from_secs(30), || {
        d.show(file)["state"] == "succeeded"
    });
    let took = seen_exit.elapsed();
    assert!(ended, "{}\n{}", d.show(file), d.daemon_log_tail(30));
    assert!(
        took < Duration::from_secs(10),
        "the end was recorded {took:?} after the job's exit"
    );
    let (_, api_job) = d.wait_within(api, Duration::from_secs(60));
    assert_eq!(api_job["state"], "succeeded", "{}", d.log(api));

    // About 7 million points were written; a bounded number is stored, the rest counted.
    let (file_dropped, file_stored) = dropped(&d, file);
    let rate_dropped = file_dropped["rate limit"].as_u64().unwrap_or(0);
    assert!(
        rate_dropped > 1_000_000,
        "{file_dropped} dropped, {file_stored} stored"
    );
    assert!(file_stored < 200_000, "{file_stored} stored");
    let (api_dropped, api_stored) = dropped(&d, api);
    assert!(
        api_dropped["rate limit"].as_u64().unwrap_or(0) > 0,
        "{api_dropped} dropped, {api_stored} stored; {}",
        d.log(api)
    );
    assert!(api_stored < 200_000, "{api_stored} stored");
    let grew = db_bytes(&d).saturating_sub(db_before);
    assert!(grew < 40 << 20, "the database grew by {} MiB", grew >> 20);

    // Said: in `gpuq metrics`, in `gpuq show`, once as an event and once as an alert.
    let text = d.ok(&["metrics", &file.to_string()]);
    assert!(
        text.contains(&format!("{rate_dropped} points dropped: rate limit")),
        "{text}"
    );
    let show = d.ok(&["show", &file.to_string()]);
    assert!(show.contains("points dropped: rate limit"), "{show}");
    let events: Vec<Value> = d.show(file)["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["kind"] == "metrics_dropped")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let alerts: Value = serde_json::from_str(&d.ok(&["alerts", "--json"])).unwrap();
    let ours: Vec<&Value> = alerts
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "metrics_dropped" && a["job"] == file)
        .collect();
    assert_eq!(ours.len(), 1, "{alerts}");
}

#[test]
fn a_log_flood_keeps_its_head_and_tail_and_says_what_was_cut() {
    let d = Daemon::start_with_config("none", "[output]\nlog_max_size = \"1M\"\n");
    // About 15 MB of numbered lines, then a last word; `gpuq run` follows it live.
    let out = output_within(
        &mut d.cmd(&[
            "run",
            "--",
            "sh",
            "-c",
            "seq 1 2000000; echo the-end; exit 3",
        ]),
        Duration::from_secs(120),
    )
    .expect("the run ended");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let followed = stdout(&out);
    assert!(followed.starts_with("1\n2\n3\n"), "{}", &followed[..100]);
    assert!(
        followed.ends_with("1999999\n2000000\nthe-end\n"),
        "…{}",
        tail(&followed)
    );
    assert!(
        followed.len() < (1 << 20) + 4096,
        "followed {} bytes",
        followed.len()
    );
    let id: u64 = d.json(&["ls", "--json"])[0]["id"].as_u64().unwrap();
    let log = d.log(id);
    assert_eq!(log, followed, "logs and run -f show the same");
    let on_disk = std::fs::metadata(d.job_dir(id).join("attempt-1.log"))
        .unwrap()
        .len();
    assert!(on_disk < (1 << 20) + 4096, "{on_disk} bytes on disk");
    let total: usize = (1..=2_000_000)
        .map(|i: u32| i.to_string().len() + 1)
        .sum::<usize>()
        + 8;
    let marker = log
        .lines()
        .find(|l| l.contains("bytes dropped here"))
        .unwrap_or_else(|| panic!("a line says what was cut: …{}", tail(&log)));
    let cut: usize = marker
        .trim_start_matches("[gpuq: ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(cut + (1 << 20), total, "{marker}");
    assert!(
        log.contains("reached its limit of 1 MiB"),
        "{}",
        &log[..200]
    );
}

fn tail(s: &str) -> &str {
    let mut at = s.len().saturating_sub(300);
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

/// `max_queued` counts pending jobs only: a loop that submits and cancels would
/// grow the tables without bound, so submits have a rate per user too.
#[test]
fn a_submit_then_cancel_loop_stops_at_the_submit_rate_with_the_key_named() {
    let d = Daemon::start_with_config("none", "[scheduler]\nsubmit_rate = 1\nsubmit_burst = 5\n");
    let started = Instant::now();
    let mut made = 0u64;
    let mut refusal = None;
    for _ in 0..60 {
        let out = d.gpuq(&["submit", "--", "sleep", "30"]);
        if !out.status.success() {
            refusal = Some(out);
            break;
        }
        let id = stdout(&out).trim().to_string();
        // It may have ended already: the loop goes on either way.
        let _ = d.gpuq(&["cancel", &id]);
        made += 1;
    }
    let out = refusal.expect("the loop was stopped");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("[scheduler] submit_rate") && err.contains("bursts of 5"),
        "{err}"
    );
    // The burst, and one more per second the loop took.
    let allowed = 5 + started.elapsed().as_secs() + 1;
    assert!(
        made >= 5 && made <= allowed,
        "{made} submitted, {allowed} allowed"
    );
    let jobs: Vec<Value> = serde_json::from_str(&d.ok(&["ls", "--json", "--all"])).unwrap();
    assert_eq!(jobs.len() as u64, made, "the refused submit left no job");
    // The bucket refills: a submit a little later goes through.
    let again = eventually(Duration::from_secs(10), || {
        d.gpuq(&["submit", "--", "true"]).status.success()
    });
    assert!(again, "submits work again after a pause");
}
