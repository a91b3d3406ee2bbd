use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};

fn spec(kind: SearcherKind, max_trials: u32, max_concurrent: u32, max_step: u64) -> SweepSpec {
    let mut parameters = BTreeMap::new();
    parameters.insert("lr".to_string(), Parameter::LogUniform(1e-4, 1e-1));
    parameters.insert(
        "layers".to_string(),
        Parameter::Choice(vec![json!(1), json!(2)]),
    );
    SweepSpec {
        parameters,
        metric: Metric {
            name: "val_loss".into(),
            goal: Goal::Minimize,
        },
        searcher: SearcherSpec {
            name: kind,
            max_trials,
            max_concurrent,
            max_step,
            min_step: 1,
            eta: 3,
        },
    }
}

fn asha(max_trials: u32, max_concurrent: u32, max_step: u64) -> SweepSpec {
    spec(SearcherKind::Asha, max_trials, max_concurrent, max_step)
}

/// A decision as a short line, so expected sequences read like a table.
fn line(d: &Decision) -> String {
    match d {
        Decision::Start {
            trial, max_step, ..
        } => format!("start {trial} @{max_step}"),
        Decision::Promote { trial, max_step } => format!("promote {trial} @{max_step}"),
        Decision::Stop { trial } => format!("stop {trial}"),
        Decision::Done => "done".into(),
    }
}

/// One slot at a time: every started or promoted trial reports `value(trial,
/// step)` at its target step before the next call.
fn drive_serial(s: &mut Searcher, value: impl Fn(TrialId, u64) -> f64) -> Vec<String> {
    let mut log = Vec::new();
    for _ in 0..1000 {
        let ds = s.next(1);
        log.extend(ds.iter().map(line));
        for d in &ds {
            match d {
                Decision::Start {
                    trial, max_step, ..
                }
                | Decision::Promote { trial, max_step } => {
                    s.on_trial_reported(*trial, *max_step, value(*trial, *max_step))
                        .unwrap();
                }
                Decision::Done => return log,
                Decision::Stop { .. } => {}
            }
        }
    }
    panic!("no Done after 1000 rounds: {log:?}");
}

#[test]
fn rungs_are_min_step_times_powers_of_eta_capped() {
    assert_eq!(asha(9, 1, 81).searcher.rungs(), vec![1, 3, 9, 27, 81]);
    assert_eq!(asha(9, 1, 100).searcher.rungs(), vec![1, 3, 9, 27, 81, 100]);
    assert_eq!(asha(9, 1, 1).searcher.rungs(), vec![1]);
    assert_eq!(
        spec(SearcherKind::Random, 9, 1, 81).searcher.rungs(),
        vec![81]
    );
}

/// eta 3, rungs 1, 3, 9, nine trials, one at a time, minimize. Worked by
/// hand (n results at a rung allow floor(n/3) promotions):
/// - rung 1 values by trial: 0 .5, 1 .3, 2 .8, 3 .2, 4 .9, 5 .1, 6 .7, 7 .6, 8 .4
/// - rung 3: 1 .25, 3 .15, 5 .3; rung 9: 3 .12
///
/// After 0,1,2 report (n=3, top 1 = trial 1) trial 1 is promoted; at rung 3
/// it is alone (n=1, none), so trial 3 starts; with 4 results the top 1 is
/// trial 3 (.2): promoted; then 4 starts (n=5, top 1 still 3), 5 starts, and
/// with 6 results the top 2 are 5 and 3: 5 is promoted. Rung 3 now has 3
/// results, top 1 = trial 3: promoted to 9, completes. Nothing else qualifies
/// (rung 1 top 2 then top 3 = 5, 3, 1, all promoted), so 6, 7, 8 start; then
/// the paused trials are stopped and the sweep is done.
#[test]
fn asha_hand_worked_serial_table() {
    let rung1 = [0.5, 0.3, 0.8, 0.2, 0.9, 0.1, 0.7, 0.6, 0.4];
    let value = |t: TrialId, step: u64| match (step, t) {
        (1, t) => rung1[t as usize],
        (3, 1) => 0.25,
        (3, 3) => 0.15,
        (3, 5) => 0.3,
        (9, 3) => 0.12,
        other => panic!("unexpected report {other:?}"),
    };
    let mut s = Searcher::new(&asha(9, 1, 9), 7).unwrap();
    let log = drive_serial(&mut s, value);
    let expected = [
        "start 0 @1",
        "start 1 @1",
        "start 2 @1",
        "promote 1 @3",
        "start 3 @1",
        "promote 3 @3",
        "start 4 @1",
        "start 5 @1",
        "promote 5 @3",
        "promote 3 @9",
        "start 6 @1",
        "start 7 @1",
        "start 8 @1",
        "stop 0",
        "stop 1",
        "stop 2",
        "stop 4",
        "stop 5",
        "stop 6",
        "stop 7",
        "stop 8",
        "done",
    ];
    assert_eq!(log, expected);
    assert_eq!(s.best(), Some((3, 9, 0.12)));
    let states: Vec<TrialState> = s.trials().iter().map(|t| t.state).collect();
    assert_eq!(states[3], TrialState::Completed);
    assert!(states.iter().all(|st| st.is_terminal()));
    assert_eq!(s.trials()[5].rung, 1);
    assert_eq!(s.next(4), vec![Decision::Done]);
}

