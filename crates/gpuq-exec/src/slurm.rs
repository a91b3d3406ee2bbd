//! The Slurm backend: an attempt is a batch job submitted with `sbatch` from a
//! generated script, tracked with one batched `squeue` (and `sacct` once it has
//! left the queue), and stopped with `scancel`. Slurm places the job; the job
//! contract (environment, log, checkpoint directory, exit 75) is the same as on
//! the local backend.

use crate::layout::JobDir;
use crate::ExitRecord;
use gpuq_core::JobId;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;

mod output;
pub use output::{parse_sacct, parse_sinfo, parse_squeue, SlurmNode, SlurmStatus};

/// Defaults for every submission (`[slurm]` in gpuq.toml).
#[derive(Debug, Clone, Default)]
pub struct SlurmDefaults {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// Extra `sbatch` arguments, as given.
    pub extra_args: Vec<String>,
}

/// One attempt to submit.
pub struct SlurmSubmit<'a> {
    pub job: JobId,
    pub attempt: u32,
    pub name: Option<&'a str>,
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Cores and memory per node that the job asked for (0: not asked; the
    /// site's own defaults, DefCpuPerGPU, DefMemPerGPU…, apply).
    pub resources: gpuq_core::JobResources,
    pub argv: &'a [String],
    pub cwd: &'a str,
    /// The job contract's environment (the CUDA variables are Slurm's to set).
    pub env: &'a BTreeMap<String, String>,
    /// Minutes for `--time`; `None`: the partition's limit.
    pub time_minutes: Option<u64>,
    /// `--signal`: the signal and its lead in seconds.
    pub early_signal: Option<(&'a str, u64)>,
    pub preemptible: bool,
    /// Submit as this user (`runuser -u USER -- sbatch`); `None`: as the daemon.
    pub user: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("cannot write the batch script {path}: {source}")]
    Script {
        path: String,
        source: std::io::Error,
    },
    #[error("unexpected output from {command}: {output:?}")]
    Parse { command: String, output: String },
}

pub struct SlurmCommands {
    home: PathBuf,
    defaults: SlurmDefaults,
    /// A tag in every job name, so a restarted daemon finds its own jobs.
    tag: String,
}

/// The signal that tells the batch shell to SIGKILL the job (SIGPWR: nothing
/// else sends it to a batch shell). Given as a number, to scancel and to the
/// shell's trap alike.
pub const KILL_SIGNAL: i32 = libc::SIGPWR;

