//! When an interactive session (a notebook, a shell on reserved GPUs) is
//! idle, and what to do about it: the rule behind `--idle-stop`. Pure: the
//! daemon feeds it what it sees (kernels, clients, GPU readings) with the
//! time, and acts on the decision; the tests drive it with a virtual clock.
//!
//! A session is idle when nothing ran in its kernels, no client was
//! connected, and its GPUs stayed under the threshold, all for the whole
//! window. A long training cell is a busy kernel, so it is never idle; a GPU
//! whose reading is not known counts as busy (what cannot be seen is not
//! stopped). An idle session is warned first and stopped after the grace,
//! unless it is used again meanwhile.

use crate::Millis;

/// `--idle-stop WINDOW`, with the grace between the warning and the stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdlePolicy {
    pub window_ms: Millis,
    pub grace_ms: Millis,
    /// A GPU at or above this utilisation is in use.
    pub gpu_busy_percent: f64,
}

/// What the session's GPUs showed in one look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GpuActivity {
    /// The session holds no GPU.
    NoGpus,
    /// No reading (no telemetry on the node, or none yet).
    Unknown,
    /// The highest utilisation among its GPUs.
    Percent(f64),
}

/// One look at the session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Activity {
    pub at: Millis,
    /// Kernels executing now (a cell still running).
    pub busy_kernels: u32,
    /// When code last ran in any kernel.
    pub last_execution: Option<Millis>,
    /// Clients connected now (browser tabs with a kernel open, terminals).
    pub clients: u32,
    pub gpus: GpuActivity,
}

