//! Running a job in a container with podman: the command line that puts the
//! job contract inside (its directories mounted at the same paths, its
//! variables passed by name, its GPUs), run as the job's user (rootless, its
//! uid mapped to itself inside).

/// A line to the log (stdout and stderr are the build's or job's log): never
/// panics on a failed write, as println! would on a closed pipe.
macro_rules! logln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

use crate::layout::JobDir;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How podman is run on this node (from the daemon's config).
#[derive(Debug, Clone)]
pub struct Podman {
    pub program: PathBuf,
    /// Before `run` (e.g. `--runtime runc`).
    pub global_args: Vec<String>,
    /// After `run`, before the image (e.g. `--ulimit nofile=1024:1024`).
    pub run_args: Vec<String>,
}

/// NVIDIA's container toolkit writes its CDI spec to one of these.
const CDI_SPECS: &[&str] = &[
    "/etc/cdi/nvidia.yaml",
    "/etc/cdi/nvidia.json",
    "/var/run/cdi/nvidia.yaml",
    "/var/run/cdi/nvidia.json",
];

/// The GPUs go in through CDI when the NVIDIA container toolkit set it up.
pub fn cdi_available() -> bool {
    CDI_SPECS.iter().any(|p| Path::new(p).is_file())
}

/// The container's name for one attempt (so it can be removed after the attempt).
pub fn container_name(job: u64, attempt: u32) -> String {
    format!("gpuq-{job}-{attempt}")
}

/// Everything the wrapper needs about one attempt.
pub struct ContainerJob<'a> {
    pub job: u64,
    pub attempt: u32,
    pub image: &'a str,
    pub argv: &'a [String],
    pub cwd: &'a str,
    pub dir: &'a JobDir,
    /// The host indices of its GPUs.
    pub gpus: &'a [u32],
    /// Names of the variables to pass in (their values come from podman's own
    /// environment, so no value is ever on a command line).
    pub pass: Vec<String>,
    /// Runs as a user other than root (rootless: keep the uid inside).
    pub rootless: bool,
    pub cdi: bool,
}

/// The podman command line for the job, and variables to set for it (inside
/// values that differ from the host's: the GPUs' indices under CDI).
pub fn wrap(
    relay: &Path,
    p: &Podman,
    c: &ContainerJob<'_>,
) -> (Vec<String>, BTreeMap<String, String>) {
    let mut argv: Vec<String> = vec![
        relay.to_string_lossy().into_owned(),
        "__container".into(),
        container_name(c.job, c.attempt),
        "--".into(),
        p.program.to_string_lossy().into_owned(),
    ];
    argv.extend(p.global_args.iter().cloned());
    argv.extend(
        [
            "run",
            "--rm",
            "--name",
            &container_name(c.job, c.attempt),
            // The daemon's API, MLflow's and NCCL's peers are on the host's network.
            "--network",
            "host",
            "--pull",
            "never",
        ]
        .map(String::from),
    );
    if c.rootless {
        argv.extend(["--userns", "keep-id"].map(String::from));
    }
    let mut extra = BTreeMap::new();
    if c.cdi {
        for g in c.gpus {
            argv.push("--device".into());
            argv.push(format!("nvidia.com/gpu={g}"));
        }
        // Inside, CDI's devices are numbered from 0.
        let inside: Vec<String> = (0..c.gpus.len()).map(|i| i.to_string()).collect();
        extra.insert(
            "GPUQ_CONTAINER_CUDA_VISIBLE_DEVICES".into(),
            inside.join(","),
        );
    }
    let mount = |argv: &mut Vec<String>, path: &Path, ro: bool| {
        let p = path.to_string_lossy();
        argv.push("--volume".into());
        argv.push(format!("{p}:{p}{}", if ro { ":ro" } else { "" }));
    };
    mount(&mut argv, Path::new(c.cwd), false);
    mount(&mut argv, &c.dir.checkpoints(), false);
    mount(&mut argv, &c.dir.outputs(), false);
    mount(&mut argv, &c.dir.metrics(), false);
    mount(&mut argv, &c.dir.control_dir(), true);
    argv.push("--workdir".into());
    argv.push(c.cwd.to_string());
    for name in &c.pass {
        argv.push("--env".into());
        if c.cdi && name == "CUDA_VISIBLE_DEVICES" {
            argv.push(format!(
                "CUDA_VISIBLE_DEVICES={}",
                extra["GPUQ_CONTAINER_CUDA_VISIBLE_DEVICES"]
            ));
        } else {
            argv.push(name.clone());
        }
    }
    argv.extend(p.run_args.iter().cloned());
    argv.push(c.image.to_string());
    argv.extend(c.argv.iter().cloned());
    (argv, extra)
}

