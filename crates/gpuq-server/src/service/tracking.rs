//! Every job is a tracked run: its environment points the MLflow client at the
//! daemon with a token scoped to the job, and the lines it appends to its
//! metrics file land in the same store as what the client logs.

use super::Service;
use crate::identity::Caller;
use gpuq_core::tracking::metrics_file;
use gpuq_core::{JobId, JobState};
use gpuq_store::tracking::{MetricIn, Tracking, TrackingResult};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::sync::MutexGuard;

/// Most of a metrics file stored in one transaction (~50,000 points): a job
/// that writes fast never holds the database's write lock long enough to delay
/// the scheduler's commits noticeably; the loop goes on with the next chunk.
const READ_CHUNK: u64 = 2 * 1024 * 1024;
/// A line longer than this is skipped rather than waited on.
const MAX_LINE: usize = 1024 * 1024;
const JOB_TOKEN_PREFIX: &str = "gpuqjob_";
/// How long the read at an attempt's end may parse before skipping the rest:
/// the end is recorded after it, whatever the job's backlog. (The rate limits
/// bound what is parsed anyway; this holds under limits set out of reach.)
const END_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// How a job reaches the tracking API: the daemon's address, and the secret its
/// job tokens are derived from (the daemon's own token, never handed to a job
/// of another account).
pub struct TrackingLink {
    pub api_url: String,
    secret: Vec<u8>,
}

impl TrackingLink {
    pub fn new(api_url: String, daemon_token: &str) -> Self {
        Self {
            api_url,
            secret: daemon_token.as_bytes().to_vec(),
        }
    }