#[test]
fn asha_promotes_as_results_arrive_with_parallel_slots() {
    let mut s = Searcher::new(&asha(9, 3, 9), 1).unwrap();
    let l: Vec<String> = s.next(5).iter().map(line).collect();
    assert_eq!(
        l,
        ["start 0 @1", "start 1 @1", "start 2 @1"],
        "max_concurrent 3"
    );
    s.on_trial_reported(0, 1, 0.5).unwrap();
    // One result: top floor(1/3) = none, so a new trial fills the slot.
    assert_eq!(
        s.next(1).iter().map(line).collect::<Vec<_>>(),
        ["start 3 @1"]
    );
    s.on_trial_reported(1, 1, 0.4).unwrap();
    assert_eq!(s.next(0), vec![], "no free slot, nothing to do");
    s.on_trial_reported(2, 1, 0.9).unwrap();
    // The third result allows the first promotion, without waiting for 3.
    let l: Vec<String> = s.next(2).iter().map(line).collect();
    assert_eq!(l, ["promote 1 @3", "start 4 @1"]);
    assert_eq!(s.trials()[1].state, TrialState::Running);
    assert_eq!(s.trials()[1].rung, 1);
    assert_eq!(s.trials()[0].state, TrialState::Paused);
}

#[test]
fn ties_break_by_trial_id_and_nan_ranks_last_for_either_goal() {
    for (goal, values, winner) in [
        (Goal::Minimize, [f64::NAN, 0.5, 0.5], 1),
        (Goal::Minimize, [f64::NAN, 1.0, 2.0], 1),
        (Goal::Maximize, [f64::NAN, 1.0, 2.0], 2),
        (Goal::Maximize, [1.0, f64::NAN, 0.5], 0),
        (Goal::Minimize, [3.0, 2.0, f64::NAN], 1),
    ] {
        let mut sp = asha(9, 3, 9);
        sp.metric.goal = goal;
        let mut s = Searcher::new(&sp, 1).unwrap();
        s.next(3);
        for (t, v) in values.iter().enumerate() {
            s.on_trial_reported(t as TrialId, 1, *v).unwrap();
        }
        assert_eq!(
            s.next(1),
            vec![Decision::Promote {
                trial: winner,
                max_step: 3
            }],
            "{goal:?} {values:?}"
        );
    }
}

#[test]
fn maximize_and_minimize_promote_opposite_ends() {
    let promoted = |goal| {
        let mut sp = asha(9, 3, 9);
        sp.metric.goal = goal;
        let mut s = Searcher::new(&sp, 1).unwrap();
        s.next(3);
        for (t, v) in [0.2, 0.9, 0.5].into_iter().enumerate() {
            s.on_trial_reported(t as TrialId, 1, v).unwrap();
        }
        s.next(1)
    };
    let p = |trial| vec![Decision::Promote { trial, max_step: 3 }];
    assert_eq!(promoted(Goal::Minimize), p(0));
    assert_eq!(promoted(Goal::Maximize), p(1));
}

