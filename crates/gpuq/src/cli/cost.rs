//! `gpuq cost`: what was spent, by user, project, job or day; budgets; and the
//! monthly report (`--month 2026-11 --format md|csv`) with GPU-hours allocated vs used.

use super::output::{fixed, print_json, print_table};
use super::{CliError, CmdResult};
use gpuq_api::{BudgetStatus, Client, CostReport};

#[derive(clap::Args, Debug)]
pub struct CostArgs {
    /// Group by user, project, job or day; user,day or project,day for each one's days.
    #[arg(long, default_value = "user")]
    by: String,
    /// From: a date (2026-11-01), a month (2026-11) or a span ago (7d) [default: this month].
    #[arg(long)]
    since: Option<String>,
    /// Until (same forms) [default: now].
    #[arg(long)]
    until: Option<String>,
    /// A whole month, e.g. 2026-11 (instead of --since/--until).
    #[arg(long)]
    month: Option<String>,
    /// The monthly report by user and by project: md (Markdown) or csv.
    #[arg(long, value_parser = ["table", "md", "csv"], default_value = "table")]
    format: String,
    #[arg(long)]
    json: bool,
}

fn query(args: &CostArgs, by: &str) -> Vec<(&'static str, String)> {
    let mut q = vec![("by", by.to_string())];
    for (k, v) in [
        ("since", &args.since),
        ("until", &args.until),
        ("month", &args.month),
    ] {
        if let Some(v) = v {
            q.push((k, v.clone()));
        }
    }
    q
}

pub async fn run(client: &Client, args: CostArgs) -> CmdResult {
    if args.format != "table" {
        return report(client, &args).await;
    }
    let r = client.cost(&query(&args, &args.by)).await?;
    if args.json {
        print_json(&r);
        return Ok(0);
    }
    outln!("{}", r.window);
    outln!("price: {}", r.pricing);
    let mut rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            vec![
                row.key.clone(),
                money(row.cost),
                fixed(row.gpu_hours, 2),
                row.used_gpu_hours.map_or("-".into(), |u| fixed(u, 2)),
                row.attempts.to_string(),
            ]
        })
        .collect();
    rows.push(vec![
        "TOTAL".into(),
        money(r.total),
        fixed(r.gpu_hours, 2),
        String::new(),
        String::new(),
    ]);
    print_table(
        &[
            &r.by.to_uppercase(),
            "COST",
            "GPU-H",
            "USED GPU-H",
            "ATTEMPTS",
        ],
        &rows,
    );
    if r.rows.iter().any(|row| row.unpriced_hours > 0.0) {
        outln!("note: some time ran without a price and is not counted in COST (not $0)");
    }
    budgets(&r.budgets);
    Ok(0)
}

fn money(m: Option<gpuq_core::cost::Micros>) -> String {
    m.map_or("no price".into(), |c| c.to_string())
}

fn budgets(list: &[BudgetStatus]) {
    if list.is_empty() {
        return;
    }
    outln!();
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|b| {
            vec![
                format!("{} {}", b.scope, b.name),
                b.period.clone(),
                b.spent.to_string(),
                b.limit.to_string(),
                b.left.to_string(),
                format!("{:.0}%", b.percent),
                if b.exhausted {
                    format!("{} (spent)", b.action)
                } else {
                    b.action.clone()
                },
            ]
        })
        .collect();
    print_table(
        &[
            "BUDGET", "PERIOD", "SPENT", "LIMIT", "LEFT", "USED", "AT 100%",
        ],
        &rows,
    );
}

/// The monthly report: by user and by project, allocated vs used GPU-hours.
async fn report(client: &Client, args: &CostArgs) -> CmdResult {
    let users = client.cost(&query(args, "user")).await?;
    let projects = client.cost(&query(args, "project")).await?;
    let text = match args.format.as_str() {
        "md" => markdown(&users, &projects),
        "csv" => csv(&[&users, &projects]),
        other => return Err(CliError::usage(format!("--format {other}: use md or csv"))),
    };
    out!("{text}");
    Ok(0)
}

fn efficiency(alloc: f64, used: Option<f64>) -> String {
    match used {
        Some(u) if alloc > 0.0 => format!("{:.0}%", u / alloc * 100.0),
        _ => "-".into(),
    }
}

fn markdown(users: &CostReport, projects: &CostReport) -> String {
    let mut out = format!(
        "# GPU cost report: {}\n\nPrice: {}\n\nTotal: {}, {} GPU-hours allocated.\n",
        users.window,
        users.pricing,
        money(users.total),
        fixed(users.gpu_hours, 2)
    );
    for (title, r) in [("By user", users), ("By project", projects)] {
        out.push_str(&format!(
            "\n## {title}\n\n| {} | cost | GPU-h allocated | GPU-h used | used/allocated | attempts |\n|---|---:|---:|---:|---:|---:|\n",
            r.by
        ));
        for row in &r.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                row.key,
                money(row.cost),
                fixed(row.gpu_hours, 2),
                row.used_gpu_hours.map_or("-".into(), |u| fixed(u, 2)),
                efficiency(row.gpu_hours, row.used_gpu_hours),
                row.attempts
            ));
        }
    }
    if !users.budgets.is_empty() {
        out.push_str("\n## Budgets (current period)\n\n| budget | period | spent | limit | used |\n|---|---|---:|---:|---:|\n");
        for b in &users.budgets {
            out.push_str(&format!(
                "| {} {} | {} | {} | {} | {:.0}% |\n",
                b.scope, b.name, b.period, b.spent, b.limit, b.percent
            ));
        }
    }
    out.push_str(
        "\n\"Used\" GPU-hours are allocated hours × average GPU utilisation from telemetry.\n",
    );
    out
}

fn csv(reports: &[&CostReport]) -> String {
    let mut out = String::from("group,key,cost_usd,gpu_hours_allocated,gpu_hours_used,attempts\n");
    for r in reports {
        for row in &r.rows {
            let key = if row.key.contains([',', '"']) {
                format!("\"{}\"", row.key.replace('"', "\"\""))
            } else {
                row.key.clone()
            };
            out.push_str(&format!(
                "{},{key},{},{},{},{}\n",
                r.by,
                row.cost.map_or(String::new(), |c| c.exact()),
                fixed(row.gpu_hours, 4),
                row.used_gpu_hours.map_or(String::new(), |u| fixed(u, 4)),
                row.attempts
            ));
        }
    }
    out
}
