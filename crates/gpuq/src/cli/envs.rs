//! `gpuq envs`: the cached Python environments.

use super::output::{ago, print_json, print_table};
use super::{CliError, CmdResult};
use gpuq_api::home::now_ms;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct EnvsArgs {
    #[command(subcommand)]
    action: Option<EnvsAction>,
    /// Print them as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand, Debug)]
enum EnvsAction {
    /// One environment's packages and state.
    Show {
        key: String,
        #[arg(long)]
        json: bool,
    },
    /// The last build's log.
    Log { key: String },
}

pub async fn run(client: &Client, args: EnvsArgs) -> CmdResult {
    match args.action {
        Some(EnvsAction::Log { key }) => {
            let log = client.env_log(&key).await?;
            out!("{log}");
            Ok(0)
        }
        Some(EnvsAction::Show { key, json }) => {
            let envs = client.envs().await?;
            let Some(e) = envs
                .into_iter()
                .find(|e| e.key == key || (key.len() >= 6 && e.key.starts_with(&key)))
            else {
                return Err(CliError::usage(format!(
                    "no environment {key}; `gpuq envs` lists them"
                )));
            };
            if json {
                print_json(&e);
                return Ok(0);
            }
            outln!("key:      {}", e.key);
            outln!("state:    {}", e.state);
            outln!("user:     {}", e.user);
            outln!("source:   {}", e.source);
            outln!("python:   {}", e.python.as_deref().unwrap_or("-"));
            outln!(
                "size:     {}",
                gpuq_core::limits::human_bytes(e.size_bytes as usize)
            );
            outln!("path:     {}", e.path);
            outln!("builds:   {}", e.builds);
            if let Some(err) = &e.error {
                outln!("error:    {err}");
            }
            let jobs: Vec<String> = e.jobs.iter().map(u64::to_string).collect();
            outln!(
                "jobs:     {}",
                if jobs.is_empty() {
                    "-".into()
                } else {
                    jobs.join(" ")
                }
            );
            outln!("packages:");
            for p in &e.packages {
                outln!("  {p}");
            }
            Ok(0)
        }
        None => {
            let envs = client.envs().await?;
            if args.json {
                print_json(&envs);
                return Ok(0);
            }
            if envs.is_empty() {
                outln!("no cached environments (a spec's `python:` makes one)");
                return Ok(0);
            }
            let now = now_ms();
            let rows: Vec<Vec<String>> = envs
                .iter()
                .map(|e| {
                    vec![
                        e.key.clone(),
                        e.state.clone(),
                        e.user.clone(),
                        e.python.clone().unwrap_or_else(|| "-".into()),
                        e.packages.len().to_string(),
                        gpuq_core::limits::human_bytes(e.size_bytes as usize),
                        ago(e.last_used_at, now),
                        e.jobs.len().to_string(),
                        e.source.clone(),
                    ]
                })
                .collect();
            print_table(
                &[
                    "KEY", "STATE", "USER", "PYTHON", "PACKAGES", "SIZE", "USED", "JOBS", "SOURCE",
                ],
                &rows,
            );
            Ok(0)
        }
    }
}
