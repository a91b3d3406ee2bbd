//! A root daemon's GPUQ_HOME is checked component by component before root
//! makes anything there: a labmate's link on the way (to /etc, say) is refused
//! by `gpuq server` and by a root client's autostart alike, and nothing is
//! created where it leads. Needs root and a second local account: the
//! `system-tests` feature.
#![cfg(feature = "system-tests")]

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const MATE: &str = "gpuqtestmate";

/// A root-owned directory that root must not write in, as /etc would be.
fn victim() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Runs a gpuq command as root with GPUQ_HOME set; it must end within 20 s.
fn run_with_home(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(GPUQ);
    c.args(args)
        .env("GPUQ_HOME", home)
        .env_remove("GPUQ_URL")
        .env_remove("GPUQ_TOKEN")
        .env_remove("GPUQ_NO_AUTOSTART")
        .stdin(Stdio::null());
    output_within(&mut c, Duration::from_secs(20)).expect("gpuq ended within 20 s")
}

#[test]
fn a_labmates_link_in_gpuq_home_never_leads_root_elsewhere() {
    let mate = ensure_user(MATE);
    let etc = victim();
    // The labmate's directory, and in it a link to the victim.
    let theirs = tempfile::tempdir().unwrap();
    std::fs::set_permissions(theirs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(theirs.path(), Some(mate), Some(mate)).unwrap();
    let link = theirs.path().join("link");
    std::os::unix::fs::symlink(etc.path(), &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(mate), Some(mate)).unwrap();
    let home = link.join("gpuq");

    for args in [
        &["server", "--gpus", "none", "--listen", "127.0.0.1:0"][..],
        // A root client with no daemon starts one: the same check first.
        &["ls"][..],
    ] {
        let out = run_with_home(&home, args);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "gpuq {args:?}: {said}");
        assert!(
            said.contains("not safe for a daemon run as root")
                && said.contains(&format!("uid {mate}")),
            "gpuq {args:?}: {said}"
        );
        assert!(
            std::fs::read_dir(etc.path()).unwrap().next().is_none(),
            "gpuq {args:?} made something where the labmate's link leads"
        );
    }

    // Their own directory on the way, without a link, is refused as well.
    let inside = theirs.path().join("sub/gpuq");
    let out = run_with_home(
        &inside,
        &["server", "--gpus", "none", "--listen", "127.0.0.1:0"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        !theirs.path().join("sub").exists(),
        "root made a directory in the labmate's"
    );

    // A link root owns, in a directory only root changes, still works.
    let ours = victim();
    let root_link = ours.path().join("link");
    std::os::unix::fs::symlink(etc.path(), &root_link).unwrap();
    let d = Daemon::start_in(&root_link.join("gpuq"), "sim:1");
    let id = d.submit(&["--", "true"]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    assert!(etc.path().join("gpuq/daemon.json").is_file());
}
