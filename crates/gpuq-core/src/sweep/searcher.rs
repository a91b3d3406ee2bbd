//! The searcher: a pure state machine fed with trial events, answering which
//! trials to start, promote or stop when GPUs are free.
//!
//! ASHA (Li et al., "A System for Massively Parallel Hyperparameter Tuning",
//! MLSys 2020): rungs at min_step·eta^k, capped at max_step. A trial trains to
//! its rung's step, reports there and is paused (holding no GPU). For a free
//! slot the searcher promotes, from the highest rung down, a paused trial in
//! the top floor(n/eta) of the n results at its rung that was not promoted
//! yet; else it starts a new trial at the bottom rung. Ranking on what has
//! arrived so far, never waiting for a rung to fill, is what makes it
//! asynchronous: no GPU idles waiting for stragglers.
//!
//! Grid and random are the one-rung case: every trial trains to max_step.

use super::{grid_points, sample, Goal, Parameter, SearcherKind, SweepError, SweepSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// A trial's number in its sweep: 0, 1, 2… in start order.
pub type TrialId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialState {
    /// Training towards its rung's step (a promoted trial is Running again,
    /// at the next rung).
    Running,
    /// Reported at its rung and waiting to be promoted; holds no GPU.
    Paused,
    /// Reached max_step, or exited successfully.
    Completed,
    Failed,
    /// Cancelled, or left paused when the sweep ended.
    Stopped,
}

impl TrialState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TrialState::Completed | TrialState::Failed | TrialState::Stopped
        )
    }
}

/// How a trial's process ended, as the runner saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialEnd {
    Succeeded,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub id: TrialId,
    pub params: BTreeMap<String, Value>,
    pub state: TrialState,
    /// Index into the rungs: the rung it trains towards, or is paused at.
    pub rung: usize,
    /// The last (step, value) it reported.
    pub last: Option<(u64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Start a new trial and train it to `max_step`.
    Start {
        trial: TrialId,
        params: BTreeMap<String, Value>,
        max_step: u64,
    },
    /// Resume a paused trial and train it on to `max_step` (the next rung).
    Promote { trial: TrialId, max_step: u64 },
    /// A paused trial that will never be promoted: release its checkpoint.
    Stop { trial: TrialId },
    /// Nothing runs, nothing can be promoted, nothing is left to start.
    Done,
}

/// Serializable as a whole: the daemon stores it after every decision and a
/// restarted daemon goes on from exactly there.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Searcher {
    kind: SearcherKind,
    goal: Goal,
    params: BTreeMap<String, Parameter>,
    seed: u64,
    max_concurrent: u32,
    /// How many trials this sweep starts at most (the grid's size for grid).
    limit: u32,
    rungs: Vec<u64>,
    eta: u64,
    /// The grid, enumerated once (empty for other searchers).
    grid: Vec<BTreeMap<String, Value>>,
    trials: Vec<Trial>,
    /// Per rung, the (trial, value) results in arrival order.
    results: Vec<Vec<(TrialId, f64)>>,
    /// Per rung, whether each result's trial was promoted from it; parallel
    /// to `results`.
    promoted: Vec<Vec<bool>>,
    done: bool,
}

/// `a` ranks before `b` under `goal`; NaN ranks last for either goal (a
/// diverged run must never look best), ties by trial id for a stable order.
fn rank(goal: Goal, a: (TrialId, f64), b: (TrialId, f64)) -> Ordering {
    let by_value = match (a.1.is_nan(), b.1.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => match goal {
            Goal::Minimize => a.1.total_cmp(&b.1),
            Goal::Maximize => b.1.total_cmp(&a.1),
        },
    };
    by_value.then(a.0.cmp(&b.0))
}

impl Searcher {
    /// Validates the spec; the seed fixes every sampled parameter.
    pub fn new(spec: &SweepSpec, seed: u64) -> Result<Searcher, SweepError> {
        spec.validate()?;
        let s = &spec.searcher;
        let grid = if s.name == SearcherKind::Grid {
            grid_points(&spec.parameters, seed)
        } else {
            Vec::new()
        };
        let limit = if s.name == SearcherKind::Grid {
            // Validation bounds the grid by max_trials, a u32.
            grid.len() as u32
        } else {
            s.max_trials
        };
        let rungs = s.rungs();
        Ok(Searcher {
            kind: s.name,
            goal: spec.metric.goal,
            params: spec.parameters.clone(),
            seed,
            max_concurrent: s.max_concurrent,
            limit,
            results: vec![Vec::new(); rungs.len()],
            promoted: vec![Vec::new(); rungs.len()],
            rungs,
            eta: s.eta,
            grid,
            trials: Vec::new(),
            done: false,
        })
    }

