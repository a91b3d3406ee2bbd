//! gpuq: the daemon, the CLI and the per-job supervisor, in one binary.

mod cli;

use clap::Parser;

fn main() {
    // The supervisor runs once per attempt: keep it off clap and tokio, it must start fast.
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("__supervise") => std::process::exit(supervise_main(&args[2..])),
        Some("__env-build") => std::process::exit(env_build_main()),
        Some("__env-remove") => std::process::exit(env_remove_main(&args[2..])),
        Some("__container") => std::process::exit(container_main(&args[2..])),
        _ => {}
    }
    let cli = cli::Cli::try_parse().unwrap_or_else(|e| refuse_arguments(e));
    std::process::exit(cli::main(cli));
}

/// Clap's own report and exit status (2), less one tip: for an unknown flag
/// before the command it says "to pass '--gpu' as a value, use '-- --gpu'",
/// which would make the mistyped flag the job's command.
fn refuse_arguments(e: clap::Error) -> ! {
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        e.exit()
    }
    let text = e.render().to_string();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !(l.contains("to pass '") && l.contains("as a value, use '--")))
        .collect();
    eprintln!("{}", kept.join("\n"));
    std::process::exit(2)
}

/// `gpuq __supervise --job-dir DIR --attempt N [--log-max B --log-reserve B] [--cgroups] -- ARGV…` (internal).
fn supervise_main(args: &[String]) -> i32 {
    let mut job_dir = None;
    let mut attempt = None;
    let mut env_from_stdin = false;
    let mut terminal = false;
    let mut cgroups = false;
    let mut cwd = None;
    let mut container = None;
    let (mut log_max, mut log_reserve) = (None, 0u64);
    let (mut uid, mut gid, mut groups) = (None, None, Vec::new());
    let mut rest = args;
    while let Some((flag, tail)) = rest.split_first() {
        match flag.as_str() {
            "--job-dir" => job_dir = tail.first().cloned(),
            "--attempt" => attempt = tail.first().and_then(|a| a.parse::<u32>().ok()),
            "--cwd" => cwd = tail.first().map(std::path::PathBuf::from),
            "--container" => container = tail.first().cloned(),
            "--log-max" => log_max = tail.first().and_then(|a| a.parse::<u64>().ok()),
            "--log-reserve" => log_reserve = tail.first().and_then(|a| a.parse().ok()).unwrap_or(0),
            "--env-from-stdin" => {
                env_from_stdin = true;
                rest = tail;
                continue;
            }
            "--terminal" => {
                terminal = true;
                rest = tail;
                continue;
            }
            "--cgroups" => {
                cgroups = true;
                rest = tail;
                continue;
            }
            "--uid" => uid = tail.first().and_then(|a| a.parse::<u32>().ok()),
            "--gid" => gid = tail.first().and_then(|a| a.parse::<u32>().ok()),
            "--groups" => {
                groups = tail
                    .first()
                    .map(|g| g.split(',').filter_map(|x| x.parse().ok()).collect())
                    .unwrap_or_default()
            }
            "--" => {
                rest = tail;
                break;
            }
            _ => {}
        }
        rest = tail.get(1..).unwrap_or(&[]);
    }
    let (Some(dir), Some(attempt)) = (job_dir, attempt) else {
        eprintln!("gpuq __supervise is internal: it is started by the daemon");
        return 2;
    };
    let dir = std::path::PathBuf::from(dir);
    if !dir.is_absolute() {
        // A relative job directory would resolve against whatever directory is current.
        eprintln!("gpuq __supervise: --job-dir must be absolute");
        return 2;
    }
    let dir = gpuq_exec::JobDir::from_root(dir);
    let credentials = uid
        .zip(gid)
        .map(|(uid, gid)| gpuq_exec::Credentials { uid, gid, groups });
    gpuq_exec::supervise(gpuq_exec::Supervision {
        dir: &dir,
        attempt,
        argv: rest,
        env_from_stdin,
        credentials,
        cwd: cwd.as_deref(),
        terminal,
        container,
        log: log_max.map(|max_bytes| gpuq_exec::log_pipe::LogLimits {
            max_bytes,
            reserve_bytes: log_reserve,
        }),
        cgroups,
    })
}

/// `gpuq __container NAME -- PODMAN… run …` (internal): a container job's process.
fn container_main(args: &[String]) -> i32 {
    match args {
        [name, dashes, podman @ ..] if dashes == "--" && !podman.is_empty() => {
            gpuq_exec::container::relay_main(name, podman)
        }
        _ => {
            eprintln!("gpuq __container is internal: it is started by the daemon");
            2
        }
    }
}

/// `gpuq __env-build` (internal): builds a Python environment; stdin is its ticket.
fn env_build_main() -> i32 {
    gpuq_exec::envbuild::build_main()
}

/// `gpuq __env-remove PATH [--uid U --gid G]` (internal): removes a retired environment as its owner.
fn env_remove_main(args: &[String]) -> i32 {
    let Some(path) = args.first().map(std::path::PathBuf::from) else {
        eprintln!("gpuq __env-remove is internal: it is started by the daemon");
        return 2;
    };
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u32>().ok())
    };
    gpuq_exec::envbuild::remove_main(&path, flag("--uid"), flag("--gid"))
}
