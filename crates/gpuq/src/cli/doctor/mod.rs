//! `gpuq doctor`: what is wrong with where jobs run, each finding with its
//! figure and its fix. `gpuq doctor` runs its checks (`checks.py`, standard
//! library only) as a job, in the job's own Python, on the GPUs it asks for,
//! and adds what the daemon sees (NVML); `gpuq doctor ID` looks at a running
//! job: is it on its GPUs, is it input-bound, is its memory near full.

mod job;

use super::{CliError, CmdResult};
use gpuq_api::Client;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The checks, run by the job's Python.
const CHECKS: &str = include_str!("checks.py");

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// A running job to look at instead (its GPUs, input, memory).
    id: Option<String>,
    /// GPUs to check with (the checks run as a job holding them).
    #[arg(long, default_value_t = 0)]
    gpus: u32,
    /// The Python your jobs use (default: python3 on the job's PATH).
    #[arg(long)]
    python: Option<String>,
    /// A data directory whose read throughput to measure.
    #[arg(long)]
    data: Option<String>,
    /// Print the report as JSON (its shape is stable: version 1).
    #[arg(long)]
    json: bool,
}

/// One finding.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub id: String,
    pub title: String,
    /// ok, warn, fail or skip.
    pub status: String,
    #[serde(default)]
    pub figure: Value,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub fix: String,
}