#[test]
fn best_prefers_the_furthest_step_then_the_goal_and_skips_nan() {
    let mut sp = asha(9, 3, 9);
    sp.searcher.min_step = 2; // rungs 2, 6, 9
    let mut s = Searcher::new(&sp, 1).unwrap();
    assert_eq!(s.best(), None);
    s.next(3);
    s.on_trial_reported(0, 2, 0.1).unwrap();
    s.on_trial_reported(1, 2, f64::NAN).unwrap();
    assert_eq!(s.best(), Some((0, 2, 0.1)));
    // An intermediate report updates the last metric only.
    s.on_trial_reported(2, 1, 0.01).unwrap();
    assert_eq!(s.trials()[2].state, TrialState::Running);
    assert_eq!(
        s.best(),
        Some((0, 2, 0.1)),
        "a better value at an earlier step"
    );
    s.on_trial_reported(2, 2, 0.05).unwrap();
    assert_eq!(s.best(), Some((2, 2, 0.05)));
    assert_eq!(
        s.next(1),
        vec![Decision::Promote {
            trial: 2,
            max_step: 6
        }]
    );
    s.on_trial_reported(2, 4, 0.7).unwrap();
    assert_eq!(s.trials()[2].state, TrialState::Running);
    assert_eq!(s.best(), Some((2, 4, 0.7)), "the furthest step wins");
}

#[test]
fn failed_trials_are_not_counted_at_their_rung() {
    let mut s = Searcher::new(&asha(9, 1, 9), 1).unwrap();
    assert_eq!(
        s.next(1).iter().map(line).collect::<Vec<_>>(),
        ["start 0 @1"]
    );
    s.on_trial_ended(0, TrialEnd::Failed).unwrap();
    let log = drive_serial(&mut s, |t, step| match step {
        1 => [9.0, 0.4, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9][t as usize],
        _ => 0.1,
    });
    // Trial 0 failed: the first promotion waits for three real results
    // (trials 1, 2, 3), and trial 0 is never promoted nor stopped.
    assert_eq!(
        &log[..4],
        ["start 1 @1", "start 2 @1", "start 3 @1", "promote 2 @3"]
    );
    assert!(!log.iter().any(|l| l == "promote 0 @3" || l == "stop 0"));
    assert_eq!(s.trials()[0].state, TrialState::Failed);
    assert!(s.trials().iter().all(|t| t.state.is_terminal()));
    assert!(matches!(
        s.on_trial_reported(0, 1, 0.0),
        Err(SweepError::NotRunning { trial: 0, .. })
    ));
    assert_eq!(
        s.on_trial_reported(42, 1, 0.0),
        Err(SweepError::UnknownTrial(42))
    );
}

#[test]
fn not_done_while_a_trial_runs() {
    let mut s = Searcher::new(&asha(3, 3, 3), 1).unwrap();
    assert_eq!(s.next(3).len(), 3);
    s.on_trial_reported(0, 1, 0.3).unwrap();
    s.on_trial_reported(1, 1, 0.2).unwrap();
    // All started, nothing promotable yet, but trial 2 may still report.
    assert_eq!(s.next(3), vec![]);
    assert!(!s.is_done());
    s.on_trial_reported(2, 1, 0.1).unwrap();
    assert_eq!(
        s.next(3),
        vec![Decision::Promote {
            trial: 2,
            max_step: 3
        }]
    );
    s.on_trial_reported(2, 3, 0.05).unwrap();
    let l: Vec<String> = s.next(3).iter().map(line).collect();
    assert_eq!(l, ["stop 0", "stop 1", "done"]);
}

