//! The simulated cluster: kinds of node, each a count of identical nodes.
//!
//! On the command line, `COUNTxGPUS[:MODEL]` per kind, comma-separated:
//! `617x8:V100,518x2:T4,54x4,24x1` (617 nodes of 8 V100s, 518 of 2 T4s, 54 of
//! 4 GPUs and 24 of 1 GPU of no stated model). `32x8` is one kind.
//!
//! Or a cluster file, CSV with a header naming its columns (`count` and
//! `gpus` required; `model`, `memory_mib`, `interconnect` optional and may be
//! left empty); `#` starts a comment line:
//!
//! ```text
//! count,gpus,model,memory_mib,interconnect
//! 617,8,V100,16384,InfiniBand
//! 518,2,T4,15360,Ethernet
//! 54,4,,,
//! ```
//!
//! Nodes of one kind share GPU count, model, memory and interconnect: a job
//! larger than one node runs on nodes of one kind (see `gpuq_core::scheduler`).

use gpuq_core::scheduler::GpuAttrs;
use gpuq_core::Node;
use std::fmt;

/// Most nodes in one simulated cluster, and most GPUs on one node: bounds that
/// keep a replay's memory small whatever the command line says.
pub const MAX_NODES: u32 = 100_000;
pub const MAX_GPUS_PER_NODE: u32 = 64;
const MAX_NAME_LEN: usize = 64;

/// `count` identical nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroup {
    pub count: u32,
    pub gpus: u32,
    /// The GPUs' model; empty when not stated.
    pub model: String,
    /// Each GPU's memory; 0 when not stated (a job asking for memory never fits it).
    pub memory_mib: u64,
    /// The network between the nodes; empty when not stated.
    pub interconnect: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub groups: Vec<NodeGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "cluster {text:?}: {why}; write COUNTxGPUS[:MODEL],… (e.g. 16x4 or \
         617x8:V100,518x2:T4), or give a cluster file ending in .csv"
    )]
    Spec { text: String, why: String },
    #[error("cluster file {file}: {why}")]
    Io { file: String, why: String },
    #[error(
        "cluster file {file} line {line}: {why}; the header names the columns \
         (count,gpus[,model,memory_mib,interconnect])"
    )]
    File {
        file: String,
        line: usize,
        why: String,
    },
}

impl Cluster {
    /// `nodes` nodes of `gpus` GPUs each.
    pub fn uniform(nodes: u32, gpus: u32) -> Cluster {
        Cluster {
            groups: vec![NodeGroup {
                count: nodes,
                gpus,
                model: String::new(),
                memory_mib: 0,
                interconnect: String::new(),
            }],
        }
    }

    /// A cluster file when `arg` ends in `.csv` or is a path (has a `/`), else
    /// the inline form `COUNTxGPUS[:MODEL],…`.
    pub fn from_arg(arg: &str) -> Result<Cluster, ClusterError> {
        if arg.ends_with(".csv") || arg.contains('/') {
            Cluster::read(std::path::Path::new(arg))
        } else {
            Cluster::parse(arg)
        }
    }

