use super::*;
use crate::{NewJob, Store};
use gpuq_core::JobSpec;

fn open() -> (tempfile::TempDir, Store, Tracking) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuq.db");
    let store = Store::open(&path).unwrap();
    let tracking = Tracking::open(&path).unwrap();
    (dir, store, tracking)
}

fn submit(store: &mut Store, project: Option<&str>, params: &[(&str, serde_json::Value)]) -> JobId {
    let spec = JobSpec {
        name: Some("train".into()),
        command: Some(vec!["python".into(), "train.py".into()]),
        project: project.map(str::to_string),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..Default::default()
    };
    store
        .submit(
            &NewJob {
                spec,
                user: "ada".into(),
                cwd: "/tmp".into(),
                env: Default::default(),
                idempotency_key: None,
                repro: None,
            },
            1_000,
        )
        .unwrap()
        .id
}

fn metric(key: &str, step: i64, value: f64) -> MetricIn {
    MetricIn {
        key: key.into(),
        value,
        time: 10_000 + step,
        step: Some(step),
    }
}

#[test]
fn every_job_is_a_run_in_its_projects_experiment() {
    let (_d, mut store, tracking) = open();
    let a = submit(
        &mut store,
        Some("vision"),
        &[("lr", serde_json::json!(0.01))],
    );
    let b = submit(&mut store, None, &[]);
    let c = submit(&mut store, Some("vision"), &[]);
    let run = tracking.job_run(a).unwrap().unwrap();
    assert_eq!(run.id, a.to_string());
    assert_eq!(run.status, "SCHEDULED");
    assert_eq!(run.params["lr"], "0.01");
    assert_eq!(run.tags["mlflow.runName"], "train");
    assert_eq!(run.tags["mlflow.user"], "ada");
    let vision = tracking.experiment_by_name("vision").unwrap().unwrap();
    assert_eq!(run.experiment_id, vision.id);
    assert_eq!(tracking.job_run(b).unwrap().unwrap().experiment_id, 0);
    assert_eq!(
        tracking.job_run(c).unwrap().unwrap().experiment_id,
        vision.id
    );
    assert_eq!(
        vision.artifact_location,
        format!("mlflow-artifacts:/{}", vision.id)
    );
    let ids: Vec<String> = tracking
        .runs_in(&[vision.id])
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids.len(), 2);
}

#[test]
fn a_job_runs_status_follows_the_job_and_ignores_the_client() {
    let (_d, mut store, mut tracking) = open();
    let id = submit(&mut store, None, &[]);
    tracking
        .update_run(
            &id.to_string(),
            &RunUpdate {
                status: Some("FINISHED"),
                end_time: Some(5),
                name: Some("renamed"),
            },
        )
        .unwrap();
    let run = tracking.job_run(id).unwrap().unwrap();
    assert_eq!(run.status, "SCHEDULED");
    assert_eq!(run.end_time, None);
    assert_eq!(run.name.as_deref(), Some("renamed"));
    store
        .end_queued(&[(id, JobState::Cancelled, "cancelled".into())], 2_000)
        .unwrap();
    let run = tracking.job_run(id).unwrap().unwrap();
    assert_eq!(run.status, "KILLED");
    assert_eq!(run.end_time, Some(2_000));
}

