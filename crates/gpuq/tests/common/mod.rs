//! Test harness: a real daemon in a temporary GPUQ_HOME on a free loopback
//! port, driven through the real CLI binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const GPUQ: &str = env!("CARGO_BIN_EXE_gpuq");

pub fn running_as_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The tests' daemons run their jobs as whoever runs the tests; when that is
/// root (CI), the config must allow root jobs, as a lab's would have to.
pub fn as_tests_config(toml: &str) -> String {
    if running_as_root() && !toml.contains("allow_root_jobs") {
        format!("allow_root_jobs = true\n{toml}")
    } else {
        toml.to_string()
    }
}

/// The Slurm backend's config for the cluster `bash tests/slurm/run` brings up.
pub const SLURM_CONFIG: &str =
    "backend = \"slurm\"\n[slurm]\npartition = \"gpu\"\npoll_interval = \"300ms\"\nmax_gpus = 8\n";

pub struct Daemon {
    /// Keeps a temporary home alive (None when the test chose the directory).
    _temp: Option<tempfile::TempDir>,
    home: std::path::PathBuf,
    pub url: String,
    child: Option<Child>,
    gpus: String,
    env: Vec<(String, String)>,
}

impl Daemon {
    pub fn start(gpus: &str) -> Self {
        Self::start_with_config(gpus, "")
    }

    /// A daemon started with `toml` as its `$GPUQ_HOME/gpuq.toml` (with
    /// `allow_root_jobs` when the tests run as root: see `as_tests_config`).
    pub fn start_with_config(gpus: &str, toml: &str) -> Self {
        let temp = tempfile::tempdir().expect("temp home");
        std::fs::write(temp.path().join("gpuq.toml"), as_tests_config(toml)).unwrap();
        let home = temp.path().to_path_buf();
        Self::launch(Some(temp), home, gpus)
    }

    /// A daemon with exactly `toml` as its config: as root, its jobs may not run as root.
    pub fn start_strict(gpus: &str, toml: &str) -> Self {
        let temp = tempfile::tempdir().expect("temp home");
        std::fs::write(temp.path().join("gpuq.toml"), toml).unwrap();
        let home = temp.path().to_path_buf();
        Self::launch(Some(temp), home, gpus)
    }

