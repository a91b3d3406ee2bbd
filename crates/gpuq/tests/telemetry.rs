//! Telemetry end to end: simulated GPUs and the real NVML code path (through the
//! stand-in library), per-job figures, alerts to webhooks, the event stream.

mod common;

use common::{eventually, nvml_stand_in, stdout, Daemon};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FAST: &str = "[telemetry]\ninterval = \"100ms\"\n[alerts]\nidle_after = \"1s\"\n";

fn alerts(d: &Daemon) -> Vec<Value> {
    d.json(&["alerts", "--json"]).as_array().unwrap().clone()
}

#[test]
fn simulated_gpus_follow_their_jobs_and_jobs_keep_their_figures() {
    let mut d = Daemon::start_with_config("sim:2", FAST);
    // One job pretends to compute on the CPU (0% GPU), the other sets its load at run time.
    let idle = d.submit(&[
        "--gpus",
        "1",
        "--env",
        "GPUQ_SIM_UTIL=0",
        "--",
        "sleep",
        "60",
    ]);
    // Its utilisation from the start (GPUQ_SIM_UTIL), its memory from the file it
    // writes once running (a sample taken before the file would show no memory).
    let busy = d.submit(&[
        "--gpus",
        "1",
        "--env",
        "GPUQ_SIM_UTIL=40",
        "--",
        "sh",
        "-c",
        "echo '{\"util\": 40, \"memory_mib\": 1000}' > \"$GPUQ_OUTPUT_DIR/.sim-load\"; sleep 60",
    ]);
    d.wait_running(idle);
    d.wait_running(busy);
    let gpu_of = |id: u64| d.show(id)["gpus"][0].as_u64().unwrap();
    let reading = |gpu: u64| d.json(&["gpus", "--json"])[gpu as usize]["reading"].clone();
    assert!(eventually(Duration::from_secs(10), || {
        reading(gpu_of(busy))["util_percent"] == json!(40.0)
            && reading(gpu_of(busy))["memory_used_mib"] == json!(1000)
    }));
    assert_eq!(reading(gpu_of(idle))["util_percent"], json!(0.0));
    let table = d.ok(&["gpus"]);
    assert!(
        table.contains("40%") && table.contains("1000 / 81920 MiB"),
        "{table}"
    );

    // The idle job is flagged, once (cool-down), naming the job and the suspicion.
    assert!(eventually(Duration::from_secs(10), || alerts(&d)
        .iter()
        .any(|a| a["kind"] == "job_idle" && a["job"] == json!(idle))));
    let message = alerts(&d)[0]["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with(&format!("job {idle} ("))
            && message.contains("holds 1 GPU at 0%")
            && message.contains("CPU"),
        "{message}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let idle_alerts = alerts(&d)
        .iter()
        .filter(|a| a["kind"] == "job_idle")
        .count();
    assert_eq!(idle_alerts, 1, "deduplicated within the cool-down");
    assert!(!alerts(&d).iter().any(|a| a["job"] == json!(busy)));

    // Live figures while running, kept with the attempt once it ends, across a restart.
    let live = &d.show(busy)["gpu_usage"];
    assert_eq!(live["util_peak_percent"], json!(40.0));
    assert!(live["gpu_seconds"].as_f64().unwrap() > 0.5, "{live}");
    let busy_gpu = gpu_of(busy);
    // History (in memory: a restart clears it) is queryable: every GPU, oldest first, the busy job's load in it.
    let history = serde_json::from_str::<Value>(&d.get("/v1/gpus/history?since=0")).unwrap();
    let series = history.as_array().unwrap();
    assert_eq!(series.len(), 2);
    let points = series[busy_gpu as usize]["points"].as_array().unwrap();
    assert!(points.len() > 5, "{points:?}");
    assert!(points
        .windows(2)
        .all(|w| w[0]["at"].as_i64() <= w[1]["at"].as_i64()));
    assert!(points.iter().any(|p| p["util_percent"] == json!(40.0)));
    d.ok(&["cancel", &busy.to_string(), &idle.to_string()]);
    d.wait(busy);
    d.restart();
    let shown = d.show(busy);
    let attempt = &shown["attempts"][0]["gpu_usage"];
    assert!(
        (attempt["util_avg_percent"].as_f64().unwrap() - 40.0).abs() < 5.0,
        "{attempt}"
    );
    assert_eq!(attempt["memory_peak_mib"], json!(1000));
    assert!(attempt["energy_j"].as_f64().unwrap() > 0.0);
    let text = d.ok(&["show", &busy.to_string()]);
    assert!(
        text.contains("gpu usage") && text.contains("util 4"),
        "{text}"
    );
}

/// Requests a receiver got: path (with query) and JSON body.
type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// A loopback HTTP server that records each request's path and JSON body.
fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_string();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            sink.lock().unwrap().push((path, value));
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (url, got)
}

#[test]
fn alerts_reach_webhooks_in_each_services_format() {
    let (url, got) = receiver();
    let config = format!(
        "{FAST}\n[[alerts.webhooks]]\nurl = \"{url}/json\"\n\n[[alerts.webhooks]]\nurl = \"{url}/slack\"\nformat = \"slack\"\n\n\
         [[alerts.webhooks]]\nurl = \"{url}/feishu\"\nformat = \"feishu\"\nsecret = \"s\"\n\n\
         [[alerts.webhooks]]\nurl = \"{url}/ding?access_token=t\"\nformat = \"dingtalk\"\nsecret = \"s\"\n"
    );
    let d = Daemon::start_with_config("sim:1", &config);
    let id = d.submit(&["--", "sh", "-c", "exit 3"]);
    d.wait(id);
    assert!(
        eventually(Duration::from_secs(10), || got.lock().unwrap().len() >= 4),
        "{:?}\n{}",
        got.lock().unwrap(),
        d.daemon_log()
    );
    let got = got.lock().unwrap().clone();
    let by = |prefix: &str| {
        got.iter()
            .find(|(p, _)| p.starts_with(prefix))
            .unwrap_or_else(|| panic!("nothing at {prefix}: {got:?}"))
            .clone()
    };
    let (_, plain) = by("/json");
    assert_eq!(
        (plain["kind"].as_str(), plain["job"].as_u64()),
        (Some("job_failed"), Some(id))
    );
    let (_, slack) = by("/slack");
    let text = slack["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("job {id}")) && text.contains("failed") && text.contains("exit"),
        "{text}"
    );
    let (_, feishu) = by("/feishu");
    assert_eq!(feishu["msg_type"], "text");
    assert!(feishu["content"]["text"]
        .as_str()
        .unwrap()
        .contains("job_failed"));
    assert!(
        feishu["sign"].as_str().is_some_and(|s| s.len() == 44),
        "{feishu}"
    );
    let (path, ding) = by("/ding");
    assert_eq!(ding["msgtype"], "text");
    assert!(
        path.contains("access_token=t&timestamp=") && path.contains("&sign="),
        "{path}"
    );
    // Listed by the CLI too.
    let table = d.ok(&["alerts"]);
    assert!(table.contains("job_failed"), "{table}");

    // A CUDA out-of-memory failure is its own kind, with the advice.
    let oom = d.submit(&[
        "--retries",
        "2",
        "--",
        "sh",
        "-c",
        "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1",
    ]);
    d.wait(oom);
    let listed = alerts(&d);
    let oom_alerts: Vec<&Value> = listed.iter().filter(|a| a["job"] == json!(oom)).collect();
    assert_eq!(oom_alerts.len(), 1, "{listed:?}");
    assert_eq!(oom_alerts[0]["kind"], "job_oom");
    assert!(oom_alerts[0]["message"]
        .as_str()
        .unwrap()
        .contains("batch size"));
}

#[test]
fn the_event_stream_replays_resumes_and_ends_with_the_daemon() {
    let mut d = Daemon::start("sim:1");
    let id = d.submit(&["--", "true"]);
    d.wait(id);
    let lines = d.ok(&["events", "--json", "--after", "0.0", "-n", "3"]);
    let items: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["submitted", "started", "succeeded"]);
    assert!(items
        .iter()
        .all(|i| i["type"] == "job" && i["job_id"] == json!(id)));
    // Resuming after the second item gives the third.
    let cursor = items[1]["cursor"].as_str().unwrap();
    let next = d.ok(&["events", "--json", "--after", cursor, "-n", "1"]);
    let next: Value = serde_json::from_str(next.trim()).unwrap();
    assert_eq!(next["kind"], "succeeded");
    let bad = d.gpuq(&["events", "--after", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stdout(&bad));

    // A follower sees a new job live, and a daemon stop ends the stream (it must not hold the stop open).
    let mut follower = d
        .cmd(&["events", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let second = d.submit(&["--", "true"]);
    let mut out = BufReader::new(follower.stdout.take().unwrap());
    let mut first_line = String::new();
    out.read_line(&mut first_line).unwrap();
    let live: Value = serde_json::from_str(&first_line).unwrap();
    assert_eq!(live["job_id"], json!(second));
    assert!(d.stop(), "the daemon stopped promptly with a stream open");
    assert!(eventually(Duration::from_secs(5), || matches!(
        follower.try_wait(),
        Ok(Some(_))
    )));
}

#[test]
fn nvml_readings_processes_and_card_faults_through_the_real_code_path() {
    let library = nvml_stand_in();
    let state_dir = tempfile::tempdir().unwrap();
    let state = state_dir.path().join("nvml.json");
    let device = |i: u32, extra: Value| {
        let mut d = json!({
            "uuid": format!("GPU-8f6c1a2e-0000-4000-8000-00000000000{i}"),
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_total": 85_899_345_920u64,
            "memory_used": 2_147_483_648u64,
            "gpu_util": 37, "temperature": 61, "power_mw": 250_000, "sm_clock_mhz": 1410,
            "energy_mj": 5_000_000u64,
        });
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        d
    };
    let write = |devices: Vec<Value>| {
        std::fs::write(&state, json!({ "devices": devices }).to_string()).unwrap();
    };
    write(vec![device(0, json!({})), device(1, json!({}))]);
    let d = Daemon::start_configured(
        "auto",
        Some(FAST),
        &[
            ("GPUQ_NVML_LIBRARY", library.to_str().unwrap()),
            ("GPUQ_NVML_STAND_IN_STATE", state.to_str().unwrap()),
        ],
    );
    let gpus = d.json(&["gpus", "--json"]);
    assert_eq!(
        gpus.as_array().unwrap().len(),
        2,
        "discovered through NVML: {gpus}"
    );
    assert_eq!(gpus[0]["model"], "NVIDIA A100-SXM4-80GB");
    assert!(eventually(Duration::from_secs(10), || {
        d.json(&["gpus", "--json"])[1]["reading"]["power_w"] == json!(250.0)
    }));
    let r = &d.json(&["gpus", "--json"])[1]["reading"];
    assert_eq!(
        (
            &r["util_percent"],
            &r["memory_used_mib"],
            &r["memory_total_mib"],
            &r["temperature_c"],
            &r["sm_clock_mhz"],
            &r["energy_j"]
        ),
        (
            &json!(37.0),
            &json!(2048),
            &json!(81920),
            &json!(61),
            &json!(1410),
            &json!(5000.0)
        )
    );

    // A job's process (found through its process tree) and a stranger's on the GPUs.
    let id = d.submit(&[
        "--gpus",
        "1",
        "--",
        "sh",
        "-c",
        "sleep 60 & echo $! > \"$GPUQ_OUTPUT_DIR/pid\"; wait",
    ]);
    d.wait_running(id);
    let pid_file = d.job_dir(id).join("outputs").join("pid");
    assert!(eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| !s.trim().is_empty())
    }));
    let worker: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let job_gpu = d.show(id)["gpus"][0].as_u64().unwrap() as usize;
    let stranger = std::process::id();
    let mut devices = vec![device(0, json!({})), device(1, json!({}))];
    devices[job_gpu]["processes"] = json!([{ "pid": worker, "used_memory": 4_294_967_296u64 }]);
    devices[1 - job_gpu]["processes"] =
        json!([{ "pid": stranger, "used_memory": 1_073_741_824u64 }]);
    write(devices.clone());
    assert!(eventually(Duration::from_secs(10), || {
        let g = d.json(&["gpus", "--json"]);
        g[job_gpu]["processes"]
            == json!([{ "gpu": job_gpu, "pid": worker, "memory_mib": 4096, "job": id }])
            && g[1 - job_gpu]["processes"][0]["job"].is_null()
    }));
    let table = d.ok(&["gpus"]);
    assert!(
        table.contains(&format!("pid {stranger} (1024 MiB) is not a gpuq job")),
        "{table}"
    );
    assert!(eventually(Duration::from_secs(10), || d.show(id)
        ["gpu_usage"]["memory_peak_mib"]
        == json!(4096)));

    // Card faults: an XID, a hot card, memory nearly full, a card lost.
    devices[0]["xid_events"] = json!([79]);
    devices[0]["temperature"] = json!(92);
    devices[0]["memory_used"] = json!(84_000_000_000u64);
    devices[1]["lost"] = json!(true);
    write(devices);
    let want = [
        "gpu_xid",
        "gpu_temperature_high",
        "gpu_memory_high",
        "gpu_lost",
    ];
    assert!(
        eventually(Duration::from_secs(10), || {
            let got = alerts(&d);
            want.iter().all(|k| got.iter().any(|a| a["kind"] == *k))
        }),
        "{:?}",
        alerts(&d)
    );
    let all = alerts(&d);
    let xid = all.iter().find(|a| a["kind"] == "gpu_xid").unwrap();
    assert_eq!(xid["gpu"], json!(0));
    assert!(xid["message"].as_str().unwrap().contains("XID error 79"));
    let lost = d.json(&["gpus", "--json"])[1]["reading"]["lost"].clone();
    assert_eq!(lost, json!(true));
    assert!(d.ok(&["gpus"]).contains("LOST"));
    d.ok(&["cancel", &id.to_string()]);
    d.wait(id);
}
