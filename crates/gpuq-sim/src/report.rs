//! Figures of a run: job completion time, queueing delay, makespan, GPU
//! allocation over time, and fairness between groups (users).

use crate::engine::Run;
use crate::trace::TraceJob;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub policy: String,
    pub cluster: String,
    pub jobs: usize,
    /// Jobs the cluster can never place (more GPUs than all its nodes of one
    /// kind): never run, not in the figures.
    pub excluded: usize,
    /// Jobs that ran on several nodes at once.
    pub multi_node_jobs: usize,
    pub jct_avg_s: f64,
    pub jct_median_s: f64,
    pub jct_p99_s: f64,
    /// Queueing: every wait of a job, before its first start and after each
    /// preemption until it runs again.
    pub wait_avg_s: f64,
    pub wait_p99_s: f64,
    pub makespan_s: f64,
    /// Mean of allocated/total GPUs over the run (sampled).
    pub allocation_avg: f64,
    /// (seconds from start, allocated/total) samples.
    pub allocation: Vec<(f64, f64)>,
    /// Jain's index over the groups' mean slowdown (JCT / duration): 1 = equal.
    pub fairness_jain: f64,
    pub groups: Vec<GroupFigures>,
    pub preemptions: u64,
    pub scheduler_passes: u64,
    /// Wall-clock seconds the replay took (set by the caller that timed it).
    pub replay_seconds: f64,
    #[serde(skip)]
    pub jcts: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupFigures {
    pub group: String,
    pub jobs: usize,
    pub gpu_hours: f64,
    pub jct_avg_s: f64,
    pub wait_avg_s: f64,
    pub slowdown_avg: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn report(trace: &[TraceJob], run: &Run, policy: &str, cluster: &str) -> Report {
    let done: Vec<(usize, &crate::engine::Outcome)> = run
        .outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((i, o.as_ref()?)))
        .collect();
    let mut jcts: Vec<f64> = done
        .iter()
        .map(|(_, o)| (o.end - o.submit) as f64 / 1000.0)
        .collect();
    let mut waits: Vec<f64> = done
        .iter()
        .map(|(_, o)| o.waited_ms as f64 / 1000.0)
        .collect();
    jcts.sort_by(f64::total_cmp);
    waits.sort_by(f64::total_cmp);
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let end = done.iter().map(|(_, o)| o.end).max().unwrap_or(0);
    let samples: Vec<(f64, f64)> = run
        .allocation
        .iter()
        .filter(|(t, _)| *t <= end)
        .map(|(t, a)| (*t as f64 / 1000.0, *a as f64 / run.total_gpus.max(1) as f64))
        .collect();
    let mut groups: BTreeMap<&str, (usize, f64, f64, f64, f64)> = BTreeMap::new();
    for (i, o) in &done {
        let g = groups.entry(trace[*i].user.as_str()).or_default();
        let jct = (o.end - o.submit) as f64 / 1000.0;
        g.0 += 1;
        g.1 += o.gpus as f64 * o.duration_ms as f64 / 3.6e6;
        g.2 += jct;
        g.3 += o.waited_ms as f64 / 1000.0;
        g.4 += jct / (o.duration_ms as f64 / 1000.0).max(1.0);
    }
    let groups: Vec<GroupFigures> = groups
        .into_iter()
        .map(|(name, (n, h, jct, wait, slow))| GroupFigures {
            group: name.to_string(),
            jobs: n,
            gpu_hours: h,
            jct_avg_s: jct / n as f64,
            wait_avg_s: wait / n as f64,
            slowdown_avg: slow / n as f64,
        })
        .collect();
    let xs: Vec<f64> = groups.iter().map(|g| g.slowdown_avg).collect();
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    Report {
        policy: policy.to_string(),
        cluster: cluster.to_string(),
        jobs: done.len(),
        excluded: run.outcomes.len() - done.len(),
        multi_node_jobs: done.iter().filter(|(_, o)| o.nodes > 1).count(),
        jct_avg_s: mean(&jcts),
        jct_median_s: percentile(&jcts, 50.0),
        jct_p99_s: percentile(&jcts, 99.0),
        wait_avg_s: mean(&waits),
        wait_p99_s: percentile(&waits, 99.0),
        makespan_s: end as f64 / 1000.0,
        allocation_avg: mean(&samples.iter().map(|s| s.1).collect::<Vec<_>>()),
        allocation: samples,
        fairness_jain: if sq > 0.0 {
            sum * sum / (xs.len() as f64 * sq)
        } else {
            1.0
        },
        groups,
        preemptions: done.iter().map(|(_, o)| o.preemptions as u64).sum(),
        scheduler_passes: run.passes,
        replay_seconds: 0.0,
        jcts,
    }
}

fn hours(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.0} s", s)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "policy {} on {} ({} jobs, {} of them on several nodes; {} that never fit the cluster left out)",
            self.policy, self.cluster, self.jobs, self.multi_node_jobs, self.excluded
        )?;
        writeln!(
            f,
            "  JCT        avg {}  median {}  p99 {}",
            hours(self.jct_avg_s),
            hours(self.jct_median_s),
            hours(self.jct_p99_s)
        )?;
        writeln!(
            f,
            "  queueing   avg {}  p99 {}",
            hours(self.wait_avg_s),
            hours(self.wait_p99_s)
        )?;
        writeln!(f, "  makespan   {}", hours(self.makespan_s))?;
        writeln!(
            f,
            "  GPUs allocated {:.1}% of the time-averaged capacity",
            self.allocation_avg * 100.0
        )?;
        writeln!(
            f,
            "  fairness (Jain's index over groups' mean slowdown) {:.3}; preemptions {}",
            self.fairness_jain, self.preemptions
        )
    }
}

/// The JCT CDFs of several runs as one SVG plot (log-scale time axis).
pub fn cdf_svg(title: &str, runs: &[(&str, &[f64])]) -> String {
    let (w, h, m) = (640.0, 400.0, 50.0);
    let lo = 1.0f64.log10();
    let hi = runs
        .iter()
        .filter_map(|(_, v)| v.last())
        .fold(10.0f64, |a, b| a.max(*b))
        .log10()
        .ceil();
    let x = |s: f64| m + (s.max(1.0).log10() - lo) / (hi - lo) * (w - 2.0 * m);
    let y = |p: f64| h - m - p * (h - 2.0 * m);
    let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{m}\" y=\"20\" font-size=\"14\">{title}</text>\n"
    );
    for decade in 0..=(hi as i32) {
        let px = x(10f64.powi(decade));
        out.push_str(&format!(
            "<line x1=\"{px:.1}\" y1=\"{}\" x2=\"{px:.1}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{px:.1}\" y=\"{}\" text-anchor=\"middle\">1e{decade} s</text>\n",
            y(0.0),
            y(1.0),
            y(0.0) + 16.0
        ));
    }
    for p in [0.0, 0.25, 0.5, 0.75, 1.0] {
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{p}</text>\n",
            m - 6.0,
            y(p) + 4.0
        ));
    }
    for (i, (name, values)) in runs.iter().enumerate() {
        let n = values.len().max(1) as f64;
        let step = (values.len() / 400).max(1);
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .step_by(step)
            .map(|(k, v)| format!("{:.1},{:.1}", x(*v), y((k + 1) as f64 / n)))
            .collect();
        let c = colours[i % colours.len()];
        out.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n",
            points.join(" ")
        ));
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{c}\">{name}</text>\n",
            w - m - 120.0,
            m + 16.0 * i as f64 + 20.0
        ));
    }
    out.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">job completion time</text>\n</svg>\n",
        w / 2.0,
        h - 8.0
    ));
    out
}