/// The bounds of the job's own cgroups, as the relay (the job's process,
/// inside them) reads them: a rootful podman puts the container in cgroups of
/// its own, outside the job's, so it is given the same bounds itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobBounds {
    pub memory_bytes: Option<u64>,
    pub cpus: Option<String>,
    pub pids: Option<u64>,
}

impl JobBounds {
    /// Reads this process's groups; all `None` outside a job's groups
    /// (confinement off), where podman keeps its own defaults.
    pub fn of_this_process() -> Self {
        let Ok(m) = crate::cgroup::detect::mounts() else {
            return Self::default();
        };
        let in_job = |p: &Path| {
            p.to_string_lossy()
                .contains(&format!("/{}/job-", crate::cgroup::JOBS_DIR))
        };
        let read = |p: PathBuf| {
            std::fs::read_to_string(p)
                .ok()
                .map(|t| t.trim().to_string())
        };
        let number = |t: Option<String>| t.and_then(|t| t.parse::<u64>().ok());
        let v2 =
            m.v2.as_ref()
                .map(|(mount, own)| mount.join(own.trim_start_matches('/')))
                .filter(|p| in_job(p));
        let v1 = |ctrl: &str| m.v1.get(ctrl).filter(|p| in_job(p)).cloned();
        let memory_bytes = match (v1("memory"), &v2) {
            (Some(g), _) => number(read(g.join("memory.limit_in_bytes"))),
            (None, Some(g)) => number(read(g.join("memory.max"))),
            _ => None,
        }
        // v1's "no limit" is a huge page-rounded number.
        .filter(|&b| b < 1 << 60);
        let cpus = match (v1("cpuset"), &v2) {
            (Some(g), _) => read(g.join("cpuset.cpus")),
            (None, Some(g)) => read(g.join("cpuset.cpus.effective")),
            _ => None,
        }
        .filter(|c| !c.is_empty());
        let pids = match (v1("pids"), &v2) {
            (Some(g), _) => number(read(g.join("pids.max"))),
            (None, Some(g)) => number(read(g.join("pids.max"))),
            _ => None,
        };
        Self {
            memory_bytes,
            cpus,
            pids,
        }
    }

    /// podman's flags for these bounds: memory without swap, the cpuset, the
    /// process bound.
    pub fn podman_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(b) = self.memory_bytes {
            out.push(format!("--memory={b}b"));
            out.push(format!("--memory-swap={b}b"));
        }
        if let Some(c) = &self.cpus {
            out.push(format!("--cpuset-cpus={c}"));
        }
        if let Some(p) = self.pids {
            out.push(format!("--pids-limit={p}"));
        }
        out
    }
}

/// Signals the stop protocol sends, relayed to the container.
const RELAYED: [i32; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Body of `gpuq __container NAME -- PODMAN… run …`, the job's process: runs
/// podman's client in a process group of its own and relays the stop
/// protocol's signals with `podman kill` (a rootless client does not proxy
/// them reliably); exits with the container's status.
pub fn relay_main(name: &str, podman_argv: &[String]) -> i32 {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let Some(run) = podman_argv.iter().position(|a| a == "run") else {
        logln!("gpuq __container is internal: it is started by the daemon");
        return 2;
    };
    // SAFETY: signal-mask calls on this thread before any other thread exists.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut set);
        for s in RELAYED {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let mut argv = podman_argv.to_vec();
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } == 0 {
        // Rootful podman makes the container's cgroups outside the job's: it
        // gets the job's bounds itself. (Rootless podman on cgroup v1 makes
        // none: the container stays in the job's groups.)
        let bounds = JobBounds::of_this_process().podman_args();
        argv.splice(run + 1..run + 1, bounds);
    }
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).process_group(0);
    // SAFETY: async-signal-safe: the child gets an empty signal mask back.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            logln!("gpuq: cannot start {}: {e}", podman_argv[0]);
            return 127;
        }
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code().unwrap_or(128 + status.signal().unwrap_or(0));
        }
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: 200_000_000,
        };
        // SAFETY: waits for one of the blocked signals, or the timeout.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if sig > 0 {
            let _ = std::process::Command::new(&podman_argv[0])
                .args(&podman_argv[1..run])
                .args(["kill", "--signal", &sig.to_string(), name])
                .stdout(std::process::Stdio::null())
                .status();
        }
    }
}

