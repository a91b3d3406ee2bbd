//! `[output]` of gpuq.toml: what jobs may write (see the module above for the keys).

use serde::Deserialize;

/// `[output]`: limits on what jobs write, so one job's flood of logs or
/// metrics cannot fill the database's disk or slow everyone's commands.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// An attempt's log beyond this keeps its head and its last
    /// `min(half, log_pipe::TAIL_MAX)` bytes.
    #[serde(default = "default_log_max_size")]
    pub log_max_size: gpuq_core::MemSize,
    /// Free space kept on the data directory's disk for the database; `None`:
    /// 5% of that disk, at most 1 GiB.
    pub disk_reserve: Option<gpuq_core::MemSize>,
    #[serde(default = "default_metrics_rate")]
    pub metrics_rate: u32,
    #[serde(default = "default_metrics_burst")]
    pub metrics_burst: u32,
    #[serde(default = "default_metrics_user_rate")]
    pub metrics_user_rate: u32,
    #[serde(default = "default_metrics_user_burst")]
    pub metrics_user_burst: u32,
    #[serde(default = "default_metrics_max_points")]
    pub metrics_max_points: u64,
    #[serde(default = "default_metrics_max_keys")]
    pub metrics_max_keys: u64,
    /// Runs a user may create through the tracking API (their jobs' own runs
    /// do not count; deleted ones do: they stay in the database).
    #[serde(default = "default_max_runs_per_user")]
    pub max_runs_per_user: u64,
    /// The largest single artifact an upload may write.
    #[serde(default = "default_artifact_max_size")]
    pub artifact_max_size: gpuq_core::MemSize,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            log_max_size: default_log_max_size(),
            disk_reserve: None,
            metrics_rate: default_metrics_rate(),
            metrics_burst: default_metrics_burst(),
            metrics_user_rate: default_metrics_user_rate(),
            metrics_user_burst: default_metrics_user_burst(),
            metrics_max_points: default_metrics_max_points(),
            metrics_max_keys: default_metrics_max_keys(),
            max_runs_per_user: default_max_runs_per_user(),
            artifact_max_size: default_artifact_max_size(),
        }
    }
}

impl OutputConfig {
    /// The reserve on a disk of `total` bytes.
    pub fn reserve_bytes(&self, total: u64) -> u64 {
        match self.disk_reserve {
            Some(r) => r.mib() * 1024 * 1024,
            None => (total / 20).min(1 << 30),
        }
    }

    pub(super) fn check(&self) -> Result<(), String> {
        for (key, v) in [
            ("metrics_rate", self.metrics_rate),
            ("metrics_burst", self.metrics_burst),
            ("metrics_user_rate", self.metrics_user_rate),
            ("metrics_user_burst", self.metrics_user_burst),
        ] {
            if v == 0 {
                return Err(format!(
                    "output.{key}: 0 would drop every metric; give a number of points (the default is {})",
                    OutputConfig::default_of(key)
                ));
            }
        }
        if self.max_runs_per_user == 0 {
            return Err(format!(
                "output.max_runs_per_user: 0 would refuse every run made through the API; give a number \
                 of runs (the default is {})",
                default_max_runs_per_user()
            ));
        }
        if self.artifact_max_size.mib() == 0 {
            return Err("output.artifact_max_size: give at least 1M (the default is 64G)".into());
        }
        if self.log_max_size.mib() == 0 {
            return Err("output.log_max_size: give at least 1M (the default is 1G)".into());
        }
        Ok(())
    }

    fn default_of(key: &str) -> u32 {
        match key {
            "metrics_rate" => default_metrics_rate(),
            "metrics_burst" => default_metrics_burst(),
            "metrics_user_rate" => default_metrics_user_rate(),
            _ => default_metrics_user_burst(),
        }
    }
}

fn default_log_max_size() -> gpuq_core::MemSize {
    "1G".parse().expect("a size")
}
fn default_metrics_rate() -> u32 {
    1000
}
fn default_metrics_burst() -> u32 {
    50_000
}
fn default_metrics_user_rate() -> u32 {
    5000
}
fn default_metrics_user_burst() -> u32 {
    100_000
}
fn default_metrics_max_points() -> u64 {
    5_000_000
}
fn default_metrics_max_keys() -> u64 {
    1000
}
fn default_max_runs_per_user() -> u64 {
    10_000
}
fn default_artifact_max_size() -> gpuq_core::MemSize {
    "64G".parse().expect("a size")
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn defaults_fit_a_long_run_and_mistakes_name_the_key() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.output.metrics_rate, 1000);
        assert_eq!(c.output.log_max_size.mib(), 1024);
        assert_eq!(
            c.output.reserve_bytes(10 << 30),
            512 << 20,
            "5% of a small disk"
        );
        assert_eq!(c.output.reserve_bytes(1 << 40), 1 << 30, "at most 1 GiB");
        let c = Config::parse("[output]\ndisk_reserve = \"2G\"\nmetrics_rate = 10\n").unwrap();
        assert_eq!(c.output.reserve_bytes(1 << 40), 2 << 30);
        let e = Config::parse("[output]\nmetrics_rate = 0\n").unwrap_err();
        assert!(
            e.contains("output.metrics_rate") && e.contains("1000"),
            "{e}"
        );
        let e = Config::parse("[output]\nmetrics_rate = -5\n").unwrap_err();
        assert!(e.contains("metrics_rate"), "{e}");
        assert_eq!(c.output.max_runs_per_user, 10_000);
        assert_eq!(c.output.artifact_max_size.mib(), 64 << 10);
        let e = Config::parse("[output]\nmax_runs_per_user = 0\n").unwrap_err();
        assert!(
            e.contains("output.max_runs_per_user") && e.contains("10000"),
            "{e}"
        );
        let e = Config::parse("[output]\nlog_max = \"1G\"\n").unwrap_err();
        assert!(e.contains("log_max"), "{e}");
    }
}
