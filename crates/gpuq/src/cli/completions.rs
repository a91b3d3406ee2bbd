//! `gpuq completions bash|zsh|fish`.

use super::{Cli, CmdResult};
use clap::CommandFactory;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> CmdResult {
    // Into memory first: the generator panics on a failed write (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "gpuq", &mut script);
    super::output::write_stdout_bytes(&script);
    Ok(0)
}
