//! Which CPUs a job gets: whole cores (a core's hyperthreads together), near
//! its GPUs when sysfs says which CPUs are local to them, never a core that a
//! running attempt holds.

use std::collections::BTreeSet;

/// Parses the kernel's CPU list format (`0-3,8,10-11`).
pub fn parse_list(text: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    // A list longer than any machine is not one.
                    if b >= a && b - a < 65536 {
                        out.extend(a..=b);
                    }
                }
            }
            None => {
                if let Ok(a) = part.trim().parse() {
                    out.insert(a);
                }
            }
        }
    }
    out
}

/// Writes CPUs in the kernel's list format.
pub fn format_list(cpus: &[u32]) -> String {
    let mut sorted: Vec<u32> = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The machine's cores as the jobs may use them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    /// Each core's logical CPUs (hyperthread siblings together), in order.
    pub cores: Vec<Vec<u32>>,
}

impl CpuTopology {
    /// The cores of `allowed` (the CPUs the jobs' parent group may use), with
    /// siblings from `/sys/devices/system/cpu/cpuN/topology`.
    pub fn read(allowed: &BTreeSet<u32>) -> Self {
        let siblings = |cpu: u32| {
            let base = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
            std::fs::read_to_string(format!("{base}/core_cpus_list"))
                .or_else(|_| std::fs::read_to_string(format!("{base}/thread_siblings_list")))
                .map(|t| parse_list(&t))
                .unwrap_or_default()
        };
        Self::from_siblings(allowed, siblings)
    }

    pub fn from_siblings(allowed: &BTreeSet<u32>, siblings: impl Fn(u32) -> BTreeSet<u32>) -> Self {
        let mut seen = BTreeSet::new();
        let mut cores = Vec::new();
        for &cpu in allowed {
            if seen.contains(&cpu) {
                continue;
            }
            let mut core: Vec<u32> = siblings(cpu)
                .into_iter()
                .filter(|c| allowed.contains(c))
                .collect();
            if !core.contains(&cpu) {
                core = vec![cpu];
            }
            seen.extend(core.iter().copied());
            cores.push(core);
        }
        Self { cores }
    }

    pub fn cpus(&self) -> BTreeSet<u32> {
        self.cores.iter().flatten().copied().collect()
    }

    /// The CPUs for a job asking `want` of them: exactly `want` logical CPUs,
    /// none of `reserved`, whole cores while `want` allows, the rest siblings
    /// of one core where one has them free, cores with a CPU in `near` (its
    /// GPUs' local CPUs) first. `None`: fewer than `want` are free (the
    /// scheduler counted otherwise); the job must not start then, never on
    /// CPUs others hold.
    /// `want` 0 (a job holding no cores): every CPU nobody reserved (all of
    /// them if none is free), which it shares.
    pub fn choose(
        &self,
        want: u32,
        reserved: &BTreeSet<u32>,
        near: &BTreeSet<u32>,
    ) -> Option<Vec<u32>> {
        let free: Vec<u32> = self.cpus().difference(reserved).copied().collect();
        if want == 0 {
            return Some(if free.is_empty() {
                self.cpus().into_iter().collect()
            } else {
                free
            });
        }
        let want = want as usize;
        if free.len() < want {
            return None;
        }
        let is_near = |c: &[u32]| c.iter().any(|cpu| near.contains(cpu));
        // Each core's free threads, near cores first (stable: in order).
        let mut cores: Vec<(bool, Vec<u32>, usize)> = self
            .cores
            .iter()
            .map(|c| {
                let f: Vec<u32> = c
                    .iter()
                    .copied()
                    .filter(|x| !reserved.contains(x))
                    .collect();
                (is_near(c), f, c.len())
            })
            .filter(|(_, f, _)| !f.is_empty())
            .collect();
        cores.sort_by_key(|(n, _, _)| !n);
        let mut out: Vec<u32> = Vec::with_capacity(want);
        // Whole free cores, as long as the whole core fits in what is wanted.
        for (_, f, size) in cores.iter_mut() {
            if f.len() == *size && want - out.len() >= *size {
                out.append(f);
            }
        }
        // The rest: from the core whose free threads fit it most closely, so
        // siblings stay together and whole cores stay whole for others.
        let left = want - out.len();
        if left > 0 {
            cores.retain(|(_, f, _)| !f.is_empty());
            cores.sort_by_key(|(n, f, _)| (f.len() < left, f.len(), !n));
            for (_, f, _) in cores {
                let take = (want - out.len()).min(f.len());
                out.extend_from_slice(&f[..take]);
                if out.len() == want {
                    break;
                }
            }
        }
        out.sort_unstable();
        (out.len() == want).then_some(out)
    }
}

