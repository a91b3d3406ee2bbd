//! What an environment's build reads besides its key: the environment
//! variables it is given, and whether a local path it names is as good as
//! the key (root alone can change it).

use std::collections::BTreeMap;

/// The build's environment: what uv, pip and a setup script read from the
/// submitter's (never the daemon's own).
pub(super) fn build_env(submitted: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    submitted
        .iter()
        .filter(|(k, _)| build_var(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A lab-wide build's environment: the daemon's own settings (index, proxy,
/// certificates, set by whoever runs the daemon), its PATH, nothing of the
/// submitter's; HOME is set by the builder (a fresh, empty directory).
pub(super) fn hermetic_env() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            build_var(k)
                && !matches!(
                    k.to_ascii_lowercase().as_str(),
                    "path" | "home" | "user" | "logname" | "xdg_cache_home" | "tmpdir"
                )
        })
        .collect();
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    env.insert("PATH".into(), path);
    env
}

/// A variable uv, pip or a setup script reads.
fn build_var(k: &str) -> bool {
    k.starts_with("UV_")
        || k.starts_with("PIP_")
        || k.starts_with("SSL_CERT")
        || k.starts_with("REQUESTS_CA")
        || matches!(
            k.to_ascii_lowercase().as_str(),
            "path"
                | "home"
                | "user"
                | "logname"
                | "lang"
                | "http_proxy"
                | "https_proxy"
                | "no_proxy"
                | "all_proxy"
                | "xdg_cache_home"
                | "tmpdir"
        )
}

/// Root alone can change `path` and, a directory, each file in it (what a
/// lab-wide build reads from a local path is then as good as its key).
pub(super) fn root_alone(path: &str) -> bool {
    let path = std::path::Path::new(path);
    if gpuq_exec::safe_fs::check_trusted(path, 0).is_err() {
        return false;
    }
    match std::fs::read_dir(path) {
        Ok(entries) => entries.flatten().all(|e| {
            let p = e.path();
            gpuq_exec::safe_fs::check_trusted(&p, 0).is_ok()
        }),
        Err(_) => true,
    }
}
