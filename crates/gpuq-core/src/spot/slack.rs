//! Our policy: multi-region, priced per zone, paced by the slack.

use super::model::*;

/// What a policy has observed of one region so far.
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    ticks: u32,
    up: u32,
    /// Up-runs that ended (an available tick followed by an unavailable one).
    ends: u32,
    /// Down-runs that ended (an unavailable tick followed by an available one).
    down_ends: u32,
    /// Length of the current up-run, ticks (0 when down).
    age: u32,
    /// Length of the current down-run, ticks (0 when up).
    down_age: u32,
    /// Lengths of the outages seen to end, ticks.
    outages: Vec<u32>,
    /// Spot price, smoothed over the ticks seen (dollars per hour).
    price: f64,
}

impl Seen {
    /// `weight`: the share of the new price in the smoothed one.
    fn push(&mut self, up: bool, price: f64, weight: f64) {
        self.price = if self.ticks == 0 {
            price
        } else {
            self.price + weight * (price - self.price)
        };
        if self.age > 0 && !up {
            self.ends += 1;
        }
        if self.down_age > 0 && up {
            self.down_ends += 1;
            self.outages.push(self.down_age);
        }
        self.ticks += 1;
        self.up += up as u32;
        self.age = if up { self.age + 1 } else { 0 };
        self.down_age = if up { 0 } else { self.down_age + 1 };
    }
}

/// Our policy. At every tick it prices, for each zone, the plan "run the rest
/// of the job there" from what it has seen of that zone alone, and for
/// on-demand the plan "run the rest on-demand", and takes the cheapest:
///
/// * a zone's plan waits for the zone if it is down: the wait expected is the
///   longer of its mean outage seen so far and the outage's age (an outage
///   that has lasted long is expected to last as long again);
/// * it then needs, on that zone alone, `remaining * (1 - a) / a` hours of
///   slack for the outages to come plus one restart per expected up-run
///   (`a` the zone's availability seen, with a prior); the part of that need
///   the slack left after the wait does not cover (times `forecast_k`) is
///   priced as work done on-demand (the cheapest on-demand price) instead of
///   at the zone's spot price (smoothed over about the prior's span, so a
///   tick's noise moves nothing);
/// * a start pays its restart at the zone's price and the transfer of the
///   checkpoint, and each expected up-run ends in a restart at that price.
///
/// So "ahead" is judged against the zones that are actually up and their
/// prices, not against "some zone is up": a cheap zone that has been down for
/// long stops being worth waiting for as soon as the slack its wait would eat
/// costs more (as on-demand later) than moving to a dearer zone that is up.
///
/// Then:
///
/// * **waiting**: take the cheapest plan: start its zone if it is up (after
///   it has been up `settle_ticks`, while the slack allows), wait if it is
///   down, start on-demand if that is cheapest. A zone whose expected wait
///   is longer than the slack left is no plan (waiting for it ends in the
///   guarantee's on-demand to the end), so the policy moves or buys
///   on-demand before the slack is gone, not at the deadline. Once the
///   slack left is under `pace` times its uniform share of the time left,
///   it does not wait at all (a zone up, else on-demand): slack spent early
///   on one outage is missing for the later ones;
/// * **running spot**: keep it, unless another zone's plan, migration paid,
///   is cheaper by `switch_gain - 1` more migrations (hysteresis); a move
///   for a lower price must also pay for itself within the stay expected in
///   the new zone (its up-runs, through the outages short enough to wait
///   out), so a cheap zone that flaps is not chased back and forth;
/// * **on-demand**: back to spot in the zone up whose saving over that
///   expected stay is largest, as soon as it pays both restarts of the
///   round trip and the transfer, while the guarantee allows it (on-demand
///   keeps the slack where it is, so waiting to be "ahead" again would mean
///   on-demand to the end);
///
/// and [`simulate`]'s guarantee forces on-demand at the last moment. It looks
/// only at the present and the past of the availability (what it counted since
/// the job started), never the future; no constant of one data set is in it
/// (prices, tick and zones all come from the environment).
#[derive(Debug, Clone)]
pub struct SlackAware {
    /// Weight of the slack a plan is forecast to need (0: none, the plans are
    /// priced as if spot always came back in time).
    pub forecast_k: f64,
    /// Prior availability of one region, and its weight as a fraction of the
    /// deadline (so the prior scales with the job, not with one data set's
    /// tick or outage lengths).
    pub prior_availability: f64,
    pub prior_frac: f64,
    /// How many times over a voluntary move must pay for itself.
    pub switch_gain: f64,
    /// Ticks a zone must have been up before starting there while the slack
    /// allows waiting (0: at once).
    pub settle_ticks: u32,
    /// Pace of the slack: while no spot runs and the slack left is under
    /// `pace` times its uniform share of the time left
    /// (`slack0 * time_left / deadline`), the policy does not wait: it starts
    /// a zone that is up or on-demand (0: no pace).
    pub pace: f64,
    // Visible to spot/tests.rs, which builds policies by struct update.
    pub(super) seen: Vec<Seen>,
    pub(super) prior_h: f64,
}

