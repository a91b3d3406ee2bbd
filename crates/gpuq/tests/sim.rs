//! `gpuq sim` end to end: a derived Philly sample through every policy, a
//! what-if config, the SVG, and clear errors for bad input.

mod common;

use common::{repo_root, GPUQ};
use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(GPUQ).arg("sim").args(args).output().unwrap()
}

#[test]
fn every_policy_replays_the_sample_and_what_if_changes_the_waits() {
    let sample = repo_root().join("crates/gpuq-sim/tests/fixtures/philly-sample.csv");
    let sample = sample.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("cdf.svg");
    let out = sim(&[
        sample,
        "--cluster",
        "2x4",
        "--policy",
        "all",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = reports
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fifo", "gpuq", "sjf-oracle", "tiresias"]);
    let avg = |i: usize| reports[i]["jct_avg_s"].as_f64().unwrap();
    assert!(
        avg(2) <= avg(0),
        "the SJF oracle bounds FIFO: {} vs {}",
        avg(2),
        avg(0)
    );
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    // What if the lab had four times the GPUs?
    let config = dir.path().join("whatif.toml");
    std::fs::write(&config, "cluster = \"8x4\"\npolicy = \"gpuq\"\n").unwrap();
    let more = sim(&[sample, "--config", config.to_str().unwrap(), "--json"]);
    let more: serde_json::Value = serde_json::from_slice(&more.stdout).unwrap();
    assert_eq!(more["cluster"], "8x4");
    assert!(more["wait_avg_s"].as_f64().unwrap() < reports[1]["wait_avg_s"].as_f64().unwrap());
    // Tiresias's knobs: a quantum longer than any run of the sample stops
    // every preemption; a negative knob is refused with the fix.
    let never = dir.path().join("never.toml");
    std::fs::write(
        &never,
        "policy = \"tiresias\"\ncluster = \"1x4\"\nlas_quantum = \"3650d\"\nlas_promote_knob = 0\n",
    )
    .unwrap();
    let out = sim(&[sample, "--config", never.to_str().unwrap(), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["preemptions"], 0, "{report}");
    let default = dir.path().join("default.toml");
    std::fs::write(&default, "policy = \"tiresias\"\ncluster = \"1x4\"\n").unwrap();
    let out = sim(&[sample, "--config", default.to_str().unwrap(), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["preemptions"].as_u64().unwrap() > 0, "{report}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "las_promote_knob = -1\n").unwrap();
    let out = sim(&[sample, "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("las_promote_knob = -1: write a number ≥ 0")
    );
    let text = String::from_utf8_lossy(&sim(&[sample, "--cluster", "2x4"]).stdout).to_string();
    assert!(
        text.contains("JCT") && text.contains("replayed in"),
        "{text}"
    );
}

#[test]
fn a_heterogeneous_cluster_inline_or_from_a_file_replays_every_job() {
    let sample = repo_root().join("crates/gpuq-sim/tests/fixtures/philly-sample.csv");
    let sample = sample.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.csv");
    std::fs::write(
        &file,
        "count,gpus,model,memory_mib,interconnect\n1,8,V100,16384,InfiniBand\n2,2,T4,15360,\n2,4,,,\n",
    )
    .unwrap();
    for cluster in ["1x8:V100,2x2:T4,2x4", file.to_str().unwrap()] {
        let out = sim(&[sample, "--cluster", cluster, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["cluster"], cluster);
        assert_eq!(
            report["excluded"], 0,
            "every job of the sample fits: 8 GPUs at most"
        );
        assert_eq!(report["jobs"], 305);
    }
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let sample = repo_root().join("crates/gpuq-sim/tests/fixtures/philly-sample.csv");
    for (args, want) in [
        (vec!["--cluster", "4by4"], "write COUNTxGPUS[:MODEL],…"),
        (vec!["--cluster", "9x"], "cluster \"9x\": GPU count"),
        (
            vec!["--cluster", "/nonexistent/lab.csv"],
            "cluster file /nonexistent/lab.csv",
        ),
        (
            vec!["--policy", "random"],
            "fifo, gpuq, sjf-oracle, tiresias, or all",
        ),
    ] {
        let mut all = vec![sample.to_str().unwrap()];
        all.extend(args);
        let out = sim(&all);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains(want));
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "submit,duration,gpus\n0,ten,1\n").unwrap();
    let out = sim(&[bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
}

#[test]
fn the_spot_evaluation_converts_runs_and_refuses_bad_data_with_status_2() {
    let src = repo_root().join("crates/gpuq-sim/tests/fixtures/spot");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("spot");
    let (src_s, out_s) = (src.to_str().unwrap(), out.to_str().unwrap());
    let no_price = sim(&["--spot-convert", src_s, out_s]);
    assert_eq!(no_price.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_price.stderr).contains("--on-demand-per-hour"));
    let conv = sim(&[
        "--spot-convert",
        src_s,
        out_s,
        "--on-demand-per-hour",
        "3.06",
    ]);
    assert_eq!(conv.status.code(), Some(0), "{conv:?}");
    assert!(String::from_utf8_lossy(&conv.stdout).contains("wrote 3 zones"));
    let run = sim(&[
        "--spot",
        out_s,
        "--work",
        "5h",
        "--deadline",
        "1.5x",
        "--windows",
        "2",
        "--checkpoint-gb",
        "50",
        "--transfer-per-gb",
        "0.02",
    ]);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("| window | start h | optimum |"), "{text}");
    // The published setting does not fit in the 300 rows.
    let long = sim(&["--spot", out_s, "--work", "39.94h", "--deadline", "59.91h"]);
    assert_eq!(long.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&long.stderr).contains("needs 1062 ticks"),
        "{long:?}"
    );
    let no_work = sim(&["--spot", out_s]);
    assert_eq!(no_work.status.code(), Some(2));
    std::fs::write(
        out.join("us-east-2b.csv"),
        "time,available,spot_per_hour\n0,1,1\n600,1,1\n600,1,1\n",
    )
    .unwrap();
    let bad = sim(&["--spot", out_s, "--work", "1h", "--deadline", "2h"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("us-east-2b.csv: line 4, field time"), "{err}");
    let missing = sim(&["--spot", "/nonexistent", "--work", "1h", "--deadline", "2h"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn the_sweep_replay_compares_the_searchers_over_the_recorded_curves() {
    let curves = repo_root().join("bench/sweep/digits_curves.jsonl");
    let curves = curves.to_str().unwrap();
    let out = sim(&[
        "--sweep",
        curves,
        "--target",
        "0.97",
        "--workers",
        "2",
        "--seeds",
        "3",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["goal"], "maximize", "the goal comes from the header");
    let names: Vec<&str> = report["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["searcher"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["asha", "random", "grid"]);
    assert!(report["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["runs"] == 3));
    let text = sim(&["--sweep", curves, "--target", "0.97", "--seeds", "2"]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.contains("| asha |") && text.contains("compute to target"),
        "{text}"
    );
}

#[test]
fn bad_sweep_input_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"config\": {}, \"curve\": [[1, 0.5, 1]]}\n{\"config\": {}, \"curve\": [[1, 0.5]]}\n",
    )
    .unwrap();
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, "{\"config\": {}, \"curve\": [[1, 0.5, 1]]}\n").unwrap();
    let (bad, good) = (bad.to_str().unwrap(), good.to_str().unwrap());
    for (args, want) in [
        (
            vec!["--sweep", "/nonexistent/curves.jsonl", "--target", "1"],
            "--sweep /nonexistent/curves.jsonl: No such file",
        ),
        (
            vec!["--sweep", bad, "--target", "1", "--goal", "maximize"],
            "line 2: curve[0]: must be [step, value, seconds]",
        ),
        (
            vec!["--sweep", good, "--target", "1", "--goal", "up"],
            "--goal \"up\": write maximize or minimize",
        ),
        (
            vec!["--sweep", good, "--target", "1"],
            "the header names no goal",
        ),
        (
            vec!["--sweep", good, "--goal", "maximize"],
            "--sweep needs --target",
        ),
        (
            vec![
                "--sweep",
                good,
                "--target",
                "1",
                "--goal",
                "minimize",
                "--max-step",
                "4",
            ],
            "--max-step: 4, but the curve on line 1 ends at step 1",
        ),
        (vec!["--target", "1"], "--sweep"),
    ] {
        let out = sim(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
