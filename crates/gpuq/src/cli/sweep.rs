//! `gpuq sweep FILE` starts a sweep and prints its id; `gpuq sweep ls`,
//! `gpuq sweep show ID`, `gpuq sweep cancel ID`.

use super::output::{ago, fixed, print_json, print_table, shorten};
use super::{CliError, CmdResult};
use gpuq_api::sweep::{SweepDetail, SweepRequest, SweepSummary};
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct SweepArgs {
    /// A sweep file (YAML: a job's fields plus parameters, metric, searcher,
    /// budget; see docs/sweeps.md), or `ls`, `show ID`, `cancel ID`.
    #[arg(required = true, num_args = 1..=2, value_name = "FILE | ls | show ID | cancel ID")]
    what: Vec<String>,
    /// Do not record the code (git) and interpreter the trials are submitted from.
    #[arg(long)]
    no_repro: bool,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

/// What the words ask for, checked before any daemon is reached (or started).
enum Asked<'a> {
    List,
    Show(i64),
    Cancel(i64),
    Create(&'a str),
}

fn asked(words: &[String]) -> Result<Asked<'_>, CliError> {
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["ls"] => Ok(Asked::List),
        ["show", id] => Ok(Asked::Show(sweep_id(id)?)),
        ["cancel", id] => Ok(Asked::Cancel(sweep_id(id)?)),
        ["show" | "cancel"] => Err(CliError::usage(format!(
            "gpuq sweep {}: give the sweep's id (see gpuq sweep ls)",
            words[0]
        ))),
        [file] => Ok(Asked::Create(file)),
        _ => Err(CliError::usage(
            "gpuq sweep takes a sweep file, or ls, show ID, cancel ID",
        )),
    }
}

/// Refuses malformed words before a client connects.
pub fn check(args: &SweepArgs) -> Result<(), CliError> {
    asked(&args.what).map(drop)
}

fn sweep_id(raw: &str) -> Result<i64, CliError> {
    raw.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
        CliError::usage(format!(
            "{raw:?} is not a sweep id; ids are numbers (see gpuq sweep ls)"
        ))
    })
}

pub async fn run(client: &Client, args: SweepArgs) -> CmdResult {
    match asked(&args.what)? {
        Asked::List => list(client, args.json).await,
        Asked::Show(id) => show(client, id, args.json).await,
        Asked::Cancel(id) => {
            let detail = client.cancel_sweep(id).await?;
            if args.json {
                print_json(&detail);
            } else {
                outln!(
                    "cancelled sweep {} ({})",
                    detail.summary.id,
                    detail.summary.name
                );
            }
            Ok(0)
        }
        Asked::Create(file) => create(client, file, args.no_repro, args.json).await,
    }
}

async fn create(client: &Client, file: &str, no_repro: bool, json: bool) -> CmdResult {
    let path = std::path::Path::new(file);
    if !path.exists() {
        return Err(CliError::usage(format!(
            "{file}: no such sweep file (or say ls, show ID or cancel ID)"
        )));
    }
    let text = gpuq_api::spec_file::read(path).map_err(CliError::usage)?;
    let parsed = gpuq_api::sweep::parse_sweep_file(&text)
        .map_err(|e| CliError::usage(format!("{file}: {e}")))?;
    let (cwd, env) = super::submit::submitter_context()?;
    let repro = super::repro::capture_for(&parsed.spec, &cwd, no_repro);
    let req = SweepRequest {
        spec: parsed.spec,
        sweep: parsed.sweep,
        budget: parsed.budget,
        seed: parsed.seed,
        cwd,
        env,
        user: gpuq_api::home::current_user(),
        repro,
    };
    let detail = client.create_sweep(&req).await?;
    if json {
        print_json(&detail);
    } else {
        outln!("{}", detail.summary.id);
    }
    Ok(0)
}