impl Default for SlackAware {
    fn default() -> Self {
        SlackAware {
            forecast_k: 1.0,
            prior_availability: 0.5,
            prior_frac: 0.05,
            switch_gain: 2.0,
            settle_ticks: 0,
            pace: 0.5,
            seen: Vec::new(),
            prior_h: 0.0,
        }
    }
}

/// One plan's price, dollars, and the slack it is forecast to need, hours.
#[derive(Debug, Clone, Copy)]
struct Plan {
    cost: f64,
    need_h: f64,
    /// Hours of that need the slack left after the wait does not cover.
    short_h: f64,
    /// Of the cost, the restarts expected at the end of its up-runs.
    restarts: f64,
}

impl Plan {
    /// The cost weighed against on-demand: without the restarts it expects,
    /// since on-demand stays the way out once they come (and a zone's first
    /// up-run is priced from the prior alone).
    fn against_on_demand(&self) -> f64 {
        self.cost - self.restarts
    }
}

impl SlackAware {
    fn observe(&mut self, v: &SpotView<'_>) {
        if self.seen.len() != v.regions() || v.tick == 0 {
            self.seen = vec![Seen::default(); v.regions()];
            self.prior_h = self.prior_frac * v.deadline_s() / 3600.0;
        }
        // Prices are smoothed over about the prior's span: a plan prices
        // the hours to come, and one tick's price says little of them (a
        // move chasing each tick's noise pays its migration every time).
        let tick_h = v.tick_s() / 3600.0;
        let weight = (tick_h / self.prior_h.max(tick_h)).min(1.0);
        for (r, s) in self.seen.iter_mut().enumerate() {
            s.push(v.available(r), v.price(r), weight);
        }
    }

    /// Availability of region `r` seen so far, with the prior.
    fn availability(&self, r: usize, tick_h: f64) -> f64 {
        let s = &self.seen[r];
        let a = (s.up as f64 * tick_h + self.prior_availability * self.prior_h)
            / (s.ticks as f64 * tick_h + self.prior_h);
        a.clamp(1e-3, 1.0)
    }

    /// Expected up-run of region `r`, hours: the hours seen up over the runs
    /// seen to end plus one, with the prior.
    fn run_h(&self, r: usize, tick_h: f64) -> f64 {
        let s = &self.seen[r];
        (s.up as f64 * tick_h + self.prior_availability * self.prior_h) / (s.ends as f64 + 1.0)
    }

    /// Expected wait until region `r` is up again, hours (0 if up).
    fn wait_h(&self, r: usize, tick_h: f64) -> f64 {
        let s = &self.seen[r];
        if s.down_age == 0 {
            return 0.0;
        }
        let down = (s.ticks - s.up) as f64 * tick_h;
        let mean =
            (down + (1.0 - self.prior_availability) * self.prior_h) / (s.down_ends as f64 + 1.0);
        mean.max(s.down_age as f64 * tick_h)
    }

