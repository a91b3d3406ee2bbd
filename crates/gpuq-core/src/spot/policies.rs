//! The online policies: on-demand only, Uniform Progress, greedy, slack-aware.

use super::model::*;

/// On-demand from the first tick to the end, in region 0.
#[derive(Debug, Clone, Default)]
pub struct OnDemandOnly;

impl SpotPolicy for OnDemandOnly {
    fn name(&self) -> String {
        "on_demand".into()
    }
    fn decide(&mut self, _: &SpotView<'_>) -> Instance {
        Instance::OnDemand(0)
    }
}

/// Uniform Progress, the policy of "Can't Be Late" (Wu et al., NSDI'24), for
/// one region, as its reference implementation (`rc_cr_threshold`) states it.
/// With `c0` the work, `r0` the deadline, `t` the time elapsed, `done` the
/// progress and `d` the restart overhead:
///
/// 1. By default take spot when it is available, else wait.
/// 2. Behind the uniform-progress line (`done < t * c0 / r0`): spot if
///    available, else on-demand.
/// 3. On on-demand, stay on it unless spot is available *and* the job is
///    ahead of the line by two restarts (`done > (t + 2d) * c0 / r0`): the
///    hysteresis that keeps it from bouncing between the two.
/// 4. Safety: when `ceil((remaining + 2d) / tick)` ticks no longer fit in the
///    whole ticks left, an idle or on-demand job takes (keeps) on-demand; when
///    `ceil((remaining + d) / tick)` no longer fit, it takes on-demand, except
///    that a spot instance past its overhead is kept until it is preempted.
///
/// The region is fixed (`region`); it never looks at the others.
#[derive(Debug, Clone)]
pub struct UniformProgress {
    pub region: usize,
}

impl SpotPolicy for UniformProgress {
    fn name(&self) -> String {
        "uniform_progress".into()
    }

    fn decide(&mut self, v: &SpotView<'_>) -> Instance {
        use Instance::*;
        let r = self.region;
        let g = v.tick_s();
        let d = v.restart_s();
        let c0 = v.work_s();
        let ct = v.remaining_s;
        let r0 = v.deadline_s();
        let t = v.elapsed_s();
        if ct <= DONE_EPS_S {
            return None;
        }
        let has_spot = v.available(r);
        let remaining_time = ((r0 - t) / g).floor() * g;
        let mut req = if has_spot { Spot(r) } else { None };
        if c0 - ct - t * c0 / r0 < 0.0 {
            req = if has_spot { Spot(r) } else { OnDemand(r) };
        }
        let current = v.current;
        if matches!(current, OnDemand(_)) {
            let ahead2 = (t + 2.0 * d) * c0 / r0 - (c0 - ct);
            if !has_spot || ahead2 >= 0.0 {
                req = OnDemand(r);
            }
        }
        let need1 = ((ct + d) / g).ceil() * g;
        let need2 = ((ct + 2.0 * d) / g).ceil() * g;
        if need2 >= remaining_time && matches!(current, None | OnDemand(_)) {
            req = OnDemand(r);
        }
        let spot_settled = v.overhead_left_s < DONE_EPS_S;
        if need1 >= remaining_time {
            // The reference also sets, here, spot for a settled running spot
            // instance and on-demand otherwise (or spot when `d` is 0), but
            // its final guarantee then overrides that: it keeps spot only for
            // an instance that ran spot in the previous tick and has paid its
            // overhead (looking before the preemption check: a preempted one
            // becomes on-demand just below), and takes on-demand otherwise.
            req = if matches!(v.previous, Spot(_)) && spot_settled {
                Spot(r)
            } else {
                OnDemand(r)
            };
        }
        if matches!(req, Spot(_)) && !has_spot {
            req = if need1 >= remaining_time {
                OnDemand(r)
            } else {
                None
            };
        }
        req
    }
}

/// The simple rule the optimum uses for its first bound: keep a running spot
/// instance; otherwise take the cheapest available spot (price plus the
/// transfer spread over an hour); otherwise keep on-demand or wait. Under
/// [`simulate`]'s guarantee this is the "greedy" policy of "Can't Be Late".
#[derive(Debug, Clone, Default)]
pub struct Greedy;