#[test]
fn random_respects_max_concurrent_and_trains_to_max_step() {
    let mut s = Searcher::new(&spec(SearcherKind::Random, 5, 2, 50), 3).unwrap();
    let l: Vec<String> = s.next(10).iter().map(line).collect();
    assert_eq!(l, ["start 0 @50", "start 1 @50"]);
    assert_eq!(s.next(10), vec![]);
    s.on_trial_reported(0, 50, 1.0).unwrap();
    assert_eq!(s.trials()[0].state, TrialState::Completed);
    s.on_trial_ended(0, TrialEnd::Succeeded).unwrap();
    s.on_trial_ended(1, TrialEnd::Cancelled).unwrap();
    assert_eq!(s.trials()[1].state, TrialState::Stopped);
    let l: Vec<String> = s.next(10).iter().map(line).collect();
    assert_eq!(l, ["start 2 @50", "start 3 @50"]);
    for t in [2, 3] {
        s.on_trial_reported(t, 50, 0.5).unwrap();
    }
    assert_eq!(
        s.next(10).iter().map(line).collect::<Vec<_>>(),
        ["start 4 @50"]
    );
    s.on_trial_ended(4, TrialEnd::Failed).unwrap();
    assert_eq!(s.next(10), vec![Decision::Done]);
    assert_eq!(s.best(), Some((2, 50, 0.5)));
}

fn grid_spec() -> SweepSpec {
    let mut sp = spec(SearcherKind::Grid, 6, 2, 10);
    sp.parameters.insert(
        "a".into(),
        Parameter::Grid(vec![json!(1), json!(2), json!(3)]),
    );
    sp.parameters
        .insert("b".into(), Parameter::Grid(vec![json!("x"), json!("y")]));
    sp
}

#[test]
fn grid_points_are_the_cartesian_product_in_stable_order() {
    let sp = grid_spec();
    let points = grid_points(&sp.parameters, 5);
    let ab: Vec<(Value, Value)> = points
        .iter()
        .map(|p| (p["a"].clone(), p["b"].clone()))
        .collect();
    let expected: Vec<(Value, Value)> = [1, 2, 3]
        .into_iter()
        .flat_map(|a| ["x", "y"].map(|b| (json!(a), json!(b))))
        .collect();
    assert_eq!(ab, expected);
    assert!(points.iter().all(|p| p.contains_key("lr") && p.len() == 4));
    assert_eq!(grid_size(&sp.parameters), Some(6));
    assert_eq!(points, grid_points(&sp.parameters, 5));
}

#[test]
fn grid_searcher_runs_exactly_the_grid() {
    let mut sp = grid_spec();
    sp.searcher.max_trials = 100;
    let mut s = Searcher::new(&sp, 5).unwrap();
    let mut seen = Vec::new();
    loop {
        let ds = s.next(2);
        if ds.contains(&Decision::Done) {
            break;
        }
        assert!(ds.len() <= 2);
        for d in ds {
            let Decision::Start {
                trial,
                params,
                max_step,
            } = d
            else {
                panic!("grid only starts trials: {d:?}");
            };
            assert_eq!(max_step, 10);
            seen.push((params["a"].clone(), params["b"].clone()));
            s.on_trial_reported(trial, 10, 0.0).unwrap();
        }
    }
    assert_eq!(seen.len(), 6);
    let expected: Vec<(Value, Value)> = grid_points(&sp.parameters, 5)
        .iter()
        .map(|p| (p["a"].clone(), p["b"].clone()))
        .collect();
    assert_eq!(seen, expected);
}

