//! `gpuq doctor` and `gpuq tune` with real PyTorch on the CPU (the test
//! environment's), and the NVML stand-in for the driver's side: doctor's checks
//! run as a job and its JSON is stable; a PyTorch built for a newer CUDA than
//! the driver, and GPUs PyTorch cannot see, are failures with their fix; a
//! running job that holds a GPU but does not use it is found. Tune finds
//! settings at least as fast as the defaults, with figures that are the
//! trials' own, and an oversized batch is infeasible, not a failure.
#![cfg(feature = "torch-tests")]

mod common;

use common::{
    eventually, nvml_stand_in, output_within, repo_root, running_as_root, stderr, stdout, Daemon,
};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

fn python() -> String {
    std::env::var("GPUQ_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// PATH with the test environment's Python first (what the trials run).
fn venv_path() -> String {
    let py = std::path::PathBuf::from(python());
    format!(
        "{}:{}",
        py.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn gpuq(d: &Daemon, args: &[&str], limit: Duration) -> std::process::Output {
    let mut c = d.cmd(args);
    c.env("PATH", venv_path()).current_dir(repo_root());
    output_within(&mut c, limit).expect("gpuq ends")
}

/// The check `id` of a doctor's report.
fn check_of(report: &Value, id: &str) -> Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id} check in {report}"))
        .clone()
}

const IDS: [&str; 10] = [
    "node_gpus",
    "confinement",
    "driver",
    "torch",
    "torch_cuda",
    "cuda_devices",
    "nccl_p2p",
    "shm",
    "cpu_memory",
    "data_read",
];

#[test]
fn doctor_runs_its_checks_as_a_job_and_says_there_is_no_gpu_plainly() {
    let d = Daemon::start("none");
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("a.bin"), vec![7u8; 8 << 20]).unwrap();
    let out = gpuq(
        &d,
        &[
            "doctor",
            "--json",
            "--python",
            &python(),
            "--data",
            data.path().to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["version"], 1);
    let ids: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, IDS, "the checks and their order are stable");
    for c in r["checks"].as_array().unwrap() {
        for key in ["id", "title", "status", "figure", "detail", "fix"] {
            assert!(c.get(key).is_some(), "{key} in {c}");
        }
        assert!(
            ["ok", "warn", "fail", "skip"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
    }
    let check = |id: &str| check_of(&r, id);
    assert_eq!(check("node_gpus")["status"], "warn");
    // Which isolation jobs run under: cgroups as root, else why none.
    let confined = check("confinement");
    let detail = confined["detail"].as_str().unwrap();
    if running_as_root() {
        assert!(detail.starts_with("cgroup v"), "{confined}");
    } else {
        assert!(detail.starts_with("none: "), "{confined}");
        assert_eq!(confined["status"], "warn", "{confined}");
    }
    assert!(check("node_gpus")["detail"]
        .as_str()
        .unwrap()
        .contains("no GPU"));
    assert!(check("driver")["detail"]
        .as_str()
        .unwrap()
        .contains("no NVIDIA driver"));
    assert_eq!(
        check("torch")["status"],
        "ok",
        "the job's own Python has torch"
    );
    assert_eq!(check("data_read")["status"], "ok");
    // The job that ran it is a job of the queue.
    let job = r["job"].as_u64().unwrap();
    assert_eq!(d.show(job)["state"], "succeeded");
    // Asking for GPUs this node lacks is a failure with its fix, and exit 1.
    let out = gpuq(
        &d,
        &["doctor", "--gpus", "1", "--python", &python()],
        Duration::from_secs(60),
    );
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    // A Python that is not there: a clear error, exit 2.
    let out = gpuq(
        &d,
        &["doctor", "--python", "/nonexistent/python3"],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--python"), "{}", stderr(&out));
}

#[test]
fn doctor_finds_a_torch_too_new_for_the_driver_and_a_job_off_its_gpu() {
    let library = nvml_stand_in();
    let state_dir = tempfile::tempdir().unwrap();
    let state = state_dir.path().join("nvml.json");
    let device = |i: u32| {
        json!({
            "uuid": format!("GPU-8f6c1a2e-0000-4000-8000-00000000000{i}"),
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_total": 85_899_345_920u64, "memory_used": 2_147_483_648u64,
            "gpu_util": 30, "temperature": 50, "power_mw": 100_000, "sm_clock_mhz": 1410,
        })
    };
    // A driver that supports CUDA 11.8 only: the test's torch wheel is built for a newer one.
    let write = |devices: Vec<Value>| {
        std::fs::write(
            &state,
            json!({"devices": devices, "cuda_driver_version": 11080}).to_string(),
        )
        .unwrap();
    };
    write(vec![device(0), device(1)]);
    let d = Daemon::start_configured(
        "auto",
        Some("[telemetry]\ninterval = \"200ms\"\n"),
        &[
            ("GPUQ_NVML_LIBRARY", library.to_str().unwrap()),
            ("GPUQ_NVML_STAND_IN_STATE", state.to_str().unwrap()),
        ],
    );
    let out = gpuq(
        &d,
        &["doctor", "--json", "--gpus", "1", "--python", &python()],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(1), "a failure: {}", stderr(&out));
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let check = |id: &str| check_of(&r, id);
    assert_eq!(check("nvml_driver")["status"], "ok", "{r}");
    let cuda = check("torch_cuda");
    assert_eq!(cuda["status"], "fail", "{cuda}");
    assert!(
        cuda["detail"]
            .as_str()
            .unwrap()
            .contains("supports up to 11.8"),
        "{cuda}"
    );
    assert!(cuda["fix"].as_str().unwrap().contains("cu118"), "{cuda}");
    let seen = check("cuda_devices");
    assert_eq!(
        seen["status"], "fail",
        "one GPU reserved, none seen by torch: {seen}"
    );

    // A running job that holds a GPU but has no process on it.
    let id = d.submit(&["--gpus", "1", "--", "sleep", "60"]);
    d.wait_running(id);
    let look = |d: &Daemon| {
        let out = gpuq(
            d,
            &["doctor", &id.to_string(), "--json"],
            Duration::from_secs(30),
        );
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()
    };
    let on_gpu = |r: &Value| check_of(r, "on_gpu");
    let r = look(&d);
    assert_eq!(on_gpu(&r)["status"], "fail", "{r}");
    assert!(on_gpu(&r)["detail"]
        .as_str()
        .unwrap()
        .contains("none of its processes"));
    // Its process appears on its GPU: ok.
    let pid: u32 = String::from_utf8_lossy(
        &Command::new("pgrep")
            .args(["-f", "^sleep 60$"])
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .next()
    .expect("the job's sleep")
    .trim()
    .parse()
    .unwrap();
    let gpu = d.show(id)["gpus"][0].as_u64().unwrap() as usize;
    let mut devices = vec![device(0), device(1)];
    devices[gpu]["processes"] = json!([{ "pid": pid, "used_memory": 1_073_741_824u64 }]);
    write(devices);
    assert!(eventually(Duration::from_secs(10), || on_gpu(&look(&d))
        ["status"]
        == "ok"));
    let memory = check_of(&look(&d), "gpu_memory");
    assert_eq!(memory["status"], "ok", "{memory}");
    // Its GPU at 30% while it sleeps: waiting on something other than its CPU.
    let idle = check_of(&look(&d), "input_bound");
    assert_eq!(idle["status"], "warn", "{idle}");
    assert!(
        idle["detail"]
            .as_str()
            .unwrap()
            .contains("waits on something else"),
        "{idle}"
    );
    // A job that keeps a core busy while its GPU idles: input-bound, with its CPU figure.
    let burn = d.submit(&["--gpus", "1", "--", "sh", "-c", "while :; do :; done"]);
    d.wait_running(burn);
    let burning = || {
        let out = gpuq(
            &d,
            &["doctor", &burn.to_string(), "--json"],
            Duration::from_secs(30),
        );
        check_of(
            &serde_json::from_str::<Value>(&stdout(&out)).unwrap(),
            "input_bound",
        )
    };
    // The sample that said "input-bound" is the one whose figure is checked
    // (on a loaded machine a later second may give the loop less of a core).
    let mut seen = Value::Null;
    assert!(
        eventually(Duration::from_secs(20), || {
            seen = burning();
            seen["detail"].as_str().unwrap().contains("input-bound")
        }),
        "{seen}"
    );
    assert!(
        seen["figure"]["cpu_percent"].as_f64().unwrap() >= 50.0,
        "{seen}"
    );
    d.ok(&["cancel", &burn.to_string()]);
    d.wait(burn);
    // Not a running job: exit 2.
    let out = gpuq(&d, &["doctor", "999"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    d.ok(&["cancel", &id.to_string()]);
    d.wait(id);
}

fn tune(
    d: &Daemon,
    space: &str,
    extra: &[&str],
) -> (std::process::Output, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    let space_file = dir.path().join("space.yaml");
    let train = repo_root().join("examples/pytorch/train.py");
    std::fs::write(
        &spec,
        format!(
            "name: t\ncommand: [python3, {}, --steps, '12', --log-every, '4', --warmup-steps, '2', --ckpt-every, '0', --hidden, '64']\n",
            train.display()
        ),
    )
    .unwrap();
    std::fs::write(&space_file, space).unwrap();
    let out_file = dir.path().join("best.yaml");
    let mut args = vec![
        "tune",
        spec.to_str().unwrap(),
        "--space",
        space_file.to_str().unwrap(),
        "--json",
        "--out",
        out_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = gpuq(d, &args, Duration::from_secs(600));
    (out, out_file, dir)
}

#[test]
fn tune_finds_settings_at_least_as_fast_as_the_defaults_with_honest_figures() {
    let d = Daemon::start("none");
    let (out, best_file, _dir) = tune(
        &d,
        "defaults: {batch_size: 128}\nmax_batch_size: 512\namp: ['off', 'bf16']\ncompile: ['off']\nnum_workers: [0, 1]\npin_memory: false\n",
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let baseline = r["baseline_samples_per_s"]
        .as_f64()
        .expect("the defaults ran");
    let best = r["best"]["samples_per_s"].as_f64().unwrap();
    assert!(best >= baseline, "{best} < {baseline}");
    let trials = r["trials"].as_array().unwrap();
    assert!(trials.len() >= 4, "{r}");
    assert_eq!(trials[0]["knobs"]["batch_size"], 128, "the defaults first");
    for t in trials {
        assert_eq!(t["outcome"]["kind"], "ran", "{t}");
        // The figure is the trial's own: what its job logged.
        let job = t["job"].as_u64().unwrap();
        let m = d.json(&["metrics", &job.to_string(), "--json"]);
        let logged = m["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == "samples_per_s")
            .unwrap()["latest"]["value"]
            .as_f64()
            .unwrap();
        assert_eq!(t["outcome"]["samples_per_s"].as_f64().unwrap(), logged);
        assert!(t["outcome"]["warmup_s"].as_f64().unwrap() > 0.0);
        assert!(t["outcome"]["peak_memory_mib"].as_f64().unwrap() > 0.0);
        // Only the space's values were tried.
        assert!(["off", "bf16"].contains(&t["knobs"]["amp"].as_str().unwrap()));
        assert!(t["knobs"]["batch_size"].as_u64().unwrap() <= 512);
    }
    // The best settings come back as a spec file gpuq accepts.
    let text = std::fs::read_to_string(&best_file).unwrap();
    assert!(text.starts_with("# gpuq tune of "), "{text}");
    // YAML 1.1 readers (PyYAML) take a plain `off` for false: it is quoted.
    assert!(text.contains("compile: \"off\""), "{text}");
    assert!(!text.lines().any(|l| l.ends_with(": off")), "{text}");
    let v: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(v["params"]["batch_size"], r["best"]["knobs"]["batch_size"]);
    let mut c = d.cmd(&["run", best_file.to_str().unwrap()]);
    c.env("PATH", venv_path());
    let out = output_within(&mut c, Duration::from_secs(120)).unwrap();
    assert!(
        out.status.success(),
        "the tuned spec runs: {}",
        stderr(&out)
    );
}

#[test]
fn an_oversized_batch_is_infeasible_not_a_failure() {
    let d = Daemon::start("none");
    // 4M samples a batch under a 5 GiB cap runs out of memory; halving finds one that fits.
    let (out, _, _dir) = tune(
        &d,
        "defaults: {batch_size: 4194304}\namp: ['off']\ncompile: ['off']\nnum_workers: [0]\npin_memory: false\n",
        &["--memory-limit", "5G"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let trials = r["trials"].as_array().unwrap();
    assert_eq!(trials[0]["outcome"]["kind"], "out_of_memory", "{r}");
    assert!(r["baseline_samples_per_s"].is_null());
    let best = r["best"]["knobs"]["batch_size"].as_u64().unwrap();
    assert!(best < 4194304, "{r}");
    // The out-of-memory job says so, and was not retried.
    let job = trials[0]["job"].as_u64().unwrap();
    let shown = d.show(job);
    assert_eq!(shown["state"], "failed");
    assert!(
        shown["reason"].as_str().unwrap().contains("out of memory"),
        "{shown}"
    );
}

#[test]
fn profile_captures_a_running_jobs_next_steps_through_the_sdk() {
    let d = Daemon::start("none");
    let train = repo_root().join("examples/pytorch/train.py");
    let mut c = d.cmd(&[
        "submit",
        "--",
        "python3",
        train.to_str().unwrap(),
        "--steps",
        "1000000",
        "--ckpt-every",
        "0",
        "--log-every",
        "100",
    ]);
    c.env("PATH", venv_path());
    let id: u64 = stdout(&c.output().unwrap()).trim().parse().unwrap();
    d.wait_running(id);
    let out = gpuq(
        &d,
        &["profile", &id.to_string(), "--steps", "5", "--json"],
        Duration::from_secs(180),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(s["done"], true);
    assert_eq!(s["steps"], 5);
    assert!(s["summary"].as_str().unwrap().contains("aten::"), "{s}");
    let trace = s["trace"].as_str().unwrap();
    assert!(
        trace.starts_with(d.job_dir(id).join("outputs").to_str().unwrap()),
        "stored with the job: {trace}"
    );
    let events: Value = serde_json::from_str(&std::fs::read_to_string(trace).unwrap()).unwrap();
    assert!(
        events["traceEvents"]
            .as_array()
            .is_some_and(|e| !e.is_empty()),
        "a Chrome trace"
    );
    d.ok(&["cancel", &id.to_string()]);
    d.wait(id);
    // An ended job: exit 2. A job that never asks the SDK: a clear error after the timeout.
    let out = gpuq(&d, &["profile", &id.to_string()], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let quiet = d.submit(&["--", "sleep", "60"]);
    d.wait_running(quiet);
    let out = gpuq(
        &d,
        &["profile", &quiet.to_string(), "--timeout", "2s"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("gpuq.should_stop()"),
        "{}",
        stderr(&out)
    );
    d.ok(&["cancel", &quiet.to_string()]);
    d.wait(quiet);
}
