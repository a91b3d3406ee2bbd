//! A full disk: submit gets a clear error, the daemon keeps serving, the
//! database stays intact, and submits work again once space is freed.
//! Needs root (it mounts a small tmpfs): the `system-tests` feature.
#![cfg(feature = "system-tests")]

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn a_full_disk_refuses_submits_cleanly_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(dir.path(), "3m");
    let mnt = disk.path().to_path_buf();

    let d = Daemon::start_in(&mnt.join("home"), "none");
    let before: Vec<u64> = (0..3).map(|_| d.submit(&["--", "true"])).collect();
    for id in &before {
        assert_eq!(d.wait(*id)["state"], "succeeded");
    }

    // Fill the filesystem.
    let filler = mnt.join("filler");
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", filler.display()))
        .args(["bs=64k"])
        .output();
    // A spec too big for what is left (a file: one argument is limited to 128 KiB).
    let spec = dir.path().join("big.yaml");
    std::fs::write(
        &spec,
        format!(
            "command: [\"true\"]\nenv:\n  BIG1: {x}\n  BIG2: {x}\n  BIG3: {x}\n",
            x = "x".repeat(120_000)
        ),
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let out = d.gpuq(&["submit", spec]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("disk holding the gpuq database is full"),
        "{}",
        stderr(&out)
    );

    // Still serving; nothing lost; nothing half-written.
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&d.ok(&["ls", "--json"])).unwrap();
    assert_eq!(jobs.len(), 3);
    let store = gpuq_store::Store::open(&mnt.join("home/gpuq.db")).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    drop(store);

    std::fs::remove_file(&filler).unwrap();
    let after = d.submit(&[spec]);
    assert_eq!(d.wait(after)["state"], "succeeded");
    assert_eq!(
        after,
        before.last().unwrap() + 1,
        "the refused submit left no trace"
    );
}

#[test]
fn a_job_that_fills_the_disk_has_its_end_recorded_once_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(dir.path(), "4m");
    let mnt = disk.path().to_path_buf();

    let d = Daemon::start_in(&mnt.join("home"), "sim:1");
    let filler = d.submit(&[
        "--gpus",
        "1",
        "--",
        "sh",
        "-c",
        "dd if=/dev/zero of=\"$GPUQ_OUTPUT_DIR/fill\" bs=64k 2>/dev/null; exit 7",
    ]);
    d.wait_running(filler);
    let full = eventually(Duration::from_secs(20), || free_bytes(&mnt) == 0);
    assert!(full, "the job filled the disk");
    // Its end cannot be written now: it is not lost, failed or forgotten meanwhile.
    std::thread::sleep(Duration::from_secs(2));
    let state = d.show(filler)["state"].clone();
    assert!(state == "running" || state == "failed", "{state}");

    std::fs::remove_file(d.job_dir(filler).join("outputs/fill")).unwrap();
    let ended = eventually(Duration::from_secs(30), || {
        d.show(filler)["state"] == "failed"
    });
    assert!(
        ended,
        "the end was recorded without a restart: {}",
        d.show(filler)
    );
    let job = d.show(filler);
    assert_eq!(
        job["exit_code"], 7,
        "the job's own status, not a guess: {job}"
    );
    // Its GPU is free again: the next job gets it.
    let next = d.submit(&["--gpus", "1", "--", "true"]);
    assert_eq!(d.wait(next)["state"], "succeeded");
    let store = gpuq_store::Store::open(&mnt.join("home/gpuq.db")).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn a_job_printing_without_end_stops_short_of_the_databases_disk() {
    const OTHER: &str = "gpuqtestb";
    let dir = tempfile::tempdir().unwrap();
    // Another account reaches the daemon's socket under it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let disk = SmallDisk::mount(dir.path(), "24m");
    let mnt = disk.path().to_path_buf();
    let home = mnt.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Logs may be large (1G each): only the reserve stands between the job and a full disk.
    std::fs::write(
        home.join("gpuq.toml"),
        as_tests_config("[output]\ndisk_reserve = \"8M\"\nlog_max_size = \"1G\"\n"),
    )
    .unwrap();
    let d = Daemon::start_in(&home, "none");
    let flood = d.submit(&["--", "yes", "a line of output that never ends"]);
    d.wait_running(flood);
    // The log grows until the disk is down to its reserve, then stops there.
    let at_reserve = eventually(Duration::from_secs(30), || free_bytes(&mnt) < 9 << 20);
    assert!(at_reserve, "the log grew: {} bytes free", free_bytes(&mnt));
    std::thread::sleep(Duration::from_secs(2));
    let free = free_bytes(&mnt);
    assert!(free > 6 << 20, "the reserve held: {free} bytes free");

    // Another user's submit still succeeds (the real CLI, as that user), and its job runs.
    ensure_user(OTHER);
    let out = as_user(&d, OTHER, &["submit", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let other: u64 = stdout(&out).trim().parse().unwrap();
    let (_, job) = d.wait_within(other, Duration::from_secs(30));
    assert_eq!(job["user"], OTHER);
    assert_eq!(job["state"], "succeeded", "{job}");
    // Metrics are dropped too while the disk is at its reserve, and said.
    let ours = d.submit(&[
        "--",
        "sh",
        "-c",
        "echo '{\"loss\": 1}' >> \"$GPUQ_METRICS_FILE\"",
    ]);
    assert_eq!(d.wait(ours)["state"], "succeeded");
    let mut said = String::new();
    let dropped = eventually(Duration::from_secs(20), || {
        said = d.ok(&["metrics", &ours.to_string()]);
        said.contains("1 point dropped: disk reserve")
    });
    assert!(dropped, "{said}");

    let log = std::fs::read_to_string(d.job_dir(flood).join("attempt-1.log")).unwrap();
    assert!(
        log.contains("[gpuq: output dropped: the disk holding this log is down to the space kept for the database]"),
        "…{}",
        &log[log.len().saturating_sub(300)..]
    );
    d.ok(&["cancel", &flood.to_string()]);
    let (_, job) = d.wait_within(flood, Duration::from_secs(60));
    assert_eq!(job["state"], "cancelled", "{job}");
    let store = gpuq_store::Store::open(&home.join("gpuq.db")).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
}
