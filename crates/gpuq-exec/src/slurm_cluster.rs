//! The Slurm backend: an admitted attempt is submitted with `sbatch` (off the
//! caller's thread), every attempt is tracked by one batched query per poll
//! interval, and the stop protocol goes through `scancel`. While Slurm keeps an
//! attempt PENDING its reason is the attempt's status; its clock starts when
//! Slurm starts it ([`AttemptEvent::Started`]).

use crate::backend::{
    now_ms, AttemptEvent, Backend, BackendInfo, EventSink, Launch, OutsideEnd, Reattached, Recorded,
};
use crate::slurm::{SlurmCommands, SlurmNode, SlurmStatus, SlurmSubmit};
use crate::{ExitRecord, LaunchRequest, LocalExecutor};
use gpuq_core::scheduler::GpuAttrs;
use gpuq_core::{JobId, Node};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Polls without news before an attempt Slurm no longer knows is given up.
const MISSING_POLLS: u32 = 15;
/// Default time between SIGTERM and SIGKILL (the spec's `grace` otherwise).
const DEFAULT_GRACE_MS: u64 = 30_000;
/// After gpuq's SIGKILL, how long before an attempt Slurm still runs is
/// cancelled by Slurm itself (a batch shell that could not do the kill).
const KILL_BACKSTOP: Duration = Duration::from_secs(5);

/// What is remembered of each Slurm attempt between polls.
#[derive(Debug, Clone, Default)]
struct Tracked {
    attempt: u32,
    slurm_id: Option<u64>,
    status: Option<SlurmStatus>,
    running_seen: bool,
    missing: u32,
    /// gpuq's stop protocol sent this attempt SIGKILL.
    killed: bool,
}

struct Shared {
    commands: SlurmCommands,
    /// Builds the job contract's files and environment, as for a local job.
    contract: LocalExecutor,
    tracked: Mutex<HashMap<JobId, Tracked>>,
    events: OnceLock<EventSink>,
}

pub struct SlurmCluster {
    shared: Arc<Shared>,
    info: BackendInfo,
    poll_every: Duration,
}

/// How the cluster's nodes are described to the scheduler core.
pub struct ClusterShape {
    /// Most GPUs gpuq hands Slurm at once, of each node kind.
    pub max_gpus: u32,
    /// Jobs gpuq hands Slurm at once (GPU and CPU-only).
    pub slots: u32,
}

impl SlurmCluster {
    /// Asks `sinfo` for the partition's node kinds. Each kind is offered to the
    /// core as many times as `max_gpus` allows (Slurm, not gpuq, picks the real
    /// node, and the cluster is shared), so gpuq admits up to `max_gpus` GPUs of
    /// each kind and Slurm queues what it cannot place yet. Without an answer
    /// from `sinfo`, one node of `max_gpus` GPUs stands for the cluster.
    pub fn new(
        commands: SlurmCommands,
        contract: LocalExecutor,
        shape: ClusterShape,
        poll_every: Duration,
    ) -> Self {
        let (nodes, described) = match commands.nodes() {
            Ok(found) if found.iter().any(|n| n.gpus > 0) => {
                let nodes = admission_nodes(&found, &shape);
                let kinds = nodes_summary(&found);
                (nodes, format!("node kinds from sinfo: {kinds}"))
            }
            Ok(_) => (
                vec![pool_node(&shape)],
                "sinfo lists no GPU nodes in the partition".to_string(),
            ),
            Err(e) => {
                tracing::warn!("cannot describe the Slurm partition ({e}); assuming one pool");
                (vec![pool_node(&shape)], format!("sinfo failed: {e}"))
            }
        };
        let summary = format!(
            "Slurm backend: jobs go to Slurm (partition {}; {described}); gpuq hands it up to {} of each kind at once",
            commands.partition().unwrap_or("default"),
            gpuq_core::plural(shape.max_gpus.into(), "GPU")
        );
        Self {
            shared: Arc::new(Shared {
                commands,
                contract,
                tracked: Mutex::new(HashMap::new()),
                events: OnceLock::new(),
            }),
            info: BackendInfo {
                name: "Slurm".into(),
                nodes,
                queues_launches: true,
                interactive: false,
                summary,
            },
            poll_every,
        }
    }

