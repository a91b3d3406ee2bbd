//! The model: the environment, the job, what a policy sees, and the simulation
//! that enforces the deadline.

use serde::{Deserialize, Serialize};

/// Progress within this many seconds of the work counts as done (the
/// reference simulator uses 1 ms too).
pub const DONE_EPS_S: f64 = 1e-3;

/// Tolerance of the tick arithmetic (ceil and floor of float ratios).
const TICK_EPS: f64 = 1e-9;

/// One region (an availability zone): per tick, whether a spot instance can be
/// had and the spot price in dollars per hour, and its on-demand price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpotRegion {
    pub name: String,
    pub available: Vec<bool>,
    pub price_per_h: Vec<f64>,
    /// On-demand price in this region, dollars per hour (never lost).
    pub on_demand_per_h: f64,
}

/// The environment of one run: regions over the same ticks, and the price of
/// moving the checkpoint between regions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpotEnv {
    /// Length of one tick, seconds.
    pub tick_s: f64,
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

/// What runs during a tick. On-demand carries its region: its price is that
/// region's, and the checkpoint follows the instance (a later start elsewhere
/// pays the transfer).
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
        let Some(first) = self.regions.first() else {
            return bad("no region".into());
        };
        let n = first.available.len();
        if n == 0 {
            return bad(format!("region {} has no tick", first.name));
        }
        for r in &self.regions {
            if !(r.on_demand_per_h.is_finite() && r.on_demand_per_h >= 0.0) {
                return bad(format!(
                    "region {}: on-demand price {}",
                    r.name, r.on_demand_per_h
                ));
            }
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

    /// On-demand price of `region`, dollars per hour.
    pub fn on_demand(&self, region: usize) -> f64 {
        self.regions[region].on_demand_per_h
    }

    /// The cheapest on-demand price of any region, dollars per hour.
    pub fn cheapest_on_demand(&self) -> f64 {
        self.regions
            .iter()
            .map(|r| r.on_demand_per_h)
            .fold(f64::INFINITY, f64::min)
    }

    /// The region where an on-demand instance running `hours` costs least,
    /// counting the transfer of the checkpoint from `from`.
    pub fn best_on_demand(&self, from: Option<usize>, hours: f64) -> usize {
        (0..self.regions.len())
            .min_by(|&a, &b| {
                let c = |r: usize| {
                    self.on_demand(r) * hours + from.map_or(0.0, |f| self.transfer(f, r))
                };
                c(a).total_cmp(&c(b))
            })
            .unwrap_or(0)
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
            regions: regions.iter().map(|&i| self.regions[i].clone()).collect(),
            transfer_usd,
        }
    }

    pub(super) fn tick_h(&self) -> f64 {
        self.tick_s / 3600.0
    }
}

/// The job in the simulator's units (seconds and ticks).
#[derive(Debug, Clone, Copy)]
pub(super) struct Units {
    pub(super) work_s: f64,
    pub(super) restart_s: f64,
    pub(super) deadline_s: f64,
    pub(super) tick_s: f64,
    /// Ticks before the deadline: the job must be done at the end of tick
    /// `horizon - 1`.
    pub(super) horizon: usize,
}

impl Units {
    pub(super) fn new(env: &SpotEnv, job: &Job) -> Result<Units, SpotError> {
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
    pub(super) fn ticks_for(&self, s: f64) -> usize {
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
    /// On-demand price of region `r`, dollars per hour.
    pub fn on_demand_per_h(&self, r: usize) -> f64 {
        self.env.on_demand(r)
    }
    /// The cheapest on-demand price of any region.
    pub fn cheapest_on_demand(&self) -> f64 {
        self.env.cheapest_on_demand()
    }
    /// Where an on-demand instance would finish the job cheapest from here
    /// (its price over the work left and a restart, plus the transfer).
    pub fn best_on_demand(&self) -> usize {
        let h = (self.remaining_s + self.p.restart_s) / 3600.0;
        self.env.best_on_demand(self.checkpoint, h)
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
    /// What ran at each tick until the job was done (after the guarantee):
    /// [`replay`] of it costs `cost`.
    #[serde(skip)]
    pub plan: Vec<Instance>,
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
        plan: Vec::new(),
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
            Instance::OnDemand(r) if r >= nreg => Instance::OnDemand(view.best_on_demand()),
            a => a,
        };
        if guard && !view.allows(a) {
            out.forced += 1;
            a = match current {
                Instance::OnDemand(_) => current,
                _ => Instance::OnDemand(view.best_on_demand()),
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
            Instance::OnDemand(r) => {
                out.cost += env.on_demand(r) * tick_h;
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
        out.plan.push(a);
        if remaining <= DONE_EPS_S {
            out.finished_at_h = Some((t + 1) as f64 * tick_h);
            out.met_deadline = true;
            break;
        }
    }
    Ok(out)
}

/// Dollars of running on-demand only: one start, in the cheapest region, then
/// to the end.
pub fn on_demand_cost(env: &SpotEnv, job: &Job) -> Result<f64, SpotError> {
    let p = Units::new(env, job)?;
    Ok(p.ticks_for(p.work_s + p.restart_s) as f64 * env.cheapest_on_demand() * env.tick_h())
}