fn value_text(v: Option<gpuq_api::tracking::MetricValue>) -> String {
    match v {
        Some(v) if v.0.is_finite() => format!("{:.4}", v.0),
        Some(v) => format!("{}", v.0),
        None => "-".into(),
    }
}

fn used_text(s: &SweepSummary) -> String {
    let mut used = format!("{} GPU-h", fixed(s.used.gpu_hours, 3));
    if let Some(d) = s.used.dollars {
        used.push_str(&format!(", ${}", fixed(d, 2)));
    }
    if let Some(b) = &s.budget {
        used.push_str(&format!(" of {b}"));
    }
    used
}

async fn list(client: &Client, json: bool) -> CmdResult {
    let sweeps = client.sweeps().await?;
    if json {
        print_json(&sweeps);
        return Ok(0);
    }
    let now = gpuq_api::home::now_ms();
    let rows: Vec<Vec<String>> = sweeps
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                shorten(&s.name, 24),
                s.user.clone(),
                s.state.clone(),
                format!("{:?}", s.searcher).to_lowercase(),
                format!("{}/{}", s.trial_count, s.max_trials),
                s.best
                    .as_ref()
                    .map(|b| format!("{} (trial {})", value_text(Some(b.value)), b.trial))
                    .unwrap_or_else(|| "-".into()),
                used_text(s),
                ago(s.created_at, now),
            ]
        })
        .collect();
    print_table(
        &[
            "ID", "NAME", "USER", "STATE", "SEARCHER", "TRIALS", "BEST", "USED", "CREATED",
        ],
        &rows,
    );
    Ok(0)
}

async fn show(client: &Client, id: i64, json: bool) -> CmdResult {
    let d = client.sweep(id).await?;
    if json {
        print_json(&d);
        return Ok(0);
    }
    print_detail(&d);
    Ok(0)
}

fn print_detail(d: &SweepDetail) {
    let s = &d.summary;
    let goal = format!("{:?}", s.metric.goal).to_lowercase();
    outln!("sweep {}: {} ({})", s.id, s.name, s.state);
    if let Some(r) = &s.reason {
        outln!("  {r}");
    }
    outln!(
        "searcher {} · {} {} · rungs at steps {} · {} of {} trials · at most {} at once · seed {}",
        format!("{:?}", s.searcher).to_lowercase(),
        goal,
        s.metric.name,
        d.rungs
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        s.trial_count,
        s.max_trials,
        d.max_concurrent,
        d.seed
    );
    outln!("used {}", used_text(s));
    if let Some(b) = &s.best {
        outln!(
            "best: trial {} (job {}), {} = {} at step {}",
            b.trial,
            b.job,
            s.metric.name,
            value_text(Some(b.value)),
            b.step
        );
    }
    outln!(
        "tracking: run {} in experiment {}",
        d.run_id,
        d.experiment_id
    );
    outln!();
    let rows: Vec<Vec<String>> = d
        .trials
        .iter()
        .map(|t| {
            let params = t
                .params
                .iter()
                .map(|(k, v)| format!("{k}={}", param_short(v)))
                .collect::<Vec<_>>()
                .join(" ");
            vec![
                t.trial.to_string(),
                t.job.to_string(),
                t.state.clone(),
                format!("{} ({})", t.rung, t.rung_step),
                t.last_step
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                value_text(t.last_value),
                fixed(t.gpu_hours, 3),
                t.cost
                    .map(|c| format!("${}", fixed(c, 2)))
                    .unwrap_or_else(|| "-".into()),
                params,
            ]
        })
        .collect();
    print_table(
        &[
            "TRIAL",
            "JOB",
            "STATE",
            "RUNG",
            "STEP",
            &s.metric.name,
            "GPU-H",
            "COST",
            "PARAMS",
        ],
        &rows,
    );
}

/// A parameter's value, short: floats to 4 significant digits.
fn param_short(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            format!("{x:.4e}")
                .parse::<f64>()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| x.to_string())
        }
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
