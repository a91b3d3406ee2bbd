//! `gpuq metrics ID [--key K] [--json|--csv]`: a job's metrics, latest values
//! and a chart drawn in the terminal (a sparkline per metric; a taller chart for one).

use super::output::{fixed, print_json, print_table, terminal_width};
use super::{CliError, CmdResult};
use gpuq_api::tracking::{MetricPoint, MetricSeries};
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct MetricsArgs {
    id: String,
    /// Only this metric, drawn as a taller chart.
    #[arg(long)]
    key: Option<String>,
    /// Points per metric fetched (the daemon downsamples longer histories to this, min/max per bucket).
    #[arg(long, default_value_t = 2000)]
    points: usize,
    /// Print the metrics as JSON.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print `key,step,timestamp,value` rows.
    #[arg(long)]
    csv: bool,
}

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
const CHART_ROWS: usize = 10;

pub async fn run(client: &Client, args: MetricsArgs) -> CmdResult {
    let id = super::arrays::job_id(client, &args.id).await?;
    if !(2..=20_000).contains(&args.points) {
        return Err(CliError::usage(format!(
            "--points {}: give 2 to 20000",
            args.points
        )));
    }
    let m = client
        .job_metrics(id, args.key.as_deref(), args.points)
        .await?;
    if args.json {
        print_json(&m);
        return Ok(0);
    }
    let dropped = dropped_lines(&m.dropped);
    if args.csv {
        for line in &dropped {
            errln!("gpuq: job {id}: {line}");
        }
        outln!("key,step,timestamp,value");
        for s in &m.series {
            for p in &s.points {
                outln!(
                    "{},{},{},{}",
                    csv_field(&s.key),
                    p.step,
                    p.timestamp,
                    number(p.value.0)
                );
            }
            if s.downsampled {
                errln!(
                    "gpuq: {}: {} points shown of {} (lowest and highest per bucket); raise --points, or read every point with MLflow's get_metric_history",
                    s.key,
                    s.points.len(),
                    s.count
                );
            }
        }
        return Ok(0);
    }
    for line in &dropped {
        outln!("{line}");
    }
    if m.series.is_empty() {
        outln!(
            "job {id} has no metrics yet: log them with gpuq.log(step=…, loss=…), lines in $GPUQ_METRICS_FILE, or mlflow.log_metric"
        );
        return Ok(0);
    }
    let width = terminal_width().unwrap_or(80).clamp(30, 200);
    if let [one] = m.series.as_slice() {
        if args.key.is_some() {
            chart(one, width);
            return Ok(0);
        }
    }
    let spark_width = width.saturating_sub(60).clamp(10, 60);
    let rows: Vec<Vec<String>> = m
        .series
        .iter()
        .map(|s| {
            let (lo, hi) = range(&s.points);
            vec![
                s.key.clone(),
                number(s.latest.value.0),
                s.latest.step.to_string(),
                s.count.to_string(),
                lo.map_or("-".into(), number),
                hi.map_or("-".into(), number),
                sparkline(&s.points, spark_width),
            ]
        })
        .collect();
    print_table(
        &[
            "METRIC", "LATEST", "STEP", "POINTS", "MIN", "MAX", "HISTORY",
        ],
        &rows,
    );
    Ok(0)
}

/// "N points dropped: rate limit", one line per reason (the job went over a
/// limit of `[output]` in gpuq.toml).
pub fn dropped_lines(dropped: &std::collections::BTreeMap<String, u64>) -> Vec<String> {
    dropped
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(reason, n)| {
            format!(
                "{n} point{} dropped: {reason}",
                if *n == 1 { "" } else { "s" }
            )
        })
        .collect()
}

/// A value as a person reads it: short, and NaN or ±inf spelled out.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        let s = fixed(v, 4);
        let s = s.trim_end_matches('0').trim_end_matches('.');
        if s.is_empty() || s == "-" {
            "0".into()
        } else {
            s.to_string()
        }
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn finite(points: &[MetricPoint]) -> impl Iterator<Item = &MetricPoint> {
    points.iter().filter(|p| p.value.0.is_finite())
}

fn range(points: &[MetricPoint]) -> (Option<f64>, Option<f64>) {
    let mut it = finite(points).map(|p| p.value.0);
    let first = it.next();
    first.map_or((None, None), |f| {
        let (lo, hi) = it.fold((f, f), |(lo, hi), v| (lo.min(v), hi.max(v)));
        (Some(lo), Some(hi))
    })
}

