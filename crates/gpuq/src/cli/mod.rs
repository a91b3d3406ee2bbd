//! The command line. One file per command; each turns flags into API calls
//! and prints the answer (human tables, or `--json`).

// First: its printing macros serve every command below.
#[macro_use]
mod output;

mod advise;
mod alerts;
mod arrays;
mod autostop;
mod cancel;
mod compare;
mod completions;
mod connect;
mod cost;
mod daemon_log;
mod daemon_settings;
mod dashboard;
mod doctor;
mod drain;
mod envs;
mod events;
mod explain;
mod gpus;
mod hold;
mod logs;
mod ls;
mod metrics;
mod notebook;
mod prices;
mod profile;
mod repro;
mod requeue;
mod rerun;
mod run;
mod schedules;
mod server;
mod session_args;
mod shell;
mod show;
mod show_repro;
mod sim;
mod submit;
mod sweep;
mod token;
mod top;
mod tune;
mod usage;
mod wait;
mod whoami;

use clap::{Parser, Subcommand};
use gpuq_api::ApiError;

#[derive(Parser, Debug)]
#[command(
    name = "gpuq",
    version,
    about = "A shared, fault-tolerant GPU job queue",
    propagate_version = true
)]
pub struct Cli {
    /// Daemon address (default: the daemon of GPUQ_HOME, started if needed).
    #[arg(long, global = true, env = "GPUQ_URL")]
    url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the daemon in the foreground (`gpuq server stop` stops the running one).
    Server(server::ServerArgs),
    /// Queue a job; prints its id.
    Submit(submit::SubmitArgs),
    /// Queue a job, stream its log, exit with its exit code.
    Run(submit::SubmitArgs),
    /// List jobs.
    Ls(ls::LsArgs),
    /// Show one job: state, attempts, history.
    Show(show::ShowArgs),
    /// Why a job waits: the rule that holds it, in a sentence.
    Explain(explain::ExplainArgs),
    /// Print a job's log (-f follows until the job ends).
    Logs(logs::LogsArgs),
    /// Cancel jobs (running ones get SIGTERM, then SIGKILL after their grace period).
    Cancel(cancel::CancelArgs),
    /// Submit a job's spec again (same directory and environment); warns when its code changed since.
    Rerun(rerun::RerunArgs),
    /// Stop a running job and queue it again (it resumes from its checkpoint), or requeue an ended one.
    Requeue(requeue::RequeueArgs),
    /// Keep queued jobs from starting until released.
    Hold(hold::HoldArgs),
    /// Let held jobs start.
    Release(hold::HoldArgs),
    /// Stop starting new jobs (maintenance); running jobs continue.
    Drain(drain::DrainArgs),
    /// Start jobs again after a drain.
    Undrain(drain::DrainArgs),
    /// Wait for jobs to end; exit status is the job's (several: 0 only if all succeeded).
    Wait(wait::WaitArgs),
    /// GPU-hours per user and project, and fair-share standing.
    Usage(usage::UsageArgs),
    /// List GPUs: utilisation, memory, temperature, power, and who holds each.
    Gpus(gpus::GpusArgs),
    /// Live view of GPUs and jobs (q quits, s sorts, u filters by user, Enter shows a log).
    Top(top::TopArgs),
    /// The latest alerts (idle GPUs, memory, temperature, XID, failures).
    Alerts(alerts::AlertsArgs),
    /// The cached Python environments (`python:` in a spec): state, packages, size, jobs.
    Envs(envs::EnvsArgs),
    /// Follow job events and alerts as they happen.
    Events(events::EventsArgs),
    /// What jobs cost, by user, project, job or day; budgets; monthly reports (--month, --format md|csv).
    Cost(cost::CostArgs),
    /// The price catalog (instance types, on-demand and spot prices, sources).
    Prices(prices::PricesArgs),
    /// Right-sizing: cheaper GPUs that fit a job, and hints from its telemetry.
    Advise(advise::AdviseArgs),
    /// A job's metrics: latest values and a chart in the terminal (--json, --csv).
    Metrics(metrics::MetricsArgs),
    /// Jobs' runs side by side: params and final metrics, differences marked.
    Compare(compare::CompareArgs),
    /// Hyperparameter sweeps: `gpuq sweep FILE`, `ls`, `show ID`, `cancel ID`.
    Sweep(sweep::SweepArgs),
    /// Stop an idle node after a while (`gpuq autostop 30m`, `gpuq autostop off`).
    Autostop(autostop::AutostopArgs),
    /// Cron schedules (drain, undrain, recurring jobs) and their next runs.
    Schedules(schedules::SchedulesArgs),
    /// Per-user API tokens for remote clients (admins only).
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// The identity the daemon sees for you.
    Whoami(whoami::WhoAmIArgs),
    /// JupyterLab on reserved GPUs, served through the daemon; prints a link that logs in and opens it.
    Notebook(notebook::NotebookArgs),
    /// A shell (or `-- CMD`) on a terminal on reserved GPUs, like `srun --pty bash`.
    Shell(shell::ShellArgs),
    /// What is wrong where jobs run (driver, CUDA, PyTorch, GPUs, /dev/shm, CPUs, data), or with a running job (ID).
    Doctor(doctor::DoctorArgs),
    /// Capture a torch.profiler trace of a running job's next steps (--steps 20).
    Profile(profile::ProfileArgs),
    /// Find a training job's fastest settings (batch size, AMP, torch.compile, DataLoader) in short trials.
    Tune(tune::TuneArgs),
    /// Open the web dashboard with a single-use login link (--print-url prints it).
    Dashboard(dashboard::DashboardArgs),
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
    /// Replay a job trace through the scheduler on a virtual clock (no daemon needed).
    Sim(sim::SimArgs),
}

