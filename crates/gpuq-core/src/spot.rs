//! Spot or on-demand, and where, for one job with a deadline.
//!
//! A job has `work` hours of computation to do before its `deadline`; every
//! time a new instance starts (a spot instance, an on-demand one, a switch of
//! region or of kind, a relaunch after a preemption) it first spends `restart`
//! hours loading its checkpoint, which counts as lost progress (the instance is
//! billed, the job does not advance). Spot instances are cheap but are lost
//! whenever their region's availability drops to 0; on-demand instances are
//! never lost. The question, at every tick: stay, wait, take spot (in which
//! region) or take on-demand, at the least cost with the deadline never missed.
//!
//! Everything here is pure: the environment (availability and prices per
//! region per tick) is passed in, no clock is read. The model is the one of the
//! "Can't Be Late" simulator (NSDI'24) as republished by the SkyNomad artifact,
//! so that published figures are comparable:
//!
//! * time is a sequence of ticks of `tick_s` seconds; the job starts at tick 0
//!   and must be done at the end of tick `floor(deadline / tick) - 1`;
//! * at the start of tick `t` a spot instance held during `t - 1` in region `r`
//!   is preempted if region `r` is not available at `t`; its progress of tick
//!   `t - 1` is kept (the job checkpoints);
//! * the policy then chooses what runs during tick `t`: nothing, spot in an
//!   available region, or on-demand in any region; anything that is not the
//!   instance still running is a new instance, with `restart` seconds of
//!   overhead, and, when its region is not the region of the last instance
//!   (where the checkpoint is), the transfer price of the checkpoint;
//! * a running instance is billed for the whole tick (spot at that region's
//!   price of that tick, on-demand at the on-demand price) and makes
//!   `max(0, tick - overhead left)` seconds of progress.
//!
//! [`simulate`] runs a [`SpotPolicy`] over that model and enforces the deadline
//! by construction (see [`SpotView::allows`]); [`offline_optimum`] is the exact
//! clairvoyant optimum of the same model (a dynamic programme), the lower bound
//! every policy is measured against.

use serde::{Deserialize, Serialize};

/// Progress within this many seconds of the work counts as done (the
/// reference simulator uses 1 ms too).
pub const DONE_EPS_S: f64 = 1e-3;

/// Tolerance of the tick arithmetic (ceil and floor of float ratios).
const TICK_EPS: f64 = 1e-9;

/// One region (an availability zone): per tick, whether a spot instance can be
/// had and the spot price in dollars per hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpotRegion {
    pub name: String,
    pub available: Vec<bool>,
    pub price_per_h: Vec<f64>,
}

/// The environment of one run: regions over the same ticks, the on-demand
/// price, and the price of moving the checkpoint between regions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpotEnv {
    /// Length of one tick, seconds.
    pub tick_s: f64,
    /// On-demand price, dollars per hour (the same in every region).
    pub on_demand_per_h: f64,
    pub regions: Vec<SpotRegion>,
    /// `transfer_usd[i][j]`: dollars charged when an instance starts in region
    /// `j` while the checkpoint is in region `i` (egress of the checkpoint).
    /// Empty means free everywhere.
    #[serde(default)]
    pub transfer_usd: Vec<Vec<f64>>,
}

/// The job: hours of work, hours to the deadline (from its start), hours of
/// overhead each time an instance starts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub work_h: f64,
    pub deadline_h: f64,
    pub restart_h: f64,
}

/// What runs during a tick. On-demand carries its region because the
/// checkpoint follows the instance (a later spot start elsewhere pays the
/// transfer); the on-demand price is the same everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Instance {
    None,
    Spot(usize),
    OnDemand(usize),
}

impl Instance {
    pub fn region(self) -> Option<usize> {
        match self {
            Instance::None => None,
            Instance::Spot(r) | Instance::OnDemand(r) => Some(r),
        }
    }

    pub fn is_running(self) -> bool {
        self != Instance::None
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpotError {
    #[error("invalid spot environment: {0}")]
    Env(String),
    #[error("invalid job: {0}")]
    Job(String),
    #[error(
        "infeasible: {work_h} h of work plus {restart_h} h restart need {need} ticks of {tick_s} s, the deadline leaves {ticks}"
    )]
    Infeasible {
        work_h: f64,
        restart_h: f64,
        tick_s: f64,
        need: usize,
        ticks: usize,
    },
}