    /// The inline form: `617x8:V100,518x2:T4,54x4,24x1`.
    pub fn parse(text: &str) -> Result<Cluster, ClusterError> {
        let err = |why: String| ClusterError::Spec {
            text: text.to_string(),
            why,
        };
        if text.trim().is_empty() {
            return Err(err("no node kinds".into()));
        }
        let mut groups = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let (size, model) = match part.split_once(':') {
                Some((s, m)) => (s, Some(m.trim())),
                None => (part, None),
            };
            let (count, gpus) = size
                .split_once(['x', 'X'])
                .ok_or_else(|| err(format!("{part:?} has no COUNTxGPUS")))?;
            let number = |s: &str, what: &str| {
                s.trim()
                    .parse::<u32>()
                    .map_err(|_| err(format!("{what} {:?} in {part:?} is not a number", s.trim())))
            };
            let group = NodeGroup {
                count: number(count, "node count")?,
                gpus: number(gpus, "GPU count")?,
                model: match model {
                    Some("") => return Err(err(format!("{part:?} names no model after ':'"))),
                    Some(m) => m.to_string(),
                    None => String::new(),
                },
                memory_mib: 0,
                interconnect: String::new(),
            };
            check_group(&group).map_err(err)?;
            groups.push(group);
        }
        check_total(&groups).map_err(err)?;
        Ok(Cluster { groups })
    }

    pub fn read(path: &std::path::Path) -> Result<Cluster, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(|e| ClusterError::Io {
            file: path.display().to_string(),
            why: crate::trace::io_reason(&e),
        })?;
        Cluster::parse_file(&text, &path.display().to_string())
    }

    /// A cluster file's text (see the module doc).
    pub fn parse_file(text: &str, file: &str) -> Result<Cluster, ClusterError> {
        let err = |line: usize, why: String| ClusterError::File {
            file: file.to_string(),
            line,
            why,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let (header_line, header) = lines.next().ok_or_else(|| err(1, "no header".into()))?;
        let columns: Vec<&str> = header.split(',').map(str::trim).collect();
        const KNOWN: [&str; 5] = ["count", "gpus", "model", "memory_mib", "interconnect"];
        for (i, c) in columns.iter().enumerate() {
            if !KNOWN.contains(c) {
                return Err(err(header_line, format!("unknown column {c:?}")));
            }
            if columns[..i].contains(c) {
                return Err(err(header_line, format!("column {c:?} twice")));
            }
        }
        for needed in ["count", "gpus"] {
            if !columns.contains(&needed) {
                return Err(err(header_line, format!("no {needed:?} column")));
            }
        }
        let mut groups = Vec::new();
        for (line, row) in lines {
            let values: Vec<&str> = row.split(',').map(str::trim).collect();
            if values.len() != columns.len() {
                return Err(err(
                    line,
                    format!("{} fields, the header has {}", values.len(), columns.len()),
                ));
            }
            let field = |name: &str| {
                columns
                    .iter()
                    .position(|c| *c == name)
                    .map_or("", |i| values[i])
            };
            let number = |name: &str| -> Result<u64, ClusterError> {
                match field(name) {
                    "" if name == "memory_mib" => Ok(0),
                    v => v
                        .parse::<u64>()
                        .map_err(|_| err(line, format!("{name} {v:?} is not a number"))),
                }
            };
            let small = |name: &str| -> Result<u32, ClusterError> {
                u32::try_from(number(name)?)
                    .map_err(|_| err(line, format!("{name} {:?} is too large", field(name))))
            };
            let group = NodeGroup {
                count: small("count")?,
                gpus: small("gpus")?,
                model: field("model").to_string(),
                memory_mib: number("memory_mib")?,
                interconnect: field("interconnect").to_string(),
            };
            check_group(&group).map_err(|why| err(line, why))?;
            groups.push(group);
            check_total(&groups).map_err(|why| err(line, why))?;
        }
        if groups.is_empty() {
            return Err(err(header_line, "no node kinds below the header".into()));
        }
        Ok(Cluster { groups })
    }

    pub fn total_gpus(&self) -> u32 {
        self.groups.iter().map(|g| g.count * g.gpus).sum()
    }

    pub fn largest_node(&self) -> u32 {
        self.groups.iter().map(|g| g.gpus).max().unwrap_or(0)
    }

    /// The scheduler's nodes: each kind's nodes in a row, all GPUs of a node
    /// equally well connected, four job slots per GPU.
    pub fn nodes(&self) -> Vec<Node> {
        let mut out = Vec::new();
        for g in &self.groups {
            for _ in 0..g.count {
                out.push(Node {
                    name: format!("n{}", out.len()),
                    gpus: (0..g.gpus).collect(),
                    slots: g.gpus.max(1) * 4,
                    attrs: vec![
                        GpuAttrs {
                            model: g.model.clone(),
                            memory_mib: g.memory_mib,
                        };
                        g.gpus as usize
                    ],
                    links: vec![vec![3; g.gpus as usize]; g.gpus as usize],
                    interconnect: g.interconnect.clone(),
                    // A trace says nothing of cores or memory: not counted.
                    cpus: 0,
                    memory_mib: 0,
                });
            }
        }
        out
    }
}

