//! Reproducibility captured at submit, end to end: a real daemon, the real
//! CLI, real git repositories and the machine's Python.

mod common;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const SECRET: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY";

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out).trim().to_string()
}

/// A repository with one commit of `train.py`, then a change to it (not
/// committed) and an untracked `notes.txt`.
fn dirty_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q"]);
    git(repo, &["symbolic-ref", "HEAD", "refs/heads/main"]);
    std::fs::write(
        repo.join("train.py"),
        "import os\nprint('FOO=' + os.environ.get('FOO', ''))\n",
    )
    .unwrap();
    git(repo, &["add", "train.py"]);
    git(repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(
        repo.join("train.py"),
        "import os\nprint('FOO=' + os.environ.get('FOO', ''))\nprint('changed')\n",
    )
    .unwrap();
    std::fs::write(repo.join("notes.txt"), "todo\n").unwrap();
    dir
}

/// gpuq run from `dir`, capture on, with a cache of the test's own.
fn gpuq_in(d: &Daemon, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    d.cmd(args)
        .current_dir(dir)
        .env_remove("GPUQ_NO_REPRO")
        .env("XDG_CACHE_HOME", d.path().join("user-cache"))
        .envs(env.iter().copied())
        .output()
        .expect("gpuq runs")
}

fn ok(out: Output) -> String {
    succeeded(&out)
}

fn repro_of(d: &Daemon, id: u64) -> Value {
    d.json(&["show", "--repro", "--json", &id.to_string()])
}