    /// Expected stay in region `s` after a move from `r`, hours: its
    /// expected up-run over the share of its outages that end a stay. An
    /// outage ends a stay when it is long enough that a detour back to `r`
    /// and back again (two restarts and transfers) costs less than waiting
    /// it out at the on-demand premium; shorter ones are waited out.
    fn stay_h(&self, v: &SpotView<'_>, s: usize, r: usize) -> f64 {
        let tick_h = v.tick_s() / 3600.0;
        let seen = &self.seen[s];
        let premium = (v.cheapest_on_demand() - seen.price).max(1e-9);
        let detour = 2.0 * (v.restart_s() / 3600.0 * seen.price + v.transfer_usd(r, s));
        let long_ticks = detour / premium / tick_h;
        let ending = seen
            .outages
            .iter()
            .filter(|&&l| l as f64 > long_ticks)
            .count();
        let p_end = (ending as f64 + 0.5) / (seen.outages.len() as f64 + 1.0);
        self.run_h(s, tick_h) / p_end
    }

    /// The plan "the rest of the job on spot in region `r`".
    fn plan(&self, v: &SpotView<'_>, r: usize) -> Plan {
        let tick_h = v.tick_s() / 3600.0;
        let rem_h = v.remaining_s / 3600.0;
        let d_h = v.restart_s() / 3600.0;
        let a = self.availability(r, tick_h);
        let run = self.run_h(r, tick_h).max(tick_h);
        let need_h = rem_h * (1.0 - a) / a + rem_h / run * d_h;
        let slack_after = v.slack_s() / 3600.0 - self.wait_h(r, tick_h);
        // A wait longer than the slack ends in the guarantee's on-demand to
        // the end: not a plan to wait for.
        if slack_after <= 0.0 && !v.available(r) {
            return Plan {
                cost: f64::INFINITY,
                need_h,
                short_h: rem_h,
                restarts: 0.0,
            };
        }
        let short = (self.forecast_k * need_h - slack_after).clamp(0.0, rem_h);
        let price = self.seen[r].price;
        let fallback = v.cheapest_on_demand().max(price);
        let start = if v.current == Instance::Spot(r) {
            0.0
        } else {
            d_h * price + v.checkpoint.map_or(0.0, |c| v.transfer_usd(c, r))
        };
        // Each expected up-run ends in a restart, paid at the zone's price.
        let restarts = rem_h / run * d_h * price;
        Plan {
            cost: price * (rem_h - short) + fallback * short + start + restarts,
            restarts,
            need_h,
            short_h: short,
        }
    }

