//! A job's software: a cached Python environment (built once per key by uv) or
//! a container image. This module is the pure part: the spec's fields and their
//! checks, the key an environment is cached under, and which cached
//! environments to evict. Building, running and removing are the daemon's.

use crate::{JobSpec, Millis, SpecError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// Largest requirements, pyproject or lock file a spec may carry (a submit is at most 4 MiB in all).
pub const MAX_INPUT_BYTES: usize = 2 << 20;
/// Largest `setup` script.
pub const MAX_SETUP_BYTES: usize = 64 << 10;

/// `python:` in a job spec: the environment the job runs in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PythonSpec {
    /// A requirements file (relative to the job's directory), installed with `uv pip install -r`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<String>,
    /// A uv project directory (relative to the job's directory) with
    /// `pyproject.toml` and `uv.lock`, installed with `uv sync --frozen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The Python version (e.g. `3.12`); default: the one uv finds first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The files' contents, read by the client at submit (the daemon never
    /// opens a user's files). The environment's key is a hash of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<EnvInputs>,
}

/// What an environment is built from, as the client read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvInputs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements_txt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pyproject_toml: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uv_lock: Option<String>,
}

/// How the environment is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvKind {
    Requirements,
    Project,
}

impl PythonSpec {
    pub fn kind(&self) -> EnvKind {
        if self.project.is_some() {
            EnvKind::Project
        } else {
            EnvKind::Requirements
        }
    }
}

/// Checks `python`, `setup` and `image` together (they exclude one another in places).
pub fn validate(spec: &JobSpec) -> Result<(), SpecError> {
    if let Some(setup) = &spec.setup {
        if spec.python.is_none() {
            return Err(SpecError::new(
                "setup",
                "setup runs once per Python environment: give `python:` (requirements or project) too",
            ));
        }
        if setup.trim().is_empty() || setup.contains('\0') || setup.len() > MAX_SETUP_BYTES {
            return Err(SpecError::new(
                "setup",
                format!(
                    "give a non-empty script without NUL bytes, at most {}",
                    crate::limits::human_bytes(MAX_SETUP_BYTES)
                ),
            ));
        }
    }
    if let Some(image) = &spec.image {
        check_image(image)?;
        if spec.python.is_some() {
            return Err(SpecError::new(
                "image",
                "a container job brings its own software: give `image` or `python`, not both \
                 (install the requirements in the image)",
            ));
        }
        if spec.session.is_some() {
            return Err(SpecError::new(
                "image",
                "interactive sessions do not run in containers yet; drop `image`",
            ));
        }
    }
    let Some(py) = &spec.python else {
        return Ok(());
    };
    match (&py.requirements, &py.project) {
        (Some(_), Some(_)) => {
            return Err(SpecError::new(
                "python",
                "give `requirements` (a requirements file) or `project` (a directory with uv.lock), not both",
            ))
        }
        (None, None) => {
            return Err(SpecError::new(
                "python",
                "say what to install: `requirements: requirements.txt` or `project: .` (pyproject.toml and uv.lock)",
            ))
        }
        (Some(p), None) => crate::limits::check_path(p, "python.requirements")?,
        (None, Some(p)) => crate::limits::check_path(p, "python.project")?,
    }
    if let Some(v) = &py.version {
        let parts: Vec<&str> = v.split('.').collect();
        let ok = (1..=3).contains(&parts.len())
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()));
        if !ok {
            return Err(SpecError::new(
                "python.version",
                format!("{v:?} is not a Python version; write e.g. \"3.12\" or \"3.11.9\""),
            ));
        }
    }
    let Some(inputs) = &py.inputs else {
        return Err(SpecError::new(
            "python.inputs",
            "the files' contents are missing: submit with `gpuq submit`, which reads them, \
             or send `inputs` with the request",
        ));
    };
    let files = [
        ("python.inputs.requirements_txt", &inputs.requirements_txt),
        ("python.inputs.pyproject_toml", &inputs.pyproject_toml),
        ("python.inputs.uv_lock", &inputs.uv_lock),
    ];
    for (field, text) in files {
        if let Some(t) = text {
            if t.len() > MAX_INPUT_BYTES || t.contains('\0') {
                return Err(SpecError::new(
                    field,
                    format!(
                        "at most {} of text without NUL bytes",
                        crate::limits::human_bytes(MAX_INPUT_BYTES)
                    ),
                ));
            }
        }
    }
    let complete = match py.kind() {
        EnvKind::Requirements => inputs.requirements_txt.is_some(),
        EnvKind::Project => inputs.pyproject_toml.is_some() && inputs.uv_lock.is_some(),
    };
    if !complete {
        return Err(SpecError::new(
            "python.inputs",
            match py.kind() {
                EnvKind::Requirements => "requirements_txt is missing",
                EnvKind::Project => {
                    "pyproject_toml and uv_lock are both needed for a project (run `uv lock` first)"
                }
            },
        ));
    }
    Ok(())
}