/// The bounds every kind of node keeps.
fn check_group(g: &NodeGroup) -> Result<(), String> {
    if g.count == 0 || g.gpus == 0 {
        return Err(format!(
            "{}x{}: give at least one node of at least one GPU",
            g.count, g.gpus
        ));
    }
    if g.gpus > MAX_GPUS_PER_NODE {
        return Err(format!(
            "{} GPUs on a node: at most {MAX_GPUS_PER_NODE}",
            g.gpus
        ));
    }
    for (what, name) in [("model", &g.model), ("interconnect", &g.interconnect)] {
        if name.len() > MAX_NAME_LEN || name.chars().any(|c| c.is_control()) {
            return Err(format!(
                "{what} {name:?}: at most {MAX_NAME_LEN} printable characters"
            ));
        }
    }
    Ok(())
}

fn check_total(groups: &[NodeGroup]) -> Result<(), String> {
    let nodes: u64 = groups.iter().map(|g| u64::from(g.count)).sum();
    if nodes > u64::from(MAX_NODES) {
        return Err(format!("{nodes} nodes: at most {MAX_NODES}"));
    }
    Ok(())
}

impl fmt::Display for Cluster {
    /// The inline form (memory and interconnect, which it cannot say, left out).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}x{}", g.count, g.gpus)?;
            if !g.model.is_empty() {
                write!(f, ":{}", g.model)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_inline_form_and_the_old_one() {
        let c = Cluster::parse("617x8:V100,518x2:T4,54x4,24x1").unwrap();
        assert_eq!(c.groups.len(), 4);
        assert_eq!((c.groups[1].count, c.groups[1].gpus), (518, 2));
        assert_eq!(c.groups[1].model, "T4");
        assert_eq!(c.groups[3].model, "");
        assert_eq!(c.total_gpus(), 617 * 8 + 518 * 2 + 54 * 4 + 24);
        assert_eq!(c.to_string(), "617x8:V100,518x2:T4,54x4,24x1");
        assert_eq!(Cluster::parse("32x8").unwrap(), Cluster::uniform(32, 8));
        let nodes = c.nodes();
        assert_eq!(nodes.len(), 617 + 518 + 54 + 24);
        assert_eq!(nodes[617].kind().to_string(), "2×T4");
    }

    #[test]
    fn a_bad_cluster_says_how_to_write_one() {
        let e = Cluster::parse("9x").unwrap_err().to_string();
        assert!(
            e.starts_with("cluster \"9x\": GPU count \"\" in \"9x\" is not a number; write COUNTxGPUS[:MODEL],…"),
            "{e}"
        );
        for bad in [
            "",
            "16",
            "0x4",
            "4x0",
            "4x65",
            "16x4:",
            "x4",
            "200000x1",
            "1x1,",
            "99999999999x1",
        ] {
            assert!(Cluster::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reads_a_cluster_file() {
        let text = "# the lab\ncount,gpus,model,memory_mib,interconnect\n2,8,V100,16384,InfiniBand\n\n3,2,T4,,\n";
        let c = Cluster::parse_file(text, "c.csv").unwrap();
        assert_eq!(c.groups[0].memory_mib, 16384);
        assert_eq!(c.groups[0].interconnect, "InfiniBand");
        assert_eq!(c.groups[1].memory_mib, 0);
        assert_eq!(c.nodes()[0].kind().to_string(), "8×V100 (InfiniBand)");
        let c = Cluster::parse_file("gpus,count\n4,16\n", "c.csv").unwrap();
        assert_eq!(c, Cluster::uniform(16, 4));
        let e = Cluster::parse_file("count,gpus,colour\n1,1,red\n", "c.csv").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cluster file c.csv line 1: unknown column \"colour\"; the header names the columns \
             (count,gpus[,model,memory_mib,interconnect])"
        );
        let e = Cluster::parse_file("count,gpus\n1,x\n", "c.csv").unwrap_err();
        assert!(
            e.to_string().contains("line 2: gpus \"x\" is not a number"),
            "{e}"
        );
        assert!(Cluster::parse_file("count,gpus\n", "c.csv").is_err());
        assert!(Cluster::parse_file("count\n1\n", "c.csv").is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(s in "[0-9xX:,a-zA-Z. \\-]{0,40}") {
            if let Ok(c) = Cluster::parse(&s) {
                proptest::prop_assert_eq!(Cluster::parse(&c.to_string()).unwrap(), c);
            }
        }

        #[test]
        fn parsing_a_file_never_panics(s in "(count,gpus(,model)?(,memory_mib)?(,interconnect)?\n)?[0-9a-zA-Z,#\n ]{0,80}") {
            let _ = Cluster::parse_file(&s, "fuzz.csv");
        }
    }
}
