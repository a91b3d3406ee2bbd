use super::*;
use proptest::prelude::*;

const TICK: f64 = 100.0;

fn region(name: &str, avail: &[bool], price: f64) -> SpotRegion {
    SpotRegion {
        name: name.into(),
        available: avail.to_vec(),
        price_per_h: vec![price; avail.len()],
        on_demand_per_h: 3.06,
    }
}

fn env(regions: Vec<SpotRegion>) -> SpotEnv {
    SpotEnv {
        tick_s: TICK,
        regions,
        transfer_usd: Vec::new(),
    }
}

/// Work `w` ticks, deadline `d` ticks, restart `r` ticks.
fn job(w: f64, d: f64, r: f64) -> Job {
    Job {
        work_h: w * TICK / 3600.0,
        deadline_h: d * TICK / 3600.0,
        restart_h: r * TICK / 3600.0,
    }
}

fn policies(regions: usize) -> Vec<Box<dyn SpotPolicy>> {
    let mut v: Vec<Box<dyn SpotPolicy>> = vec![
        Box::new(SlackAware::default()),
        Box::new(SlackAware {
            settle_ticks: 3,
            ..SlackAware::default()
        }),
        Box::new(SlackAware {
            forecast_k: 0.0,
            ..SlackAware::default()
        }),
        Box::new(Greedy),
        Box::new(OnDemandOnly),
        Box::new(AlwaysWait),
        Box::new(AlwaysSpot),
    ];
    for r in 0..regions {
        v.push(Box::new(UniformProgress { region: r }));
    }
    v
}

/// Adversaries for the guarantee: never start anything; always ask for spot.
struct AlwaysWait;
impl SpotPolicy for AlwaysWait {
    fn name(&self) -> String {
        "wait".into()
    }
    fn decide(&mut self, _: &SpotView<'_>) -> Instance {
        Instance::None
    }
}
struct AlwaysSpot;
impl SpotPolicy for AlwaysSpot {
    fn name(&self) -> String {
        "spot".into()
    }
    fn decide(&mut self, v: &SpotView<'_>) -> Instance {
        Instance::Spot(v.tick % v.regions())
    }
}

#[test]
fn always_available_costs_pure_spot() {
    let e = env(vec![region("a", &[true; 60], 0.9)]);
    let j = job(30.0, 45.0, 2.5);
    // One start: 30 ticks of work plus 2.5 of restart = 33 ticks billed.
    let spot = 33.0 * TICK / 3600.0 * 0.9;
    for mut p in [
        Box::new(SlackAware::default()) as Box<dyn SpotPolicy>,
        Box::new(UniformProgress { region: 0 }),
        Box::new(Greedy),
    ] {
        let o = simulate(&e, &j, p.as_mut()).unwrap();
        assert!(o.met_deadline, "{}", o.policy);
        assert!(
            (o.cost - spot).abs() < 1e-9,
            "{}: {} vs {spot}",
            o.policy,
            o.cost
        );
        assert_eq!(
            (o.launches, o.preemptions, o.forced),
            (1, 0, 0),
            "{}",
            o.policy
        );
        assert_eq!(o.finished_at_h, Some(33.0 * TICK / 3600.0));
    }
    let opt = offline_optimum(&e, &j).unwrap();
    assert!((opt.cost - spot).abs() < 1e-9);
}

#[test]
fn never_available_costs_on_demand() {
    let e = env(vec![
        region("a", &[false; 60], 0.9),
        region("b", &[false; 60], 0.5),
    ]);
    let j = job(30.0, 45.0, 2.5);
    let od = on_demand_cost(&e, &j).unwrap();
    // work x $3.06 + the restart, rounded up to whole ticks.
    assert!((od - 33.0 * TICK / 3600.0 * 3.06).abs() < 1e-9);
    for mut p in policies(2) {
        let o = simulate(&e, &j, p.as_mut()).unwrap();
        assert!(o.met_deadline, "{}", o.policy);
        assert!(
            (o.cost - od).abs() < 1e-9,
            "{}: {} vs {od}",
            o.policy,
            o.cost
        );
        assert_eq!(o.spot_h, 0.0);
    }
    assert!((offline_optimum(&e, &j).unwrap().cost - od).abs() < 1e-9);
}

#[test]
fn the_guarantee_finishes_a_policy_that_never_starts() {
    let e = env(vec![region("a", &[true; 60], 0.9)]);
    let j = job(30.0, 45.0, 2.5);
    let o = simulate(&e, &j, &mut AlwaysWait).unwrap();
    assert!(o.met_deadline);
    assert!(o.forced > 0);
    // It waited as long as it could: on-demand started with exactly the
    // ticks it needs left (33), and finished at the deadline.
    assert_eq!(o.finished_at_h, Some(45.0 * TICK / 3600.0));
    assert!((o.on_demand_h - 33.0 * TICK / 3600.0).abs() < 1e-9);
}