/// The finite points spread over `columns` by step; each column keeps its last value.
fn columns(points: &[MetricPoint], columns: usize) -> Vec<Option<f64>> {
    let pts: Vec<&MetricPoint> = finite(points).collect();
    let mut out = vec![None; columns];
    let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
        return out;
    };
    let (s0, s1) = (first.step, last.step.max(first.step + 1));
    for p in &pts {
        let col = ((p.step - s0) as f64 / (s1 - s0) as f64 * (columns - 1) as f64).round();
        out[(col.max(0.0) as usize).min(columns - 1)] = Some(p.value.0);
    }
    // Gaps take the value before them, so the line does not break.
    let mut prev = None;
    for c in out.iter_mut() {
        if c.is_none() {
            *c = prev;
        }
        prev = *c;
    }
    out
}

fn sparkline(points: &[MetricPoint], width: usize) -> String {
    let (Some(lo), Some(hi)) = range(points) else {
        return String::new();
    };
    let cols = columns(points, width.min(finite(points).count().max(1)));
    cols.iter()
        .map(|c| match c {
            None => ' ',
            Some(v) if hi == lo => SPARK[3],
            Some(v) => SPARK[(((v - lo) / (hi - lo)) * 7.0).round() as usize],
        })
        .collect()
}

/// A taller chart of one metric: rows of blocks with the value range on the left.
fn chart(s: &MetricSeries, width: usize) {
    let (Some(lo), Some(hi)) = range(&s.points) else {
        outln!("{}: no finite values ({} points)", s.key, s.count);
        return;
    };
    let (lo_s, hi_s) = (number(lo), number(hi));
    let label = lo_s.len().max(hi_s.len());
    let plot = width.saturating_sub(label + 3).max(10);
    let cols = columns(&s.points, plot.min(finite(&s.points).count().max(1)));
    let shown = if s.downsampled {
        format!(
            ", shown as {} (lowest and highest per bucket)",
            s.points.len()
        )
    } else {
        String::new()
    };
    outln!(
        "{}: latest {} at step {}; {} points{shown}",
        s.key,
        number(s.latest.value.0),
        s.latest.step,
        s.count
    );
    // Each column marks its value at half-row resolution and joins the previous
    // column's, so a steep fall reads as a line, not scattered dots.
    let halves = CHART_ROWS * 2;
    let level = |v: f64| -> usize {
        let frac = if hi == lo { 0.5 } else { (v - lo) / (hi - lo) };
        ((frac * (halves - 1) as f64).round() as usize).min(halves - 1)
    };
    let mut grid = vec![vec![[false; 2]; cols.len()]; CHART_ROWS];
    let mut prev: Option<usize> = None;
    for (x, c) in cols.iter().enumerate() {
        let Some(v) = c else { continue };
        let y = level(*v);
        let (a, b) = match prev {
            Some(p) if p.abs_diff(y) > 1 => (p.min(y) + 1, p.max(y) - 1),
            _ => (y, y),
        };
        for h in a.min(y)..=b.max(y) {
            grid[h / 2][x][h % 2] = true;
        }
        prev = Some(y);
    }
    for row in (0..CHART_ROWS).rev() {
        let edge = match row {
            r if r == CHART_ROWS - 1 => format!("{hi_s:>label$}"),
            0 => format!("{lo_s:>label$}"),
            _ => " ".repeat(label),
        };
        let line: String = grid[row]
            .iter()
            .map(|[lower, upper]| match (lower, upper) {
                (true, true) => '█',
                (true, false) => '▄',
                (false, true) => '▀',
                (false, false) => ' ',
            })
            .collect();
        outln!("{edge} │{}", line.trim_end());
    }
    let first = finite(&s.points).next().map_or(0, |p| p.step);
    let last = finite(&s.points).last().map_or(0, |p| p.step);
    let axis = format!("step {first}");
    let end = format!("step {last}");
    let gap = cols.len().saturating_sub(axis.len() + end.len()).max(1);
    outln!("{} └{axis}{}{end}", " ".repeat(label), " ".repeat(gap));
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuq_api::tracking::MetricValue;

    fn pts(values: &[f64]) -> Vec<MetricPoint> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| MetricPoint {
                step: i as i64,
                value: MetricValue(*v),
                timestamp: 0,
            })
            .collect()
    }

    #[test]
    fn a_sparkline_rises_with_its_values_and_skips_non_finite_ones() {
        let line = sparkline(&pts(&[0.0, 1.0, 2.0, f64::NAN, 3.0, f64::INFINITY]), 4);
        assert_eq!(line.chars().count(), 4);
        assert_eq!(line.chars().next(), Some('▁'));
        assert_eq!(line.chars().last(), Some('█'));
        assert_eq!(sparkline(&pts(&[f64::NAN]), 10), "");
        assert_eq!(sparkline(&pts(&[5.0, 5.0]), 2), "▄▄");
    }

    #[test]
    fn numbers_read_short() {
        assert_eq!(number(0.41), "0.41");
        assert_eq!(number(2.0), "2");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::NEG_INFINITY), "-inf");
        assert_eq!(number(1.5e-5), "1.500e-5");
        assert_eq!(number(0.0), "0");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }
}
