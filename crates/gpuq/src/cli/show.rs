//! `gpuq show`: everything about one job.

use super::arrays::{array_shape, target, Target};
use super::output::{ago, colour_enabled, field, gpu_list, paint_state, print_json, span};
use super::CmdResult;
use gpuq_api::arrays::ArrayDetail;
use gpuq_api::home::now_ms;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    id: String,
    #[arg(long)]
    json: bool,
    /// What the job was submitted from (commit, diff, Python, packages, environment) and ran on.
    #[arg(long)]
    repro: bool,
    /// With --repro: print the captured diff as it is (`| git apply` applies it).
    #[arg(long, requires = "repro")]
    diff: bool,
}

pub async fn run(client: &Client, args: ShowArgs) -> CmdResult {
    // `--repro` is about one job: an array's id is its first task there.
    let id = match (target(client, &args.id).await?, args.repro) {
        (Target::Job(id), _) => id,
        (Target::Array(a), true) => a.id,
        (Target::Array(a), false) => return show_array(client, a.id, args.json).await,
    };
    if args.repro {
        return super::show_repro::run(client, id, args.json, args.diff).await;
    }
    let detail = client.job(id).await?;
    if args.json {
        print_json(&detail);
        return Ok(0);
    }
    let j = &detail.job;
    let now = now_ms();
    // One line per field, whatever the value holds (see `output::field`).
    let row = |k: &str, v: String| outln!("{k:<12} {}", field(&v));
    row(
        "job",
        format!(
            "{}{}",
            j.id,
            j.name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ),
    );
    row(
        "state",
        paint_state(j.state, colour_enabled())
            + &j.reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default(),
    );
    row(
        "user",
        j.user.clone()
            + &j.project
                .as_ref()
                .map(|p| format!("  project {p}"))
                .unwrap_or_default(),
    );
    if let (Some(array), Some(index)) = (j.array_id, j.array_index) {
        let a = client.array(array, false).await?;
        row(
            "array",
            format!(
                "task {index} of array {array}: {}; {} (gpuq show {array})",
                array_shape(&a),
                a.counts_text()
            ),
        );
    }
    row("command", j.command.clone());
    row("cwd", j.cwd.clone());
    row(
        "gpus",
        format!(
            "{} requested{}",
            j.gpus_requested,
            if j.gpus.is_empty() {
                String::new()
            } else {
                format!(
                    ", got [{}] on {}",
                    gpu_list(&j.gpus),
                    j.node.as_deref().unwrap_or("?")
                )
            }
        ),
    );
    if let Some(r) = &detail.resources {
        row("reserved", reserved_line(r, &j.spec));
    }
    if let Some(m) = detail.memory_limit_mib.filter(|&m| m > 0) {
        let reserved = detail.resources.is_some_and(|r| r.memory_mib > 0);
        row(
            "mem limit",
            format!(
                "{}{}",
                gpuq_core::resources::mib_text(m),
                if reserved {
                    ""
                } else {
                    " (a cap, not reserved: ask for memory with --mem)"
                }
            ),
        );
    }
    row("priority", j.priority.to_string());
    let limits = [
        j.spec.time_limit.map(|t| format!("time limit {t}")),
        Some(format!(
            "retries {} ({} used)",
            j.spec.retries,
            j.failures.min(j.spec.retries)
        )),
        j.spec.grace.map(|g| format!("grace {g}")),
        j.spec.signal.map(|s| format!("early signal {s}")),
        j.spec.preemptible.then(|| "preemptible".to_string()),
    ];
    row(
        "policy",
        limits.into_iter().flatten().collect::<Vec<_>>().join(", "),
    );
    if !j.spec.after.is_empty() {
        row(
            "after",
            j.spec
                .after
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    if let Some(by) = &j.held_by {
        row("held", format!("by {by} (gpuq release {})", j.id));
    }
    if let Some(at) = j
        .eligible_at
        .filter(|&t| t > now && j.state == gpuq_core::JobState::Queued)
    {
        row("next try", format!("in {}", span(at - now)));
    }
    row("submitted", ago(j.submitted_at, now));
    row(
        "cost",
        match (j.cost, j.state) {
            (Some(c), gpuq_core::JobState::Running) => {
                format!("{c} so far (gpuq advise {} for cheaper options)", j.id)
            }
            (Some(c), _) => format!("{c} (gpuq advise {} for cheaper options)", j.id),
            (None, _) if j.attempt == 0 => "-".into(),
            (None, _) => "no price for its node ([cost] in gpuq.toml)".into(),
        },
    );
    if let Some(u) = &detail.gpu_usage {
        row("gpu usage", gpu_usage_line(u));
    }
    // Memory and CPU as the latest confined attempt's cgroup counted them.
    if let Some(a) = detail
        .attempts
        .iter()
        .rev()
        .find(|a| a.host_usage.is_some())
    {
        let h = a.host_usage.as_ref().expect("found above");
        let of = if a.attempt == j.attempt {
            String::new()
        } else {
            format!(" (attempt {})", a.attempt)
        };
        if let Some(m) = gpuq_core::advice::memory_words(h, j.spec.memory.is_some()) {
            row("memory", m + &of);
        }
        // A running attempt's average is over its time so far.
        let wall = Some((a.ended_at.unwrap_or(now) - a.started_at).max(0) as f64 / 1000.0);
        if let Some(c) = gpuq_core::advice::cpu_words(h, wall) {
            row("cpu", c + &of);
        }
    }
    // Metrics over a limit of the daemon's: say how many were dropped, and why.
    if let Ok(m) = client.job_metrics(id, None, 2).await {
        let dropped = super::metrics::dropped_lines(&m.dropped);
        if !dropped.is_empty() {
            row(
                "metrics",
                format!("{} (gpuq metrics {id})", dropped.join(", ")),
            );
        }
    }
    if let Some(code) = j.exit_code {
        row("exit code", code.to_string());
    }
    if !detail.attempts.is_empty() {
        outln!("attempts:");
        for a in &detail.attempts {
            let took = a
                .ended_at
                .map(|e| span(e - a.started_at))
                .unwrap_or_else(|| format!("running for {}", span(now - a.started_at)));
            outln!(
                "  #{:<3} gpus [{}]  started {}  {}  {}",
                a.attempt,
                gpu_list(&a.gpus),
                ago(a.started_at, now),
                took,
                field(a.reason.as_deref().unwrap_or(""))
            );
        }
    }
    outln!("history:");
    for e in &detail.events {
        outln!(
            "  {:>10}  {:<17} {}",
            ago(e.at, now),
            e.kind,
            field(&e.detail)
        );
    }
    Ok(0)
}

/// `gpuq show ID` for an array: the array, its tasks counted, and which indices are in which state.
async fn show_array(client: &Client, id: u64, json: bool) -> CmdResult {
    let a: ArrayDetail = client.array(id, true).await?;
    if json {
        print_json(&a);
        return Ok(0);
    }
    let now = now_ms();
    // One line per field, whatever the value holds (see `output::field`).
    let row = |k: &str, v: String| outln!("{k:<12} {}", field(&v));
    row(
        "array",
        format!(
            "{id}{}",
            a.name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ),
    );
    row("state", paint_state(a.state(), colour_enabled()));
    row("tasks", format!("{}; {}", array_shape(&a), a.counts_text()));
    row(
        "user",
        a.user.clone()
            + &a.project
                .as_ref()
                .map(|p| format!("  project {p}"))
                .unwrap_or_default(),
    );
    row("command", a.command.clone());
    row("submitted", ago(a.submitted_at, now));
    let tasks = a.tasks.clone().unwrap_or_default();
    let mut by_state: Vec<(gpuq_core::JobState, Vec<u32>)> = Vec::new();
    for t in &tasks {
        let k = t.array_index.unwrap_or_default();
        match by_state.iter_mut().find(|(s, _)| *s == t.state) {
            Some((_, v)) => v.push(k),
            None => by_state.push((t.state, vec![k])),
        }
    }
    by_state.sort_by_key(|(s, _)| gpuq_core::JobState::ALL.iter().position(|x| x == s));
    for (state, indices) in by_state {
        row(
            state.as_str(),
            match indices.as_slice() {
                [k] => format!("{id}.{k}"),
                many => format!("{id}.[{}]", gpuq_core::array::compact(many)),
            },
        );
    }
    let failed: Vec<&gpuq_core::Job> = tasks
        .iter()
        .filter(|t| {
            matches!(
                t.state,
                gpuq_core::JobState::Failed | gpuq_core::JobState::Lost
            )
        })
        .take(5)
        .collect();
    for t in &failed {
        row(
            "",
            format!(
                "{}: {}",
                t.reference(),
                t.reason.as_deref().unwrap_or("failed")
            ),
        );
    }
    outln!("gpuq ls {id} lists the tasks; gpuq show {id}.K shows task K");
    Ok(0)
}

/// "8 cores (asked), 64 GiB (default)", "no cores of its own (it runs on the
/// unreserved ones), no reserved memory".
fn reserved_line(r: &gpuq_core::JobResources, spec: &gpuq_core::JobSpec) -> String {
    let how = |asked: bool| if asked { " (asked)" } else { " (default)" };
    let cores = match r.cpus {
        0 => "no cores of its own (it runs on the unreserved ones)".to_string(),
        n => gpuq_core::plural(n.into(), "core") + how(spec.cpus.is_some()),
    };
    let memory = match r.memory_mib {
        0 => "no reserved memory".to_string(),
        m => gpuq_core::resources::mib_text(m) + how(spec.memory.is_some()),
    };
    let per_node = if spec.nodes.unwrap_or(1) > 1 {
        " on each node"
    } else {
        ""
    };
    format!("{cores}, {memory}{per_node}")
}

/// "2.5 GPU-h, util 37% avg / 98% peak, peak memory 20480 MiB, energy 1.2 kWh"
fn gpu_usage_line(u: &gpuq_core::telemetry::JobGpuUsage) -> String {
    let mut parts = vec![if u.gpu_seconds >= 3600.0 {
        format!("{:.2} GPU-h", u.gpu_seconds / 3600.0)
    } else {
        format!("{:.0} GPU-s", u.gpu_seconds)
    }];
    if let (Some(avg), Some(peak)) = (u.util_avg_percent, u.util_peak_percent) {
        parts.push(format!("util {avg:.0}% avg / {peak:.0}% peak"));
    }
    if let Some(m) = u.memory_peak_mib {
        parts.push(format!("peak memory {m} MiB"));
    }
    if let Some(e) = u.energy_j {
        parts.push(if e >= 3.6e6 {
            format!("energy {:.2} kWh", e / 3.6e6)
        } else if e >= 3600.0 {
            format!("energy {:.1} Wh", e / 3600.0)
        } else {
            format!("energy {e:.0} J")
        });
    }
    parts.join(", ")
}
