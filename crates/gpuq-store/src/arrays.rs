//! Job arrays: an array's tasks are ordinary jobs sharing `jobs.array_id` (the
//! first task's id, which is the array's), each with its `array_index` and the
//! array's `array_limit` (migration 7). All of an array's tasks are written in
//! one transaction: a refused or interrupted submit leaves none of them.

use super::{insert_event, priority_rank, read_job, ListFilter, NewJob, Result, Store};
use gpuq_core::array::{task_name, ArraySpec};
use gpuq_core::{Job, JobId, Millis};
use rusqlite::{params, OptionalExtension};
use std::collections::{BTreeMap, HashMap};

/// The variables each task of an array gets, besides the job's own.
pub const ARRAY_ENV: [&str; 5] = [
    "GPUQ_ARRAY_ID",
    "GPUQ_ARRAY_INDEX",
    "GPUQ_ARRAY_SIZE",
    "GPUQ_ARRAY_MIN",
    "GPUQ_ARRAY_MAX",
];

impl Store {
    /// Inserts one queued job per index of `array`, in index order, with the
    /// events and tracking runs a job gets, all in one transaction; returns the
    /// tasks (the first one's id is the array's). Each task's spec is `new`'s
    /// without `array`, named `NAME[K]` when `new` has a name; its environment
    /// is `new`'s with `GPUQ_ARRAY_*` set. The capture (`repro`) is stored with
    /// the first task only and read through `array_id` for the others. With an
    /// idempotency key already used, returns that array's tasks instead.
    pub fn submit_array(
        &mut self,
        new: &NewJob,
        array: &ArraySpec,
        now: Millis,
    ) -> Result<Vec<Job>> {
        if let Some(key) = &new.idempotency_key {
            let existing: Option<(JobId, Option<JobId>)> = self
                .conn
                .query_row(
                    "SELECT id, array_id FROM jobs WHERE idempotency_key = ?1 AND user = ?2",
                    params![key, new.user],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((id, array_id)) = existing {
                return match array_id {
                    Some(a) => self.array_tasks(a),
                    None => Ok(self.job(id)?.into_iter().collect()),
                };
            }
        }
        let indices = array.indices();
        let (min, max) = (indices[0], indices[indices.len() - 1]);
        // The runs of later tasks need only the capture's git part (their tags).
        let git_only = new
            .repro
            .as_deref()
            .and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok())
            .and_then(|r| r.get("git").cloned())
            .map(|git| serde_json::json!({ "git": git }).to_string());
        let first = self.write(|tx| {
            let mut first: Option<JobId> = None;
            for &k in indices {
                let mut spec = new.spec.clone();
                spec.array = None;
                spec.name = new.spec.name.as_deref().map(|n| task_name(n, k));
                let spec_json = serde_json::to_string(&spec).expect("spec serializes");
                let mut env = new.env.clone();
                let id_text = first.map(|f| f.to_string()).unwrap_or_default();
                for (name, value) in ARRAY_ENV.iter().zip([
                    id_text,
                    k.to_string(),
                    indices.len().to_string(),
                    min.to_string(),
                    max.to_string(),
                ]) {
                    env.insert(name.to_string(), value);
                }
                let env_json = serde_json::to_string(&env).expect("env serializes");
                tx.prepare_cached(
                    "INSERT INTO jobs (name, user, project, state, priority, gpus_requested, gpus, command, cwd, \
                     attempt, submitted_at, spec, env, idempotency_key, repro, array_id, array_index, array_limit) \
                     VALUES (?1, ?2, ?3, 'queued', ?4, ?5, '[]', ?6, ?7, 0, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                )?
                .execute(params![
                    spec.name,
                    new.user,
                    spec.project,
                    priority_rank(spec.priority),
                    spec.gpus,
                    spec.display_command(),
                    new.cwd,
                    now,
                    spec_json,
                    env_json,
                    first.is_none().then_some(new.idempotency_key.as_deref()).flatten(),
                    first.is_none().then_some(new.repro.as_deref()).flatten(),
                    first,
                    k,
                    array.limit()
                ])?;
                let id = tx.last_insert_rowid() as JobId;
                let array_id = *first.get_or_insert(id);
                if array_id == id {
                    // The first task learns the array's id (its own) now that it has one.
                    env.insert("GPUQ_ARRAY_ID".into(), id.to_string());
                    tx.execute(
                        "UPDATE jobs SET array_id = ?1, env = ?2 WHERE id = ?1",
                        params![id, serde_json::to_string(&env).expect("env serializes")],
                    )?;
                }
                insert_event(
                    tx,
                    now,
                    id,
                    "submitted",
                    &format!("by {} (array {array_id}, task {k})", new.user),
                )?;
                let repro = if array_id == id {
                    new.repro.as_deref()
                } else {
                    git_only.as_deref()
                };
                super::tracking::insert_job_run(tx, id, &spec, &new.user, repro, now)?;
                for (key, value) in [
                    ("gpuq.array_id", array_id.to_string()),
                    ("gpuq.array_index", k.to_string()),
                ] {
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO run_tags (run_id, key, value) VALUES (?1, ?2, ?3)",
                    )?
                    .execute(params![id.to_string(), key, value])?;
                }
            }
            Ok(first.expect("an array has at least one task"))
        })?;
        self.array_tasks(first)
    }

