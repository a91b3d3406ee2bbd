//! Confinement, the part of the job contract a backend enforces with cgroups
//! (locally gpuq's own job groups, on Slurm task/cgroup and proctrack/cgroup):
//! a job opens only its own GPUs' device nodes, whatever it sets
//! `CUDA_VISIBLE_DEVICES` to, and nothing it starts outlives `gpuq cancel`.
//!
//! The GPUs are stand-ins that need no driver: device nodes with the NVIDIA
//! major number (195:N for GPU N, 195:255 for nvidiactl) on a tmpfs. Opening
//! one that the job's devices cgroup allows fails with ENXIO (no driver
//! behind it), one that it denies with EPERM.

use crate::backend::Backend;
use crate::common::*;
use serde_json::Value;
use std::time::Duration;

/// Opens device nodes and prints `MODE NAME RESULT` for each (RESULT: the
/// errno's name, or OPENED). `all`: every node in DIR; `cvd`: the GPUs that
/// CUDA_VISIBLE_DEVICES names, as CUDA would open them.
const PROBE: &str = r#"
import errno, os, sys
mode, d = sys.argv[1], sys.argv[2]
if mode == "cvd":
    names = ["nvidia" + i for i in os.environ["CUDA_VISIBLE_DEVICES"].split(",")]
else:
    names = sorted(os.listdir(d))
for n in names:
    try:
        os.close(os.open(os.path.join(d, n), os.O_RDWR))
        r = "OPENED"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    print(mode, n, r, flush=True)
"#;

/// What a probe printed for `mode`: (node name, result).
fn opened<'a>(log: &'a str, mode: &str) -> Vec<(&'a str, &'a str)> {
    log.lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            (w.next()? == mode).then_some(())?;
            Some((w.next()?, w.next()?))
        })
        .collect()
}

/// The GPU a node name stands for (`nvidia3` → 3; nvidiactl → None).
fn gpu_of(name: &str) -> Option<u32> {
    name.strip_prefix("nvidia")?.parse().ok()
}

/// Checks that the job opened exactly its own GPUs (ENXIO: allowed, no driver)
/// and no other (EPERM: denied by its cgroup), and nvidiactl, which CUDA needs.
fn assert_only_own_gpus(b: &Backend, mode: &str, own: &[u32], log: &str, job: &Value) {
    let seen = opened(log, mode);
    let gpus: Vec<(u32, &str)> = seen
        .iter()
        .filter_map(|(n, r)| Some((gpu_of(n)?, *r)))
        .collect();
    assert!(
        gpus.len() >= 2,
        "{}: the job saw its own GPU and another: {log}\n{job}",
        b.name
    );
    for (gpu, result) in &gpus {
        let want = if own.contains(gpu) { "ENXIO" } else { "EPERM" };
        assert_eq!(
            *result, want,
            "{}: a job given GPUs {own:?} opening nvidia{gpu} ({mode}): {log}\n{job}",
            b.name
        );
    }
    if !own.is_empty() && mode == "all" {
        assert!(
            seen.contains(&("nvidiactl", "ENXIO")),
            "{}: a job with GPUs may open nvidiactl: {log}",
            b.name
        );
    }
}

/// The job's shell: its GPUs as Slurm names them, every node in the device
/// directory, then the GPUs 0 and 1 through CUDA_VISIBLE_DEVICES set by the
/// job itself (as the multi-user recipe's `os.environ[...] = "0,1"` does).
const SCRIPT: &str = r#"echo "SLURM_JOB_GPUS=${SLURM_JOB_GPUS-}"
python3 -c "$1" all "$2"
CUDA_VISIBLE_DEVICES=0,1 python3 -c "$1" cvd "$2"
if [ -n "${3-}" ]; then while [ ! -e "$3" ]; do sleep 0.1; done; fi
echo probed"#;

