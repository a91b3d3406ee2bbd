//! `gpuq submit`: flags or a spec file into a queued job.

use super::{CliError, CmdResult};
use gpuq_api::spec_file;
use gpuq_api::{Client, SubmitRequest};
use gpuq_core::{DurationSpec, Job, JobSpec, Priority};
use std::collections::BTreeMap;

#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// GPUs, all on one node.
    #[arg(long)]
    gpus: Option<u32>,
    /// Only GPUs whose model contains this, e.g. A100 or L4.
    #[arg(long)]
    gpu_type: Option<String>,
    /// Only GPUs with at least this much memory, e.g. 40G.
    #[arg(long)]
    gpu_mem: Option<String>,
    /// CPU cores reserved for the job (per node with --nodes) [default: the
    /// daemon's share per GPU; a CPU-only job reserves none and runs on the
    /// cores no job reserved].
    // Read as text and refused with the field's fix (not clap's bare "invalid digit").
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    cpus: Option<String>,
    /// Host memory reserved for the job, its limit, e.g. 64G or 512M (per node
    /// with --nodes) [default: the daemon's share per GPU or per core].
    #[arg(long, value_name = "SIZE")]
    mem: Option<String>,
    #[arg(long)]
    name: Option<String>,
    /// low, normal or high.
    #[arg(long)]
    priority: Option<String>,
    /// Times a failed attempt is retried.
    // Negative numbers are read as a value, to be refused with the fix (not
    // "unexpected argument '-1'" with a tip to pass it after `--`).
    #[arg(long, allow_negative_numbers = true, value_parser = retry_count)]
    retries: Option<u32>,
    /// Limit per attempt, e.g. 2h, 30m.
    #[arg(long)]
    time_limit: Option<String>,
    /// Time between SIGTERM and SIGKILL when stopped [default: 30s].
    #[arg(long)]
    grace: Option<String>,
    /// Send this signal first, SECONDS before the time limit (and first on preemption), e.g. USR1@90.
    #[arg(long, value_name = "SIG@SECONDS")]
    signal: Option<String>,
    /// Delay before the first retry, doubled for each further one [default: 10s].
    #[arg(long)]
    retry_delay: Option<String>,
    /// Makes a repeated submit (e.g. after a network error) return the first job instead of a new one.
    #[arg(long)]
    idempotency_key: Option<String>,
    #[arg(long)]
    project: Option<String>,
    /// Environment override, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// A hyperparameter, KEY=VALUE (repeatable): the run's param, and in GPUQ_PARAMS
    /// (numbers and true/false as such, anything else as text).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    param: Vec<String>,
    /// Working directory [default: the current directory].
    #[arg(long)]
    cwd: Option<String>,
    /// Start only after job ID succeeded (repeatable); an array's ID: all its
    /// tasks, ID.K: task K.
    #[arg(long = "after", value_name = "ID")]
    after: Vec<String>,
    /// May be stopped and requeued for higher-priority work.
    #[arg(long)]
    preemptible: bool,
    /// Nodes for a multi-node job (Slurm backend); --gpus is then per node.
    #[arg(long)]
    nodes: Option<u32>,
    /// A job array: one task per index, each with GPUQ_ARRAY_INDEX, under one id;
    /// %N runs at most N at once, e.g. 0-99%8, 1,3,5-7, 0-99:2 (every second).
    #[arg(long, value_name = "INDICES[%N]")]
    array: Option<String>,
    /// Run in a cached Python environment built from this requirements file
    /// (relative to the job's directory), with uv.
    #[arg(long, value_name = "FILE")]
    requirements: Option<String>,
    /// The environment's Python version, e.g. 3.12 (with --requirements).
    #[arg(long, value_name = "VERSION")]
    python_version: Option<String>,
    /// Run in this container image, with podman (e.g. localhost/train:1).
    // A value that looks like a flag (`--image -v/:/host`) reaches the spec's
    // check, which names the field, instead of clap's tip to put it after `--`.
    #[arg(long, value_name = "NAME", allow_hyphen_values = true)]
    image: Option<String>,
    /// Do not record the code and interpreter it is submitted from (also GPUQ_NO_REPRO=1).
    #[arg(long)]
    no_repro: bool,
    /// Print the job as JSON.
    #[arg(long)]
    pub json: bool,
    /// A spec file (job.yaml, .yml, .json), or the command and its arguments.
    /// `--` before the command is optional: everything from the command's name
    /// on is the command's, flags included.
    // No `allow_hyphen_values`: a mistyped flag before the command (`--gpu 2`)
    // must be refused with clap's "did you mean", not queued as the command; a
    // command that itself starts with `-` follows `--`.
    #[arg(trailing_var_arg = true, value_name = "SPEC.yaml | [--] CMD ARGS")]
    command: Vec<String>,
}

