//! The waiting jobs of a replay: their order keys (the whole queue's and each
//! user's), the jobs by id, and the walk that hands a pass only the jobs that
//! could start in it.

use gpuq_core::scheduler::Policy;
use gpuq_core::{JobId, Millis, PendingJob, Priority};
use std::cmp::Reverse;
use std::collections::{btree_set, BTreeMap, BTreeSet, BinaryHeap};

/// A waiting job's place in the policy's order: (class, submit, id).
pub(super) type Key = (i64, Millis, JobId);

/// Waiting jobs, indexed three ways. Jobs are numbered like the trace, so a
/// job is found by its id with no hashing or tree search.
pub(super) struct Queue {
    order: BTreeSet<Key>,
    /// The same keys per user (gpuq's fair-share order merges users' queues).
    by_user: Vec<BTreeSet<Key>>,
    /// How many waiting jobs each class holds (the fair-share walk visits classes in order).
    classes: BTreeMap<i64, usize>,
    /// How many waiting jobs ask for each number of GPUs: the walk stops once
    /// it has seen every job that fits by count.
    sizes: BTreeMap<u32, usize>,
    jobs: Vec<Option<PendingJob>>,
}

impl Queue {
    pub fn new(jobs: usize, users: usize) -> Queue {
        Queue {
            order: BTreeSet::new(),
            by_user: vec![BTreeSet::new(); users],
            classes: BTreeMap::new(),
            sizes: BTreeMap::new(),
            jobs: (0..jobs).map(|_| None).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn first(&self) -> Option<&Key> {
        self.order.first()
    }

    /// The first waiting job in the queue's order.
    pub fn first_job(&self) -> Option<&PendingJob> {
        self.order.first().map(|k| self.job(k.2))
    }

    pub fn insert(&mut self, key: Key, user: usize, job: PendingJob) {
        self.order.insert(key);
        self.by_user[user].insert(key);
        *self.classes.entry(key.0).or_default() += 1;
        *self.sizes.entry(job.gpus).or_default() += 1;
        self.jobs[key.2 as usize] = Some(job);
    }

    pub fn remove(&mut self, key: Key, user: usize) -> Option<PendingJob> {
        if !self.order.remove(&key) {
            return None;
        }
        self.by_user[user].remove(&key);
        uncount(&mut self.classes, key.0);
        let job = self.jobs[key.2 as usize].take()?;
        uncount(&mut self.sizes, job.gpus);
        Some(job)
    }

    /// Moves a waiting job to another place in the order, in another class.
    pub fn rekey(&mut self, old: Key, new: Key, user: usize, class: Priority) {
        if let Some(mut job) = self.remove(old, user) {
            job.priority = class;
            self.insert(new, user, job);
        }
    }

    fn job(&self, id: JobId) -> &PendingJob {
        self.jobs[id as usize]
            .as_ref()
            .expect("a queued key has its job")
    }

    /// Every waiting job in the queue's order.
    pub fn in_order(&self) -> impl Iterator<Item = &PendingJob> + '_ {
        self.order.iter().map(|k| self.job(k.2))
    }

    /// The waiting jobs a pass needs to see, in the policy's order: those that fit
    /// the free GPUs by count, up to twice the free GPUs plus 16 of them (each start
    /// takes at least one GPU; the margin covers jobs that fit by count but not on
    /// one node, or not on whole nodes of one kind), and the first that does not
    /// fit (it holds the backfill reservation). Strict FIFO needs only the prefix
    /// up to the first blocked job. The jobs left out cannot start in this pass,
    /// so the decisions are the core's on the whole queue, at a fraction of the
    /// cost on deep queues.
    ///
    /// `standing` is each user's fair-share standing (empty: queue order).
    pub fn candidates(&self, policy: &Policy, standing: &[f64], free: u32) -> Vec<&PendingJob> {
        let limit = 2 * free as usize + 16;
        // Past the last job that fits by count, only the first big one matters.
        let fit_in_queue: usize = self.sizes.range(..=free).map(|(_, n)| n).sum();
        let mut out = Vec::new();
        let mut fitting = 0usize;
        let mut big_seen = false;
        let mut used = 0u32;
        let mut walk = |key: Key| -> bool {
            let job = self.job(key.2);
            let gpus = job.gpus;
            // A placement holds at least the GPUs asked for (whole nodes may round up).
            if gpus <= free {
                // Jobs after this point come after every job passed: no reservation
                // made for a later big job could change what these do.
                if fitting >= limit {
                    return false;
                }
                fitting += 1;
                used = used.saturating_add(gpus);
                out.push(job);
                if policy.strict_order && used > free {
                    return false;
                }
            } else if !big_seen {
                big_seen = true;
                out.push(job);
                if policy.strict_order {
                    return false;
                }
            }
            !((fitting >= limit || fitting == fit_in_queue) && big_seen)
        };
        if standing.is_empty() {
            for &key in &self.order {
                if !walk(key) {
                    break;
                }
            }
        } else {
            for key in self.fair_share_order(standing) {
                if !walk(key) {
                    break;
                }
            }
        }
        out
    }

    /// gpuq's order (the core's `fair_share_order`): priority class, then lower
    /// fair-share standing, then submit order. Within a class, the users with
    /// the lowest standing come first, each user's run of the queue already in
    /// submit order: a class is the users' runs one after another, merged only
    /// among users of equal standing. No sort, and no heap over all users.
    fn fair_share_order<'q>(&'q self, standing: &[f64]) -> impl Iterator<Item = Key> + 'q {
        let bits = |u: usize| standing.get(u).copied().unwrap_or(0.0).max(0.0).to_bits();
        let mut users: Vec<usize> = (0..self.by_user.len())
            .filter(|&u| !self.by_user[u].is_empty())
            .collect();
        users.sort_by_key(|&u| (bits(u), u));
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, &u) in users.iter().enumerate() {
            if i > 0 && bits(users[i - 1]) == bits(u) {
                groups.last_mut().expect("a group was started").push(u);
            } else {
                groups.push(vec![u]);
            }
        }
        self.classes.keys().flat_map(move |&class| {
            let groups = groups.clone();
            groups
                .into_iter()
                .flat_map(move |group| Merge::new(self, class, &group))
        })
    }
}

fn uncount<K: Ord>(counts: &mut BTreeMap<K, usize>, key: K) {
    if let Some(n) = counts.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&key);
        }
    }
}

/// Users' runs of one class merged by (submit, id): users of equal standing.
struct Merge<'q> {
    class: i64,
    runs: Vec<btree_set::Range<'q, Key>>,
    heads: BinaryHeap<Reverse<(Millis, JobId, usize)>>,
}

impl<'q> Merge<'q> {
    fn new(queue: &'q Queue, class: i64, users: &[usize]) -> Merge<'q> {
        let mut runs: Vec<_> = users
            .iter()
            .map(|&u| {
                queue.by_user[u].range((class, Millis::MIN, 0)..=(class, Millis::MAX, JobId::MAX))
            })
            .collect();
        let mut heads = BinaryHeap::with_capacity(runs.len());
        for (i, run) in runs.iter_mut().enumerate() {
            if let Some(k) = run.next() {
                heads.push(Reverse((k.1, k.2, i)));
            }
        }
        Merge { class, runs, heads }
    }
}

impl Iterator for Merge<'_> {
    type Item = Key;
    fn next(&mut self) -> Option<Key> {
        let Reverse((submit, id, i)) = self.heads.pop()?;
        if let Some(k) = self.runs[i].next() {
            self.heads.push(Reverse((k.1, k.2, i)));
        }
        Some((self.class, submit, id))
    }
}
