//! `gpuq tune`: which training settings run fastest. Pure: the tuner says
//! which knobs to try next and is told how each trial went; the command line
//! runs the trials as jobs. Tests drive it with a model of a training script.
//!
//! The search is a coordinate search from the script's own defaults, in
//! order of what usually matters most: the batch size first (doubling while
//! throughput grows; an out-of-memory trial is the edge, not a failure, and
//! the edge is bisected), then each other knob in turn (mixed precision,
//! `torch.compile` modes, DataLoader workers, pinned memory, channels-last),
//! each value tried on the best settings so far. A change is kept only when
//! it beats the best by more than the noise margin.

use serde::{Deserialize, Serialize};

/// One trial's settings: what `gpuq.tune_params()` hands the script.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Knobs {
    pub batch_size: u32,
    pub amp: String,
    pub compile: String,
    pub num_workers: u32,
    pub pin_memory: bool,
    pub channels_last: bool,
}

/// What may be tried (`--space tune.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Space {
    /// The largest batch size tried.
    #[serde(default = "default_max_batch")]
    pub max_batch_size: u32,
    /// Batch sizes are multiples of this (after the script's default).
    #[serde(default = "default_multiple")]
    pub batch_multiple: u32,
    #[serde(default = "default_amp")]
    pub amp: Vec<String>,
    #[serde(default = "default_compile")]
    pub compile: Vec<String>,
    #[serde(default = "default_workers")]
    pub num_workers: Vec<u32>,
    #[serde(default = "yes")]
    pub pin_memory: bool,
    /// Try channels-last (for convolutional models).
    #[serde(default)]
    pub channels_last: bool,
    /// A change must be this much faster to be kept (0.03: 3%).
    #[serde(default = "default_margin")]
    pub margin: f64,
}

fn default_max_batch() -> u32 {
    65_536
}
fn default_multiple() -> u32 {
    8
}
fn default_amp() -> Vec<String> {
    vec!["off".into(), "bf16".into(), "fp16".into()]
}
fn default_compile() -> Vec<String> {
    vec![
        "off".into(),
        "default".into(),
        "reduce-overhead".into(),
        "max-autotune".into(),
    ]
}
fn default_workers() -> Vec<u32> {
    vec![0, 1, 2, 4, 8]
}
fn yes() -> bool {
    true
}
fn default_margin() -> f64 {
    0.03
}

impl Default for Space {
    fn default() -> Self {
        serde_json::from_str("{}").expect("every field has a default")
    }
}

impl Space {
    /// Checks a space read from a file; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_batch_size == 0 {
            return Err("max_batch_size: give at least 1".into());
        }
        if self.batch_multiple == 0 {
            return Err("batch_multiple: give at least 1".into());
        }
        for a in &self.amp {
            if !["off", "bf16", "fp16"].contains(&a.as_str()) {
                return Err(format!("amp: {a:?} is not off, bf16 or fp16"));
            }
        }
        if self.compile.iter().any(|c| c.trim().is_empty()) {
            return Err(
                "compile: off, or a torch.compile mode (default, reduce-overhead, max-autotune)"
                    .into(),
            );
        }
        if !(0.0..1.0).contains(&self.margin) {
            return Err(format!(
                "margin: {} is not a fraction from 0 to 1 (e.g. 0.03)",
                self.margin
            ));
        }
        Ok(())
    }
}

/// How a trial went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Outcome {
    /// It ran: its throughput after the warm-up, its peak memory, its warm-up (compile) time.
    Ran {
        samples_per_s: f64,
        peak_memory_mib: Option<f64>,
        warmup_s: Option<f64>,
    },
    /// It ran out of memory: infeasible (the batch size's edge).
    OutOfMemory,
    /// It failed otherwise (a compile mode this build lacks): infeasible.
    Failed { why: String },
}

