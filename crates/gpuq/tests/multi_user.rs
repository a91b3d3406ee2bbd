//! Two real local users share one daemon run as root: each is identified by the
//! kernel on the unix socket, their jobs run under their own uid, neither may
//! touch the other's jobs, and a remote client authenticates with a per-user token.
//! Needs root (`useradd`, `runuser`): the `system-tests` feature.
#![cfg(feature = "system-tests")]

mod common;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

const ALICE: &str = "gpuqtesta";
const BOB: &str = "gpuqtestb";

#[test]
fn two_users_share_one_root_daemon_safely() {
    let (alice_uid, bob_uid) = (ensure_user(ALICE), ensure_user(BOB));
    let d = Daemon::start("sim:2");
    // Users must reach the socket in the daemon's home.
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        std::fs::metadata(d.path().join("gpuq.sock"))
            .unwrap()
            .mode()
            & 0o777,
        0o666
    );
    assert_eq!(
        std::fs::metadata(d.path().join("gpuq.db")).unwrap().mode() & 0o777,
        0o600,
        "the database is private"
    );

    let me = as_user(&d, ALICE, &["whoami"]);
    assert_eq!(stdout(&me).trim(), ALICE, "{}", stderr(&me));

    let out = as_user(
        &d,
        ALICE,
        &[
            "submit",
            "--gpus",
            "1",
            "--",
            "sh",
            "-c",
            "id -un; id -u; touch $GPUQ_OUTPUT_DIR/made; sleep 2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let job: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(d.show(job)["user"], ALICE);

    // bob sees the queue but may not touch alice's job.
    let listed = as_user(&d, BOB, &["ls"]);
    assert!(stdout(&listed).contains(ALICE), "{}", stderr(&listed));
    for action in [
        vec!["cancel", "X"],
        vec!["requeue", "X"],
        vec!["hold", "X"],
        vec!["logs", "X"],
    ] {
        let args: Vec<String> = action
            .iter()
            .map(|a| {
                if *a == "X" {
                    job.to_string()
                } else {
                    a.to_string()
                }
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let refused = as_user(&d, BOB, &args);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&refused)
        );
        assert!(
            stderr(&refused).contains(&format!("belongs to {ALICE}")),
            "{args:?}: {}",
            stderr(&refused)
        );
    }

    let done = d.wait(job);
    assert_eq!(done["state"], "succeeded", "{done}");
    let log = d.ok(&["logs", &job.to_string()]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [ALICE.to_string(), alice_uid.to_string()],
        "the job ran as alice"
    );
    let made = std::fs::metadata(d.job_dir(job).join("outputs/made")).unwrap();
    assert_eq!(
        made.uid(),
        alice_uid,
        "files the job writes belong to alice"
    );
    let alice_log = as_user(&d, ALICE, &["logs", &job.to_string()]);
    assert!(
        alice_log.status.success(),
        "the owner reads her log: {}",
        stderr(&alice_log)
    );

    // Environment values are the owner's.
    let secret = as_user(
        &d,
        ALICE,
        &["submit", "--env", "API_KEY=s3cret", "--", "true"],
    );
    let secret_job: u64 = stdout(&secret).trim().parse().unwrap();
    let seen_by_bob = stdout(&as_user(&d, BOB, &["ls", "--json"]));
    assert!(
        !seen_by_bob.contains("s3cret") && seen_by_bob.contains("(hidden)"),
        "{seen_by_bob}"
    );
    assert!(stdout(&as_user(
        &d,
        ALICE,
        &["show", "--json", &secret_job.to_string()]
    ))
    .contains("s3cret"));

    // A job cannot turn its directory into a path root would follow.
    let attack = as_user(
        &d,
        ALICE,
        &["submit", "--retries", "1", "--retry-delay", "100ms", "--", "sh", "-c",
          "rm -rf $GPUQ_CHECKPOINT_DIR && ln -s /etc $GPUQ_CHECKPOINT_DIR; ln -sf /etc/passwd $GPUQ_CHECKPOINT_DIR/../attempt-1.log; exit 1"],
    );
    let attack_job: u64 = stdout(&attack)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", stderr(&attack)));
    assert_eq!(d.wait(attack_job)["state"], "failed");
    assert_eq!(
        std::fs::metadata("/etc").unwrap().uid(),
        0,
        "/etc still belongs to root"
    );
    assert_eq!(std::fs::metadata("/etc/passwd").unwrap().uid(), 0);
    assert!(
        std::fs::symlink_metadata(d.job_dir(attack_job).join("checkpoints"))
            .unwrap()
            .is_dir(),
        "not replaced"
    );

    // A remote client with bob's token acts as bob, and his job runs as bob.
    let created: serde_json::Value =
        serde_json::from_str(&d.ok(&["token", "create", "--user", BOB, "--json"])).unwrap();
    let token = created["token"].as_str().unwrap().to_string();
    let remote = |args: &[&str]| {
        Command::new(GPUQ)
            .args(args)
            .env("GPUQ_URL", &d.url)
            .env("GPUQ_TOKEN", &token)
            .env("GPUQ_NO_AUTOSTART", "1")
            .env("GPUQ_HOME", "/nonexistent")
            .current_dir("/tmp")
            .output()
            .unwrap()
    };
    assert_eq!(stdout(&remote(&["whoami"])).trim(), BOB);
    let sub = remote(&["submit", "--", "id", "-u"]);
    let bob_job: u64 = stdout(&sub)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", stderr(&sub)));
    assert_eq!(d.wait(bob_job)["user"], BOB);
    assert_eq!(
        d.ok(&["logs", &bob_job.to_string()]).trim(),
        bob_uid.to_string()
    );
    let refused = remote(&["cancel", &job.to_string()]);
    assert!(
        stderr(&refused).contains(&format!("belongs to {ALICE}")),
        "{}",
        stderr(&refused)
    );
    let not_admin = remote(&["token", "list"]);
    assert_eq!(not_admin.status.code(), Some(2));

    d.ok(&["token", "revoke", &created["id"].to_string()]);
    let revoked = remote(&["ls"]);
    assert_eq!(revoked.status.code(), Some(2));
    assert!(stderr(&revoked).contains("revoked"), "{}", stderr(&revoked));
}