impl SubmitArgs {
    /// The spec: from the file if one is given, with flags on top.
    pub fn to_spec(&self) -> Result<JobSpec, CliError> {
        let mut spec = match self.command.as_slice() {
            [one] if spec_file::looks_like_spec(one) => {
                let cwd = match &self.cwd {
                    Some(c) => Some(
                        std::path::absolute(c)
                            .map_err(|e| CliError::usage(format!("--cwd {c:?}: {e}")))?
                            .to_string_lossy()
                            .into_owned(),
                    ),
                    None => None,
                };
                spec_file::load_in(std::path::Path::new(one), cwd.as_deref())
                    .map_err(CliError::usage)?
            }
            [first, rest @ ..] if spec_file::looks_like_spec(first) && !is_executable(first) => {
                return Err(CliError::usage(format!(
                    "{first}: a spec file takes nothing after it (got {}); put gpuq's flags before it, \
                     e.g. gpuq submit --gpus 2 {first}",
                    rest.join(" ")
                )));
            }
            argv => JobSpec {
                command: (!argv.is_empty()).then(|| argv.to_vec()),
                ..Default::default()
            },
        };
        if let Some(g) = self.gpus {
            spec.gpus = g;
        }
        if let Some(t) = &self.gpu_type {
            spec.gpu_type = Some(t.clone());
        }
        if let Some(m) = &self.gpu_mem {
            spec.gpu_mem = Some(
                m.parse()
                    .map_err(|e| CliError::usage(format!("--gpu-mem: {e}")))?,
            );
        }
        if let Some(c) = &self.cpus {
            spec.cpus = Some(parse_cpus(c)?);
        }
        if let Some(m) = &self.mem {
            spec.memory = Some(parse_mem(m)?);
        }
        if let Some(n) = &self.name {
            spec.name = Some(n.clone());
        }
        if let Some(p) = &self.priority {
            spec.priority = p
                .parse::<Priority>()
                .map_err(|e| CliError::usage(format!("--{e}")))?;
        }
        if let Some(r) = self.retries {
            spec.retries = r;
        }
        if let Some(t) = &self.time_limit {
            spec.time_limit = Some(parse_duration("--time-limit", t)?);
        }
        if let Some(g) = &self.grace {
            spec.grace = Some(parse_duration("--grace", g)?);
        }
        if let Some(sig) = &self.signal {
            spec.signal = Some(
                sig.parse()
                    .map_err(|e| CliError::usage(format!("--signal: {e}")))?,
            );
        }
        if let Some(d) = &self.retry_delay {
            spec.retry_delay = Some(parse_duration("--retry-delay", d)?);
        }
        if let Some(p) = &self.project {
            spec.project = Some(p.clone());
        }
        for kv in &self.env {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| CliError::usage(format!("--env {kv:?}: write it as KEY=VALUE")))?;
            spec.env.insert(k.to_string(), v.to_string());
        }
        for kv in &self.param {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                CliError::usage(format!(
                    "--param {kv:?}: write it as KEY=VALUE, e.g. --param lr=0.01"
                ))
            })?;
            spec.params.insert(k.to_string(), param_value(v));
        }
        if let Some(c) = &self.cwd {
            let abs =
                std::path::absolute(c).map_err(|e| CliError::usage(format!("--cwd {c:?}: {e}")))?;
            spec.cwd = Some(abs.to_string_lossy().into_owned());
        }
        for a in &self.after {
            // ID.K is resolved by `submit`, which asks the daemon for the task's job.
            if let gpuq_core::JobRef::Job(id) = super::arrays::parse_ref(a)
                .map_err(|e| CliError::usage(format!("--after: {}", e.message)))?
            {
                spec.after.push(id);
            }
        }
        spec.preemptible |= self.preemptible;
        if self.nodes.is_some() {
            spec.nodes = self.nodes;
        }
        if let Some(a) = &self.array {
            spec.array = Some(
                a.parse()
                    .map_err(|e| CliError::usage(format!("--array: {e}")))?,
            );
        }
        if let Some(r) = &self.requirements {
            let py = spec.python.get_or_insert_with(Default::default);
            py.requirements = Some(r.clone());
            py.project = None;
            py.inputs = None;
        }
        if let Some(v) = &self.python_version {
            spec.python.get_or_insert_with(Default::default).version = Some(v.clone());
        }
        if let Some(i) = &self.image {
            spec.image = Some(i.clone());
        }
        spec_file::read_env_inputs(&mut spec).map_err(CliError::usage)?;
        spec.validate()
            .map_err(|e| CliError::usage(e.to_string()))?;
        Ok(spec)
    }
}