/// A container image's name as podman takes it: `[registry/]name[:tag][@digest]`.
fn check_image(image: &str) -> Result<(), SpecError> {
    let ok = !image.is_empty()
        && image.len() <= 255
        && !image.starts_with('-')
        && image
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(SpecError::new(
            "image",
            format!(
                "{image:?} is not an image name; write e.g. localhost/train:1 or registry.example.org/lab/pytorch:2.5"
            ),
        ))
    }
}

/// The key an environment is cached under: a hash of everything that decides
/// what gets installed. `platform` names the machine (`x86_64-linux`);
/// `owner`: the uid the environment is private to (`None`: a lab-wide cache,
/// shared by everyone).
pub fn env_key(spec: &JobSpec, platform: &str, owner: Option<u32>) -> Option<String> {
    let py = spec.python.as_ref()?;
    let inputs = py.inputs.as_ref()?;
    let mut h = Sha256::new();
    // Each part length-prefixed: no two different inputs hash the same bytes.
    let mut part = |tag: &str, value: Option<&str>| {
        h.update(tag.as_bytes());
        match value {
            Some(v) => {
                h.update((v.len() as u64).to_le_bytes());
                h.update(v.as_bytes());
            }
            None => h.update(u64::MAX.to_le_bytes()),
        }
    };
    part("gpuq-env-v1", None);
    part(
        "kind",
        Some(match py.kind() {
            EnvKind::Requirements => "requirements",
            EnvKind::Project => "project",
        }),
    );
    part("requirements", inputs.requirements_txt.as_deref());
    part("pyproject", inputs.pyproject_toml.as_deref());
    part("lock", inputs.uv_lock.as_deref());
    part("version", py.version.as_deref());
    part("setup", spec.setup.as_deref());
    part("platform", Some(platform));
    let owner = owner.map(|u| u.to_string());
    part("owner", owner.as_deref());
    let digest = h.finalize();
    Some(digest.iter().take(12).map(|b| format!("{b:02x}")).collect())
}

