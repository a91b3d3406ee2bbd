//! The simulator: the scheduler core of the daemon (`gpuq_core::schedule`) on a
//! virtual clock, driven by a trace. Every figure it reports is a figure of the
//! shipped scheduler. Deterministic: same trace, cluster and policy, same output.

pub mod cluster;
pub mod engine;
pub mod report;
pub mod spot;
pub mod sweep;
pub mod trace;

pub use cluster::{Cluster, ClusterError, NodeGroup};
pub use engine::{run, PolicyName, SimOptions};
pub use report::{cdf_svg, report, Report};
pub use trace::{read as read_trace, TraceJob};
