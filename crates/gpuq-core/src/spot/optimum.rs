//! The clairvoyant optimum of the model, by dynamic programming.

use super::model::*;
use super::policies::Greedy;
use super::slack::SlackAware;
use serde::{Deserialize, Serialize};

/// The clairvoyant optimum: the cheapest schedule that finishes by the
/// deadline, knowing the whole future.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Optimum {
    pub cost: f64,
    pub finished_at_h: f64,
    /// What runs at each tick until the job is done.
    pub plan: Vec<Instance>,
    /// The largest number of states kept at one tick (after pruning).
    pub max_states: usize,
}

/// One state of the programme: progress and cost so far, and the node that
/// records how it was reached.
#[derive(Debug, Clone, Copy)]
struct Label {
    progress: f64,
    cost: f64,
    node: u32,
}

const ROOT: u32 = u32::MAX;

/// The exact optimum of the model of [`simulate`] (without the guarantee,
/// which a clairvoyant schedule does not need), by dynamic programming over
/// ticks.
///
/// A state after tick `t` is the instance that ran (none, spot or on-demand,
/// and its region; for none, the region of the checkpoint), how many ticks it
/// has run (capped where its restart overhead is paid off, so its overhead left
/// is known) and the progress made. Progress is not rounded: it is kept
/// exactly, as the set of (progress, cost) pairs that no other pair beats on
/// both (more progress and less cost). That pruning is exact: two states that
/// differ only in progress have the same futures, and the one with more
/// progress can copy the other's and finish no later. So is the pruning by
/// bound: a state whose cost plus the cheapest price times its work left
/// exceeds the cost of a known schedule (on-demand only, or a simple policy
/// run through [`simulate`]: [`Greedy`] and [`SlackAware`]) cannot lead to
/// the optimum.
///
/// Transitions per state and tick: wait; keep the instance (if it was not
/// preempted: spot needs its region available at `t`); start spot in any
/// region available at `t` or on-demand in any region (paying the restart and,
/// across regions, the transfer). The returned plan replays through
/// [`replay`] at the same cost.
pub fn offline_optimum(env: &SpotEnv, job: &Job) -> Result<Optimum, SpotError> {
    let p = Units::new(env, job)?;
    let mut ub = on_demand_cost(env, job)?;
    for known in [
        simulate(env, job, &mut Greedy)?,
        simulate(env, job, &mut SlackAware::default())?,
    ] {
        if known.met_deadline {
            ub = ub.min(known.cost);
        }
    }
    // Room for float noise: the bound only prunes what is clearly worse.
    let ub = ub * (1.0 + 1e-9) + 1e-9;
    let nreg = env.regions.len();
    let tick_h = env.tick_h();
    // Ticks after which the restart overhead is paid off.
    let ovh_ticks = p.ticks_for(p.restart_s);
    let nj = ovh_ticks.max(1);
    let overhead_after = |j: usize| (p.restart_s - j as f64 * p.tick_s).max(0.0);
    let cheapest_h = env
        .regions
        .iter()
        .flat_map(|r| r.price_per_h.iter().copied())
        .fold(env.cheapest_on_demand(), f64::min);
    let lower = |progress: f64| (p.work_s - progress).max(0.0) / 3600.0 * cheapest_h;

    // Keys: 0 = nothing ran yet; 1 + c = waiting with the checkpoint in c;
    // then (kind, region, ticks run) for running instances.
    let nkeys = 1 + nreg + 2 * nreg * nj;
    let idle_key = |c: Option<usize>| c.map_or(0, |c| 1 + c);
    let run_key = |a: Instance, j: usize| -> usize {
        let (kind, r) = match a {
            Instance::OnDemand(r) => (0, r),
            Instance::Spot(r) => (1, r),
            Instance::None => unreachable!(),
        };
        1 + nreg + (kind * nreg + r) * nj + (j.clamp(1, nj) - 1)
    };
    let decode = |k: usize| -> (Instance, usize, Option<usize>) {
        if k == 0 {
            return (Instance::None, 0, None);
        }
        if k <= nreg {
            return (Instance::None, 0, Some(k - 1));
        }
        let x = k - 1 - nreg;
        let j = x % nj + 1;
        let kr = x / nj;
        let (kind, r) = (kr / nreg, kr % nreg);
        let a = if kind == 0 {
            Instance::OnDemand(r)
        } else {
            Instance::Spot(r)
        };
        (a, j, Some(r))
    };

    let mut cur: Vec<Vec<Label>> = vec![Vec::new(); nkeys];
    cur[0].push(Label {
        progress: 0.0,
        cost: 0.0,
        node: ROOT,
    });
    // nodes[t][i] = (key, parent node in nodes[t - 1]).
    let mut nodes: Vec<Vec<(u32, u32)>> = Vec::with_capacity(p.horizon);
    let mut best: Option<(f64, usize, usize, u32)> = None; // cost, tick, key, parent
    let mut max_states = 1;
    let mut next: Vec<Vec<Label>> = vec![Vec::new(); nkeys];
    for t in 0..p.horizon {
        let ticks_after = (p.horizon - t - 1) as f64 * p.tick_s;
        let bound = |b: &Option<(f64, usize, usize, u32)>| b.map_or(ub, |b| b.0.min(ub));
        for list in next.iter_mut() {
            list.clear();
        }
        for (k, list) in cur.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let (inst, j, ckpt) = decode(k);
            let alive = match inst {
                Instance::Spot(r) => env.available(r, t),
                a => a.is_running(),
            };
            let current = if alive { inst } else { Instance::None };
            for lab in list {
                // Each choice: (instance, ticks run after, progress made, dollars).
                let mut push =
                    |a: Instance,
                     j2: usize,
                     gain: f64,
                     usd: f64,
                     best: &mut Option<(f64, usize, usize, u32)>| {
                        let progress = lab.progress + gain;
                        let cost = lab.cost + usd;
                        let key = if a.is_running() {
                            run_key(a, j2)
                        } else {
                            idle_key(ckpt)
                        };
                        if progress >= p.work_s - DONE_EPS_S {
                            if !matches!(best, Some(b) if b.0 <= cost) {
                                *best = Some((cost, t, key, lab.node));
                            }
                            return;
                        }
                        if cost + lower(progress) > bound(best) {
                            return;
                        }
                        let reach = if a.is_running() {
                            ticks_after - overhead_after(j2)
                        } else {
                            ticks_after - p.restart_s
                        };
                        if progress + reach < p.work_s - DONE_EPS_S {
                            return;
                        }
                        next[key].push(Label {
                            progress,
                            cost,
                            node: lab.node,
                        });
                    };
                push(Instance::None, 0, 0.0, 0.0, &mut best);
                let fresh_gain = (p.tick_s - p.restart_s).max(0.0);
                let price_of = |a: Instance| match a {
                    Instance::Spot(r) => env.price(r, t) * tick_h,
                    Instance::OnDemand(r) => env.on_demand(r) * tick_h,
                    Instance::None => 0.0,
                };
                if alive {
                    let gain = (p.tick_s - overhead_after(j)).max(0.0);
                    push(current, (j + 1).min(nj), gain, price_of(current), &mut best);
                }
                for r in 0..nreg {
                    let move_usd = ckpt.map_or(0.0, |c| env.transfer(c, r));
                    for a in [Instance::Spot(r), Instance::OnDemand(r)] {
                        if a == current || (matches!(a, Instance::Spot(_)) && !env.available(r, t))
                        {
                            continue;
                        }
                        push(a, 1, fresh_gain, price_of(a) + move_usd, &mut best);
                    }
                }
            }
        }
        // Keep, per key, the pairs no other pair beats on progress and cost.
        let b = bound(&best);
        let mut layer: Vec<(u32, u32)> = Vec::new();
        let mut states = 0;
        for (k, list) in next.iter_mut().enumerate() {
            list.sort_by(|x, y| {
                y.progress
                    .total_cmp(&x.progress)
                    .then(x.cost.total_cmp(&y.cost))
            });
            let mut min_cost = f64::INFINITY;
            list.retain(|l| {
                let keep = l.cost < min_cost && l.cost + lower(l.progress) <= b;
                if keep {
                    min_cost = l.cost;
                }
                keep
            });
            for l in list.iter_mut() {
                layer.push((k as u32, l.node));
                l.node = (layer.len() - 1) as u32;
            }
            states += list.len();
        }
        max_states = max_states.max(states);
        nodes.push(layer);
        std::mem::swap(&mut cur, &mut next);
        if states == 0 {
            break;
        }
    }
    let (cost, t_end, key, mut node) = best.expect("on-demand only is always a schedule");
    let mut plan = vec![Instance::None; t_end + 1];
    plan[t_end] = decode(key).0;
    for t in (0..t_end).rev() {
        let (k, parent) = nodes[t][node as usize];
        plan[t] = decode(k as usize).0;
        node = parent;
    }
    Ok(Optimum {
        cost,
        finished_at_h: (t_end + 1) as f64 * tick_h,
        plan,
        max_states,
    })
}