    /// The plan "the rest on-demand" (in the cheapest place to run it).
    fn on_demand_plan(&self, v: &SpotView<'_>) -> (usize, f64) {
        let rem_h = v.remaining_s / 3600.0;
        let d_h = v.restart_s() / 3600.0;
        if let Instance::OnDemand(r) = v.current {
            return (
                r,
                v.on_demand_per_h(r) * (rem_h + v.overhead_left_s / 3600.0),
            );
        }
        let r = v.best_on_demand();
        let move_usd = v.checkpoint.map_or(0.0, |c| v.transfer_usd(c, r));
        (r, v.on_demand_per_h(r) * (rem_h + d_h) + move_usd)
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
        let n = v.regions();
        let plans: Vec<Plan> = (0..n).map(|r| self.plan(v, r)).collect();
        let by_cost = |x: &usize, y: &usize| plans[*x].cost.total_cmp(&plans[*y].cost);
        let best_any = (0..n).min_by(by_cost);
        let best_up = (0..n).filter(|&r| v.available(r)).min_by(by_cost);
        let (od_region, od_cost) = self.on_demand_plan(v);
        match v.current {
            Instance::Spot(r) => {
                if let Some(s) = best_up.filter(|&s| s != r) {
                    let pay = d_h * v.price(s) + v.transfer_usd(r, s);
                    let mut better = plans[s].cost + (self.switch_gain - 1.0) * pay < plans[r].cost;
                    // A move for a lower price must pay for itself within the
                    // stay expected there: a cheap zone that flaps is left at
                    // its long outages, and chasing it back and forth costs a
                    // migration each time. (A move away from a zone whose
                    // slack runs out is judged on the plans alone.)
                    let cheaper = self.seen[r].price - self.seen[s].price;
                    if cheaper > 0.0 && plans[r].short_h <= 0.0 {
                        let stay = self.stay_h(v, s, r).min(rem_h);
                        better &= cheaper * stay > self.switch_gain * pay;
                    }
                    if better && v.allows(Instance::Spot(s)) {
                        return Instance::Spot(s);
                    }
                }
                v.current
            }
            Instance::OnDemand(r) => {
                // On-demand keeps the slack where it is (it runs at the
                // pace of the clock), so waiting to be "ahead" again would
                // keep it to the end: go back to spot, in the zone up whose
                // saving over the stay expected there is largest, as soon as
                // that saving pays both restarts of the round trip and the
                // transfer (the guarantee allows it only while the slack can
                // absorb its loss: another restart back on-demand).
                let od = v.on_demand_per_h(r);
                // Each zone up: its saving over the stay, less the round trip.
                let best = (0..n)
                    .filter(|&s| v.available(s))
                    .map(|s| {
                        let gain = (od - self.seen[s].price) * self.stay_h(v, s, r).min(rem_h);
                        let pay = d_h * (v.price(s) + od) + v.transfer_usd(r, s);
                        (s, gain - pay)
                    })
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                match best {
                    Some((s, net)) if net > 0.0 && v.allows(Instance::Spot(s)) => Instance::Spot(s),
                    _ => v.current,
                }
            }
            Instance::None => {
                // Behind the pace of the slack: waiting is no longer an
                // option (start a zone that is up, or on-demand).
                let slack0 = v.deadline_s() - v.work_s() - v.restart_s();
                let share = slack0 * v.time_left_s() / v.deadline_s();
                let behind = v.slack_s() < self.pace * share;
                if behind && best_up.is_none() {
                    return Instance::OnDemand(od_region);
                }
                let Some(b) = best_any else {
                    return Instance::OnDemand(od_region);
                };
                if od_cost < plans[b].against_on_demand() {
                    return Instance::OnDemand(od_region);
                }
                if !v.available(b) {
                    // Waiting for it eats slack; the part of the wait the
                    // rest needs (its hours short) is paid later at the
                    // on-demand price. A detour to a zone that is up until
                    // it is back costs the price difference over the wait
                    // and the restarts and transfers there and back: take
                    // whichever is cheaper.
                    let Some(u) = best_up else {
                        return Instance::None;
                    };
                    if behind {
                        return if plans[u].against_on_demand() < od_cost {
                            Instance::Spot(u)
                        } else {
                            Instance::OnDemand(od_region)
                        };
                    }
                    let wait_h = self.wait_h(b, tick_h);
                    let od = v.cheapest_on_demand();
                    // Waiting may be for any zone that is down (the one
                    // back soonest may not be the cheapest): its slack cost
                    // plus its plan's premium over the best.
                    let wait_usd = (0..n)
                        .filter(|&z| !v.available(z) && plans[z].cost.is_finite())
                        .map(|z| {
                            (od - self.seen[z].price).max(0.0)
                                * self.wait_h(z, tick_h).min(plans[z].short_h)
                                + (plans[z].cost - plans[b].cost)
                        })
                        .fold(f64::INFINITY, f64::min);
                    let there =
                        d_h * v.price(u) + v.checkpoint.map_or(0.0, |c| v.transfer_usd(c, u));
                    let back = d_h * v.price(b) + v.transfer_usd(u, b);
                    let detour_usd = (self.seen[u].price - self.seen[b].price).max(0.0)
                        * wait_h.min(rem_h)
                        + there
                        + back;
                    return if wait_usd > detour_usd && plans[u].against_on_demand() < od_cost {
                        Instance::Spot(u)
                    } else {
                        Instance::None
                    };
                }
                let settled = self.seen[b].age > self.settle_ticks.min(v.tick as u32);
                let roomy = v.slack_s() / 3600.0 > self.forecast_k * plans[b].need_h + d_h;
                if settled || !roomy {
                    Instance::Spot(b)
                } else {
                    Instance::None
                }
            }
        }
    }
}