    /// The tasks of array `array`, by index; empty when it is not an array.
    pub fn array_tasks(&self, array: JobId) -> Result<Vec<Job>> {
        let sql = format!(
            "SELECT {} FROM jobs WHERE array_id = ?1 ORDER BY array_index",
            super::JOB_COLUMNS
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([array], read_job)?;
        let mut jobs = Vec::new();
        for row in rows {
            jobs.push(row??);
        }
        Ok(jobs)
    }

    /// The job ids of array `array`'s tasks, by index; empty when it is not an array.
    pub fn array_task_ids(&self, array: JobId) -> Result<Vec<JobId>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM jobs WHERE array_id = ?1 ORDER BY array_index")?;
        let rows = stmt.query_map([array], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The indices of array `array`'s tasks, ascending (from the index alone:
    /// no task row is read).
    pub fn array_indices(&self, array: JobId) -> Result<Vec<u32>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT array_index FROM jobs WHERE array_id = ?1 ORDER BY array_index",
        )?;
        let rows = stmt.query_map([array], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Task `index` of array `array`.
    pub fn array_task(&self, array: JobId, index: u32) -> Result<Option<Job>> {
        let sql = format!(
            "SELECT {} FROM jobs WHERE array_id = ?1 AND array_index = ?2",
            super::JOB_COLUMNS
        );
        let row = self
            .conn
            .query_row(&sql, params![array, index], read_job)
            .optional()?;
        row.transpose()
    }

    /// How many tasks of each array are in each state (by the state's name).
    pub fn array_counts(&self, arrays: &[JobId]) -> Result<HashMap<JobId, BTreeMap<String, u32>>> {
        let mut out: HashMap<JobId, BTreeMap<String, u32>> = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT state, COUNT(*) FROM jobs WHERE array_id = ?1 GROUP BY state",
        )?;
        for &a in arrays {
            let rows =
                stmt.query_map([a], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?)))?;
            let counts = out.entry(a).or_default();
            for row in rows {
                let (state, n) = row?;
                counts.insert(state, n);
            }
        }
        Ok(out)
    }

    /// The listing with each array as one row, newest first: plain jobs in
    /// `filter`'s states, and the first task of each array that has a task in
    /// them (any array, without states); `limit` counts rows.
    pub fn list_rows(&self, filter: &ListFilter) -> Result<Vec<Job>> {
        let mut sql = format!("SELECT {} FROM jobs j WHERE ", super::JOB_COLUMNS);
        match filter.states_sql() {
            None => sql.push_str("(j.array_id IS NULL OR j.array_id = j.id)"),
            Some(states) => sql.push_str(&format!(
                "((j.array_id IS NULL AND j.state IN ({states})) OR (j.array_id = j.id AND EXISTS \
                 (SELECT 1 FROM jobs t WHERE t.array_id = j.id AND t.state IN ({states}))))"
            )),
        }
        // An array's tasks share its user and project: filtering its first task filters it.
        let (conds, values) = filter.conditions("j.");
        for cond in conds {
            sql.push_str(&format!(" AND {cond}"));
        }
        let ascending = filter.after.is_some() && filter.before.is_none();
        sql.push_str(if ascending {
            " ORDER BY j.id ASC"
        } else {
            " ORDER BY j.id DESC"
        });
        if let Some(limit) = filter.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        let mut rows = self.readable_jobs(&sql, values)?;
        if ascending {
            rows.reverse();
        }
        Ok(rows)
    }

    /// Puts ended jobs back in the queue, each with a fresh retry budget, in one
    /// transaction (as [`Store::requeue_ended`] does one).
    pub fn requeue_ended_many(&mut self, jobs: &[JobId], by: &str, now: Millis) -> Result<()> {
        self.write(|tx| {
            for &job in jobs {
                tx.prepare_cached(
                    "UPDATE jobs SET state = 'queued', failures = 0, eligible_at = NULL, ended_at = NULL, \
                     reason = ?2 WHERE id = ?1",
                )?
                .execute(params![job, format!("requeued by {by}")])?;
                super::back_in_queue(tx, job)?;
                insert_event(tx, now, job, "requeued", &format!("by {by}"))?;
            }
            Ok(())
        })
    }

    /// Holds (`held_by: Some(user)`) or releases (`None`) queued jobs, in one
    /// transaction; `by` asked for it.
    pub fn set_held_many(
        &mut self,
        jobs: &[JobId],
        held_by: Option<&str>,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        let kind = if held_by.is_some() {
            "held"
        } else {
            "released"
        };
        self.write(|tx| {
            for &job in jobs {
                tx.prepare_cached("UPDATE jobs SET held_by = ?2 WHERE id = ?1")?
                    .execute(params![job, held_by])?;
                insert_event(tx, now, job, kind, &format!("by {by}"))?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ListFilter, StartRecord};
    use gpuq_core::JobSpec;
    use gpuq_core::JobState;

    fn new(name: Option<&str>, key: Option<&str>) -> NewJob {
        NewJob {
            spec: JobSpec {
                name: name.map(str::to_string),
                command: Some(vec!["true".into()]),
                array: Some("0-2%2".parse().unwrap()),
                ..Default::default()
            },
            user: "ana".into(),
            cwd: "/tmp".into(),
            env: [("PATH".to_string(), "/bin".to_string())].into(),
            idempotency_key: key.map(str::to_string),
            repro: Some(r#"{"git":{"commit":"abc"},"diff":"big"}"#.into()),
        }
    }

    #[test]
    fn an_array_is_its_tasks_under_the_first_ones_id() {
        let mut store = Store::open_in_memory().unwrap();
        let plain = store
            .submit(
                &NewJob {
                    spec: JobSpec {
                        command: Some(vec!["true".into()]),
                        ..Default::default()
                    },
                    ..new(None, None)
                },
                1,
            )
            .unwrap();
        let n = new(Some("infer"), Some("k1"));
        let tasks = store
            .submit_array(&n, n.spec.array.as_ref().unwrap(), 2)
            .unwrap();
        assert_eq!(tasks.len(), 3);
        let id = tasks[0].id;
        assert!(tasks.iter().all(|t| t.array_id == Some(id)));
        assert_eq!(
            tasks.iter().map(|t| t.array_index).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2)]
        );
        assert!(tasks.iter().all(|t| t.array_limit == Some(2)));
        assert_eq!(tasks[2].name.as_deref(), Some("infer[2]"));
        assert!(tasks.iter().all(|t| t.spec.array.is_none()));
        assert_eq!(store.job(plain.id).unwrap().unwrap().array_id, None);

        let env = store.launch_info(tasks[1].id).unwrap().env;
        assert_eq!(env["GPUQ_ARRAY_ID"], id.to_string());
        assert_eq!(env["GPUQ_ARRAY_INDEX"], "1");
        assert_eq!(env["GPUQ_ARRAY_SIZE"], "3");
        assert_eq!(
            store.launch_info(id).unwrap().env["GPUQ_ARRAY_ID"],
            id.to_string()
        );
        // The capture is stored once and read for every task.
        assert_eq!(store.repro(tasks[2].id).unwrap(), n.repro);

        // The same key again: the same array, nothing new.
        let again = store
            .submit_array(&n, n.spec.array.as_ref().unwrap(), 3)
            .unwrap();
        assert_eq!(
            again.iter().map(|t| t.id).collect::<Vec<_>>(),
            tasks.iter().map(|t| t.id).collect::<Vec<_>>()
        );
        assert_eq!(store.list(&ListFilter::default()).unwrap().len(), 4);

        assert_eq!(store.array_task(id, 2).unwrap().unwrap().id, tasks[2].id);
        assert_eq!(store.array_indices(id).unwrap(), [0, 1, 2]);
        assert_eq!(
            store.array_task_ids(id).unwrap(),
            tasks.iter().map(|t| t.id).collect::<Vec<_>>()
        );
        assert!(store.array_task(id, 7).unwrap().is_none());
        assert!(store.array_tasks(plain.id).unwrap().is_empty());

        // Listed as one row; by state, an array is listed while a task is in one.
        let rows = store.list_rows(&ListFilter::default()).unwrap();
        assert_eq!(
            rows.iter().map(|j| j.id).collect::<Vec<_>>(),
            [id, plain.id]
        );
        store
            .start(
                &[StartRecord {
                    job: tasks[1].id,
                    node: "n".into(),
                    gpus: vec![],
                    rate: None,
                    runtime: None,
                }],
                4,
            )
            .unwrap();
        let running = ListFilter {
            states: vec![JobState::Running],
            ..Default::default()
        };
        let rows = store.list_rows(&running).unwrap();
        assert_eq!(rows.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
        let counts = &store.array_counts(&[id]).unwrap()[&id];
        assert_eq!((counts["queued"], counts["running"]), (2, 1));

        store
            .set_held_many(&[tasks[0].id, tasks[2].id], Some("ana"), "ana", 5)
            .unwrap();
        assert_eq!(
            store.job(tasks[2].id).unwrap().unwrap().held_by.as_deref(),
            Some("ana")
        );
        let tagged: String = store
            .conn
            .query_row(
                "SELECT value FROM run_tags WHERE run_id = ?1 AND key = 'gpuq.array_index'",
                [tasks[2].id.to_string()],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tagged, "2");
    }
}
