//! The policies on synthetic data of other providers: other ticks, more
//! zones, per-zone on-demand prices, and the failure of a policy tuned on one
//! data set (the cheapest zone down for a long stretch while a pricey zone is
//! always up), over several deadline ratios and many start windows.

use super::*;
use proptest::prelude::*;

/// A zone: spot price, on-demand price, mean up-run and down-run (hours),
/// and outages forced on top (hours from the start, [from, to)).
struct Zone {
    price: f64,
    od: f64,
    up_h: f64,
    down_h: f64,
    outages: Vec<(f64, f64)>,
}

fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn provider(seed: u64, tick_s: f64, hours: f64, zones: &[Zone]) -> SpotEnv {
    let mut r = rng(seed);
    let n = (hours * 3600.0 / tick_s) as usize;
    let tick_h = tick_s / 3600.0;
    let regions = zones
        .iter()
        .enumerate()
        .map(|(i, z)| {
            let mut up = true;
            let mut available = Vec::with_capacity(n);
            let mut price_per_h = Vec::with_capacity(n);
            for t in 0..n {
                if up && r() < tick_h / z.up_h {
                    up = false;
                } else if !up && r() < tick_h / z.down_h {
                    up = true;
                }
                let h = t as f64 * tick_h;
                let out = z.outages.iter().any(|&(a, b)| (a..b).contains(&h));
                available.push(up && !out);
                price_per_h.push(z.price * (1.0 + 0.05 * (2.0 * r() - 1.0)));
            }
            SpotRegion {
                name: format!("zone{i}"),
                available,
                price_per_h,
                on_demand_per_h: z.od,
            }
        })
        .collect();
    let k = zones.len();
    SpotEnv {
        tick_s,
        regions,
        transfer_usd: (0..k)
            .map(|a| (0..k).map(|b| if a == b { 0.0 } else { 1.0 }).collect())
            .collect(),
    }
}

/// The window of `env` from tick `start`, `len` ticks long.
fn window(env: &SpotEnv, start: usize, len: usize) -> SpotEnv {
    let mut e = env.clone();
    for r in &mut e.regions {
        r.available = r.available[start..start + len].to_vec();
        r.price_per_h = r.price_per_h[start..start + len].to_vec();
    }
    e
}

/// Runs ours, greedy, on-demand and Uniform Progress on each zone over
/// `windows` starts for each deadline ratio; checks deadlines, the optimum's
/// bound and the replay of every plan; returns the worst ratio of ours and
/// the windows over 1.5x the optimum (ratio, window, x).
fn judge(env: &SpotEnv, work_h: f64, windows: usize) -> (f64, Vec<(f64, usize, f64)>) {
    let mut worst: f64 = 0.0;
    let mut over = Vec::new();
    for ratio in [1.2, 1.5, 2.0] {
        let job = Job {
            work_h,
            deadline_h: work_h * ratio,
            restart_h: 0.2,
        };
        let len = (job.deadline_h * 3600.0 / env.tick_s).floor() as usize;
        let last = env.ticks() - len;
        for w in 0..windows {
            let e = window(env, w * last / (windows - 1), len);
            let opt = offline_optimum(&e, &job).unwrap();
            let mut ps: Vec<Box<dyn SpotPolicy>> = vec![
                Box::new(SlackAware::default()),
                Box::new(Greedy),
                Box::new(OnDemandOnly),
            ];
            for r in 0..e.regions.len() {
                ps.push(Box::new(UniformProgress { region: r }));
            }
            for (k, p) in ps.iter_mut().enumerate() {
                let o = simulate(&e, &job, p.as_mut()).unwrap();
                assert!(
                    o.met_deadline,
                    "{} missed, ratio {ratio}, window {w}",
                    o.policy
                );
                assert!(o.cost >= opt.cost - 1e-9, "{} below the optimum", o.policy);
                let rep = replay(&e, &job, &o.plan).unwrap();
                assert!(
                    (rep.cost - o.cost).abs() < 1e-9,
                    "{}: plan replays at {}",
                    o.policy,
                    rep.cost
                );
                if k == 0 {
                    let x = o.cost / opt.cost;
                    if x > 1.5 {
                        over.push((ratio, w, x));
                    }
                    worst = worst.max(x);
                }
            }
        }
    }
    (worst, over)
}

