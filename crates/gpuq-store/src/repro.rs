//! Reads of what a job was submitted from (`jobs.repro`, written by
//! `Store::submit`) and what its attempts ran on (`attempts.runtime`, written
//! by the start). Both are JSON the store does not look into.

use super::{Result, Store};
use gpuq_core::JobId;
use rusqlite::OptionalExtension;

impl Store {
    /// The job's capture, as JSON; `None` when it was submitted without one (or does not exist).
    pub fn repro(&self, job: JobId) -> Result<Option<String>> {
        Ok(self
            .conn
            // An array's tasks share the capture stored with its first task.
            .query_row(
                "SELECT COALESCE(j.repro, a.repro) FROM jobs j LEFT JOIN jobs a ON a.id = j.array_id \
                 WHERE j.id = ?1",
                [job],
                |r| r.get(0),
            )
            .optional()?
            .flatten())
    }

    /// Each started attempt's runtime record, as JSON, oldest first (attempts
    /// recorded before there were runtime records are left out).
    pub fn runtimes(&self, job: JobId) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT runtime FROM attempts WHERE job_id = ?1 AND runtime IS NOT NULL ORDER BY attempt",
        )?;
        let rows = stmt.query_map([job], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::{NewJob, StartRecord, Store};
    use gpuq_core::JobSpec;

    fn job(repro: Option<&str>) -> NewJob {
        NewJob {
            spec: JobSpec {
                command: Some(vec!["true".into()]),
                ..Default::default()
            },
            user: "alice".into(),
            cwd: "/tmp".into(),
            env: Default::default(),
            idempotency_key: None,
            repro: repro.map(str::to_string),
        }
    }

    fn start(job: u64, runtime: Option<&str>) -> StartRecord {
        StartRecord {
            job,
            node: "n1".into(),
            gpus: vec![0],
            rate: None,
            runtime: runtime.map(str::to_string),
        }
    }

    #[test]
    fn the_capture_and_each_attempts_runtime_are_kept() {
        let mut store = Store::open_in_memory().unwrap();
        let with = store.submit(&job(Some(r#"{"hostname":"h"}"#)), 1).unwrap();
        let without = store.submit(&job(None), 1).unwrap();
        assert_eq!(
            store.repro(with.id).unwrap().as_deref(),
            Some(r#"{"hostname":"h"}"#)
        );
        assert_eq!(store.repro(without.id).unwrap(), None);
        assert_eq!(store.repro(99).unwrap(), None);

        let runtime = r#"{"attempt":0,"hostname":"n1","gpus":[],"captured_at":2}"#;
        store
            .start(&[start(with.id, Some(runtime)), start(without.id, None)], 2)
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&store.runtimes(with.id).unwrap()[0]).unwrap();
        // The attempt number is the store's to give.
        assert_eq!(
            (v["attempt"].as_u64(), v["hostname"].as_str()),
            (Some(1), Some("n1"))
        );
        assert!(store.runtimes(without.id).unwrap().is_empty());

        // A backend that queues launches (Slurm) says where the attempt ran when it starts.
        store
            .set_attempt_started(with.id, 1, 5, Some("gpu-node-3"), None)
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&store.runtimes(with.id).unwrap()[0]).unwrap();
        assert_eq!(
            (v["hostname"].as_str(), v["captured_at"].as_i64()),
            (Some("gpu-node-3"), Some(5))
        );
    }
}