#[test]
fn a_spot_instance_past_its_overhead_may_run_into_the_critical_window() {
    // Spot up until tick 40, then gone: keeping spot at the critical
    // point is allowed because losing it still leaves an on-demand start.
    let mut avail = vec![true; 60];
    for a in avail.iter_mut().skip(40) {
        *a = false;
    }
    let e = env(vec![region("a", &avail, 0.9)]);
    let j = job(30.0, 45.0, 2.5);
    let o = simulate(&e, &j, &mut AlwaysSpot).unwrap();
    assert!(o.met_deadline);
    assert_eq!(o.forced, 0, "spot until done, never overridden");
}

#[test]
fn infeasible_and_invalid_inputs_are_errors() {
    let e = env(vec![region("a", &[true; 60], 0.9)]);
    assert!(matches!(
        simulate(&e, &job(44.0, 45.0, 2.5), &mut Greedy),
        Err(SpotError::Infeasible { .. })
    ));
    assert!(matches!(
        offline_optimum(&e, &job(0.0, 45.0, 2.5)),
        Err(SpotError::Job(_))
    ));
    let mut bad = e.clone();
    bad.regions[0].price_per_h.pop();
    assert!(matches!(bad.validate(), Err(SpotError::Env(_))));
    let mut bad = e.clone();
    bad.transfer_usd = vec![vec![0.0; 2]; 2];
    assert!(matches!(bad.validate(), Err(SpotError::Env(_))));
    let mut bad = e;
    bad.tick_s = 0.0;
    assert!(bad.validate().is_err());
}

#[test]
fn the_view_hides_the_future() {
    struct Peek(Vec<(Option<bool>, Option<bool>)>);
    impl SpotPolicy for Peek {
        fn name(&self) -> String {
            "peek".into()
        }
        fn decide(&mut self, v: &SpotView<'_>) -> Instance {
            self.0
                .push((v.observed(0, v.tick), v.observed(0, v.tick + 1)));
            Instance::OnDemand(0)
        }
    }
    let e = env(vec![region("a", &[true; 60], 0.9)]);
    let mut p = Peek(Vec::new());
    simulate(&e, &job(10.0, 20.0, 1.0), &mut p).unwrap();
    assert!(p
        .0
        .iter()
        .all(|&(now, next)| now == Some(true) && next.is_none()));
}

#[test]
fn uniform_progress_takes_on_demand_when_behind_and_spot_when_up() {
    // Spot for the first 10 ticks, then never: Uniform Progress runs spot,
    // falls behind the line while waiting, and finishes on on-demand.
    let avail: Vec<bool> = (0..60).map(|t| t < 10).collect();
    let e = env(vec![region("a", &avail, 0.9)]);
    let o = simulate(
        &e,
        &job(30.0, 45.0, 2.5),
        &mut UniformProgress { region: 0 },
    )
    .unwrap();
    assert!(o.met_deadline);
    assert_eq!(o.forced, 0);
    assert_eq!(o.preemptions, 1);
    assert!((o.spot_h - 10.0 * TICK / 3600.0).abs() < 1e-9);
    assert_eq!(o.launches, 2);
}

#[test]
fn slack_aware_moves_when_its_region_is_gone_for_good() {
    let a: Vec<bool> = (0..80).map(|t| t < 10).collect();
    let mut e = env(vec![region("a", &a, 0.9), region("b", &[true; 80], 0.95)]);
    e.transfer_usd = vec![vec![0.0, 1.0], vec![1.0, 0.0]];
    let o = simulate(&e, &job(30.0, 60.0, 2.5), &mut SlackAware::default()).unwrap();
    assert!(o.met_deadline);
    assert_eq!(o.on_demand_h, 0.0, "{o:?}");
    assert_eq!(o.migrations, 1);
    assert!((o.transfer_usd - 1.0).abs() < 1e-12);
    // ... and waits out a short outage of a cheaper home instead.
    let a: Vec<bool> = (0..80).map(|t| !(10..14).contains(&t)).collect();
    let e2 = SpotEnv {
        regions: vec![region("a", &a, 0.9), region("b", &[true; 80], 0.95)],
        ..e
    };
    let o = simulate(&e2, &job(30.0, 60.0, 2.5), &mut SlackAware::default()).unwrap();
    assert_eq!((o.migrations, o.launches), (0, 2), "{o:?}");
}

#[test]
fn replay_charges_transfers_and_restarts() {
    let mut e = env(vec![
        region("a", &[true; 20], 1.0),
        region("b", &[true; 20], 0.5),
    ]);
    e.transfer_usd = vec![vec![0.0, 0.7], vec![0.7, 0.0]];
    let j = job(5.0, 20.0, 1.5);
    use Instance::*;
    let plan = [
        Spot(0),
        Spot(0),
        Spot(0),
        Spot(1),
        Spot(1),
        Spot(1),
        Spot(1),
        Spot(1),
    ];
    let o = replay(&e, &j, &plan).unwrap();
    // 3 ticks in a: 1.5 of progress; move (0.7 $), 1.5 lost again, 3.5 to go:
    // 5 ticks in b.
    let h = TICK / 3600.0;
    assert!(
        (o.cost - (3.0 * h * 1.0 + 0.7 + 5.0 * h * 0.5)).abs() < 1e-9,
        "{o:?}"
    );
    assert_eq!((o.launches, o.switches, o.migrations), (2, 1, 1));
    assert_eq!(o.finished_at_h, Some(8.0 * h));
}

