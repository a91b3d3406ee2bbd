//! `gpuq tune SPEC`: short trials of a training job over batch size, mixed
//! precision, `torch.compile`, DataLoader workers, pinned memory and
//! channels-last; the search is `gpuq_core::tune` (pure), each trial a job of
//! the queue run one at a time (so trials never share what they measure).
//! The script reads its knobs with `gpuq.tune_params()` and reports
//! `samples_per_s` (after its warm-up) with `gpuq.log`.

use super::{CliError, CmdResult};
use gpuq_api::Client;
use gpuq_core::tune::{Knobs, Outcome, Space, Tuner};
use gpuq_core::{DurationSpec, JobSpec, JobState};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// The training job's spec file (YAML or JSON), as for `gpuq submit`.
    spec: PathBuf,
    /// What to try, and the script's defaults (see docs/tune.md).
    #[arg(long)]
    space: Option<PathBuf>,
    /// Start no trial after this much time (e.g. 15m).
    #[arg(long, default_value = "15m")]
    budget: String,
    /// Cap each trial's memory (e.g. 6G): on a machine without a GPU, stands in
    /// for a GPU's memory, so that an oversized batch runs out as it would there.
    #[arg(long)]
    memory_limit: Option<String>,
    /// Where the best settings go, as a spec file (default: SPEC's name with `.tuned.yaml`).
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultsFile {
    batch_size: Option<u32>,
    amp: Option<String>,
    compile: Option<String>,
    num_workers: Option<u32>,
    pin_memory: Option<bool>,
    channels_last: Option<bool>,
}

/// One trial as reported.
#[derive(Debug, Clone, Serialize)]
struct TrialReport {
    trial: usize,
    job: u64,
    knobs: Knobs,
    outcome: Outcome,
    /// Throughput over the defaults' (when both ran).
    speedup: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    trials: Vec<TrialReport>,
    baseline_samples_per_s: Option<f64>,
    best: Option<Best>,
    /// Trials not started: the budget was spent.
    budget_spent: bool,
    out: Option<String>,
}

#[derive(Debug, Serialize)]
struct Best {
    knobs: Knobs,
    samples_per_s: f64,
    speedup: Option<f64>,
}

const OOM_MARKERS: [&str; 6] = [
    "out of memory",
    "OutOfMemoryError",
    "can't allocate memory",
    "MemoryError",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "cudaErrorMemoryAllocation",
];

fn load_space(path: Option<&Path>) -> Result<(Space, DefaultsFile), CliError> {
    let Some(path) = path else {
        return Ok((Space::default(), DefaultsFile::default()));
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("--space {}: {e}", path.display())))?;
    // The file is the space's fields, and `defaults:` (the script's own knob values).
    let bad = |e: String| CliError::usage(format!("--space {}: {e}", path.display()));
    let mut map: serde_yaml_ng::Mapping =
        serde_yaml_ng::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let defaults: DefaultsFile = match map.remove("defaults") {
        Some(v) => serde_yaml_ng::from_value(v).map_err(|e| bad(format!("defaults: {e}")))?,
        None => DefaultsFile::default(),
    };
    let space: Space = serde_yaml_ng::from_value(serde_yaml_ng::Value::Mapping(map))
        .map_err(|e| bad(e.to_string()))?;
    space.validate().map_err(bad)?;
    Ok((space, defaults))
}

/// The script's defaults: the space file's, else the spec's params, else the usual.
fn defaults(spec: &JobSpec, file: &DefaultsFile) -> Knobs {
    let p = |k: &str| spec.params.get(k);
    let int = |k: &str| p(k).and_then(|v| v.as_u64()).map(|v| v as u32);
    let text = |k: &str| p(k).and_then(|v| v.as_str()).map(str::to_string);
    let flag = |k: &str| p(k).and_then(|v| v.as_bool());
    Knobs {
        batch_size: file.batch_size.or(int("batch_size")).unwrap_or(32),
        amp: file
            .amp
            .clone()
            .or(text("amp"))
            .unwrap_or_else(|| "off".into()),
        compile: file
            .compile
            .clone()
            .or(text("compile"))
            .unwrap_or_else(|| "off".into()),
        num_workers: file.num_workers.or(int("num_workers")).unwrap_or(0),
        pin_memory: file.pin_memory.or(flag("pin_memory")).unwrap_or(false),
        channels_last: file
            .channels_last
            .or(flag("channels_last"))
            .unwrap_or(false),
    }
}

/// Plain scalars that YAML 1.1 readers (PyYAML, many tools) take for booleans:
/// `compile: off` would come back as `false` there.
const YAML11_BOOLS: [&str; 22] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF", "true", "True", "TRUE", "false", "False", "FALSE",
];

