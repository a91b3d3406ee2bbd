//! Cached Python environments (real uv, offline: wheels made by the test) and
//! container jobs (real podman with runc, an image imported from a busybox
//! root filesystem: nothing is pulled).

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A daemon whose environments are built with `uv`, and a project directory
/// with wheels to install from (no index: nothing is downloaded).
struct Lab {
    d: Daemon,
    dir: tempfile::TempDir,
}

impl Lab {
    fn new(extra: &str) -> Option<Self> {
        let uv = test_uv()?;
        let d = Daemon::start_with_config(
            "sim:2",
            &format!("[envs]\nuv = \"{}\"\n{extra}", uv.display()),
        );
        let dir = tempfile::tempdir().unwrap();
        make_wheels(&dir.path().join("wheels"));
        Some(Lab { d, dir })
    }

    fn requirements(&self, name: &str, body: &str) -> String {
        let text = format!(
            "--no-index\n--find-links {}\n{body}\n",
            self.dir.path().join("wheels").display()
        );
        std::fs::write(self.dir.path().join(name), text).unwrap();
        name.to_string()
    }

    fn submit(&self, args: &[&str]) -> u64 {
        let cwd = self.dir.path().to_str().unwrap().to_string();
        let mut full = vec!["--cwd", cwd.as_str()];
        full.extend_from_slice(args);
        self.d.submit(&full)
    }

    fn envs(&self) -> Vec<serde_json::Value> {
        self.d.json(&["envs", "--json"]).as_array().unwrap().clone()
    }
}

const SHOW: &str = "import gpuqdemo, os; print('version', gpuqdemo.VERSION); print('venv', os.environ['VIRTUAL_ENV'])";

fn line_of<'a>(log: &'a str, tag: &str) -> &'a str {
    log.lines()
        .find_map(|l| l.strip_prefix(tag))
        .unwrap_or_else(|| panic!("no {tag:?} line in {log}"))
        .trim()
}

