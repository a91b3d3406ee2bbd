//! Reproducibility: what a job was submitted from (code, interpreter,
//! packages, environment) and what each attempt ran on (node, GPUs, driver).
//!
//! The client captures the code and the interpreter at submit
//! (`SubmitRequest::repro`); the daemon fills in what it knows better (the
//! command, the working directory, the environment, masked) and records each
//! attempt's [`RuntimeInfo`] when it starts. `GET /v1/jobs/{id}/repro` returns
//! both as a [`ReproView`].

use gpuq_core::JobId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most of a diff kept: beyond it the diff is cut (at a file boundary when it can be).
pub const MAX_DIFF_BYTES: usize = 256 * 1024;
/// Most untracked names kept.
pub const MAX_UNTRACKED: usize = 1000;
/// Most `pip freeze` lines kept.
pub const MAX_PACKAGES: usize = 5000;
/// The largest capture the daemon accepts, as JSON (the client's part, before
/// the daemon adds the command and the environment, which have their own limits).
pub const MAX_REPRO_BYTES: usize = 1024 * 1024;
/// What a hidden value reads as, wherever values are hidden.
pub const HIDDEN: &str = "(hidden)";

/// What a job was submitted from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Repro {
    /// When the client captured it (epoch ms).
    pub captured_at: i64,
    /// The submitting machine's host name.
    pub hostname: String,
    /// How long the capture took, in milliseconds.
    #[serde(default)]
    pub capture_ms: u64,
    /// The program and its arguments (the spec's `command`); set by the daemon.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The spec's `run` script, when the job has one instead of a command; set by the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// The job's working directory; set by the daemon.
    #[serde(default)]
    pub cwd: String,
    /// The git checkout the working directory is in; `None` outside one (or without git).
    #[serde(default)]
    pub git: Option<GitInfo>,
    /// The Python interpreter the job would run; `None` when none was found.
    #[serde(default)]
    pub python: Option<PythonInfo>,
    /// The job's environment (the submitter's with the spec's on top), values of
    /// secret-looking names hidden and credentials taken out of URLs; set by the daemon.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// What could not be captured, and why (a time limit, no pip, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Set when the diff, the untracked names and the package list were left
    /// out of this answer: they are the owner's and admins' only (the diff's
    /// size and hash stay, so others still see that it changed and can compare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<Withheld>,
}

/// What was left out of a record for a reader who is not its owner (nor an
/// admin), counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Withheld {
    /// Untracked names left out.
    pub untracked: usize,
    /// `pip freeze` lines left out.
    pub packages: usize,
}

/// The code: a git checkout at submit time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitInfo {
    /// The checkout's top directory.
    pub root: String,
    /// The commit checked out (full hash); `None` in a repository without commits.
    pub commit: Option<String>,
    /// The branch; `None` on a detached HEAD.
    pub branch: Option<String>,
    /// The URL of the `origin` remote (else the first one), credentials removed.
    pub remote: Option<String>,
    /// Tracked files differ from the commit (staged or not). Untracked files do not count.
    pub dirty: bool,
    /// `git diff HEAD --binary` (tracked changes against the commit), at most
    /// [`MAX_DIFF_BYTES`]: whole files when it is cut, so it still applies with `git apply`.
    pub diff: String,
    /// The full diff's size in bytes (more than `diff` holds when truncated).
    pub diff_bytes: u64,
    /// `diff` holds only part of the diff.
    pub diff_truncated: bool,
    /// SHA-256 of the full diff (hex): compares diffs even when truncated; empty when there is none.
    #[serde(default)]
    pub diff_sha256: String,
    /// Untracked, not ignored, paths relative to `root` (a directory ends in `/`), at most [`MAX_UNTRACKED`].
    pub untracked: Vec<String>,
    /// More untracked paths existed than `untracked` holds.
    pub untracked_truncated: bool,
}

/// The interpreter and its packages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PythonInfo {
    /// `sys.executable`: the interpreter itself (a pyenv shim resolves to the real one).
    pub executable: String,
    /// e.g. `3.11.7`.
    pub version: String,
    /// The virtual environment's directory, when the interpreter runs in one (venv, conda).
    #[serde(default)]
    pub virtual_env: Option<String>,
    /// `pip freeze` lines (`name==version`, `-e …`), at most [`MAX_PACKAGES`]; empty when
    /// pip is missing or did not answer in time (see `notes`).
    #[serde(default)]
    pub packages: Vec<String>,
    /// The project's lock file, when its root has one.
    #[serde(default)]
    pub lock: Option<LockInfo>,
}