/// Every plan of a tiny instance, replayed: the cheapest that finishes.
fn brute_force(e: &SpotEnv, j: &Job, horizon: usize) -> f64 {
    let n = e.regions.len();
    let mut acts = vec![Instance::None];
    for r in 0..n {
        acts.push(Instance::Spot(r));
        acts.push(Instance::OnDemand(r));
    }
    let k = acts.len();
    let mut best = f64::INFINITY;
    let mut plan = vec![Instance::None; horizon];
    for code in 0..k.pow(horizon as u32) {
        let mut c = code;
        for p in plan.iter_mut() {
            *p = acts[c % k];
            c /= k;
        }
        let o = replay(e, j, &plan).unwrap();
        if o.met_deadline {
            best = best.min(o.cost);
        }
    }
    best
}

#[test]
fn the_optimum_is_exact_on_tiny_instances() {
    // Restart of 1.5 ticks: progress is not a whole number of ticks.
    let j = job(3.0, 7.0, 1.5);
    let cases = [
        vec![
            vec![true, false, true, true, true, false, true],
            vec![false, true, true, false, true, true, true],
        ],
        vec![
            vec![true, true, false, true, true, false, false],
            vec![false, false, true, true, false, true, true],
        ],
        vec![
            vec![false; 7],
            vec![true, false, true, false, true, false, true],
        ],
    ];
    for (i, avail) in cases.iter().enumerate() {
        let mut e = env(vec![
            region("a", &avail[0], 1.0),
            region("b", &avail[1], 0.6),
        ]);
        e.regions[1].price_per_h = vec![0.6, 0.6, 2.0, 0.6, 0.6, 0.9, 0.6];
        e.transfer_usd = vec![vec![0.0, 0.01], vec![0.02, 0.0]];
        let opt = offline_optimum(&e, &j).unwrap();
        let brute = brute_force(&e, &j, 7);
        assert!(
            (opt.cost - brute).abs() < 1e-9,
            "case {i}: dp {} brute {brute}",
            opt.cost
        );
        let rep = replay(&e, &j, &opt.plan).unwrap();
        assert!(rep.met_deadline && (rep.cost - opt.cost).abs() < 1e-9);
    }
}

fn arb_env() -> impl Strategy<Value = SpotEnv> {
    (1usize..=3, 40usize..=70, any::<u64>()).prop_map(|(n, len, seed)| {
        // A small Markov chain per region: runs up and down of random length.
        let mut x = seed | 1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let regions = (0..n)
            .map(|i| {
                let p_flip = 0.05 + (rnd() % 50) as f64 / 100.0;
                let mut up = rnd() % 2 == 0;
                let avail = (0..len)
                    .map(|_| {
                        if (rnd() % 1000) as f64 / 1000.0 < p_flip {
                            up = !up;
                        }
                        up
                    })
                    .collect();
                let base = 0.5 + (rnd() % 100) as f64 / 100.0;
                let price = (0..len)
                    .map(|_| base + (rnd() % 10) as f64 / 100.0)
                    .collect();
                SpotRegion {
                    name: format!("r{i}"),
                    available: avail,
                    price_per_h: price,
                    // Per-zone on-demand prices.
                    on_demand_per_h: 2.5 + (rnd() % 100) as f64 / 100.0,
                }
            })
            .collect();
        let transfer_usd = (0..n)
            .map(|a| (0..n).map(|b| if a == b { 0.0 } else { 0.3 }).collect())
            .collect();
        SpotEnv {
            tick_s: TICK,
            regions,
            transfer_usd,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the availability, no policy misses the deadline, and none
    /// is cheaper than the optimum, whose plan replays at its cost.
    #[test]
    fn no_policy_misses_the_deadline(e in arb_env(), work in 10.0f64..25.0, extra in 1.0f64..2.0, restart in 0.0f64..4.0) {
        let deadline = ((work + restart) * extra).ceil() + 1.0;
        prop_assume!(deadline as usize <= e.ticks());
        let j = job(work, deadline, restart);
        let opt = offline_optimum(&e, &j).unwrap();
        let rep = replay(&e, &j, &opt.plan).unwrap();
        prop_assert!(rep.met_deadline);
        prop_assert!((rep.cost - opt.cost).abs() < 1e-9);
        for mut p in policies(e.regions.len()) {
            let o = simulate(&e, &j, p.as_mut()).unwrap();
            prop_assert!(o.met_deadline, "{} missed: {:?}", o.policy, o);
            prop_assert!(o.finished_at_h.unwrap() <= j.deadline_h + 1e-9);
            prop_assert!(o.cost >= opt.cost - 1e-9, "{} {} below the optimum {}", o.policy, o.cost, opt.cost);
        }
    }
}
