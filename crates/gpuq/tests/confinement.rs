//! Jobs confined by cgroups, attacked for real through a root daemon: a job
//! reaches only its own GPU's device node (through the v1 devices controller
//! and through the cgroup v2 device program), a process that left the job's
//! process group dies with it before its GPU is given to the next job, a job
//! runs on its cores, a fork bomb stops at the process bound, memory past the
//! limit is an OOM kill that spares the neighbour, and a daemon killed with -9
//! finds its jobs' groups again.
//!
//! Stand-in GPUs: device nodes made with mknod (major 195, minor = the GPU's)
//! on a tmpfs mounted for the test. Opening an allowed node fails with ENXIO
//! (no driver behind it); a denied one with EPERM. Needs root and cgroups:
//! the `system-tests` feature.
#![cfg(feature = "system-tests")]

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const USER: &str = "gpuqtestconf";
const ENXIO: &str = "6";
const EPERM: &str = "1";

/// Device nodes for two GPUs and the control node, on a tmpfs that allows
/// device nodes (unmounted when dropped).
fn stand_in_gpus(dir: &Path) -> SmallDisk {
    let disk = SmallDisk::mount(dir, "1m");
    for (name, minor) in [("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)] {
        let p = disk.path().join(name);
        let ok = std::process::Command::new("mknod")
            .args(["-m", "666"])
            .arg(&p)
            .args(["c", "195", &minor.to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "mknod {name}");
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(disk.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    disk
}

/// A job's probe: what it was given, then the errno of opening each node
/// after it set CUDA_VISIBLE_DEVICES=0,1 itself.
fn probe(devdir: &Path) -> String {
    format!(
        r#"
import os
print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"), "gpus", os.environ.get("GPUQ_GPUS"))
os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
for name in ["nvidia0", "nvidia1", "nvidiactl"]:
    try:
        os.close(os.open(os.path.join({dir:?}, name), os.O_RDWR))
        print(name, "opened")
    except OSError as e:
        print(name, e.errno)
"#,
        dir = devdir.display().to_string()
    )
}

fn line<'a>(log: &'a str, key: &str) -> &'a str {
    log.lines()
        .find(|l| l.starts_with(&format!("{key} ")))
        .map(|l| l[key.len() + 1..].trim())
        .unwrap_or_else(|| panic!("no {key} line in:\n{log}"))
}

fn root_daemon(toml: &str, gpus: &str) -> Option<Daemon> {
    if !running_as_root() {
        eprintln!("skipped: needs root");
        return None;
    }
    let d = Daemon::start_with_config(gpus, toml);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(d)
}

#[test]
fn a_job_reaches_only_its_own_gpu_through_the_v1_controller_and_the_v2_program() {
    ensure_user(USER);
    let tmp = tempfile::tempdir().unwrap();
    let dev = stand_in_gpus(tmp.path());
    for (devices, says) in [
        ("v1", "cgroup v1 (devices"),
        ("bpf", "cgroup v2 device program"),
    ] {
        let Some(d) = root_daemon(
            &format!("[confinement]\ndevices = \"{devices}\"\n"),
            "sim:2",
        ) else {
            return;
        };
        let info: serde_json::Value = serde_json::from_str(&d.get("/v1/info")).unwrap();
        let described = info["confinement"].as_str().unwrap_or_default().to_string();
        assert!(described.starts_with(says), "{devices}: {described}");
        // GPU 0 is taken, so the probe gets GPU 1.
        let holder = d.submit_as(USER, 1, &["sleep", "60"]);
        d.wait_running(holder);
        let code = probe(dev.path());
        let id = d.submit_as(USER, 1, &["python3", "-c", &code]);
        let job = d.wait(id);
        assert_eq!(job["state"], "succeeded", "{devices}: {job}");
        let log = d.log(id);
        let uuid = "GPU-51570001-0000-4000-8000-000000000000";
        assert_eq!(line(&log, "visible"), format!("{uuid} gpus 1"), "{devices}");
        assert_eq!(
            line(&log, "nvidia1"),
            ENXIO,
            "{devices}: its own GPU:\n{log}"
        );
        assert_eq!(
            line(&log, "nvidia0"),
            EPERM,
            "{devices}: another's GPU:\n{log}"
        );
        assert_eq!(line(&log, "nvidiactl"), ENXIO, "{devices}:\n{log}");
        // The attempt's groups are gone with it.
        assert!(!d.job_dir(id).join("attempt-1.cgroup").exists());
        d.ok(&["cancel", &holder.to_string()]);
        // The doctor's line (the daemon's view, before it runs its own checks).
        let doctor = d.gpuq(&["doctor", "--json", "--gpus", "0"]);
        let text = String::from_utf8_lossy(&doctor.stdout);
        assert!(text.contains("\"confinement\""), "{devices}: {text}");
    }
}

/// A job whose child leaves its process group (setsid) and ignores SIGTERM;
/// the child's pid lands in `pidfile`.
fn straggler(pidfile: &Path) -> Vec<String> {
    let code = format!(
        r#"
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({pidfile:?}, "w").write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"#,
        pidfile = pidfile.display().to_string()
    );
    vec!["python3".into(), "-c".into(), code]
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only probes; pid > 1 is checked by the caller's parse.
    pid > 1 && unsafe { libc::kill(pid, 0) } == 0
}

fn read_pid(d: &Daemon, id: u64, path: &Path) -> i32 {
    assert!(
        eventually(Duration::from_secs(20), || std::fs::read_to_string(path)
            .is_ok_and(|s| !s.is_empty())),
        "the straggler never started: {}\n{}",
        d.show(id),
        d.log(id)
    );
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_child_that_left_the_process_group_dies_before_its_gpu_is_given_again() {
    let Some(d) = root_daemon("", "sim:1") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("straggler.pid");
    let argv = straggler(&pidfile);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut args = vec!["--gpus", "1", "--"];
    args.extend(&argv);
    let first = d.submit(&args);
    let pid = read_pid(&d, first, &pidfile);
    // The next job on the GPU says whether the straggler still lived when it began.
    let check = format!("import os\ntry:\n    os.kill({pid}, 0)\n    print('straggler alive')\nexcept ProcessLookupError:\n    print('straggler gone')\n");
    let next = d.submit(&["--gpus", "1", "--", "python3", "-c", &check]);
    d.ok(&["cancel", &first.to_string()]);
    let job = d.wait(next);
    assert_eq!(job["state"], "succeeded", "{job}");
    assert!(d.log(next).contains("straggler gone"), "{}", d.log(next));
    assert!(!alive(pid), "the straggler outlived the cancel");
}

#[test]
fn a_job_runs_on_its_cores_and_a_fork_bomb_stops_at_the_process_bound() {
    let Some(d) = root_daemon("[confinement]\nmax_processes = 40\n", "sim:1") else {
        return;
    };
    let id = d.submit(&["--cpus", "1", "--", "nproc"]);
    let job = d.wait(id);
    assert_eq!(job["state"], "succeeded", "{job}\n{}", d.daemon_log());
    assert_eq!(d.log(id).trim(), "1", "nproc in a job with --cpus 1");
    let bomb = r#"
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print("stopped after", n, "forks:", e.strerror)
"#;
    let id = d.submit(&["--", "python3", "-c", bomb]);
    let log = d.wait_for_log(id, "stopped after", Duration::from_secs(60));
    let n: u32 = log
        .split_whitespace()
        .skip_while(|w| *w != "after")
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(n < 40, "{log}");
    // Its sleeping children end with it (killed through the cgroup).
    assert_eq!(d.wait(id)["state"], "succeeded");
    // The daemon lives and serves.
    d.ok(&["ls"]);
}

#[test]
fn memory_past_the_limit_is_an_oom_kill_and_the_neighbour_runs_on() {
    let Some(d) = root_daemon("", "none") else {
        return;
    };
    let neighbour = d.submit(&["--mem", "64M", "--", "sh", "-c", "sleep 3; echo still here"]);
    let hog = r#"
b = bytearray(400 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
print("not killed")
"#;
    let id = d.submit(&["--mem", "64M", "--", "python3", "-c", hog]);
    let job = d.wait(id);
    assert_eq!(job["state"], "failed", "{job}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.job_dir(id).join("attempt-1.exit")).unwrap())
            .unwrap();
    assert_eq!(record["usage"]["oom_killed"], true, "{record}");
    assert_eq!(record["usage"]["memory_limit_bytes"], 64 << 20, "{record}");
    assert!(
        job["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("out of memory"),
        "{job}"
    );
    let n = d.wait(neighbour);
    assert_eq!(n["state"], "succeeded", "{n}");
    assert!(d.log(neighbour).contains("still here"));
}

#[test]
fn a_daemon_killed_and_restarted_keeps_its_jobs_confined_and_ends_their_stragglers() {
    let Some(mut d) = root_daemon("[confinement]\ndevices = \"bpf\"\n", "sim:2") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dev = stand_in_gpus(tmp.path());
    let pidfile = tmp.path().join("straggler.pid");
    let go: PathBuf = tmp.path().join("go");
    let result = tmp.path().join("result");
    // A straggler as above; the main process probes GPU 1's node when told.
    let code = format!(
        r#"
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({pidfile:?}, "w").write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
while not os.path.exists({go:?}):
    time.sleep(0.1)
try:
    os.close(os.open(os.path.join({dev:?}, "nvidia1"), os.O_RDWR))
    r = "opened"
except OSError as e:
    r = str(e.errno)
open({result:?}, "w").write(r)
time.sleep(600)
"#,
        pidfile = pidfile.display().to_string(),
        go = go.display().to_string(),
        dev = dev.path().display().to_string(),
        result = result.display().to_string(),
    );
    // It holds GPU 0: GPU 1 is another's.
    let id = d.submit(&["--gpus", "1", "--", "python3", "-c", &code]);
    let pid = read_pid(&d, id, &pidfile);
    d.kill();
    d.restart();
    d.wait_running(id);
    std::fs::write(&go, "").unwrap();
    assert!(eventually(Duration::from_secs(20), || result.exists()));
    assert_eq!(
        std::fs::read_to_string(&result).unwrap(),
        EPERM,
        "still confined"
    );
    assert!(alive(pid));
    d.ok(&["cancel", &id.to_string()]);
    let job = d.wait(id);
    assert_eq!(job["state"], "cancelled", "{job}");
    assert!(
        eventually(Duration::from_secs(10), || !alive(pid)),
        "the straggler outlived the cancel after the restart"
    );
}

#[test]
fn a_daemon_that_cannot_make_cgroups_says_why_and_runs_jobs_as_before() {
    if !running_as_root() {
        return;
    }
    ensure_user(USER);
    // A plain user's daemon: the jobs' parent groups exist (root's daemons
    // made them) but are not its to write.
    let home = tempfile::tempdir().unwrap();
    let uid = ensure_user(USER);
    std::os::unix::fs::chown(home.path(), Some(uid), None).unwrap();
    let log = std::fs::File::create(home.path().join("user-daemon.log")).unwrap();
    let mut server = std::process::Command::new("runuser")
        .args(["-u", USER, "--", "env"])
        .arg(format!("GPUQ_HOME={}", home.path().display()))
        .args([GPUQ, "server", "--listen", "127.0.0.1:0", "--gpus", "sim:1"])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let daemon_file = home.path().join("daemon.json");
    assert!(eventually(Duration::from_secs(20), || daemon_file.exists()));
    let out = as_user_in(
        home.path(),
        USER,
        Path::new("/tmp"),
        &["run", "--", "echo", "ran"],
    );
    // It logs to its own daemon.log once it runs in the background.
    let said: String = ["user-daemon.log", "daemon.log"]
        .iter()
        .map(|f| std::fs::read_to_string(home.path().join(f)).unwrap_or_default())
        .collect();
    let pid = serde_json::from_slice::<serde_json::Value>(&std::fs::read(&daemon_file).unwrap())
        .unwrap()["pid"]
        .as_i64()
        .unwrap();
    // SAFETY: the daemon this test started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = server.wait();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out).trim(), "ran");
    assert!(
        said.contains("job confinement: none: cannot create the jobs' cgroups"),
        "{said}"
    );
}

/// The jobs' parent group in each hierarchy this test process (and so its
/// daemon) belongs to.
fn jobs_parents() -> Vec<PathBuf> {
    let m = gpuq_exec::cgroup::detect::mounts().unwrap();
    m.v1.values()
        .cloned()
        .chain(m.v2.map(|(p, _)| gpuq_exec::cgroup::v2::base_of(&p)))
        .map(|p| p.join(gpuq_exec::cgroup::JOBS_DIR))
        .collect()
}

#[test]
fn empty_groups_other_daemons_left_are_removed_at_start_and_a_busy_one_is_not() {
    if !running_as_root() {
        return;
    }
    // Groups of daemons long gone (another home's tag): an empty one made
    // long ago, one that still holds a process, and an empty one made just
    // now (another daemon's launch may be about to enter it).
    let parents = jobs_parents();
    let (stale, busy, fresh) = ("job-5-1.0badf00d", "job-6-1.0badf00d", "job-7-1.0badf00d");
    let mut sleeper = std::process::Command::new("sleep")
        .arg("120")
        .spawn()
        .unwrap();
    for p in &parents {
        std::fs::create_dir_all(p).unwrap();
        for name in [stale, busy, fresh] {
            std::fs::create_dir(p.join(name)).unwrap();
        }
        let ok = std::process::Command::new("touch")
            .args(["-d", "2020-01-01"])
            .arg(p.join(stale))
            .arg(p.join(busy))
            .status()
            .unwrap();
        assert!(ok.success());
    }
    // In one hierarchy only: the others' groups of that name are empty, but
    // the group as a whole is not.
    std::fs::write(
        parents[0].join(busy).join("cgroup.procs"),
        sleeper.id().to_string(),
    )
    .unwrap();
    let Some(d) = root_daemon("", "sim:1") else {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        return;
    };
    let id = d.submit(&["--gpus", "1", "--", "true"]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    let gone = |name: &str| parents.iter().all(|p| !p.join(name).exists());
    let kept = |name: &str| parents.iter().all(|p| p.join(name).exists());
    let (stale_gone, busy_kept, fresh_kept) = (gone(stale), kept(busy), kept(fresh));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    for p in &parents {
        for name in [stale, busy, fresh] {
            let _ = gpuq_exec::cgroup::remove_tree(&p.join(name));
        }
    }
    assert!(
        stale_gone,
        "an old empty group of another daemon is removed"
    );
    assert!(busy_kept, "a group holding a process is never touched");
    assert!(
        fresh_kept,
        "a group made a moment ago is left to its daemon"
    );
}

/// The daemon and the job's supervisor both killed with -9 while the job has a
/// straggler outside its process group: the restarted daemon finds the group
/// no supervisor watches, ends the attempt, kills what is left of the job,
/// removes its groups, and only then gives the GPU to the next job.
#[test]
fn a_job_whose_daemon_and_supervisor_were_killed_is_ended_and_its_gpu_freed() {
    let Some(mut d) = root_daemon("", "sim:1") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("straggler.pid");
    let superfile = tmp.path().join("supervisor.pid");
    let code = format!(
        r#"
import os, signal, time
open({superfile:?}, "w").write(str(os.getppid()))
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({pidfile:?}, "w").write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"#,
        superfile = superfile.display().to_string(),
        pidfile = pidfile.display().to_string(),
    );
    let id = d.submit(&["--gpus", "1", "--", "python3", "-c", &code]);
    let straggler = read_pid(&d, id, &pidfile);
    let supervisor = read_pid(&d, id, &superfile);
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.job_dir(id).join("attempt-1.cgroup")).unwrap())
            .unwrap();
    let mut groups: Vec<PathBuf> = record["v1"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| PathBuf::from(p.as_str().unwrap()))
        .collect();
    groups.extend(record["v2"].as_str().map(PathBuf::from));
    assert!(!groups.is_empty() && groups.iter().all(|g| g.exists()));
    d.kill();
    // SAFETY: the job's supervisor, whose pid the job itself reported.
    assert_eq!(unsafe { libc::kill(supervisor, libc::SIGKILL) }, 0);
    assert!(eventually(Duration::from_secs(10), || !alive(supervisor)
        || std::fs::read_to_string(format!("/proc/{supervisor}/stat"))
            .is_ok_and(|s| s.contains(") Z "))));
    assert!(alive(straggler), "the straggler outlives both");
    d.restart();
    let job = d.wait(id);
    assert_ne!(job["state"], "running", "{job}");
    assert!(
        eventually(Duration::from_secs(10), || !alive(straggler)),
        "the straggler outlived the restart"
    );
    assert!(
        groups.iter().all(|g| !g.exists()),
        "the job's groups are removed: {groups:?}"
    );
    let next = d.submit(&["--gpus", "1", "--", "echo", "next"]);
    let job = d.wait(next);
    assert_eq!(job["state"], "succeeded", "{job}");
}
