//! `gpuq alerts`: the latest alerts, oldest first.

use super::output::{ago, print_json, print_table};
use super::CmdResult;
use gpuq_api::home::now_ms;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct AlertsArgs {
    /// How many of the latest alerts to show.
    #[arg(short = 'n', long, default_value_t = 50)]
    limit: u32,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: AlertsArgs) -> CmdResult {
    let alerts = client.alerts(args.limit).await?;
    if args.json {
        print_json(&alerts);
        return Ok(0);
    }
    if alerts.is_empty() {
        outln!("no alerts");
        return Ok(0);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = alerts
        .iter()
        .map(|a| {
            vec![
                a.id.to_string(),
                ago(a.alert.at, now),
                a.alert.kind.as_str().to_string(),
                a.alert.message.clone(),
            ]
        })
        .collect();
    print_table(&["ID", "WHEN", "KIND", "MESSAGE"], &rows);
    Ok(0)
}
