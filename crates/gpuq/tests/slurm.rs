//! The Slurm backend against a real slurmctld and two slurmd on this host
//! (`bash tests/slurm/run` starts them, with four stand-in GPUs, two per node,
//! and jobs confined by Slurm's cgroups: devices, cores, memory, processes).
#![cfg(feature = "slurm-tests")]

mod common;

use common::{eventually, Daemon, SLURM_CONFIG as CONFIG};
use serde_json::Value;
use std::time::Duration;

fn slurm() -> Daemon {
    assert!(
        std::env::var_os("SLURM_CONF").is_some(),
        "run these through `bash tests/slurm/run`, which starts Slurm"
    );
    Daemon::start_with_config("none", CONFIG)
}

fn log(d: &Daemon, id: u64) -> String {
    d.ok(&["logs", &id.to_string()])
}

fn slurm_id(d: &Daemon, id: u64, attempt: usize) -> u64 {
    d.show(id)["attempts"][attempt - 1]["slurm_job_id"]
        .as_u64()
        .expect("a Slurm job id")
}

fn wait_running_in_slurm(d: &Daemon, id: u64) {
    assert!(
        eventually(Duration::from_secs(60), || d
            .ok(&["explain", &id.to_string()])
            .contains("Slurm: RUNNING")),
        "job {id} never ran in Slurm: {}",
        d.ok(&["explain", &id.to_string()])
    );
}

#[test]
fn a_job_runs_through_slurm_with_the_same_contract_and_exit_code() {
    let d = slurm();
    let out = d.gpuq(&[
        "run",
        "--gpus",
        "2",
        "--",
        "sh",
        "-c",
        "echo gpus=$CUDA_VISIBLE_DEVICES job=$GPUQ_JOB_ID attempt=$GPUQ_ATTEMPT; echo ckpt=$GPUQ_CHECKPOINT_DIR; exit 3",
    ]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}\n{}",
        common::stdout(&out),
        d.daemon_log()
    );
    let text = common::stdout(&out);
    assert!(
        text.contains("gpus=0,1 job=1 attempt=1"),
        "Slurm sets the GPUs: {text}"
    );
    assert!(text.contains("/jobs/1/checkpoints"), "{text}");
    let job = d.show(1);
    assert_eq!(job["state"], "failed");
    assert!(job["reason"].as_str().unwrap().contains("exit 3"), "{job}");
    assert!(slurm_id(&d, 1, 1) > 0);
    assert!(job["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "submitted_to_slurm"));
}

#[test]
fn pending_reasons_cancel_requeue_and_exit_75_follow_the_local_rules() {
    let d = slurm();
    // Four GPUs in all: two jobs of two fill them, a third waits in Slurm.
    let trap = "trap 'echo got-TERM; exit 143' TERM; echo started; while true; do sleep 0.2; done";
    let a = d.submit(&["--gpus", "2", "--", "bash", "-c", trap]);
    let b = d.submit(&["--gpus", "2", "--", "bash", "-c", trap]);
    let c = d.submit(&["--gpus", "2", "--", "sleep", "1"]);
    wait_running_in_slurm(&d, a);
    wait_running_in_slurm(&d, b);
    assert!(
        eventually(Duration::from_secs(20), || d
            .ok(&["explain", &c.to_string()])
            .contains("waiting in Slurm: PENDING")),
        "{}",
        d.ok(&["explain", &c.to_string()])
    );
    assert!(d.ok(&["ls"]).contains("waiting in Slurm"));

    // Cancel: SIGTERM reaches the job through its batch shell.
    d.ok(&["cancel", &a.to_string()]);
    let ended = d.wait(a);
    assert_eq!(ended["state"], "cancelled");
    assert!(log(&d, a).contains("got-TERM"), "{}", log(&d, a));

    // Requeue: a new attempt, a new Slurm job.
    let first = slurm_id(&d, b, 1);
    d.ok(&["requeue", &b.to_string()]);
    assert!(eventually(Duration::from_secs(30), || d.show(b)["attempt"]
        == 2
        && d.show(b)["attempts"][1]["slurm_job_id"].as_u64().is_some()));
    assert_ne!(slurm_id(&d, b, 2), first);
    d.ok(&["cancel", &b.to_string()]);
    assert_eq!(d.wait(c)["state"], "succeeded");

    // Exit 75: requeued at once, not a failure.
    let once = d.submit(&[
        "--",
        "bash",
        "-c",
        "if [ \"$GPUQ_ATTEMPT\" = 1 ]; then exit 75; fi; echo second",
    ]);
    let job = d.wait(once);
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["attempt"], 2);
    assert_eq!(job["failures"], 0);
}

