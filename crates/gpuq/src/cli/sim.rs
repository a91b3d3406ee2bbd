//! `gpuq sim TRACE`: replay a job trace through the scheduler core on a virtual
//! clock (no daemon), or `--spot DIR`: the spot-versus-on-demand evaluation,
//! or `--sweep CURVES`: the sweep searchers over recorded learning curves.

mod sweep;

use super::{CliError, CmdResult};
use gpuq_sim::{PolicyName, SimOptions};
use serde::Deserialize;

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// A trace: Philly's CSV, or gpuq's (CSV with submit,duration,gpus,user,priority,preemptible, or JSON lines).
    trace: Option<std::path::PathBuf>,
    /// Kinds of node, COUNTxGPUS[:MODEL] each, comma-separated (16x4,
    /// 617x8:V100,518x2:T4,54x4,24x1), or a cluster file (.csv: count,gpus,model,memory_mib,interconnect).
    #[arg(long, default_value = "16x4")]
    cluster: String,
    /// fifo, gpuq, sjf-oracle (knows durations: a bound) or tiresias; `all` compares them.
    #[arg(long, default_value = "gpuq")]
    policy: String,
    /// What-if settings (TOML): cluster, policy, user_max_gpus, fair_share_half_life, restart_penalty, las_quantum, las_promote_knob.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Write the JCT CDF of the run(s) as SVG here.
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
    /// Evaluate the spot policies on a spot data directory instead (zones.csv
    /// and <zone>.csv per zone; see docs/simulator.md).
    #[arg(long, value_name = "DIR")]
    spot: Option<std::path::PathBuf>,
    /// Convert a `<zone>_<device>.csv` + price-JSON directory into the spot
    /// data format (needs --on-demand-per-hour).
    #[arg(long, num_args = 2, value_names = ["SRC", "OUT"], conflicts_with_all = ["trace", "spot"])]
    spot_convert: Option<Vec<std::path::PathBuf>>,
    #[command(flatten)]
    spot_args: SpotArgs,
    /// Replay ASHA, random and grid search over a learning-curves file instead (JSON lines, see bench/sweep/README.md).
    #[arg(long, value_name = "CURVES", conflicts_with_all = ["trace", "spot"])]
    sweep: Option<std::path::PathBuf>,
    #[arg(long)]
    json: bool,
    // Last: its help heading holds for every argument after it.
    #[command(flatten)]
    sweep_args: sweep::SweepArgs,
}

#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Spot (--spot, --spot-convert)")]
pub struct SpotArgs {
    /// Zones to use, comma-separated (default: all of zones.csv).
    #[arg(long, value_delimiter = ',')]
    zones: Vec<String>,
    /// Work of the job (39.94h, 90m, 3600s; a bare number is hours).
    #[arg(long)]
    work: Option<String>,
    /// Deadline from the job's start (59.91h), or a multiple of the work (1.5x).
    #[arg(long)]
    deadline: Option<String>,
    /// Restart overhead of every instance start.
    #[arg(long, default_value = "0.2h")]
    restart: String,
    /// Checkpoint size, GB, moved on every change of zone.
    #[arg(long, default_value_t = 0.0)]
    checkpoint_gb: f64,
    /// Dollars per GB moved between two zones.
    #[arg(long, default_value_t = 0.0)]
    transfer_per_gb: f64,
    /// Number of windows, evenly spaced over the span that leaves room for the deadline.
    #[arg(long, conflicts_with = "start")]
    windows: Option<usize>,
    /// Window starts, hours after the data's first row (179.7h,299.5h,...).
    #[arg(long, value_delimiter = ',')]
    start: Vec<String>,
    /// A published results file (SkyNomad artifact's CSV columns) to set beside ours.
    #[arg(long)]
    published: Option<std::path::PathBuf>,
    /// --spot-convert: the on-demand price to write for every zone, dollars per hour.
    #[arg(long)]
    on_demand_per_hour: Option<f64>,
    /// --spot-convert: seconds per row (default: the first step of the rows).
    #[arg(long)]
    tick: Option<f64>,
}

