//! Attacks on a daemon run as root, by a gpuq admin and by a curious labmate, each
//! performed for real with local accounts made by useradd: none may make anyone
//! root, make root run or open something a user chose, or read another's files.
//! Needs root: the `system-tests` feature.
#![cfg(feature = "system-tests")]

mod common;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

/// The admin (`admins = [...]` in gpuq.toml) and a plain user.
const ADMIN: &str = "gpuqtestadm";
const MATE: &str = "gpuqtestmate";
const OTHER: &str = "gpuqtestb";

fn admin_config() -> String {
    format!("admins = [\"{ADMIN}\"]\n[telemetry]\ninterval = \"100ms\"\n")
}

/// A root daemon whose users can reach its socket.
fn shared_daemon(toml: &str) -> Daemon {
    let d = Daemon::start_strict("sim:2", toml);
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// An API call with `token`: (HTTP status, body).
fn api(d: &Daemon, token: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H"])
        .arg(format!("authorization: Bearer {token}"));
    if let Some(body) = body {
        c.args([
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
        ]);
    }
    let out = c.arg(format!("{}{path}", d.url)).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_string())
}

/// A token for `user`, made by root (the daemon's own token).
fn token_for(d: &Daemon, user: &str) -> String {
    let (code, body) = api(
        d,
        &d.token(),
        "POST",
        "/v1/tokens",
        Some(&format!(r#"{{"user":"{user}"}}"#)),
    );
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string()
}

fn submit_body(user: &str, argv: &[&str]) -> String {
    serde_json::json!({
        "spec": { "command": argv },
        "cwd": "/tmp",
        "env": { "PATH": "/usr/bin:/bin" },
        "user": user,
    })
    .to_string()
}

#[test]
fn an_admin_cannot_become_root_or_anyone_else() {
    ensure_user(ADMIN);
    ensure_user(MATE);
    let d = shared_daemon(&admin_config());
    let admin = token_for(&d, ADMIN);

    // (a) A token for root, for a system account, for another person: refused.
    for (user, why) in [
        ("root", "may make a token for another user"),
        ("daemon", "may make a token for another user"),
        (MATE, "may make a token for another user"),
    ] {
        let (code, body) = api(
            &d,
            &admin,
            "POST",
            "/v1/tokens",
            Some(&format!(r#"{{"user":"{user}"}}"#)),
        );
        assert_eq!(code, 403, "token for {user}: {body}");
        assert!(body.contains(why), "{body}");
        assert!(
            body.contains("\"error\""),
            "the API's JSON error shape: {body}"
        );
    }
    // Not even root makes a token for root or for a system account: jobs may not run as them.
    for user in ["root", "daemon"] {
        let (code, body) = api(
            &d,
            &d.token(),
            "POST",
            "/v1/tokens",
            Some(&format!(r#"{{"user":"{user}"}}"#)),
        );
        assert_eq!(code, 400, "{body}");
        assert!(body.contains("user:"), "{body}");
    }

    // Submitting as root or as a labmate with the admin's token: refused, nothing queued.
    for user in ["root", MATE] {
        let (code, body) = api(
            &d,
            &admin,
            "POST",
            "/v1/jobs",
            Some(&submit_body(user, &["id", "-u"])),
        );
        assert_eq!(code, 400, "submit as {user}: {body}");
        assert!(body.contains("only the daemon's owner"), "{body}");
    }
    // Root itself, through the socket and with the daemon's token: no root jobs unless allowed.
    let out = d.gpuq(&["submit", "--", "id", "-u"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("allow_root_jobs"), "{}", stderr(&out));
    let jobs = d.json(&["ls", "--json"]);
    assert_eq!(
        jobs.as_array().unwrap().len(),
        0,
        "nothing was queued: {jobs}"
    );

    // The admin's own jobs run as the admin, and the admin still manages the queue.
    let (code, body) = api(
        &d,
        &admin,
        "POST",
        "/v1/jobs",
        Some(&submit_body(ADMIN, &["id", "-u"])),
    );
    assert_eq!(code, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_u64()
        .unwrap();
    assert_eq!(d.wait(id)["state"], "succeeded");
    let uid = ensure_user(ADMIN).to_string();
    assert_eq!(d.ok(&["logs", &id.to_string()]).trim(), uid);
}

#[test]
fn root_jobs_run_only_where_the_root_owned_config_allows_them() {
    let d = shared_daemon("allow_root_jobs = true\n");
    let id = d.submit(&["--", "id", "-u"]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    assert_eq!(d.ok(&["logs", &id.to_string()]).trim(), "0");

    // A config others could change is not believed: the daemon refuses to start.
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("gpuq.toml");
    std::fs::write(&config, "allow_root_jobs = true\n").unwrap();
    let mate = ensure_user(MATE);
    std::os::unix::fs::chown(&config, Some(mate), None).unwrap();
    let out = refused_start(home.path());
    assert!(out.contains("root-owned"), "{out}");
    std::os::unix::fs::chown(&config, Some(0), None).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = refused_start(home.path());
    assert!(out.contains("writable by group or others"), "{out}");
}

/// Starts `gpuq server` on `home`, which must refuse to start (exit 2) within 10 s; its stderr.
fn refused_start(home: &std::path::Path) -> String {
    let mut child = Command::new(GPUQ)
        .args(["server", "--gpus", "none", "--listen", "127.0.0.1:0"])
        .env("GPUQ_HOME", home)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = eventually(Duration::from_secs(10), || {
        child.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(ended, "the daemon started on an untrusted config");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    stderr(&out)
}

#[test]
fn autostop_runs_only_commands_the_config_names() {
    ensure_user(ADMIN);
    let marker = tempfile::tempdir().unwrap();
    let pwned = marker.path().join("pwned");
    let allowed = marker.path().join("allowed");
    let d = shared_daemon(&format!(
        "{}[autostop]\nidle_after = \"1h\"\ncommands = [\"touch {}\"]\n",
        admin_config(),
        allowed.display()
    ));
    let admin = token_for(&d, ADMIN);
    let evil = format!(
        r#"{{"idle_after":"1s","command":"touch {}"}}"#,
        pwned.display()
    );
    let (code, body) = api(&d, &admin, "POST", "/v1/autostop", Some(&evil));
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("command") && body.contains("allows"),
        "{body}"
    );
    // The daemon's own token cannot bring a command either.
    let (code, _) = api(&d, &d.token(), "POST", "/v1/autostop", Some(&evil));
    assert_eq!(code, 400);
    // Choosing the configured one works, and it runs when the node is idle.
    let good = format!(
        r#"{{"idle_after":"2s","command":"touch {}"}}"#,
        allowed.display()
    );
    let (code, body) = api(&d, &admin, "POST", "/v1/autostop", Some(&good));
    assert_eq!(code, 200, "{body}");
    assert!(eventually(Duration::from_secs(10), || allowed.exists()));
    assert!(!pwned.exists(), "root never ran the API's command");
}

#[test]
fn a_relative_home_and_planted_links_never_redirect_roots_writes() {
    let mate_uid = ensure_user(MATE);
    // The daemon starts with a relative GPUQ_HOME from a directory of its own.
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = base.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(home.join("gpuq.toml"), "").unwrap();
    let mut server = Command::new(GPUQ)
        .args(["server", "--gpus", "sim:1", "--listen", "127.0.0.1:0"])
        .env("GPUQ_HOME", "home")
        .current_dir(base.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || home
        .join("daemon.json")
        .exists()));
    // The victim: a root-owned file; the bait: the records' relative paths, made
    // in the user's working directory and linked to the victim.
    let victim = base.path().join("victim");
    std::fs::write(&victim, "root's").unwrap();
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(work.path(), Some(mate_uid), None).unwrap();
    let bait = work.path().join("home/jobs/1");
    std::fs::create_dir_all(&bait).unwrap();
    for name in [
        "attempt-1.exit",
        "attempt-1.exit.tmp",
        "attempt-1.pgid",
        "attempt-1.pgid.tmp",
    ] {
        std::os::unix::fs::symlink(&victim, bait.join(name)).unwrap();
    }
    let run = as_user_in(&home, MATE, work.path(), &["run", "--", "true"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's");
    assert!(
        home.join("jobs/1/attempt-1.exit").is_file(),
        "records are in the real home"
    );
    // SAFETY: ending the daemon this test started.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let _ = server.wait();
}

#[test]
fn a_jobs_sim_load_cannot_leak_freeze_or_flood_the_daemon() {
    ensure_user(MATE);
    let d = shared_daemon("[telemetry]\ninterval = \"100ms\"\n");
    // A root-only file whose content would show as the GPU's utilisation.
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret");
    std::fs::write(&secret, "{\"util\": 77}").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(secret_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let util = || -> f64 {
        let gpus: serde_json::Value = serde_json::from_str(&d.get("/v1/gpus")).unwrap();
        gpus[0]["reading"]["util_percent"].as_f64().unwrap_or(-1.0)
    };
    let rss_kib = || -> u64 {
        let pid = std::fs::read_to_string(d.path().join("daemon.json")).unwrap();
        let pid = serde_json::from_str::<serde_json::Value>(&pid).unwrap()["pid"]
            .as_u64()
            .unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let before = rss_kib();
    for plant in [
        format!("ln -s {} \"$GPUQ_OUTPUT_DIR/.sim-load\"", secret.display()),
        "mkfifo \"$GPUQ_OUTPUT_DIR/.sim-load\"".to_string(),
        "ln -s /dev/zero \"$GPUQ_OUTPUT_DIR/.sim-load\"".to_string(),
    ] {
        let out = as_user(
            &d,
            MATE,
            &[
                "submit",
                "--gpus",
                "1",
                "--env",
                "GPUQ_SIM_UTIL=12",
                "--",
                "sh",
                "-c",
                &format!("{plant}; sleep 3"),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let id: u64 = stdout(&out).trim().parse().unwrap();
        d.wait_running(id);
        // Telemetry goes on (a FIFO would have frozen it) and shows the job's own figure.
        assert!(
            eventually(Duration::from_secs(5), || util() == 12.0),
            "{plant}: utilisation {}",
            util()
        );
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(util(), 12.0, "{plant}: the planted file is not read");
        d.ok(&["cancel", &id.to_string()]);
        d.wait(id);
        assert!(
            eventually(Duration::from_secs(5), || util() == 0.0),
            "{plant}: telemetry kept sampling after the job"
        );
    }
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 64 * 1024, "the daemon grew by {grown} KiB");
}

#[test]
fn a_working_directory_is_entered_only_with_the_jobs_rights() {
    ensure_user(MATE);
    let other_uid = ensure_user(OTHER);
    let d = shared_daemon("");
    // Another user's private directory, and root's own.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let theirs = private.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(other_uid), Some(other_uid)).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all("/root/gpuq-test-exists").unwrap();
    for cwd in [theirs.to_str().unwrap(), "/root", "/root/gpuq-test-exists"] {
        let out = as_user(&d, MATE, &["submit", "--cwd", cwd, "--", "pwd"]);
        assert_eq!(out.status.code(), Some(2), "{cwd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("permission denied"),
            "{cwd}: {}",
            stderr(&out)
        );
    }
    // Whether a path under /root exists is not told: both answers read the same.
    let answer = |cwd: &str| {
        stderr(&as_user(&d, MATE, &["submit", "--cwd", cwd, "--", "pwd"])).replace(cwd, "PATH")
    };
    assert_eq!(
        answer("/root/gpuq-test-exists"),
        answer("/root/gpuq-test-missing")
    );

    // A directory closed after the submit: the attempt fails without entering it.
    let open = private.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    d.ok(&["drain"]);
    let out = as_user(
        &d,
        MATE,
        &["submit", "--cwd", open.to_str().unwrap(), "--", "pwd"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).unwrap();
    d.ok(&["undrain"]);
    let job = d.wait(id);
    assert_eq!(job["state"], "failed", "{job}");
    let shown = d.ok(&["show", &id.to_string()]);
    assert!(
        shown.contains("cannot enter the working directory"),
        "{shown}"
    );
}

#[test]
fn checkpoints_and_outputs_are_private_unless_a_project_group_shares_them() {
    let mate_uid = ensure_user(MATE);
    ensure_user(OTHER);
    let _ = Command::new("groupadd").arg("gpuqtestvision").status();
    let d = shared_daemon("[projects.vision]\ngroup = \"gpuqtestvision\"\n");
    let job = |project: Option<&str>| -> u64 {
        let mut args = vec!["submit"];
        if let Some(p) = project {
            args.extend(["--project", p]);
        }
        args.extend(["--", "sh", "-c", "echo weights > $GPUQ_CHECKPOINT_DIR/w.pt"]);
        let out = as_user(&d, MATE, &args);
        assert!(out.status.success(), "{}", stderr(&out));
        let id = stdout(&out).trim().parse().unwrap();
        assert_eq!(d.wait(id)["state"], "succeeded");
        id
    };
    let private = job(None);
    let dir = d.job_dir(private);
    for sub in ["checkpoints", "outputs"] {
        let meta = std::fs::metadata(dir.join(sub)).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700, "{sub}");
        assert_eq!(meta.uid(), mate_uid);
    }
    let peek = Command::new("runuser")
        .args(["-u", OTHER, "--", "cat"])
        .arg(dir.join("checkpoints/w.pt"))
        .output()
        .unwrap();
    assert!(!peek.status.success(), "another user read the weights");
    assert!(
        stderr(&peek).contains("Permission denied"),
        "{}",
        stderr(&peek)
    );

    let shared = job(Some("vision"));
    let meta = std::fs::metadata(d.job_dir(shared).join("checkpoints")).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o750);
    let out = Command::new("getent")
        .args(["group", "gpuqtestvision"])
        .output()
        .unwrap();
    let gid: u32 = stdout(&out).split(':').nth(2).unwrap().parse().unwrap();
    assert_eq!(meta.gid(), gid);
}

/// The daemon's pid, from its `daemon.json`.
fn daemon_pid(d: &Daemon) -> i32 {
    let text = std::fs::read_to_string(d.path().join("daemon.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["pid"]
        .as_i64()
        .unwrap() as i32
}

#[test]
fn a_labmate_holding_connections_cannot_starve_the_daemon_of_descriptors() {
    ensure_user(MATE);
    ensure_user(OTHER);
    let d = shared_daemon(&admin_config());
    // As under systemd's default (LimitNOFILE soft 1024).
    let limit = libc::rlimit {
        rlim_cur: 1024,
        rlim_max: 1024,
    };
    // SAFETY: plain syscall on our own child's pid with a valid struct.
    let rc = unsafe {
        libc::prlimit(
            daemon_pid(&d),
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    // The other user's job runs while the labmate floods the socket.
    let out = as_user(&d, OTHER, &["submit", "--", "/bin/sleep", "4"]);
    let job: u64 = succeeded(&out).trim().parse().unwrap();
    d.wait_running(job);
    let socket = d.path().join("gpuq.sock");
    let script =
        "use Socket; my @s; for (1..1200) { socket(my $s, PF_UNIX, SOCK_STREAM, 0) or last; \
                  connect($s, pack_sockaddr_un($ARGV[0])) or last; push @s, $s } \
                  $| = 1; print scalar(@s), \"\\n\"; sleep 30";
    let mut flood = Command::new("runuser")
        .args(["-u", MATE, "--", "/bin/sh", "-c"])
        .arg("ulimit -n 4096; exec /usr/bin/perl -e \"$0\" \"$1\"")
        .arg(script)
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(flood.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.trim().parse::<u32>().unwrap() > 1000,
        "the flood opened {line}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let open = std::fs::read_dir(format!("/proc/{}/fd", daemon_pid(&d)))
        .unwrap()
        .count();
    // Everyone else is still served, and a job that ended meanwhile ends as it did.
    let answered = as_user(&d, OTHER, &["ls"]);
    let ended = d.wait(job);
    let _ = flood.kill();
    let _ = flood.wait();
    assert!(open < 300, "the daemon holds {open} descriptors");
    succeeded(&answered);
    assert_eq!(ended["state"], "succeeded", "{ended}");
    // The labmate is told why a further connection is refused.
    let mut held = Command::new("runuser")
        .args(["-u", MATE, "--", "/usr/bin/perl", "-e"])
        .arg("use Socket; my @s; for (1..64) { socket(my $s, PF_UNIX, SOCK_STREAM, 0); connect($s, pack_sockaddr_un($ARGV[0])); push @s, $s } $| = 1; print \"ok\\n\"; sleep 30")
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ok = String::new();
    std::io::BufReader::new(held.stdout.take().unwrap())
        .read_line(&mut ok)
        .unwrap();
    // Once the refused connections of the flood are answered, a further one is
    // told why (over the socket, as the CLI's health check sees it).
    let mut said = String::new();
    let told = eventually(Duration::from_secs(10), || {
        let refused = Command::new("runuser")
            .args([
                "-u",
                MATE,
                "--",
                "curl",
                "-sS",
                "--max-time",
                "5",
                "--unix-socket",
            ])
            .arg(&socket)
            .arg("http://gpuq/v1/jobs")
            .output()
            .unwrap();
        said = format!("{} {}", stdout(&refused), stderr(&refused));
        said.contains("64 connections open")
    });
    // And gpuq itself says so, instead of "no daemon" or trying to start one.
    let cli = as_user(&d, MATE, &["ls"]);
    let _ = held.kill();
    let _ = held.wait();
    assert!(told, "{said}");
    assert_eq!(cli.status.code(), Some(1), "{}", stderr(&cli));
    assert!(
        stderr(&cli).contains("64 connections open"),
        "{}",
        stderr(&cli)
    );
}

#[test]
fn a_schedules_spec_is_read_with_its_users_rights() {
    let mate_uid = ensure_user(MATE);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root's secret spec, and the user's link to it.
    let secret = dir.path().join("secret.yaml");
    std::fs::write(&secret, "name: stolen\ncommand: [\"true\"]\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let own = dir.path().join("own.yaml");
    std::fs::write(&own, "name: mine\ncommand: [\"id\", \"-u\"]\n").unwrap();
    std::os::unix::fs::chown(&own, Some(mate_uid), None).unwrap();
    let every_second = |name: &str, spec: &std::path::Path| {
        format!(
            "[[schedules]]\nname = \"{name}\"\ncron = \"* * * * * *\"\naction = \"submit\"\nspec = \"{}\"\nuser = \"{MATE}\"\n",
            spec.display()
        )
    };
    let d = shared_daemon(&format!(
        "{}{}",
        every_second("via-link", &link),
        every_second("own", &own)
    ));
    let names = || -> Vec<String> {
        d.json(&["ls", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert!(eventually(Duration::from_secs(10), || names()
        .iter()
        .any(|n| n == "mine")));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!names().iter().any(|n| n == "stolen"), "{:?}", names());
    let mine = d.json(&["ls", "--json"]);
    let job = mine
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "mine")
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    d.wait(job);
    assert_eq!(
        d.ok(&["logs", &job.to_string()]).trim(),
        mate_uid.to_string()
    );
}

/// A scheduled spec's environment files are read with its user's rights too:
/// naming root's file as requirements submits nothing (and never copies it
/// into an environment the user could read).
#[test]
fn a_scheduled_specs_environment_files_are_read_with_its_users_rights() {
    let mate_uid = ensure_user(MATE);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "root-only-line\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let reqs = dir.path().join("reqs.txt");
    std::fs::write(&reqs, "mates-own-line\n").unwrap();
    std::os::unix::fs::chown(&reqs, Some(mate_uid), None).unwrap();
    let spec = |name: &str, reqs: &std::path::Path| {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &path,
            format!(
                "name: {name}\ncommand: [\"true\"]\npython:\n  requirements: {}\n",
                reqs.display()
            ),
        )
        .unwrap();
        std::os::unix::fs::chown(&path, Some(mate_uid), None).unwrap();
        format!(
            "[[schedules]]\nname = \"{name}\"\ncron = \"* * * * * *\"\naction = \"submit\"\nspec = \"{}\"\nuser = \"{MATE}\"\n",
            path.display()
        )
    };
    // A submit that needs an environment needs uv; what it builds is not looked at here.
    let d = shared_daemon(&format!(
        "[envs]\nuv = \"/bin/true\"\n{}{}",
        spec("env-stolen", &secret),
        spec("env-own", &reqs)
    ));
    let jobs = || d.json(&["ls", "--json"]).as_array().unwrap().clone();
    assert!(eventually(Duration::from_secs(10), || jobs()
        .iter()
        .any(|j| j["name"] == "env-own")));
    std::thread::sleep(Duration::from_secs(2));
    let all = jobs();
    assert!(!all.iter().any(|j| j["name"] == "env-stolen"), "{all:?}");
    let own = all.iter().find(|j| j["name"] == "env-own").unwrap()["id"]
        .as_u64()
        .unwrap();
    let spec = &d.show(own)["spec"]["python"]["inputs"]["requirements_txt"];
    assert_eq!(spec, "mates-own-line\n");
    let seen = d.ok(&["ls", "--json", "--all"]);
    assert!(
        !seen.contains("root-only-line"),
        "root's file never reached a job"
    );
}

/// A labmate's job runs as the labmate: its run, its metrics file and its
/// outputs are theirs. Root reads and writes them without following anything
/// the labmate planted, and another account's token cannot write them.
#[test]
fn tracking_never_lets_root_follow_a_users_links_or_a_labmate_write_a_run() {
    let mate_uid = ensure_user(MATE);
    ensure_user(OTHER);
    ensure_user(ADMIN);
    let d = shared_daemon(&admin_config());
    let plant = "echo '{\"step\": 1, \"loss\": 0.25}' >> $GPUQ_METRICS_FILE; \
                 ln -s /etc/shadow $GPUQ_OUTPUT_DIR/shadow; ln /etc/shadow $GPUQ_OUTPUT_DIR/hard 2>/dev/null; \
                 ln -s /etc $GPUQ_OUTPUT_DIR/etc; mkdir $GPUQ_OUTPUT_DIR/mine; echo ok > $GPUQ_OUTPUT_DIR/mine/a.txt";
    let out = as_user(&d, MATE, &["submit", "--", "sh", "-c", plant]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(d.wait(id)["state"], "succeeded", "{}", d.log(id));
    // The job's metrics file (written as the labmate) is in the run.
    let (code, body) = api(
        &d,
        &d.token(),
        "GET",
        &format!("/v1/jobs/{id}/metrics"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"loss\""), "{body}");

    let mate = token_for(&d, MATE);
    let base = format!("/api/2.0/mlflow-artifacts/artifacts/runs/{id}");
    for path in ["shadow", "hard", "etc/shadow", "etc/passwd"] {
        let (code, body) = api(&d, &mate, "GET", &format!("{base}/{path}"), None);
        assert!(matches!(code, 403 | 404), "{path}: {code} {body}");
        assert!(
            !body.contains("root:"),
            "{path} leaked through root: {body}"
        );
    }
    let (code, _) = api(
        &d,
        &mate,
        "PUT",
        &format!("{base}/etc/cron.d/evil"),
        Some("* * * * * root true"),
    );
    assert!(matches!(code, 400 | 403), "{code}");
    assert!(!std::path::Path::new("/etc/cron.d/evil").exists());
    // What root writes there belongs to the labmate; reading their own file works.
    let (code, body) = api(
        &d,
        &mate,
        "PUT",
        &format!("{base}/mine/b.txt"),
        Some("bytes"),
    );
    assert_eq!(code, 200, "{body}");
    let written = d.job_dir(id).join("outputs/mine/b.txt");
    assert_eq!(std::fs::metadata(&written).unwrap().uid(), mate_uid);
    let (code, body) = api(&d, &mate, "GET", &format!("{base}/mine/a.txt"), None);
    assert_eq!((code, body.trim()), (200, "ok"));

    // An admin manages the queue but cannot plant a file (say, a pickled
    // model the labmate will load) in their outputs, write their run or read their files.
    let admin = token_for(&d, ADMIN);
    let (code, _) = api(
        &d,
        &admin,
        "PUT",
        &format!("{base}/mine/model.pt"),
        Some("evil"),
    );
    assert_eq!(code, 403);
    assert!(!d.job_dir(id).join("outputs/mine/model.pt").exists());
    let (code, _) = api(&d, &admin, "GET", &format!("{base}/mine/a.txt"), None);
    assert_eq!(code, 403);
    let (code, _) = api(
        &d,
        &admin,
        "POST",
        "/api/2.0/mlflow/runs/set-tag",
        Some(&format!(
            r#"{{"run_id": "{id}", "key": "x", "value": "1"}}"#
        )),
    );
    assert_eq!(code, 403);
    // Another account reads the run but writes neither it nor its artifacts.
    let other = token_for(&d, OTHER);
    let (code, _) = api(
        &d,
        &other,
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={id}"),
        None,
    );
    assert_eq!(code, 200);
    let (code, body) = api(
        &d,
        &other,
        "POST",
        "/api/2.0/mlflow/runs/log-metric",
        Some(&format!(
            r#"{{"run_id": "{id}", "key": "x", "value": 1, "timestamp": 1}}"#
        )),
    );
    assert_eq!(code, 403, "{body}");
    let (code, _) = api(&d, &other, "GET", &format!("{base}/mine/a.txt"), None);
    assert_eq!(code, 403);
    let (code, _) = api(&d, &other, "PUT", &format!("{base}/mine/c.txt"), Some("x"));
    assert_eq!(code, 403);
}

fn sweep_body(user: &str, argv: &[&str]) -> String {
    serde_json::json!({
        "spec": { "name": "s", "command": argv, "gpus": 1 },
        "sweep": {
            "parameters": { "x": { "uniform": [0.0, 1.0] } },
            "metric": { "name": "loss", "goal": "minimize" },
            "searcher": { "name": "random", "max_trials": 2, "max_concurrent": 1, "max_step": 1 }
        },
        "cwd": "/tmp",
        "env": { "PATH": "/usr/bin:/bin" },
        "user": user,
    })
    .to_string()
}

#[test]
fn a_sweep_runs_as_its_submitter_and_only_its_owner_or_an_admin_cancels_it() {
    ensure_user(ADMIN);
    ensure_user(MATE);
    ensure_user(OTHER);
    let d = shared_daemon(&admin_config());
    let admin = token_for(&d, ADMIN);
    let mate = token_for(&d, MATE);
    let other = token_for(&d, OTHER);
    // An admin cannot start a sweep whose trials run as root or as a labmate.
    for user in ["root", MATE] {
        let (code, body) = api(
            &d,
            &admin,
            "POST",
            "/v1/sweeps",
            Some(&sweep_body(user, &["id", "-u"])),
        );
        assert_eq!(code, 400, "sweep as {user}: {body}");
        assert!(body.contains("only the daemon's owner"), "{body}");
    }
    // Root's own sweep is refused like root's jobs.
    let (code, body) = api(
        &d,
        &d.token(),
        "POST",
        "/v1/sweeps",
        Some(&sweep_body("", &["id", "-u"])),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("allow_root_jobs"), "{body}");
    assert_eq!(d.json(&["sweep", "ls", "--json"]), serde_json::json!([]));
    assert_eq!(d.json(&["ls", "--json"]), serde_json::json!([]));
    // A labmate asking for another user gets a sweep of their own.
    let (code, body) = api(
        &d,
        &mate,
        "POST",
        "/v1/sweeps",
        Some(&sweep_body(OTHER, &["sleep", "30"])),
    );
    assert_eq!(code, 201, "{body}");
    let sweep: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sweep["user"], MATE);
    let id = sweep["id"].as_i64().unwrap();
    let job = sweep["trials"][0]["job"].as_u64().unwrap();
    assert_eq!(d.show(job)["user"], MATE);
    // Another user may look but not cancel; an admin may cancel.
    let (code, body) = api(&d, &other, "POST", &format!("/v1/sweeps/{id}/cancel"), None);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("belongs to"), "{body}");
    let (code, _) = api(&d, &other, "GET", &format!("/v1/sweeps/{id}"), None);
    assert_eq!(code, 200);
    let (code, body) = api(&d, &admin, "POST", &format!("/v1/sweeps/{id}/cancel"), None);
    assert_eq!(code, 200, "{body}");
    assert!(eventually(Duration::from_secs(30), || {
        d.show(job)["state"] == "cancelled"
    }));
}
