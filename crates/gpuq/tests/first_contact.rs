//! What a new user trips on first, each done for real against a daemon: a
//! mistyped flag, a job that only ever asks to be requeued, a command that
//! cannot start, a daemon killed and autostarted again, and `gpuq server &`.

mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The number of jobs the daemon knows.
fn job_count(d: &Daemon) -> usize {
    d.json(&["ls", "--all", "--json"]).as_array().unwrap().len()
}

#[test]
fn a_mistyped_flag_before_the_command_is_refused_not_queued() {
    let d = Daemon::start("sim:2");
    let cases: [(&[&str], Option<&str>); 5] = [
        (&["submit", "--gpu", "2", "--", "echo"], Some("--gpus")),
        (&["submit", "--nmae", "x", "echo", "hi"], Some("--name")),
        (
            &["submit", "--time-limt", "2h", "--", "echo"],
            Some("--time-limit"),
        ),
        (&["submit", "-x", "echo"], None),
        (&["run", "--gpu", "2"], Some("--gpus")),
    ];
    for (args, suggestion) in cases {
        let out = d.gpuq(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "gpuq {args:?}: {err}");
        assert!(err.contains("unexpected argument"), "gpuq {args:?}: {err}");
        // Clap's tip to pass it after `--` would queue the typo as the command.
        assert!(!err.contains("as a value, use '--"), "gpuq {args:?}: {err}");
        if let Some(s) = suggestion {
            assert!(
                err.contains(&format!("a similar argument exists: '{s}'")),
                "gpuq {args:?} names {s}: {err}"
            );
        }
    }
    assert_eq!(job_count(&d), 0, "nothing was queued");

    // What is documented keeps working: flags after the command's first word are
    // the command's, `--` lets a command start with a dash, a spec file alone.
    let id = d.submit(&["sh", "-c", "echo \"$@\"", "x", "--lr", "3"]);
    assert_eq!(
        d.show(id)["spec"]["command"],
        serde_json::json!(["sh", "-c", "echo \"$@\"", "x", "--lr", "3"])
    );
    assert_eq!(d.wait(id)["state"], "succeeded");
    assert!(d.log(id).contains("--lr 3"), "{}", d.log(id));
    let dashed = d.submit(&["--name", "dashed", "--", "--any-flag"]);
    assert_eq!(
        d.show(dashed)["spec"]["command"],
        serde_json::json!(["--any-flag"])
    );
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, "command: [\"true\"]\nname: from-file\n").unwrap();
    let from_file = d.submit(&[spec.to_str().unwrap()]);
    assert_eq!(d.show(from_file)["spec"]["name"], "from-file");
}

const REQUEUE_LIMITS: &str =
    "[scheduler]\nrequeue_delay = \"300ms\"\nrequeue_max_delay = \"5s\"\nmax_requeues_without_progress = 3\n";