/// Hours of `39.94h`, `90m`, `3600s` or a bare number of hours.
fn hours(flag: &str, s: &str) -> Result<f64, CliError> {
    let t = s.trim();
    let (num, scale) = if let Some(x) = t.strip_suffix('h') {
        (x, 1.0)
    } else if let Some(x) = t.strip_suffix('m') {
        (x, 1.0 / 60.0)
    } else if let Some(x) = t.strip_suffix('s') {
        (x, 1.0 / 3600.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(CliError::usage(format!(
            "{flag} {s:?}: expected a duration such as 39.94h, 90m or 3600s"
        ))),
    }
}

fn spot_setting(a: &SpotArgs) -> Result<gpuq_sim::spot::SpotSetting, CliError> {
    use gpuq_sim::spot::{SpotSetting, Windows};
    let work = a
        .work
        .as_deref()
        .ok_or_else(|| CliError::usage("--spot needs --work (e.g. --work 39.94h)"))?;
    let work_h = hours("--work", work)?;
    if work_h <= 0.0 {
        return Err(CliError::usage("--work must be more than 0"));
    }
    let deadline = a.deadline.as_deref().ok_or_else(|| {
        CliError::usage("--spot needs --deadline (e.g. --deadline 59.91h or --deadline 1.5x)")
    })?;
    let deadline_h = match deadline.trim().strip_suffix('x') {
        Some(r) => match r.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => r * work_h,
            _ => {
                return Err(CliError::usage(format!(
                    "--deadline {deadline:?}: expected a ratio such as 1.5x"
                )))
            }
        },
        None => hours("--deadline", deadline)?,
    };
    let windows = if a.start.is_empty() {
        Windows::Count(a.windows.unwrap_or(5))
    } else {
        Windows::StartsH(
            a.start
                .iter()
                .map(|s| hours("--start", s))
                .collect::<Result<_, _>>()?,
        )
    };
    for (flag, v) in [
        ("--checkpoint-gb", a.checkpoint_gb),
        ("--transfer-per-gb", a.transfer_per_gb),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(CliError::usage(format!(
                "{flag} {v}: expected a number >= 0"
            )));
        }
    }
    Ok(SpotSetting {
        zones: a.zones.clone(),
        work_h,
        deadline_h,
        restart_h: hours("--restart", &a.restart)?,
        checkpoint_gb: a.checkpoint_gb,
        transfer_per_gb: a.transfer_per_gb,
        windows,
        published: a.published.clone(),
    })
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WhatIf {
    cluster: Option<String>,
    policy: Option<String>,
    user_max_gpus: Option<u32>,
    fair_share_half_life: Option<gpuq_core::DurationSpec>,
    restart_penalty: Option<gpuq_core::DurationSpec>,
    /// Tiresias: how long a (re)started job keeps its GPUs before it can be preempted.
    las_quantum: Option<gpuq_core::DurationSpec>,
    /// Tiresias's PROMOTEKNOB (0: never promote).
    las_promote_knob: Option<f64>,
}

