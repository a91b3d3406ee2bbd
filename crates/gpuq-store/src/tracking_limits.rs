//! Limits on what a run stores: points and distinct metric keys per run are
//! checked in the write's own transaction, and every point dropped (by these
//! caps, or before the write by the daemon's rate limits and disk reserve) is
//! counted per run and reason in `metric_drops`, so `gpuq metrics` can say
//! "N points dropped: rate limit" and the first drop of each kind is an event.

use super::{ensure_run, write_batch, write_metrics, Batch, MetricIn, Tracking, TrackingResult};
use gpuq_core::{JobId, Millis};
use rusqlite::{params, OptionalExtension, Transaction};
use std::collections::{BTreeMap, HashSet};

/// Caps on one run's stored metrics (`[output]` in gpuq.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricCaps {
    /// Points of all its metrics together.
    pub max_points: u64,
    /// Distinct metric keys.
    pub max_keys: u64,
}

impl MetricCaps {
    pub const NONE: MetricCaps = MetricCaps {
        max_points: u64::MAX,
        max_keys: u64::MAX,
    };
}

/// Why points were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// More points per second than the job's or the user's rate allows.
    Rate,
    /// The run holds its cap of points.
    Points,
    /// A new key beyond the run's cap of distinct keys.
    Keys,
    /// The disk holding the database is down to its reserve.
    Disk,
}

impl DropReason {
    pub const ALL: [DropReason; 4] = [
        DropReason::Rate,
        DropReason::Points,
        DropReason::Keys,
        DropReason::Disk,
    ];

    /// The stored name, and the API's.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Rate => "rate limit",
            DropReason::Points => "points limit",
            DropReason::Keys => "keys limit",
            DropReason::Disk => "disk reserve",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// Points dropped, per reason.
pub type Drops = BTreeMap<DropReason, u64>;

/// What a capped write did beyond storing points.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Points dropped by this write (including those it was handed), per reason.
    pub now: Drops,
    /// Reasons this run had never dropped for before this write: say them once.
    pub first: Vec<DropReason>,
    /// The run's job, when it is a job's run.
    pub job: Option<JobId>,
}

impl Tracking {
    /// Runs `user` made through the API (not a job's own run), deleted ones too:
    /// the per-user cap on runs counts what the database holds.
    pub fn api_runs_of(&self, user: &str) -> TrackingResult<u64> {
        let n: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM runs WHERE user = ?1 AND job_id IS NULL",
            [user],
            |r| r.get(0),
        )?;
        Ok(n as u64)
    }

    /// `log_batch` under `caps`, also recording `earlier` (points the caller
    /// already dropped for this run). Params and tags are written as before.
    pub fn log_batch_capped(
        &mut self,
        run: &str,
        batch: &Batch,
        caps: MetricCaps,
        earlier: &Drops,
        now: Millis,
    ) -> TrackingResult<Dropped> {
        super::check_batch(batch)?;
        self.write(|tx| {
            ensure_run(tx, run)?;
            let (kept, mut dropped) = apply_caps(tx, run, &batch.metrics, caps)?;
            // Params and tags are keys too: a run holds at most `max_keys` of each.
            let (params, over_params) = cap_keyed(tx, "run_params", run, &batch.params, caps)?;
            let (tags, over_tags) = cap_keyed(tx, "run_tags", run, &batch.tags, caps)?;
            if over_params + over_tags > 0 {
                *dropped.entry(DropReason::Keys).or_default() += over_params + over_tags;
            }
            let rest = Batch {
                metrics: vec![],
                params,
                tags,
            };
            write_batch(tx, run, &rest)?;
            write_metrics(tx, run, &kept)?;
            add(&mut dropped, earlier);
            record_drops(tx, run, dropped, now)
        })
    }

    /// `log_from_file` under `caps`: `None` when another reader moved the cursor first.
    pub fn log_from_file_capped(
        &mut self,
        job: JobId,
        metrics: &[MetricIn],
        (from, to): (u64, u64),
        caps: MetricCaps,
        earlier: &Drops,
        now: Millis,
    ) -> TrackingResult<Option<Dropped>> {
        self.write(|tx| {
            let Some(run) = super::claim_file_range(tx, job, from, to)? else {
                return Ok(None);
            };
            let (kept, mut dropped) = apply_caps(tx, &run, metrics, caps)?;
            write_metrics(tx, &run, &kept)?;
            add(&mut dropped, earlier);
            record_drops(tx, &run, dropped, now).map(Some)
        })
    }

    /// Records points dropped before any write (a rate limit's, the disk reserve's).
    pub fn record_dropped(
        &mut self,
        run: &str,
        drops: &Drops,
        now: Millis,
    ) -> TrackingResult<Dropped> {
        self.write(|tx| record_drops(tx, run, drops.clone(), now))
    }

    /// Points a run has had dropped, per reason.
    pub fn metric_drops(&self, run: &str) -> TrackingResult<Drops> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT reason, count FROM metric_drops WHERE run_id = ?1")?;
        let rows = stmt.query_map([run], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        let mut out = Drops::new();
        for row in rows {
            let (reason, n) = row?;
            if let Some(reason) = DropReason::parse(&reason) {
                out.insert(reason, n.max(0) as u64);
            }
        }
        Ok(out)
    }
}