fn have_python() -> bool {
    Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_dirty_checkout_is_recorded_shown_and_its_diff_applies() {
    let d = Daemon::start("sim:2");
    let dir = dirty_repo();
    let repo = dir.path();
    let head = git(repo, &["rev-parse", "HEAD"]);
    let out = gpuq_in(
        &d,
        repo,
        &["submit", "--gpus", "1", "--", "python3", "train.py"],
        &[("AWS_SECRET_ACCESS_KEY", SECRET), ("FOO", "bar")],
    );
    let id: u64 = ok(out).trim().parse().unwrap();
    let view = repro_of(&d, id);
    let r = &view["repro"];
    let g = &r["git"];
    let root = repo.canonicalize().unwrap().display().to_string();
    assert_eq!(g["root"], json!(root), "{view}");
    assert_eq!(g["commit"], json!(head));
    assert_eq!(g["branch"], "main");
    assert_eq!(g["dirty"], true);
    assert!(
        g["diff"].as_str().unwrap().contains("+print('changed')"),
        "{g}"
    );
    assert_eq!(g["diff_truncated"], false);
    assert_eq!(g["untracked"], json!(["notes.txt"]));
    assert_eq!(r["command"], json!(["python3", "train.py"]));
    assert_eq!(r["cwd"], json!(repo.display().to_string()));
    // The secret is recorded masked, nowhere in clear; other variables as they were.
    assert_eq!(r["env"]["AWS_SECRET_ACCESS_KEY"], "(hidden)");
    assert_eq!(r["env"]["FOO"], "bar");
    assert!(!view.to_string().contains(SECRET));
    if have_python() {
        let p = &r["python"];
        assert!(p["executable"].as_str().unwrap().contains("python"), "{p}");
        assert!(p["version"].as_str().unwrap().starts_with('3'), "{p}");
    }
    assert!(r["capture_ms"].as_u64().unwrap() < 4000, "{r}");
    // The tracked run carries the commit under MLflow's own tag names.
    let run: Value = serde_json::from_str(&d.get(&format!("/v1/jobs/{id}/run"))).unwrap();
    assert_eq!(
        run["tags"]["mlflow.source.git.commit"],
        json!(head),
        "{run}"
    );
    assert_eq!(run["tags"]["mlflow.source.git.branch"], "main");

    // Once it started: where it ran.
    assert!(eventually(Duration::from_secs(10), || {
        !repro_of(&d, id)["runtime"].as_array().unwrap().is_empty()
    }));
    let rt = &repro_of(&d, id)["runtime"][0];
    assert_eq!(rt["attempt"], 1);
    assert_eq!(rt["gpus"][0]["model"], "Simulated GPU 80GB", "{rt}");
    assert!(rt["gpus"][0]["uuid"].as_str().unwrap().starts_with("GPU-"));
    assert_eq!(
        rt["driver_version"],
        Value::Null,
        "simulated GPUs have no driver"
    );

    // The human view names the commit and the changes, and says how to get them.
    let text = ok(gpuq_in(
        &d,
        repo,
        &["show", "--repro", &id.to_string()],
        &[],
    ));
    assert!(
        text.contains(&head) && text.contains("1 file changed"),
        "{text}"
    );
    assert!(
        text.contains("--diff") && text.contains("notes.txt"),
        "{text}"
    );
    assert!(text.contains("Simulated GPU 80GB"), "{text}");

    // The raw diff applies to the commit.
    let patch = ok(gpuq_in(
        &d,
        repo,
        &["show", "--repro", "--diff", &id.to_string()],
        &[],
    ));
    git(repo, &["checkout", "--", "train.py"]);
    std::fs::write(repo.join("job.patch"), &patch).unwrap();
    git(repo, &["apply", "job.patch"]);
    assert!(std::fs::read_to_string(repo.join("train.py"))
        .unwrap()
        .contains("changed"));

    // A closed pipe ends the output quietly.
    let piped = Command::new("sh")
        .arg("-c")
        .arg(format!("'{GPUQ}' show --repro {id} | head -1"))
        .env("GPUQ_HOME", d.path())
        .env("GPUQ_URL", &d.url)
        .env("GPUQ_NO_AUTOSTART", "1")
        .output()
        .unwrap();
    assert_eq!(stdout(&piped).lines().count(), 1);
    assert!(!stderr(&piped).contains("panicked"), "{}", stderr(&piped));
}

#[test]
fn rerun_resubmits_the_job_and_warns_only_when_the_code_changed() {
    let d = Daemon::start("sim:2");
    let dir = dirty_repo();
    let repo = dir.path();
    let first = git(repo, &["rev-parse", "HEAD"]);
    let out = gpuq_in(
        &d,
        repo,
        &["submit", "--", "python3", "train.py"],
        &[("FOO", "bar")],
    );
    let id: u64 = ok(out).trim().parse().unwrap();

    // Nothing changed: no warning. From elsewhere, without FOO: the job's own directory and environment.
    let out = gpuq_in(&d, Path::new("/"), &["rerun", &id.to_string()], &[]);
    let again: u64 = stdout(&out)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", stderr(&out)));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert_ne!(again, id);
    let (code, job) = d.wait_within(again, Duration::from_secs(30));
    assert_eq!(job["cwd"], json!(repo.display().to_string()));
    if have_python() {
        assert_eq!(code, Some(0), "{job}");
        assert!(d.log(again).contains("FOO=bar"), "{}", d.log(again));
    }

    // A new commit: the warning names it, and the rerun still happens.
    git(repo, &["commit", "-q", "-am", "second"]);
    let second = git(repo, &["rev-parse", "HEAD"]);
    let out = gpuq_in(&d, Path::new("/"), &["rerun", &id.to_string()], &[]);
    let third: u64 = stdout(&out)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", stderr(&out)));
    let warning = stderr(&out);
    assert!(
        warning.contains(&format!(
            "warning: code changed since job {id}: commit {} → {}; 1 file differs",
            &first[..7],
            &second[..7]
        )),
        "{warning}"
    );
    let r = &repro_of(&d, third)["repro"];
    assert_eq!(r["git"]["commit"], json!(second));
    assert_eq!(r["git"]["dirty"], false);
    assert_eq!(d.show(third)["spec"], d.show(id)["spec"]);

    // An unknown job is bad input.
    let out = gpuq_in(&d, repo, &["rerun", "999"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("job 999 does not exist"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_huge_diff_and_many_untracked_files_are_capped() {
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q"]);
    let lines =
        |tag: &str| -> String { (0..20_000).map(|i| format!("{tag} line {i}\n")).collect() };
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    std::fs::write(repo.join("big.txt"), lines("old")).unwrap();
    git(repo, &["add", "."]);
    git(repo, &["commit", "-q", "-m", "big"]);
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    std::fs::write(repo.join("big.txt"), lines("new")).unwrap();
    for i in 0..1005 {
        std::fs::write(repo.join(format!("u{i:04}.txt")), "").unwrap();
    }
    let id: u64 = ok(gpuq_in(&d, repo, &["submit", "--", "true"], &[]))
        .trim()
        .parse()
        .unwrap();
    let g = repro_of(&d, id)["repro"]["git"].clone();
    let diff = g["diff"].as_str().unwrap();
    assert_eq!(g["diff_truncated"], true);
    assert!(diff.len() <= 256 * 1024, "{}", diff.len());
    assert!(
        g["diff_bytes"].as_u64().unwrap() > 512 * 1024,
        "{}",
        g["diff_bytes"]
    );
    // Cut where big.txt's part begins: what is kept is a whole patch.
    assert!(
        diff.contains("a/a.txt") && !diff.contains("big.txt"),
        "{diff}"
    );
    git(repo, &["checkout", "--", "a.txt"]);
    std::fs::write(repo.join("../kept.patch"), diff).unwrap();
    git(repo, &["apply", "--check", "../kept.patch"]);
    assert_eq!(g["untracked"].as_array().unwrap().len(), 1000);
    assert_eq!(g["untracked_truncated"], true);
    assert_eq!(g["diff_sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn outside_a_checkout_or_turned_off() {
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path();
    let id: u64 = ok(gpuq_in(&d, plain, &["submit", "--", "true"], &[]))
        .trim()
        .parse()
        .unwrap();
    let r = &repro_of(&d, id)["repro"];
    assert_eq!(r["git"], Value::Null, "{r}");
    assert_eq!(r["cwd"], json!(plain.display().to_string()));
    let text = ok(gpuq_in(
        &d,
        plain,
        &["show", "--repro", &id.to_string()],
        &[],
    ));
    assert!(text.contains("not a git checkout"), "{text}");
    let out = gpuq_in(
        &d,
        plain,
        &["show", "--repro", "--diff", &id.to_string()],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));

    for (args, env) in [
        (vec!["submit", "--no-repro", "--", "true"], vec![]),
        (vec!["submit", "--", "true"], vec![("GPUQ_NO_REPRO", "1")]),
    ] {
        let id: u64 = ok(gpuq_in(&d, plain, &args, &env)).trim().parse().unwrap();
        assert_eq!(repro_of(&d, id)["repro"], Value::Null);
    }
    let out = gpuq_in(&d, plain, &["show", "--repro", "12345"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_slow_pip_freeze_does_not_hold_up_submit_and_fills_the_cache() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start("sim:1");
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join(".venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    // An interpreter that answers the probe at once and takes 5 s over `pip freeze`.
    let python = bin.join("python");
    std::fs::write(
        &python,
        "#!/bin/sh\nif [ \"$1\" = -c ]; then printf '%s\\n' \"$0\" 3.99.0 /p /p 1 ''; exit 0; fi\n\
         sleep 5; echo slow==1.0\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let submit = || {
        let started = std::time::Instant::now();
        let out = gpuq_in(
            &d,
            dir.path(),
            &["submit", "--", ".venv/bin/python", "train.py"],
            &[],
        );
        let id: u64 = ok(out).trim().parse().unwrap();
        (id, started.elapsed())
    };
    let (id, took) = submit();
    assert!(took < Duration::from_secs(4), "submit took {took:?}");
    let p = repro_of(&d, id)["repro"].clone();
    assert_eq!(
        p["python"]["executable"],
        json!(python.display().to_string()),
        "{p}"
    );
    assert_eq!(p["python"]["version"], "3.99.0");
    assert_eq!(p["python"]["packages"], json!([]));
    assert!(p["notes"].to_string().contains("pip freeze"), "{p}");
    // The freeze went on in the background; the next submit has its answer.
    assert!(eventually(Duration::from_secs(15), || {
        let (id, _) = submit();
        repro_of(&d, id)["repro"]["python"]["packages"] == json!(["slow==1.0"])
    }));
}

#[test]
fn the_daemon_refuses_an_oversized_capture_by_name() {
    let d = Daemon::start("sim:1");
    let body = json!({
        "spec": { "command": ["true"] },
        "cwd": "/tmp",
        "user": "",
        "repro": { "captured_at": 0, "hostname": "h", "notes": ["x".repeat(1_100_000)] },
    });
    // Over exec's limit for one argument: curl reads it from a file.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), body.to_string()).unwrap();
    let out = Command::new("curl")
        .args([
            "-sS",
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-H",
        ])
        .arg(format!("authorization: Bearer {}", d.token()))
        .arg("--data-binary")
        .arg(format!("@{}", file.path().display()))
        .arg(format!("{}/v1/jobs", d.url))
        .output()
        .unwrap();
    let answer: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(answer["field"], "repro", "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("--no-repro"),
        "{answer}"
    );
}

#[test]
fn nvml_gives_the_attempts_driver_cuda_and_gpu() {
    let library = nvml_stand_in();
    let state_dir = tempfile::tempdir().unwrap();
    let state = state_dir.path().join("nvml.json");
    let devices = json!({ "devices": [{
        "uuid": "GPU-8f6c1a2e-0000-4000-8000-000000000000",
        "name": "NVIDIA A100-SXM4-80GB",
    }], "driver_version": "550.54.15", "cuda_driver_version": 12040 });
    std::fs::write(&state, devices.to_string()).unwrap();
    let d = Daemon::start_configured(
        "auto",
        None,
        &[
            ("GPUQ_NVML_LIBRARY", library.to_str().unwrap()),
            ("GPUQ_NVML_STAND_IN_STATE", state.to_str().unwrap()),
        ],
    );
    let id = d.submit(&["--no-repro", "--gpus", "1", "--", "true"]);
    d.wait_within(id, Duration::from_secs(20));
    let rt = &repro_of(&d, id)["runtime"][0];
    assert_eq!(
        (&rt["driver_version"], &rt["cuda_version"]),
        (&json!("550.54.15"), &json!("12.4")),
        "{rt}"
    );
    assert_eq!(rt["gpus"][0]["model"], "NVIDIA A100-SXM4-80GB");
    assert_eq!(
        rt["gpus"][0]["uuid"],
        "GPU-8f6c1a2e-0000-4000-8000-000000000000"
    );
}

/// Two local users of a root daemon (the `system-tests` feature): the record is
/// everyone's to read, its environment's values and the rerun the owner's.
#[cfg(feature = "system-tests")]
#[test]
fn others_see_the_record_without_the_environment_and_may_not_rerun() {
    use std::os::unix::fs::PermissionsExt;
    const ALICE: &str = "gpuqtesta";
    const BOB: &str = "gpuqtestb";
    ensure_user(ALICE);
    ensure_user(BOB);
    let d = Daemon::start("sim:1");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("runuser")
        .args([
            "-u",
            ALICE,
            "--",
            "env",
            "-u",
            "GPUQ_URL",
            "-u",
            "GPUQ_TOKEN",
        ])
        .arg(format!("GPUQ_HOME={}", d.path().display()))
        .args([
            "GPUQ_NO_AUTOSTART=1",
            "FOO=alices-value",
            GPUQ,
            "submit",
            "--",
            "true",
        ])
        .current_dir("/tmp")
        .output()
        .unwrap();
    let id = stdout(&out).trim().to_string();
    assert!(out.status.success(), "{}", stderr(&out));
    let as_json = |user: &str| -> Value {
        let out = as_user(&d, user, &["show", "--repro", "--json", &id]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    assert_eq!(as_json(ALICE)["repro"]["env"]["FOO"], "alices-value");
    let seen = as_json(BOB);
    assert_eq!(seen["repro"]["env"]["FOO"], "(hidden)");
    assert!(!seen.to_string().contains("alices-value"));
    let out = as_user(&d, BOB, &["rerun", &id]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("belongs to"), "{}", stderr(&out));
}

/// `curl` over the daemon's socket as a local user: the raw API, no CLI.
#[cfg(feature = "system-tests")]
fn raw_api_as(d: &Daemon, user: &str, method: &str, path: &str, body: Option<&str>) -> String {
    let mut cmd = Command::new("runuser");
    cmd.args([
        "-u",
        user,
        "--",
        "curl",
        "-sS",
        "--max-time",
        "20",
        "-X",
        method,
    ])
    .arg("--unix-socket")
    .arg(d.path().join("gpuq.sock"));
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let out = cmd.arg(format!("http://gpuq{path}")).output().unwrap();
    assert!(out.status.success(), "curl {path}: {}", stderr(&out));
    stdout(&out)
}

/// A private repository's uncommitted diff (a key in it), its untracked names
/// and the package list are the owner's and admins': a labmate sees that the
/// checkout was dirty, the diff's size and hash, through neither the CLI nor
/// the raw API.
#[cfg(feature = "system-tests")]
#[test]
fn a_private_diff_untracked_names_and_packages_are_the_owners_and_admins_only() {
    use std::os::unix::fs::PermissionsExt;
    const ALICE: &str = "gpuqtesta";
    const BOB: &str = "gpuqtestb";
    const KEY: &str = "sk-live-4f9a1c0e7b2d";
    const UNTRACKED: &str = "prod-credentials.env";
    const PACKAGE: &str = "alices-internal-tool==3.1";
    let alice = ensure_user(ALICE);
    ensure_user(BOB);
    let d = Daemon::start("sim:1");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Alice's repository, private (0700), with a key in a change not committed.
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = dirty_repo();
    let repo = parent.path().join("alices-repo");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(dir.path())
        .arg(&repo)
        .status()
        .unwrap()
        .success());
    std::fs::write(repo.join("train.py"), format!("API_KEY = '{KEY}'\n")).unwrap();
    std::fs::write(repo.join(UNTRACKED), "x\n").unwrap();
    assert!(Command::new("chown")
        .args(["-R", &format!("{alice}:{alice}")])
        .arg(&repo)
        .status()
        .unwrap()
        .success());
    std::fs::set_permissions(&repo, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = as_user_with_env(
        d.path(),
        ALICE,
        &repo,
        &["XDG_CACHE_HOME=/tmp/gpuqtesta-cache"],
        &["submit", "--", "true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let from_repo = stdout(&out).trim().to_string();
    // A capture with packages, through the raw API as Alice.
    let body = json!({
        "spec": {"command": ["true"]},
        "cwd": "/tmp",
        "env": {"PATH": "/usr/bin:/bin"},
        "user": ALICE,
        "repro": {"captured_at": 1, "hostname": "h",
                  "python": {"executable": "/usr/bin/python3", "version": "3.11.2",
                             "packages": [PACKAGE]}},
    });
    let answer = raw_api_as(&d, ALICE, "POST", "/v1/jobs", Some(&body.to_string()));
    let with_packages = serde_json::from_str::<Value>(&answer).unwrap()["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string();
    let private = [KEY, UNTRACKED, PACKAGE];

    // Bob: the CLI (JSON and words), --diff, and the raw API of both the record and the job.
    let cli = |user: &str, args: &[&str]| -> Output { as_user(&d, user, args) };
    for id in [&from_repo, &with_packages] {
        let json_out = cli(BOB, &["show", "--repro", "--json", id]);
        let words = cli(BOB, &["show", "--repro", id]);
        let diff = cli(BOB, &["show", "--repro", "--diff", id]);
        let raw = raw_api_as(&d, BOB, "GET", &format!("/v1/jobs/{id}/repro"), None);
        let job = raw_api_as(&d, BOB, "GET", &format!("/v1/jobs/{id}"), None);
        assert!(
            json_out.status.success() && words.status.success(),
            "{}",
            stderr(&words)
        );
        for seen in [
            stdout(&json_out),
            stdout(&words),
            stdout(&diff),
            stderr(&diff),
            raw.clone(),
            job,
        ] {
            for p in private {
                assert!(!seen.contains(p), "Bob read {p:?} of job {id}: {seen}");
            }
        }
        if id == &from_repo {
            assert_eq!(diff.status.code(), Some(1), "{}", stderr(&diff));
            assert!(stderr(&diff).contains("owner"), "{}", stderr(&diff));
            assert!(
                stdout(&words).contains("owner's and admins' only"),
                "{}",
                stdout(&words)
            );
        }
    }
    // What Bob still sees: that there is a diff, its size and hash, and how much was left out.
    let seen: Value = serde_json::from_str(&stdout(&cli(
        BOB,
        &["show", "--repro", "--json", &from_repo],
    )))
    .unwrap();
    let g = &seen["repro"]["git"];
    assert_eq!(g["dirty"], true, "{seen}");
    assert!(g["diff_bytes"].as_u64().unwrap() > 0, "{seen}");
    assert_eq!(g["diff_sha256"].as_str().unwrap().len(), 64, "{seen}");
    // notes.txt (from dirty_repo) and the credentials file.
    assert_eq!(seen["repro"]["withheld"]["untracked"], 2, "{seen}");
    let seen: Value = serde_json::from_str(&raw_api_as(
        &d,
        BOB,
        "GET",
        &format!("/v1/jobs/{with_packages}/repro"),
        None,
    ))
    .unwrap();
    assert_eq!(seen["repro"]["withheld"]["packages"], 1, "{seen}");

    // Alice reads all of it, as does an admin (the daemon's token).
    let diff = cli(ALICE, &["show", "--repro", "--diff", &from_repo]);
    assert!(stdout(&diff).contains(KEY), "{}", stderr(&diff));
    let mine: Value = serde_json::from_str(&stdout(&cli(
        ALICE,
        &["show", "--repro", "--json", &from_repo],
    )))
    .unwrap();
    assert_eq!(
        mine["repro"]["git"]["untracked"],
        json!(["notes.txt", UNTRACKED]),
        "{mine}"
    );
    assert!(mine["repro"].get("withheld").is_none(), "{mine}");
    let admin = d.json(&["show", "--repro", "--json", &with_packages]);
    assert_eq!(
        admin["repro"]["python"]["packages"],
        json!([PACKAGE]),
        "{admin}"
    );
    assert!(
        repro_of(&d, from_repo.parse().unwrap())["repro"]["git"]["diff"]
            .as_str()
            .unwrap()
            .contains(KEY)
    );
}