impl Outcome {
    pub fn throughput(&self) -> Option<f64> {
        match self {
            Outcome::Ran { samples_per_s, .. }
                if samples_per_s.is_finite() && *samples_per_s > 0.0 =>
            {
                Some(*samples_per_s)
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Baseline,
    Batch,
    Amp,
    Compile,
    Workers,
    Pin,
    ChannelsLast,
    Done,
}

/// The search's state.
#[derive(Debug, Clone)]
pub struct Tuner {
    space: Space,
    defaults: Knobs,
    stage: Stage,
    /// Every trial and how it went, in order.
    trials: Vec<(Knobs, Outcome)>,
    best: Option<(Knobs, f64)>,
    /// The batch stage: the largest batch that ran, the smallest that did not.
    batch_ok: Option<u32>,
    batch_oom: Option<u32>,
    /// Queue of the current stage's candidates.
    pending: Vec<Knobs>,
}

impl Tuner {
    pub fn new(space: Space, defaults: Knobs) -> Self {
        Self {
            space,
            defaults,
            stage: Stage::Baseline,
            trials: Vec::new(),
            best: None,
            batch_ok: None,
            batch_oom: None,
            pending: Vec::new(),
        }
    }

    pub fn trials(&self) -> &[(Knobs, Outcome)] {
        &self.trials
    }

    /// The fastest settings found, with their throughput.
    pub fn best(&self) -> Option<(&Knobs, f64)> {
        self.best.as_ref().map(|(k, t)| (k, *t))
    }

    /// The defaults' throughput (the first trial's), if they ran.
    pub fn baseline(&self) -> Option<f64> {
        self.trials
            .iter()
            .find(|(k, _)| *k == self.defaults)
            .and_then(|(_, o)| o.throughput())
    }

    fn tried(&self, k: &Knobs) -> bool {
        self.trials.iter().any(|(t, _)| t == k)
    }

    /// The next settings to try, or `None` when the search is over.
    pub fn next_trial(&mut self) -> Option<Knobs> {
        loop {
            if let Some(k) = self.pending.pop() {
                if !self.tried(&k) {
                    return Some(k);
                }
                continue;
            }
            match self.stage {
                Stage::Baseline => {
                    if self.trials.is_empty() {
                        return Some(self.defaults.clone());
                    }
                    self.stage = Stage::Batch;
                }
                Stage::Batch => match self.next_batch() {
                    Some(b) => {
                        let mut k = self.current();
                        k.batch_size = b;
                        if !self.tried(&k) {
                            return Some(k);
                        }
                        // Tried already (the bisection met a known size): the edge is found.
                        self.stage = Stage::Amp;
                        self.fill();
                    }
                    None => {
                        self.stage = Stage::Amp;
                        self.fill();
                    }
                },
                Stage::Done => return None,
                _ => {
                    self.stage = match self.stage {
                        Stage::Amp => Stage::Compile,
                        Stage::Compile => Stage::Workers,
                        Stage::Workers => Stage::Pin,
                        Stage::Pin => Stage::ChannelsLast,
                        _ => Stage::Done,
                    };
                    self.fill();
                }
            }
        }
    }

    /// The best settings so far, or the defaults when nothing ran yet.
    fn current(&self) -> Knobs {
        self.best
            .as_ref()
            .map_or_else(|| self.defaults.clone(), |(k, _)| k.clone())
    }

    /// The current stage's candidates, from the best settings so far.
    fn fill(&mut self) {
        let base = self.current();
        let mut out: Vec<Knobs> = Vec::new();
        match self.stage {
            Stage::Amp => {
                for a in &self.space.amp {
                    out.push(Knobs {
                        amp: a.clone(),
                        ..base.clone()
                    });
                }
            }
            Stage::Compile => {
                for c in &self.space.compile {
                    out.push(Knobs {
                        compile: c.clone(),
                        ..base.clone()
                    });
                }
            }
            Stage::Workers => {
                for w in &self.space.num_workers {
                    out.push(Knobs {
                        num_workers: *w,
                        ..base.clone()
                    });
                }
            }
            Stage::Pin if self.space.pin_memory => {
                out.push(Knobs {
                    pin_memory: !base.pin_memory,
                    ..base.clone()
                });
            }
            Stage::ChannelsLast if self.space.channels_last => {
                out.push(Knobs {
                    channels_last: !base.channels_last,
                    ..base.clone()
                });
            }
            _ => {}
        }
        out.retain(|k| *k != base);
        // Popped from the end: the first listed is tried first.
        out.reverse();
        self.pending = out;
    }

    /// The batch stage's next size: doubling from the largest that ran while
    /// throughput grows, bisecting toward the smallest that did not fit.
    fn next_batch(&self) -> Option<u32> {
        let m = self.space.batch_multiple;
        let round = |b: u32| (b / m).max(1) * m;
        match (self.batch_ok, self.batch_oom) {
            (None, None) => None,
            // Even the defaults did not fit: halve.
            (None, Some(oom)) => (oom > 1).then(|| (oom / 2).max(1)),
            (Some(ok), None) => {
                // Doubling goes on while the last doubling paid.
                let grew = self.batch_grew();
                let next = ok.saturating_mul(2).min(self.space.max_batch_size);
                (grew && next > ok).then_some(next)
            }
            (Some(ok), Some(oom)) => {
                let mid = round(((ok as u64 + oom as u64) / 2) as u32);
                // Close enough: within a quarter of the edge.
                (oom as f64 / ok as f64 > 1.25 && mid > ok && mid < oom).then_some(mid)
            }
        }
    }

    /// Whether the largest batch that ran was faster (beyond the margin) than
    /// the size before it; true after the first.
    fn batch_grew(&self) -> bool {
        let Some(ok) = self.batch_ok else {
            return false;
        };
        let at = |b: u32| {
            self.trials
                .iter()
                .filter(|(k, _)| k.batch_size == b)
                .filter_map(|(_, o)| o.throughput())
                .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))
        };
        let smaller = self
            .trials
            .iter()
            .filter(|(k, o)| k.batch_size < ok && o.throughput().is_some())
            .map(|(k, _)| k.batch_size)
            .max();
        match (at(ok), smaller.and_then(at)) {
            (Some(now), Some(before)) => now > before * (1.0 + self.space.margin),
            _ => true,
        }
    }

    /// Records how a trial went.
    pub fn record(&mut self, knobs: Knobs, outcome: Outcome) {
        if self.stage == Stage::Batch || self.stage == Stage::Baseline {
            match &outcome {
                Outcome::OutOfMemory => {
                    self.batch_oom = Some(
                        self.batch_oom
                            .map_or(knobs.batch_size, |o| o.min(knobs.batch_size)),
                    );
                }
                o if o.throughput().is_some() => {
                    self.batch_ok = Some(
                        self.batch_ok
                            .map_or(knobs.batch_size, |b| b.max(knobs.batch_size)),
                    );
                }
                _ => {}
            }
        }
        if let Some(t) = outcome.throughput() {
            // The first result, or a clear win, becomes the best.
            let better = match &self.best {
                None => true,
                Some((_, b)) => t > b * (1.0 + self.space.margin),
            };
            if better {
                self.best = Some((knobs.clone(), t));
            }
        }
        self.trials.push((knobs, outcome));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Knobs {
        Knobs {
            batch_size: 64,
            amp: "off".into(),
            compile: "off".into(),
            num_workers: 0,
            pin_memory: false,
            channels_last: false,
        }
    }

    /// A model of a training script: throughput grows with the batch up to a
    /// knee, memory runs out past `oom_at`; bf16 helps, fp16 fails, compile
    /// helps a little, two workers help most.
    fn script(k: &Knobs) -> Outcome {
        if k.batch_size >= 3000 {
            return Outcome::OutOfMemory;
        }
        if k.amp == "fp16" {
            return Outcome::Failed {
                why: "fp16 not supported".into(),
            };
        }
        let b = k.batch_size as f64;
        let mut t = 1000.0 * b / (b + 256.0);
        if k.amp == "bf16" {
            t *= 1.3;
        }
        if k.compile == "default" {
            t *= 1.1;
        }
        if k.compile == "max-autotune" {
            t *= 1.02;
        }
        t *= match k.num_workers {
            0 => 1.0,
            1 => 1.2,
            2 => 1.5,
            _ => 1.45,
        };
        Outcome::Ran {
            samples_per_s: t,
            peak_memory_mib: Some(b),
            warmup_s: Some(1.0),
        }
    }

    fn run(space: Space) -> Tuner {
        let mut t = Tuner::new(space, defaults());
        let mut n = 0;
        while let Some(k) = t.next_trial() {
            let o = script(&k);
            t.record(k, o);
            n += 1;
            assert!(n < 100, "the search ends");
        }
        t
    }

    #[test]
    fn the_search_finds_the_edge_and_the_best_knob_of_each_kind() {
        let t = run(Space::default());
        let (best, tput) = t.best().unwrap();
        assert_eq!(best.amp, "bf16");
        assert_eq!(best.compile, "default");
        assert_eq!(best.num_workers, 2);
        // The batch grew past the default up to near the edge (3000), never at it.
        assert!(best.batch_size > 1024 && best.batch_size < 3000, "{best:?}");
        assert!(tput > t.baseline().unwrap() * 2.0);
        // The out-of-memory sizes were tried and are infeasible, not the end.
        assert!(t.trials().iter().any(|(_, o)| *o == Outcome::OutOfMemory));
        // Far fewer trials than the grid (batch sizes x 3 x 4 x 5 x 2).
        assert!(t.trials().len() < 25, "{} trials", t.trials().len());
    }

    #[test]
    fn defaults_that_do_not_fit_are_halved_until_they_do() {
        let mut t = Tuner::new(
            Space::default(),
            Knobs {
                batch_size: 8192,
                ..defaults()
            },
        );
        while let Some(k) = t.next_trial() {
            let o = script(&k);
            t.record(k, o);
        }
        assert_eq!(t.baseline(), None, "the defaults ran out of memory");
        let (best, _) = t.best().unwrap();
        assert!(best.batch_size < 3000);
    }

    #[test]
    fn nothing_outside_the_space_is_tried() {
        let space = Space {
            amp: vec!["off".into()],
            compile: vec!["off".into()],
            num_workers: vec![0],
            pin_memory: false,
            max_batch_size: 128,
            ..Space::default()
        };
        let t = run(space);
        assert!(t.trials().iter().all(|(k, _)| k.amp == "off"
            && k.compile == "off"
            && k.num_workers == 0
            && !k.pin_memory
            && k.batch_size <= 128));
        assert_eq!(t.trials().len(), 2, "the defaults and one doubling");
    }

    #[test]
    fn a_bad_space_names_its_field() {
        let bad = |f: fn(&mut Space)| {
            let mut s = Space::default();
            f(&mut s);
            s.validate().unwrap_err()
        };
        assert!(bad(|s| s.amp = vec!["fp8".into()]).starts_with("amp:"));
        assert!(bad(|s| s.max_batch_size = 0).starts_with("max_batch_size:"));
        assert!(bad(|s| s.margin = 2.0).starts_with("margin:"));
        assert!(serde_json::from_str::<Space>(r#"{"ampp": []}"#).is_err());
    }
}