/// `[slurm] extra_args` for one job: a site's default for cores or memory
/// (`--mem-per-gpu=16G`) gives way to what the job asked for itself, as
/// sbatch's command line would otherwise override the script's request, or
/// refuse the mix (`--mem` and `--mem-per-gpu` are mutually exclusive).
fn site_args(extra: &[String], res: &gpuq_core::JobResources) -> Vec<String> {
    let mut dropped: Vec<&str> = Vec::new();
    if res.cpus > 0 {
        dropped.extend(["--cpus-per-task", "-c", "--cpus-per-gpu"]);
    }
    if res.memory_mib > 0 {
        dropped.extend(["--mem", "--mem-per-cpu", "--mem-per-gpu"]);
    }
    let mut out = Vec::new();
    let mut args = extra.iter();
    while let Some(a) = args.next() {
        let (flag, inline_value) = match a.split_once('=') {
            Some((f, _)) => (f, true),
            None => (a.as_str(), false),
        };
        if dropped.contains(&flag) {
            // `--mem 16G`: its value is the next argument.
            if !inline_value {
                args.next();
            }
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// Quotes a string for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl SlurmCommands {
    pub fn new(home: &std::path::Path, defaults: SlurmDefaults, tag: String) -> Self {
        Self {
            home: home.to_path_buf(),
            defaults,
            tag,
        }
    }

    /// The partition jobs go to (`None`: Slurm's default).
    pub fn partition(&self) -> Option<&str> {
        self.defaults.partition.as_deref()
    }

    /// The Slurm job name of an attempt: unique per daemon home, job and attempt.
    pub fn job_name(&self, job: JobId, attempt: u32) -> String {
        format!("gpuq-{}-{job}-{attempt}", self.tag)
    }

    /// The batch script. The job runs as a child of the batch shell, in a
    /// process group of its own; the shell forwards the stop protocol's signals
    /// to the whole group (as the local backend signals the job's group), waits,
    /// and records the job's exit status in the attempt's exit record (as the
    /// local supervisor does). The job's stdout and stderr go to the attempt's
    /// log; Slurm's own output (slurmstepd's notices, the shell's) to
    /// `attempt-<n>.slurm.log` beside it.
    pub fn script(&self, s: &SlurmSubmit<'_>) -> String {
        let dir = JobDir::new(&self.home, s.job);
        let mut out = String::from("#!/bin/bash\n");
        let mut directive = |d: String| out.push_str(&format!("#SBATCH {d}\n"));
        directive(format!("--job-name={}", self.job_name(s.job, s.attempt)));
        directive(format!(
            "--output={}",
            self.slurm_log(s.job, s.attempt).display()
        ));
        // A job Slurm itself requeues runs the same attempt again: keep what it wrote.
        directive("--open-mode=append".into());
        directive(format!("--chdir={}", s.cwd));
        directive(format!("--nodes={}", s.nodes.max(1)));
        directive("--ntasks-per-node=1".into());
        if s.gpus_per_node > 0 {
            directive(format!("--gres=gpu:{}", s.gpus_per_node));
        }
        // The spec's cpus and memory are per node, as is one task per node:
        // --cpus-per-task and --mem say them as they are. The per-GPU forms
        // (--cpus-per-gpu, --mem-per-gpu) would need a division that does not
        // always come out whole, and say nothing for a CPU-only job. What the
        // job did not ask for is left to the site's defaults (DefCpuPerGPU,
        // DefMemPerGPU, DefMemPerCPU); Slurm's cgroups enforce both.
        if s.resources.cpus > 0 {
            directive(format!("--cpus-per-task={}", s.resources.cpus));
        }
        if s.resources.memory_mib > 0 {
            directive(format!("--mem={}M", s.resources.memory_mib));
        }
        if let Some(m) = s.time_minutes {
            directive(format!("--time={}", m.max(1)));
        }
        if let Some((sig, lead)) = s.early_signal {
            // B: to the batch shell, which forwards it to the job.
            directive(format!("--signal=B:{sig}@{lead}"));
        }
        directive(
            if s.preemptible {
                "--requeue"
            } else {
                "--no-requeue"
            }
            .into(),
        );
        for (flag, value) in [
            ("partition", &self.defaults.partition),
            ("account", &self.defaults.account),
            ("qos", &self.defaults.qos),
        ] {
            if let Some(v) = value {
                directive(format!("--{flag}={v}"));
            }
        }
        let multi_node = s.nodes > 1;
        // Signals first: one that comes before the job exists is kept, and
        // forwarded once it does. A multi-node job's ranks are srun's step 0 on
        // every node: a signal to the step reaches all their processes (srun
        // itself would end the step at once on SIGTERM), and srun ends with them
        // (killing srun first could leave a remote rank to Slurm's KillWait).
        let forward = if multi_node {
            "scancel -Q -s \"$1\" \"$SLURM_JOB_ID.0\" 2>/dev/null || kill -s \"$1\" -- \"-$child\" 2>/dev/null"
        } else {
            "kill -s \"$1\" -- \"-$child\" 2>/dev/null"
        };
        out.push_str(&format!(
            "set -u\n\
             # gpuq's stop protocol reaches this shell (scancel -b); the job gets it.\n\
             # Signal {kill} is gpuq's SIGKILL (Slurm's own would come only after KillWait).\n\
             child='' pending=''\n\
             forward() {{\n  \
             if [ -z \"$child\" ]; then pending=\"$pending $1\"; return; fi\n  \
             {forward}\n\
             }}\n\
             for sig in TERM INT HUP USR1 USR2; do trap \"forward $sig\" $sig; done\n\
             trap 'forward KILL' {kill}\n",
            kill = KILL_SIGNAL,
        ));
        for (k, v) in s.env {
            if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !k.starts_with("SLURM_")
            {
                out.push_str(&format!("export {k}={}\n", sh_quote(v)));
            }
        }
        out.push_str(
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport GPUQ_SLURM_JOB_ID=\"$SLURM_JOB_ID\"\n",
        );
        let argv: Vec<String> = s.argv.iter().map(|a| sh_quote(a)).collect();
        let command = argv.join(" ");
        let exit_file = dir.exit_record(s.attempt);
        let log = sh_quote(&dir.log(s.attempt).display().to_string());
        if multi_node {
            // One task per node; each learns its rank from srun (torchrun reads these).
            out.push_str(
                "export NNODES=\"$SLURM_JOB_NUM_NODES\" WORLD_SIZE=\"$SLURM_JOB_NUM_NODES\"\n\
                 export MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\"\n\
                 export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n",
            );
            // A step does not take the allocation's cores per task from
            // sbatch in every Slurm version: ask for them again, or each rank
            // is confined to one core.
            let cpus = match s.resources.cpus {
                0 => String::new(),
                n => format!(" --cpus-per-task={n}"),
            };
            // set -m: the job gets a process group of its own.
            out.push_str(&format!(
                "set -m\n\
                 srun --kill-on-bad-exit=1{cpus} bash -c 'export NODE_RANK=$SLURM_NODEID; exec \"$@\"' gpuq-rank {command} >> {log} 2>&1 &\n"
            ));
        } else {
            out.push_str("export NNODES=1 NODE_RANK=0\n");
            out.push_str(&format!("set -m\n{command} >> {log} 2>&1 &\n"));
        }
        // A trapped signal interrupts `wait` (whose status is then 128 + that
        // signal): the job's own status is the one `wait` gives once the job is
        // gone (bash keeps it). A job killed by signal N has status 128+N; after
        // recording it the shell ends by the same signal (one of those that end a
        // process), so that Slurm's record (sacct) says so too: a job run as
        // another user cannot write the daemon's directory, and sacct is all
        // there is then.
        out.push_str(&format!(
            "child=$!\n\
             set +m\n\
             for sig in $pending; do forward \"$sig\"; done\n\
             while kill -0 \"$child\" 2>/dev/null; do wait \"$child\"; done\n\
             wait \"$child\"; status=$?\n\
             if [ $status -gt 128 ]; then rec='\"exit_code\":null,\"signal\":'$((status - 128)); else rec='\"exit_code\":'$status',\"signal\":null'; fi\n\
             if [ -w {dir} ]; then printf '{{%s,\"ended_at_ms\":%s}}' \"$rec\" \"$(date +%s%3N)\" > {tmp} && mv -f {tmp} {exit}; fi\n\
             # What is left of the job's process group goes with it, as on the local backend.\n\
             kill -s KILL -- \"-$child\" 2>/dev/null\n\
             if [ $status -gt 128 ] && [ $status -le 143 ]; then\n  \
             ulimit -c 0; trap - $((status - 128)) 2>/dev/null; kill -$((status - 128)) $$\n\
             fi\n\
             exit $status\n",
            tmp = sh_quote(&format!("{}.tmp", exit_file.display())),
            exit = sh_quote(&exit_file.display().to_string()),
            // Run as another user the job cannot write the daemon's directory: sacct tells instead.
            dir = sh_quote(&dir.root().display().to_string()),
        ));
        out
    }

    /// Where Slurm's own output for an attempt goes (`--output`): slurmstepd's
    /// notices and the batch shell's, never the job's (that is the attempt's log).
    pub fn slurm_log(&self, job: JobId, attempt: u32) -> PathBuf {
        JobDir::new(&self.home, job)
            .root()
            .join(format!("attempt-{attempt}.slurm.log"))
    }

    /// Creates the attempt's Slurm output file for slurmstepd, which opens it as
    /// the job's user (`owner`: uid and gid; `None`: the daemon's own user) and
    /// cannot create files in the daemon's job directory.
    pub fn prepare_slurm_log(
        &self,
        job: JobId,
        attempt: u32,
        owner: Option<(u32, u32)>,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.slurm_log(job, attempt);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// Keeps a copy of the script in the job directory (for reading) and submits
    /// it on sbatch's standard input (the job's user need not read the daemon's
    /// files); returns Slurm's job id.
    pub fn submit(&self, s: &SlurmSubmit<'_>) -> Result<u64, SlurmError> {
        let dir = JobDir::new(&self.home, s.job);
        let path = dir.root().join(format!("attempt-{}.sbatch", s.attempt));
        let script = self.script(s);
        write_private(&path, script.as_bytes()).map_err(|source| SlurmError::Script {
            path: path.display().to_string(),
            source,
        })?;
        let mut args: Vec<String> = vec!["--parsable".into()];
        args.extend(site_args(&self.defaults.extra_args, &s.resources));
        let out = run_with_input(s.user, "sbatch", &args, script.as_bytes())?;
        // --parsable prints "id" or "id;cluster".
        let id = out.trim().split(';').next().unwrap_or("");
        id.parse().map_err(|_| SlurmError::Parse {
            command: "sbatch".into(),
            output: out.clone(),
        })
    }

    /// The state of many jobs at once: one `squeue` call, and one `sacct` for
    /// those that left the queue. A job neither lists is absent from the map.
    pub fn query(&self, ids: &[u64]) -> Result<HashMap<u64, SlurmStatus>, SlurmError> {
        let mut out = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let text = run_as(
            None,
            "squeue",
            &[
                "-h",
                "-t",
                "all",
                "-o",
                "%i|%T|%r|%N",
                "-j",
                &list.join(","),
            ]
            .map(String::from),
        )
        .or_else(|e| match e {
            // squeue fails when every id has been purged from its memory.
            SlurmError::Failed { ref stderr, .. } if stderr.contains("Invalid job id") => {
                Ok(String::new())
            }
            other => Err(other),
        })?;
        out.extend(parse_squeue(&text));
        let ended: Vec<String> = ids
            .iter()
            .filter(|id| {
                out.get(id)
                    .is_none_or(|s| !s.is_pending() && !s.is_running())
            })
            .map(u64::to_string)
            .collect();
        if !ended.is_empty() {
            // -c: the job completion log (works without slurmdbd); plain sacct otherwise.
            let fields = [
                "-n",
                "-P",
                "-o",
                "JobID,State,ExitCode",
                "-j",
                &ended.join(","),
            ];
            let mut args: Vec<String> = vec!["-c".into()];
            args.extend(fields.iter().map(|s| s.to_string()));
            let acct = run_as(None, "sacct", &args)
                .or_else(|_| run_as(None, "sacct", &fields.map(String::from)))
                .unwrap_or_default();
            for (id, status) in parse_sacct(&acct) {
                out.entry(id)
                    .and_modify(|s| s.exit = status.exit)
                    .or_insert(status);
            }
        }
        Ok(out)
    }

    /// Finds this daemon's job for an attempt by its name (after a crash between
    /// the start commit and the recorded id).
    pub fn find(&self, job: JobId, attempt: u32) -> Result<Option<u64>, SlurmError> {
        let name = self.job_name(job, attempt);
        let text = run_as(
            None,
            "squeue",
            &["-h", "-t", "all", "-o", "%i", "--name", &name].map(String::from),
        )?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).max())
    }

    /// Sends `signal` to the job's batch shell (which forwards it to the job).
    pub fn signal(&self, id: u64, signal: &str, user: Option<&str>) -> Result<(), SlurmError> {
        run_as(
            user,
            "scancel",
            &["-b", "-s", signal, &id.to_string()].map(String::from),
        )
        .map(|_| ())
    }

    /// The stop protocol's SIGKILL: the batch shell kills the job's whole process
    /// group (and a multi-node job's step) at once, records the end and exits.
    /// (`scancel -s KILL`, with or without `--full`, is a cancel to Slurm: SIGTERM
    /// to everything, SIGKILL only after its KillWait; `-b -s KILL` kills the
    /// shell alone and leaves the job's processes running.)
    pub fn kill(&self, id: u64, user: Option<&str>) -> Result<(), SlurmError> {
        run_as(
            user,
            "scancel",
            &["-b", "-s", &KILL_SIGNAL.to_string(), &id.to_string()].map(String::from),
        )
        .map(|_| ())
    }

    /// Cancels the job (Slurm sends SIGTERM, then SIGKILL after its KillWait).
    pub fn cancel(&self, id: u64, user: Option<&str>) -> Result<(), SlurmError> {
        run_as(user, "scancel", &[id.to_string()]).map(|_| ())
    }

    /// The partition's nodes: one `sinfo` call (`-N`: a line per node).
    pub fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        let mut args: Vec<String> = ["-h", "-N", "-o", "%N|%G|%c|%m"].map(String::from).into();
        if let Some(p) = &self.defaults.partition {
            args.extend(["-p".to_string(), p.clone()]);
        }
        let text = run_as(None, "sinfo", &args)?;
        Ok(parse_sinfo(&text))
    }

    /// The exit record the batch script wrote, if it got that far.
    pub fn exit_record(&self, job: JobId, attempt: u32) -> Option<ExitRecord> {
        ExitRecord::read(&JobDir::new(&self.home, job), attempt)
    }
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o700)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(bytes)
}

