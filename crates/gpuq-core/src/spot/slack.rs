//! Our policy: multi-region, priced per zone, paced by the slack.

use super::model::*;

/// What a policy has observed of one region so far.
#[derive(Debug, Clone, Copy, Default)]
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
}

impl Seen {
    fn push(&mut self, up: bool) {
        if self.age > 0 && !up {
            self.ends += 1;
        }
        if self.down_age > 0 && up {
            self.down_ends += 1;
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
///   at the zone's spot price;
/// * a start pays its restart at the zone's price and the transfer of the
///   checkpoint.
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
///   on-demand before the slack is gone, not at the deadline;
/// * **running spot**: keep it, unless another zone's plan, migration paid,
///   is cheaper by `switch_gain - 1` more migrations (hysteresis);
/// * **on-demand**: back to spot in the cheapest plan's zone that is up as
///   soon as its saving over its expected run pays both restarts of the
///   round trip, while the guarantee allows it (on-demand keeps the slack
///   where it is, so waiting to be "ahead" again would mean on-demand to
///   the end);
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
}

impl SlackAware {
    fn observe(&mut self, v: &SpotView<'_>) {
        if self.seen.len() != v.regions() || v.tick == 0 {
            self.seen = vec![Seen::default(); v.regions()];
            self.prior_h = self.prior_frac * v.deadline_s() / 3600.0;
        }
        for (r, s) in self.seen.iter_mut().enumerate() {
            s.push(v.available(r));
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
            };
        }
        let short = (self.forecast_k * need_h - slack_after).clamp(0.0, rem_h);
        let price = v.price(r);
        let fallback = v.cheapest_on_demand().max(price);
        let start = if v.current == Instance::Spot(r) {
            0.0
        } else {
            d_h * price + v.checkpoint.map_or(0.0, |c| v.transfer_usd(c, r))
        };
        Plan {
            cost: price * (rem_h - short) + fallback * short + start,
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
                    let better = plans[s].cost + (self.switch_gain - 1.0) * pay < plans[r].cost;
                    if better && v.allows(Instance::Spot(s)) {
                        return Instance::Spot(s);
                    }
                }
                v.current
            }
            Instance::OnDemand(r) => {
                let Some(s) = best_up else {
                    return v.current;
                };
                // On-demand keeps the slack where it is (it runs at the
                // pace of the clock), so waiting to be "ahead" again would
                // keep it to the end: go back to spot as soon as the saving
                // over the zone's expected run pays both restarts of the
                // round trip (the guarantee allows it only while the slack
                // can absorb its loss: another restart back on-demand).
                let od = v.on_demand_per_h(r);
                let gain = (od - v.price(s)) * self.run_h(s, tick_h).min(rem_h);
                let pay = d_h * (v.price(s) + od) + v.transfer_usd(r, s);
                if gain > pay && v.allows(Instance::Spot(s)) {
                    return Instance::Spot(s);
                }
                v.current
            }
            Instance::None => {
                let Some(b) = best_any else {
                    return Instance::OnDemand(od_region);
                };
                if od_cost < plans[b].cost {
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
                    let wait_h = self.wait_h(b, tick_h);
                    let od = v.cheapest_on_demand();
                    // Waiting may be for any zone that is down (the one
                    // back soonest may not be the cheapest): its slack cost
                    // plus its plan's premium over the best.
                    let wait_usd = (0..n)
                        .filter(|&z| !v.available(z) && plans[z].cost.is_finite())
                        .map(|z| {
                            (od - v.price(z)).max(0.0)
                                * self.wait_h(z, tick_h).min(plans[z].short_h)
                                + (plans[z].cost - plans[b].cost)
                        })
                        .fold(f64::INFINITY, f64::min);
                    let there =
                        d_h * v.price(u) + v.checkpoint.map_or(0.0, |c| v.transfer_usd(c, u));
                    let back = d_h * v.price(b) + v.transfer_usd(u, b);
                    let detour_usd =
                        (v.price(u) - v.price(b)).max(0.0) * wait_h.min(rem_h) + there + back;
                    return if wait_usd > detour_usd && plans[u].cost < od_cost {
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
