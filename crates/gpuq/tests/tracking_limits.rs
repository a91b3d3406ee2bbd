//! Writes through the tracking API that could fill the database's disk or its
//! tables: a loop creating runs stops at `[output] max_runs_per_user`, and (as
//! root, on a small tmpfs) an artifact upload, a new run and params at the
//! disk reserve are refused or dropped while submits go on. Real daemon, real
//! HTTP (curl).

mod common;
use common::*;
use serde_json::{json, Value};
use std::process::Command;

/// One request to the daemon with its token: (HTTP status, body).
fn call(d: &Daemon, method: &str, path: &str, data: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-X", method, "-w", "\n%{http_code}", "-H"])
        .arg(format!("authorization: Bearer {}", d.token()))
        .args(["-H", "content-type: application/json"])
        .args(data)
        .arg(format!("{}{path}", d.url))
        .output()
        .expect("curl runs");
    // curl's status alone is not used: a refused upload may be cut off while it sends.
    let text = stdout(&out);
    let (body, code) = text
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("no answer: {}", stderr(&out)));
    (code.trim().parse().expect("a status"), body.to_string())
}

fn create_run(d: &Daemon) -> (u16, String) {
    call(
        d,
        "POST",
        "/api/2.0/mlflow/runs/create",
        &["--data-binary", r#"{"experiment_id": "0"}"#],
    )
}

fn run_id(answer: &str) -> String {
    let v: Value = serde_json::from_str(answer).unwrap_or_else(|_| panic!("{answer}"));
    v["run"]["info"]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string()
}

#[test]
fn a_loop_creating_runs_stops_at_the_users_cap_with_a_clear_error() {
    let d = Daemon::start_with_config("none", "[output]\nmax_runs_per_user = 5\n");
    let mut made = Vec::new();
    let refusal = loop {
        let (status, body) = create_run(&d);
        if status != 200 {
            break (status, body);
        }
        made.push(run_id(&body));
        assert!(made.len() <= 5, "a 6th run was created");
    };
    assert_eq!(made.len(), 5, "{refusal:?}");
    let (status, body) = refusal;
    assert_eq!(status, 400, "{body}");
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error_code"], "RESOURCE_LIMIT_EXCEEDED", "{body}");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("max_runs_per_user") && message.contains("5 runs"),
        "{message}"
    );
    // Deleting a run frees no room: its rows stay in the database.
    let (status, body) = call(
        &d,
        "POST",
        "/api/2.0/mlflow/runs/delete",
        &["--data-binary", &json!({ "run_id": made[0] }).to_string()],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(create_run(&d).0, 400);
    // The runs made are whole and still take writes.
    let (status, body) = call(
        &d,
        "POST",
        "/api/2.0/mlflow/runs/log-batch",
        &[
            "--data-binary",
            &json!({ "run_id": made[1], "params": [{"key": "lr", "value": "0.1"}] }).to_string(),
        ],
    );
    assert_eq!(status, 200, "{body}");
    // Jobs are not tracking-API runs: they still run.
    let id = d.submit(&["--", "true"]);
    assert_eq!(d.wait(id)["state"], "succeeded");
}

#[cfg(feature = "system-tests")]
mod at_the_reserve {
    use super::*;
    use std::time::Duration;

    fn upload(d: &Daemon, run: &str, name: &str, file: &std::path::Path) -> (u16, String) {
        call(
            d,
            "PUT",
            &format!("/api/2.0/mlflow-artifacts/artifacts/runs/{run}/{name}"),
            &[
                "-H",
                "content-type: application/octet-stream",
                "--data-binary",
                &format!("@{}", file.display()),
            ],
        )
    }

    fn listed(d: &Daemon, run: &str) -> Value {
        let (status, body) = call(
            d,
            "GET",
            &format!("/api/2.0/mlflow-artifacts/artifacts?path=runs/{run}"),
            &[],
        );
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["files"].clone()
    }

    #[test]
    fn uploads_runs_and_params_stop_at_the_disk_reserve_and_submits_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let disk = SmallDisk::mount(dir.path(), "48m");
        let mnt = disk.path().to_path_buf();
        let home = mnt.join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("gpuq.toml"),
            as_tests_config("[output]\ndisk_reserve = \"8M\"\n"),
        )
        .unwrap();
        let d = Daemon::start_in(&home, "none");
        let (status, body) = create_run(&d);
        assert_eq!(status, 200, "{body}");
        let run = run_id(&body);

        // An upload larger than what is left above the reserve stops part way
        // (it is looked at every 16 MiB) and leaves nothing behind.
        let big = dir.path().join("big.bin");
        std::fs::write(&big, vec![7u8; 44 << 20]).unwrap();
        let before = free_bytes(&mnt);
        let (status, body) = upload(&d, &run, "model.bin", &big);
        assert_eq!(status, 507, "{body}");
        assert!(body.contains("disk_reserve"), "{body}");
        assert_eq!(listed(&d, &run), json!([]));
        let freed = eventually(Duration::from_secs(10), || {
            free_bytes(&mnt) + (1 << 20) >= before
        });
        assert!(
            freed,
            "the partial upload was removed: {}",
            free_bytes(&mnt)
        );

        // A small one fits while the disk has room.
        let small = dir.path().join("small.bin");
        std::fs::write(&small, vec![1u8; 64 << 10]).unwrap();
        let (status, body) = upload(&d, &run, "ok.bin", &small);
        assert_eq!(status, 200, "{body}");

        // Down to the reserve: 4 MiB left of the 8 kept.
        let filler = mnt.join("filler");
        let fill = free_bytes(&mnt).saturating_sub(4 << 20);
        std::fs::write(&filler, vec![0u8; fill as usize]).unwrap();
        assert!(free_bytes(&mnt) < 8 << 20);
        // The service looks at the disk at most once a second.
        std::thread::sleep(Duration::from_millis(1100));

        let (status, body) = upload(&d, &run, "late.bin", &small);
        assert_eq!(status, 507, "{body}");
        let err: Value = serde_json::from_str(&body).unwrap();
        assert!(
            err["message"].as_str().unwrap().contains("disk_reserve"),
            "{body}"
        );
        assert_eq!(listed(&d, &run).as_array().unwrap().len(), 1, "only ok.bin");
        let (status, body) = create_run(&d);
        assert_eq!(status, 507, "{body}");
        assert!(body.contains("disk_reserve"), "{body}");
        // Params and tags are dropped (never refused: a job must not stall), not stored.
        let (status, body) = call(
            &d,
            "POST",
            "/api/2.0/mlflow/runs/log-batch",
            &[
                "--data-binary",
                &json!({ "run_id": run, "params": [{"key": "lr", "value": "0.1"}],
                         "tags": [{"key": "note", "value": "late"}] })
                .to_string(),
            ],
        );
        assert_eq!(status, 200, "{body}");
        let got: Value =
            serde_json::from_str(&d.get(&format!("/api/2.0/mlflow/runs/get?run_id={run}")))
                .unwrap();
        let data = &got["run"]["data"];
        assert!(
            data["params"].as_array().is_none_or(|p| p.is_empty()),
            "{got}"
        );
        assert!(
            !data["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["key"] == "note"),
            "{got}"
        );

        // The database still takes submits, and its jobs run.
        let id = d.submit(&["--", "true"]);
        assert_eq!(d.wait(id)["state"], "succeeded");
        let store = gpuq_store::Store::open(&home.join("gpuq.db")).unwrap();
        assert_eq!(store.integrity_check().unwrap(), "ok");
        drop(store);

        // Space back: uploads work again.
        std::fs::remove_file(&filler).unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        let (status, body) = upload(&d, &run, "late.bin", &small);
        assert_eq!(status, 200, "{body}");
    }
}