#[test]
fn random_sampling_is_deterministic_bounded_and_seed_dependent() {
    let mut params = BTreeMap::new();
    params.insert("lr".to_string(), Parameter::LogUniform(1e-4, 1e-1));
    params.insert("drop".to_string(), Parameter::Uniform(0.0, 0.5));
    params.insert("width".to_string(), Parameter::Int(32, 35));
    params.insert("b".to_string(), Parameter::Grid(vec![json!(16), json!(32)]));
    let a: Vec<_> = (0..2000).map(|i| sample(&params, i, 42)).collect();
    let again: Vec<_> = (0..2000).map(|i| sample(&params, i, 42)).collect();
    let other: Vec<_> = (0..2000).map(|i| sample(&params, i, 43)).collect();
    assert_eq!(a, again);
    assert_ne!(a, other);
    assert_ne!(a[0], a[1], "trials differ within a sweep");
    let mut widths = std::collections::BTreeSet::new();
    let mut below_geo_mean = 0;
    for p in &a {
        let lr = p["lr"].as_f64().unwrap();
        assert!((1e-4..=1e-1).contains(&lr));
        let d = p["drop"].as_f64().unwrap();
        assert!((0.0..0.5).contains(&d));
        let w = p["width"].as_i64().unwrap();
        assert!((32..=35).contains(&w));
        widths.insert(w);
        assert!(p["b"] == json!(16) || p["b"] == json!(32));
        // Log spacing: the median is the geometric mean, 10^-2.5.
        if lr < 10f64.powf(-2.5) {
            below_geo_mean += 1;
        }
    }
    assert_eq!(widths.len(), 4, "both ends of int are included");
    assert!((900..1100).contains(&below_geo_mean), "{below_geo_mean}");
}

#[test]
fn adding_a_parameter_keeps_the_others_draws() {
    let mut params = BTreeMap::new();
    params.insert("lr".to_string(), Parameter::LogUniform(1e-4, 1e-1));
    let before = sample(&params, 3, 9);
    params.insert("zz".to_string(), Parameter::Uniform(0.0, 1.0));
    assert_eq!(sample(&params, 3, 9)["lr"], before["lr"]);
}

fn err(sp: &SweepSpec) -> String {
    sp.validate().unwrap_err().to_string()
}

#[test]
fn validation_names_the_field_and_the_fix() {
    let mut sp = asha(9, 1, 81);
    sp.parameters
        .insert("lr".into(), Parameter::LogUniform(0.0, 1.0));
    assert!(err(&sp).starts_with("parameters.lr.loguniform: the low end must be above 0"));
    sp.parameters
        .insert("lr".into(), Parameter::Uniform(0.5, 0.5));
    assert!(err(&sp).starts_with("parameters.lr.uniform: the low end (0.5) must be below"));
    sp.parameters.insert("lr".into(), Parameter::Int(4, 2));
    assert!(err(&sp).starts_with("parameters.lr.int:"));
    sp.parameters.insert("lr".into(), Parameter::Choice(vec![]));
    assert_eq!(err(&sp), "parameters.lr.choice: needs at least one value");
    sp.parameters.insert("lr".into(), Parameter::Grid(vec![]));
    assert_eq!(err(&sp), "parameters.lr.grid: needs at least one value");

    let mut sp = asha(9, 1, 81);
    sp.searcher.eta = 1;
    assert_eq!(err(&sp), "searcher.eta: must be at least 2");
    let mut sp = asha(9, 1, 81);
    sp.searcher.min_step = 100;
    assert!(err(&sp).starts_with("searcher.min_step: must not be above searcher.max_step (81)"));
    for (field, f) in [
        (
            "searcher.max_trials",
            (|s: &mut SearcherSpec| s.max_trials = 0) as fn(&mut _),
        ),
        ("searcher.max_concurrent", |s| s.max_concurrent = 0),
        ("searcher.max_step", |s| s.max_step = 0),
    ] {
        let mut sp = asha(9, 1, 81);
        f(&mut sp.searcher);
        let e = err(&sp);
        assert!(e.starts_with(&format!("{field}: must be ")), "{e}");
    }

    let sp = spec(SearcherKind::Grid, 9, 1, 81);
    assert!(err(&sp).starts_with("parameters: a grid search needs at least one grid parameter"));
    let mut sp = grid_spec();
    sp.searcher.max_trials = 5;
    assert!(err(&sp).starts_with(
        "searcher.max_trials: the grid has 6 points but max_trials is 5; raise max_trials to 6"
    ));
    assert!(Searcher::new(&sp, 0).is_err());
    let mut sp = asha(9, 1, 81);
    sp.metric.name = " ".into();
    assert!(err(&sp).starts_with("metric.name:"));
}