fn add(into: &mut Drops, more: &Drops) {
    for (r, n) in more {
        if *n > 0 {
            *into.entry(*r).or_default() += n;
        }
    }
}

/// The points that fit the run's caps, in order, and how many did not.
fn apply_caps(
    tx: &Transaction<'_>,
    run: &str,
    metrics: &[MetricIn],
    caps: MetricCaps,
) -> TrackingResult<(Vec<MetricIn>, Drops)> {
    let mut dropped = Drops::new();
    if caps == MetricCaps::NONE || metrics.is_empty() {
        return Ok((metrics.to_vec(), dropped));
    }
    let (mut points, mut keys): (i64, i64) = tx.query_row(
        "SELECT COALESCE(SUM(count), 0), COUNT(*) FROM metric_series WHERE run_id = ?1",
        [run],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut known: HashSet<&str> = HashSet::new();
    let mut refused: HashSet<&str> = HashSet::new();
    let mut kept = Vec::with_capacity(metrics.len());
    for m in metrics {
        let key = m.key.as_str();
        if !known.contains(key) && !refused.contains(key) {
            let stored = tx
                .query_row(
                    "SELECT 1 FROM metric_series WHERE run_id = ?1 AND key = ?2",
                    params![run, key],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            if stored || (keys as u64) < caps.max_keys {
                keys += i64::from(!stored);
                known.insert(key);
            } else {
                refused.insert(key);
            }
        }
        let reason = if refused.contains(key) {
            DropReason::Keys
        } else if points as u64 >= caps.max_points {
            DropReason::Points
        } else {
            points += 1;
            kept.push(m.clone());
            continue;
        };
        *dropped.entry(reason).or_default() += 1;
    }
    Ok((kept, dropped))
}

/// The params or tags (`table`) that fit the run's cap of keys: a key it has
/// already is always taken (MLflow's own rules then apply); new ones beyond
/// the cap are counted.
fn cap_keyed(
    tx: &Transaction<'_>,
    table: &str,
    run: &str,
    entries: &[(String, String)],
    caps: MetricCaps,
) -> TrackingResult<(Vec<(String, String)>, u64)> {
    if caps.max_keys == u64::MAX || entries.is_empty() {
        return Ok((entries.to_vec(), 0));
    }
    let mut held: i64 = tx.query_row(
        &format!("SELECT COUNT(*) FROM {table} WHERE run_id = ?1"),
        [run],
        |r| r.get(0),
    )?;
    let mut seen: HashSet<&str> = HashSet::new();
    let (mut kept, mut over) = (Vec::with_capacity(entries.len()), 0);
    for (k, v) in entries {
        let known = seen.contains(k.as_str())
            || tx
                .query_row(
                    &format!("SELECT 1 FROM {table} WHERE run_id = ?1 AND key = ?2"),
                    params![run, k],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
        if !known {
            if held as u64 >= caps.max_keys {
                over += 1;
                continue;
            }
            held += 1;
            seen.insert(k);
        }
        kept.push((k.clone(), v.clone()));
    }
    Ok((kept, over))
}

/// Adds `drops` to the run's counts; the first drop of a kind is an event of
/// the run's job (its history says it once).
fn record_drops(
    tx: &Transaction<'_>,
    run: &str,
    drops: Drops,
    now: Millis,
) -> TrackingResult<Dropped> {
    let mut out = Dropped::default();
    if drops.values().all(|n| *n == 0) {
        return Ok(out);
    }
    out.job = tx
        .query_row("SELECT job_id FROM runs WHERE id = ?1", [run], |r| {
            r.get::<_, Option<JobId>>(0)
        })
        .optional()?
        .flatten();
    for (reason, n) in &drops {
        if *n == 0 {
            continue;
        }
        let total: i64 = tx.query_row(
            "INSERT INTO metric_drops (run_id, reason, count) VALUES (?1, ?2, ?3) \
             ON CONFLICT (run_id, reason) DO UPDATE SET count = count + excluded.count RETURNING count",
            params![run, reason.as_str(), *n as i64],
            |r| r.get(0),
        )?;
        if total as u64 == *n {
            out.first.push(*reason);
            if let Some(job) = out.job {
                tx.prepare_cached(
                    "INSERT INTO events (at, job_id, kind, detail) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![
                    now,
                    job,
                    "metrics_dropped",
                    format!(
                        "metrics over the {}: the excess is dropped and counted (gpuq metrics {job})",
                        reason.as_str()
                    )
                ])?;
            }
        }
    }
    out.now = drops;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewJob, Store};
    use gpuq_core::JobSpec;

    fn job_run() -> (tempfile::TempDir, Store, Tracking, JobId) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpuq.db");
        let mut store = Store::open(&path).unwrap();
        let tracking = Tracking::open(&path).unwrap();
        let job = NewJob {
            spec: JobSpec {
                command: Some(vec!["true".into()]),
                ..Default::default()
            },
            user: "ada".into(),
            cwd: "/tmp".into(),
            env: Default::default(),
            idempotency_key: None,
            repro: None,
        };
        let id = store.submit(&job, 1_000).unwrap().id;
        (dir, store, tracking, id)
    }

    fn points(keys: &[&str], n: usize) -> Vec<MetricIn> {
        (0..n)
            .flat_map(|i| {
                keys.iter().map(move |k| MetricIn {
                    key: k.to_string(),
                    value: i as f64,
                    time: 1,
                    step: Some(i as i64),
                })
            })
            .collect()
    }

    #[test]
    fn caps_drop_and_count_the_excess_and_the_first_drop_is_an_event() {
        let (_d, store, mut t, job) = job_run();
        let run = job.to_string();
        let caps = MetricCaps {
            max_points: 10,
            max_keys: 2,
        };
        let batch = Batch {
            metrics: points(&["a", "b", "c"], 3),
            ..Default::default()
        };
        let d = t
            .log_batch_capped(&run, &batch, caps, &Drops::new(), 5)
            .unwrap();
        assert_eq!(d.now.get(&DropReason::Keys), Some(&3), "key c: {d:?}");
        assert_eq!(d.first, vec![DropReason::Keys]);
        assert_eq!(d.job, Some(job));
        let earlier = Drops::from([(DropReason::Rate, 7)]);
        let more = Batch {
            metrics: points(&["a"], 6),
            ..Default::default()
        };
        let d = t.log_batch_capped(&run, &more, caps, &earlier, 6).unwrap();
        assert_eq!(d.now.get(&DropReason::Points), Some(&2), "6 + 6 > 10");
        assert_eq!(d.first, vec![DropReason::Rate, DropReason::Points]);
        let d = t
            .log_batch_capped(&run, &more, caps, &Drops::new(), 7)
            .unwrap();
        assert!(d.first.is_empty(), "said once: {d:?}");
        let drops = t.metric_drops(&run).unwrap();
        assert_eq!(
            drops,
            Drops::from([
                (DropReason::Rate, 7),
                (DropReason::Points, 8),
                (DropReason::Keys, 3)
            ])
        );
        let stored: u64 = t
            .metric_keys(&run)
            .unwrap()
            .iter()
            .map(|k| t.metric_history(&run, k, 0, 100).unwrap().0.len() as u64)
            .sum();
        assert_eq!(stored, 10);
        // Tags beyond the cap of keys are dropped as well; a tag it has may change.
        let tags = Batch {
            tags: vec![
                ("a".into(), "1".into()),
                ("b".into(), "2".into()),
                ("c".into(), "3".into()),
                ("a".into(), "4".into()),
            ],
            ..Default::default()
        };
        let held = t.run(&run).unwrap().unwrap().tags.len() as u64;
        let tag_caps = MetricCaps {
            max_keys: held + 2,
            ..caps
        };
        let d = t
            .log_batch_capped(&run, &tags, tag_caps, &Drops::new(), 8)
            .unwrap();
        assert_eq!(d.now.get(&DropReason::Keys), Some(&1), "{d:?}");
        let stored = t.run(&run).unwrap().unwrap().tags;
        assert_eq!(stored.get("a").map(String::as_str), Some("4"));
        assert!(!stored.contains_key("c"), "{stored:?}");
        assert_eq!(t.metric_drops(&run).unwrap()[&DropReason::Keys], 4);
        let events = store.events(job).unwrap();
        let said: Vec<_> = events
            .iter()
            .filter(|e| e.kind == "metrics_dropped")
            .collect();
        assert_eq!(said.len(), 3, "{said:?}");
    }
}
