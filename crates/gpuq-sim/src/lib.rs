//! The simulator: the scheduler core of the daemon (`gpuq_core::schedule`) on a
//! virtual clock, driven by a trace. Every figure it reports is a figure of the
//! shipped scheduler. Deterministic: same trace, cluster and policy, same output.

pub mod engine;
pub mod report;
pub mod spot;
pub mod trace;

pub use engine::{run, PolicyName, SimOptions};
pub use report::{cdf_svg, report, Report};
pub use trace::{read as read_trace, TraceJob};

/// `16x4`: 16 nodes of 4 GPUs.
pub fn parse_cluster(s: &str) -> Result<(u32, u32), String> {
    let err = || format!("cluster {s:?}: write NODESxGPUS, e.g. 16x4 (16 nodes of 4 GPUs)");
    let (n, g) = s.split_once(['x', 'X']).ok_or_else(err)?;
    let (n, g): (u32, u32) = (
        n.trim().parse().map_err(|_| err())?,
        g.trim().parse().map_err(|_| err())?,
    );
    if n == 0 || g == 0 || n > 100_000 || g > 64 {
        return Err(err());
    }
    Ok((n, g))
}