    /// The backstop of gpuq's SIGKILL: an attempt that Slurm still runs a while
    /// after it (its batch shell could not kill the job) is cancelled by Slurm.
    fn cancel_if_still_running(&self, job: JobId, attempt: u32, slurm_id: u64) {
        let shared = Arc::clone(&self.shared);
        let _ = std::thread::Builder::new()
            .name(format!("kill-{job}"))
            .spawn(move || {
                std::thread::sleep(KILL_BACKSTOP);
                let watched = shared
                    .tracked()
                    .get(&job)
                    .is_some_and(|t| t.attempt == attempt && t.slurm_id == Some(slurm_id));
                let runs = watched
                    && shared
                        .commands
                        .query(&[slurm_id])
                        .is_ok_and(|found| found.get(&slurm_id).is_some_and(|s| s.is_running()));
                if runs {
                    tracing::warn!(
                        "job {job}: Slurm job {slurm_id} still runs after SIGKILL; cancelling it"
                    );
                    if let Err(e) = shared.commands.cancel(slurm_id, None) {
                        tracing::warn!("job {job}: scancel of Slurm job {slurm_id} failed: {e}");
                    }
                }
            });
    }
}

/// The exit status Slurm's own record gives an attempt whose batch shell left
/// none. Slurm writes 0:0 for a job it cancelled or timed out whatever became of
/// it (the shell killed at the end of KillWait wrote nothing): that is no exit
/// status. Without one, an attempt gpuq sent SIGKILL died of it.
fn slurm_record(status: Option<&SlurmStatus>, killed: bool, now: i64) -> Option<ExitRecord> {
    let record = |exit_code: Option<i32>, signal: Option<i32>| ExitRecord {
        exit_code,
        signal,
        spawn_error: None,
        cannot_start: false,
        ended_at_ms: now,
        usage: None,
    };
    let said = status.and_then(|s| {
        let (code, sig) = s.exit?;
        let meaningless = (code, sig) == (0, 0)
            && matches!(s.state.as_str(), "CANCELLED" | "TIMEOUT" | "DEADLINE");
        (!meaningless).then_some((code, sig))
    });
    match said {
        Some((code, sig)) => Some(record(
            (sig == 0).then_some(code),
            (sig != 0).then_some(sig),
        )),
        None if killed => Some(record(None, Some(libc::SIGKILL))),
        None => None,
    }
}

/// Slurm's own cgroup counted an OOM kill (`OUT_OF_MEMORY`, from its memory
/// controller's counter): the record says so as a local job's would, so the
/// attempt ends "out of memory" and is not retried as a crash.
fn with_slurms_oom(mut r: ExitRecord, state: &str) -> ExitRecord {
    if state.starts_with("OUT_OF_MEMORY") {
        r.usage.get_or_insert_with(Default::default).oom_killed = true;
    }
    r
}

/// Node kinds: GPU count and type, in the order sinfo lists them.
fn kinds(found: &[SlurmNode]) -> Vec<(u32, Option<String>, u32)> {
    let mut kinds: Vec<(u32, Option<String>, u32)> = Vec::new();
    for n in found.iter().filter(|n| n.gpus > 0) {
        match kinds
            .iter_mut()
            .find(|(g, t, _)| *g == n.gpus && *t == n.gpu_type)
        {
            Some(k) => k.2 += 1,
            None => kinds.push((n.gpus, n.gpu_type.clone(), 1)),
        }
    }
    kinds
}

