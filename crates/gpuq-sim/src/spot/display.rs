//! The evaluation as Markdown tables.

use super::{SpotReport, WINDOW_BOUND};
use std::fmt;

fn ratio(c: f64, o: f64) -> String {
    if c.is_nan() {
        return "-".into();
    }
    format!("{c:.2} ({:.2}x)", c / o)
}

impl fmt::Display for SpotReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.setting;
        let d = &self.data;
        writeln!(
            f,
            "Spot vs on-demand: {:.3} h of work, deadline {:.3} h ({:.2}x the work, {} ticks of {} s), restart {} h, checkpoint {} GB at ${}/GB between zones; {} windows.",
            s.work_h,
            s.deadline_h,
            s.deadline_h / s.work_h,
            self.window_ticks,
            d.tick_s,
            s.restart_h,
            s.checkpoint_gb,
            s.transfer_per_gb,
            self.windows.len()
        )?;
        let zones: Vec<String> = d
            .zones
            .iter()
            .zip(&d.on_demand_per_h)
            .zip(&d.availability)
            .map(|((z, od), a)| format!("{z} (on-demand ${od}/h, spot up {:.1}%)", a * 100.0))
            .collect();
        writeln!(f, "Zones: {}; {} rows per zone.", zones.join(", "), d.rows)?;
        writeln!(f)?;
        writeln!(
            f,
            "Per window on all zones, dollars (times the optimum); Uniform Progress is the cheapest zone's in that window:"
        )?;
        writeln!(f)?;
        writeln!(f, "| window | start h | optimum | slack_aware | greedy | Uniform Progress (zone) | on-demand |")?;
        writeln!(f, "|---:|---:|---:|---:|---:|---|---:|")?;
        for (k, w) in self.windows.iter().enumerate() {
            writeln!(
                f,
                "| {k} | {:.3} | {:.2} | {} | {} | {} ({}) | {} |",
                w.start_h,
                w.optimum,
                ratio(w.slack_aware, w.optimum),
                ratio(w.greedy, w.optimum),
                ratio(w.uniform_progress, w.optimum),
                w.uniform_progress_zone,
                ratio(w.on_demand, w.optimum),
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Per policy and zone set (x: over the optimum of the same zones; means per window):"
        )?;
        writeln!(f)?;
        writeln!(f, "| policy | regions | mean $ | mean x | worst x | published mean | misses | spot h | on-demand h | preemptions | starts | migrations | forced |")?;
        writeln!(
            f,
            "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        )?;
        for r in &self.rows {
            let mean_x = r.ratios.iter().sum::<f64>() / r.ratios.len().max(1) as f64;
            let pm = match (&r.reference, r.published_mean) {
                (Some(name), Some(m)) => format!("{name}: {m:.2}"),
                _ => String::new(),
            };
            writeln!(
                f,
                "| {} | {} | **{:.2}** | {:.3} | {:.3} | {} | {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {} |",
                r.policy,
                r.regions,
                r.mean,
                mean_x,
                r.worst_ratio,
                pm,
                r.misses,
                r.spot_h,
                r.on_demand_h,
                r.preemptions,
                r.launches,
                r.migrations,
                r.forced
            )?;
        }
        if self.rows.iter().any(|r| r.published.is_some()) {
            writeln!(f)?;
            writeln!(f, "Published per window (same windows):")?;
            writeln!(f)?;
            let k = self.windows.len();
            write!(f, "| policy | regions |")?;
            for w in 0..k {
                write!(f, " w{w} |")?;
            }
            writeln!(f, " mean |")?;
            write!(f, "|---|---|")?;
            for _ in 0..k {
                write!(f, "---:|")?;
            }
            writeln!(f, "---:|")?;
            let mut shown = std::collections::BTreeSet::new();
            for r in self.rows.iter().filter(|r| r.published.is_some()) {
                let name = r.reference.clone().unwrap_or_default();
                if !shown.insert(name.clone()) {
                    continue;
                }
                write!(f, "| {name} | {} |", r.regions)?;
                for c in r.published.as_deref().unwrap_or(&[]) {
                    write!(f, " {c:.2} |")?;
                }
                writeln!(f, " {:.2} |", r.published_mean.unwrap_or(f64::NAN))?;
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "On-demand only (cheapest zone): {}.",
            self.on_demand_only_usd
                .iter()
                .map(|c| format!("${c:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        writeln!(f)?;
        for c in &self.checks {
            writeln!(f, "- Check: {c}.")?;
        }
        if !self.over_bound.is_empty() {
            writeln!(
                f,
                "- Over the bound of {WINDOW_BOUND}x in windows {:?}.",
                self.over_bound
            )?;
        }
        Ok(())
    }
}