impl SpotEnv {
    /// Checks the shapes: a positive tick, at least one region, every region
    /// with as many availability samples as prices, all regions equally long,
    /// prices finite and non-negative, a square transfer matrix (or none).
    pub fn validate(&self) -> Result<(), SpotError> {
        let bad = |m: String| Err(SpotError::Env(m));
        if !(self.tick_s.is_finite() && self.tick_s > 0.0) {
            return bad(format!("tick {} s", self.tick_s));
        }
        if !(self.on_demand_per_h.is_finite() && self.on_demand_per_h >= 0.0) {
            return bad(format!("on-demand price {}", self.on_demand_per_h));
        }
        let Some(first) = self.regions.first() else {
            return bad("no region".into());
        };
        let n = first.available.len();
        if n == 0 {
            return bad(format!("region {} has no tick", first.name));
        }
        for r in &self.regions {
            if r.available.len() != n || r.price_per_h.len() != n {
                return bad(format!(
                    "region {}: {} availability samples and {} prices, expected {n} of each",
                    r.name,
                    r.available.len(),
                    r.price_per_h.len()
                ));
            }
            if let Some(p) = r
                .price_per_h
                .iter()
                .find(|p| !(p.is_finite() && **p >= 0.0))
            {
                return bad(format!("region {}: price {p}", r.name));
            }
        }
        if !self.transfer_usd.is_empty() {
            let k = self.regions.len();
            if self.transfer_usd.len() != k || self.transfer_usd.iter().any(|row| row.len() != k) {
                return bad(format!("transfer matrix is not {k}x{k}"));
            }
            if self
                .transfer_usd
                .iter()
                .flatten()
                .any(|c| !(c.is_finite() && *c >= 0.0))
            {
                return bad("negative or non-finite transfer price".into());
            }
        }
        Ok(())
    }

    /// Ticks of data (the same in every region).
    pub fn ticks(&self) -> usize {
        self.regions.first().map_or(0, |r| r.available.len())
    }

    /// Whether spot can be had in `region` during tick `t`; never past the data.
    pub fn available(&self, region: usize, t: usize) -> bool {
        self.regions[region]
            .available
            .get(t)
            .copied()
            .unwrap_or(false)
    }

    /// Spot price in `region` during tick `t` (the last one past the data).
    pub fn price(&self, region: usize, t: usize) -> f64 {
        let p = &self.regions[region].price_per_h;
        p[t.min(p.len() - 1)]
    }

    /// Dollars to move the checkpoint from `from` to `to`.
    pub fn transfer(&self, from: usize, to: usize) -> f64 {
        if from == to {
            return 0.0;
        }
        self.transfer_usd
            .get(from)
            .and_then(|row| row.get(to))
            .copied()
            .unwrap_or(0.0)
    }

    /// The same environment restricted to some regions, in that order.
    pub fn subset(&self, regions: &[usize]) -> SpotEnv {
        let transfer_usd = if self.transfer_usd.is_empty() {
            Vec::new()
        } else {
            regions
                .iter()
                .map(|&i| regions.iter().map(|&j| self.transfer_usd[i][j]).collect())
                .collect()
        };
        SpotEnv {
            tick_s: self.tick_s,
            on_demand_per_h: self.on_demand_per_h,
            regions: regions.iter().map(|&i| self.regions[i].clone()).collect(),
            transfer_usd,
        }
    }

    fn tick_h(&self) -> f64 {
        self.tick_s / 3600.0
    }
}

/// The job in the simulator's units (seconds and ticks).
#[derive(Debug, Clone, Copy)]
struct Units {
    work_s: f64,
    restart_s: f64,
    deadline_s: f64,
    tick_s: f64,
    /// Ticks before the deadline: the job must be done at the end of tick
    /// `horizon - 1`.
    horizon: usize,
}