    /// The rung steps, bottom first.
    pub fn rungs(&self) -> &[u64] {
        &self.rungs
    }

    /// Every trial started so far, by id.
    pub fn trials(&self) -> &[Trial] {
        &self.trials
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    pub fn trial(&self, id: TrialId) -> Option<&Trial> {
        self.trials.get(id as usize)
    }

    /// The step `trial` trains to now: its rung's step.
    pub fn rung_step(&self, trial: TrialId) -> Option<u64> {
        self.trial(trial)
            .map(|t| self.rungs[t.rung.min(self.rungs.len() - 1)])
    }

    /// Where `trial` ranks among the results at `rung` (1 = best), and how
    /// many results that rung has, for saying why a trial was stopped.
    pub fn rank_at(&self, trial: TrialId, rung: usize) -> Option<(usize, usize)> {
        let results = self.results.get(rung)?;
        let mine = *results.iter().find(|r| r.0 == trial)?;
        let better = results
            .iter()
            .filter(|r| rank(self.goal, **r, mine) == Ordering::Less)
            .count();
        Some((better + 1, results.len()))
    }

    /// A running trial reported `value` at `step`, at or past its rung's step.
    /// If the slot it frees would go straight back to it (the decision for
    /// one free slot is to promote this very trial), it is promoted and its
    /// new step limit returned: it can train on in place, with no pause and
    /// no restart. Otherwise nothing changes (not even the report): the caller
    /// pauses the trial as usual and reports it then.
    pub fn train_on_at_rung(
        &mut self,
        trial: TrialId,
        step: u64,
        value: f64,
    ) -> Result<Option<u64>, SweepError> {
        let mut probe = self.clone();
        probe.on_trial_reported(trial, step, value)?;
        if probe.trial(trial).map(|t| t.state) != Some(TrialState::Paused) {
            return Ok(None);
        }
        match probe.next(1).first() {
            Some(Decision::Promote { trial: t, max_step }) if *t == trial => {
                let max_step = *max_step;
                *self = probe;
                Ok(Some(max_step))
            }
            _ => Ok(None),
        }
    }

    /// The reduction factor: the top 1/eta of a rung is promoted.
    pub fn eta(&self) -> u64 {
        self.eta
    }

    /// Stops every paused trial and ends the search (a cancel or a spent
    /// budget): the Stop decisions say which trials' jobs to release.
    pub fn finish(&mut self) -> Vec<Decision> {
        let mut out = Vec::new();
        for t in &mut self.trials {
            if t.state == TrialState::Paused {
                t.state = TrialState::Stopped;
                out.push(Decision::Stop { trial: t.id });
            }
        }
        self.done = true;
        out
    }

    fn running_trial(&mut self, trial: TrialId) -> Result<&mut Trial, SweepError> {
        let t = self
            .trials
            .get_mut(trial as usize)
            .ok_or(SweepError::UnknownTrial(trial))?;
        if t.state != TrialState::Running {
            return Err(SweepError::NotRunning {
                trial,
                state: t.state,
            });
        }
        Ok(t)
    }

    /// A running trial reported `value` at `step`. At or past its rung's step
    /// it counts at the rung and the trial is paused there (the runner
    /// checkpoints and frees its GPU), or completed at the top rung; an
    /// earlier step only updates its last metric.
    pub fn on_trial_reported(
        &mut self,
        trial: TrialId,
        step: u64,
        value: f64,
    ) -> Result<(), SweepError> {
        let top = self.rungs.len() - 1;
        let rung_step = {
            let t = self.running_trial(trial)?;
            t.last = Some((step, value));
            t.rung
        };
        if step < self.rungs[rung_step] {
            return Ok(());
        }
        let t = &mut self.trials[trial as usize];
        t.state = if rung_step == top {
            TrialState::Completed
        } else {
            TrialState::Paused
        };
        self.results[rung_step].push((trial, value));
        self.promoted[rung_step].push(false);
        Ok(())
    }

    /// A trial's process ended. A failed or cancelled trial reports nothing at
    /// the rung it was training towards, so it neither blocks nor fills that
    /// rung; results it reported at lower rungs stay (they were measured).
    /// A paused trial may end too (its checkpoint lost, or cancelled by hand).
    pub fn on_trial_ended(&mut self, trial: TrialId, end: TrialEnd) -> Result<(), SweepError> {
        let t = self
            .trials
            .get_mut(trial as usize)
            .ok_or(SweepError::UnknownTrial(trial))?;
        let ended = match (t.state, end) {
            // A trial that reached max_step exits successfully after: no news.
            (TrialState::Completed, TrialEnd::Succeeded) => return Ok(()),
            (TrialState::Running | TrialState::Paused, TrialEnd::Succeeded) => {
                TrialState::Completed
            }
            (TrialState::Running | TrialState::Paused, TrialEnd::Failed) => TrialState::Failed,
            (TrialState::Running | TrialState::Paused, TrialEnd::Cancelled) => TrialState::Stopped,
            (state, _) => return Err(SweepError::NotRunning { trial, state }),
        };
        t.state = ended;
        Ok(())
    }

    fn running(&self) -> u32 {
        self.trials
            .iter()
            .filter(|t| t.state == TrialState::Running)
            .count() as u32
    }

    /// The paused trial to promote next, with the rung it leaves: the highest
    /// rung first, where deeper training is worth the most.
    fn promotable(&self) -> Option<(usize, usize)> {
        let top = self.rungs.len() - 1;
        (0..top).rev().find_map(|k| {
            let results = &self.results[k];
            let take = results.len() / self.eta.max(1) as usize;
            let mut order: Vec<usize> = (0..results.len()).collect();
            order.sort_by(|&a, &b| rank(self.goal, results[a], results[b]));
            order.into_iter().take(take).find_map(|i| {
                let t = &self.trials[results[i].0 as usize];
                let waiting = !self.promoted[k][i] && t.state == TrialState::Paused && t.rung == k;
                waiting.then_some((k, i))
            })
        })
    }

    fn new_params(&self, index: u32) -> BTreeMap<String, Value> {
        match self.kind {
            SearcherKind::Grid => self.grid[index as usize].clone(),
            _ => sample(&self.params, u64::from(index), self.seed),
        }
    }

    /// What to do with `free_slots` free GPUs (slots), within max_concurrent.
    /// Once the sweep is over it stops the paused trials and says Done, and
    /// says Done again on every later call.
    pub fn next(&mut self, free_slots: u32) -> Vec<Decision> {
        if self.done {
            return vec![Decision::Done];
        }
        let mut slots = free_slots.min(self.max_concurrent.saturating_sub(self.running()));
        let mut out = Vec::new();
        while slots > 0 {
            if let Some((k, i)) = self.promotable() {
                self.promoted[k][i] = true;
                let trial = self.results[k][i].0;
                let t = &mut self.trials[trial as usize];
                t.state = TrialState::Running;
                t.rung = k + 1;
                out.push(Decision::Promote {
                    trial,
                    max_step: self.rungs[k + 1],
                });
            } else if (self.trials.len() as u32) < self.limit {
                let id = self.trials.len() as TrialId;
                let params = self.new_params(id);
                self.trials.push(Trial {
                    id,
                    params: params.clone(),
                    state: TrialState::Running,
                    rung: 0,
                    last: None,
                });
                out.push(Decision::Start {
                    trial: id,
                    params,
                    max_step: self.rungs[0],
                });
            } else {
                break;
            }
            slots -= 1;
        }
        // Done only with nothing running: a running trial may still report a
        // result that makes a paused one promotable.
        if self.running() == 0
            && self.trials.len() as u32 >= self.limit
            && self.promotable().is_none()
        {
            for t in &mut self.trials {
                if t.state == TrialState::Paused {
                    t.state = TrialState::Stopped;
                    out.push(Decision::Stop { trial: t.id });
                }
            }
            self.done = true;
            out.push(Decision::Done);
        }
        out
    }

    /// The best result so far: the furthest-trained trials first (a value at
    /// step 81 beats any at step 1, which ranks a different budget), then by
    /// goal; NaN never counts.
    pub fn best(&self) -> Option<(TrialId, u64, f64)> {
        self.trials
            .iter()
            .filter_map(|t| t.last.map(|(step, v)| (t.id, step, v)))
            .filter(|r| !r.2.is_nan())
            .min_by(|a, b| {
                b.1.cmp(&a.1)
                    .then_with(|| rank(self.goal, (a.0, a.2), (b.0, b.2)))
            })
    }
}
