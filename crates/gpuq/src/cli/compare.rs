//! `gpuq compare ID ID…`: runs side by side — status, params and each metric's
//! latest value — with the rows that differ marked.

use super::output::{colour_enabled, print_json, print_table};
use super::{CliError, CmdResult};
use gpuq_api::tracking::RunSummary;
use gpuq_api::Client;
use std::collections::BTreeSet;

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// Two or more job ids.
    #[arg(required = true, num_args = 2..)]
    ids: Vec<String>,
    /// Only the rows that differ.
    #[arg(long)]
    diff: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: CompareArgs) -> CmdResult {
    if args.ids.len() > 20 {
        return Err(CliError::usage(format!(
            "{} jobs: compare at most 20 at once",
            args.ids.len()
        )));
    }
    let mut runs = Vec::new();
    for raw in &args.ids {
        runs.push(
            client
                .job_run(super::arrays::job_id(client, raw).await?)
                .await?,
        );
    }
    if args.json {
        print_json(&runs);
        return Ok(0);
    }
    let colour = colour_enabled();
    let mut rows = Vec::new();
    let mut add = |label: String, cells: Vec<String>, diff_only: bool| {
        let differs = cells.windows(2).any(|w| w[0] != w[1]);
        if diff_only && !differs {
            return;
        }
        let mark = match (differs, colour) {
            (true, true) => "\x1b[33m*\x1b[0m".to_string(),
            (true, false) => "*".to_string(),
            (false, _) => " ".to_string(),
        };
        let mut row = vec![mark, label];
        row.extend(cells);
        rows.push(row);
    };
    let cell = |v: Option<&String>| v.cloned().unwrap_or_else(|| "-".into());
    add(
        "name".into(),
        runs.iter().map(|r| cell(r.name.as_ref())).collect(),
        args.diff,
    );
    add(
        "experiment".into(),
        runs.iter().map(|r| r.experiment.clone()).collect(),
        args.diff,
    );
    add(
        "status".into(),
        runs.iter().map(|r| r.status.clone()).collect(),
        args.diff,
    );
    add(
        "user".into(),
        runs.iter().map(|r| r.user.clone()).collect(),
        args.diff,
    );
    let params: BTreeSet<&String> = runs.iter().flat_map(|r| r.params.keys()).collect();
    for p in params {
        add(
            format!("params.{p}"),
            runs.iter().map(|r| cell(r.params.get(p))).collect(),
            args.diff,
        );
    }
    let metrics: BTreeSet<&String> = runs.iter().flat_map(|r| r.metrics.keys()).collect();
    for m in metrics {
        add(
            format!("metrics.{m}"),
            runs.iter().map(|r| metric_cell(r, m)).collect(),
            args.diff,
        );
    }
    let mut header = vec![String::new(), String::new()];
    header.extend(runs.iter().map(|r| match r.job {
        Some(j) => format!("JOB {j}"),
        None => format!("RUN {}", r.run_id),
    }));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    print_table(&header, &rows);
    if rows.iter().any(|r| r[0] != " ") {
        outln!("* differs");
    } else {
        outln!("no differences");
    }
    Ok(0)
}

fn metric_cell(r: &RunSummary, key: &str) -> String {
    match r.metrics.get(key) {
        None => "-".into(),
        Some(p) => {
            let v = p.value.0;
            let text = if v.is_nan() {
                "NaN".to_string()
            } else if v.is_infinite() {
                if v > 0.0 { "inf" } else { "-inf" }.to_string()
            } else {
                format!("{v:.6}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .to_string()
            };
            format!("{text} @{}", p.step)
        }
    }
}