#[test]
fn the_sweep_file_shape_parses_and_unknown_fields_are_refused() {
    let file = json!({
        "parameters": {
            "lr": {"loguniform": [1.0e-4, 1.0e-1]},
            "layers": {"choice": [1, 2, 3]},
            "width": {"int": [32, 512]},
            "dropout": {"uniform": [0.0, 0.5]},
            "batch": {"grid": [16, 32, 64]}
        },
        "metric": {"name": "val_loss", "goal": "minimize"},
        "searcher": {"name": "asha", "max_trials": 64, "max_concurrent": 8,
                     "max_step": 81, "min_step": 1, "eta": 3}
    });
    let sp: SweepSpec = serde_json::from_value(file.clone()).unwrap();
    assert_eq!(sp.parameters["width"], Parameter::Int(32, 512));
    assert_eq!(sp.searcher.name, SearcherKind::Asha);
    sp.validate().unwrap();
    assert_eq!(serde_json::to_value(&sp).unwrap(), file);

    let mut bad = file.clone();
    bad["searcher"]["etta"] = json!(3);
    assert!(serde_json::from_value::<SweepSpec>(bad).is_err());
    let mut bad = file;
    bad["metric"]["goal"] = json!("lowest");
    assert!(serde_json::from_value::<SweepSpec>(bad).is_err());
}

/// Counts the results at a rung strictly better than `v` (NaN worst), to
/// check "top floor(n/eta)" independently of the searcher's tie-breaking.
fn strictly_better(goal: Goal, results: &[(TrialId, f64)], v: f64) -> usize {
    results
        .iter()
        .filter(|(_, r)| match (r.is_nan(), v.is_nan()) {
            (true, _) => false,
            (false, true) => true,
            (false, false) => match goal {
                Goal::Minimize => *r < v,
                Goal::Maximize => *r > v,
            },
        })
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn asha_invariants_under_random_values_and_orders(
        max_trials in 1u32..25,
        max_concurrent in 1u32..5,
        max_step in 1u64..40,
        eta in 2u64..5,
        maximize in any::<bool>(),
        seed in any::<u64>(),
        choices in proptest::collection::vec((any::<u16>(), 0u8..20, 0u32..4), 400),
    ) {
        let mut sp = asha(max_trials, max_concurrent, max_step);
        sp.searcher.eta = eta;
        sp.metric.goal = if maximize { Goal::Maximize } else { Goal::Minimize };
        let goal = sp.metric.goal;
        let mut s = Searcher::new(&sp, seed).unwrap();
        let rungs = s.rungs().to_vec();
        // The test's own model: running trials with their target rung, and
        // each rung's results.
        let mut running: Vec<(TrialId, usize)> = Vec::new();
        let mut results: Vec<Vec<(TrialId, f64)>> = vec![Vec::new(); rungs.len()];
        let mut started = 0u32;
        let mut done = false;
        let mut rounds = 0;
        while !done {
            rounds += 1;
            prop_assert!(rounds < 10_000, "no progress");
            let (pick, kind, slots) = choices[rounds % choices.len()];
            let free = slots + 1;
            let ds = s.next(free);
            prop_assert!(ds.len() as u32 <= free + max_trials);
            for d in &ds {
                match d {
                    Decision::Start { trial, max_step, .. } => {
                        prop_assert_eq!(*trial, started);
                        prop_assert_eq!(*max_step, rungs[0]);
                        started += 1;
                        running.push((*trial, 0));
                    }
                    Decision::Promote { trial, max_step } => {
                        let k = rungs.iter().position(|r| r == max_step).unwrap() - 1;
                        let at = &results[k];
                        let v = at.iter().find(|(t, _)| t == trial).unwrap().1;
                        prop_assert!(
                            strictly_better(goal, at, v) < at.len() / eta as usize,
                            "trial {} promoted from rung {} outside its top 1/eta: {:?}", trial, k, at
                        );
                        running.push((*trial, k + 1));
                    }
                    Decision::Stop { .. } => {}
                    Decision::Done => done = true,
                }
            }
            prop_assert!(started <= max_trials);
            prop_assert!(running.len() as u32 <= max_concurrent);
            prop_assert_eq!(
                running.len(),
                s.trials().iter().filter(|t| t.state == TrialState::Running).count()
            );
            if done {
                prop_assert!(running.is_empty());
                break;
            }
            // Nothing running and no decision: the sweep must have said Done.
            prop_assert!(!(running.is_empty() && ds.is_empty()), "stuck: {:?}", s.trials());
            if running.is_empty() {
                continue;
            }
            // One running trial, chosen at random, reports or fails.
            let (trial, k) = running.remove(pick as usize % running.len());
            if kind == 0 {
                s.on_trial_ended(trial, TrialEnd::Failed).unwrap();
            } else {
                let v = match kind {
                    1 => f64::NAN,
                    2 => 0.5, // ties
                    _ => f64::from(pick) / 7.0,
                };
                s.on_trial_reported(trial, rungs[k], v).unwrap();
                results[k].push((trial, v));
            }
        }
        prop_assert_eq!(started, max_trials);
        prop_assert!(s.trials().iter().all(|t| t.state.is_terminal()), "{:?}", s.trials());
        prop_assert_eq!(s.next(1), vec![Decision::Done]);
    }
}

