use super::*;
use gpuq_core::sweep::{Goal, SearcherKind};

/// A curve of one-second steps with these values, steps 1, 2, 3…
fn curve(line: usize, values: &[f64]) -> Curve {
    curve_s(line, values, 1.0)
}

fn curve_s(line: usize, values: &[f64], seconds: f64) -> Curve {
    Curve {
        line,
        config: Default::default(),
        points: values
            .iter()
            .enumerate()
            .map(|(i, &value)| Point {
                step: i as u64 + 1,
                value,
                seconds,
            })
            .collect(),
        grid: false,
    }
}

fn opts(target: f64) -> SweepSimOptions {
    SweepSimOptions {
        target,
        ..Default::default()
    }
}

fn run(kind: SearcherKind, curves: &[Curve], o: &SweepSimOptions, max_step: u64) -> Run {
    let order: Vec<&Curve> = curves.iter().collect();
    replay(kind, &order, o, max_step, 0).unwrap()
}

fn hit(r: &Run) -> (f64, f64, u32, u64) {
    let h = r.target.expect("reaches the target");
    (h.compute_s, h.wall_s, h.trial, h.step)
}

/// Two curves, A slow and poor, B two seconds a step and good.
fn a_and_b() -> Vec<Curve> {
    vec![
        curve(1, &[0.1, 0.2, 0.3]),
        curve_s(2, &[0.5, 0.8, 0.9], 2.0),
    ]
}

#[test]
fn random_search_on_one_worker_spends_each_curve_in_turn() {
    // A: steps at 1, 2, 3; B: at 5, 7, 9. B's step 2 (0.8) reaches 0.8 at 7.
    let r = run(SearcherKind::Random, &a_and_b(), &opts(0.8), 3);
    assert_eq!(hit(&r), (7.0, 7.0, 1, 2));
    assert_eq!(
        (r.compute_s, r.wall_s, r.trials, r.attempts, r.steps),
        (9.0, 9.0, 2, 2, 6)
    );
    assert_eq!(r.best, Some(0.9));
    assert_eq!(
        r.series,
        vec![
            [1.0, 1.0, 0.1],
            [2.0, 2.0, 0.2],
            [3.0, 3.0, 0.3],
            [5.0, 5.0, 0.5],
            [7.0, 7.0, 0.8],
            [9.0, 9.0, 0.9]
        ]
    );
    assert_eq!(r.best_at(6.0), Some(0.5));
    assert_eq!(r.best_at(0.5), None);

    // Counting only results at the rung (step 3): B's 0.9 at 9.
    let rung_only = SweepSimOptions {
        rung_only: true,
        ..opts(0.8)
    };
    let r = run(SearcherKind::Random, &a_and_b(), &rung_only, 3);
    assert_eq!(hit(&r), (9.0, 9.0, 1, 3));
    assert_eq!(r.series, vec![[3.0, 3.0, 0.3], [9.0, 9.0, 0.9]]);
}

#[test]
fn two_workers_share_the_clock_and_add_up_the_compute() {
    // Both start at 0. A reports at 1, 2, 3; B at 2, 4, 6. B's 0.8 at t=4:
    // two slots busy to 3, one from 3 to 4: 2·3 + 1 = 7 slot-seconds.
    let o = SweepSimOptions {
        workers: 2,
        ..opts(0.8)
    };
    let r = run(SearcherKind::Random, &a_and_b(), &o, 3);
    assert_eq!(hit(&r), (7.0, 4.0, 1, 2));
    assert_eq!((r.compute_s, r.wall_s), (9.0, 6.0));
}

#[test]
fn the_restart_overhead_is_paid_by_every_attempt() {
    // A: 0.5 + 3 = 3.5; B from 3.5: 0.5, then steps at 6 and 8.
    let o = SweepSimOptions {
        restart_overhead_s: 0.5,
        ..opts(0.8)
    };
    let r = run(SearcherKind::Random, &a_and_b(), &o, 3);
    assert_eq!(hit(&r), (8.0, 8.0, 1, 2));
    assert_eq!(r.compute_s, 10.0);
}