/// The CPUs local to a PCI device (`/sys/bus/pci/devices/<bus id>/local_cpulist`);
/// NVML's bus id has an 8-digit domain, sysfs a 4-digit one.
pub fn local_to(bus_id: &str) -> BTreeSet<u32> {
    let id = bus_id.to_ascii_lowercase();
    let short = match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => id,
    };
    std::fs::read_to_string(format!("/sys/bus/pci/devices/{short}/local_cpulist"))
        .map(|t| parse_list(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn lists_read_and_write_as_the_kernel_does() {
        assert_eq!(parse_list("0-3,8,10-11\n"), set(&[0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(format_list(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert_eq!(parse_list(""), set(&[]));
    }

    /// Four cores of two threads: cpu i and i+4 are siblings.
    fn ht() -> CpuTopology {
        CpuTopology::from_siblings(&set(&[0, 1, 2, 3, 4, 5, 6, 7]), |c| {
            set(&[c % 4, c % 4 + 4])
        })
    }

    #[test]
    fn exactly_the_cpus_asked_whole_cores_near_the_gpus_never_a_reserved_one() {
        let t = ht();
        assert_eq!(t.cores.len(), 4);
        let none = set(&[]);
        // One CPU on a two-thread machine is one thread, not the whole core.
        assert_eq!(t.choose(1, &none, &none), Some(vec![0]));
        assert_eq!(t.choose(2, &none, &none), Some(vec![0, 4]));
        // Three CPUs: a whole core and one thread of the next.
        assert_eq!(t.choose(3, &none, &none), Some(vec![0, 1, 4]));
        assert_eq!(t.choose(8, &none, &none).unwrap().len(), 8);
        // Core 0 half taken, GPUs near core 3: the whole near core.
        assert_eq!(t.choose(2, &set(&[4]), &set(&[3, 7])), Some(vec![3, 7]));
        // One thread: the free sibling of a half-taken core, keeping whole
        // cores whole for jobs that want them.
        assert_eq!(t.choose(1, &set(&[4]), &none), Some(vec![0]));
        // Three with core 0 half taken: a whole core, then the lone thread.
        assert_eq!(t.choose(3, &set(&[4]), &none), Some(vec![0, 1, 5]));
        // 0 CPUs: what nobody reserved; all if everything is.
        assert_eq!(
            t.choose(0, &set(&[0, 4]), &none),
            Some(vec![1, 2, 3, 5, 6, 7])
        );
        assert_eq!(t.choose(0, &t.cpus(), &none).unwrap().len(), 8);
        // Only one free thread left: one CPU fits, two do not, and a job that
        // holds cores never falls back to CPUs others hold.
        let busy = set(&[0, 1, 2, 3, 5, 6, 7]);
        assert_eq!(t.choose(1, &busy, &none), Some(vec![4]));
        assert_eq!(t.choose(2, &busy, &none), None);
        assert_eq!(t.choose(1, &t.cpus(), &none), None);
    }

    #[test]
    fn without_hyperthreads_each_cpu_is_a_core() {
        let t = CpuTopology::from_siblings(&set(&[0, 1, 2, 3]), |c| set(&[c]));
        assert_eq!(t.choose(3, &set(&[1]), &set(&[3])), Some(vec![0, 2, 3]));
        assert_eq!(t.choose(4, &set(&[1]), &set(&[])), None);
    }
}