#[test]
fn a_stored_searcher_goes_on_exactly_where_it_stopped() {
    let sp = asha(9, 3, 9);
    let mut live = Searcher::new(&sp, 11).unwrap();
    let first = live.next(3);
    for (t, v) in [(0, 0.5), (1, 0.2)] {
        live.on_trial_reported(t, 1, v).unwrap();
    }
    let json = serde_json::to_string(&live).unwrap();
    let mut restored: Searcher = serde_json::from_str(&json).unwrap();
    assert_eq!(restored.trials(), live.trials());
    // The same decisions from here on, sampled params included.
    let a: Vec<String> = live.next(2).iter().map(line).collect();
    let b: Vec<String> = restored.next(2).iter().map(line).collect();
    assert_eq!(a, b);
    assert_eq!(first.len(), 3);
    assert_eq!(live.trials()[3].params, restored.trials()[3].params);
}

#[test]
fn rank_at_says_where_a_trial_stood_in_its_rung() {
    let mut s = Searcher::new(&asha(9, 3, 9), 1).unwrap();
    s.next(3);
    for (t, v) in [(0, 0.5), (1, 0.2), (2, 0.9)] {
        s.on_trial_reported(t, 1, v).unwrap();
    }
    assert_eq!(s.rank_at(1, 0), Some((1, 3)));
    assert_eq!(s.rank_at(0, 0), Some((2, 3)));
    assert_eq!(s.rank_at(2, 0), Some((3, 3)));
    assert_eq!(s.rank_at(2, 1), None);
    assert_eq!(s.rung_step(2), Some(1));
}

#[test]
fn finish_stops_the_paused_trials_and_ends_the_search() {
    let mut s = Searcher::new(&asha(9, 3, 9), 1).unwrap();
    s.next(3);
    s.on_trial_reported(0, 1, 0.5).unwrap();
    s.on_trial_reported(1, 1, 0.4).unwrap();
    let stops: Vec<String> = s.finish().iter().map(line).collect();
    assert_eq!(stops, ["stop 0", "stop 1"]);
    assert!(s.is_done());
    assert_eq!(s.trials()[2].state, TrialState::Running);
    assert_eq!(s.next(3), vec![Decision::Done]);
}

#[test]
fn budget_admits_whole_attempts_only() {
    assert_eq!(attempts_within(10.0, 1.0), 10);
    assert_eq!(attempts_within(0.3 * 3.0, 0.3), 3);
    assert_eq!(attempts_within(2.99, 1.0), 2);
    assert_eq!(attempts_within(0.0, 1.0), 0);
    assert_eq!(attempts_within(-1.0, 1.0), 0);
    assert_eq!(attempts_within(f64::NAN, 1.0), 0);
    assert_eq!(attempts_within(5.0, 0.0), 0);
    assert!(SweepBudget::GpuHours(0.0).validate().is_err());
    assert!(SweepBudget::Dollars(f64::INFINITY).validate().is_err());
    let b: SweepBudget = serde_json::from_value(json!({"gpu_hours": 10})).unwrap();
    assert_eq!(b, SweepBudget::GpuHours(10.0));
    assert!(serde_json::from_value::<SweepBudget>(json!({"hours": 10})).is_err());
}