pub fn a_job_opens_only_its_own_gpus_even_after_setting_cuda_visible_devices(b: &Backend) {
    let c = b.confined();
    let nodes = (c.devices)();
    let dir = nodes.dir.to_str().unwrap();
    let d = b.start();
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let go = go.to_str().unwrap();
    // A first job holds a GPU (locally GPU 0) while the next one probes, so
    // that the probe's own GPU is not the first one.
    let holder = d.submit(&[
        "--gpus", "1", "--", "sh", "-c", SCRIPT, "probe", PROBE, dir, go,
    ]);
    d.wait_for_log(holder, "cvd nvidia1", b.start_within);
    let probe = d.submit(&["--gpus", "1", "--", "sh", "-c", SCRIPT, "probe", PROBE, dir]);
    let none = d.submit(&["--", "sh", "-c", SCRIPT, "probe", PROBE, dir]);
    let within = b.job_within(Duration::from_secs(2));
    let mut ended = Vec::new();
    for id in [probe, none] {
        let (code, job) = d.wait_within(id, within);
        let log = d.log(id);
        assert_eq!(code, Some(0), "{}: {job}\n{log}", b.name);
        ended.push((job, log));
    }
    std::fs::write(go, "").unwrap();
    let (code, job) = d.wait_within(holder, within);
    assert_eq!(code, Some(0), "{}: {job}", b.name);
    ended.insert(0, (job, d.log(holder)));

    for (i, (job, log)) in ended.iter().enumerate() {
        let own = (c.own_gpus)(job, log);
        let gpus = if i == 2 { 0 } else { 1 };
        assert_eq!(own.len(), gpus, "{}: {job}\n{log}", b.name);
        assert_only_own_gpus(b, "all", &own, log, job);
        assert_only_own_gpus(b, "cvd", &own, log, job);
    }
    let probe_own = (c.own_gpus)(&ended[1].0, &ended[1].1);
    assert!(
        opened(&ended[1].1, "cvd")
            .iter()
            .any(|(n, r)| gpu_of(n).is_some_and(|g| !probe_own.contains(&g)) && *r == "EPERM"),
        "{}: with CUDA_VISIBLE_DEVICES=0,1 set by the job, the GPU not its own stays closed: {}",
        b.name,
        ended[1].1
    );
}

/// A process, known by its pid and its start time (against pid reuse); killed
/// when dropped, so that a failed test leaves nothing running.
struct Stray {
    pid: u32,
    start: String,
}

impl Stray {
    fn start_time(pid: u32) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after "(comm) ": state first, session the 4th, start time the 20th.
        let rest = stat.rsplit_once(") ")?.1;
        let fields: Vec<&str> = rest.split(' ').collect();
        (fields.first() != Some(&"Z")).then(|| fields.get(19).map(|s| s.to_string()))?
    }

    fn alive(&self) -> bool {
        Self::start_time(self.pid).as_deref() == Some(self.start.as_str())
    }
}

impl Drop for Stray {
    fn drop(&mut self) {
        if self.alive() {
            // SAFETY: a plain syscall; the start time was just checked against pid reuse.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        }
    }
}

pub fn a_process_that_leaves_the_job_s_session_does_not_outlive_cancel(b: &Backend) {
    let _ = b.confined();
    let d = b.start();
    let marks = tempfile::tempdir().unwrap();
    let pid_file = marks.path().join("stray.pid");
    // The stray leaves the job's session and process group (so no signal to the
    // group reaches it) and ignores SIGTERM: only the job's cgroup still holds it.
    let id = d.submit(&[
        "--grace",
        "2s",
        "--env",
        &format!("STRAY={}", pid_file.display()),
        "--",
        "sh",
        "-c",
        "setsid sh -c 'trap \"\" TERM; echo $$ > \"$STRAY.tmp\"; mv \"$STRAY.tmp\" \"$STRAY\"; \
                       while :; do sleep 0.2; done' & \
         trap 'echo got-TERM; exit 0' TERM; echo started; while :; do sleep 0.2; done",
    ]);
    d.wait_for_log(id, "started", b.start_within);
    b.wait_seen_running(&d, id);
    assert!(
        eventually(b.start_within, || pid_file.exists()),
        "{}: the stray never started: {}",
        b.name,
        d.log(id)
    );
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stray = Stray {
        pid,
        start: Stray::start_time(pid).expect("the stray runs"),
    };
    let session = |pid: u32| -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?
            .1
            .split(' ')
            .nth(3)
            .map(str::to_string)
    };
    assert_eq!(
        session(pid),
        Some(pid.to_string()),
        "the stray leads a session of its own"
    );
    d.ok(&["cancel", &id.to_string()]);
    let (code, job) = d.wait_within(id, b.job_within(Duration::from_secs(2) + b.kill_slack));
    assert_eq!(code, Some(1), "{}: {job}", b.name);
    assert_eq!(job["state"], "cancelled", "{}: {job}", b.name);
    assert!(
        !stray.alive(),
        "{}: process {pid}, which left the job's session, outlived gpuq cancel: {job}\n{}",
        b.name,
        d.daemon_log_tail(20)
    );
}