    /// A daemon with an optional `gpuq.toml` and extra environment from its first start.
    pub fn start_configured(gpus: &str, toml: Option<&str>, env: &[(&str, &str)]) -> Self {
        let temp = tempfile::tempdir().expect("temp home");
        std::fs::write(
            temp.path().join("gpuq.toml"),
            as_tests_config(toml.unwrap_or("")),
        )
        .unwrap();
        let mut d = Daemon {
            home: temp.path().to_path_buf(),
            _temp: Some(temp),
            url: String::new(),
            child: None,
            gpus: gpus.to_string(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        d.spawn();
        d
    }

    /// SIGTERM: the daemon's orderly stop; returns once it exited (or 10 s passed).
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        // SAFETY: plain syscall on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let exited = eventually(Duration::from_secs(10), || {
            matches!(c.try_wait(), Ok(Some(_)))
        });
        if !exited {
            let _ = c.kill();
            let _ = c.wait();
        }
        exited
    }

    /// POSTs a raw submit request (JSON) with the daemon's token; returns the body.
    pub fn post_job(&self, body: &str) -> String {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "-H",
            ])
            .arg(format!("authorization: Bearer {}", self.token()))
            .arg("--data-binary")
            .arg(body)
            .arg(format!("{}/v1/jobs", self.url))
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Submits through the API as `user` (the daemon's token is an admin's, so it
    /// may name the user); returns the job id.
    pub fn submit_as(&self, user: &str, gpus: u32, argv: &[&str]) -> u64 {
        let body = serde_json::json!({
            "spec": { "command": argv, "gpus": gpus },
            "cwd": "/tmp",
            "env": { "PATH": std::env::var("PATH").unwrap_or_default() },
            "user": user,
        });
        let answer = self.post_job(&body.to_string());
        let job: serde_json::Value = serde_json::from_str(&answer)
            .unwrap_or_else(|_| panic!("submit as {user} failed: {answer}"));
        job["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("submit as {user} failed: {answer}"))
    }

    /// A daemon whose GPUQ_HOME is `home` (created if needed).
    pub fn start_in(home: &Path, gpus: &str) -> Self {
        std::fs::create_dir_all(home).unwrap();
        let config = home.join("gpuq.toml");
        if !config.exists() {
            std::fs::write(&config, as_tests_config("")).unwrap();
        }
        Self::launch(None, home.to_path_buf(), gpus)
    }

    fn launch(temp: Option<tempfile::TempDir>, home: std::path::PathBuf, gpus: &str) -> Self {
        let mut d = Daemon {
            _temp: temp,
            home,
            url: String::new(),
            child: None,
            gpus: gpus.to_string(),
            env: Vec::new(),
        };
        d.spawn();
        d
    }

    fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.home.as_path().join("daemon.json"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.as_path().join("test-daemon.log"))
            .unwrap();
        let child = Command::new(GPUQ)
            .args(["server", "--listen", "127.0.0.1:0", "--gpus", &self.gpus])
            .env("GPUQ_HOME", self.home.as_path())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("daemon starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(text) = std::fs::read_to_string(self.home.as_path().join("daemon.json")) {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                self.url = v["url"].as_str().unwrap().to_string();
                return;
            }
            if Instant::now() >= deadline {
                let log = self.daemon_log();
                let tail: Vec<&str> = log.lines().rev().take(25).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "daemon did not start within 20 s; the end of its log:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL the daemon (jobs keep running under their supervisors).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// An environment variable for the daemon from its next start on.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_string(), value.to_string()));
    }

    /// The `--gpus` of the daemon from its next start on.
    pub fn set_gpus(&mut self, gpus: &str) {
        self.gpus = gpus.to_string();
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// What the daemon logged: its stderr (the start, a panic) and its log file
    /// (`daemon.log`, after the older `daemon.log.1`).
    pub fn daemon_log(&self) -> String {
        ["test-daemon.log", "daemon.log.1", "daemon.log"]
            .iter()
            .map(|name| std::fs::read_to_string(self.home.join(name)).unwrap_or_default())
            .collect()
    }

    pub fn path(&self) -> &Path {
        self.home.as_path()
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(GPUQ);
        c.args(args)
            .env("GPUQ_HOME", self.home.as_path())
            .env("GPUQ_URL", &self.url)
            .env("GPUQ_NO_AUTOSTART", "1")
            .env("NO_COLOR", "1")
            // Capture (git, Python) adds a few hundred ms to a submit on a loaded
            // machine, more than tests of the queue's timing allow for; tests/repro.rs
            // turns it back on.
            .env("GPUQ_NO_REPRO", "1");
        c
    }

    pub fn gpuq(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("gpuq runs")
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.gpuq(args);
        assert!(
            out.status.success(),
            "gpuq {args:?} failed ({:?}): {}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Submits and returns the job id.
    pub fn submit(&self, args: &[&str]) -> u64 {
        let mut full = vec!["submit"];
        full.extend_from_slice(args);
        self.ok(&full).trim().parse().expect("submit prints an id")
    }

    /// Runs a gpuq command that prints JSON (`--json`) and parses its output.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// GETs an API path with the daemon's token; returns the body.
    pub fn get(&self, path: &str) -> String {
        let out = Command::new("curl")
            .args(["-sS", "-H"])
            .arg(format!("authorization: Bearer {}", self.token()))
            .arg(format!("{}{path}", self.url))
            .output()
            .expect("curl runs");
        succeeded(&out)
    }

    pub fn show(&self, id: u64) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["show", &id.to_string(), "--json"])).unwrap()
    }

    pub fn wait(&self, id: u64) -> serde_json::Value {
        let _ = self.gpuq(&["wait", &id.to_string()]);
        self.show(id)
    }

    /// Waits until the job runs (at most 10 s).
    pub fn wait_running(&self, id: u64) {
        let running = eventually(Duration::from_secs(10), || {
            self.show(id)["state"] == "running"
        });
        assert!(running, "job {id} never ran");
    }

    /// The log of the job's latest attempt, as `gpuq logs` prints it.
    pub fn log(&self, id: u64) -> String {
        self.ok(&["logs", &id.to_string()])
    }

    /// Waits until the job's log has a line containing `needle`; panics (with
    /// the job and the daemon's log) if none came within `timeout`.
    pub fn wait_for_log(&self, id: u64, needle: &str, timeout: Duration) -> String {
        let mut text = String::new();
        let seen = eventually(timeout, || {
            text = self.log(id);
            text.lines().any(|l| l.contains(needle))
        });
        assert!(
            seen,
            "job {id} did not log {needle:?} within {timeout:?}; its log:\n{text}\njob: {}\n{}",
            self.show(id),
            self.daemon_log_tail(40)
        );
        text
    }

    /// `gpuq wait ID` with a deadline: its exit status and the job as `show`
    /// gives it afterwards. Panics (with the job and the daemon's log) when the
    /// job has not ended within `timeout`.
    pub fn wait_within(&self, id: u64, timeout: Duration) -> (Option<i32>, serde_json::Value) {
        let out = output_within(&mut self.cmd(&["wait", &id.to_string()]), timeout);
        let Some(out) = out else {
            panic!(
                "job {id} did not end within {timeout:?}: {}\n{}",
                self.show(id),
                self.daemon_log_tail(40)
            );
        };
        (out.status.code(), self.show(id))
    }

    /// The last `n` lines of the daemon's log, for failure messages.
    pub fn daemon_log_tail(&self, n: usize) -> String {
        let log = self.daemon_log();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "the end of the daemon's log:\n{}",
            lines[lines.len().saturating_sub(n)..].join("\n")
        )
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.home.as_path().join("token")).unwrap()
    }

    pub fn job_dir(&self, id: u64) -> PathBuf {
        self.home.as_path().join("jobs").join(id.to_string())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        remove_empty_job_groups(&self.home);
    }
}

