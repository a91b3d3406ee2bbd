//! The online policies: on-demand only, Uniform Progress, greedy (and, in
//! `slack.rs`, ours, slack-aware).

use super::model::*;

/// On-demand from the first tick to the end, in the region where it costs
/// least.
#[derive(Debug, Clone, Default)]
pub struct OnDemandOnly;

impl SpotPolicy for OnDemandOnly {
    fn name(&self) -> String {
        "on_demand".into()
    }
    fn decide(&mut self, v: &SpotView<'_>) -> Instance {
        match v.current {
            Instance::OnDemand(_) => v.current,
            _ => Instance::OnDemand(v.best_on_demand()),
        }
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
