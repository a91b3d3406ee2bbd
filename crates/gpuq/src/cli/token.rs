//! `gpuq token create|list|revoke`: per-user API tokens for remote clients (admins only).

use super::output::{ago, print_json, print_table};
use super::CmdResult;
use gpuq_api::home::now_ms;
use gpuq_api::Client;

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Make a token that acts as USER over TCP (shown once; stored hashed).
    Create {
        #[arg(long)]
        user: String,
        #[arg(long)]
        json: bool,
    },
    /// List tokens (never their secrets).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id.
    Revoke { id: i64 },
}

pub async fn run(client: &Client, command: TokenCommand) -> CmdResult {
    match command {
        TokenCommand::Create { user, json } => {
            let created = client.create_token(&user).await?;
            if json {
                print_json(&created);
            } else {
                outln!("{}", created.token);
                errln!(
                    "gpuq: token {} acts as {}; it is shown once. Remote use: GPUQ_URL=http://HOST:PORT GPUQ_TOKEN=<token> gpuq ls",
                    created.id, created.user
                );
            }
        }
        TokenCommand::List { json } => {
            let tokens = client.tokens().await?;
            if json {
                print_json(&tokens);
            } else {
                let now = now_ms();
                let rows: Vec<Vec<String>> = tokens
                    .iter()
                    .map(|t| {
                        vec![
                            t.id.to_string(),
                            t.user.clone(),
                            ago(t.created_at, now),
                            t.revoked_at
                                .map(|r| format!("revoked {}", ago(r, now)))
                                .unwrap_or_else(|| "active".into()),
                        ]
                    })
                    .collect();
                print_table(&["ID", "USER", "CREATED", "STATE"], &rows);
            }
        }
        TokenCommand::Revoke { id } => {
            client.revoke_token(id).await?;
            outln!("token {id} revoked");
        }
    }
    Ok(0)
}
