//! What Slurm's commands print, parsed: `squeue`, `sacct` and `sinfo` lines.

use std::collections::HashMap;

/// What Slurm says about a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmStatus {
    /// Slurm's state, e.g. `PENDING`, `RUNNING`, `COMPLETED`, `TIMEOUT`.
    pub state: String,
    /// Why it pends (`Resources`, `Priority`, …) or `None`.
    pub reason: Option<String>,
    pub nodes: Option<String>,
    /// From sacct once it ended: exit code and the signal that killed it.
    pub exit: Option<(i32, i32)>,
}

impl SlurmStatus {
    pub fn is_pending(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "RESV_DEL_HOLD"
        )
    }
    pub fn is_running(&self) -> bool {
        matches!(
            self.state.as_str(),
            "RUNNING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "STAGE_OUT"
        )
    }
}

/// `%i|%T|%r|%N` lines.
pub fn parse_squeue(text: &str) -> HashMap<u64, SlurmStatus> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.trim().split('|');
            let id = f.next()?.trim().parse().ok()?;
            let state = f.next()?.trim().to_string();
            let reason = f
                .next()
                .map(str::trim)
                .filter(|r| !r.is_empty() && *r != "None")
                .map(str::to_string);
            let nodes = f
                .next()
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string);
            Some((
                id,
                SlurmStatus {
                    state,
                    reason,
                    nodes,
                    exit: None,
                },
            ))
        })
        .collect()
}

/// One node of the partition, as `sinfo` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    pub gpus: u32,
    /// The GPU type of its `gres` (`gpu:a100:4`), if it names one.
    pub gpu_type: Option<String>,
    pub cpus: u32,
    pub memory_mib: u64,
}

/// `%N|%G|%c|%m` lines, e.g. `n1|gpu:a100:4(S:0-1),shard:8|64|512000`. A node in
/// several partitions appears once per partition: listed once. Nodes without
/// GPUs are listed with 0.
pub fn parse_sinfo(text: &str) -> Vec<SlurmNode> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for line in text.lines() {
        let mut f = line.trim().split('|');
        let Some(name) = f.next().map(str::trim).filter(|n| !n.is_empty()) else {
            continue;
        };
        if nodes.iter().any(|n| n.name == name) {
            continue;
        }
        let (gpus, gpu_type) = f.next().map(parse_gres_gpus).unwrap_or((0, None));
        let number = |s: Option<&str>| -> u64 {
            s.map(|v| v.trim().trim_end_matches('+'))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let cpus = number(f.next()) as u32;
        let memory_mib = number(f.next());
        nodes.push(SlurmNode {
            name: name.to_string(),
            gpus,
            gpu_type,
            cpus,
            memory_mib,
        });
    }
    nodes
}

/// The GPUs of a `gres` list: `gpu:2`, `gpu:tesla:2(S:0)`, `gpu:a100:4,gpu:t4:2`
/// (a sum; the first type names the node), `(null)`.
fn parse_gres_gpus(gres: &str) -> (u32, Option<String>) {
    let mut total = 0u32;
    let mut kind = None;
    for entry in gres.split(',') {
        let entry = entry.split('(').next().unwrap_or("").trim();
        let mut parts = entry.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let (name, count) = match rest.as_slice() {
            [count] => (None, *count),
            [name, count, ..] => (Some(*name), *count),
            [] => (None, "0"),
        };
        let Ok(count) = count.parse::<u32>() else {
            continue;
        };
        total = total.saturating_add(count);
        if kind.is_none() {
            kind = name.map(str::to_string);
        }
    }
    (total, kind)
}

/// `JobID|State|ExitCode` lines (`-P -n`); steps (`123.batch`) are skipped; the
/// exit code is `code:signal`; a state may carry a suffix (`CANCELLED by 0`).
pub fn parse_sacct(text: &str) -> HashMap<u64, SlurmStatus> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.trim().split('|');
            let id = f.next()?.trim().parse().ok()?;
            let state = f
                .next()?
                .split_whitespace()
                .next()?
                .trim_end_matches('+')
                .to_string();
            let (code, sig) = f.next()?.trim().split_once(':')?;
            let exit = Some((code.parse().ok()?, sig.parse().ok()?));
            Some((
                id,
                SlurmStatus {
                    state,
                    reason: None,
                    nodes: None,
                    exit,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinfo_lines_become_nodes_with_their_gpus() {
        let text = "n1|gpu:2|4|7900\nn2|gpu:tesla:2(S:0)|4|7900\nn2|gpu:tesla:2(S:0)|4|7900\n\
                    big|gpu:a100:4(S:0-1),gpu:t4:2,shard:8|64|512000+\ncpu|(null)|8|1000\n|x\n";
        let nodes = parse_sinfo(text);
        let summary: Vec<(&str, u32, Option<&str>, u32, u64)> = nodes
            .iter()
            .map(|n| {
                (
                    n.name.as_str(),
                    n.gpus,
                    n.gpu_type.as_deref(),
                    n.cpus,
                    n.memory_mib,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("n1", 2, None, 4, 7900),
                ("n2", 2, Some("tesla"), 4, 7900),
                ("big", 6, Some("a100"), 64, 512000),
                ("cpu", 0, None, 8, 1000),
            ]
        );
    }

    #[test]
    fn squeue_and_sacct_lines_parse() {
        let q = parse_squeue("12|PENDING|Resources|\n13|RUNNING|None|n1\njunk\n");
        assert_eq!(q[&12].reason.as_deref(), Some("Resources"));
        assert!(q[&12].is_pending() && q[&13].is_running());
        assert_eq!(q[&13].nodes.as_deref(), Some("n1"));
        let a = parse_sacct("12|COMPLETED|0:0\n12.batch|COMPLETED|0:0\n13|FAILED|3:0\n14|CANCELLED by 0|0:15\n15|TIMEOUT|0:0\n");
        assert_eq!(a[&13].exit, Some((3, 0)));
        assert_eq!(a[&14].state, "CANCELLED");
        assert_eq!(a[&14].exit, Some((0, 15)));
        assert_eq!(a.len(), 4);
    }

    proptest::proptest! {
        /// Whatever the commands print (another Slurm version, a broken pipe), parsing never panics.
        #[test]
        fn parsing_never_panics(text in "([0-9a-z|:(),.+\\[\\]\\- ]{0,40}\n){0,8}") {
            let _ = parse_sinfo(&text);
            let _ = parse_squeue(&text);
            let _ = parse_sacct(&text);
        }
    }
}