#[test]
fn a_cheap_zone_down_for_long_while_a_pricey_one_is_always_up() {
    // Ten-minute ticks; the cheapest zone goes away for 12-20 h at a time,
    // a second cheap zone flaps, the third is always up at 3x the price;
    // on-demand prices differ per zone.
    let zones = [
        Zone {
            price: 0.8,
            od: 3.2,
            up_h: 1e9,
            down_h: 1.0,
            outages: vec![(10.0, 30.0), (60.0, 72.0), (110.0, 128.0)],
        },
        Zone {
            price: 1.0,
            od: 3.6,
            up_h: 8.0,
            down_h: 1.0,
            outages: vec![],
        },
        Zone {
            price: 2.4,
            od: 3.0,
            up_h: 1e9,
            down_h: 1.0,
            outages: vec![],
        },
    ];
    let env = provider(7, 600.0, 160.0, &zones);
    let (worst, over) = judge(&env, 16.0, 6);
    // One window of the eighteen is over the bound, and it is known: at 1.5x
    // the work, window 4 starts in an outage of the cheap zone while the
    // flapping one has been seen mostly down, so the always-up zone at 3x
    // the price is started first (then left for the flapping one when it
    // holds): 1.60x the optimum, which waits 6 h for the flapping zone.
    assert!(worst < 1.65, "{worst} {over:?}");
    assert_eq!(over.len(), 1, "{over:?}");
    assert_eq!((over[0].0, over[0].1), (1.5, 4), "{over:?}");
}

#[test]
fn hour_ticks_and_more_zones() {
    let zones: Vec<Zone> = (0..5)
        .map(|i| Zone {
            price: 0.6 + 0.1 * i as f64,
            od: 2.0 + 0.1 * (i % 3) as f64,
            up_h: 10.0 + 15.0 * i as f64,
            down_h: 6.0 - i as f64,
            outages: vec![],
        })
        .collect();
    let env = provider(11, 3600.0, 700.0, &zones);
    let (worst, over) = judge(&env, 60.0, 5);
    assert!(over.is_empty() && worst <= 1.5, "{worst} {over:?}");
}

fn arb_provider() -> impl Strategy<Value = (SpotEnv, f64)> {
    (
        1usize..=3,
        prop_oneof![Just(60.0), Just(195.0), Just(600.0), Just(3600.0)],
        any::<u64>(),
        prop_oneof![Just(1.2), Just(1.5), Just(2.0)],
    )
        .prop_map(|(n, tick_s, seed, ratio)| {
            let mut r = rng(seed);
            let tick_h = tick_s / 3600.0;
            let zones: Vec<Zone> = (0..n)
                .map(|_| Zone {
                    price: 0.5 + r(),
                    od: 2.5 + r(),
                    // Runs of 2 to 20 ticks.
                    up_h: tick_h * (2.0 + 18.0 * r()),
                    down_h: tick_h * (2.0 + 18.0 * r()),
                    outages: vec![],
                })
                .collect();
            (provider(seed, tick_s, 70.0 * tick_h, &zones), ratio)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// On any tick, prices and deadline ratio: no policy misses the deadline
    /// or beats the optimum, and every plan (the optimum's and each
    /// policy's) replays through the cost model at the cost reported.
    #[test]
    fn no_policy_beats_the_optimum_and_every_plan_replays((e, ratio) in arb_provider(), work in 12.0f64..30.0, restart in 0.0f64..3.0) {
        let tick_h = e.tick_s / 3600.0;
        let j = Job { work_h: work * tick_h, deadline_h: ((work + restart) * ratio).ceil() * tick_h, restart_h: restart * tick_h };
        prop_assume!((j.deadline_h / tick_h) as usize <= e.ticks());
        prop_assume!(Units::new(&e, &j).is_ok());
        let opt = offline_optimum(&e, &j).unwrap();
        let rep = replay(&e, &j, &opt.plan).unwrap();
        prop_assert!(rep.met_deadline);
        prop_assert!((rep.cost - opt.cost).abs() < 1e-9);
        let mut ps: Vec<Box<dyn SpotPolicy>> = vec![Box::new(SlackAware::default()), Box::new(Greedy), Box::new(OnDemandOnly)];
        for r in 0..e.regions.len() {
            ps.push(Box::new(UniformProgress { region: r }));
        }
        for p in ps.iter_mut() {
            let o = simulate(&e, &j, p.as_mut()).unwrap();
            prop_assert!(o.met_deadline, "{} missed: {:?}", o.policy, o);
            prop_assert!(o.cost >= opt.cost - 1e-9, "{} {} below the optimum {}", o.policy, o.cost, opt.cost);
            let again = replay(&e, &j, &o.plan).unwrap();
            prop_assert!((again.cost - o.cost).abs() < 1e-9, "{}: reports {}, replays at {}", o.policy, o.cost, again.cost);
            prop_assert!(again.met_deadline);
        }
    }
}
