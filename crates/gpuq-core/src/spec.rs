//! The job spec: what a user asks for, from flags or from a YAML file.

use crate::{limits, DurationSpec, EarlySignal, JobId, MemSize};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Priority class. Higher classes start first; within a class, submit order.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "low" => Ok(Priority::Low),
            "normal" => Ok(Priority::Normal),
            "high" => Ok(Priority::High),
            other => Err(SpecError::new(
                "priority",
                format!("{other:?} is not a priority class; use low, normal or high"),
            )),
        }
    }
}

/// What a job runs and what it needs. The same fields as the `gpuq submit` flags.
///
/// Exactly one of `command` (an argument vector, executed directly) and `run`
/// (a script, executed by `bash -e -c`) must be given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// A short name shown in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The program and its arguments, executed without a shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A multi-line script, executed by `bash -e -c` (stops at the first failing line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Number of GPUs, all allocated at once (gang): on one node when a node holds
    /// them, else on whole nodes of one kind; per node, with `nodes`.
    #[serde(default)]
    pub gpus: u32,
    /// Nodes for a multi-node job (a cluster backend: Slurm): `gpus` on each, started with
    /// MASTER_ADDR, MASTER_PORT, NNODES and NODE_RANK set for torchrun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Only GPUs whose model contains this, case-insensitive (e.g. `A100`, `L4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Only GPUs with at least this much memory (e.g. `40G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem: Option<MemSize>,
    /// CPU cores reserved for the job (on each node, with `nodes`). Default:
    /// the daemon's `[resources]` share per GPU; none reserved for a CPU-only job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Host memory reserved for the job, its limit (e.g. `64G`; on each node,
    /// with `nodes`). Default: the daemon's `[resources]` share per GPU or per core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemSize>,
    /// Priority class: low, normal (default) or high.
    #[serde(default)]
    pub priority: Priority,
    /// How many times a failed attempt is retried.
    #[serde(default)]
    pub retries: u32,
    /// Wall-clock limit of one attempt; the job is stopped when it is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<DurationSpec>,
    /// Time between SIGTERM and SIGKILL when the job is stopped (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<DurationSpec>,
    /// Signal sent first, `SIG@SECONDS` before the time limit or at once on preemption (e.g. `USR1@90`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<EarlySignal>,
    /// Delay before the first retry; it doubles for each further retry, up to 10 minutes (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay: Option<DurationSpec>,
    /// Environment variables set on top of the submitter's environment. Each
    /// `KEY=VALUE` under 128 KiB; the job's whole environment at most 4096
    /// variables and 1 MiB.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory (default: the directory `gpuq submit` ran in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Project the job's usage is accounted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Start only after these jobs succeeded; if one fails, this job fails too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    /// The job may be stopped and requeued to make room for higher-priority work.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// Hyperparameters: recorded as the run's params and handed to the job as
    /// `GPUQ_PARAMS` (a JSON object). Values are strings, numbers or booleans.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, serde_json::Value>,
    /// A job array (`0-99%8`: tasks 0 to 99, at most 8 running at once): one
    /// job per index, each with `GPUQ_ARRAY_INDEX` set, under one id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<crate::array::ArraySpec>,
    /// An interactive session (`gpuq notebook`, `gpuq shell`): JupyterLab served
    /// through the daemon, or a shell on a terminal, stopped when idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<crate::session::SessionSpec>,
    /// The Python environment the job runs in, built once per key with uv and cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<crate::pyenv::PythonSpec>,
    /// A script run once when the environment is built (after its requirements),
    /// in the job's directory with the environment active (`pip` is uv's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// A container image to run the job in, with podman.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `false`: its failure raises no `job_failed` alert, because whoever
    /// submitted it watches it end (`gpuq doctor`'s checks). Default: it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_alert: Option<bool>,
}

/// MLflow's limits on a param: its key and its value as text.
pub const MAX_PARAM_KEY_LEN: usize = 250;
pub const MAX_PARAM_VALUE_LEN: usize = 6000;
/// At most this many params in one spec (MLflow takes 100 per request).
pub const MAX_PARAMS: usize = 100;

/// A param's value as the run records it: strings as they are, numbers and booleans as JSON writes them.
pub fn param_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn check_params(params: &BTreeMap<String, serde_json::Value>) -> Result<(), SpecError> {
    if params.len() > MAX_PARAMS {
        return Err(SpecError::new(
            "params",
            format!("{} params; a job takes at most {MAX_PARAMS}", params.len()),
        ));
    }
    for (key, value) in params {
        let field = format!("params.{key}");
        let key_ok = !key.is_empty()
            && key.len() <= MAX_PARAM_KEY_LEN
            && key
                .chars()
                .all(|c| c.is_alphanumeric() || "_-. /".contains(c));
        if !key_ok {
            return Err(SpecError::new(
                field,
                format!("a param's name is 1 to {MAX_PARAM_KEY_LEN} letters, digits, and _ - . / or spaces"),
            ));
        }
        match value {
            serde_json::Value::String(_)
            | serde_json::Value::Number(_)
            | serde_json::Value::Bool(_) => {}
            _ => {
                return Err(SpecError::new(
                    field,
                    "a param is a string, a number or a boolean (not a list, a map or null)",
                ))
            }
        }
        if param_text(value).len() > MAX_PARAM_VALUE_LEN {
            return Err(SpecError::new(
                field,
                format!("the value is longer than {MAX_PARAM_VALUE_LEN} bytes; keep params short (put data in a file)"),
            ));
        }
    }
    Ok(())
}