/// What a build reads beyond its key (a lab-wide key leaves the owner out only
/// when nothing else decides the result). `Err`: the build depends on its
/// builder (a `setup` script, which runs in their directory; a relative path;
/// a path source in a lock file), the reason. `Ok`: the absolute local paths
/// the requirements name (`-r`, `-c`, `-e`, `--find-links`, `file:` URLs,
/// direct paths), which are as good as the key only if root alone can change
/// them (the daemon checks).
pub fn outside_inputs(spec: &JobSpec) -> Result<Vec<String>, String> {
    if spec.setup.is_some() {
        return Err("it has a setup script".into());
    }
    let Some(inputs) = spec.python.as_ref().and_then(|p| p.inputs.as_ref()) else {
        return Ok(Vec::new());
    };
    if let Some(lock) = &inputs.uv_lock {
        for bad in ["{ path =", "{ directory =", "{ editable =", "file://"] {
            if lock.contains(bad) {
                return Err(format!("its uv.lock installs from a local path ({bad})"));
            }
        }
    }
    let mut paths = Vec::new();
    for line in inputs.requirements_txt.as_deref().unwrap_or("").lines() {
        let line = match line.find(" #") {
            Some(at) => &line[..at],
            None => line,
        }
        .trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (opt, value) = split_option(line);
        let (value, named) = match opt {
            // Options naming a file, a directory or an index.
            Some(
                "-r" | "--requirement" | "-c" | "--constraint" | "-e" | "--editable" | "-f"
                | "--find-links" | "-i" | "--index-url" | "--extra-index-url",
            ) => (value, true),
            Some(_) => continue,
            // A requirement: a path, or `name @ URL`.
            None => match line.split_once('@') {
                Some((_, url)) => (url.trim(), false),
                None => (line, false),
            },
        };
        let archive = [".whl", ".tar.gz", ".zip"]
            .iter()
            .any(|e| value.ends_with(e));
        let local = value
            .strip_prefix("file://")
            .or_else(|| value.strip_prefix("file:"));
        let path = match local {
            Some(p) => p,
            None if value.contains("://") => continue,
            None if named
                || archive
                || value.starts_with(['.', '/', '~'])
                || value.contains('/') =>
            {
                value
            }
            None => continue,
        };
        if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
            return Err(format!("its requirements name the local path {value:?}"));
        }
        paths.push(path.to_string());
    }
    Ok(paths)
}

/// `-r x`, `-rx`, `--requirement=x`, `--requirement x`: the option and its value.
fn split_option(line: &str) -> (Option<&str>, &str) {
    if !line.starts_with('-') {
        return (None, line);
    }
    if let Some((o, v)) = line
        .split_once('=')
        .filter(|(o, _)| o.starts_with("--") && !o.contains(' '))
    {
        return (Some(o), v.trim());
    }
    match line.split_once([' ', '\t']) {
        Some((o, v)) => (Some(o), v.trim()),
        None if !line.starts_with("--") && line.len() > 2 => (Some(&line[..2]), line[2..].trim()),
        None => (Some(line), ""),
    }
}

/// A cached environment as the eviction rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedEnv {
    pub key: String,
    pub size_bytes: u64,
    pub last_used_at: Millis,
    /// Still being built, or failed (failed ones hold only a log): never evicted here.
    pub ready: bool,
}

