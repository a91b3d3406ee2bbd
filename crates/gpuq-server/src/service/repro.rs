//! Reproducibility records: the submitter's capture, completed with what the
//! daemon knows for certain (the command, the directory, the environment the
//! job gets, masked), each attempt's runtime (node, GPUs, driver), and rerun.

use super::{Service, ServiceError};
use crate::identity::Caller;
use gpuq_api::repro::{self, Repro, ReproView, RuntimeGpu, RuntimeInfo};
use gpuq_api::SubmitRequest;
use gpuq_core::{Job, JobId, JobSpec, Millis, Placement};
use std::collections::BTreeMap;

/// The record kept with a job: the client's capture with the daemon's facts
/// over it, so what `gpuq show --repro` says the job ran is what it runs.
/// The environment is masked before it is stored: the record is shown, the
/// job's own environment (kept apart) is not.
pub(super) fn completed(
    capture: Option<Repro>,
    spec: &JobSpec,
    cwd: &str,
    env: &BTreeMap<String, String>,
) -> Option<String> {
    let mut r = capture?;
    r.command = spec.command.clone().unwrap_or_default();
    r.script = spec.run.clone();
    r.cwd = cwd.to_string();
    r.env = repro::mask_secrets(env);
    // Only an answer to a reader who is not the owner withholds anything.
    r.withheld = None;
    serde_json::to_string(&r).ok()
}

impl Service {
    /// What an attempt about to start on `placement` runs on, as JSON (its
    /// attempt number is the store's to fill in). GPU UUIDs and the driver are
    /// known for this machine's GPUs only (not for a cluster's nodes).
    pub(super) fn runtime_record(
        &self,
        placement: &Placement,
        now: Millis,
        environment: Option<gpuq_api::repro::RuntimeEnvironment>,
    ) -> Option<String> {
        let mut gpus = Vec::new();
        for p in &placement.0 {
            let node = self.nodes.get(p.node)?;
            for &index in &p.gpus {
                let local = self.gpus.iter().find(|g| g.index == index);
                let model = node
                    .gpus
                    .iter()
                    .position(|&g| g == index)
                    .and_then(|at| node.attrs.get(at))
                    .map(|a| a.model.clone())
                    .filter(|m| !m.is_empty())
                    .or_else(|| local.map(|g| g.model.clone()))
                    .unwrap_or_default();
                gpus.push(RuntimeGpu {
                    index,
                    model,
                    uuid: local.map(|g| g.uuid.clone()),
                });
            }
        }
        let names: Vec<&str> = placement
            .nodes()
            .filter_map(|n| Some(self.nodes.get(n)?.name.as_str()))
            .collect();
        let info = RuntimeInfo {
            attempt: 0,
            hostname: names.join(","),
            gpus,
            driver_version: self.driver.version.clone(),
            cuda_version: self.driver.cuda_version.clone(),
            captured_at: now,
            environment,
        };
        serde_json::to_string(&info).ok()
    }

    /// The job's record and its attempts' runtimes. `owner`: the caller may see
    /// the environment's values, the diff, the untracked names and the
    /// packages (the job's owner, or an admin).
    pub fn repro_view(&self, id: JobId, owner: bool) -> Result<ReproView, ServiceError> {
        let (record, runtimes) = {
            let inner = self.lock();
            if inner.store.state(id)?.is_none() {
                return Err(ServiceError::NoSuchJob(id));
            }
            (inner.store.repro(id)?, inner.store.runtimes(id)?)
        };
        // A record this build cannot read is reported as missing, not as a failed request.
        let mut repro = record.and_then(|r| match serde_json::from_str::<Repro>(&r) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!("job {id}: unreadable reproducibility record: {e}");
                None
            }
        });
        if let (Some(r), false) = (repro.as_mut(), owner) {
            repro::withhold_private(r);
        }
        let runtime = runtimes
            .iter()
            .filter_map(|r| serde_json::from_str::<RuntimeInfo>(r).ok())
            .collect();
        Ok(ReproView {
            job: id,
            repro,
            runtime,
        })
    }

    /// Submits job `id`'s spec again, with its directory and the environment it
    /// was given, as its user, through the ordinary submit (checks, quotas,
    /// budgets). The caller's right to do so is checked by the route.
    pub fn rerun(
        &self,
        id: JobId,
        capture: Option<Repro>,
        caller: &Caller,
    ) -> Result<Job, ServiceError> {
        let (job, info) = {
            let inner = self.lock();
            let job = inner.store.job(id)?.ok_or(ServiceError::NoSuchJob(id))?;
            (job, inner.store.launch_info(id)?)
        };
        let req = SubmitRequest {
            spec: info.spec,
            cwd: info.cwd,
            env: info.env,
            user: job.user,
            idempotency_key: None,
            repro: capture,
        };
        self.submit(req, caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_fills_in_what_it_knows_and_masks_the_environment() {
        let spec = JobSpec {
            command: Some(vec!["python".into(), "train.py".into()]),
            ..Default::default()
        };
        let env: BTreeMap<String, String> = [("HF_TOKEN", "hf_x"), ("PATH", "/bin")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // A client's claims about the command and environment are replaced.
        let capture = Repro {
            hostname: "laptop".into(),
            command: vec!["lies".into()],
            env: [("X".to_string(), "y".to_string())].into(),
            ..Default::default()
        };
        let r: Repro =
            serde_json::from_str(&completed(Some(capture), &spec, "/work", &env).unwrap()).unwrap();
        assert_eq!(r.command, ["python", "train.py"]);
        assert_eq!((r.cwd.as_str(), r.hostname.as_str()), ("/work", "laptop"));
        assert_eq!(r.env["HF_TOKEN"], repro::HIDDEN);
        assert_eq!(r.env["PATH"], "/bin");
        assert!(!r.env.contains_key("X"));
        assert!(completed(None, &spec, "/work", &env).is_none());
    }
}