/// `--cpus`: a whole number of cores (0 and too many are refused by the spec's check).
pub fn parse_cpus(text: &str) -> Result<u32, CliError> {
    text.trim().parse().map_err(|_| {
        CliError::usage(format!(
            "--cpus {text:?}: give a whole number of CPU cores, e.g. --cpus 8"
        ))
    })
}

/// `--mem`: a memory size.
pub fn parse_mem(text: &str) -> Result<gpuq_core::MemSize, CliError> {
    text.parse()
        .map_err(|e| CliError::usage(format!("--mem: {e}")))
}

/// `0.01` and `64` are numbers, `true`/`false` booleans, anything else text.
fn param_value(text: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => v,
        _ => serde_json::Value::String(text.to_string()),
    }
}

/// An executable regular file (a program named like a spec file, `./make.json`, may still be run).
pub fn is_executable(path: impl AsRef<std::path::Path>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `--retries`: a whole number, 0 or more.
fn retry_count(text: &str) -> Result<u32, String> {
    text.parse().map_err(|_| {
        format!(
            "{text} is not a count of retries: give a whole number, 0 or more (0: never retried)"
        )
    })
}

fn parse_duration(flag: &str, text: &str) -> Result<DurationSpec, CliError> {
    text.parse()
        .map_err(|e| CliError::usage(format!("{flag}: {e}")))
}

/// The submitter's directory and environment (without GPUQ_*), as a submit sends them.
pub fn submitter_context() -> Result<(String, BTreeMap<String, String>), CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| {
            CliError::usage(format!(
                "cannot read the current directory: {e}; pass --cwd"
            ))
        })?
        .to_string_lossy()
        .into_owned();
    // vars() would panic on a variable that is not UTF-8; such a one is left out, with a word.
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => Some((k, v)),
            (k, _) => {
                let name = k.unwrap_or_else(|k| k.to_string_lossy().into_owned());
                eprintln!("gpuq: warning: {name} is not UTF-8; the job does not get it");
                None
            }
        })
        .filter(|(k, _)| !k.starts_with("GPUQ_"))
        .collect();
    Ok((cwd, env))
}

/// Builds the request with the submitter's context and sends it.
pub async fn submit(client: &Client, args: &SubmitArgs) -> Result<Job, CliError> {
    let mut spec = args.to_spec()?;
    for a in &args.after {
        if let Ok(gpuq_core::JobRef::Task { array, index }) = a.parse() {
            let task = client.array_task(array, index).await.map_err(|e| {
                let e = CliError::from(e);
                CliError {
                    message: format!("--after {a}: {}", e.message),
                    ..e
                }
            })?;
            spec.after.push(task.id);
        }
    }
    let (cwd, env) = submitter_context()?;
    let repro = super::repro::capture_for(&spec, &cwd, args.no_repro);
    let req = SubmitRequest {
        spec,
        cwd,
        env,
        user: gpuq_api::home::current_user(),
        idempotency_key: args.idempotency_key.clone(),
        repro,
    };
    Ok(client.submit(&req).await?)
}

pub async fn run(client: &Client, args: SubmitArgs) -> CmdResult {
    let job = submit(client, &args).await?;
    match job.array_id {
        // An array: its id (its first task's); --json gives the array and its tasks.
        Some(array) if args.json => super::output::print_json(&client.array(array, true).await?),
        Some(array) => outln!("{array}"),
        None if args.json => super::output::print_json(&job),
        None => outln!("{}", job.id),
    }
    Ok(0)
}
