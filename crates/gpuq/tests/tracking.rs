//! Experiment tracking over HTTP, as an MLflow client speaks it: every job is a
//! run, errors come in MLflow's shape, the job's token dies with the job, the
//! metrics file and the MLflow API land in one store, and another user's token
//! cannot write a run. (The real `mlflow` client is driven in tracking_client.rs.)

mod common;
use common::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

/// A request with a bearer token; returns the HTTP status and the JSON body.
fn call(d: &Daemon, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
    let mut c = Command::new("curl");
    c.args(["-sS", "-X", method, "-w", "\n%{http_code}", "-H"])
        .arg(format!("authorization: Bearer {token}"));
    if let Some(b) = body {
        c.args(["-H", "content-type: application/json", "--data-binary"])
            .arg(b.to_string());
    }
    let out = c
        .arg(format!("{}{path}", d.url))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("a status line");
    let json = serde_json::from_str(body).unwrap_or(Value::String(body.to_string()));
    (code.trim().parse().unwrap(), json)
}

fn mlflow(d: &Daemon, method: &str, endpoint: &str, body: Option<&Value>) -> (u16, Value) {
    call(
        d,
        method,
        &format!("/api/2.0/mlflow/{endpoint}"),
        d.token().trim(),
        body,
    )
}

#[test]
fn a_job_is_a_run_with_its_params_and_its_status_follows_the_job() {
    let d = Daemon::start("sim:1");
    let id = d.submit(&[
        "--name",
        "mlp",
        "--project",
        "vision",
        "--param",
        "lr=0.01",
        "--param",
        "opt=adam",
        "--",
        "true",
    ]);
    let job = d.wait(id);
    assert_eq!(job["state"], "succeeded");
    let (code, got) = mlflow(&d, "GET", &format!("runs/get?run_id={id}"), None);
    assert_eq!(code, 200, "{got}");
    let run = &got["run"];
    assert_eq!(run["info"]["status"], "FINISHED");
    assert_eq!(run["info"]["run_name"], "mlp");
    let params: Vec<(String, String)> = run["data"]["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["key"].as_str().unwrap().into(),
                p["value"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(params.contains(&("lr".into(), "0.01".into())), "{params:?}");
    assert!(
        params.contains(&("opt".into(), "adam".into())),
        "{params:?}"
    );
    let (_, exp) = mlflow(
        &d,
        "GET",
        "experiments/get-by-name?experiment_name=vision",
        None,
    );
    assert_eq!(
        exp["experiment"]["experiment_id"],
        run["info"]["experiment_id"]
    );
    // The default experiment exists from the start.
    let (code, zero) = mlflow(&d, "GET", "experiments/get?experiment_id=0", None);
    assert_eq!(
        (code, zero["experiment"]["name"].as_str()),
        (200, Some("Default"))
    );
}

#[test]
fn errors_come_in_mlflows_shape() {
    let d = Daemon::start("sim:1");
    let (code, body) = mlflow(&d, "GET", "runs/get?run_id=nope", None);
    assert_eq!(code, 404);
    assert_eq!(body["error_code"], "RESOURCE_DOES_NOT_EXIST");
    let (code, body) = mlflow(
        &d,
        "GET",
        "experiments/get-by-name?experiment_name=absent",
        None,
    );
    assert_eq!(
        (code, body["error_code"].as_str()),
        (404, Some("RESOURCE_DOES_NOT_EXIST"))
    );
    let (code, body) = call(
        &d,
        "GET",
        "/api/2.0/mlflow/runs/get?run_id=1",
        "wrong",
        None,
    );
    assert_eq!(
        (code, body["error_code"].as_str()),
        (401, Some("UNAUTHENTICATED")),
        "{body}"
    );
    let (code, body) = mlflow(&d, "POST", "runs/nonsense", Some(&json!({})));
    assert_eq!(code, 404);
    assert_eq!(body["error_code"], "ENDPOINT_NOT_FOUND", "{body}");
    let (code, body) = mlflow(&d, "POST", "experiments/create", Some(&json!({})));
    assert_eq!(
        (code, body["error_code"].as_str()),
        (400, Some("INVALID_PARAMETER_VALUE"))
    );
    assert!(
        body["message"].as_str().unwrap().contains("'name'"),
        "{body}"
    );
    let (_, made) = mlflow(
        &d,
        "POST",
        "experiments/create",
        Some(&json!({"name": "e"})),
    );
    assert!(made["experiment_id"].is_string(), "{made}");
    let (code, body) = mlflow(
        &d,
        "POST",
        "experiments/create",
        Some(&json!({"name": "e"})),
    );
    assert_eq!(
        (code, body["error_code"].as_str()),
        (400, Some("RESOURCE_ALREADY_EXISTS"))
    );
}

#[test]
fn log_batch_keeps_mlflows_limits_nan_and_infinity_and_pages_history() {
    let d = Daemon::start("sim:1");
    let (_, made) = mlflow(
        &d,
        "POST",
        "runs/create",
        Some(&json!({"experiment_id": "0", "run_name": "r"})),
    );
    let run = made["run"]["info"]["run_id"].as_str().unwrap().to_string();
    let metrics: Vec<Value> = (0..1000)
        .map(|s| json!({"key": "loss", "value": 1.0 / (s as f64 + 1.0), "timestamp": "1700000000000", "step": s.to_string()}))
        .collect();
    let (code, body) = mlflow(
        &d,
        "POST",
        "runs/log-batch",
        Some(&json!({"run_id": run, "metrics": metrics})),
    );
    assert_eq!(code, 200, "{body}");
    let too_many: Vec<Value> = (0..1001)
        .map(|s| json!({"key": "x", "value": 1, "timestamp": 1, "step": s}))
        .collect();
    let (code, body) = mlflow(
        &d,
        "POST",
        "runs/log-batch",
        Some(&json!({"run_id": run, "metrics": too_many})),
    );
    assert_eq!(
        (code, body["error_code"].as_str()),
        (400, Some("INVALID_PARAMETER_VALUE"))
    );
    let params: Vec<Value> = (0..101)
        .map(|i| json!({"key": format!("p{i}"), "value": "v"}))
        .collect();
    let (code, _) = mlflow(
        &d,
        "POST",
        "runs/log-batch",
        Some(&json!({"run_id": run, "params": params})),
    );
    assert_eq!(code, 400);
    for v in ["NaN", "Infinity", "-Infinity"] {
        let (code, body) = mlflow(
            &d,
            "POST",
            "runs/log-metric",
            Some(&json!({"run_id": run, "key": "odd", "value": v, "timestamp": 1, "step": 0})),
        );
        assert_eq!(code, 200, "{v}: {body}");
    }
    let (_, got) = mlflow(&d, "GET", &format!("runs/get?run_id={run}"), None);
    let odd = got["run"]["data"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == "odd")
        .unwrap()
        .clone();
    assert_eq!(odd["value"], "-Infinity");
    // Paged: 1000 points in pages of 300.
    let mut seen = 0;
    let mut token = String::new();
    loop {
        let (code, page) = mlflow(&d, "GET", &format!("metrics/get-history?run_id={run}&metric_key=loss&max_results=300&page_token={token}"), None);
        assert_eq!(code, 200, "{page}");
        let pts = page["metrics"].as_array().unwrap();
        assert_eq!(pts[0]["step"].as_i64().unwrap(), seen as i64);
        seen += pts.len();
        match page["next_page_token"].as_str() {
            Some(t) => token = t.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, 1000);
    let (_, all) = mlflow(
        &d,
        "GET",
        &format!("metrics/get-history?run_id={run}&metric_key=loss"),
        None,
    );
    assert_eq!(all["metrics"].as_array().unwrap().len(), 1000);
    assert!(all.get("next_page_token").is_none());
    // A param never changes once logged.
    let (code, _) = mlflow(
        &d,
        "POST",
        "runs/log-parameter",
        Some(&json!({"run_id": run, "key": "lr", "value": "0.1"})),
    );
    assert_eq!(code, 200);
    let (code, body) = mlflow(
        &d,
        "POST",
        "runs/log-parameter",
        Some(&json!({"run_id": run, "key": "lr", "value": "0.2"})),
    );
    assert_eq!(
        (code, body["error_code"].as_str()),
        (400, Some("INVALID_PARAMETER_VALUE"))
    );
}

#[test]
fn the_metrics_file_and_the_mlflow_api_land_in_one_store() {
    let d = Daemon::start("sim:1");
    // The job writes as gpuq.log() does, and through the MLflow API with its own token.
    let script = r#"
printf '{"step": 1, "loss": 0.5, "time": 1700000000.5}\n{"step": 2, "loss": null}\n' >> "$GPUQ_METRICS_FILE"
curl -sS -X POST -H "authorization: Bearer $MLFLOW_TRACKING_TOKEN" -H 'content-type: application/json' \
  --data-binary "{\"run_id\": \"$MLFLOW_RUN_ID\", \"key\": \"acc\", \"value\": 0.9, \"timestamp\": 1, \"step\": 3}" \
  "$MLFLOW_TRACKING_URI/api/2.0/mlflow/runs/log-metric"
echo
echo "token=$MLFLOW_TRACKING_TOKEN"
"#;
    let id = d.submit(&["--", "bash", "-c", script]);
    assert_eq!(d.wait(id)["state"], "succeeded", "{}", d.log(id));
    let log = d.log(id);
    let metrics: Value = serde_json::from_str(&d.get(&format!("/v1/jobs/{id}/metrics"))).unwrap();
    let keys: Vec<&str> = metrics["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["acc", "loss"], "{metrics}\n{log}");
    let loss = &metrics["series"][1];
    assert_eq!(loss["count"], 2);
    assert_eq!(loss["latest"]["value"], "NaN");
    assert_eq!(loss["points"][0]["timestamp"], 1_700_000_000_500i64);
    let (_, hist) = mlflow(
        &d,
        "GET",
        &format!("metrics/get-history?run_id={id}&metric_key=loss"),
        None,
    );
    assert_eq!(hist["metrics"].as_array().unwrap().len(), 2, "{hist}");
    // The job's token ended with the job.
    let token = log
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .unwrap_or_else(|| panic!("no token in the job's log: {log}"));
    assert!(token.starts_with("gpuqjob_"), "{token}");
    let (code, body) = call(
        &d,
        "POST",
        "/api/2.0/mlflow/runs/log-metric",
        token,
        Some(&json!({"run_id": id.to_string(), "key": "late", "value": 1, "timestamp": 1})),
    );
    assert_eq!(
        (code, body["error_code"].as_str()),
        (401, Some("UNAUTHENTICATED")),
        "{body}"
    );
    // A forged job token is refused too.
    let forged = format!("gpuqjob_{id}_{}", "0".repeat(64));
    let (code, _) = call(
        &d,
        "GET",
        "/api/2.0/mlflow/runs/get?run_id=1",
        &forged,
        None,
    );
    assert_eq!(code, 401);
}

#[test]
fn another_users_token_reads_but_cannot_write_a_run() {
    let d = Daemon::start("sim:1");
    let id = d.submit(&["--", "true"]);
    d.wait(id);
    // As root the daemon serves local accounts, so the other user must be one.
    if running_as_root() {
        ensure_user("gpuqmallory");
    }
    let out = d.ok(&["token", "create", "--user", "gpuqmallory"]);
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("gpuq_"))
        .expect("a token")
        .to_string();
    let run = id.to_string();
    let (code, _) = call(
        &d,
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={run}"),
        &token,
        None,
    );
    assert_eq!(code, 200);
    for (endpoint, body) in [
        (
            "runs/log-metric",
            json!({"run_id": run, "key": "x", "value": 1, "timestamp": 1}),
        ),
        (
            "runs/log-parameter",
            json!({"run_id": run, "key": "x", "value": "1"}),
        ),
        (
            "runs/set-tag",
            json!({"run_id": run, "key": "x", "value": "1"}),
        ),
        (
            "runs/log-batch",
            json!({"run_id": run, "metrics": [{"key": "x", "value": 1, "timestamp": 1}]}),
        ),
        ("runs/update", json!({"run_id": run, "run_name": "mine"})),
        ("runs/delete", json!({"run_id": run})),
    ] {
        let (code, body) = call(
            &d,
            "POST",
            &format!("/api/2.0/mlflow/{endpoint}"),
            &token,
            Some(&body),
        );
        assert_eq!(
            (code, body["error_code"].as_str()),
            (403, Some("PERMISSION_DENIED")),
            "{endpoint}: {body}"
        );
    }
    let (code, _) = call(
        &d,
        "PUT",
        &format!("/api/2.0/mlflow-artifacts/artifacts/runs/{run}/evil.txt"),
        &token,
        Some(&json!("x")),
    );
    assert_eq!(code, 403);
    // Her own run is hers to write, under her name whatever the client claims.
    let (code, made) = call(
        &d,
        "POST",
        "/api/2.0/mlflow/runs/create",
        &token,
        Some(&json!({"experiment_id": "0", "tags": [{"key": "mlflow.user", "value": "root"}]})),
    );
    assert_eq!(code, 200, "{made}");
    assert_eq!(made["run"]["info"]["user_id"], "gpuqmallory");
}

#[test]
fn artifacts_never_follow_a_link_out_of_the_runs_outputs() {
    let d = Daemon::start("sim:1");
    let id = d.submit(&[
        "--",
        "bash",
        "-c",
        "ln -s /etc $GPUQ_OUTPUT_DIR/etc && ln -s /etc/passwd $GPUQ_OUTPUT_DIR/passwd",
    ]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    let token = d.token();
    let token = token.trim();
    let base = format!("/api/2.0/mlflow-artifacts/artifacts/runs/{id}");
    for path in [
        "passwd",
        "etc/passwd",
        "../../../../etc/passwd",
        "..%2f..%2fetc%2fpasswd",
    ] {
        let (code, body) = call(&d, "GET", &format!("{base}/{path}"), token, None);
        assert!(
            code == 403 || code == 404 || code == 400,
            "{path}: {code} {body}"
        );
        assert!(!body.to_string().contains("root:"), "{path} leaked: {body}");
    }
    let (code, _) = call(
        &d,
        "PUT",
        &format!("{base}/etc/evil"),
        token,
        Some(&json!("x")),
    );
    assert!(code == 403 || code == 400, "{code}");
    assert!(!std::path::Path::new("/etc/evil").exists());
    // A plain upload and download work, and the listing shows no link.
    let (code, _) = call(
        &d,
        "PUT",
        &format!("{base}/sub/ok.txt"),
        token,
        Some(&json!("hello")),
    );
    assert_eq!(code, 200);
    let (code, got) = call(&d, "GET", &format!("{base}/sub/ok.txt"), token, None);
    assert_eq!((code, got), (200, json!("hello")));
    let (_, listing) = call(
        &d,
        "GET",
        &format!("/api/2.0/mlflow-artifacts/artifacts?path=runs/{id}"),
        token,
        None,
    );
    let names: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sub"], "{listing}");
    assert!(d.job_dir(id).join("outputs/sub/ok.txt").is_file());
}

#[test]
fn attempts_continue_one_run_and_a_daemon_killed_mid_job_loses_no_point() {
    let mut d = Daemon::start("sim:1");
    // Attempt 1 logs steps 0-2 and fails; attempt 2 resumes at step 3.
    let script = r#"
start=$(( (GPUQ_ATTEMPT - 1) * 3 ))
for s in $(seq $start $((start + 2))); do echo "{\"step\": $s, \"loss\": $s}" >> "$GPUQ_METRICS_FILE"; done
[ "$GPUQ_ATTEMPT" = 2 ] || exit 1
sleep 2
"#;
    let id = d.submit(&[
        "--retries",
        "1",
        "--retry-delay",
        "100ms",
        "--",
        "bash",
        "-c",
        script,
    ]);
    // Kill the daemon while attempt 2 runs (it has written its points and
    // sleeps); the restarted one reads the rest. Waiting on the attempt number
    // alone could kill the daemon between recording the start and the spawn,
    // and that attempt, which never ran, would be retried as attempt 3.
    let metrics = d.job_dir(id).join("metrics.jsonl");
    assert!(eventually(Duration::from_secs(15), || {
        std::fs::read_to_string(&metrics).is_ok_and(|m| m.contains("\"step\": 5"))
    }));
    d.kill();
    d.restart();
    assert_eq!(d.wait(id)["state"], "succeeded");
    let (_, hist) = mlflow(
        &d,
        "GET",
        &format!("metrics/get-history?run_id={id}&metric_key=loss"),
        None,
    );
    let steps: Vec<i64> = hist["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["step"].as_i64().unwrap())
        .collect();
    assert_eq!(steps, [0, 1, 2, 3, 4, 5], "{hist}");
    let (_, run) = mlflow(&d, "GET", &format!("runs/get?run_id={id}"), None);
    assert_eq!(run["run"]["info"]["status"], "FINISHED");
}

#[test]
fn run_search_filters_orders_and_pages() {
    let d = Daemon::start("sim:1");
    let (_, exp) = mlflow(
        &d,
        "POST",
        "experiments/create",
        Some(&json!({"name": "sweep"})),
    );
    let exp = exp["experiment_id"].as_str().unwrap().to_string();
    for i in 0..5 {
        let (_, made) = mlflow(
            &d,
            "POST",
            "runs/create",
            Some(
                &json!({"experiment_id": exp, "run_name": format!("r{i}"), "start_time": 1000 + i}),
            ),
        );
        let run = made["run"]["info"]["run_id"].as_str().unwrap().to_string();
        let batch = json!({"run_id": run, "metrics": [{"key": "acc", "value": i as f64 / 10.0, "timestamp": 1, "step": 0}],
                           "params": [{"key": "lr", "value": if i % 2 == 0 { "0.1" } else { "0.01" }}]});
        assert_eq!(mlflow(&d, "POST", "runs/log-batch", Some(&batch)).0, 200);
    }
    let search = |body: Value| mlflow(&d, "POST", "runs/search", Some(&body));
    let names = |page: &Value| -> Vec<String> {
        page["runs"].as_array().map_or(vec![], |r| {
            r.iter()
                .map(|r| r["info"]["run_name"].as_str().unwrap().to_string())
                .collect()
        })
    };
    let (code, page) = search(
        json!({"experiment_ids": [exp], "filter": "params.lr = '0.1' and metrics.acc >= 0.2", "order_by": ["metrics.acc DESC"]}),
    );
    assert_eq!(code, 200, "{page}");
    assert_eq!(names(&page), ["r4", "r2"]);
    // Paging in MLflow's default order (start_time DESC): r4 r3 | r2 r1 | r0.
    let mut seen = Vec::new();
    let mut token = Value::Null;
    loop {
        let (_, page) =
            search(json!({"experiment_ids": [exp], "max_results": 2, "page_token": token}));
        seen.extend(names(&page));
        match page.get("next_page_token") {
            Some(t) => token = t.clone(),
            None => break,
        }
    }
    assert_eq!(seen, ["r4", "r3", "r2", "r1", "r0"]);
    let (code, body) = search(
        json!({"experiment_ids": [exp], "filter": "metrics.acc > 0.1 OR params.lr = '0.1'"}),
    );
    assert_eq!(
        (code, body["error_code"].as_str()),
        (400, Some("INVALID_PARAMETER_VALUE"))
    );
    assert!(body["message"].as_str().unwrap().contains("OR"), "{body}");
    let (code, _) = search(json!({"experiment_ids": [exp], "page_token": "garbage"}));
    assert_eq!(code, 400);
}

#[test]
fn a_large_metrics_file_is_stored_exactly_once() {
    // Three bursts of 100,000 points: over the default limits (tests/floods.rs), not these.
    let d = Daemon::start_with_config(
        "sim:1",
        "[output]\nmetrics_burst = 1000000\nmetrics_user_burst = 1000000\n",
    );
    // Written while the daemon's tick reads it, ending right after: the tick's
    // read and the attempt's last read meet, and each line is still stored once.
    let script = r#"awk 'BEGIN { for (i = 0; i < 100000; i++) printf "{\"step\": %d, \"loss\": %d}\n", i, i % 977 }' >> "$GPUQ_METRICS_FILE""#;
    for _ in 0..3 {
        let id = d.submit(&["--", "bash", "-c", script]);
        assert_eq!(d.wait(id)["state"], "succeeded");
        let m: Value =
            serde_json::from_str(&d.get(&format!("/v1/jobs/{id}/metrics?max_points=500"))).unwrap();
        let loss = &m["series"][0];
        assert_eq!(loss["count"], 100_000, "job {id}: {}", loss["count"]);
        assert_eq!(loss["latest"]["step"], 99_999);
        let points = loss["points"].as_array().unwrap();
        assert!(
            points.len() > 400 && points.len() <= 500,
            "{}",
            points.len()
        );
        assert!(
            points.iter().any(|p| p["value"] == 976.0),
            "the highest value is drawn"
        );
    }
}