/// A command's failure: what to print and which exit status to use.
#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
    pub fn failure(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<ApiError> for CliError {
    /// A request the daemon refused (bad spec, unknown job, not permitted) is bad
    /// input: 2. No daemon, or a daemon that failed, is gpuq's own failure: 1.
    fn from(e: ApiError) -> Self {
        let code = if e.is_bad_input() { 2 } else { 1 };
        Self {
            code,
            message: e.to_string(),
        }
    }
}

/// Exit status of a command.
pub type CmdResult = Result<i32, CliError>;

pub fn main(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Server(args) => server::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Sweep(args) if sweep::check(&args).is_err() => sweep::check(&args).map(|_| 0),
        other => {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => return report(CliError::failure(format!("cannot start: {e}"))),
            };
            runtime.block_on(client_command(cli.url, other))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => report(e),
    }
}

fn report(e: CliError) -> i32 {
    errln!("gpuq: {}", e.message);
    e.code
}

async fn client_command(url: Option<String>, command: Command) -> CmdResult {
    let client = connect::connect(url).await?;
    match command {
        Command::Submit(args) => submit::run(&client, args).await,
        Command::Run(args) => run::run(&client, args).await,
        Command::Ls(args) => ls::run(&client, args).await,
        Command::Show(args) => show::run(&client, args).await,
        Command::Logs(args) => logs::run(&client, args).await,
        Command::Explain(args) => explain::run(&client, args).await,
        Command::Cancel(args) => cancel::run(&client, args).await,
        Command::Wait(args) => wait::run(&client, args).await,
        Command::Requeue(args) => requeue::run(&client, args).await,
        Command::Rerun(args) => rerun::run(&client, args).await,
        Command::Hold(args) => hold::hold(&client, args).await,
        Command::Release(args) => hold::release(&client, args).await,
        Command::Drain(args) => drain::run(&client, true, args).await,
        Command::Undrain(args) => drain::run(&client, false, args).await,
        Command::Gpus(args) => gpus::run(&client, args).await,
        Command::Top(args) => top::run(&client, args).await,
        Command::Alerts(args) => alerts::run(&client, args).await,
        Command::Envs(args) => envs::run(&client, args).await,
        Command::Events(args) => events::run(&client, args).await,
        Command::Cost(args) => cost::run(&client, args).await,
        Command::Advise(args) => advise::run(&client, args).await,
        Command::Metrics(args) => metrics::run(&client, args).await,
        Command::Compare(args) => compare::run(&client, args).await,
        Command::Sweep(args) => sweep::run(&client, args).await,
        Command::Prices(args) => prices::run(&client, args).await,
        Command::Autostop(args) => autostop::run(&client, args).await,
        Command::Schedules(args) => schedules::run(&client, args).await,
        Command::Usage(args) => usage::run(&client, args).await,
        Command::Token(command) => token::run(&client, command).await,
        Command::Whoami(args) => whoami::run(&client, args).await,
        Command::Dashboard(args) => dashboard::run(&client, args).await,
        Command::Notebook(args) => notebook::run(&client, args).await,
        Command::Shell(args) => shell::run(&client, args).await,
        Command::Doctor(args) => doctor::run(&client, args).await,
        Command::Tune(args) => tune::run(&client, args).await,
        Command::Profile(args) => profile::run(&client, args).await,
        Command::Server(_) | Command::Completions(_) | Command::Sim(_) => {
            unreachable!("handled without a client")
        }
    }
}

/// The exit status a job's end maps to: its exit code, 128+signal, or 1 (cancelled, or no status).
pub fn job_exit_status(job: &gpuq_core::Job) -> i32 {
    use gpuq_core::JobState;
    match job.state {
        JobState::Succeeded => 0,
        JobState::Cancelled => 1,
        _ => match (job.exit_code, job.signal) {
            (_, Some(sig)) => 128 + sig,
            (Some(code), None) if code != 0 => code,
            _ => 1,
        },
    }
}

/// Parses a job id argument.
pub fn parse_id(s: &str) -> Result<gpuq_core::JobId, CliError> {
    s.parse().map_err(|_| {
        CliError::usage(format!(
            "{s:?} is not a job id; ids are numbers (see gpuq ls), ID.K for task K of array ID"
        ))
    })
}
