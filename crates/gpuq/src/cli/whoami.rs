//! `gpuq whoami`: the identity the daemon sees for this client.

use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct WhoAmIArgs {
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: WhoAmIArgs) -> CmdResult {
    let me = client.whoami().await?;
    if args.json {
        super::output::print_json(&me);
    } else {
        outln!("{}{}", me.user, if me.admin { " (admin)" } else { "" });
    }
    Ok(0)
}
