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
    /// What-if settings (TOML): cluster, policy, user_max_gpus, fair_share_half_life, restart_penalty.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Write the JCT CDF of the run(s) as SVG here.
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
    /// Evaluate the spot policies on a spot-availability trace directory instead.
    #[arg(long)]
    spot: Option<std::path::PathBuf>,
    /// Replay ASHA, random and grid search over a learning-curves file instead (JSON lines, see bench/sweep/README.md).
    #[arg(long, value_name = "CURVES", conflicts_with_all = ["trace", "spot"])]
    sweep: Option<std::path::PathBuf>,
    #[arg(long)]
    json: bool,
    // Last: its help heading holds for every argument after it.
    #[command(flatten)]
    sweep_args: sweep::SweepArgs,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WhatIf {
    cluster: Option<String>,
    policy: Option<String>,
    user_max_gpus: Option<u32>,
    fair_share_half_life: Option<gpuq_core::DurationSpec>,
    restart_penalty: Option<gpuq_core::DurationSpec>,
}

pub fn run(args: SimArgs) -> CmdResult {
    if let Some(curves) = &args.sweep {
        return sweep::run(curves, &args.sweep_args, args.json);
    }
    if let Some(dir) = &args.spot {
        let report =
            gpuq_sim::spot::evaluate(dir).map_err(|e| CliError::usage(format!("--spot: {e}")))?;
        if args.json {
            outln!(
                "{}",
                serde_json::to_string_pretty(&report).expect("report serializes")
            );
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
        vec![policy_text
            .parse()
            .map_err(|e: String| CliError::usage(format!("--policy: {e}")))?]
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
        outln!(
            "{}",
            serde_json::to_string_pretty(&value.expect("report serializes")).expect("json")
        );
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