    fn mac(&self, job: JobId) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key");
        mac.update(format!("gpuq job token for job {job}").as_bytes());
        mac
    }

    /// A token that acts as the job's user, and only while the job is live.
    pub fn job_token(&self, job: JobId) -> String {
        let tag = self.mac(job).finalize().into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        format!("{JOB_TOKEN_PREFIX}{job}_{hex}")
    }

    /// A secret of the daemon's for `purpose` (hex), derived like job tokens.
    pub fn derived(&self, purpose: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key");
        mac.update(purpose.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The job a presented token was made for, when it is genuine.
    pub fn verify(&self, presented: &str) -> Option<JobId> {
        let rest = presented.strip_prefix(JOB_TOKEN_PREFIX)?;
        let (job, hex) = rest.split_once('_')?;
        let job: JobId = job.parse().ok()?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
            .collect::<Result<_, _>>()
            .ok()?;
        self.mac(job).verify_slice(&bytes).ok().map(|_| job)
    }
}

impl Service {
    pub fn with_tracking<T>(
        &self,
        f: impl FnOnce(&Tracking) -> TrackingResult<T>,
    ) -> TrackingResult<T> {
        f(&self.tracking())
    }

    pub fn with_tracking_mut<T>(
        &self,
        f: impl FnOnce(&mut Tracking) -> TrackingResult<T>,
    ) -> TrackingResult<T> {
        f(&mut self.tracking())
    }

    /// The data directory (artifacts of API-made runs live under it).
    pub fn home(&self) -> &std::path::Path {
        &self.home
    }

    fn tracking(&self) -> MutexGuard<'_, Tracking> {
        self.tracking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The caller a job token acts as: the job's user, never an admin, while
    /// the job is queued or running (a token that leaks from a log dies with its job).
    pub fn job_token_caller(&self, presented: &str) -> Option<Caller> {
        let job = self.link.verify(presented)?;
        let (user, state) = self
            .with_tracking(|t| t.job_user_and_state(job))
            .ok()
            .flatten()?;
        if state.is_terminal() {
            return None;
        }
        Some(Caller {
            user,
            admin: false,
            owner: false,
        })
    }

    /// The job a genuine job token was made for (whether or not it still runs).
    pub fn job_of_token(&self, presented: &str) -> Option<JobId> {
        self.link.verify(presented)
    }

    /// What a job's environment gets for tracking. A variable the spec sets
    /// itself wins (a job may log to another MLflow server on purpose); the
    /// submitter's ambient MLFLOW_* are replaced.
    pub(super) fn add_tracking_env(
        &self,
        job: JobId,
        spec: &gpuq_core::JobSpec,
        env: &mut BTreeMap<String, String>,
    ) {
        let experiment = self
            .with_tracking(|t| t.job_run(job))
            .ok()
            .flatten()
            .map(|r| r.experiment_id.to_string());
        let mut ours = vec![
            ("MLFLOW_TRACKING_URI", self.link.api_url.clone()),
            ("MLFLOW_TRACKING_TOKEN", self.link.job_token(job)),
            ("MLFLOW_RUN_ID", job.to_string()),
        ];
        if let Some(e) = experiment {
            ours.push(("MLFLOW_EXPERIMENT_ID", e));
        }
        if !spec.params.is_empty() {
            let params = serde_json::to_string(&spec.params).expect("params serialize");
            ours.push(("GPUQ_PARAMS", params));
        }
        for (k, v) in ours {
            if !spec.env.contains_key(k) {
                env.insert(k.to_string(), v);
            }
        }
    }

    /// Reads what a job appended to its metrics file since the last read into
    /// the tracking store. `ended`: the attempt is over, so a last line without
    /// its newline is taken too. Opened as the daemon's files are: no link
    /// followed, a regular file only, owned by the job's account, reads bounded.
    pub fn ingest_metrics_file(&self, job: JobId, user: &str, ended: bool) {
        // One reader at a time (the tick's and an attempt's end may overlap):
        // the last read of an ended attempt then always sees where the other stopped.
        let _one = self
            .metrics_reader
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Err(e) = self.try_ingest(job, user, ended) {
            tracing::debug!("job {job}: metrics file not read: {e}");
        }
    }

    fn try_ingest(&self, job: JobId, user: &str, ended: bool) -> Result<(), String> {
        let dir = self.job_dir(job);
        let root = gpuq_exec::safe_fs::Dir::open(dir.root()).map_err(|e| e.to_string())?;
        let owner = match self.run_as(user) {
            Ok(Some(account)) => Some(account.uid),
            // SAFETY: geteuid cannot fail.
            _ => Some(unsafe { libc::geteuid() }),
        };
        let mut file = root
            .open_regular("metrics.jsonl", owner)
            .map_err(|e| e.to_string())?;
        let size = file.metadata().map_err(|e| e.to_string())?.len();
        let mut offset = self
            .with_tracking(|t| t.metrics_file_offset(job))
            .map_err(|e| e.to_string())?;
        if size < offset {
            // Truncated or replaced by the job: start over from its beginning.
            offset = 0;
        }
        let started = std::time::Instant::now();
        let run = job.to_string();
        // Where the store's cursor stands: lines skipped unparsed (over the rate)
        // move it only with the next write, so a flood costs no transaction per chunk.
        let mut committed = offset;
        while offset < size {
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| e.to_string())?;
            let mut chunk = Vec::new();
            (&mut file)
                .take(READ_CHUNK)
                .read_to_end(&mut chunk)
                .map_err(|e| e.to_string())?;
            if chunk.is_empty() {
                break;
            }
            let last_chunk = offset + chunk.len() as u64 >= size;
            let (lines, used) = metrics_file::complete_lines(&chunk, ended && last_chunk, MAX_LINE);
            if used == 0 {
                break;
            }
            // Only as many lines are parsed as the rate has points for; the rest
            // are counted (a line as one point) and skipped.
            let (room, reason) = if ended && started.elapsed() > END_BUDGET {
                // The attempt's end waits for this read: past its budget the rest is skipped.
                (0, gpuq_store::tracking::DropReason::Rate)
            } else {
                self.metric_room(&run, user)
            };
            let mut parsed = metrics_file::Parsed::default();
            let mut unread = 0u64;
            let read_lines = lines.len().max(1);
            for line in lines {
                if parsed.points.len() >= room {
                    unread += u64::from(!line.is_empty());
                    continue;
                }
                let one = metrics_file::parse_lines(std::iter::once(line));
                parsed.points.extend(one.points);
                parsed.skipped += one.skipped;
            }
            let mut end = offset + used as u64;
            if parsed.points.len() >= room && end < size {
                // Nothing more fits for now: the rest of the file is skipped
                // unread (a flood costs no reading), its lines counted by their
                // size at this chunk's bytes per line.
                let to = last_line_end(&mut file, end, size, ended)?;
                let per_line = used as f64 / read_lines as f64;
                unread += ((to - end) as f64 / per_line).round() as u64;
                end = to;
            }
            self.count_dropped(&run, reason, unread);
            if parsed.skipped > 0 {
                tracing::debug!(
                    "job {job}: {} metrics lines were not JSON objects",
                    parsed.skipped
                );
            }
            let now = gpuq_api::home::now_ms();
            let mut points: Vec<MetricIn> = parsed
                .points
                .into_iter()
                .filter(|p| gpuq_store::tracking::check_tag(&p.key, "").is_ok())
                .map(|p| MetricIn {
                    key: p.key,
                    value: p.value,
                    time: p.time.unwrap_or(now),
                    step: p.step,
                })
                .collect();
            offset = end;
            let last = offset >= size;
            if points.is_empty() && !last {
                continue;
            }
            let (admitted, earlier) = self.admit_metrics(&run, user, points.len());
            points.truncate(admitted);
            // The points and the cursor commit together, and only from where the
            // cursor stands: after a crash the lines not yet stored are read
            // again, and no line is stored twice.
            let caps = self.metric_caps();
            let stored = self.with_tracking_mut(|t| {
                t.log_from_file_capped(job, &points, (committed, end), caps, &earlier, now)
            });
            match stored {
                Ok(Some(dropped)) => self.say_dropped(&run, &dropped),
                Ok(None) => {
                    self.unrecorded_drops(&run, earlier);
                    break;
                }
                Err(e) => {
                    self.unrecorded_drops(&run, earlier);
                    return Err(e.to_string());
                }
            }
            committed = end;
        }
        if committed < offset {
            // Only skipped lines since the last write: move the cursor past them.
            let caps = self.metric_caps();
            let now = gpuq_api::home::now_ms();
            self.with_tracking_mut(|t| {
                t.log_from_file_capped(
                    job,
                    &[],
                    (committed, offset),
                    caps,
                    &Default::default(),
                    now,
                )
            })
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Reads the metrics files of running jobs (the housekeeping tick's part).
    pub(super) fn ingest_running_metrics(&self) {
        let running: Vec<(JobId, String)> = self
            .lock()
            .running
            .iter()
            .map(|(id, r)| (*id, r.user.to_string()))
            .collect();
        for (id, user) in running {
            self.ingest_metrics_file(id, &user, false);
        }
    }

    /// A job's run status in MLflow's words (for replies that show a job).
    pub fn run_status_of(state: JobState) -> &'static str {
        gpuq_store::tracking::run_status(state)
    }
}

/// Where the last complete line before `size` ends (past `from`): a skip
/// stops there, so the next read starts at a line. At an attempt's end
/// everything goes.
fn last_line_end(
    file: &mut std::fs::File,
    from: u64,
    size: u64,
    ended: bool,
) -> Result<u64, String> {
    if ended {
        return Ok(size);
    }
    let start = size.saturating_sub(64 * 1024).max(from);
    file.seek(SeekFrom::Start(start))
        .map_err(|e| e.to_string())?;
    let mut tail = Vec::new();
    file.take(size - start)
        .read_to_end(&mut tail)
        .map_err(|e| e.to_string())?;
    Ok(match tail.iter().rposition(|&b| b == b'\n') {
        Some(at) => start + at as u64 + 1,
        None => from,
    })
}