fn spec_file(lab: &Lab, name: &str, reqs: &str, setup: Option<&str>) -> String {
    let mut yaml = format!("command: [python, -c, \"{SHOW}\"]\npython:\n  requirements: {reqs}\n");
    if let Some(s) = setup {
        yaml.push_str(&format!("setup: |\n  {s}\n"));
    }
    let path = lab.dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn two_jobs_share_one_build_and_run_in_it_with_their_packages_recorded() {
    let Some(lab) = Lab::new("") else { return };
    let reqs = lab.requirements("requirements.txt", "gpuqdemo==1.0");
    // A setup that takes a while, so the second job asks while the build runs.
    let spec = spec_file(&lab, "job.yaml", &reqs, Some("sleep 2"));
    let a = lab.submit(&[&spec]);
    let b = lab.submit(&[&spec]);
    let building = lab.envs();
    assert_eq!(building.len(), 1, "{building:?}");
    let why = lab.d.ok(&["explain", &b.to_string()]);
    assert!(
        why.contains("Python environment") && why.contains("is being built"),
        "{why}"
    );
    for id in [a, b] {
        let job = lab.d.wait(id);
        assert_eq!(job["state"], "succeeded", "{job}");
    }
    let (la, lb) = (lab.d.log(a), lab.d.log(b));
    assert_eq!(line_of(&la, "version"), "1.0");
    let venv = line_of(&la, "venv");
    assert_eq!(venv, line_of(&lb, "venv"), "both in one environment");
    let envs = lab.envs();
    assert_eq!(envs.len(), 1, "{envs:?}");
    let env = &envs[0];
    assert_eq!(env["state"], "ready");
    assert_eq!(env["builds"], 1, "one build for both: {env}");
    assert_eq!(env["path"], venv);
    assert!(
        env["packages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "gpuqdemo==1.0"),
        "{env}"
    );
    // The reproducibility record says what the attempt ran with.
    let repro: serde_json::Value =
        serde_json::from_str(&lab.d.get(&format!("/v1/jobs/{a}/repro"))).unwrap();
    let rt = &repro["runtime"][0]["environment"];
    assert_eq!(rt["key"], env["key"], "{repro}");
    assert!(
        rt["packages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "gpuqdemo==1.0"),
        "{rt}"
    );
    // A third job over the warm cache waits for nothing.
    let c = lab.submit(&[&spec]);
    assert_eq!(lab.d.wait(c)["state"], "succeeded");
    assert_eq!(lab.envs()[0]["builds"], 1);
}

#[test]
fn a_changed_requirement_gets_a_new_environment() {
    let Some(lab) = Lab::new("") else { return };
    let one = lab.requirements("one.txt", "gpuqdemo==1.0");
    let two = lab.requirements("two.txt", "gpuqdemo==2.0");
    let a = lab.submit(&["--requirements", &one, "--", "python", "-c", SHOW]);
    let b = lab.submit(&["--requirements", &two, "--", "python", "-c", SHOW]);
    for id in [a, b] {
        let end = lab.d.wait(id);
        assert_eq!(end["state"], "succeeded", "{end}");
    }
    assert_eq!(line_of(&lab.d.log(a), "version"), "1.0");
    assert_eq!(line_of(&lab.d.log(b), "version"), "2.0");
    assert_ne!(
        line_of(&lab.d.log(a), "venv"),
        line_of(&lab.d.log(b), "venv")
    );
    assert_eq!(lab.envs().len(), 2);
}

#[test]
fn a_bad_requirement_fails_its_jobs_with_the_resolvers_message() {
    let Some(lab) = Lab::new("") else { return };
    let bad = lab.requirements("bad.txt", "no-such-package-gpuq==1.0");
    let cwd = lab.dir.path().to_str().unwrap().to_string();
    let out = lab.d.gpuq(&[
        "run",
        "--cwd",
        &cwd,
        "--requirements",
        &bad,
        "--",
        "python",
        "-c",
        "print('ran')",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no-such-package-gpuq") && err.contains("unsatisfiable"),
        "{err}"
    );
    assert!(!stdout(&out).contains("ran"), "the job never ran");
    let envs = lab.envs();
    assert_eq!(envs[0]["state"], "failed");
    let key = envs[0]["key"].as_str().unwrap();
    let log = lab.d.ok(&["envs", "log", key]);
    assert!(log.contains("unsatisfiable"), "{log}");
    assert!(
        !Path::new(envs[0]["path"].as_str().unwrap()).exists(),
        "no half-built environment is left"
    );
    // A missing requirements file is the submitter's error, exit 2, nothing queued.
    let out = lab.d.gpuq(&[
        "submit",
        "--cwd",
        &cwd,
        "--requirements",
        "nope.txt",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("python.requirements"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn eviction_spares_environments_a_queued_job_needs() {
    // Each environment is a little over 1 MiB (its setup pads it): two fit the cap.
    let Some(lab) = Lab::new("max_size = \"2M\"\n") else {
        return;
    };
    let pad = Some("head -c 1100000 /dev/zero > \"$VIRTUAL_ENV/pad\"");
    let reqs = [
        lab.requirements("one.txt", "gpuqdemo==1.0"),
        lab.requirements("two.txt", "gpuqdemo==2.0"),
        lab.requirements("three.txt", "gpuqdemo==1.0\n# three"),
    ];
    let one = spec_file(&lab, "one.yaml", &reqs[0], pad);
    let two = spec_file(&lab, "two.yaml", &reqs[1], pad);
    let three = spec_file(&lab, "three.yaml", &reqs[2], pad);
    let a = lab.submit(&[&one]);
    assert_eq!(lab.d.wait(a)["state"], "succeeded");
    let key_one = lab.envs()[0]["key"].as_str().unwrap().to_string();
    // A job that needs environment one waits in the queue (for another job).
    let gate = lab.dir.path().join("go");
    let wait = format!("while [ ! -e {} ]; do sleep 0.1; done", gate.display());
    let before = lab.submit(&["--", "sh", "-c", &wait]).to_string();
    let held = lab.submit(&["--after", &before, &one]);
    let b = lab.submit(&[&two]);
    assert_eq!(lab.d.wait(b)["state"], "succeeded");
    let c = lab.submit(&[&three]);
    assert_eq!(lab.d.wait(c)["state"], "succeeded");
    let keys: Vec<String> = lab
        .envs()
        .iter()
        .map(|e| e["key"].as_str().unwrap().to_string())
        .collect();
    assert!(
        keys.contains(&key_one),
        "in use by the held job: kept ({keys:?})"
    );
    assert!(keys.len() < 3, "over the cap, an unused one went: {keys:?}");
    std::fs::write(&gate, "").unwrap();
    assert_eq!(lab.d.wait(held)["state"], "succeeded");
    assert_eq!(line_of(&lab.d.log(held), "version"), "1.0");
}

/// The builder of this daemon's environment (its stdin is the build's ticket in `home`).
fn builder_of(home: &Path) -> Option<i32> {
    let envs = home.join("envs");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        if !String::from_utf8_lossy(&cmdline).contains("__env-build") {
            return None;
        }
        let stdin = std::fs::read_link(format!("/proc/{pid}/fd/0")).ok()?;
        stdin.starts_with(&envs).then_some(pid)
    })
}

#[test]
fn a_build_cut_short_by_kill_9_is_never_used_and_is_built_again() {
    let Some(mut lab) = Lab::new("") else { return };
    let reqs = lab.requirements("requirements.txt", "gpuqdemo==1.0");
    let mark = lab.dir.path().join("first-build");
    // The first build marks its directory and hangs; the second goes straight through.
    let setup = format!(
        "if [ ! -e {m} ]; then touch {m} \"$VIRTUAL_ENV/half-built\"; sleep 120; fi",
        m = mark.display()
    );
    let spec = spec_file(&lab, "job.yaml", &reqs, Some(&setup));
    let job = lab.submit(&[&spec]);
    assert!(
        eventually(Duration::from_secs(60), || mark.exists()),
        "the first build never reached its setup"
    );
    let builder = builder_of(lab.d.path()).expect("the builder runs");
    lab.d.kill();
    // SAFETY: kill(2) on a process this test found (the builder of its own daemon).
    unsafe { libc::kill(builder, libc::SIGKILL) };
    lab.d.restart();
    let end = lab.d.wait(job);
    assert_eq!(end["state"], "succeeded", "{end}");
    let venv = line_of(&lab.d.log(job), "venv").to_string();
    assert!(
        !Path::new(&venv).join("half-built").exists(),
        "the cut-short directory was not used"
    );
    assert_eq!(lab.envs()[0]["builds"], 2);
}

#[test]
fn a_build_that_outlives_a_killed_daemon_is_waited_for_and_used() {
    let Some(mut lab) = Lab::new("") else { return };
    let reqs = lab.requirements("requirements.txt", "gpuqdemo==2.0");
    let mark = lab.dir.path().join("building");
    let setup = format!("touch {}; sleep 4", mark.display());
    let spec = spec_file(&lab, "job.yaml", &reqs, Some(&setup));
    let job = lab.submit(&[&spec]);
    assert!(
        eventually(Duration::from_secs(60), || mark.exists()),
        "the build never reached its setup"
    );
    lab.d.kill();
    assert!(
        builder_of(lab.d.path()).is_some(),
        "the builder outlives the daemon"
    );
    lab.d.restart();
    let end = lab.d.wait(job);
    assert_eq!(end["state"], "succeeded", "{end}");
    assert_eq!(line_of(&lab.d.log(job), "version"), "2.0");
    assert_eq!(
        lab.envs()[0]["builds"],
        1,
        "the running build was used, not redone"
    );
}

// Containers: podman with runc (see ../shared notes), an image made here.

fn podman_ready() -> bool {
    let have = |p: &str| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let ok = have("podman") && Path::new("/bin/busybox").exists();
    if !ok {
        assert!(
            std::env::var_os("GPUQ_TEST_STRICT").is_none(),
            "podman or busybox is missing: scripts/test installs them"
        );
        eprintln!("skipped: podman or /bin/busybox is missing");
    }
    ok
}

/// Imports a busybox image as `name` into the storage of whoever runs `runner`.
fn import_image(name: &str, user: Option<&str>) {
    let root = tempfile::tempdir().unwrap();
    for d in ["bin", "tmp", "etc"] {
        std::fs::create_dir_all(root.path().join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.path().join("bin/busybox")).unwrap();
    for tool in ["sh", "sleep", "cat", "echo", "env", "id", "ls", "touch"] {
        std::os::unix::fs::symlink("busybox", root.path().join("bin").join(tool)).unwrap();
    }
    let tar = tempfile::Builder::new().suffix(".tar").tempfile().unwrap();
    let ok = Command::new("tar")
        .arg("-C")
        .arg(root.path())
        .arg("-cf")
        .arg(tar.path())
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::set_permissions(
        tar.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let mut cmd = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--", "podman"]).current_dir("/tmp");
            c
        }
        None => Command::new("podman"),
    };
    let out = cmd
        .arg("import")
        .arg(tar.path())
        .arg(name)
        .output()
        .unwrap();
    assert!(out.status.success(), "podman import: {}", stderr(&out));
}

/// Containers are named by job and attempt (gpuq-1-1), and the tests' daemons
/// all start at job 1: tests running containers in root's own podman storage
/// take turns.
static ROOT_CONTAINERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

const PODMAN_CONFIG: &str = "[containers]\nglobal_args = [\"--runtime\", \"runc\"]\nrun_args = [\"--ulimit\", \"nofile=1024:1024\", \"--ulimit\", \"nproc=1024:1024\"]\n";

const IN_CONTAINER: &str = r#"trap 'echo got TERM > "$GPUQ_OUTPUT_DIR/term"; exit 3' TERM
echo "gpus=$GPUQ_GPUS job=$GPUQ_JOB_ID uid=$(id -u) cwd=$(pwd)"
echo saved > "$GPUQ_CHECKPOINT_DIR/ckpt"
test -e /bin/busybox && echo inside-image
echo up
while true; do sleep 0.2; done"#;

fn check_container_job(d: &Daemon, cwd: &Path, submit: impl Fn(&[&str]) -> u64, uid: u32) {
    let id = submit(&[
        "--gpus",
        "1",
        "--cwd",
        cwd.to_str().unwrap(),
        "--image",
        "localhost/gpuq-envs-test:1",
        "--",
        "sh",
        "-c",
        IN_CONTAINER,
    ]);
    let log = d.wait_for_log(id, "up", Duration::from_secs(60));
    let job = d.show(id);
    let gpus = job["gpus"].as_array().unwrap()[0].to_string();
    assert!(
        log.contains(&format!(
            "gpus={gpus} job={id} uid={uid} cwd={}",
            cwd.display()
        )),
        "{log}"
    );
    assert!(log.contains("inside-image"), "{log}");
    let ckpt = d.job_dir(id).join("checkpoints/ckpt");
    assert_eq!(std::fs::read_to_string(&ckpt).unwrap().trim(), "saved");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&ckpt).unwrap().uid(),
        uid,
        "written as the job's user"
    );
    d.ok(&["cancel", &id.to_string()]);
    let end = d.wait(id);
    assert_eq!(end["state"], "cancelled");
    let repro: serde_json::Value =
        serde_json::from_str(&d.get(&format!("/v1/jobs/{id}/repro"))).unwrap();
    assert_eq!(
        repro["runtime"][0]["environment"]["image"], "localhost/gpuq-envs-test:1",
        "{repro}"
    );
    let term = d.job_dir(id).join("outputs/term");
    let got = std::fs::read_to_string(&term).unwrap_or_default();
    assert_eq!(got.trim(), "got TERM", "{end} {}", d.log(id));
}

#[test]
fn a_container_job_sees_its_gpus_and_directories_and_gets_sigterm_on_cancel() {
    if !podman_ready() {
        return;
    }
    let _one = ROOT_CONTAINERS.lock().unwrap_or_else(|e| e.into_inner());
    import_image("localhost/gpuq-envs-test:1", None);
    let d = Daemon::start_with_config("sim:2", PODMAN_CONFIG);
    let cwd = tempfile::tempdir().unwrap();
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    check_container_job(&d, cwd.path(), |args| d.submit(args), uid);
    let out = d.gpuq(&["submit", "--image", "-v/:/host", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an image name that is a flag is refused"
    );
    assert!(stderr(&out).contains("image"), "{}", stderr(&out));
}

/// A root daemon's container job (rootful podman, which makes the container's
/// cgroups itself) is held to the job's bounds: past --mem it is killed.
#[cfg(feature = "system-tests")]
#[test]
fn a_confined_container_job_cannot_write_past_its_memory() {
    if !podman_ready() {
        return;
    }
    let _one = ROOT_CONTAINERS.lock().unwrap_or_else(|e| e.into_inner());
    // An image of its own: another test importing its image at the same
    // time would retag it under this one.
    import_image("localhost/gpuq-envs-oom:1", None);
    let d = Daemon::start_with_config("sim:1", PODMAN_CONFIG);
    let info: serde_json::Value = serde_json::from_str(&d.get("/v1/info")).unwrap();
    if info["confinement"]
        .as_str()
        .is_none_or(|c| c.starts_with("none"))
    {
        eprintln!("skipped: jobs are not confined here ({info})");
        return;
    }
    let id = d.submit(&[
        "--mem",
        "64M",
        "--image",
        "localhost/gpuq-envs-oom:1",
        "--",
        "sh",
        "-c",
        // The shell itself holds 300 MB, written, not just reserved.
        "echo up; x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived",
    ]);
    let end = d.wait(id);
    let log = d.log(id);
    assert!(log.contains("up"), "{log}");
    assert!(!log.contains("survived"), "{end} {log}");
    assert_eq!(end["state"], "failed", "{end} {log}");
}

/// Under a root daemon the container runs rootless as the job's user.
#[cfg(feature = "system-tests")]
#[test]
fn under_a_root_daemon_a_container_runs_rootless_as_the_jobs_user() {
    if !podman_ready() {
        return;
    }
    const USER: &str = "gpuqtestb";
    let uid = ensure_user(USER);
    import_image("localhost/gpuq-envs-test:1", Some(USER));
    let d = Daemon::start_strict("sim:2", PODMAN_CONFIG);
    let cwd = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(cwd.path(), Some(uid), Some(uid)).unwrap();
    let submit = |args: &[&str]| {
        let mut full = vec!["submit"];
        full.extend_from_slice(args);
        let out = as_user_in(d.path(), USER, cwd.path(), &full);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    };
    check_container_job(&d, cwd.path(), submit, uid);
}

/// A directory the test user can read and enter (tempfile makes them 0700).
#[cfg(feature = "system-tests")]
fn open_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    d
}

/// A root daemon whose jobs (and builds) run as `gpuqtestb`; uv copied where
/// that user can run it.
#[cfg(feature = "system-tests")]
struct RootLab {
    d: Daemon,
    uid: u32,
    work: tempfile::TempDir,
    tools: tempfile::TempDir,
}

#[cfg(feature = "system-tests")]
impl RootLab {
    const USER: &'static str = "gpuqtestb";

    fn new(extra: &str) -> Option<Self> {
        let uv = test_uv()?;
        let uid = ensure_user(Self::USER);
        let tools = open_dir();
        let tool = tools.path().join("uv");
        std::fs::copy(&uv, &tool).unwrap();
        let d = Daemon::start_strict(
            "sim:2",
            &format!("[envs]\nuv = \"{}\"\n{extra}", tool.display()),
        );
        let work = open_dir();
        // Root's, as a lab's wheel directory is: a lab-wide build may read it.
        make_wheels(&tools.path().join("wheels"));
        std::os::unix::fs::chown(work.path(), Some(uid), Some(uid)).unwrap();
        Some(RootLab {
            d,
            uid,
            work,
            tools,
        })
    }

    fn spec(&self, name: &str, pin: &str, setup: &str) -> String {
        let reqs = format!(
            "--no-index\n--find-links {}\n{pin}\n",
            self.tools.path().join("wheels").display()
        );
        std::fs::write(self.work.path().join(format!("{name}.txt")), reqs).unwrap();
        let yaml = format!(
            "command: [python, -c, \"{SHOW}\"]\npython:\n  requirements: {name}.txt\nsetup: |\n  {setup}\n"
        );
        let path = self.work.path().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn submit(&self, spec: &str) -> u64 {
        self.submit_as(Self::USER, &[spec])
    }

    /// `gpuq submit ARGS` as `user`, from the work directory; the job's id.
    fn submit_as(&self, user: &str, args: &[&str]) -> u64 {
        let mut full = vec!["submit"];
        full.extend_from_slice(args);
        let out = as_user_in(self.d.path(), user, self.work.path(), &full);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    }
}

#[cfg(feature = "system-tests")]
#[test]
fn under_a_root_daemon_an_environment_is_built_as_the_jobs_user() {
    use std::os::unix::fs::MetadataExt;
    let Some(lab) = RootLab::new("") else { return };
    let spec = lab.spec("reqs", "gpuqdemo==1.0", "id -u > \"$VIRTUAL_ENV/built-by\"");
    let job = lab.submit(&spec);
    let end = lab.d.wait(job);
    assert_eq!(end["state"], "succeeded", "{end}");
    let venv = line_of(&lab.d.log(job), "venv").to_string();
    let built_by = std::fs::read_to_string(Path::new(&venv).join("built-by")).unwrap();
    assert_eq!(
        built_by.trim(),
        lab.uid.to_string(),
        "the setup ran as the job's user"
    );
    let meta = std::fs::metadata(&venv).unwrap();
    assert_eq!(meta.uid(), lab.uid, "the environment is the user's");
    assert_eq!(meta.mode() & 0o777, 0o700, "and private to them");
    let envs = lab.d.json(&["envs", "--json"]);
    assert_eq!(envs[0]["user"], RootLab::USER);
}

#[cfg(feature = "system-tests")]
#[test]
fn evicting_an_environment_never_touches_what_its_owner_linked_into_it() {
    let Some(lab) = RootLab::new("max_size = \"1M\"\n") else {
        return;
    };
    // Root's files, which the environment links to (and the user cannot remove).
    let victim = tempfile::tempdir().unwrap();
    std::fs::write(victim.path().join("keep"), "root's").unwrap();
    let setup = format!(
        "head -c 1100000 /dev/zero > \"$VIRTUAL_ENV/pad\"; ln -s {v} \"$VIRTUAL_ENV/escape\"; ln -s {v}/keep \"$VIRTUAL_ENV/escape-file\"",
        v = victim.path().display()
    );
    let first = lab.spec("one", "gpuqdemo==1.0", &setup);
    let a = lab.submit(&first);
    assert_eq!(lab.d.wait(a)["state"], "succeeded");
    let venv = line_of(&lab.d.log(a), "venv").to_string();
    // A second environment over the cap evicts the first, which no job needs now.
    let second = lab.spec("two", "gpuqdemo==2.0", "true");
    let b = lab.submit(&second);
    assert_eq!(lab.d.wait(b)["state"], "succeeded");
    assert!(
        eventually(Duration::from_secs(10), || !Path::new(&venv).exists()),
        "the first environment was evicted"
    );
    assert_eq!(
        std::fs::read_to_string(victim.path().join("keep")).unwrap(),
        "root's"
    );
}

#[cfg(feature = "system-tests")]
#[test]
fn a_lab_wide_cache_serves_every_user_from_one_read_only_build() {
    let Some(lab) = RootLab::new("shared = true\n") else {
        return;
    };
    const OTHER: &str = "gpuqtestc";
    ensure_user(OTHER);
    lab.spec("reqs", "gpuqdemo==1.0", "true"); // writes reqs.txt
    let a = lab.submit_as(
        RootLab::USER,
        &["--requirements", "reqs.txt", "--", "python", "-c", SHOW],
    );
    assert_eq!(lab.d.wait(a)["state"], "succeeded", "{}", lab.d.log(a));
    // The labmate's job: the same requirements, and a try at writing the environment.
    let probe = "import gpuqdemo, os; print('version', gpuqdemo.VERSION); print('venv', os.environ['VIRTUAL_ENV'])\ntry:\n    open(os.environ['VIRTUAL_ENV'] + '/mine', 'w')\n    print('wrote')\nexcept OSError:\n    print('read-only')";
    let path = lab.work.path().join("other.py");
    std::fs::write(&path, probe).unwrap();
    let b = lab.submit_as(
        OTHER,
        &[
            "--requirements",
            "reqs.txt",
            "--",
            "python",
            path.to_str().unwrap(),
        ],
    );
    assert_eq!(lab.d.wait(b)["state"], "succeeded", "{}", lab.d.log(b));
    let (la, lb) = (lab.d.log(a), lab.d.log(b));
    assert_eq!(
        line_of(&la, "venv"),
        line_of(&lb, "venv"),
        "one environment for both users"
    );
    assert!(lb.contains("read-only"), "{lb}");
    let envs = lab.d.json(&["envs", "--json"]);
    assert_eq!(envs.as_array().unwrap().len(), 1, "{envs}");
    assert_eq!(envs[0]["builds"], 1);
}

/// A lab-wide environment is immutable once built, to its builder too: the
/// tree is root's (0755/0644), so the builder can neither add a `.pth` file,
/// change a module nor swap the interpreter's link, and a writer their build
/// left behind (`setsid`, a `.pth` file open) is ended before the seal. A
/// labmate's job runs untouched (in an environment of its own: a `setup`
/// script keys the environment to its builder).
#[cfg(feature = "system-tests")]
#[test]
fn a_lab_wide_environment_cannot_be_changed_by_its_builder() {
    use std::os::unix::fs::MetadataExt;
    let Some(lab) = RootLab::new("shared = true\n") else {
        return;
    };
    const OTHER: &str = "gpuqtestc";
    let other_uid = ensure_user(OTHER);
    let pwned = format!("/tmp/gpuq-pwned-{other_uid}");
    let _ = std::fs::remove_file(&pwned);
    // The builder's setup leaves a writer behind, in a session of its own,
    // with a `.pth` file open; it says its pid (in a file per user: the
    // labmate's build runs the same setup).
    let pids = lab.work.path().join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    std::fs::set_permissions(&pids, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let setup = format!(
        "sp=$(echo \"$VIRTUAL_ENV\"/lib/python*/site-packages); exec 3>>\"$sp/gpuq_late.pth\"; \
         setsid sh -c 'echo $$ > {p}/$(id -u); sleep 4; echo \"import os; open(\\\"/tmp/gpuq-pwned-\\\" + str(os.getuid()), \\\"w\\\")\" >&3' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {p}/$(id -u) ]; do sleep 0.1; done",
        p = pids.display()
    );
    let spec = lab.spec("reqs", "gpuqdemo==1.0", &setup);
    let a = lab.submit(&spec);
    assert_eq!(lab.d.wait(a)["state"], "succeeded", "{}", lab.d.log(a));
    let venv = std::path::PathBuf::from(line_of(&lab.d.log(a), "venv"));
    let writer = std::fs::read_to_string(pids.join(lab.uid.to_string())).unwrap();
    assert!(
        !Path::new("/proc").join(writer.trim()).exists(),
        "the writer the build left ({}) still runs",
        writer.trim()
    );

    // Everything in it is root's and nobody else may write it.
    let mut stack = vec![venv.clone()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(meta.uid(), 0, "{} is not root's", dir.display());
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            seen += 1;
            assert_eq!(meta.uid(), 0, "{} is uid {}'s", path.display(), meta.uid());
            if !meta.file_type().is_symlink() {
                assert_eq!(
                    meta.mode() & 0o022,
                    0,
                    "{} is writable by others",
                    path.display()
                );
            }
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    assert!(seen > 10, "{seen} entries");

    // The builder's tries, each refused.
    let lib = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let site = lib.join("site-packages").display().to_string();
    assert!(Path::new(&site).join("gpuqdemo.py").exists(), "{site}");
    for (what, script) in [
        (
            "add a .pth file",
            format!("echo 'import os' > {site}/evil.pth"),
        ),
        (
            "change a module",
            format!("echo 'VERSION = 666' >> {site}/gpuqdemo.py"),
        ),
        (
            "replace the interpreter's link",
            format!("ln -sfn /bin/sh {}/bin/python", venv.display()),
        ),
        (
            "make it writable",
            format!("chmod -R u+w {}", venv.display()),
        ),
        (
            "rename it",
            format!("mv {} {}.mine", venv.display(), venv.display()),
        ),
    ] {
        let out = std::process::Command::new("runuser")
            .args(["-u", RootLab::USER, "--", "sh", "-c", &script])
            .output()
            .unwrap();
        assert!(!out.status.success(), "the builder could {what}: {script}");
    }

    // The labmate's job: an environment of its own (the setup is the builder's).
    let b = lab.submit_as(OTHER, &[&spec]);
    assert_eq!(lab.d.wait(b)["state"], "succeeded", "{}", lab.d.log(b));
    let lb = lab.d.log(b);
    assert_ne!(line_of(&lb, "venv"), venv.display().to_string());
    assert_eq!(line_of(&lb, "version"), "1.0", "{lb}");
    assert!(
        !Path::new(&pwned).exists(),
        "the builder's late .pth ran in the labmate's job"
    );
}

/// What leads out of a lab-wide environment must be root's too: a `.pth` path
/// or a link into the builder's own directory (which they could change later)
/// fails the build, and says which and why.
#[cfg(feature = "system-tests")]
#[test]
fn a_lab_wide_environment_leading_into_a_users_directory_is_refused() {
    let Some(lab) = RootLab::new("shared = true\n") else {
        return;
    };
    let mine = lab.work.path().join("mine");
    let site = "\"$(echo \"$VIRTUAL_ENV\"/lib/python*/site-packages)\"";
    for (name, setup, says) in [
        // Through a link of the environment's own to root's `/`: as text
        // `h/...` stays inside, but it leads to the builder's directory.
        (
            "pth-via-link",
            format!(
                "ln -s / {site}/h; echo 'h{}' > {site}/gpuq_mine.pth",
                mine.display()
            ),
            "adds to sys.path",
        ),
        (
            "link-via-link",
            format!(
                "ln -s / {site}/h; ln -s 'h{}/evil.py' {site}/evil.py",
                mine.display()
            ),
            "links to",
        ),
        (
            "pth",
            format!(
                "echo '{}' > \"$(echo \"$VIRTUAL_ENV\"/lib/python*/site-packages)/gpuq_mine.pth\"",
                mine.display()
            ),
            "adds to sys.path",
        ),
        (
            "link",
            format!(
                "ln -s '{}' \"$(echo \"$VIRTUAL_ENV\"/lib/python*/site-packages)/evil.py\"",
                mine.display()
            ),
            "links to",
        ),
    ] {
        let spec = lab.spec(name, "gpuqdemo==1.0", &setup);
        let job = lab.submit(&spec);
        let end = lab.d.wait(job);
        assert_eq!(end["state"], "failed", "{name}: {end}");
        let reason = end["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("cannot be shared read-only") && reason.contains(says),
            "{name}: {reason}"
        );
        assert!(reason.contains(&mine.display().to_string()), "{reason}");
    }
    let envs = lab.d.json(&["envs", "--json"]);
    assert!(
        envs.as_array()
            .unwrap()
            .iter()
            .all(|e| e["state"] != "ready"),
        "{envs}"
    );
}

/// `gpuq submit ARGS` as `user` from `lab`'s work directory, with `vars` in
/// the submitter's environment; the job's id.
#[cfg(feature = "system-tests")]
fn submit_with_env(lab: &RootLab, user: &str, vars: &[String], args: &[&str]) -> u64 {
    let vars: Vec<&str> = vars.iter().map(String::as_str).collect();
    let argv: Vec<&str> = ["submit"].iter().chain(args).copied().collect();
    let out = as_user_with_env(lab.d.path(), user, lab.work.path(), &vars, &argv);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().parse().unwrap()
}

/// A lab-wide environment is built from its key alone: the builder's own
/// package sources (UV_FIND_LINKS in their environment, a uv.toml in their
/// HOME, both offering a "newer" gpuqdemo of theirs) do not reach it, so the
/// labmate who reuses it gets what the lab's requirements name.
#[cfg(feature = "system-tests")]
#[test]
fn a_lab_wide_build_ignores_the_builders_package_sources() {
    let Some(lab) = RootLab::new("shared = true\n") else {
        return;
    };
    const OTHER: &str = "gpuqtestc";
    ensure_user(OTHER);
    // The builder's wheels: gpuqdemo 3.0, which the lab's wheel directory lacks.
    let evil = lab.work.path().join("evil");
    let ok = Command::new("python3")
        .arg(repo_root().join("tests/envs/make_wheels.py"))
        .arg(&evil)
        .arg("3.0")
        .status()
        .unwrap();
    assert!(ok.success());
    let home = lab.work.path().join("home");
    std::fs::create_dir_all(home.join(".config/uv")).unwrap();
    std::fs::write(
        home.join(".config/uv/uv.toml"),
        format!("find-links = [\"{}\"]\n", evil.display()),
    )
    .unwrap();
    lab.spec("reqs", "gpuqdemo", "true"); // writes reqs.txt: the lab's usual requirements
    let vars = [
        format!("UV_FIND_LINKS={}", evil.display()),
        format!("HOME={}", home.display()),
    ];
    let args = ["--requirements", "reqs.txt", "--", "python", "-c", SHOW];
    let a = submit_with_env(&lab, RootLab::USER, &vars, &args);
    assert_eq!(lab.d.wait(a)["state"], "succeeded", "{}", lab.d.log(a));
    let b = submit_with_env(&lab, OTHER, &[], &args);
    assert_eq!(lab.d.wait(b)["state"], "succeeded", "{}", lab.d.log(b));
    let (la, lb) = (lab.d.log(a), lab.d.log(b));
    assert_eq!(
        line_of(&la, "venv"),
        line_of(&lb, "venv"),
        "one environment"
    );
    assert_eq!(
        line_of(&lb, "version"),
        "2.0",
        "the labmate got the builder's wheel: {lb}"
    );
    assert_eq!(line_of(&la, "version"), "2.0", "{la}");
    let envs = lab.d.json(&["envs", "--json"]);
    assert_eq!(envs[0]["builds"], 1, "{envs}");
}

/// A requirements file that reads a file of the builder's (`-r /their/x.txt`)
/// is not as good as its key: that environment is the builder's alone, and a
/// labmate with the same requirements gets a build of their own, from what
/// the file says then.
#[cfg(feature = "system-tests")]
#[test]
fn a_lab_wide_build_reading_a_builders_file_is_theirs_alone() {
    let Some(lab) = RootLab::new("shared = true\n") else {
        return;
    };
    const OTHER: &str = "gpuqtestc";
    ensure_user(OTHER);
    let extra = lab.work.path().join("extra.txt");
    std::fs::write(&extra, "gpuqdemo==2.0\n").unwrap();
    lab.spec("reqs", &format!("-r {}", extra.display()), "true");
    let args = ["--requirements", "reqs.txt", "--", "python", "-c", SHOW];
    let a = lab.submit_as(RootLab::USER, &args);
    assert_eq!(lab.d.wait(a)["state"], "succeeded", "{}", lab.d.log(a));
    assert_eq!(line_of(&lab.d.log(a), "version"), "2.0");
    // The builder puts the file back as the lab knows it.
    std::fs::write(&extra, "gpuqdemo==1.0\n").unwrap();
    let b = lab.submit_as(OTHER, &args);
    assert_eq!(lab.d.wait(b)["state"], "succeeded", "{}", lab.d.log(b));
    let (la, lb) = (lab.d.log(a), lab.d.log(b));
    assert_ne!(line_of(&la, "venv"), line_of(&lb, "venv"));
    assert_eq!(line_of(&lb, "version"), "1.0", "{lb}");
}

/// Sealing copies at most `[envs] max_size`: a build that leaves more fails,
/// saying so, and is never used.
#[cfg(feature = "system-tests")]
#[test]
fn a_lab_wide_build_past_the_size_cap_fails_saying_so() {
    let Some(lab) = RootLab::new("shared = true\nmax_size = \"1M\"\n") else {
        return;
    };
    let spec = lab.spec(
        "big",
        "gpuqdemo==1.0",
        "head -c 3000000 /dev/zero > \"$VIRTUAL_ENV/pad\"",
    );
    let job = lab.submit(&spec);
    let end = lab.d.wait(job);
    assert_eq!(end["state"], "failed", "{end}");
    let reason = end["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("cannot be shared read-only") && reason.contains("envs.max_size"),
        "{reason}"
    );
}

/// A lab-wide build runs only the daemon's uv: with none on the daemon's
/// PATH, a uv on the submitter's PATH (which they could have written) is not
/// taken; the submit is refused, saying so. A private cache still takes it.
#[test]
fn a_lab_wide_build_never_runs_the_submitters_uv() {
    let Some(uv) = test_uv() else { return };
    let theirs = uv.parent().unwrap().to_str().unwrap().to_string();
    let empty = tempfile::tempdir().unwrap();
    let bare = empty.path().to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("reqs.txt"), "gpuqdemo\n").unwrap();
    let submit = |d: &Daemon| {
        d.cmd(&["submit", "--requirements", "reqs.txt", "--", "true"])
            .current_dir(dir.path())
            .env("PATH", format!("{theirs}:/usr/bin:/bin"))
            .output()
            .unwrap()
    };
    let d = Daemon::start_configured("none", Some("[envs]\nshared = true\n"), &[("PATH", bare)]);
    let out = submit(&d);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("lab-wide") && err.contains("no `uv` on the daemon's PATH"),
        "{err}"
    );
    assert_eq!(d.json(&["ls", "--json", "--all"]), serde_json::json!([]));
    let d = Daemon::start_configured("none", None, &[("PATH", bare)]);
    let out = submit(&d);
    assert!(out.status.success(), "{}", stderr(&out));
}
