//! Usage accounting for fair share and `gpuq usage`: GPU-seconds per user,
//! decayed with the configured half-life.
//!
//! Values are kept at a fixed reference time (the daemon's start) so that every
//! user's standing decays by the same factor: the order between users changes
//! only when usage is added, never by the mere passing of time.

use super::{Inner, Service, ServiceError};
use gpuq_api::home::now_ms;
use gpuq_api::{ProjectUsage, Usage, UserUsage};
use gpuq_core::Millis;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Ledger {
    /// The reference time of the stored values.
    epoch: Millis,
    half_life_ms: f64,
    /// Decayed GPU-seconds per user, expressed at `epoch`.
    at_epoch: HashMap<Arc<str>, f64>,
}

impl Ledger {
    pub fn new(epoch: Millis, half_life_ms: u64) -> Self {
        Self {
            epoch,
            half_life_ms: half_life_ms.max(1) as f64,
            at_epoch: HashMap::new(),
        }
    }

    /// Adds `gpu_seconds` used at time `at`.
    pub fn add(&mut self, user: &Arc<str>, gpu_seconds: f64, at: Millis) {
        let to_epoch = 2f64.powf((at - self.epoch) as f64 / self.half_life_ms);
        *self.at_epoch.entry(user.clone()).or_default() += gpu_seconds * to_epoch;
    }

    /// The user's decayed GPU-seconds as of `now`.
    pub fn decayed(&self, user: &str, now: Millis) -> f64 {
        let v = self.at_epoch.get(user).copied().unwrap_or(0.0);
        v * 2f64.powf(-((now - self.epoch) as f64) / self.half_life_ms)
    }

    /// Fair-share standings (value at the epoch over the share): only the order matters.
    pub fn standings(&self, share: impl Fn(&str) -> f64) -> HashMap<Arc<str>, f64> {
        self.at_epoch
            .iter()
            .map(|(u, v)| (u.clone(), v / share(u)))
            .collect()
    }
}

impl Service {
    /// Rebuilds the ledger from every recorded attempt (at start-up).
    pub(super) fn load_usage(inner: &mut Inner, now: Millis) -> Result<(), gpuq_store::StoreError> {
        for row in inner.store.usage_rows()? {
            let end = row.ended_at.unwrap_or(now);
            let secs = row.gpus as f64 * (end - row.started_at).max(0) as f64 / 1000.0;
            inner.ledger.add(&Arc::from(row.user.as_str()), secs, end);
        }
        Ok(())
    }

    /// Records an ended attempt's GPU time and refreshes the standings.
    pub(super) fn account(
        &self,
        inner: &mut Inner,
        user: &Arc<str>,
        gpus: usize,
        started_at: Millis,
        now: Millis,
    ) {
        if gpus == 0 {
            return;
        }
        inner.ledger.add(
            user,
            gpus as f64 * (now - started_at).max(0) as f64 / 1000.0,
            now,
        );
        inner.policy.standing = inner.ledger.standings(|u| self.config.share(u));
    }

    pub fn usage(&self) -> Result<Usage, ServiceError> {
        let now = now_ms();
        let inner = self.lock();
        let mut users: BTreeMap<String, UserUsage> = BTreeMap::new();
        let mut projects: BTreeMap<String, ProjectUsage> = BTreeMap::new();
        let policy = &inner.policy;
        let new_user = |name: &str| UserUsage {
            user: name.to_string(),
            gpu_hours: 0.0,
            decayed_gpu_hours: 0.0,
            share: self.config.share(name),
            standing: 0.0,
            running_gpus: 0,
            queued_jobs: 0,
            max_gpus: policy
                .user_max_gpus
                .get(name)
                .copied()
                .or(policy.default_user_max_gpus),
        };
        fn user_entry<'m>(
            users: &'m mut BTreeMap<String, UserUsage>,
            name: &str,
            new_user: &dyn Fn(&str) -> UserUsage,
        ) -> &'m mut UserUsage {
            users
                .entry(name.to_string())
                .or_insert_with(|| new_user(name))
        }
        for row in inner.store.usage_rows()? {
            let hours = row.gpus as f64
                * (row.ended_at.unwrap_or(now) - row.started_at).max(0) as f64
                / 3_600_000.0;
            user_entry(&mut users, &row.user, &new_user).gpu_hours += hours;
            if let Some(p) = row.project {
                let max_gpus = policy.project_max_gpus.get(p.as_str()).copied();
                projects
                    .entry(p.clone())
                    .or_insert_with(|| ProjectUsage {
                        project: p,
                        gpu_hours: 0.0,
                        running_gpus: 0,
                        max_gpus,
                    })
                    .gpu_hours += hours;
            }
        }
        for run in inner.running.values() {
            user_entry(&mut users, &run.user, &new_user).running_gpus += run.placement.gpu_count();
            if let Some(p) = &run.project {
                if let Some(e) = projects.get_mut(p.as_ref()) {
                    e.running_gpus += run.placement.gpu_count();
                }
            }
        }
        for p in inner.pending.values() {
            user_entry(&mut users, &p.user, &new_user).queued_jobs += 1;
        }
        for u in users.values_mut() {
            u.decayed_gpu_hours = inner.ledger.decayed(&u.user, now) / 3600.0;
            u.standing = u.decayed_gpu_hours / u.share;
        }
        Ok(Usage {
            users: users.into_values().collect(),
            projects: projects.into_values().collect(),
            half_life: self.config.scheduler.fair_share_half_life.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Ledger;
    use std::sync::Arc;

    #[test]
    fn usage_halves_every_half_life_and_orders_users_consistently() {
        let day = 86_400_000;
        let mut l = Ledger::new(0, day as u64);
        let (a, b): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        l.add(&a, 100.0, 0);
        assert!((l.decayed("alice", day) - 50.0).abs() < 1e-9);
        l.add(&b, 60.0, day); // 60 now vs alice's 50 now
        let s = l.standings(|_| 1.0);
        assert!(s[&b] > s[&a], "bob used more, as of now");
        let shared = l.standings(|u| if u == "bob" { 2.0 } else { 1.0 });
        assert!(
            shared[&b] < shared[&a],
            "with twice the share, bob's 60 weigh less than alice's 50"
        );
    }
}