impl Units {
    fn new(env: &SpotEnv, job: &Job) -> Result<Units, SpotError> {
        env.validate()?;
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !(ok(job.work_h) && job.work_h > 0.0 && ok(job.deadline_h) && ok(job.restart_h)) {
            return Err(SpotError::Job(format!("{job:?}")));
        }
        let p = Units {
            work_s: job.work_h * 3600.0,
            restart_s: job.restart_h * 3600.0,
            deadline_s: job.deadline_h * 3600.0,
            tick_s: env.tick_s,
            horizon: (job.deadline_h * 3600.0 / env.tick_s + TICK_EPS).floor() as usize,
        };
        let need = p.ticks_for(p.work_s + p.restart_s);
        if need > p.horizon {
            return Err(SpotError::Infeasible {
                work_h: job.work_h,
                restart_h: job.restart_h,
                tick_s: env.tick_s,
                need,
                ticks: p.horizon,
            });
        }
        Ok(p)
    }

    /// Whole ticks needed for `s` seconds of running.
    fn ticks_for(&self, s: f64) -> usize {
        if s <= DONE_EPS_S {
            return 0;
        }
        (s / self.tick_s - TICK_EPS).ceil().max(0.0) as usize
    }
}

/// What a policy sees at the start of a tick: the past and the present of the
/// environment (never the future), and the job's state.
pub struct SpotView<'a> {
    env: &'a SpotEnv,
    p: Units,
    /// The tick being decided.
    pub tick: usize,
    /// What ran during the previous tick (before any preemption).
    pub previous: Instance,
    /// What is still running now: `previous`, or `None` if it was preempted.
    pub current: Instance,
    /// Restart overhead the current instance has still to pay, seconds.
    pub overhead_left_s: f64,
    /// Work left, seconds.
    pub remaining_s: f64,
    /// Region of the last instance (where the checkpoint is), if any ran.
    pub checkpoint: Option<usize>,
    /// Dollars spent so far.
    pub cost: f64,
}

impl SpotView<'_> {
    pub fn regions(&self) -> usize {
        self.env.regions.len()
    }
    pub fn region_name(&self, r: usize) -> &str {
        &self.env.regions[r].name
    }
    pub fn tick_s(&self) -> f64 {
        self.p.tick_s
    }
    pub fn work_s(&self) -> f64 {
        self.p.work_s
    }
    pub fn restart_s(&self) -> f64 {
        self.p.restart_s
    }
    pub fn deadline_s(&self) -> f64 {
        self.p.deadline_s
    }
    /// Ticks in the run (the last one ends at the deadline, rounded down).
    pub fn horizon(&self) -> usize {
        self.p.horizon
    }
    pub fn elapsed_s(&self) -> f64 {
        self.tick as f64 * self.p.tick_s
    }
    /// Time left to the deadline, whole ticks, seconds.
    pub fn time_left_s(&self) -> f64 {
        (self.p.horizon - self.tick) as f64 * self.p.tick_s
    }
    /// Time that can still be lost: time left, minus the work left, minus one
    /// restart (the one an on-demand start would pay).
    pub fn slack_s(&self) -> f64 {
        self.time_left_s() - self.remaining_s - self.p.restart_s
    }
    pub fn on_demand_per_h(&self) -> f64 {
        self.env.on_demand_per_h
    }
    pub fn transfer_usd(&self, from: usize, to: usize) -> f64 {
        self.env.transfer(from, to)
    }
    /// Spot available in `r` now.
    pub fn available(&self, r: usize) -> bool {
        self.env.available(r, self.tick)
    }
    /// Spot price in `r` now.
    pub fn price(&self, r: usize) -> f64 {
        self.env.price(r, self.tick)
    }
    /// Availability of `r` at a past or the present tick; `None` for the future.
    pub fn observed(&self, r: usize, t: usize) -> Option<bool> {
        (t <= self.tick).then(|| self.env.available(r, t))
    }
    /// Price of `r` at a past or the present tick; `None` for the future.
    pub fn observed_price(&self, r: usize, t: usize) -> Option<f64> {
        (t <= self.tick).then(|| self.env.price(r, t))
    }

    /// Progress `a` would make during this tick.
    fn gain(&self, a: Instance) -> f64 {
        let overhead = match a {
            Instance::None => return 0.0,
            _ if a == self.current => self.overhead_left_s,
            _ => self.p.restart_s,
        };
        (self.p.tick_s - overhead).max(0.0).min(self.remaining_s)
    }

    /// The deadline guarantee: whether choosing `a` for this tick keeps the
    /// job certain to finish in time whatever the availability does later.
    ///
    /// The rule: an on-demand instance never stops, so on-demand is the way
    /// out; `a` is allowed when, after this tick, a *new* on-demand instance
    /// (one restart) still fits before the deadline, or `a` finishes the job,
    /// or `a` is the on-demand instance already running and it fits:
    ///
    /// * keep running on-demand: `ceil((remaining + overhead left) / tick) <= ticks left`;
    /// * start on-demand: `ceil((remaining + restart) / tick) <= ticks left`;
    /// * anything else (wait, spot, new or kept): with `g` its progress this
    ///   tick, `remaining - g` done, or `ceil((remaining - g + restart) / tick) <= ticks left - 1`.
    ///
    /// Proof that [`simulate`] never misses the deadline: at tick 0 starting
    /// on-demand is allowed (the job is feasible, [`simulate`] checks it). If
    /// the action of tick `t` was allowed, some action of tick `t + 1` is:
    /// after a wait or spot (preempted or not, its progress is kept), starting
    /// on-demand is allowed by the third line; after starting or keeping
    /// on-demand, `remaining + overhead` fell by exactly one tick, so keeping
    /// it is allowed. Whenever a policy proposes an action that is not
    /// allowed, [`simulate`] replaces it by on-demand (kept or started), so
    /// every tick has an allowed action, and an on-demand instance that is
    /// allowed to keep running finishes by the deadline. This is the forced
    /// switch of "Can't Be Late" (switch to on-demand when the slack is down to
    /// one restart plus one tick), and its "keep spot until preemption" case
    /// (a spot instance with no overhead left may run into the critical window,
    /// since its loss still leaves time for an on-demand start).
    pub fn allows(&self, a: Instance) -> bool {
        let left = self.p.horizon - self.tick;
        match a {
            Instance::OnDemand(_) if a == self.current => {
                self.p.ticks_for(self.remaining_s + self.overhead_left_s) <= left
            }
            Instance::OnDemand(_) => self.p.ticks_for(self.remaining_s + self.p.restart_s) <= left,
            _ => {
                let rem = self.remaining_s - self.gain(a);
                rem <= DONE_EPS_S || self.p.ticks_for(rem + self.p.restart_s) < left
            }
        }
    }
}