/// What the executor adds to every job's environment at launch (after the
/// command is wrapped): passed by name too.
const CONTRACT: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "GPUQ_GPUS",
    "CUDA_DEVICE_ORDER",
    "GPUQ_JOB_ID",
    "GPUQ_ATTEMPT",
    "GPUQ_CHECKPOINT_DIR",
    "GPUQ_OUTPUT_DIR",
    "GPUQ_METRICS_FILE",
    "GPUQ_CONTROL_DIR",
    "GPUQ_URL",
    "GPUQ_TOKEN",
    "USER",
    "LOGNAME",
];

/// The job contract's variables that go into a container: gpuq's own, CUDA's,
/// MLflow's, the spec's, and a few a training script commonly reads.
pub fn passed_names(
    env: &BTreeMap<String, String>,
    spec_env: &BTreeMap<String, String>,
) -> Vec<String> {
    let contract = |k: &str| {
        k.starts_with("GPUQ_")
            || k.starts_with("CUDA_")
            || k.starts_with("MLFLOW_")
            || k.starts_with("NCCL_")
            || matches!(
                k,
                "PYTHONHASHSEED"
                    | "MASTER_ADDR"
                    | "MASTER_PORT"
                    | "NNODES"
                    | "NODE_RANK"
                    | "JUPYTER_TOKEN"
            )
    };
    let mut names: std::collections::BTreeSet<String> = env
        .keys()
        .filter(|k| contract(k) || spec_env.contains_key(*k))
        .cloned()
        .collect();
    names.extend(CONTRACT.iter().map(|s| s.to_string()));
    names.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_bounds_become_podmans_flags() {
        let b = JobBounds {
            memory_bytes: Some(64 << 20),
            cpus: Some("0-1".into()),
            pids: Some(4096),
        };
        assert_eq!(
            b.podman_args(),
            [
                "--memory=67108864b",
                "--memory-swap=67108864b",
                "--cpuset-cpus=0-1",
                "--pids-limit=4096"
            ]
        );
        assert!(JobBounds::default().podman_args().is_empty());
        // This test process is in no job's group: no bounds.
        assert_eq!(JobBounds::of_this_process(), JobBounds::default());
    }

    #[test]
    fn the_contract_goes_in_by_name_and_the_directories_at_their_paths() {
        let dir = JobDir::new(Path::new("/data"), 7);
        let p = Podman {
            program: "/usr/bin/podman".into(),
            global_args: vec!["--runtime".into(), "runc".into()],
            run_args: vec!["--ulimit".into(), "nofile=1024:1024".into()],
        };
        let argv = ["python".to_string(), "train.py".into()];
        let mut env = BTreeMap::new();
        env.insert("GPUQ_TOKEN".into(), "secret".into());
        env.insert("CUDA_VISIBLE_DEVICES".into(), "2,3".into());
        env.insert("HOME".into(), "/home/a".into());
        env.insert("LR".into(), "0.1".into());
        let spec_env: BTreeMap<_, _> = [("LR".to_string(), "0.1".to_string())].into();
        let c = ContainerJob {
            job: 7,
            attempt: 2,
            image: "localhost/train:1",
            argv: &argv,
            cwd: "/home/a/proj",
            dir: &dir,
            gpus: &[2, 3],
            pass: passed_names(&env, &spec_env),
            rootless: true,
            cdi: false,
        };
        let (cmd, extra) = wrap(Path::new("/bin/gpuq"), &p, &c);
        let line = cmd.join(" ");
        assert!(
            line.starts_with(
                "/bin/gpuq __container gpuq-7-2 -- /usr/bin/podman --runtime runc run --rm --name gpuq-7-2"
            ),
            "{line}"
        );
        assert!(line.contains("--userns keep-id"));
        assert!(line.contains("--volume /home/a/proj:/home/a/proj"));
        assert!(line.contains("--volume /data/jobs/7/checkpoints:/data/jobs/7/checkpoints"));
        assert!(line.contains("--workdir /home/a/proj"));
        assert!(
            line.contains("--env GPUQ_JOB_ID") && line.contains("--env LR"),
            "{line}"
        );
        assert!(!line.contains("secret") && !line.contains("HOME"), "{line}");
        assert!(line.ends_with("--ulimit nofile=1024:1024 localhost/train:1 python train.py"));
        assert!(extra.is_empty());
        let (cmd, _) = wrap(Path::new("/bin/gpuq"), &p, &ContainerJob { cdi: true, ..c });
        let line = cmd.join(" ");
        assert!(line.contains("--device nvidia.com/gpu=2 --device nvidia.com/gpu=3"));
        assert!(line.contains("--env CUDA_VISIBLE_DEVICES=0,1"), "{line}");
    }
}