/// The ready environments to remove, least recently used first, until the
/// cache is within `cap_bytes`. An environment a queued or running job needs
/// (`in_use`) is never chosen, even if the cache stays over its cap.
pub fn evictions(envs: &[CachedEnv], cap_bytes: u64, in_use: &BTreeSet<String>) -> Vec<String> {
    let mut total: u64 = envs.iter().map(|e| e.size_bytes).sum();
    if total <= cap_bytes {
        return Vec::new();
    }
    let mut candidates: Vec<&CachedEnv> = envs
        .iter()
        .filter(|e| e.ready && !in_use.contains(&e.key))
        .collect();
    candidates.sort_by(|a, b| {
        a.last_used_at
            .cmp(&b.last_used_at)
            .then_with(|| a.key.cmp(&b.key))
    });
    let mut out = Vec::new();
    for e in candidates {
        if total <= cap_bytes {
            break;
        }
        total = total.saturating_sub(e.size_bytes);
        out.push(e.key.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_reqs(text: &str) -> JobSpec {
        JobSpec {
            command: Some(vec!["python".into()]),
            python: Some(PythonSpec {
                requirements: Some("requirements.txt".into()),
                inputs: Some(EnvInputs {
                    requirements_txt: Some(text.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_key_follows_every_input_and_nothing_else() {
        let a = with_reqs("numpy==2.0\n");
        let k = |s: &JobSpec| env_key(s, "x86_64-linux", Some(1000)).unwrap();
        assert_eq!(k(&a), k(&a.clone()));
        let mut renamed = a.clone();
        renamed.name = Some("other".into());
        renamed.gpus = 4;
        assert_eq!(k(&a), k(&renamed), "the job's other fields are not inputs");
        assert_ne!(k(&a), k(&with_reqs("numpy==2.1\n")));
        let mut v = a.clone();
        v.python.as_mut().unwrap().version = Some("3.12".into());
        assert_ne!(k(&a), k(&v));
        let mut s = a.clone();
        s.setup = Some("pip install -e .".into());
        assert_ne!(k(&a), k(&s));
        assert_ne!(k(&a), env_key(&a, "aarch64-linux", Some(1000)).unwrap());
        assert_ne!(k(&a), env_key(&a, "x86_64-linux", Some(1001)).unwrap());
        assert_ne!(k(&a), env_key(&a, "x86_64-linux", None).unwrap());
        assert_eq!(k(&a).len(), 24);
    }

    #[test]
    fn what_a_build_reads_beyond_its_key_is_found() {
        let out = |t: &str| outside_inputs(&with_reqs(t));
        assert_eq!(
            out("--no-index\nnumpy==2.0\n# ./x\n").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            out("-i https://pypi.org/simple\nx @ https://h/x.whl\n").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            out("--find-links /opt/wheels\n-r/etc/r.txt\n--constraint=/c.txt\nx @ file:///w/x.whl\n").unwrap(),
            ["/opt/wheels", "/etc/r.txt", "/c.txt", "/w/x.whl"]
        );
        for builder in [
            "-r other.txt",
            "-e .",
            "./pkg",
            "x @ file:pkg",
            "-f wheels/",
            "/a/../b",
        ] {
            assert!(out(builder).is_err(), "{builder}");
        }
        let mut s = with_reqs("numpy\n");
        s.setup = Some("true".into());
        assert!(outside_inputs(&s).is_err());
    }

    #[test]
    fn bad_fields_are_named() {
        let field = |s: &JobSpec| validate(s).unwrap_err().field;
        let mut s = with_reqs("x");
        s.python.as_mut().unwrap().project = Some(".".into());
        assert_eq!(field(&s), "python");
        let mut s = with_reqs("x");
        s.python.as_mut().unwrap().version = Some("three".into());
        assert_eq!(field(&s), "python.version");
        let mut s = with_reqs("x");
        s.python.as_mut().unwrap().inputs = None;
        assert_eq!(field(&s), "python.inputs");
        let mut s = with_reqs("x");
        s.image = Some("localhost/x:1".into());
        assert_eq!(field(&s), "image");
        let s = JobSpec {
            command: Some(vec!["x".into()]),
            setup: Some("pip install .".into()),
            ..Default::default()
        };
        assert_eq!(field(&s), "setup");
        for bad in ["-v/:/x", "", "a b", "x;rm"] {
            let s = JobSpec {
                command: Some(vec!["x".into()]),
                image: Some(bad.into()),
                ..Default::default()
            };
            assert_eq!(field(&s), "image", "{bad:?}");
        }
        let mut s = with_reqs("x");
        s.python.as_mut().unwrap().requirements = None;
        s.python.as_mut().unwrap().project = Some(".".into());
        assert!(validate(&s).unwrap_err().message.contains("uv lock"));
        validate(&with_reqs("numpy\n")).unwrap();
    }

    fn env(key: &str, size: u64, used: Millis) -> CachedEnv {
        CachedEnv {
            key: key.into(),
            size_bytes: size,
            last_used_at: used,
            ready: true,
        }
    }

    #[test]
    fn eviction_takes_the_least_recently_used_and_spares_those_in_use() {
        let envs = [env("a", 10, 1), env("b", 10, 2), env("c", 10, 3)];
        assert!(evictions(&envs, 30, &BTreeSet::new()).is_empty());
        assert_eq!(evictions(&envs, 20, &BTreeSet::new()), ["a"]);
        assert_eq!(evictions(&envs, 5, &BTreeSet::new()), ["a", "b", "c"]);
        let busy: BTreeSet<String> = ["a".to_string()].into();
        assert_eq!(evictions(&envs, 20, &busy), ["b"]);
        let all: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert!(
            evictions(&envs, 0, &all).is_empty(),
            "over the cap, but all in use"
        );
        let mut building = envs.to_vec();
        building[0].ready = false;
        assert_eq!(evictions(&building, 20, &BTreeSet::new()), ["b"]);
    }
}
