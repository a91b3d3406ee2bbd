//! A full disk: submit gets a clear error, the daemon keeps serving, the
//! database stays intact, and submits work again once space is freed.
//! Needs root (it mounts a small tmpfs): the `system-tests` feature.
#![cfg(feature = "system-tests")]

mod common;
use common::*;
use std::process::Command;

struct Mount(std::path::PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_refuses_submits_cleanly_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=3m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(
        ok.success(),
        "mounting a tmpfs needs root: run as root or without the system-tests feature"
    );
    let _mount = Mount(mnt.clone());

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