/// A decision rule, called once per tick in order (so it may keep what it
/// observed). Proposing spot in a region that is not available means waiting.
pub trait SpotPolicy {
    fn name(&self) -> String;
    fn decide(&mut self, view: &SpotView<'_>) -> Instance;
}

/// The result of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpotOutcome {
    pub policy: String,
    /// Dollars: instances plus checkpoint transfers.
    pub cost: f64,
    /// Of which checkpoint transfers.
    pub transfer_usd: f64,
    /// Hours from the start to the end of the tick that finished the job.
    pub finished_at_h: Option<f64>,
    pub met_deadline: bool,
    /// Spot instances lost to availability.
    pub preemptions: u32,
    /// Instances started (each pays the restart overhead).
    pub launches: u32,
    /// Of those, started while another instance was running (a chosen change
    /// of kind or region).
    pub switches: u32,
    /// Starts in a region other than the checkpoint's.
    pub migrations: u32,
    pub spot_h: f64,
    pub on_demand_h: f64,
    /// Ticks where the policy's choice broke the deadline guarantee and
    /// on-demand was used instead.
    pub forced: u32,
}

/// Runs `policy` over `env` for `job`, tick by tick, with the deadline
/// guarantee of [`SpotView::allows`] enforced.
pub fn simulate(
    env: &SpotEnv,
    job: &Job,
    policy: &mut dyn SpotPolicy,
) -> Result<SpotOutcome, SpotError> {
    run(env, job, policy, true)
}

/// Runs a fixed schedule (one [`Instance`] per tick, e.g. the plan of
/// [`offline_optimum`]) without the guarantee: what it costs and whether it
/// finishes. Spot in an unavailable region means waiting.
pub fn replay(env: &SpotEnv, job: &Job, plan: &[Instance]) -> Result<SpotOutcome, SpotError> {
    let mut p = Replay {
        plan: plan.to_vec(),
    };
    run(env, job, &mut p, false)
}

struct Replay {
    plan: Vec<Instance>,
}