/// Each attempt's start and end (ms).
fn attempt_times(job: &serde_json::Value) -> Vec<(i64, i64)> {
    job["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["started_at"].as_i64().unwrap(),
                a["ended_at"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn a_job_that_always_exits_75_backs_off_and_ends_with_the_reason() {
    let d = Daemon::start_with_config("sim:1", REQUEUE_LIMITS);
    let id = d.submit(&["--", "sh", "-c", "exit 75"]);
    let (_, job) = d.wait_within(id, Duration::from_secs(60));
    assert_eq!(job["state"], "failed", "{job}");
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("requeued 3 times without progress: no new checkpoint or metric"),
        "{reason}"
    );
    // Three requeues, then the fourth exit 75 ends it: not a hot loop.
    let times = attempt_times(&job);
    assert_eq!(times.len(), 4, "{job}");
    // Each wait at least the back-off, which doubles: 300 ms, 600 ms, 1.2 s.
    for (i, want) in [300, 600, 1200].iter().enumerate() {
        let gap = times[i + 1].0 - times[i].1;
        assert!(
            gap >= *want,
            "wait before attempt {}: {gap} ms: {times:?}",
            i + 2
        );
    }
    let shown = d.ok(&["show", &id.to_string()]);
    assert!(
        shown.contains("requeued 3 times without progress"),
        "{shown}"
    );
}

#[test]
fn a_requeue_waiting_out_its_back_off_says_so() {
    let d = Daemon::start_with_config("sim:1", "[scheduler]\nrequeue_delay = \"1h\"\n");
    let id = d.submit(&["--", "sh", "-c", "exit 75"]);
    assert!(
        eventually(Duration::from_secs(20), || {
            let j = d.show(id);
            j["state"] == "queued" && j["attempt"] == 1
        }),
        "job {id} is back in the queue: {}",
        d.show(id)
    );
    let why = d.ok(&["explain", &id.to_string()]);
    assert!(
        why.starts_with(&format!(
            "job {id} is requeued by the job (exit 75), waiting out its back-off until "
        )),
        "not called a retry: {why}"
    );
    let table = d.ok(&["ls"]);
    assert!(
        table.contains("requeued by the job (exit 75), waiting out its back-off"),
        "{table}"
    );
    d.ok(&["cancel", &id.to_string()]);
}

#[test]
fn a_job_that_exits_75_after_each_checkpoint_keeps_going() {
    let d = Daemon::start_with_config("sim:1", REQUEUE_LIMITS);
    // Six attempts, more than three requeues in a row: each one writes its
    // checkpoint (the same file, rewritten) before asking to be requeued.
    let script = "date +%s%N > \"$GPUQ_CHECKPOINT_DIR/ckpt\"; \
                  [ \"$GPUQ_ATTEMPT\" -ge 6 ] && exit 0; exit 75";
    let id = d.submit(&["--", "sh", "-c", script]);
    let (_, job) = d.wait_within(id, Duration::from_secs(60));
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(attempt_times(&job).len(), 6, "{job}");
}

#[test]
fn a_command_that_cannot_start_fails_at_once_and_says_why_everywhere() {
    let d = Daemon::start("sim:1");
    let id = d.submit(&["--retries", "3", "--", "pythonx-not-here", "train.py"]);
    let (_, job) = d.wait_within(id, Duration::from_secs(30));
    let cause = "cannot start: `pythonx-not-here`: command not found (no such file in PATH)";
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(
        job["attempts"].as_array().unwrap().len(),
        1,
        "not retried: {job}"
    );
    assert!(job["reason"].as_str().unwrap().starts_with(cause), "{job}");
    let id_s = id.to_string();
    let explain = d.ok(&["explain", &id_s]);
    assert!(explain.contains(cause), "explain: {explain}");
    assert!(!explain.contains("back-off"), "explain: {explain}");
    let table = d.ok(&["ls", "--all"]);
    assert!(table.contains("cannot start"), "ls: {table}");
    assert!(d.ok(&["show", &id_s]).contains(cause));
    let alerts = d.json(&["alerts", "--json"]);
    assert!(
        alerts
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["kind"] == "job_failed" && a["message"].as_str().unwrap().contains(cause)),
        "the alert names the cause: {alerts}"
    );

    // `gpuq run` exits as a shell would (127), and says why.
    let run = d.gpuq(&["run", "--", "pythonx-not-here"]);
    assert_eq!(run.status.code(), Some(127), "{}", stderr(&run));
    assert!(stderr(&run).contains("cannot start"), "{}", stderr(&run));

    // `python` where only `python3` is installed: the reason names the one there is.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/bin/true", bin.path().join("python3")).unwrap();
    let out = d
        .cmd(&["submit", "--", "python", "train.py"])
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let py: u64 = succeeded(&out).trim().parse().unwrap();
    let (_, job) = d.wait_within(py, Duration::from_secs(30));
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.contains("`python`: command not found")
            && reason.contains("did you mean `python3`?"),
        "{reason}"
    );

    // A script without its execute bit.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("train.sh"), "#!/bin/sh\necho hi\n").unwrap();
    let cwd = dir.path().to_str().unwrap();
    let script = d.submit(&["--retries", "2", "--cwd", cwd, "--", "./train.sh"]);
    let (_, job) = d.wait_within(script, Duration::from_secs(30));
    let reason = job["reason"].as_str().unwrap();
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job}");
    assert!(
        reason.starts_with("cannot start: `./train.sh`: permission denied"),
        "{reason}"
    );
    assert_eq!(job["exit_code"], 126, "{job}");
}

