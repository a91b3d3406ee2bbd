//! `gpuq prices [--gpu MODEL]`: the price catalog the daemon uses, with sources.

use super::output::{print_json, print_table, shorten};
use super::{CliError, CmdResult};
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct PricesArgs {
    /// Only this GPU model (e.g. A100-80GB, H100, L4).
    #[arg(long)]
    gpu: Option<String>,
    /// Show each row's source in full (the table trims long addresses).
    #[arg(long)]
    sources: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: PricesArgs) -> CmdResult {
    let mut rows = client.prices(args.gpu.as_deref()).await?;
    if let (Some(gpu), true) = (&args.gpu, rows.is_empty()) {
        // An empty table would read as "no prices at all".
        let mut models: Vec<String> = client
            .prices(None)
            .await?
            .into_iter()
            .map(|r| r.gpu_model)
            .collect();
        models.sort();
        models.dedup();
        return Err(CliError::usage(format!(
            "no price in the catalog matches --gpu {gpu:?}; its GPU models: {}",
            if models.is_empty() {
                "none (add rows with cost.catalog in gpuq.toml)".to_string()
            } else {
                models.join(", ")
            }
        )));
    }
    if args.json {
        print_json(&rows);
        return Ok(0);
    }
    rows.sort_by_key(|r| r.per_gpu_hour(false));
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let source = if args.sources {
                r.source.clone()
            } else {
                trim_source(&r.source)
            };
            vec![
                r.key(),
                format!("{} × {}", r.gpus, r.gpu_model),
                r.on_demand.to_string(),
                r.spot.map_or("-".into(), |s| s.to_string()),
                r.per_gpu_hour(false).map_or("-".into(), |p| p.to_string()),
                format!("{source} ({})", r.as_of),
            ]
        })
        .collect();
    let header = [
        "INSTANCE (cost.instance)",
        "GPUS",
        "ON-DEMAND/H",
        "SPOT/H",
        "PER GPU-H",
        "SOURCE (AS OF)",
    ];
    print_table(&header, &table);
    outln!(
        "prices move: check the provider before relying on one; override rows with cost.catalog"
    );
    Ok(0)
}

/// Longest source shown in the table; `--sources` shows them whole.
const SOURCE_WIDTH: usize = 48;

/// A long address as who (the host, or the GitHub repository) and which (the
/// file): "github:datareceipts/data-receipts/…/vendors.json".
fn trim_source(source: &str) -> String {
    let bare = source
        .strip_prefix("https://")
        .or_else(|| source.strip_prefix("http://"))
        .unwrap_or(source);
    let fits = |s: &str| s.chars().count() <= SOURCE_WIDTH;
    if fits(bare) {
        return bare.to_string();
    }
    let parts: Vec<&str> = bare.split('/').filter(|p| !p.is_empty()).collect();
    let site = match parts.as_slice() {
        ["raw.githubusercontent.com" | "github.com", owner, repo, ..] => {
            format!("github:{owner}/{repo}")
        }
        [host, ..] => host.to_string(),
        [] => return shorten(bare, SOURCE_WIDTH),
    };
    let with_file = format!("{site}/…/{}", parts[parts.len() - 1]);
    if fits(&with_file) {
        with_file
    } else if fits(&site) {
        format!("{site}/…")
    } else {
        shorten(&site, SOURCE_WIDTH)
    }
}

#[cfg(test)]
mod tests {
    use super::trim_source;

    #[test]
    fn sources_keep_who_and_which() {
        assert_eq!(
            trim_source("https://raw.githubusercontent.com/datareceipts/data-receipts/main/109-gpu-pricing/vendors.json"),
            "github:datareceipts/data-receipts/…/vendors.json"
        );
        assert_eq!(
            trim_source("https://raw.githubusercontent.com/api-evangelist/openrelay/refs/heads/main/plans/openrelay-plans-pricing.yml"),
            "github:api-evangelist/openrelay/…"
        );
        assert_eq!(
            trim_source("https://techbytes.app/posts/serverless-gpu-pricing-matrix-modal-replicate-lambda-2026/"),
            "techbytes.app/…"
        );
        assert_eq!(
            trim_source("https://aws.amazon.com/ec2/pricing/"),
            "aws.amazon.com/ec2/pricing/"
        );
        assert_eq!(trim_source("gpuq.toml"), "gpuq.toml");
        let long = trim_source(&format!("https://{}.com/x", "a".repeat(80)));
        assert_eq!(long.chars().count(), 48);
    }
}