impl SpotPolicy for Replay {
    fn name(&self) -> String {
        "replay".into()
    }
    fn decide(&mut self, view: &SpotView<'_>) -> Instance {
        self.plan.get(view.tick).copied().unwrap_or(Instance::None)
    }
}

fn run(
    env: &SpotEnv,
    job: &Job,
    policy: &mut dyn SpotPolicy,
    guard: bool,
) -> Result<SpotOutcome, SpotError> {
    let p = Units::new(env, job)?;
    let tick_h = env.tick_h();
    let nreg = env.regions.len();
    let mut out = SpotOutcome {
        policy: policy.name(),
        cost: 0.0,
        transfer_usd: 0.0,
        finished_at_h: None,
        met_deadline: false,
        preemptions: 0,
        launches: 0,
        switches: 0,
        migrations: 0,
        spot_h: 0.0,
        on_demand_h: 0.0,
        forced: 0,
    };
    let mut previous = Instance::None;
    let mut overhead_left = 0.0;
    let mut remaining = p.work_s;
    let mut checkpoint: Option<usize> = None;
    for t in 0..p.horizon {
        let mut current = previous;
        if let Instance::Spot(r) = previous {
            if !env.available(r, t) {
                current = Instance::None;
                out.preemptions += 1;
            }
        }
        let view = SpotView {
            env,
            p,
            tick: t,
            previous,
            current,
            overhead_left_s: overhead_left,
            remaining_s: remaining,
            checkpoint,
            cost: out.cost,
        };
        let mut a = policy.decide(&view);
        a = match a {
            Instance::Spot(r) if r >= nreg || !env.available(r, t) => Instance::None,
            Instance::OnDemand(r) if r >= nreg => Instance::OnDemand(checkpoint.unwrap_or(0)),
            a => a,
        };
        if guard && !view.allows(a) {
            out.forced += 1;
            a = match current {
                Instance::OnDemand(_) => current,
                _ => Instance::OnDemand(checkpoint.unwrap_or(0)),
            };
            debug_assert!(view.allows(a), "on-demand must be allowed at tick {t}");
        }
        if a.is_running() && a != current {
            out.launches += 1;
            if current.is_running() {
                out.switches += 1;
            }
            overhead_left = p.restart_s;
            let r = a.region().unwrap_or(0);
            if let Some(c) = checkpoint.filter(|&c| c != r) {
                out.migrations += 1;
                let usd = env.transfer(c, r);
                out.transfer_usd += usd;
                out.cost += usd;
            }
        }
        match a {
            Instance::None => overhead_left = 0.0,
            Instance::Spot(r) => {
                out.cost += env.price(r, t) * tick_h;
                out.spot_h += tick_h;
            }
            Instance::OnDemand(_) => {
                out.cost += env.on_demand_per_h * tick_h;
                out.on_demand_h += tick_h;
            }
        }
        if let Some(r) = a.region() {
            let gain = (p.tick_s - overhead_left).max(0.0).min(remaining);
            overhead_left = (overhead_left - p.tick_s).max(0.0);
            remaining -= gain;
            checkpoint = Some(r);
        }
        previous = a;
        if remaining <= DONE_EPS_S {
            out.finished_at_h = Some((t + 1) as f64 * tick_h);
            out.met_deadline = true;
            break;
        }
    }
    Ok(out)
}

/// Dollars of running on-demand only: one start, then to the end.
pub fn on_demand_cost(env: &SpotEnv, job: &Job) -> Result<f64, SpotError> {
    let p = Units::new(env, job)?;
    Ok(p.ticks_for(p.work_s + p.restart_s) as f64 * env.on_demand_per_h * env.tick_h())
}

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
    let od_tick = env.on_demand_per_h * tick_h;
    // Ticks after which the restart overhead is paid off.
    let ovh_ticks = p.ticks_for(p.restart_s);
    let nj = ovh_ticks.max(1);
    let overhead_after = |j: usize| (p.restart_s - j as f64 * p.tick_s).max(0.0);
    let cheapest_h = env
        .regions
        .iter()
        .flat_map(|r| r.price_per_h.iter().copied())
        .fold(env.on_demand_per_h, f64::min);
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
                    Instance::OnDemand(_) => od_tick,
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
struct Seen {
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
    seen: Vec<Seen>,
    any: Seen,
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

#[cfg(test)]
mod tests;