/// A lock file (`uv.lock`, `poetry.lock`, …) and its hash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LockInfo {
    /// The lock file, absolute.
    pub path: String,
    /// SHA-256 of its contents (hex).
    pub sha256: String,
}

/// What one attempt ran on, recorded by the daemon when it starts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeInfo {
    /// The attempt (1 for the first run).
    pub attempt: u32,
    /// The node (several, comma-separated, for a multi-node job); on Slurm, where
    /// Slurm ran it (known once it started).
    pub hostname: String,
    /// Its GPUs, in rank order. On Slurm these are gpuq's account of them (the
    /// node kind's model, indices as counted); Slurm picks the devices.
    pub gpus: Vec<RuntimeGpu>,
    /// The NVIDIA driver, e.g. `550.54.15`; `None` without NVML (simulated GPUs, Slurm nodes).
    #[serde(default)]
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, e.g. `12.4`; `None` without NVML.
    #[serde(default)]
    pub cuda_version: Option<String>,
    /// When the attempt started (epoch ms).
    pub captured_at: i64,
    /// The cached Python environment or the container image it ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<RuntimeEnvironment>,
}

/// What an attempt's software was: its environment's key and exact packages, or its image.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeEnvironment {
    /// The cached environment's key (`gpuq envs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Its interpreter's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// `name==version`, as `uv pip freeze` listed them after the build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// The container image, for a container job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// One GPU of an attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeGpu {
    /// Index in nvidia-smi order on its node (what CUDA_VISIBLE_DEVICES names).
    pub index: u32,
    /// e.g. `NVIDIA A100-SXM4-80GB`.
    pub model: String,
    /// `None` where the daemon does not see the device (a Slurm node).
    #[serde(default)]
    pub uuid: Option<String>,
}

/// `GET /v1/jobs/{id}/repro`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReproView {
    /// The job's id.
    pub job: JobId,
    /// `None` when the job was submitted without a capture (`--no-repro`, another client).
    pub repro: Option<Repro>,
    /// One per attempt that started, oldest first.
    pub runtime: Vec<RuntimeInfo>,
}

/// `POST /v1/jobs/{id}/rerun`: the same spec, directory and environment again.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RerunRequest {
    /// A fresh capture of the job's directory (as in a submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro: Option<Repro>,
}

/// Variable names whose values are secrets by the usual conventions
/// (`AWS_SECRET_ACCESS_KEY`, `HF_TOKEN`, `WANDB_API_KEY`, `PGPASSWORD`, …).
pub fn is_secret_name(name: &str) -> bool {
    const PARTS: &[&str] = &[
        "SECRET",
        "TOKEN",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "PRIVATE",
        "APIKEY",
        "API_KEY",
        "ACCESS_KEY",
        "AUTH",
        "COOKIE",
        "SIGNATURE",
    ];
    let upper = name.to_ascii_uppercase();
    PARTS.iter().any(|p| upper.contains(p))
        || upper.ends_with("_KEY")
        || upper.ends_with("_DSN")
        || upper == "KEY"
}

/// Hides every value: what someone who is not the owner (nor an admin) sees of a job's environment.
pub fn hide_values(env: &mut BTreeMap<String, String>) {
    for value in env.values_mut() {
        *value = HIDDEN.into();
    }
}

/// A record as someone who is not the owner (nor an admin) sees it: the
/// environment's values hidden, and the uncommitted diff (which may hold a key
/// from a private repository), the untracked names and the packages left out
/// and counted in [`Repro::withheld`].
pub fn withhold_private(r: &mut Repro) {
    hide_values(&mut r.env);
    let mut withheld = Withheld::default();
    if let Some(g) = r.git.as_mut() {
        g.diff = String::new();
        withheld.untracked = g.untracked.len();
        g.untracked = Vec::new();
    }
    if let Some(p) = r.python.as_mut() {
        withheld.packages = p.packages.len();
        p.packages = Vec::new();
    }
    r.withheld = Some(withheld);
}