#[test]
fn an_api_run_keeps_its_own_status() {
    let (_d, _store, mut tracking) = open();
    let exp = tracking.create_experiment("e", None, &[], 5).unwrap();
    tracking
        .create_run(&NewRun {
            id: "abc",
            experiment_id: exp,
            name: Some("r"),
            user: "bob",
            start_time: 7,
            tags: &[],
        })
        .unwrap();
    tracking
        .update_run(
            "abc",
            &RunUpdate {
                status: Some("FAILED"),
                end_time: Some(9),
                name: None,
            },
        )
        .unwrap();
    let run = tracking.run("abc").unwrap().unwrap();
    assert_eq!(
        (run.status.as_str(), run.start_time, run.end_time),
        ("FAILED", Some(7), Some(9))
    );
    assert_eq!(run.tags["mlflow.runName"], "r");
    let dup = tracking.create_experiment("e", None, &[], 6).unwrap_err();
    assert!(matches!(dup, TrackingError::AlreadyExists(_)), "{dup}");
    let bad = tracking
        .update_run(
            "abc",
            &RunUpdate {
                status: Some("DONE"),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(bad.to_string().contains("FINISHED"), "{bad}");
    let missing = tracking
        .update_run("nope", &RunUpdate::default())
        .unwrap_err();
    assert!(matches!(missing, TrackingError::NotFound(_)));
}

#[test]
fn metrics_keep_order_latest_value_nan_and_pages() {
    let (_d, mut store, mut tracking) = open();
    let id = submit(&mut store, None, &[]);
    let run = id.to_string();
    let mut batch = Batch::default();
    for step in 0..10 {
        batch
            .metrics
            .push(metric("loss", step, 1.0 / (step + 1) as f64));
    }
    batch.metrics.push(metric("odd", 0, f64::NAN));
    batch.metrics.push(metric("odd", 1, f64::NEG_INFINITY));
    tracking.log_batch(&run, &batch).unwrap();
    // A later point at a lower step (a resumed attempt) does not become the latest.
    tracking
        .log_batch(
            &run,
            &Batch {
                metrics: vec![metric("loss", 3, 7.0)],
                ..Default::default()
            },
        )
        .unwrap();
    let r = tracking.run(&run).unwrap().unwrap();
    assert_eq!(r.metrics["loss"].step, 9);
    assert_eq!(r.metrics["odd"].value, f64::NEG_INFINITY);
    let (page, next) = tracking.metric_history(&run, "loss", 0, 4).unwrap();
    assert_eq!(page.len(), 4);
    assert_eq!(next, Some(4));
    let (rest, next) = tracking.metric_history(&run, "loss", 4, 100).unwrap();
    assert_eq!(rest.len(), 7);
    assert_eq!(next, None);
    assert_eq!(rest.last().unwrap().value, 7.0);
    let (odd, _) = tracking.metric_history(&run, "odd", 0, 10).unwrap();
    assert!(odd[0].value.is_nan());
    assert_eq!(tracking.metric_keys(&run).unwrap(), vec!["loss", "odd"]);
    let (none, next) = tracking.metric_history(&run, "absent", 0, 10).unwrap();
    assert!(none.is_empty() && next.is_none());
}

#[test]
fn a_long_history_is_charted_from_rollups_with_its_spike() {
    let (_d, mut store, mut tracking) = open();
    let run = submit(&mut store, None, &[]).to_string();
    let n = 50_000i64;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let metrics = chunk
            .iter()
            .map(|&s| {
                metric(
                    "loss",
                    s,
                    if s == 31_337 {
                        50.0
                    } else {
                        1.0 + (s % 7) as f64 * 0.01
                    },
                )
            })
            .collect();
        tracking
            .log_batch(
                &run,
                &Batch {
                    metrics,
                    ..Default::default()
                },
            )
            .unwrap();
    }
    let (count, chart, downsampled) = tracking.metric_chart(&run, "loss", 300).unwrap();
    assert_eq!(count, n as u64);
    assert!(downsampled);
    assert!(chart.len() <= 300, "{}", chart.len());
    assert!(chart.iter().any(|p| p.step == 31_337 && p.value == 50.0));
    assert_eq!(chart.first().unwrap().step, 0);
    assert_eq!(chart.last().unwrap().step, n - 1);
    // A history too short for the rollups to fill a chart is drawn from its points.
    let (count, medium, downsampled) = tracking
        .metric_chart(&run, "loss", 50_000 / 256 * 4)
        .unwrap();
    assert_eq!(count, 50_000);
    assert!(downsampled);
    assert!(medium.len() > 50_000 / 256 * 3, "{} points", medium.len());
    assert!(medium.iter().any(|p| p.step == 31_337 && p.value == 50.0));
    let (count, small, downsampled) = tracking.metric_chart(&run, "absent", 300).unwrap();
    assert_eq!((count, small.len(), downsampled), (0, 0, false));
}

#[test]
fn params_are_immutable_and_limits_hold_before_anything_is_written() {
    let (_d, mut store, mut tracking) = open();
    let run = submit(&mut store, None, &[("lr", serde_json::json!("0.1"))]).to_string();
    let same = Batch {
        params: vec![("lr".into(), "0.1".into())],
        ..Default::default()
    };
    tracking.log_batch(&run, &same).unwrap();
    let changed = Batch {
        params: vec![("lr".into(), "0.2".into())],
        metrics: vec![metric("loss", 0, 1.0)],
        ..Default::default()
    };
    let e = tracking.log_batch(&run, &changed).unwrap_err();
    assert!(
        e.to_string()
            .contains("Changing param values is not allowed"),
        "{e}"
    );
    // The whole batch was refused: its metric is not there either.
    assert!(tracking.metric_keys(&run).unwrap().is_empty());
    let too_many = Batch {
        metrics: (0..1001).map(|s| metric("m", s, 0.0)).collect(),
        ..Default::default()
    };
    let e = tracking.log_batch(&run, &too_many).unwrap_err();
    assert!(e.to_string().contains("at most 1000 metrics"), "{e}");
    let escape = Batch {
        metrics: vec![metric("../x", 0, 0.0)],
        ..Default::default()
    };
    assert!(matches!(
        tracking.log_batch(&run, &escape),
        Err(TrackingError::Invalid(_))
    ));
    let missing = tracking.log_batch("nope", &same).unwrap_err();
    assert!(matches!(missing, TrackingError::NotFound(_)));
}

#[test]
fn the_metrics_file_cursor_moves_with_its_points() {
    let (_d, mut store, mut tracking) = open();
    let id = submit(&mut store, None, &[]);
    assert_eq!(tracking.metrics_file_offset(id).unwrap(), 0);
    assert!(tracking
        .log_from_file(id, &[metric("acc", 1, 0.5)], 0, 42)
        .unwrap());
    assert_eq!(tracking.metrics_file_offset(id).unwrap(), 42);
    assert_eq!(
        tracking.job_run(id).unwrap().unwrap().metrics["acc"].value,
        0.5
    );
    // A second reader of the same lines (it read the cursor before the first
    // committed) stores nothing.
    assert!(!tracking
        .log_from_file(id, &[metric("acc", 1, 0.5)], 0, 42)
        .unwrap());
    let (points, _) = tracking
        .metric_history(&id.to_string(), "acc", 0, 10)
        .unwrap();
    assert_eq!(points.len(), 1);
}

#[test]
fn existing_jobs_become_runs_when_the_schema_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuq.db");
    {
        let conn = Connection::open(&path).unwrap();
        // Apply every migration before tracking's, then add a job as an old daemon would.
        for (i, sql) in schema::MIGRATIONS.iter().enumerate().take(5) {
            conn.execute_batch(&format!(
                "BEGIN; {sql}; PRAGMA user_version = {}; COMMIT;",
                i + 1
            ))
            .unwrap();
        }
        conn.execute(
            "INSERT INTO jobs (name, user, project, state, priority, gpus_requested, gpus, command, cwd, attempt, submitted_at, spec, env) \
             VALUES ('old', 'ada', 'nlp', 'succeeded', 1, 0, '[]', 'true', '/', 1, 5, '{\"command\":[\"true\"]}', '{}')",
            [],
        )
        .unwrap();
    }
    let _store = Store::open(&path).unwrap();
    let tracking = Tracking::open(&path).unwrap();
    let run = tracking.job_run(1).unwrap().unwrap();
    assert_eq!(run.status, "FINISHED");
    let nlp = tracking.experiment_by_name("nlp").unwrap().unwrap();
    assert_eq!(run.experiment_id, nlp.id);
}