pub fn run(args: SimArgs) -> CmdResult {
    if let Some(curves) = &args.sweep {
        return sweep::run(curves, &args.sweep_args, args.json);
    }
    if let Some(paths) = &args.spot_convert {
        let od = args.spot_args.on_demand_per_hour.ok_or_else(|| {
            CliError::usage(
                "--spot-convert needs --on-demand-per-hour (the source layout has no on-demand price)",
            )
        })?;
        let c = gpuq_sim::spot::convert(&paths[0], &paths[1], od, args.spot_args.tick)
            .map_err(|e| CliError::usage(format!("--spot-convert: {e}")))?;
        if args.json {
            super::output::print_json(&c);
        } else {
            outln!(
                "wrote {} zones ({}) of {} rows at a {} s tick into {} (source steps: {} s min, {} s median, {} s max)",
                c.zones.len(),
                c.zones.join(", "),
                c.rows,
                c.tick_s,
                paths[1].display(),
                c.source_steps_s.0,
                c.source_steps_s.1,
                c.source_steps_s.2
            );
        }
        return Ok(0);
    }
    if let Some(dir) = &args.spot {
        let setting = spot_setting(&args.spot_args)?;
        let report = gpuq_sim::spot::evaluate(dir, &setting)
            .map_err(|e| CliError::usage(format!("--spot: {e}")))?;
        if args.json {
            super::output::print_json(&report);
        } else {
            out!("{report}");
        }
        return Ok(0);
    }
    let path = args.trace.as_ref().ok_or_else(|| {
        CliError::usage("give a trace file (gpuq sim TRACE), or --spot DIR, or --sweep CURVES")
    })?;
    let what_if: WhatIf = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| CliError::usage(format!("--config {}: {e}", p.display())))?;
            toml::from_str(&text)
                .map_err(|e| CliError::usage(format!("--config {}: {e}", p.display())))?
        }
        None => WhatIf::default(),
    };
    if let Some(k) = what_if
        .las_promote_knob
        .filter(|k| !(k.is_finite() && *k >= 0.0))
    {
        return Err(CliError::usage(format!(
            "--config: las_promote_knob = {k}: write a number ≥ 0 (0: never promote; Tiresias's default 8)"
        )));
    }
    let cluster = what_if
        .cluster
        .clone()
        .unwrap_or_else(|| args.cluster.clone());
    let shape =
        gpuq_sim::Cluster::from_arg(&cluster).map_err(|e| CliError::usage(e.to_string()))?;
    let policy_text = what_if
        .policy
        .clone()
        .unwrap_or_else(|| args.policy.clone());
    let policies: Vec<PolicyName> = if policy_text == "all" {
        vec![
            PolicyName::Fifo,
            PolicyName::Gpuq,
            PolicyName::SjfOracle,
            PolicyName::Tiresias,
        ]
    } else {
        vec![policy_text.parse().map_err(|_: String| {
            CliError::usage(format!(
                "--policy {policy_text:?}: use fifo, gpuq, sjf-oracle, tiresias, or all to compare them"
            ))
        })?]
    };
    let trace = gpuq_sim::read_trace(path).map_err(|e| CliError::usage(e.to_string()))?;
    let mut reports = Vec::new();
    for policy in policies {
        let mut opts = SimOptions {
            cluster: shape.clone(),
            policy,
            user_max_gpus: what_if.user_max_gpus,
            ..Default::default()
        };
        if let Some(h) = what_if.fair_share_half_life {
            opts.half_life_s = h.as_millis() as f64 / 1000.0;
        }
        if let Some(p) = what_if.restart_penalty {
            opts.restart_penalty_s = p.as_millis() as f64 / 1000.0;
        }
        if let Some(q) = what_if.las_quantum {
            opts.las_quantum_s = q.as_millis() as f64 / 1000.0;
        }
        if let Some(k) = what_if.las_promote_knob {
            opts.las_promote_knob = k;
        }
        let started = std::time::Instant::now();
        let run = gpuq_sim::run(&trace, &opts);
        let elapsed = started.elapsed();
        let mut report = gpuq_sim::report(&trace, &run, policy.as_str(), &cluster);
        report.replay_seconds = elapsed.as_secs_f64();
        if !args.json {
            out!("{report}");
            outln!(
                "  replayed in {:.2} s ({} scheduler passes)",
                elapsed.as_secs_f64(),
                report.scheduler_passes
            );
        }
        reports.push(report);
    }
    if args.json {
        let value = if reports.len() == 1 {
            serde_json::to_value(&reports[0])
        } else {
            serde_json::to_value(&reports)
        };
        super::output::print_json(&value.expect("report serializes"));
    }
    if let Some(svg) = &args.svg {
        let runs: Vec<(&str, &[f64])> = reports
            .iter()
            .map(|r| (r.policy.as_str(), r.jcts.as_slice()))
            .collect();
        let title = format!(
            "JCT CDF: {} on {cluster}",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("trace")
        );
        std::fs::write(svg, gpuq_sim::cdf_svg(&title, &runs))
            .map_err(|e| CliError::failure(format!("cannot write {}: {e}", svg.display())))?;
    }
    Ok(0)
}
