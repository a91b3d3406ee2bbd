//! Interactive sessions: a job that is JupyterLab or a shell on its reserved
//! GPUs (`gpuq notebook`, `gpuq shell`). They are jobs like any other (queue,
//! fair share, quotas, budgets, cost); what this adds is what the daemon does
//! around them: serve the notebook through its own auth, give the shell a
//! terminal, and stop either when it is idle ([`crate::idle`]).

use crate::duration::DurationSpec;
use crate::idle::IdlePolicy;
use crate::spec::SpecError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What kind of session a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// `command` is a `jupyter-lab` executable; the daemon adds where it listens
    /// (a unix socket in the job's directory), its base URL and its token.
    Notebook,
    /// `command` runs on a pseudo-terminal that `gpuq shell` attaches to.
    Shell,
}

/// The spec's `session` field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    pub kind: SessionKind,
    /// Stop the session after it was idle this long (no kernel ran, no client
    /// was connected, its GPUs stayed under the idle threshold); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_stop: Option<DurationSpec>,
}

/// The shortest idle window accepted (a shorter one stops sessions between two looks).
pub const MIN_IDLE_STOP_MS: u64 = 1_000;
/// The longest grace between the idle warning and the stop.
pub const MAX_GRACE_MS: u64 = 5 * 60 * 1000;

impl SessionSpec {
    pub fn validate(&self, spec: &crate::JobSpec) -> Result<(), SpecError> {
        if let Some(w) = self.idle_stop {
            if w.as_millis() < MIN_IDLE_STOP_MS {
                return Err(SpecError::new(
                    "session.idle_stop",
                    format!("{w} is too short: give at least 1s (e.g. 30m), or leave it out to never stop an idle session"),
                ));
            }
        }
        if spec.array.is_some() {
            return Err(SpecError::new(
                "array",
                "a session is one job: an interactive session cannot be a job array",
            ));
        }
        if spec.nodes.is_some_and(|n| n > 1) {
            return Err(SpecError::new(
                "nodes",
                "a session runs on one node: ask for its GPUs with `gpus`, not several nodes",
            ));
        }
        if self.kind == SessionKind::Notebook && spec.command.is_none() {
            return Err(SpecError::new(
                "command",
                "a notebook's command is the jupyter-lab to run (e.g. [\"/home/me/venv/bin/jupyter-lab\"]), not a script",
            ));
        }
        Ok(())
    }

    /// The idle rule for this session, if it has one. The grace between the
    /// warning and the stop is a fifth of the window, at most five minutes.
    pub fn idle_policy(&self, gpu_busy_percent: f64) -> Option<IdlePolicy> {
        let window = self.idle_stop?.as_millis();
        Some(IdlePolicy {
            window_ms: window as i64,
            grace_ms: (window / 5).clamp(MIN_IDLE_STOP_MS / 2, MAX_GRACE_MS) as i64,
            gpu_busy_percent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobSpec;

    fn spec(kind: SessionKind, idle: Option<u64>) -> JobSpec {
        JobSpec {
            command: Some(vec!["/venv/bin/jupyter-lab".into()]),
            session: Some(SessionSpec {
                kind,
                idle_stop: idle.map(DurationSpec::from_millis),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_session_spec_names_the_field_of_each_mistake() {
        spec(SessionKind::Notebook, Some(30 * 60_000))
            .validate()
            .unwrap();
        spec(SessionKind::Shell, None).validate().unwrap();
        let e = spec(SessionKind::Shell, Some(10)).validate().unwrap_err();
        assert_eq!(e.field, "session.idle_stop");
        let mut s = spec(SessionKind::Shell, None);
        s.array = Some("0-3".parse().unwrap());
        assert_eq!(s.validate().unwrap_err().field, "array");
        let mut s = spec(SessionKind::Shell, None);
        s.nodes = Some(2);
        assert_eq!(s.validate().unwrap_err().field, "nodes");
        let mut s = spec(SessionKind::Notebook, None);
        s.command = None;
        s.run = Some("jupyter lab".into());
        assert_eq!(s.validate().unwrap_err().field, "command");
    }

    #[test]
    fn the_grace_is_a_fifth_of_the_window_and_at_most_five_minutes() {
        let p = |ms| {
            spec(SessionKind::Shell, Some(ms))
                .session
                .unwrap()
                .idle_policy(5.0)
                .unwrap()
        };
        assert_eq!(p(30 * 60_000).grace_ms, 5 * 60_000);
        assert_eq!(p(8 * 3_600_000).grace_ms, 5 * 60_000);
        assert_eq!(p(10_000).grace_ms, 2_000);
        assert_eq!(p(1_000).grace_ms, 500);
        assert!(spec(SessionKind::Shell, None)
            .session
            .unwrap()
            .idle_policy(5.0)
            .is_none());
    }
}
