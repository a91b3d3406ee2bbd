//! A real Prometheus server scrapes the daemon the way it scrapes dcgm-exporter,
//! and the result is read back through Prometheus's own query API.

mod common;

use common::{eventually, Daemon};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Prometheus {
    child: Child,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_binary() -> Option<String> {
    let found = Command::new("sh")
        .args(["-c", "command -v prometheus"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
    (!path.is_empty()).then_some(path)
}

fn start_prometheus(bin: &str, dir: &Path, target: &str, token: &str) -> Prometheus {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gpuq\n    metrics_path: /metrics\n    \
             authorization:\n      credentials: {token}\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("prometheus starts");
    Prometheus {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

fn query(p: &Prometheus, promql: &str) -> Vec<Value> {
    let out = Command::new("curl")
        .args(["-sS", "-G", "--data-urlencode"])
        .arg(format!("query={promql}"))
        .arg(format!("{}/api/v1/query", p.url))
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn prometheus_scrapes_gpu_series_with_dcgm_names_and_job_labels() {
    let Some(bin) = prometheus_binary() else {
        assert!(
            std::env::var_os("GPUQ_TEST_STRICT").is_none(),
            "prometheus is not installed (apt-get install prometheus)"
        );
        eprintln!("prometheus not installed: skipped (scripts/test requires it)");
        return;
    };
    let d = Daemon::start_with_config("sim:2", "[telemetry]\ninterval = \"200ms\"\n");
    let id = d.submit(&[
        "--gpus",
        "1",
        "--env",
        "GPUQ_SIM_UTIL=55",
        "--",
        "sleep",
        "120",
    ]);
    d.wait_running(id);
    let dir = tempfile::tempdir().unwrap();
    let target = d.url.trim_start_matches("http://").to_string();
    let p = start_prometheus(&bin, dir.path(), &target, &d.token());

    let job_util = format!("DCGM_FI_DEV_GPU_UTIL{{hpc_job=\"{id}\"}}");
    let scraped = eventually(Duration::from_secs(60), || {
        query(&p, &job_util)
            .first()
            .is_some_and(|s| value(s) == 55.0)
    });
    assert!(
        scraped,
        "no scrape: up = {:?}\n{}",
        query(&p, "up"),
        std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
    );
    let sample = &query(&p, &job_util)[0]["metric"];
    assert_eq!(sample["gpu"], "0");
    assert_eq!(sample["device"], "nvidia0");
    assert!(sample["UUID"].as_str().unwrap().starts_with("GPU-"));
    assert_eq!(sample["modelName"], "Simulated GPU 80GB");
    assert!(!sample["Hostname"].as_str().unwrap().is_empty());
    // The free GPU: no job label value, idle.
    let free = query(&p, "DCGM_FI_DEV_GPU_UTIL{hpc_job=\"\"}");
    assert_eq!((free.len(), value(&free[0])), (1, 0.0));
    // Memory used + free is the card's memory; energy grows; the queue's series.
    let total = query(&p, "DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE");
    assert!(total.iter().all(|s| value(s) == 81920.0), "{total:?}");
    assert_eq!(value(&query(&p, "gpuq_jobs{state=\"running\"}")[0]), 1.0);
    assert_eq!(value(&query(&p, "gpuq_gpus{state=\"allocated\"}")[0]), 1.0);
    assert_eq!(value(&query(&p, "gpuq_job_starts_total")[0]), 1.0);
    assert_eq!(value(&query(&p, "gpuq_job_wait_seconds_count")[0]), 1.0);
    assert!(eventually(Duration::from_secs(20), || {
        query(&p, "gpuq_gpu_seconds_total")
            .first()
            .is_some_and(|s| value(s) > 0.0)
    }));

    // Every metric the shipped Grafana dashboard uses is one Prometheus now holds.
    let names: Vec<String> = {
        let out = Command::new("curl")
            .args(["-sS", &format!("{}/api/v1/label/__name__/values", p.url)])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    let dashboard =
        std::fs::read_to_string(common::repo_root().join("docs/grafana-dashboard.json")).unwrap();
    let used = metric_names_in(&dashboard);
    assert!(!used.is_empty());
    for name in used {
        let base = name
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        assert!(
            names.iter().any(|n| n == &name || n.starts_with(base)),
            "the dashboard uses {name}, which gpuq does not export"
        );
    }
    d.ok(&["cancel", &id.to_string()]);
}

/// Names of the form DCGM_FI_* or gpuq_* that appear in the text.
fn metric_names_in(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("DCGM_FI_") || w.starts_with("gpuq_"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}