impl Check {
    fn new(id: &str, title: &str, status: &str, figure: Value, detail: String, fix: &str) -> Self {
        Self {
            id: id.into(),
            title: title.into(),
            status: status.into(),
            figure,
            detail,
            fix: fix.into(),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// The job that ran the checks, or the one looked at.
    pub job: u64,
    pub checks: Vec<Check>,
}

pub async fn run(client: &Client, args: DoctorArgs) -> CmdResult {
    let report = match &args.id {
        Some(id) => job::look(client, super::parse_id(id)?).await?,
        None => node(client, &args).await?,
    };
    print(&report, args.json);
    Ok(if report.checks.iter().any(|c| c.status == "fail") {
        1
    } else {
        0
    })
}

fn print(report: &Report, json: bool) {
    if json {
        super::output::print_json(report);
        return;
    }
    outln!(
        "gpuq doctor: node {}{}, job {}",
        report.node,
        report
            .python
            .as_ref()
            .map(|p| format!(", Python {p}"))
            .unwrap_or_default(),
        report.job
    );
    for c in &report.checks {
        outln!(
            "{:<5} {:<42} {}",
            c.status.to_uppercase(),
            c.title,
            c.detail
        );
        if !c.fix.is_empty() && (c.status == "warn" || c.status == "fail") {
            outln!("{:<5} {:<42} fix: {}", "", "", c.fix);
        }
    }
    let count = |s: &str| report.checks.iter().filter(|c| c.status == s).count();
    outln!(
        "{} ok, {}, {}, {} skipped",
        count("ok"),
        gpuq_core::plural(count("warn") as u64, "warning"),
        gpuq_core::plural(count("fail") as u64, "failure"),
        count("skip")
    );
}

/// What the daemon sees of the node's GPUs (NVML), before the job's own checks.
fn daemon_checks(info: &gpuq_api::ServerInfo, asked: u32) -> Vec<Check> {
    let mut out = Vec::new();
    let gpus = info.gpus;
    let (status, fix) = match (gpus, asked) {
        (0, 0) => (
            "warn",
            "CPU jobs run; for GPU jobs, run gpuq on a node with NVIDIA GPUs and their driver",
        ),
        (0, _) => (
            "fail",
            "no GPU here: run gpuq on a node with NVIDIA GPUs and their driver",
        ),
        (n, a) if a > n => (
            "fail",
            "ask for at most as many GPUs as the node has (--gpus)",
        ),
        _ => ("ok", ""),
    };
    let detail = if gpus == 0 {
        format!("this node has no GPU: {}", info.gpu_discovery)
    } else {
        format!("{}: {}", plural(gpus, "GPU"), info.gpu_discovery)
    };
    out.push(Check::new(
        "node_gpus",
        "GPUs on the node (as the daemon sees them)",
        status,
        Value::from(gpus),
        detail,
        fix,
    ));
    if let Some(c) = &info.confinement {
        // Without confinement a job can reach GPUs, memory and cores it was
        // not given, and a process that leaves its group outlives a cancel.
        let uvm = gpuq_exec::cgroup::devices::DriverMajors::read()
            .uvm
            .is_some();
        let (status, fix, detail) =
            confinement_check(c, info.driver_version.is_some() && gpus > 0, uvm);
        out.push(Check::new(
            "confinement",
            "Job isolation (cgroups)",
            status,
            Value::from(c.clone()),
            detail,
            fix,
        ));
    }
    if let Some(v) = &info.driver_version {
        out.push(Check::new(
            "nvml_driver",
            "NVIDIA driver (NVML)",
            "ok",
            Value::from(v.clone()),
            format!(
                "driver {v}, supports CUDA up to {}",
                info.driver_cuda_version.as_deref().unwrap_or("?")
            ),
            "",
        ));
    }
    out
}

/// The confinement check: status, fix and detail, from the daemon's line,
/// whether its GPUs are real (NVML) and whether the nvidia-uvm major exists
/// (without it a confined CUDA job cannot open or create /dev/nvidia-uvm).
fn confinement_check(
    c: &str,
    real_gpus: bool,
    uvm_major: bool,
) -> (&'static str, &'static str, String) {
    if c.starts_with("none") {
        (
            "warn",
            "run the daemon as root, or under a service manager that delegates its cgroup (docs/systemd: Delegate=yes); [confinement] mode = \"auto\"",
            c.to_string(),
        )
    } else if real_gpus && !uvm_major {
        (
            "warn",
            "load it before jobs start: nvidia-modprobe -u -c=0 as root (the daemon runs it at start when present), or enable nvidia-persistenced; then restart the daemon",
            format!("{c}; nvidia-uvm is not loaded (no major in /proc/devices): confined CUDA jobs cannot open /dev/nvidia-uvm"),
        )
    } else if c.contains("NOT") {
        (
            "warn",
            "mount the missing cgroup controllers (see docs)",
            c.to_string(),
        )
    } else {
        ("ok", "", c.to_string())
    }
}

fn plural(n: u32, what: &str) -> String {
    gpuq_core::plural(u64::from(n), what)
}

/// Runs the checks as a job on `--gpus` GPUs and merges the daemon's view.
async fn node(client: &Client, args: &DoctorArgs) -> Result<Report, CliError> {
    let info = client.info().await?;
    let python = args.python.clone().unwrap_or_else(|| "python3".into());
    let mut argv = vec![
        python.clone(),
        "-c".into(),
        CHECKS.into(),
        "--gpus".into(),
        args.gpus.to_string(),
    ];
    if let Some(d) = &args.data {
        let abs = std::path::absolute(d).unwrap_or_else(|_| d.into());
        argv.extend(["--data".into(), abs.display().to_string()]);
    }
    if let Some(c) = &info.driver_cuda_version {
        argv.extend(["--driver-cuda".into(), c.clone()]);
    }
    let spec = gpuq_core::JobSpec {
        name: Some("doctor".into()),
        command: Some(argv),
        gpus: args.gpus,
        // Its end is reported here, at the terminal; a failed probe is no lab alert.
        failure_alert: Some(false),
        ..Default::default()
    };
    let job = super::session_args::submit(client, spec).await?;
    errln!("gpuq doctor: checking in job {}", job.id);
    let end = loop {
        let j = client.wait(job.id, 60).await?;
        if j.state.is_terminal() {
            break j;
        }
    };
    let log = super::session_args::log_text(client, job.id).await;
    let text = String::from_utf8_lossy(&log);
    let found: Option<Value> = text.lines().rev().find_map(|l| {
        serde_json::from_str::<Value>(l.trim())
            .ok()
            .filter(|v| v.get("checks").is_some())
    });
    let Some(found) = found else {
        let tail: String = text
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let why = if end.exit_code == Some(127) {
            format!("{python} was not found where jobs run: name the Python your jobs use with --python PATH")
        } else {
            format!(
                "the checks did not finish: job {} {} ({})",
                job.id,
                end.state,
                end.reason.unwrap_or_default()
            )
        };
        let not_found = end.exit_code == Some(127);
        let message = format!("{why}; the end of its log:\n{}", tail.trim_end());
        return Err(if not_found {
            CliError::usage(message)
        } else {
            CliError::failure(message)
        });
    };
    let mut checks = daemon_checks(&info, args.gpus);
    let theirs: Vec<Check> = serde_json::from_value(found["checks"].clone())
        .map_err(|e| CliError::failure(format!("the checks' report does not parse: {e}")))?;
    checks.extend(theirs);
    Ok(Report {
        version: 1,
        node: found["node"].as_str().unwrap_or(&info.node).to_string(),
        python: found["python"].as_str().map(str::to_string),
        job: job.id,
        checks,
    })
}

#[cfg(test)]
mod confinement_tests {
    use super::confinement_check;

    #[test]
    fn real_gpus_without_the_uvm_major_are_a_warning() {
        let on = "cgroup v1 (devices, memory, pids, cpuset)";
        assert_eq!(confinement_check(on, true, true).0, "ok");
        let (status, fix, detail) = confinement_check(on, true, false);
        assert_eq!(status, "warn");
        assert!(fix.contains("nvidia-modprobe -u -c=0"), "{fix}");
        assert!(detail.contains("nvidia-uvm is not loaded"), "{detail}");
        // Simulated or no GPUs: no uvm needed.
        assert_eq!(confinement_check(on, false, false).0, "ok");
        assert_eq!(confinement_check("none: mode = off", true, false).0, "warn");
    }
}