/// The environment as a record may keep it: secret-looking names hidden, and
/// credentials taken out of URL values (`DATABASE_URL=postgres://u:pw@db/x`).
pub fn mask_secrets(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| {
            let v = if is_secret_name(k) {
                HIDDEN.to_string()
            } else {
                strip_credentials(v)
            };
            (k.clone(), v)
        })
        .collect()
}

/// A URL without its user and password: `https://user:token@host/x` →
/// `https://host/x`. scp-like git addresses (`git@host:x.git`) name an account,
/// not a secret, and are kept. Anything else is returned as it is.
pub fn strip_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // A scheme is letters, digits, `+`, `-`, `.`: anything else is not a URL.
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return url.to_string();
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://{}{tail}", &authority[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_stripped_from_urls() {
        for (url, want) in [
            (
                "https://user:ghp_abc@github.com/org/repo.git",
                "https://github.com/org/repo.git",
            ),
            (
                "https://x-access-token:t0k@github.com/o/r",
                "https://github.com/o/r",
            ),
            ("https://tok@host:8443/r?x=1", "https://host:8443/r?x=1"),
            ("ssh://git@host/r.git", "ssh://host/r.git"),
            ("postgres://u:p@w@db:5432/x", "postgres://db:5432/x"),
            ("https://github.com/o/r", "https://github.com/o/r"),
            ("git@github.com:o/r.git", "git@github.com:o/r.git"),
            ("/srv/git/r.git", "/srv/git/r.git"),
            ("not a url: a://b@c", "not a url: a://b@c"),
            ("", ""),
        ] {
            assert_eq!(strip_credentials(url), want, "{url}");
        }
    }

    #[test]
    fn secret_names_are_recognised() {
        for name in [
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "HF_TOKEN",
            "WANDB_API_KEY",
            "PGPASSWORD",
            "github_token",
            "SENTRY_DSN",
            "SSH_PRIVATE_KEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "CUDA_VISIBLE_DEVICES",
            "PYTHONPATH",
            "KEYBOARD",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn masking_hides_secrets_and_url_credentials() {
        let env: BTreeMap<String, String> = [
            ("AWS_SECRET_ACCESS_KEY", "wJalr"),
            ("DATABASE_URL", "postgres://u:pw@db/x"),
            ("PATH", "/usr/bin"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let masked = mask_secrets(&env);
        assert_eq!(masked["AWS_SECRET_ACCESS_KEY"], HIDDEN);
        assert_eq!(masked["DATABASE_URL"], "postgres://db/x");
        assert_eq!(masked["PATH"], "/usr/bin");
        let mut all = masked;
        hide_values(&mut all);
        assert!(all.values().all(|v| v == HIDDEN));
    }

    #[test]
    fn others_see_that_there_is_a_diff_but_not_what_it_says() {
        let mut r = Repro {
            git: Some(GitInfo {
                dirty: true,
                diff: "+API_KEY=sk-live-1\n".into(),
                diff_bytes: 19,
                diff_sha256: "ab".repeat(32),
                untracked: vec!["secret.env".into()],
                ..Default::default()
            }),
            python: Some(PythonInfo {
                packages: vec!["internal-pkg==1.0".into()],
                ..Default::default()
            }),
            env: [("PATH".to_string(), "/bin".to_string())].into(),
            ..Default::default()
        };
        withhold_private(&mut r);
        let text = serde_json::to_string(&r).unwrap();
        for private in ["sk-live-1", "secret.env", "internal-pkg", "/bin"] {
            assert!(!text.contains(private), "{private} in {text}");
        }
        let g = r.git.as_ref().unwrap();
        assert!(g.dirty && g.diff_bytes == 19 && g.diff_sha256.len() == 64);
        assert_eq!(
            r.withheld,
            Some(Withheld {
                untracked: 1,
                packages: 1
            })
        );
    }

    #[test]
    fn old_records_without_the_newer_fields_still_parse() {
        let r: Repro =
            serde_json::from_str(r#"{"captured_at": 1, "hostname": "h", "git": null}"#).unwrap();
        assert_eq!(r.hostname, "h");
        assert!(r.git.is_none() && r.python.is_none() && r.env.is_empty());
    }
}