/// Three curves of one-second steps; ASHA with rungs 1 and 3 (eta 3).
fn three() -> Vec<Curve> {
    vec![
        curve(1, &[0.1, 0.2, 0.3]),
        curve(2, &[0.5, 0.6, 0.9]),
        curve(3, &[0.2, 0.3, 0.4]),
    ]
}

#[test]
fn asha_promotes_the_best_of_the_bottom_rung_and_resumes_it() {
    // Trials 0, 1, 2 train one step each (t = 1, 2, 3); with three results
    // at rung 1 the top third is trial 1 (0.5), promoted to step 3: it
    // resumes at step 2 (t = 4, 0.6) and reaches 0.9 at t = 5. The others
    // are stopped at rung 1. Random search trains 0 and 1 fully first: 6.
    let o = opts(0.9);
    let asha = run(SearcherKind::Asha, &three(), &o, 3);
    assert_eq!(hit(&asha), (5.0, 5.0, 1, 3));
    assert_eq!(
        (asha.compute_s, asha.trials, asha.attempts, asha.steps),
        (5.0, 3, 4, 5)
    );
    assert_eq!(
        asha.series,
        vec![
            [1.0, 1.0, 0.1],
            [2.0, 2.0, 0.5],
            [4.0, 4.0, 0.6],
            [5.0, 5.0, 0.9]
        ]
    );
    let random = run(SearcherKind::Random, &three(), &o, 3);
    assert_eq!(hit(&random), (6.0, 6.0, 1, 3));
    assert_eq!(random.compute_s, 9.0);
    // At ASHA's total compute (5) random search had 0.6.
    assert_eq!(random.best_at(asha.compute_s), Some(0.6));
}

#[test]
fn a_compute_budget_stops_the_run_where_it_runs_out() {
    let o = SweepSimOptions {
        budget_s: Some(4.5),
        ..opts(0.9)
    };
    let asha = run(SearcherKind::Asha, &three(), &o, 3);
    assert!(asha.budget_hit);
    assert_eq!((asha.compute_s, asha.wall_s), (4.5, 4.5));
    assert_eq!((asha.target, asha.best), (None, Some(0.6)));
}

#[test]
fn minimize_counts_values_at_or_below_the_target_and_nan_never() {
    let curves = vec![
        curve(1, &[f64::NAN, f64::NAN, f64::NAN]),
        curve(2, &[0.9, 0.5, 0.25]),
    ];
    let o = SweepSimOptions {
        goal: Goal::Minimize,
        ..opts(0.5)
    };
    let r = run(SearcherKind::Random, &curves, &o, 3);
    assert_eq!(hit(&r), (5.0, 5.0, 1, 2));
    assert_eq!(r.best, Some(0.25));
    assert_eq!(r.series[0], [4.0, 4.0, 0.9], "NaN is never a best");
}

#[test]
fn a_rung_between_recorded_steps_reports_at_the_next_one() {
    // Steps 2, 4, 6 only: a trial bound for step 3 stops at step 4.
    let mut c = curve(1, &[0.1, 0.2, 0.3]);
    for (i, p) in c.points.iter_mut().enumerate() {
        p.step = 2 * (i as u64 + 1);
    }
    assert_eq!(c.value_at(3), Some(0.2));
    let o = SweepSimOptions {
        rung_only: true,
        min_step: 3,
        ..opts(0.0)
    };
    let r = run(SearcherKind::Asha, &[c], &o, 6);
    // One trial: rung 3 at step 4 (t = 2); 1/3 of one result promotes none.
    assert_eq!(hit(&r), (2.0, 2.0, 0, 4));
    assert_eq!((r.compute_s, r.attempts), (2.0, 1));
}

const FILE: &str = r#"{"metric": "acc", "goal": "maximize", "task": "hand-made"}
{"config": {"lr": 0.1}, "curve": [[1, 0.1, 1], [2, 0.2, 1], [3, 0.3, 1]]}
{"config": {"lr": 0.2}, "curve": [[1, 0.5, 1], [2, 0.6, 1], [3, 0.9, 1]]}