/// The empty job cgroups a test's daemon (of `home`) left (a job it never
/// ended, a daemon killed with -9), so test runs do not pile them up under
/// gpuq-jobs. A group still holding a process is left alone.
fn remove_empty_job_groups(home: &std::path::Path) {
    let Ok(home) = home.canonicalize() else {
        return;
    };
    let suffix = format!(".{}", gpuq_exec::local::home_tag(&home));
    let Ok(mounts) = gpuq_exec::cgroup::detect::mounts() else {
        return;
    };
    let parents = mounts
        .v1
        .values()
        .cloned()
        .chain(mounts.v2.map(|(p, _)| gpuq_exec::cgroup::v2::base_of(&p)))
        .map(|p| p.join(gpuq_exec::cgroup::JOBS_DIR));
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let busy = std::fs::read_to_string(e.path().join("cgroup.procs"))
                .is_ok_and(|p| !p.trim().is_empty());
            if name.starts_with("job-") && name.ends_with(&suffix) && !busy {
                let _ = gpuq_exec::cgroup::remove_tree(&e.path());
            }
        }
    }
}

/// The repository's root (examples run from there).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Asserts a command succeeded (showing its output if not); returns its stdout.
pub fn succeeded(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(out), stderr(out));
    stdout(out)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command to its end with its output captured; kills it and returns
/// None if it has not ended within `timeout`.
pub fn output_within(cmd: &mut Command, timeout: Duration) -> Option<Output> {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the command") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    status.map(|status| Output {
        status,
        stdout,
        stderr,
    })
}

/// Polls `f` until it returns true or the timeout passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The NVML stand-in library (crates/nvml-stand-in), built once per test run
/// into its own target directory so it never waits on the outer build's lock.
pub fn nvml_stand_in() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = repo_root().join("target").join("stand-in");
            let status = Command::new(env!("CARGO"))
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "gpuq-nvml-stand-in",
                    "--target-dir",
                ])
                .arg(&target)
                .current_dir(repo_root())
                .status()
                .expect("cargo runs");
            assert!(status.success(), "the NVML stand-in did not build");
            target.join("debug").join("libnvidia_ml.so")
        })
        .clone()
}