#[test]
fn the_time_limit_sends_the_early_signal_then_stops_the_job() {
    let d = slurm();
    let id = d.submit(&[
        "--time-limit",
        "8s",
        "--grace",
        "3s",
        "--signal",
        "USR1@5",
        "--",
        "bash",
        "-c",
        "trap 'echo got-USR1' USR1; trap 'echo got-TERM; exit 143' TERM; while true; do sleep 0.2; done",
    ]);
    let job = d.wait(id);
    assert_eq!(job["state"], "failed");
    assert!(
        job["reason"].as_str().unwrap().contains("time limit 8s"),
        "{job}"
    );
    let text = log(&d, id);
    assert!(
        text.contains("got-USR1") && text.contains("got-TERM"),
        "{text}"
    );
}

#[test]
fn a_two_node_job_gets_ranks_for_torchrun() {
    let d = slurm();
    let id = d.submit(&[
        "--nodes",
        "2",
        "--gpus",
        "1",
        "--",
        "sh",
        "-c",
        "echo rank=$NODE_RANK of=$NNODES master=$MASTER_ADDR port=$MASTER_PORT gpus=$CUDA_VISIBLE_DEVICES",
    ]);
    let job = d.wait(id);
    assert_eq!(job["state"], "succeeded", "{job}\n{}", log(&d, id));
    let text = log(&d, id);
    assert!(
        text.contains("rank=0 of=2") && text.contains("rank=1 of=2"),
        "{text}"
    );
    let master = text
        .lines()
        .find_map(|l| l.split("master=").nth(1))
        .unwrap_or("");
    assert!(!master.starts_with(' '), "MASTER_ADDR is set: {text}");
    // The local backend refuses what it cannot run, naming the field.
    let local = Daemon::start("sim:2");
    let out = local.gpuq(&["submit", "--nodes", "2", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nodes"));
}

#[test]
fn a_job_larger_than_a_node_gets_whole_nodes_from_sinfo_s_kinds() {
    // The test cluster's nodes have 2 GPUs each (sinfo): 4 GPUs are 2 whole nodes.
    let d = slurm();
    let id = d.submit(&[
        "--gpus",
        "4",
        "--",
        "sh",
        "-c",
        "echo rank=$NODE_RANK of=$NNODES gpus=$CUDA_VISIBLE_DEVICES",
    ]);
    let job = d.wait(id);
    assert_eq!(job["state"], "succeeded", "{job}\n{}", log(&d, id));
    let text = log(&d, id);
    assert!(
        text.contains("rank=0 of=2 gpus=0,1") && text.contains("rank=1 of=2 gpus=0,1"),
        "{text}"
    );
    assert_eq!(d.show(id)["gpus"].as_array().map(Vec::len), Some(4));
    // More than the partition's kinds could ever hold is refused at submit, naming the field.
    let out = d.gpuq(&["submit", "--gpus", "3", "--nodes", "2", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gpus"));
}

#[test]
fn a_restarted_daemon_reattaches_to_its_slurm_jobs() {
    let mut d = slurm();
    let id = d.submit(&["--", "sh", "-c", "sleep 4; echo done"]);
    wait_running_in_slurm(&d, id);
    let first = slurm_id(&d, id, 1);
    d.kill();
    d.restart();
    let job = d.wait(id);
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["attempt"], 1, "not submitted twice");
    assert_eq!(slurm_id(&d, id, 1), first);
    assert!(log(&d, id).contains("done"));
    let shown: Value = d.show(id);
    assert!(shown["started_at"].as_i64().is_some());
}

#[test]
fn a_root_daemon_submits_each_job_as_the_user_who_asked() {
    use std::os::unix::fs::PermissionsExt;
    let user = "gpuqslurm";
    let exists = std::process::Command::new("id")
        .arg(user)
        .output()
        .unwrap()
        .status
        .success();
    if !exists {
        let ok = std::process::Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", user])
            .status()
            .unwrap();
        assert!(ok.success(), "useradd needs root");
    }
    let d = slurm();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("runuser")
        .args(["-u", user, "--", "env", "-u", "GPUQ_URL"])
        .arg(format!("GPUQ_HOME={}", d.path().display()))
        .args([
            "GPUQ_NO_AUTOSTART=1",
            common::GPUQ,
            "submit",
            "--",
            "sh",
            "-c",
            "echo I am $(id -un)",
        ])
        .current_dir("/tmp")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = common::stdout(&out).trim().parse().unwrap();
    let job = d.wait(id);
    assert_eq!(job["state"], "succeeded", "{job}\n{}", d.daemon_log());
    assert_eq!(job["user"], user);
    assert!(
        log(&d, id).contains(&format!("I am {user}")),
        "{}",
        log(&d, id)
    );
    // Slurm's own record says whose job it was.
    let slurm_job = slurm_id(&d, id, 1).to_string();
    let acct = std::process::Command::new("sacct")
        .args(["-c", "-n", "-P", "-o", "JobID,UID", "-j", &slurm_job])
        .output()
        .unwrap();
    let uid = String::from_utf8_lossy(
        &std::process::Command::new("id")
            .args(["-u", user])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    assert!(
        String::from_utf8_lossy(&acct.stdout).contains(&format!("{slurm_job}|{uid}")),
        "{}",
        String::from_utf8_lossy(&acct.stdout)
    );
}

#[test]
fn an_environment_is_built_once_and_used_by_jobs_on_both_nodes() {
    let Some(uv) = common::test_uv() else {
        return;
    };
    let d = Daemon::start_with_config(
        "none",
        &format!("{CONFIG}[envs]\nuv = \"{}\"\n", uv.display()),
    );
    let dir = tempfile::tempdir().unwrap();
    common::make_wheels(&dir.path().join("wheels"));
    std::fs::write(
        dir.path().join("requirements.txt"),
        format!(
            "--no-index\n--find-links {}\ngpuqdemo==2.0\n",
            dir.path().join("wheels").display()
        ),
    )
    .unwrap();
    let cwd = dir.path().to_str().unwrap();
    // Two GPUs each, two GPUs a node: both run at once, one on each node.
    let code = "import gpuqdemo, os, time; print('version', gpuqdemo.VERSION, 'venv', os.environ['VIRTUAL_ENV'], 'node', os.environ.get('SLURMD_NODENAME')); time.sleep(3)";
    let submit = || {
        d.submit(&[
            "--cwd",
            cwd,
            "--gpus",
            "2",
            "--requirements",
            "requirements.txt",
            "--",
            "python",
            "-c",
            code,
        ])
    };
    let (a, b) = (submit(), submit());
    let mut lines = Vec::new();
    for id in [a, b] {
        let end = d.wait(id);
        assert_eq!(end["state"], "succeeded", "{end}\n{}", log(&d, id));
        let text = log(&d, id);
        let line = text
            .lines()
            .find(|l| l.starts_with("version"))
            .unwrap_or_else(|| panic!("{text}"))
            .to_string();
        lines.push(line);
    }
    let parts: Vec<Vec<&str>> = lines
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(parts[0][1], "2.0");
    assert_eq!(
        parts[0][3], parts[1][3],
        "one environment for both: {lines:?}"
    );
    assert_ne!(
        parts[0][5], parts[1][5],
        "the jobs ran on both nodes: {lines:?}"
    );
    let envs = d.json(&["envs", "--json"]);
    assert_eq!(envs.as_array().unwrap().len(), 1, "{envs}");
    assert_eq!(envs[0]["builds"], 1, "{envs}");
}

#[test]
fn cores_and_memory_a_job_asks_for_are_enforced_by_slurm_s_cgroups() {
    // tests/slurm/run: ConstrainCores, ConstrainRAMSpace without swap,
    // CR_Core_Memory; each node has 2 cores.
    let d = slurm();
    let nproc = |cpus: &str| {
        d.submit(&[
            "--cpus",
            cpus,
            "--mem",
            "200M",
            "--",
            "sh",
            "-c",
            "echo nproc=$(nproc)",
        ])
    };
    let (one, two) = (nproc("1"), nproc("2"));
    // Past its 200M the job is killed by its cgroup, not let to swap or to
    // take the node's memory. (bytearray's pages are written to, so that they
    // are really there.)
    let hog = d.submit(&[
        "--cpus",
        "1",
        "--mem",
        "200M",
        "--",
        "python3",
        "-c",
        "print('allocating', flush=True)\n\
         b = bytearray(400 << 20)\n\
         for i in range(0, len(b), 4096): b[i] = 1\n\
         print('survived', flush=True)",
    ]);
    for (id, cores) in [(one, 1), (two, 2)] {
        let job = d.wait(id);
        assert_eq!(job["state"], "succeeded", "{job}\n{}", log(&d, id));
        assert_eq!(log(&d, id), format!("nproc={cores}\n"), "{job}");
    }
    let job = d.wait(hog);
    let text = log(&d, hog);
    assert!(
        text.contains("allocating") && !text.contains("survived"),
        "{job}\n{text}"
    );
    // gpuq's reason is the batch shell's record, "killed by signal 9
    // (SIGKILL)"; Slurm's own record says why.
    assert_eq!(job["state"], "failed", "{job}\n{text}");
    assert_eq!(job["signal"], 9, "{job}");
    let slurm_job = slurm_id(&d, hog, 1).to_string();
    let mut acct = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            let out = std::process::Command::new("sacct")
                .args(["-c", "-n", "-P", "-o", "JobID,State", "-j", &slurm_job])
                .output()
                .unwrap();
            acct = String::from_utf8_lossy(&out.stdout).into_owned();
            acct.contains("OUT_OF_MEMORY")
        }),
        "Slurm's record of job {slurm_job}: {acct}"
    );
}
