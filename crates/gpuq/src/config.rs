//! The daemon's configuration: `gpuq server --config FILE`, else
//! `$GPUQ_HOME/gpuq.toml` when it exists. Every field is optional.
//!
//! ```toml
//! admins = ["alice"]            # may cancel, requeue, hold any job
//! single_user = false           # true: even as root, run every job as the daemon's user
//!
//! [scheduler]
//! fair_share_half_life = "7d"   # how fast past usage is forgotten
//! default_max_gpus = 4          # per user, at once
//! default_max_queued = 1000     # per user
//! slots = 32                    # jobs at once on this node
//!
//! [users.alice]
//! share = 2                     # twice bob's share of the GPUs
//! max_gpus = 8
//!
//! [projects.vision]
//! max_gpus = 6
//! max_queued = 500
//! ```

use gpuq_core::DurationSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Users who may act on every job (besides root and the daemon's own user).
    #[serde(default)]
    pub admins: Vec<String>,
    /// Even when run as root, serve only the daemon's own user and run every
    /// job as that user (socket mode 0600). Names in submits are then labels.
    #[serde(default)]
    pub single_user: bool,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    #[serde(default)]
    pub users: BTreeMap<String, UserConfig>,
    #[serde(default)]
    pub projects: BTreeMap<String, ProjectConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    #[serde(default = "default_half_life")]
    pub fair_share_half_life: DurationSpec,
    pub default_max_gpus: Option<u32>,
    pub default_max_queued: Option<u32>,
    pub slots: Option<u32>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            fair_share_half_life: default_half_life(),
            default_max_gpus: None,
            default_max_queued: None,
            slots: None,
        }
    }
}

fn default_half_life() -> DurationSpec {
    DurationSpec::from_secs(7 * 24 * 3600)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    #[serde(default = "one")]
    pub share: f64,
    pub max_gpus: Option<u32>,
    pub max_queued: Option<u32>,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    pub max_gpus: Option<u32>,
    pub max_queued: Option<u32>,
}

impl Config {
    /// Reads `explicit`, else `home/gpuq.toml` if present, else the defaults.
    pub fn load(explicit: Option<&Path>, home: &Path) -> Result<Self, String> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => {
                let p = home.join("gpuq.toml");
                if !p.exists() {
                    return Ok(Config::default());
                }
                p
            }
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let config: Config =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        for (name, user) in &config.users {
            if !(user.share.is_finite() && user.share > 0.0) {
                return Err(format!(
                    "users.{name}.share: {} is not a positive number",
                    user.share
                ));
            }
        }
        Ok(config)
    }

    pub fn share(&self, user: &str) -> f64 {
        self.users.get(user).map(|u| u.share).unwrap_or(1.0)
    }

    pub fn max_queued(&self, user: &str) -> Option<u32> {
        self.users
            .get(user)
            .and_then(|u| u.max_queued)
            .or(self.scheduler.default_max_queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_shares_and_quotas() {
        let c = Config::parse(
            "[scheduler]\nfair_share_half_life = \"1d\"\ndefault_max_gpus = 4\n[users.alice]\nshare = 2\nmax_queued = 3\n[projects.nlp]\nmax_gpus = 6\n",
        )
        .unwrap();
        assert_eq!(c.scheduler.fair_share_half_life.as_millis(), 86_400_000);
        assert_eq!((c.share("alice"), c.share("bob")), (2.0, 1.0));
        assert_eq!(c.max_queued("alice"), Some(3));
        assert_eq!(c.projects["nlp"].max_gpus, Some(6));
    }

    #[test]
    fn mistakes_name_the_key_and_line() {
        let e = Config::parse("[users.alice]\nshares = 2\n").unwrap_err();
        assert!(e.contains("shares") && e.contains("line 2"), "{e}");
        let e = Config::parse("[users.bob]\nshare = -1\n").unwrap_err();
        assert!(e.contains("users.bob.share"), "{e}");
        let e = Config::parse("[scheduler]\nfair_share_half_life = \"soon\"\n").unwrap_err();
        assert!(e.contains("write it like"), "{e}");
    }
}