/// Quotes the string values written plain that a YAML 1.1 reader would read as
/// booleans (serde_yaml writes YAML 1.2, where `off` is a string). Real
/// booleans are `true`/`false` and stay plain; the knobs' strings are quoted.
fn quote_yaml11_words(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len() + 16);
    for line in yaml.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let value_at = body.find(": ").map(|i| i + 2).or_else(|| {
            body.trim_start()
                .starts_with("- ")
                .then(|| body.find("- ").unwrap() + 2)
        });
        match value_at {
            Some(i)
                if YAML11_BOOLS.contains(&&body[i..])
                    && !matches!(&body[i..], "true" | "false") =>
            {
                out.push_str(&body[..i]);
                out.push('"');
                out.push_str(&body[i..]);
                out.push('"');
                out.push_str(&line[body.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}

fn trial_spec(spec: &JobSpec, knobs: &Knobs, n: usize, memory: Option<u64>) -> JobSpec {
    let mut s = spec.clone();
    let v = serde_json::to_value(knobs).expect("knobs serialize");
    for (k, v) in v.as_object().expect("an object") {
        s.params.insert(k.clone(), v.clone());
    }
    s.name = Some(format!(
        "{}-tune-{n}",
        spec.name.as_deref().unwrap_or("job")
    ));
    s.retries = 0;
    s.array = None;
    if let Some(bytes) = memory {
        let argv = s.argv();
        let mut wrapped = vec!["prlimit".to_string(), format!("--as={bytes}"), "--".into()];
        wrapped.extend(argv);
        s.command = Some(wrapped);
        s.run = None;
    }
    s
}

async fn outcome(client: &Client, id: u64, state: JobState, reason: &str) -> Outcome {
    let log = super::session_args::log_text(client, id).await;
    let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(16 * 1024)..]).into_owned();
    if state != JobState::Succeeded {
        if OOM_MARKERS
            .iter()
            .any(|m| tail.contains(m) || reason.contains(m))
        {
            return Outcome::OutOfMemory;
        }
        let last = tail
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or(reason);
        return Outcome::Failed {
            why: format!("{state}: {reason}; {}", last.trim()),
        };
    }
    let Ok(m) = client.job_metrics(id, None, 10).await else {
        return Outcome::Failed {
            why: "its metrics could not be read".into(),
        };
    };
    let latest = |k: &str| {
        m.series
            .iter()
            .find(|s| s.key == k)
            .map(|s| s.latest.value.0)
    };
    match latest("samples_per_s") {
        Some(t) => Outcome::Ran {
            samples_per_s: t,
            peak_memory_mib: latest("peak_memory_mib"),
            warmup_s: latest("warmup_s"),
        },
        None => Outcome::Failed {
            why: "it logged no samples_per_s: report throughput after the warm-up with gpuq.log(step=..., samples_per_s=...)".into(),
        },
    }
}

pub async fn run(client: &Client, args: TuneArgs) -> CmdResult {
    let spec = gpuq_api::spec_file::load(&args.spec).map_err(CliError::usage)?;
    if spec.array.is_some() || spec.session.is_some() {
        return Err(CliError::usage(format!(
            "{}: tune a plain training job (not an array or a session)",
            args.spec.display()
        )));
    }
    let (space, file_defaults) = load_space(args.space.as_deref())?;
    let budget: DurationSpec = args
        .budget
        .parse()
        .map_err(|e| CliError::usage(format!("--budget: {e}")))?;
    let memory = args
        .memory_limit
        .as_deref()
        .map(|m| {
            m.parse::<gpuq_core::MemSize>()
                .map(|m| m.mib() * 1024 * 1024)
                .map_err(|e| CliError::usage(format!("--memory-limit: {e}")))
        })
        .transpose()?;
    let out_path = args.out.clone().unwrap_or_else(|| {
        let stem = args
            .spec
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("job");
        args.spec.with_file_name(format!("{stem}.tuned.yaml"))
    });
    let defaults = defaults(&spec, &file_defaults);
    let mut tuner = Tuner::new(space, defaults);
    let started = Instant::now();
    let mut longest = Duration::ZERO;
    let mut reports = Vec::new();
    let mut budget_spent = false;
    while let Some(knobs) = tuner.next_trial() {
        if started.elapsed() + longest > budget.as_std() {
            budget_spent = true;
            break;
        }
        let n = reports.len() + 1;
        let trial = trial_spec(&spec, &knobs, n, memory);
        let job = super::session_args::submit(client, trial).await?;
        let t0 = Instant::now();
        let end = loop {
            let j = client.wait(job.id, 60).await?;
            if j.state.is_terminal() {
                break j;
            }
        };
        longest = longest.max(t0.elapsed());
        let o = outcome(
            client,
            job.id,
            end.state,
            end.reason.as_deref().unwrap_or(""),
        )
        .await;
        errln!(
            "gpuq tune: trial {n} (job {}): {} -> {}",
            job.id,
            describe(&knobs),
            short(&o)
        );
        tuner.record(knobs.clone(), o.clone());
        reports.push(TrialReport {
            trial: n,
            job: job.id,
            knobs,
            outcome: o,
            speedup: None,
        });
    }
    let baseline = tuner.baseline();
    for r in &mut reports {
        r.speedup = r.outcome.throughput().zip(baseline).map(|(t, b)| t / b);
    }
    let best = tuner.best().map(|(k, t)| Best {
        knobs: k.clone(),
        samples_per_s: t,
        speedup: baseline.map(|b| t / b),
    });
    let mut written = None;
    if let Some(b) = &best {
        let tuned = {
            let mut s = spec.clone();
            for (k, v) in serde_json::to_value(&b.knobs)
                .expect("knobs")
                .as_object()
                .expect("object")
            {
                s.params.insert(k.clone(), v.clone());
            }
            s
        };
        let yaml = serde_yaml_ng::to_string(&tuned)
            .map_err(|e| CliError::failure(format!("cannot write the tuned spec: {e}")))?;
        let yaml = quote_yaml11_words(&yaml);
        let header = format!(
            "# gpuq tune of {}: {:.1} samples/s{}\n",
            args.spec.display(),
            b.samples_per_s,
            b.speedup
                .map(|s| format!(", {s:.2}x the defaults"))
                .unwrap_or_default()
        );
        gpuq_exec::layout::write_atomically(&out_path, format!("{header}{yaml}").as_bytes())
            .map_err(|e| CliError::failure(format!("cannot write {}: {e}", out_path.display())))?;
        written = Some(out_path.display().to_string());
    }
    let report = Report {
        trials: reports,
        baseline_samples_per_s: baseline,
        best,
        budget_spent,
        out: written,
    };
    if args.json {
        super::output::print_json(&report);
    } else {
        print_table(&report);
    }
    Ok(if report.best.is_some() { 0 } else { 1 })
}

fn describe(k: &Knobs) -> String {
    format!(
        "batch {} amp {} compile {} workers {} pin {} channels-last {}",
        k.batch_size, k.amp, k.compile, k.num_workers, k.pin_memory, k.channels_last
    )
}

fn short(o: &Outcome) -> String {
    match o {
        Outcome::Ran { samples_per_s, .. } => format!("{samples_per_s:.1} samples/s"),
        Outcome::OutOfMemory => "out of memory (infeasible)".into(),
        Outcome::Failed { why } => format!("failed ({why})"),
    }
}

fn print_table(r: &Report) {
    outln!(
        "{:>3} {:>6} {:>6} {:>7} {:>15} {:>7} {:>4} {:>4} {:>11} {:>9} {:>8} {:>7}",
        "#",
        "JOB",
        "BATCH",
        "AMP",
        "COMPILE",
        "WORKERS",
        "PIN",
        "CL",
        "SAMPLES/S",
        "PEAK MiB",
        "WARMUP",
        "SPEEDUP"
    );
    for t in &r.trials {
        let k = &t.knobs;
        let (tput, mem, warm) = match &t.outcome {
            Outcome::Ran {
                samples_per_s,
                peak_memory_mib,
                warmup_s,
            } => (
                format!("{samples_per_s:.1}"),
                peak_memory_mib.map_or("-".into(), |m| format!("{m:.0}")),
                warmup_s.map_or("-".into(), |w| format!("{w:.1}s")),
            ),
            Outcome::OutOfMemory => ("OOM".into(), "-".into(), "-".into()),
            Outcome::Failed { .. } => ("failed".into(), "-".into(), "-".into()),
        };
        outln!(
            "{:>3} {:>6} {:>6} {:>7} {:>15} {:>7} {:>4} {:>4} {:>11} {:>9} {:>8} {:>7}",
            t.trial,
            t.job,
            k.batch_size,
            k.amp,
            k.compile,
            k.num_workers,
            if k.pin_memory { "yes" } else { "no" },
            if k.channels_last { "yes" } else { "no" },
            tput,
            mem,
            warm,
            t.speedup.map_or("-".into(), |s| format!("{s:.2}x"))
        );
    }
    for t in &r.trials {
        if let Outcome::Failed { why } = &t.outcome {
            outln!("trial {} failed: {why}", t.trial);
        }
    }
    match &r.best {
        Some(b) => outln!(
            "best: {} at {:.1} samples/s{}{}",
            describe(&b.knobs),
            b.samples_per_s,
            b.speedup
                .map(|s| format!(" ({s:.2}x the defaults)"))
                .unwrap_or_default(),
            r.out
                .as_ref()
                .map(|o| format!("; written to {o}"))
                .unwrap_or_default()
        ),
        None => outln!("no trial ran to the end: nothing to recommend"),
    }
    if r.budget_spent {
        outln!("the budget was spent before the search ended (--budget)");
    }
}

#[cfg(test)]
mod tests {
    use super::quote_yaml11_words;

    #[test]
    fn words_a_yaml_1_1_reader_takes_for_booleans_are_quoted() {
        let text = "params:\n  amp: true\n  compile: off\n  note: offline\nargs:\n- on\n- x\n";
        assert_eq!(
            quote_yaml11_words(text),
            "params:\n  amp: true\n  compile: \"off\"\n  note: offline\nargs:\n- \"on\"\n- x\n"
        );
    }
}