impl SpotPolicy for Greedy {
    fn name(&self) -> String {
        "greedy".into()
    }
    fn decide(&mut self, v: &SpotView<'_>) -> Instance {
        if matches!(v.current, Instance::Spot(_)) {
            return v.current;
        }
        let best = (0..v.regions())
            .filter(|&r| v.available(r))
            .min_by(|&a, &b| {
                let c = |r: usize| v.price(r) + v.checkpoint.map_or(0.0, |c| v.transfer_usd(c, r));
                c(a).total_cmp(&c(b))
            });
        match (best, v.current) {
            (_, Instance::OnDemand(_)) => v.current,
            (Some(r), _) => Instance::Spot(r),
            (None, _) => Instance::None,
        }
    }
}

/// What a policy has observed of one region so far.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Seen {
    ticks: u32,
    up: u32,
    /// Up-runs that ended (an available tick followed by an unavailable one).
    ends: u32,
    /// Length of the current up-run, ticks (0 when down).
    age: u32,
}

impl Seen {
    fn push(&mut self, up: bool) {
        if self.age > 0 && !up {
            self.ends += 1;
        }
        self.ticks += 1;
        self.up += up as u32;
        self.age = if up { self.age + 1 } else { 0 };
    }
}

/// Our policy: multi-region, cost-aware, paced like Uniform Progress but
/// allowed to wait when a forecast says the slack suffices.
///
/// *Ahead* means either of:
///
/// * on or above Uniform Progress's line (`done >= t * work / deadline`; the
///   margin in hours counts);
/// * slack (time left, minus work left, minus one restart) above
///   `forecast_k` times the slack the rest is forecast to need on spot alone:
///   `need = remaining * (1 - a) / a + remaining / run * restart`, the waits
///   while no allowed region is up plus one restart per up-run, with `a` the
///   fraction of ticks seen with some region up and `run` the longest mean
///   up-run seen among the regions (both with a prior, `prior_availability`
///   per region weighing `prior_h` hours). With `forecast_k = 1` this is the
///   risk-neutral test "the expected spot time left covers the work".
///
/// Then, at every tick:
///
/// * **running spot**: keep it; move to another available region only if its
///   lower price saves, over the expected run there, `switch_gain` times the
///   restart and the transfer;
/// * **waiting, the checkpoint's region up**: start spot there (after its
///   availability has held `settle_ticks` ticks, when ahead);
/// * **waiting, ahead**: wait (no move, no on-demand);
/// * **waiting, behind**: spot in the available region with the lowest price
///   per useful hour (price, plus restart and transfer spread over its expected
///   run); with none available, on-demand;
/// * **on-demand**: back to spot (the checkpoint's region first) once ahead by
///   two restarts (Uniform Progress's hysteresis) and if the expected saving
///   over the run pays both restarts of the round trip;
///
/// and [`simulate`]'s guarantee forces on-demand at the last moment. On one
/// region it is Uniform Progress with the forecast's extra patience. It looks
/// only at the present and the past of the availability (what it counted since
/// the job started), never the future.
#[derive(Debug, Clone)]
pub struct SlackAware {
    /// Ahead when the slack exceeds this many times the forecast need (0: the
    /// line alone, as Uniform Progress).
    pub forecast_k: f64,
    /// Prior availability of one region, and its weight in hours.
    pub prior_availability: f64,
    pub prior_h: f64,
    /// How many times over a voluntary move must pay for itself.
    pub switch_gain: f64,
    /// Ticks the checkpoint's region must have been up before starting there
    /// when ahead (0: at once).
    pub settle_ticks: u32,
    // Visible to spot/tests.rs, which builds policies by struct update.
    pub(super) seen: Vec<Seen>,
    pub(super) any: Seen,
}

impl Default for SlackAware {
    fn default() -> Self {
        SlackAware {
            forecast_k: 1.0,
            prior_availability: 0.5,
            prior_h: 2.0,
            switch_gain: 2.0,
            settle_ticks: 0,
            seen: Vec::new(),
            any: Seen::default(),
        }
    }
}

impl SlackAware {
    fn observe(&mut self, v: &SpotView<'_>) {
        if self.seen.len() != v.regions() || v.tick == 0 {
            self.seen = vec![Seen::default(); v.regions()];
            self.any = Seen::default();
        }
        let mut any = false;
        for (r, s) in self.seen.iter_mut().enumerate() {
            let up = v.available(r);
            any |= up;
            s.push(up);
        }
        self.any.push(any);
    }