/// A spec field that cannot be accepted, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

impl SpecError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Upper bound on GPUs a single job may ask for; larger values are typos.
pub const MAX_GPUS_PER_JOB: u32 = 1024;
const MAX_NAME_LEN: usize = 200;

impl JobSpec {
    /// Whether its failure raises a `job_failed` alert: not for a shell (its
    /// exit status is the last command typed, shown at the user's terminal),
    /// nor for a job that says `failure_alert: false`.
    pub fn alerts_on_failure(&self) -> bool {
        let shell = self
            .session
            .as_ref()
            .is_some_and(|s| s.kind == crate::session::SessionKind::Shell);
        !shell && self.failure_alert != Some(false)
    }

    /// Checks what can be checked without knowing the cluster.
    pub fn validate(&self) -> Result<(), SpecError> {
        match (&self.command, &self.run) {
            (Some(_), Some(_)) => {
                return Err(SpecError::new(
                    "command",
                    "give either `command` (an argument list) or `run` (a script), not both",
                ))
            }
            (None, None) => {
                return Err(SpecError::new(
                    "command",
                    "the job has no command; give `command` (e.g. gpuq submit -- python train.py) or a `run` script",
                ))
            }
            (Some(argv), None) => {
                if argv.is_empty() || argv[0].trim().is_empty() {
                    return Err(SpecError::new(
                        "command",
                        "the command is empty; give the program to run, e.g. -- python train.py",
                    ));
                }
                limits::check_argv(argv, "command")?;
            }
            (None, Some(script)) => {
                if script.trim().is_empty() {
                    return Err(SpecError::new("run", "the script is empty; give at least one command"));
                }
                if script.contains('\0') {
                    return Err(SpecError::new("run", "the script contains a NUL byte; remove it"));
                }
                // It reaches bash as one argument (`bash -e -c SCRIPT`).
                if limits::arg_size(script) > limits::MAX_ARG_STRLEN {
                    return Err(SpecError::new(
                        "run",
                        format!(
                            "the script is {}; the limit is {} (Linux's limit on one argument); put it in a file and run `bash FILE`",
                            limits::human_bytes(limits::arg_size(script)),
                            limits::human_bytes(limits::MAX_ARG_STRLEN)
                        ),
                    ));
                }
            }
        }
        if let Some(name) = &self.name {
            limits::check_label(name, "name")?;
            // Each task is named `NAME[K]`: the longest of those names must pass too.
            if let Some(last) = self.array.as_ref().and_then(|a| a.indices().last()) {
                limits::check_label(&crate::array::task_name(name, *last), "name")?;
            }
        }
        if let Some(n) = self.nodes {
            if n == 0 || n > 1024 {
                return Err(SpecError::new(
                    "nodes",
                    format!("{n} nodes: give 1 to 1024"),
                ));
            }
        }
        if self.gpus > MAX_GPUS_PER_JOB {
            return Err(SpecError::new(
                "gpus",
                format!(
                    "{} GPUs is more than any node has; the limit is {MAX_GPUS_PER_JOB}",
                    self.gpus
                ),
            ));
        }
        crate::resources::check_spec(self)?;
        limits::check_env(&self.env, limits::EnvSource::Spec)?;
        check_params(&self.params)?;
        if (self.gpu_type.is_some() || self.gpu_mem.is_some()) && self.gpus == 0 {
            return Err(SpecError::new(
                "gpus",
                "a GPU type or memory is given but no GPUs are asked for; add --gpus 1 (gpus: 1)",
            ));
        }
        if let Some(t) = &self.gpu_type {
            if t.trim().is_empty() || t.len() > MAX_NAME_LEN || t.chars().any(char::is_control) {
                return Err(SpecError::new(
                    "gpu_type",
                    "give part of a GPU model name, e.g. A100 or L4",
                ));
            }
        }
        if let Some(cwd) = &self.cwd {
            limits::check_path(cwd, "cwd")?;
        }
        if let Some(project) = &self.project {
            limits::check_label(project, "project")?;
        }
        if let (Some(sig), Some(limit)) = (&self.signal, &self.time_limit) {
            if sig.lead >= *limit {
                return Err(SpecError::new(
                    "signal",
                    format!("{sig} would come before the job starts: its lead must be shorter than the time limit {limit}"),
                ));
            }
        }
        if let Some(session) = &self.session {
            session.validate(self)?;
        }
        crate::pyenv::validate(self)?;
        if self.after.len() > limits::MAX_AFTER {
            return Err(SpecError::new(
                "after",
                format!(
                    "{} jobs; a job may wait for at most {}",
                    self.after.len(),
                    limits::MAX_AFTER
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for dep in &self.after {
            if !seen.insert(dep) {
                return Err(SpecError::new(
                    "after",
                    format!("job {dep} is listed twice"),
                ));
            }
            // Job ids are SQLite integers: a larger one names no job (and must
            // not reach a query as one).
            if *dep > i64::MAX as u64 {
                return Err(SpecError::new("after", format!("job {dep} does not exist")));
            }
        }
        Ok(())
    }

    /// The argument vector the executor runs.
    pub fn argv(&self) -> Vec<String> {
        match (&self.command, &self.run) {
            (Some(argv), _) => argv.clone(),
            (None, Some(script)) => vec!["bash".into(), "-e".into(), "-c".into(), script.clone()],
            (None, None) => Vec::new(),
        }
    }

    /// The command as one line, for listings.
    pub fn display_command(&self) -> String {
        match (&self.command, &self.run) {
            (Some(argv), _) => argv.join(" "),
            (None, Some(script)) => script
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
            (None, None) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(argv: &[&str]) -> JobSpec {
        JobSpec {
            command: Some(argv.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn accepts_a_plain_command() {
        cmd(&["python", "train.py"]).validate().unwrap();
    }

    #[test]
    fn names_the_field_of_each_mistake() {
        assert_eq!(JobSpec::default().validate().unwrap_err().field, "command");
        assert_eq!(cmd(&[""]).validate().unwrap_err().field, "command");
        let mut s = cmd(&["x"]);
        s.run = Some("echo".into());
        assert_eq!(s.validate().unwrap_err().field, "command");
        let mut s = cmd(&["x"]);
        s.env.insert("1BAD".into(), "v".into());
        assert_eq!(s.validate().unwrap_err().field, "env.1BAD");
        let mut s = cmd(&["x"]);
        s.env.insert("HUGE".into(), "x".repeat(200_000));
        assert_eq!(s.validate().unwrap_err().field, "env.HUGE");
        let mut s = cmd(&["x"]);
        s.after = vec![3, 3];
        assert_eq!(s.validate().unwrap_err().field, "after");
        let mut s = cmd(&["x"]);
        s.gpus = 5000;
        assert_eq!(s.validate().unwrap_err().field, "gpus");
        let s = JobSpec {
            run: Some("  \n".into()),
            ..Default::default()
        };
        assert_eq!(s.validate().unwrap_err().field, "run");
    }

    #[test]
    fn inputs_exec_would_refuse_are_refused_at_submit() {
        let mut s = cmd(&["x"]);
        s.env.insert("FOO".into(), "a\0b".into());
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "env.FOO");
        assert!(e.message.contains("NUL"), "{e}");
        let mut s = cmd(&["x"]);
        s.env.insert("FOO".into(), "x".repeat(2_000_000));
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("env.FOO: ") && e.contains("1.9 MiB") && e.contains("128 KiB"),
            "{e}"
        );
        let mut s = cmd(&["x"]);
        s.env = (0..100_000)
            .map(|i| (format!("V{i}"), "1".into()))
            .collect();
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "env");
        assert!(e.message.contains("100000 variables"), "{e}");
        let mut s = cmd(&["x"]);
        s.env = (0..20)
            .map(|i| (format!("V{i}"), "x".repeat(100_000)))
            .collect();
        assert!(s.validate().unwrap_err().message.contains("in all"));
        assert_eq!(cmd(&["x", "a\0"]).validate().unwrap_err().field, "command");
        let s = JobSpec {
            run: Some(format!("echo {}", "x".repeat(200_000))),
            ..Default::default()
        };
        assert!(s.validate().unwrap_err().message.contains("bash FILE"));
        let mut s = cmd(&["x"]);
        s.cwd = Some(format!("/{}", "d".repeat(5000)));
        assert_eq!(s.validate().unwrap_err().field, "cwd");
        let mut s = cmd(&["x"]);
        s.name = Some("two\nlines".into());
        assert_eq!(s.validate().unwrap_err().field, "name");
        let mut s = cmd(&["x"]);
        s.project = Some("p\0".into());
        assert_eq!(s.validate().unwrap_err().field, "project");
        let mut s = cmd(&["x"]);
        s.after = (1..=5000).collect();
        assert_eq!(s.validate().unwrap_err().field, "after");
        s.after = vec![1 << 63];
        assert_eq!(s.validate().unwrap_err().field, "after");
    }

    #[test]
    fn run_script_goes_through_bash_e() {
        let s = JobSpec {
            run: Some("echo a\necho b\n".into()),
            ..Default::default()
        };
        assert_eq!(s.argv()[..3], ["bash", "-e", "-c"]);
        assert_eq!(s.display_command(), "echo a; echo b");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = serde_json::from_str::<JobSpec>(r#"{"command":["x"],"gpu":2}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `gpu`"), "{e}");
    }
}