fn nodes_summary(found: &[SlurmNode]) -> String {
    kinds(found)
        .iter()
        .map(|(g, t, count)| match t {
            Some(t) => format!("{count}x{g}:{t}"),
            None => format!("{count}x{g}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn admission_nodes(found: &[SlurmNode], shape: &ClusterShape) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (gpus, gpu_type, _count) in kinds(found) {
        // At least once: a job may ask for a kind larger than max_gpus.
        let copies = (shape.max_gpus / gpus).max(1);
        for i in 0..copies {
            nodes.push(Node {
                name: format!("slurm-{}x{gpus}-{i}", gpu_type.as_deref().unwrap_or("gpu")),
                gpus: (0..gpus).collect(),
                slots: shape.slots.max(1),
                attrs: (0..gpus)
                    .map(|_| GpuAttrs {
                        model: gpu_type.clone().unwrap_or_else(|| "Slurm".into()),
                        // Slurm's gres says nothing of memory: a gpu_mem constraint is Slurm's to refuse.
                        memory_mib: u64::MAX / 2,
                    })
                    .collect(),
                links: vec![vec![0; gpus as usize]; gpus as usize],
                interconnect: String::new(),
                // Slurm places and confines cores and memory itself: not counted here.
                cpus: 0,
                memory_mib: 0,
            });
        }
    }
    nodes
}

fn pool_node(shape: &ClusterShape) -> Node {
    let n = shape.max_gpus;
    Node {
        name: "slurm".into(),
        gpus: (0..n).collect(),
        slots: shape.slots.max(n),
        attrs: (0..n)
            .map(|_| GpuAttrs {
                model: "Slurm".into(),
                memory_mib: u64::MAX / 2,
            })
            .collect(),
        links: vec![vec![0; n as usize]; n as usize],
        interconnect: String::new(),
        cpus: 0,
        memory_mib: 0,
    }
}

impl Shared {
    fn tracked(&self) -> MutexGuard<'_, HashMap<JobId, Tracked>> {
        self.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, event: AttemptEvent) {
        if let Some(sink) = self.events.get() {
            sink(event);
        }
    }

    fn submit(&self, launch: &Launch) -> Result<u64, String> {
        let req = LaunchRequest {
            job: launch.job,
            attempt: launch.attempt,
            gpus: &[],
            argv: &launch.argv,
            cwd: &launch.cwd,
            env: &launch.env,
            run_as: launch.run_as.as_ref(),
            share_gid: launch.share_gid,
            session: None,
            container: None,
        };
        self.contract
            .prepare_files(&req)
            .map_err(|e| e.to_string())?;
        self.commands
            .prepare_slurm_log(
                launch.job,
                launch.attempt,
                launch.run_as.as_ref().map(|a| (a.uid, a.gid)),
            )
            .map_err(|e| {
                format!(
                    "cannot create {}: {e}",
                    self.commands
                        .slurm_log(launch.job, launch.attempt)
                        .display()
                )
            })?;
        let spec = &launch.spec;
        let grace = spec
            .grace
            .map(|g| g.as_millis())
            .unwrap_or(DEFAULT_GRACE_MS);
        let early = spec
            .signal
            .map(|s| (s.name().to_string(), s.lead.as_millis() / 1000));
        // The core's placement when it spans nodes (a job larger than one node
        // gets whole ones); else what the spec asks. Slurm picks the real nodes.
        let (nodes, gpus_per_node) = match launch.placement.0.as_slice() {
            [first, _, ..] => (launch.placement.0.len() as u32, first.gpus.len() as u32),
            _ => (spec.nodes.unwrap_or(1), spec.gpus),
        };
        let mut env = self.contract.job_env(&req);
        // Slurm sets the GPUs a job with GPUs sees; one without sees none (an empty
        // CUDA_VISIBLE_DEVICES, as on the local backend: unset would mean all).
        if gpus_per_node > 0 {
            env.remove("CUDA_VISIBLE_DEVICES");
        }
        let submit = SlurmSubmit {
            job: launch.job,
            attempt: launch.attempt,
            name: spec.name.as_deref(),
            nodes,
            gpus_per_node,
            // Slurm's nodes count no cores or memory here: this is what the job
            // asked for itself (see `SlurmCommands::script`).
            resources: launch.resources,
            argv: &launch.argv,
            cwd: &launch.cwd,
            env: &env,
            // gpuq runs the stop protocol at the limit itself; Slurm's limit (and its
            // early signal, relative to it) is the backstop.
            time_minutes: spec
                .time_limit
                .map(|t| (t.as_millis() + grace) / 60_000 + 2),
            early_signal: early.as_ref().map(|(s, l)| (s.as_str(), *l)),
            preemptible: spec.preemptible,
            user: launch.run_as.as_ref().map(|a| a.name.as_str()),
        };
        self.commands.submit(&submit).map_err(|e| e.to_string())
    }

    fn poll(&self) {
        let watched: Vec<(JobId, u32, u64)> = self
            .tracked()
            .iter()
            .filter_map(|(id, t)| Some((*id, t.attempt, t.slurm_id?)))
            .collect();
        if watched.is_empty() {
            return;
        }
        let ids: Vec<u64> = watched.iter().map(|w| w.2).collect();
        let statuses = match self.commands.query(&ids) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot query Slurm: {e}");
                return;
            }
        };
        let now = now_ms();
        for (job, attempt, slurm_id) in watched {
            let status = statuses.get(&slurm_id).cloned();
            let mut started = None;
            let mut ended = None;
            let mut killed = false;
            {
                let mut tracked = self.tracked();
                let Some(t) = tracked.get_mut(&job).filter(|t| t.attempt == attempt) else {
                    continue;
                };
                match &status {
                    None => {
                        t.missing += 1;
                        if t.missing >= MISSING_POLLS {
                            ended = Some(None);
                        }
                    }
                    Some(s) => {
                        t.missing = 0;
                        if s.is_running() && !t.running_seen {
                            t.running_seen = true;
                            started = Some(s.nodes.clone().unwrap_or_else(|| "slurm".into()));
                        } else if !s.is_pending() && !s.is_running() {
                            ended = Some(Some(s.clone()));
                        }
                        t.status = Some(s.clone());
                    }
                }
                if ended.is_some() {
                    killed = t.killed;
                    tracked.remove(&job);
                }
            }
            if let Some(place) = started {
                self.emit(AttemptEvent::Started {
                    job,
                    attempt,
                    at: now,
                    place,
                });
            }
            if let Some(status) = ended {
                self.ended(job, attempt, slurm_id, status, killed);
            }
        }
        self.emit(AttemptEvent::Changed);
    }

    /// The attempt left Slurm: its status from the batch script's record, else
    /// from sacct; what Slurm did on its own (time limit, node failure, an
    /// outside scancel) says so. `killed`: gpuq's stop protocol sent it SIGKILL.
    fn ended(
        &self,
        job: JobId,
        attempt: u32,
        slurm_id: u64,
        status: Option<SlurmStatus>,
        killed: bool,
    ) {
        let now = now_ms();
        let state = status
            .as_ref()
            .map(|s| s.state.as_str())
            .unwrap_or("UNKNOWN");
        let record = self
            .commands
            .exit_record(job, attempt)
            .or_else(|| slurm_record(status.as_ref(), killed, now))
            .map(|r| with_slurms_oom(r, state));
        let outside = match state {
            "TIMEOUT" | "DEADLINE" => Some(OutsideEnd::TimeLimit("Slurm's time limit".into())),
            "CANCELLED" => Some(OutsideEnd::Cancelled(format!(
                "Slurm (scancel {slurm_id} outside gpuq)"
            ))),
            "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" => {
                Some(OutsideEnd::Lost(format!("Slurm job {slurm_id}: {state}")))
            }
            _ => None,
        };
        tracing::info!("job {job} attempt {attempt}: Slurm job {slurm_id} ended ({state})");
        self.emit(AttemptEvent::Ended {
            job,
            attempt,
            record,
            outside,
        });
    }
}