/// `gpuq server stop` for a home, when dropped: the test's autostarted daemon.
struct StopOnDrop(std::path::PathBuf);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = Command::new(GPUQ)
            .args(["server", "stop"])
            .env("GPUQ_HOME", &self.0)
            .output();
    }
}

/// A command run as a user would: it may start the home's daemon.
fn autostarting(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(GPUQ)
        .args(args)
        .env("GPUQ_HOME", home)
        .env_remove("GPUQ_URL")
        .env_remove("GPUQ_NO_AUTOSTART")
        .env("GPUQ_NO_REPRO", "1")
        .output()
        .unwrap()
}

#[test]
fn a_daemon_killed_and_autostarted_keeps_its_simulated_gpus_and_its_jobs() {
    let mut d = Daemon::start("sim:4");
    let home = d.path().to_path_buf();
    let _stop = StopOnDrop(home.clone());
    let id = d.submit(&["--gpus", "2", "--", "sleep", "120"]);
    d.wait_running(id);
    let held = d.show(id)["gpus"].clone();
    d.kill();

    let ls = autostarting(&home, &["ls"]);
    assert!(ls.status.success(), "{}", stderr(&ls));
    assert!(
        stderr(&ls).contains("with 4 GPUs") && stderr(&ls).contains("from daemon.settings"),
        "the autostart says what it started, and why: {}",
        stderr(&ls)
    );
    let gpus: serde_json::Value =
        serde_json::from_slice(&autostarting(&home, &["gpus", "--json"]).stdout).unwrap();
    assert_eq!(gpus.as_array().unwrap().len(), 4, "{gpus}");
    let job: serde_json::Value =
        serde_json::from_slice(&autostarting(&home, &["show", &id.to_string(), "--json"]).stdout)
            .unwrap();
    assert_eq!(job["state"], "running", "adopted: {job}");
    assert_eq!(job["gpus"], held, "on the GPUs it held: {job}");
    let holders: Vec<&serde_json::Value> = gpus
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["job"] == id)
        .collect();
    assert_eq!(holders.len(), 2, "{gpus}");
    let log = std::fs::read_to_string(home.join("daemon.log")).unwrap();
    assert!(
        log.contains("gpus sim:4 (the last daemon's daemon.settings)"),
        "the log says where the setting came from: {log}"
    );
    assert!(autostarting(&home, &["cancel", &id.to_string()])
        .status
        .success());

    // gpuq.toml's setting wins over the last daemon's.
    assert!(autostarting(&home, &["server", "stop"]).status.success());
    let config = std::fs::read_to_string(home.join("gpuq.toml")).unwrap();
    std::fs::write(
        home.join("gpuq.toml"),
        format!("{config}\n[server]\ngpus = \"sim:3\"\n"),
    )
    .unwrap();
    let gpus: serde_json::Value =
        serde_json::from_slice(&autostarting(&home, &["gpus", "--json"]).stdout).unwrap();
    assert_eq!(gpus.as_array().unwrap().len(), 3, "{gpus}");
}

