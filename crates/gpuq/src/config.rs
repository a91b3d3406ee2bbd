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
//!
//! [telemetry]
//! interval = "5s"               # how often every GPU is read
//!
//! [alerts]
//! idle_after = "10m"            # a job whose GPUs stay at or under idle_util_percent this long
//! idle_util_percent = 1
//! memory_percent = 95           # GPU memory in use
//! temperature_c = 85
//! cooldown = "30m"              # the same alert is not repeated within this time
//!
//! [[alerts.webhooks]]
//! url = "https://open.feishu.cn/open-apis/bot/v2/hook/…"
//! format = "feishu"             # json (the alert as is), slack, feishu or dingtalk
//! secret = "…"                  # optional: signs Feishu and DingTalk requests
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
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    #[serde(default)]
    pub alerts: AlertsConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    #[serde(default = "default_interval")]
    pub interval: DurationSpec,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            interval: default_interval(),
        }
    }
}

fn default_interval() -> DurationSpec {
    DurationSpec::from_secs(5)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    #[serde(default = "default_idle_after")]
    pub idle_after: DurationSpec,
    #[serde(default = "default_idle_util")]
    pub idle_util_percent: f64,
    #[serde(default = "default_memory_percent")]
    pub memory_percent: f64,
    #[serde(default = "default_temperature")]
    pub temperature_c: u32,
    #[serde(default = "default_cooldown")]
    pub cooldown: DurationSpec,
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        toml::from_str("").expect("every alerts field has a default")
    }
}

fn default_idle_after() -> DurationSpec {
    DurationSpec::from_secs(600)
}
fn default_idle_util() -> f64 {
    1.0
}
fn default_memory_percent() -> f64 {
    95.0
}
fn default_temperature() -> u32 {
    85
}
fn default_cooldown() -> DurationSpec {
    DurationSpec::from_secs(1800)
}

impl AlertsConfig {
    pub fn thresholds(&self) -> gpuq_core::alerts::Thresholds {
        gpuq_core::alerts::Thresholds {
            idle_after_ms: self.idle_after.as_millis() as i64,
            idle_util_percent: self.idle_util_percent,
            memory_percent: self.memory_percent,
            temperature_c: self.temperature_c,
            cooldown_ms: self.cooldown.as_millis() as i64,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    #[serde(default)]
    pub format: WebhookFormat,
    /// Feishu's and DingTalk's "signature" security setting.
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// The alert object as the API returns it.
    #[default]
    Json,
    Slack,
    Feishu,
    Dingtalk,
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
        if config.telemetry.interval.as_millis() < 100 {
            return Err(format!(
                "telemetry.interval: {} is too short; use 100ms or more (the default is 5s)",
                config.telemetry.interval
            ));
        }
        let a = &config.alerts;
        for (key, value) in [
            ("idle_util_percent", a.idle_util_percent),
            ("memory_percent", a.memory_percent),
        ] {
            if !(0.0..=100.0).contains(&value) {
                return Err(format!(
                    "alerts.{key}: {value} is not a percentage (0 to 100)"
                ));
            }
        }
        for (i, hook) in a.webhooks.iter().enumerate() {
            if !(hook.url.starts_with("http://") || hook.url.starts_with("https://")) {
                return Err(format!(
                    "alerts.webhooks[{i}].url: {:?} is not an http:// or https:// URL",
                    hook.url
                ));
            }
        }
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