impl Backend for SlurmCluster {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn start(&self, events: EventSink) {
        if self.shared.events.set(events).is_err() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let every = self.poll_every;
        let _ = std::thread::Builder::new()
            .name("slurm-poll".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                shared.poll();
            });
    }

    fn launch(&self, launch: Launch) -> Result<(), String> {
        let (job, attempt) = (launch.job, launch.attempt);
        self.shared.tracked().insert(
            job,
            Tracked {
                attempt,
                ..Default::default()
            },
        );
        let shared = Arc::clone(&self.shared);
        // sbatch blocks: submit off the caller's thread.
        std::thread::Builder::new()
            .name(format!("sbatch-{job}"))
            .spawn(move || match shared.submit(&launch) {
                Ok(slurm_id) => {
                    if let Some(t) = shared
                        .tracked()
                        .get_mut(&job)
                        .filter(|t| t.attempt == attempt)
                    {
                        t.slurm_id = Some(slurm_id);
                    }
                    tracing::info!(
                        "job {job} attempt {attempt} submitted to Slurm as job {slurm_id}"
                    );
                    shared.emit(AttemptEvent::Accepted {
                        job,
                        attempt,
                        backend_id: slurm_id,
                    });
                }
                Err(why) => {
                    tracing::warn!(
                        "job {job} attempt {attempt} could not be submitted to Slurm: {why}"
                    );
                    shared.tracked().remove(&job);
                    shared.emit(AttemptEvent::Ended {
                        job,
                        attempt,
                        record: Some(ExitRecord::spawn_failed(why, now_ms())),
                        outside: None,
                    });
                }
            })
            .map(|_| ())
            .map_err(|e| format!("cannot start sbatch: {e}"))
    }

    /// A signal goes to the batch shell, which forwards it to the job's process
    /// group (SIGKILL too: see [`SlurmCommands::kill`]). Before a poll has seen the
    /// attempt run, Slurm is asked (one squeue): a job that runs gets the signal
    /// (its grace period is its own, not Slurm's KillWait); only one that really
    /// still waits in Slurm's queue is cancelled outright.
    fn signal(&self, job: JobId, attempt: u32, signal: i32) -> bool {
        let Some((slurm_id, running)) = self
            .shared
            .tracked()
            .get(&job)
            .filter(|t| t.attempt == attempt)
            .and_then(|t| Some((t.slurm_id?, t.running_seen)))
        else {
            return false;
        };
        let commands = &self.shared.commands;
        if !running {
            let state = match commands.query(&[slurm_id]) {
                Ok(mut found) => found.remove(&slurm_id),
                Err(e) => {
                    tracing::warn!("job {job}: cannot ask Slurm about job {slurm_id}: {e}");
                    return false;
                }
            };
            match state {
                Some(s) if s.is_pending() => {
                    return match commands.cancel(slurm_id, None) {
                        Ok(()) => true,
                        Err(e) => {
                            tracing::warn!(
                                "job {job}: scancel of Slurm job {slurm_id} failed: {e}"
                            );
                            false
                        }
                    };
                }
                Some(s) if s.is_running() => {}
                // Ended (the poll reports it), or not listed yet.
                _ => return false,
            }
        }
        let result = if signal == libc::SIGKILL {
            if let Some(t) = self
                .shared
                .tracked()
                .get_mut(&job)
                .filter(|t| t.attempt == attempt)
            {
                t.killed = true;
            }
            let result = commands.kill(slurm_id, None);
            if result.is_ok() {
                self.cancel_if_still_running(job, attempt, slurm_id);
            }
            result
        } else {
            commands.signal(
                slurm_id,
                crate::supervisor::signal_name(signal).trim_start_matches("SIG"),
                None,
            )
        };
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("job {job}: scancel of Slurm job {slurm_id} failed: {e}");
                false
            }
        }
    }

    /// Re-attaches by the recorded id, or by the job name if the daemon stopped
    /// before recording it; an attempt Slurm never got is launched again.
    fn reattach(&self, recorded: &Recorded) -> Reattached {
        let (job, attempt) = (recorded.job, recorded.attempt);
        let found = recorded
            .backend_id
            .or_else(|| self.shared.commands.find(job, attempt).ok().flatten());
        let Some(slurm_id) = found else {
            return Reattached::NeverLaunched;
        };
        self.shared.tracked().insert(
            job,
            Tracked {
                attempt,
                slurm_id: Some(slurm_id),
                running_seen: recorded.began,
                ..Default::default()
            },
        );
        if recorded.backend_id.is_none() {
            self.shared.emit(AttemptEvent::Accepted {
                job,
                attempt,
                backend_id: slurm_id,
            });
        }
        tracing::info!("job {job} attempt {attempt}: re-attached to Slurm job {slurm_id}");
        Reattached::Running
    }

    fn status(&self, job: JobId) -> Option<String> {
        let tracked = self.shared.tracked();
        let s = tracked.get(&job)?.status.as_ref()?;
        Some(match (&s.reason, s.is_pending()) {
            (Some(r), true) => format!("waiting in Slurm: {} ({r})", s.state),
            _ => format!(
                "Slurm: {}{}",
                s.state,
                s.nodes
                    .as_ref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gpus: u32, kind: Option<&str>) -> SlurmNode {
        SlurmNode {
            name: name.into(),
            gpus,
            gpu_type: kind.map(str::to_string),
            cpus: 8,
            memory_mib: 1000,
        }
    }

    #[test]
    fn slurms_0_0_for_a_cancelled_job_is_no_exit_status() {
        let status = |state: &str, exit| SlurmStatus {
            state: state.into(),
            reason: None,
            nodes: None,
            exit,
        };
        let said = |s: SlurmStatus, killed| {
            slurm_record(Some(&s), killed, 1).map(|r| (r.exit_code, r.signal))
        };
        assert_eq!(
            said(status("COMPLETED", Some((0, 0))), false),
            Some((Some(0), None))
        );
        assert_eq!(
            said(status("FAILED", Some((3, 0))), false),
            Some((Some(3), None))
        );
        assert_eq!(
            said(status("FAILED", Some((0, 9))), true),
            Some((None, Some(9)))
        );
        for state in ["CANCELLED", "TIMEOUT"] {
            assert_eq!(said(status(state, Some((0, 0))), false), None, "{state}");
            assert_eq!(
                said(status(state, Some((0, 0))), true),
                Some((None, Some(9))),
                "{state} after gpuq's SIGKILL"
            );
            assert_eq!(
                said(status(state, Some((0, 15))), true),
                Some((None, Some(15)))
            );
        }
        assert_eq!(slurm_record(None, false, 1), None);
        assert_eq!(slurm_record(None, true, 1).and_then(|r| r.signal), Some(9));
        // Slurm's OUT_OF_MEMORY is the cgroup's OOM kill, whatever the exit status.
        let killed = slurm_record(Some(&status("OUT_OF_MEMORY", Some((0, 9)))), false, 1).unwrap();
        let r = with_slurms_oom(killed, "OUT_OF_MEMORY");
        assert!(r.usage.is_some_and(|u| u.oom_killed));
        let failed = slurm_record(Some(&status("FAILED", Some((1, 0)))), false, 1).unwrap();
        assert_eq!(with_slurms_oom(failed, "FAILED").usage, None);
    }

    #[test]
    fn each_node_kind_is_offered_up_to_max_gpus() {
        let found = [
            node("a1", 8, Some("a100")),
            node("a2", 8, Some("a100")),
            node("t1", 2, Some("t4")),
            node("cpu", 0, None),
        ];
        let shape = ClusterShape {
            max_gpus: 16,
            slots: 32,
        };
        let nodes = admission_nodes(&found, &shape);
        let a100 = nodes.iter().filter(|n| n.attrs[0].model == "a100").count();
        let t4 = nodes.iter().filter(|n| n.attrs[0].model == "t4").count();
        assert_eq!((a100, t4), (2, 8));
        assert!(nodes.iter().all(|n| n.gpus.len() == 8 || n.gpus.len() == 2));
        assert_eq!(nodes_summary(&found), "2x8:a100,1x2:t4");
        // A kind larger than max_gpus is still offered once: a job may ask for it.
        let small = ClusterShape {
            max_gpus: 4,
            slots: 8,
        };
        assert_eq!(admission_nodes(&found, &small).len(), 1 + 2);
    }
}