#[test]
fn the_server_started_as_the_readme_says_keeps_the_shell_quiet_and_writes_its_log() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("gpuq.toml"), as_tests_config("")).unwrap();
    let _stop = StopOnDrop(home.path().to_path_buf());
    let err_path = home.path().join("terminal.txt");
    // `gpuq server --gpus sim:4 &`: its stdout and stderr are the user's terminal.
    let mut server = Command::new(GPUQ)
        .args(["server", "--gpus", "sim:4"])
        .env("GPUQ_HOME", home.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(home.path().join("stdout.txt")).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || home
        .path()
        .join("daemon.json")
        .exists()));
    let run = Command::new(GPUQ)
        .args(["run", "--", "echo", "hello"])
        .env("GPUQ_HOME", home.path())
        .env("GPUQ_NO_AUTOSTART", "1")
        .env("GPUQ_NO_REPRO", "1")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr(&run));
    let stop = Command::new(GPUQ)
        .args(["server", "stop"])
        .env("GPUQ_HOME", home.path())
        .output()
        .unwrap();
    assert!(stop.status.success(), "{}", stderr(&stop));
    let _ = server.wait();
    let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap();
    assert!(log.contains("gpuq daemon listening on"), "{log}");
    assert!(log.contains("settings: gpus sim:4 (flag)"), "{log}");
    let terminal = std::fs::read_to_string(&err_path).unwrap()
        + &std::fs::read_to_string(home.path().join("stdout.txt")).unwrap();
    let lines: Vec<&str> = terminal.lines().collect();
    assert_eq!(lines.len(), 1, "one line in the shell: {terminal}");
    assert!(lines[0].contains("daemon.log"), "{terminal}");

    // --foreground: the log on stderr too.
    let fg = tempfile::tempdir().unwrap();
    std::fs::write(fg.path().join("gpuq.toml"), as_tests_config("")).unwrap();
    let _stop_fg = StopOnDrop(fg.path().to_path_buf());
    let fg_err = fg.path().join("terminal.txt");
    let mut server = Command::new(GPUQ)
        .args([
            "server",
            "--gpus",
            "sim:1",
            "--listen",
            "127.0.0.1:0",
            "--foreground",
        ])
        .env("GPUQ_HOME", fg.path())
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&fg_err).unwrap())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || {
        std::fs::read_to_string(&fg_err).is_ok_and(|t| t.contains("gpuq daemon listening on"))
    }));
    let _ = Command::new(GPUQ)
        .args(["server", "stop"])
        .env("GPUQ_HOME", fg.path())
        .output();
    let _ = server.wait();

    // A start that fails still says why in the shell.
    let out = Command::new(GPUQ)
        .args(["server", "--gpus", "sim:many"])
        .env("GPUQ_HOME", fg.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("sim:many"), "{}", stderr(&out));
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

fn make_readable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

#[test]
fn daemon_log_stays_private_and_is_never_opened_through_a_link() {
    // An autostart where an older gpuq left a readable log: private again.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("gpuq.toml"), as_tests_config("")).unwrap();
    let log = home.path().join("daemon.log");
    std::fs::write(&log, "from before\n").unwrap();
    make_readable(&log);
    {
        let _stop = StopOnDrop(home.path().to_path_buf());
        let ls = autostarting(home.path(), &["ls"]);
        assert!(ls.status.success(), "{}", stderr(&ls));
        assert_eq!(mode(&log), 0o600, "after an autostart");
        assert!(std::fs::read_to_string(&log)
            .unwrap()
            .starts_with("from before\n"));
    }
    assert!(eventually(Duration::from_secs(20), || !home
        .path()
        .join("daemon.json")
        .exists()));

    // `gpuq server` as the README starts it, on a readable log: private too.
    make_readable(&log);
    let _stop = StopOnDrop(home.path().to_path_buf());
    let mut server = Command::new(GPUQ)
        .args(["server", "--listen", "127.0.0.1:0", "--gpus", "sim:1"])
        .env("GPUQ_HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || home
        .path()
        .join("daemon.json")
        .exists()));
    assert_eq!(mode(&log), 0o600, "after gpuq server");
    let stop = autostarting(home.path(), &["server", "stop"]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    let _ = server.wait();

    // A link planted at daemon.log: the autostart refuses it, the file it
    // points at is neither written nor made private nor readable.
    let planted = tempfile::tempdir().unwrap();
    std::fs::write(planted.path().join("gpuq.toml"), as_tests_config("")).unwrap();
    let _stop_planted = StopOnDrop(planted.path().to_path_buf());
    let target = planted.path().join("someone-elses.txt");
    std::fs::write(&target, "theirs\n").unwrap();
    make_readable(&target);
    std::os::unix::fs::symlink(&target, planted.path().join("daemon.log")).unwrap();
    let ls = autostarting(planted.path(), &["ls"]);
    assert!(!ls.status.success(), "started through the link");
    assert!(stderr(&ls).contains("daemon.log"), "{}", stderr(&ls));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs\n");
    assert_eq!(mode(&target), 0o644);
    assert!(!planted.path().join("daemon.json").exists());
}