{"config": {"lr": 0.3}, "curve": [[1, 0.2, 1], [2, 0.3, 1], [3, 0.4, 1]]}
{"config": {"lr": 0.01}, "curve": [[1, 0.4, 2], [2, 0.7, 2], [3, 0.95, 2]], "grid": true}
{"config": {"lr": 0.001}, "curve": [[1, 0.1, 2], [2, null, 2], [3, null, 2]], "grid": true}
"#;

#[test]
fn the_file_format_parses_header_curves_and_grid_points() {
    let c = parse(FILE).unwrap();
    assert_eq!(
        (c.metric.as_deref(), c.goal),
        (Some("acc"), Some(Goal::Maximize))
    );
    assert_eq!((c.random().len(), c.grid().len()), (3, 2));
    assert_eq!(c.curves[2].line, 5, "blank lines count");
    assert_eq!(c.curves[0].config["lr"], 0.1);
    assert!(c.curves[4].points[1].value.is_nan());
    // No header at all is fine too.
    let bare = parse(r#"{"config": {}, "curve": [[1, 1, 0]]}"#).unwrap();
    assert_eq!((bare.goal, bare.curves.len()), (None, 1));
}

#[test]
fn bad_files_are_refused_naming_the_line_and_field() {
    for (text, want) in [
        (
            "{\"config\": {}, \"curve\": [[1, 1, 0]]}\nnot json",
            "line 2: column 2: not JSON: expected ident",
        ),
        (
            "{\"goal\": \"up\"}\n",
            "line 1: goal: \"up\": write maximize or minimize",
        ),
        ("{\"config\": {}}", "line 1: curve: missing"),
        ("{\"curve\": [[1, 1, 0]]}", "line 1: config: missing"),
        (
            "{\"config\": {}, \"curve\": []}",
            "line 1: curve: has no points",
        ),
        (
            "{\"config\": {}, \"curve\": [[2, 1, 0], [2, 1, 0]]}",
            "line 1: curve[1]: step 2 after step 2: steps must increase",
        ),
        (
            "{\"config\": {}, \"curve\": [[0, 1, 0]]}",
            "curve[0]: step must be an integer from 1",
        ),
        (
            "{\"config\": {}, \"curve\": [[1, \"x\", 0]]}",
            "curve[0]: value must be a number or null",
        ),
        (
            "{\"config\": {}, \"curve\": [[1, 1, -1]]}",
            "curve[0]: seconds must be",
        ),
        (
            "{\"config\": {}, \"curve\": [[1, 1]]}",
            "curve[0]: must be [step, value, seconds]",
        ),
        (
            "{\"config\": {}, \"curve\": [[1, 1, 0]], \"grdi\": true}",
            "line 1: grdi: unknown field",
        ),
        (
            "{\"config\": {}, \"curve\": [[1, 1, 0]]}\n{\"metric\": \"x\"}",
            "line 2: line: a curve needs",
        ),
        ("[1, 2]", "line 1: line: must be a JSON object"),
        ("{\"metric\": \"acc\"}\n\n", "file: no curves"),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn compare_runs_every_searcher_on_the_same_seeds_side_by_side() {
    let curves = parse(FILE).unwrap();
    let o = SweepSimOptions {
        seeds: 6,
        ..opts(0.9)
    };
    let c = compare(&curves, &o).unwrap();
    assert_eq!(
        (c.max_step, c.max_trials, c.rungs.clone()),
        (3, 3, vec![1, 3])
    );
    let names: Vec<_> = c.summaries.iter().map(|s| s.searcher).collect();
    assert_eq!(names, ["asha", "random", "grid"]);
    assert_eq!(c.runs.len(), 18);
    let random = &c.summaries[1];
    // Every seed replays all three random curves to step 3: 9 s, whatever
    // the order; the one curve reaching 0.9 is always found.
    assert_eq!((random.compute_s.mean, random.compute_s.sd), (9.0, 0.0));
    assert_eq!(random.reached, 6);
    assert_eq!(random.compute_to_target_vs_random, Some(1.0));
    let asha = &c.summaries[0];
    // Rung 1 sees all three (3 s), and only the best goes on (2 s); when the
    // best is the third to report, its own freed slot is its promotion and it
    // trains on in place: one attempt fewer.
    assert_eq!((asha.compute_s.mean, asha.reached), (5.0, 6));
    assert!(
        (3.0..4.0).contains(&asha.attempts.mean),
        "{}",
        asha.attempts.mean
    );
    let paused = compare(
        &curves,
        &SweepSimOptions {
            pause_only: true,
            ..o.clone()
        },
    )
    .unwrap();
    let asha = &paused.summaries[0];
    assert_eq!(
        (asha.compute_s.mean, asha.attempts.mean, asha.reached),
        (5.0, 4.0, 6)
    );
    let grid = &c.summaries[2];
    assert_eq!(
        (grid.trials.mean, grid.compute_s.mean, grid.reached),
        (2.0, 12.0, 6)
    );
    assert_eq!(
        (
            c.pool.random_reach_at_max_step,
            c.pool.grid_reach_by_max_step
        ),
        (1, 1)
    );
    // At its own total compute each searcher has its final best.
    let own = asha
        .best_at_equal_compute
        .iter()
        .find(|a| a.of == "asha")
        .unwrap();
    assert_eq!(own.best.unwrap().mean, 0.9);
    // Seeds shuffle the order, so the to-target compute varies for random.
    let rs: Vec<f64> = c
        .runs
        .iter()
        .filter(|r| r.searcher == "random")
        .map(|r| r.target.unwrap().compute_s)
        .collect();
    assert!(rs.iter().any(|&x| x != rs[0]), "{rs:?}");
    // A target only the grid reaches: no ratio for the runs that missed.
    let grid_only = compare(
        &curves,
        &SweepSimOptions {
            seeds: 2,
            ..opts(0.95)
        },
    )
    .unwrap();
    let ratios: Vec<_> = grid_only
        .summaries
        .iter()
        .map(|s| (s.searcher, s.reached, s.compute_to_target_vs_random))
        .collect();
    assert_eq!(
        ratios,
        [("asha", 0, None), ("random", 0, None), ("grid", 2, None)]
    );
    // Same options, same output.
    assert_eq!(compare(&curves, &o).unwrap(), c);
    let text = c.to_string();
    assert!(
        text.contains("| asha | 6/6 |") && text.contains("best at grid's compute"),
        "{text}"
    );
}

#[test]
fn options_that_do_not_fit_the_curves_are_refused_by_flag() {
    let curves = parse(FILE).unwrap();
    for (o, want) in [
        (
            SweepSimOptions {
                max_trials: Some(4),
                ..opts(0.9)
            },
            "--max-trials: 4, but the file has 3 random curves",
        ),
        (
            SweepSimOptions {
                max_step: Some(5),
                ..opts(0.9)
            },
            "--max-step: 5, but the curve on line 2 ends at step 3",
        ),
        (
            SweepSimOptions {
                min_step: 4,
                ..opts(0.9)
            },
            "--min-step: must not be above searcher.max_step (3)",
        ),
        (
            SweepSimOptions {
                eta: 1,
                ..opts(0.9)
            },
            "--eta: must be at least 2",
        ),
        (
            SweepSimOptions {
                workers: 0,
                ..opts(0.9)
            },
            "--workers: must be at least 1",
        ),
        (opts(f64::NAN), "--target: must be a finite number"),
    ] {
        let e = compare(&curves, &o).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn fewer_trials_take_a_prefix_of_each_seeds_shuffle() {
    let curves = parse(FILE).unwrap();
    let o = SweepSimOptions {
        max_trials: Some(1),
        seeds: 4,
        ..opts(0.9)
    };
    let c = compare(&curves, &o).unwrap();
    // One result at the bottom rung promotes none (the top third of one is
    // nobody): ASHA stops it there, random search trains it to the end.
    for r in c.runs.iter().filter(|r| r.searcher != "grid") {
        let want = if r.searcher == "asha" { 1.0 } else { 3.0 };
        assert_eq!((r.trials, r.compute_s), (1, want), "{r:?}");
    }
}