impl Activity {
    fn in_use(&self, policy: &IdlePolicy) -> bool {
        self.busy_kernels > 0
            || self.clients > 0
            || match self.gpus {
                GpuActivity::NoGpus => false,
                GpuActivity::Unknown => true,
                // A reading that is not a number is no reading: busy.
                GpuActivity::Percent(p) => p >= policy.gpu_busy_percent || p.is_nan(),
            }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleDecision {
    /// In use now, or idle for less than the window (`since`: idle from then).
    Active { idle_since: Option<Millis> },
    /// Idle for the window: tell the user (alert, a notice in the session);
    /// given once per idle stretch.
    Warn { idle_since: Millis, stop_at: Millis },
    /// Warned, still idle after the grace: stop it (the stop protocol).
    Stop { idle_since: Millis },
}

/// The idle clock of one session.
#[derive(Debug, Clone)]
pub struct IdleWatch {
    policy: IdlePolicy,
    idle_since: Option<Millis>,
    stop_at: Option<Millis>,
}

impl IdleWatch {
    /// A session that started at `started_at` is idle from then until used.
    pub fn new(policy: IdlePolicy, started_at: Millis) -> Self {
        Self {
            policy,
            idle_since: Some(started_at),
            stop_at: None,
        }
    }

    /// Since when the session has been idle (`None`: in use).
    pub fn idle_since(&self) -> Option<Millis> {
        self.idle_since
    }

    pub fn observe(&mut self, a: &Activity) -> IdleDecision {
        if a.in_use(&self.policy) {
            self.idle_since = None;
            self.stop_at = None;
            return IdleDecision::Active { idle_since: None };
        }
        // Idle now: since the later of when it was last seen in use and when code last ran.
        let since = self.idle_since.unwrap_or(a.at);
        let since = a.last_execution.map_or(since, |e| since.max(e.min(a.at)));
        if self.idle_since.is_some_and(|s| s < since) {
            // Code ran since the warning: a new stretch.
            self.stop_at = None;
        }
        self.idle_since = Some(since);
        match self.stop_at {
            Some(stop_at) if a.at >= stop_at => IdleDecision::Stop { idle_since: since },
            Some(_) => IdleDecision::Active {
                idle_since: Some(since),
            },
            None if a.at - since >= self.policy.window_ms => {
                let stop_at = a.at + self.policy.grace_ms;
                self.stop_at = Some(stop_at);
                IdleDecision::Warn {
                    idle_since: since,
                    stop_at,
                }
            }
            None => IdleDecision::Active {
                idle_since: Some(since),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Millis = 60_000;
    const POLICY: IdlePolicy = IdlePolicy {
        window_ms: 30 * MIN,
        grace_ms: 5 * MIN,
        gpu_busy_percent: 5.0,
    };

    /// A scenario: the session as seen every minute from 0 to `minutes`.
    fn run(minutes: i64, look: impl Fn(Millis) -> Activity) -> Vec<(i64, IdleDecision)> {
        let mut w = IdleWatch::new(POLICY, 0);
        (1..=minutes)
            .map(|m| (m, w.observe(&look(m * MIN))))
            .filter(|(_, d)| !matches!(d, IdleDecision::Active { .. }))
            .collect()
    }

    fn quiet(at: Millis) -> Activity {
        Activity {
            at,
            busy_kernels: 0,
            last_execution: None,
            clients: 0,
            gpus: GpuActivity::Percent(0.0),
        }
    }

    #[test]
    fn an_unused_session_is_warned_after_the_window_and_stopped_after_the_grace() {
        assert_eq!(
            run(40, quiet),
            vec![
                (
                    30,
                    IdleDecision::Warn {
                        idle_since: 0,
                        stop_at: 35 * MIN
                    }
                ),
                (35, IdleDecision::Stop { idle_since: 0 }),
                (36, IdleDecision::Stop { idle_since: 0 }),
                (37, IdleDecision::Stop { idle_since: 0 }),
                (38, IdleDecision::Stop { idle_since: 0 }),
                (39, IdleDecision::Stop { idle_since: 0 }),
                (40, IdleDecision::Stop { idle_since: 0 }),
            ]
        );
    }

    #[test]
    fn a_long_cell_a_busy_gpu_or_a_client_keeps_it_alive() {
        let cell = |at| Activity {
            busy_kernels: 1,
            ..quiet(at)
        };
        assert!(run(600, cell).is_empty(), "an 8-hour cell is not idle");
        let gpu = |at| Activity {
            gpus: GpuActivity::Percent(97.0),
            ..quiet(at)
        };
        assert!(
            run(600, gpu).is_empty(),
            "training from a terminal is not idle"
        );
        let tab = |at| Activity {
            clients: 1,
            ..quiet(at)
        };
        assert!(run(600, tab).is_empty());
        let unseen = |at| Activity {
            gpus: GpuActivity::Unknown,
            ..quiet(at)
        };
        assert!(
            run(600, unseen).is_empty(),
            "what cannot be seen is not stopped"
        );
        let cpu_only = |at| Activity {
            gpus: GpuActivity::NoGpus,
            ..quiet(at)
        };
        assert_eq!(
            run(30, cpu_only).len(),
            1,
            "a session without GPUs is judged by the rest"
        );
    }

    #[test]
    fn the_window_counts_from_the_last_use_and_use_in_the_grace_cancels_the_stop() {
        // A cell ran at minute 20: idle from then, warned at 50.
        let ran = |at| Activity {
            last_execution: Some(20 * MIN),
            ..quiet(at)
        };
        assert_eq!(
            run(50, ran)[0],
            (
                50,
                IdleDecision::Warn {
                    idle_since: 20 * MIN,
                    stop_at: 55 * MIN
                }
            )
        );
        // Warned at 30; code runs at 32: no stop at 35, a new window from 32.
        let back = |at| Activity {
            last_execution: (at >= 32 * MIN).then_some(32 * MIN),
            ..quiet(at)
        };
        assert_eq!(
            run(62, back),
            vec![
                (
                    30,
                    IdleDecision::Warn {
                        idle_since: 0,
                        stop_at: 35 * MIN
                    }
                ),
                (
                    62,
                    IdleDecision::Warn {
                        idle_since: 32 * MIN,
                        stop_at: 67 * MIN
                    }
                ),
            ]
        );
        // A client opens the notebook in the grace: the same (idle again from the first look without it).
        let opened = |at| Activity {
            clients: u32::from(at == 33 * MIN),
            ..quiet(at)
        };
        let decisions = run(70, opened);
        assert_eq!(decisions[0].0, 30);
        assert_eq!(
            decisions[1],
            (
                64,
                IdleDecision::Warn {
                    idle_since: 34 * MIN,
                    stop_at: 69 * MIN
                }
            )
        );
    }

    #[test]
    fn a_gpu_under_the_threshold_is_idle_and_at_it_is_busy() {
        let garbled = |at| Activity {
            gpus: GpuActivity::Percent(f64::NAN),
            ..quiet(at)
        };
        assert!(
            run(60, garbled).is_empty(),
            "a reading that is not a number is busy"
        );
        let low = |at| Activity {
            gpus: GpuActivity::Percent(4.9),
            ..quiet(at)
        };
        assert_eq!(run(30, low).len(), 1);
        let at_threshold = |at| Activity {
            gpus: GpuActivity::Percent(5.0),
            ..quiet(at)
        };
        assert!(run(60, at_threshold).is_empty());
    }
}