/// A local account for the system tests (made with useradd on first use); its uid.
pub fn ensure_user(name: &str) -> u32 {
    // useradd locks /etc/passwd: tests running at once take turns.
    static USERADD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = USERADD.lock().unwrap_or_else(|e| e.into_inner());
    if Command::new("id")
        .arg("-u")
        .arg(name)
        .output()
        .unwrap()
        .status
        .success()
    {
    } else {
        let ok = Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", name])
            .status()
            .unwrap();
        assert!(
            ok.success(),
            "useradd {name} failed: the system tests need root"
        );
    }
    let out = Command::new("id").arg("-u").arg(name).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Runs gpuq as a local user, through the daemon's unix socket (no token).
pub fn as_user(d: &Daemon, user: &str, args: &[&str]) -> Output {
    as_user_in(d.path(), user, Path::new("/tmp"), args)
}

/// Runs gpuq as a local user for the daemon of `home`, from the directory `cwd`.
pub fn as_user_in(home: &Path, user: &str, cwd: &Path, args: &[&str]) -> Output {
    as_user_with_env(home, user, cwd, &[], args)
}

/// `as_user_in` with `vars` (`NAME=VALUE`) added to the user's environment.
pub fn as_user_with_env(
    home: &Path,
    user: &str,
    cwd: &Path,
    vars: &[&str],
    args: &[&str],
) -> Output {
    Command::new("runuser")
        .args([
            "-u",
            user,
            "--",
            "env",
            "-u",
            "GPUQ_URL",
            "-u",
            "GPUQ_TOKEN",
        ])
        .args(vars)
        .arg(format!("GPUQ_HOME={}", home.display()))
        .arg("GPUQ_NO_AUTOSTART=1")
        .arg("NO_COLOR=1")
        .arg(GPUQ)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// uv for the environment tests: `GPUQ_TEST_UV`, beside the test interpreter,
/// in scripts/test's venv, or on PATH. Missing: a failure under
/// `GPUQ_TEST_STRICT` (scripts/test), else the test says it skipped.
pub fn test_uv() -> Option<PathBuf> {
    let venv = std::env::var_os("GPUQ_TEST_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/gpuq/test-venv"))
        });
    let candidates = [
        std::env::var_os("GPUQ_TEST_UV").map(PathBuf::from),
        std::env::var_os("GPUQ_TEST_PYTHON")
            .map(PathBuf::from)
            .and_then(|p| Some(p.parent()?.join("uv"))),
        venv.map(|v| v.join("bin/uv")),
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("uv"))
                .find(|p| p.is_file())
        }),
    ];
    let found = candidates.into_iter().flatten().find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("GPUQ_TEST_STRICT").is_none(),
            "uv is missing: scripts/test installs it into its venv"
        );
        eprintln!("skipped: uv is not installed (scripts/test installs it)");
    }
    found
}

/// Tiny wheels (gpuqdemo 1.0 and 2.0) in `dir`, to install from without an index.
pub fn make_wheels(dir: &Path) {
    let ok = Command::new("python3")
        .arg(repo_root().join("tests/envs/make_wheels.py"))
        .arg(dir)
        .status()
        .unwrap();
    assert!(ok.success(), "make_wheels.py failed");
}

/// A tmpfs of `size` (e.g. "24m") mounted at `DIR/small` for a full-disk test
/// (root only); unmounted when dropped.
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    pub fn mount(dir: &Path, size: &str) -> Self {
        let mnt = dir.join("small");
        std::fs::create_dir(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap();
        assert!(
            ok.success(),
            "mounting a tmpfs needs root: run as root or without the system-tests feature"
        );
        SmallDisk(mnt)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Free bytes on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(u64::MAX)
}
