//! `gpuq completions bash|zsh|fish`.

use super::{Cli, CmdResult};
use clap::CommandFactory;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> CmdResult {
    clap_complete::generate(
        args.shell,
        &mut Cli::command(),
        "gpuq",
        &mut std::io::stdout(),
    );
    Ok(0)
}