    /// Expected up-run of region `r`, hours: the hours seen up over the runs
    /// seen to end plus one, with the prior.
    fn run_h(&self, r: usize, tick_h: f64) -> f64 {
        let s = &self.seen[r];
        (s.up as f64 * tick_h + self.prior_availability * self.prior_h) / (s.ends as f64 + 1.0)
    }

    /// Slack the rest of the job is forecast to need on spot alone, hours.
    fn need_h(&self, v: &SpotView<'_>) -> f64 {
        let tick_h = v.tick_s() / 3600.0;
        let rem_h = v.remaining_s / 3600.0;
        let n = v.regions();
        let prior_any = 1.0 - (1.0 - self.prior_availability).powi(n as i32);
        let a = (self.any.up as f64 * tick_h + prior_any * self.prior_h)
            / (self.any.ticks as f64 * tick_h + self.prior_h);
        let a = a.max(1e-3);
        let run = (0..n).map(|r| self.run_h(r, tick_h)).fold(tick_h, f64::max);
        rem_h * (1.0 - a) / a + rem_h / run * v.restart_s() / 3600.0
    }
}

impl SpotPolicy for SlackAware {
    fn name(&self) -> String {
        "slack_aware".into()
    }

    fn decide(&mut self, v: &SpotView<'_>) -> Instance {
        self.observe(v);
        let tick_h = v.tick_s() / 3600.0;
        let rem_h = v.remaining_s / 3600.0;
        let d_h = v.restart_s() / 3600.0;
        let od = v.on_demand_per_h();
        let (dl, w, t) = (v.deadline_s(), v.work_s(), v.elapsed_s());
        let done = w - v.remaining_s;
        // Hours ahead (negative: behind) of the line, or of the forecast.
        let spare = if self.forecast_k > 0.0 {
            v.slack_s() / 3600.0 - self.forecast_k * self.need_h(v)
        } else {
            f64::NEG_INFINITY
        };
        let ahead = ((done - t * w / dl) / 3600.0).max(spare);
        let ahead2 = ((done - (t + 2.0 * v.restart_s()) * w / dl) / 3600.0).max(spare - 2.0 * d_h);
        let from = v.checkpoint;
        let eff = |r: usize| {
            let horizon = self.run_h(r, tick_h).min(rem_h + d_h).max(tick_h);
            let move_usd = from.map_or(0.0, |c| v.transfer_usd(c, r));
            v.price(r) + (d_h * v.price(r) + move_usd) / horizon
        };
        let best = (0..v.regions())
            .filter(|&r| v.available(r))
            .min_by(|&x, &y| eff(x).total_cmp(&eff(y)));
        let home = from.or(best);
        match v.current {
            Instance::Spot(r) => {
                if let Some(s) = best.filter(|&s| s != r) {
                    let gain = (v.price(r) - v.price(s)) * self.run_h(s, tick_h).min(rem_h);
                    let pay = d_h * v.price(s) + v.transfer_usd(r, s);
                    if gain > self.switch_gain * pay && v.allows(Instance::Spot(s)) {
                        return Instance::Spot(s);
                    }
                }
                v.current
            }
            Instance::OnDemand(r) => {
                let pick = home.filter(|&h| v.available(h)).or(best);
                if let Some(s) = pick.filter(|_| ahead2 > 0.0) {
                    let gain = (od - v.price(s)) * self.run_h(s, tick_h).min(rem_h);
                    let pay = d_h * (v.price(s) + od) + v.transfer_usd(r, s);
                    if gain > pay && v.allows(Instance::Spot(s)) {
                        return Instance::Spot(s);
                    }
                }
                v.current
            }
            Instance::None => {
                if let Some(h) = home.filter(|&h| v.available(h)) {
                    let settled = self.seen[h].age > self.settle_ticks.min(v.tick as u32);
                    return if ahead < 0.0 || settled {
                        Instance::Spot(h)
                    } else {
                        Instance::None
                    };
                }
                if ahead >= 0.0 {
                    return Instance::None;
                }
                match best {
                    Some(s) => Instance::Spot(s),
                    None => Instance::OnDemand(from.unwrap_or(0)),
                }
            }
        }
    }
}
