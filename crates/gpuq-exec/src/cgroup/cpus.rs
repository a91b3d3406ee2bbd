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

    /// The CPUs for a job asking `want` of them, none of `reserved`, whole
    /// cores first, cores with a CPU in `near` (its GPUs' local CPUs) first.
    /// `want` 0: every CPU nobody reserved (all of them if none is free). Asked
    /// more than is free (the scheduler counted otherwise): what is free.
    pub fn choose(&self, want: u32, reserved: &BTreeSet<u32>, near: &BTreeSet<u32>) -> Vec<u32> {
        let free: Vec<u32> = self.cpus().difference(reserved).copied().collect();
        if want == 0 {
            return if free.is_empty() {
                self.cpus().into_iter().collect()
            } else {
                free
            };
        }
        let whole: Vec<&Vec<u32>> = self
            .cores
            .iter()
            .filter(|c| c.iter().all(|cpu| !reserved.contains(cpu)))
            .collect();
        let is_near = |c: &&Vec<u32>| c.iter().any(|cpu| near.contains(cpu));
        let mut order: Vec<&Vec<u32>> = whole.iter().copied().filter(is_near).collect();
        order.extend(whole.iter().copied().filter(|c| !is_near(c)));
        let mut out = Vec::new();
        for core in order {
            if out.len() as u32 >= want {
                break;
            }
            out.extend(core.iter().copied());
        }
        // Not enough whole cores: single free threads of shared cores.
        for cpu in &free {
            if out.len() as u32 >= want {
                break;
            }
            if !out.contains(cpu) {
                out.push(*cpu);
            }
        }
        if out.is_empty() {
            return self.cpus().into_iter().collect();
        }
        out.sort_unstable();
        out
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
    fn whole_cores_near_the_gpus_and_never_a_reserved_one() {
        let t = ht();
        assert_eq!(t.cores.len(), 4);
        assert_eq!(t.choose(2, &set(&[]), &set(&[])), vec![0, 4]);
        // Three CPUs: two whole cores.
        assert_eq!(t.choose(3, &set(&[]), &set(&[])), vec![0, 1, 4, 5]);
        // Core 0 taken (one thread is enough to take it), GPUs near core 3.
        assert_eq!(t.choose(2, &set(&[4]), &set(&[3, 7])), vec![3, 7]);
        // 0 CPUs: what nobody reserved; all if everything is.
        assert_eq!(
            t.choose(0, &set(&[0, 4]), &set(&[])),
            vec![1, 2, 3, 5, 6, 7]
        );
        assert_eq!(t.choose(0, &t.cpus(), &set(&[])).len(), 8);
        // Only one free thread left in a shared core: it is what there is.
        assert_eq!(
            t.choose(1, &set(&[0, 1, 2, 3, 5, 6, 7]), &set(&[])),
            vec![4]
        );
    }
}