#[test]
fn trial_counts_are_bounded() {
    let mut sp = asha(MAX_TRIALS + 1, 2, 9);
    assert!(err(&sp).contains("searcher.max_trials"), "{}", err(&sp));
    sp.searcher.max_trials = MAX_TRIALS;
    sp.searcher.max_concurrent = MAX_CONCURRENT + 1;
    assert!(err(&sp).contains("searcher.max_concurrent"), "{}", err(&sp));
    sp.searcher.max_concurrent = MAX_CONCURRENT;
    assert!(sp.validate().is_ok());
}

#[test]
fn a_trial_takes_its_own_slot_back_only_when_it_would_be_promoted_at_once() {
    // One slot; minimize. Trials 0 and 1 report at rung 0 (no promotion with
    // fewer than 3 results), then trial 2 reports the best of three: the slot
    // it frees is its own promotion, so it trains on.
    let mut s = Searcher::new(&asha(9, 1, 9), 1).unwrap();
    s.next(1);
    assert_eq!(s.train_on_at_rung(0, 1, 0.5).unwrap(), None);
    assert_eq!(
        s.trial(0).unwrap().state,
        TrialState::Running,
        "nothing changed"
    );
    s.on_trial_reported(0, 1, 0.5).unwrap();
    s.next(1);
    assert_eq!(s.train_on_at_rung(1, 1, 0.7).unwrap(), None);
    s.on_trial_reported(1, 1, 0.7).unwrap();
    s.next(1);
    assert_eq!(s.train_on_at_rung(2, 1, 0.1).unwrap(), Some(3));
    assert_eq!(s.trial(2).unwrap().state, TrialState::Running);
    assert_eq!(s.rung_step(2), Some(3));
    // Its result counts at rung 0, and it was promoted from there once.
    assert_eq!(s.rank_at(2, 0), Some((1, 3)));
    // The top rung completes the trial: nothing to train on to.
    s.on_trial_reported(2, 3, 0.05).unwrap();
    let mut t = Searcher::new(&asha(9, 1, 3), 1).unwrap();
    t.next(1);
    assert_eq!(t.train_on_at_rung(0, 3, 0.1).unwrap(), None);
    // A trial that is not running cannot report.
    assert!(s.train_on_at_rung(0, 1, 0.1).is_err());
}

#[test]
fn train_on_at_rung_follows_asha_ranking_as_results_arrive() {
    // One slot, minimize, eta 3, rungs 1, 3, 9: the top floor(n/3) of the n
    // results at a rung so far go on.
    let mut s = Searcher::new(&asha(27, 1, 9), 1).unwrap();
    let report = |s: &mut Searcher, t: TrialId, step: u64, v: f64| {
        s.on_trial_reported(t, step, v).unwrap();
        s.next(1)
    };
    s.next(1);
    report(&mut s, 0, 1, 0.1);
    report(&mut s, 1, 1, 0.9);
    let d = report(&mut s, 2, 1, 0.8);
    assert_eq!(
        d,
        vec![Decision::Promote {
            trial: 0,
            max_step: 3
        }]
    );
    // Trial 0, alone at rung 1, is not promotable; a new trial starts.
    let d = report(&mut s, 0, 3, 0.05);
    assert!(matches!(d[0], Decision::Start { trial: 3, .. }), "{d:?}");
    report(&mut s, 3, 1, 0.95);
    report(&mut s, 4, 1, 0.96);
    let d = report(&mut s, 5, 1, 0.2);
    assert_eq!(
        d,
        vec![Decision::Promote {
            trial: 5,
            max_step: 3
        }],
        "2nd of 6 at rung 0"
    );
    // At rung 1: trial 0 (0.05) paused there; 5 reports 0.04, the best of 2,
    // but floor(2/3) = 0 go on: it does not train on.
    assert_eq!(s.train_on_at_rung(5, 3, 0.04).unwrap(), None);
}