/// Runs a Slurm command (as `user` through `runuser` when given); stdout on success.
fn run_as(user: Option<&str>, program: &str, args: &[String]) -> Result<String, SlurmError> {
    run_with_input(user, program, args, b"")
}

fn run_with_input(
    user: Option<&str>,
    program: &str,
    args: &[String],
    input: &[u8],
) -> Result<String, SlurmError> {
    let mut cmd = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--", program]);
            c
        }
        None => Command::new(program),
    };
    cmd.args(args);
    let shown = format!("{program} {}", args.join(" "));
    let spawn_err = |source| SlurmError::Spawn {
        command: program.to_string(),
        source,
    };
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    {
        use std::io::Write;
        // Dropping stdin closes it: sbatch reads the script to its end.
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(input).map_err(spawn_err)?;
    }
    let out = child.wait_with_output().map_err(spawn_err)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(SlurmError::Failed {
            command: shown,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_carries_the_contract_and_forwards_signals() {
        let home = tempfile::tempdir().unwrap();
        let b = SlurmCommands::new(
            home.path(),
            SlurmDefaults {
                partition: Some("gpu".into()),
                ..Default::default()
            },
            "abc".into(),
        );
        let env: BTreeMap<String, String> = [
            ("GPUQ_JOB_ID", "7"),
            ("ODD", "it's $HOME"),
            ("SLURM_X", "no"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let argv = vec!["python".to_string(), "train.py".into(), "--lr=3e-4".into()];
        let s = b.script(&SlurmSubmit {
            job: 7,
            attempt: 2,
            name: None,
            nodes: 1,
            gpus_per_node: 2,
            resources: gpuq_core::JobResources::default(),
            argv: &argv,
            cwd: "/work",
            env: &env,
            time_minutes: Some(90),
            early_signal: Some(("USR1", 90)),
            preemptible: true,
            user: None,
        });
        for want in [
            "#SBATCH --job-name=gpuq-abc-7-2",
            "#SBATCH --gres=gpu:2",
            "#SBATCH --time=90",
            "#SBATCH --signal=B:USR1@90",
            "#SBATCH --requeue",
            "#SBATCH --partition=gpu",
            "export ODD='it'\\''s $HOME'",
            "attempt-2.exit",
            // The job in a process group of its own, its output in its log only.
            "set -m\n'python' 'train.py' '--lr=3e-4' >> ",
            "/jobs/7/attempt-2.log' 2>&1 &\n",
            "/jobs/7/attempt-2.slurm.log\n",
            // Every signal goes to the job's whole group; SIGPWR means SIGKILL.
            "kill -s \"$1\" -- \"-$child\"",
            &format!("trap 'forward KILL' {KILL_SIGNAL}\n"),
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        assert!(!s.contains("SLURM_X"), "Slurm's own variables are Slurm's");
        assert!(!s.contains("srun"), "one node: no srun");
        let traps = s.find("trap 'forward KILL'").unwrap();
        assert!(
            traps < s.find("export ").unwrap() && traps < s.find("set -m").unwrap(),
            "the traps are set before anything else runs:\n{s}"
        );
    }

    #[test]
    fn the_jobs_cores_and_memory_become_cpus_per_task_and_mem() {
        let home = tempfile::tempdir().unwrap();
        let b = SlurmCommands::new(home.path(), SlurmDefaults::default(), "abc".into());
        let argv = vec!["python".to_string(), "train.py".into()];
        let script = |nodes, cpus, memory_mib| {
            b.script(&SlurmSubmit {
                job: 4,
                attempt: 1,
                name: None,
                nodes,
                gpus_per_node: 2,
                resources: gpuq_core::JobResources { cpus, memory_mib },
                argv: &argv,
                cwd: "/work",
                env: &BTreeMap::new(),
                time_minutes: None,
                early_signal: None,
                preemptible: false,
                user: None,
            })
        };
        let s = script(1, 8, 65536);
        assert!(s.contains("#SBATCH --cpus-per-task=8\n"), "{s}");
        assert!(s.contains("#SBATCH --mem=65536M\n"), "{s}");
        assert!(s.contains("#SBATCH --ntasks-per-node=1\n"), "per node: {s}");
        // Not asked: Slurm's own defaults apply.
        let s = script(1, 0, 0);
        assert!(
            !s.contains("--cpus-per-task") && !s.contains("--mem"),
            "{s}"
        );
        // Each rank's step of a multi-node job gets the cores too.
        let s = script(2, 4, 0);
        assert!(
            s.contains("srun --kill-on-bad-exit=1 --cpus-per-task=4 bash -c"),
            "{s}"
        );
        assert!(!s.contains("--mem"), "{s}");
    }

    #[test]
    fn a_sites_default_for_cores_or_memory_gives_way_to_the_jobs_own() {
        let extra: Vec<String> = [
            "--mem-per-gpu=16G",
            "--cpus-per-gpu",
            "4",
            "--exclusive",
            "--mem",
            "1G",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let res = |cpus, memory_mib| gpuq_core::JobResources { cpus, memory_mib };
        assert_eq!(
            site_args(&extra, &res(0, 0)),
            extra,
            "nothing asked: all kept"
        );
        assert_eq!(
            site_args(&extra, &res(0, 2048)),
            ["--cpus-per-gpu", "4", "--exclusive"]
        );
        assert_eq!(
            site_args(&extra, &res(8, 0)),
            ["--mem-per-gpu=16G", "--exclusive", "--mem", "1G"]
        );
        assert_eq!(site_args(&extra, &res(8, 2048)), ["--exclusive"]);
    }

    #[test]
    fn the_script_runs_a_multi_node_job_as_one_srun_step() {
        let home = tempfile::tempdir().unwrap();
        let b = SlurmCommands::new(home.path(), SlurmDefaults::default(), "abc".into());
        let argv = vec!["torchrun".to_string(), "train.py".into()];
        let s = b.script(&SlurmSubmit {
            job: 3,
            attempt: 1,
            name: None,
            nodes: 2,
            gpus_per_node: 1,
            resources: gpuq_core::JobResources::default(),
            argv: &argv,
            cwd: "/work",
            env: &BTreeMap::new(),
            time_minutes: None,
            early_signal: None,
            preemptible: false,
            user: None,
        });
        for want in [
            "#SBATCH --nodes=2",
            "set -m\nsrun --kill-on-bad-exit=1 bash -c",
            "gpuq-rank 'torchrun' 'train.py' >> ",
            // Signals go to the step on every node (srun would end it on SIGTERM).
            "scancel -Q -s \"$1\" \"$SLURM_JOB_ID.0\"",
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
    }

    #[test]
    fn the_script_forwards_signals_to_the_whole_job_and_records_its_end() {
        // The script itself, run by bash outside Slurm: SIGTERM reaches the job's
        // worker too, the gpuq kill signal kills the group, and the exit record and
        // the log hold what they should.
        let home = tempfile::tempdir().unwrap();
        let b = SlurmCommands::new(home.path(), SlurmDefaults::default(), "t".into());
        let dir = JobDir::new(home.path(), 1);
        std::fs::create_dir_all(dir.root()).unwrap();
        let job =
            "sh -c 'trap \"echo worker-TERM; exit 0\" TERM; echo worker-up; while true; do sleep 0.05; done' & \
                   trap 'echo main-TERM' TERM; echo main-up; while true; do sleep 0.05; done";
        let argv = vec!["sh".to_string(), "-c".into(), job.into()];
        let script = b.script(&SlurmSubmit {
            job: 1,
            attempt: 1,
            name: None,
            nodes: 1,
            gpus_per_node: 0,
            resources: gpuq_core::JobResources::default(),
            argv: &argv,
            cwd: "/",
            env: &BTreeMap::new(),
            time_minutes: None,
            early_signal: None,
            preemptible: false,
            user: None,
        });
        let shell = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("SLURM_JOB_ID", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        /// Kills the job (through its shell) if the test fails half-way.
        struct Shell(std::process::Child);
        impl Drop for Shell {
            fn drop(&mut self) {
                if let Ok(None) = self.0.try_wait() {
                    // SAFETY: a signal to the shell this test started, not yet reaped.
                    unsafe { libc::kill(self.0.id() as i32, KILL_SIGNAL) };
                    let _ = self.0.wait();
                }
            }
        }
        let mut shell = Shell(shell);
        let log = dir.log(1);
        let wait_for = |text: &str| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains(text)
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no {text:?} in the log"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        };
        // Both traps must be set before the signal: under load the worker's shell
        // can start after the main one has said "up".
        wait_for("worker-up");
        wait_for("main-up");
        let pid = shell.0.id() as i32;
        // SAFETY: signals to the shell this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        wait_for("main-TERM");
        wait_for("worker-TERM");
        unsafe { libc::kill(pid, KILL_SIGNAL) };
        let status = shell.0.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "the shell ends as its job did"
        );
        let record = ExitRecord::read(&dir, 1).expect("an exit record");
        assert_eq!((record.exit_code, record.signal), (None, Some(9)));
        let text = std::fs::read_to_string(&log).unwrap();
        // (The job's own sh says "Terminated" of its sleep, which got SIGTERM too.)
        let mut lines: Vec<&str> = text.lines().filter(|l| *l != "Terminated").collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            ["main-TERM", "main-up", "worker-TERM", "worker-up"],
            "the job's own lines, nothing of the shell's: {text}"
        );
    }
}
