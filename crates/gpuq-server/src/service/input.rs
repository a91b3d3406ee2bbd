//! Checks of a submit request's own fields (the spec checks itself): the
//! submitter's captured environment, directory, user and idempotency key.
//! Run before anything else, so a refused request writes nothing.

use gpuq_api::SubmitRequest;
use gpuq_core::limits::{self, EnvSource};
use gpuq_core::SpecError;

/// Longest idempotency key (a UUID is 36).
const MAX_IDEMPOTENCY_KEY: usize = 200;

pub(super) fn validate_submit_request(req: &SubmitRequest) -> Result<(), SpecError> {
    validate_submit_env(req)?;
    if let Some(r) = &req.repro {
        check_repro_size(r)?;
    }
    if req.spec.cwd.is_none() {
        limits::check_path(&req.cwd, "cwd")?;
    }
    // Empty means the caller (see `submit`).
    if !req.user.is_empty() {
        limits::check_label(&req.user, "user")?;
    }
    if let Some(key) = &req.idempotency_key {
        if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY || key.contains('\0') {
            return Err(SpecError::new(
                "idempotency_key",
                format!("give 1 to {MAX_IDEMPOTENCY_KEY} bytes without NUL, e.g. a UUID"),
            ));
        }
    }
    Ok(())
}

/// The client bounds every part of its capture; this bounds the whole, so no
/// client can make every listing of the job's record heavy.
fn check_repro_size(r: &gpuq_api::repro::Repro) -> Result<(), SpecError> {
    use gpuq_api::repro::MAX_REPRO_BYTES;
    let size = serde_json::to_vec(r).map_or(usize::MAX, |v| v.len());
    if size <= MAX_REPRO_BYTES {
        return Ok(());
    }
    Err(SpecError::new(
        "repro",
        format!(
            "the reproducibility record is {} as JSON, over the {} the daemon keeps; \
             commit or stash large changes, or submit with --no-repro",
            limits::human_bytes(size),
            limits::human_bytes(MAX_REPRO_BYTES)
        ),
    ))
}

/// The environment the job gets: the submitter's, with the spec's on top. The
/// spec's variables were checked by the spec; here the submitter's, then the
/// merged whole against exec's totals.
fn validate_submit_env(req: &SubmitRequest) -> Result<(), SpecError> {
    let spec_env = &req.spec.env;
    let mut vars = spec_env.len();
    let mut bytes: usize = spec_env
        .iter()
        .map(|(k, v)| limits::env_entry_size(k, v))
        .sum();
    for (key, value) in &req.env {
        limits::check_env_var(key, value, EnvSource::Submitter)?;
        if !spec_env.contains_key(key) {
            vars += 1;
            bytes += limits::env_entry_size(key, value);
        }
    }
    limits::check_env_totals(
        vars,
        bytes,
        "the job's environment (yours with the spec's env)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuq_core::JobSpec;
    use std::collections::BTreeMap;

    fn request(env: &[(&str, String)]) -> SubmitRequest {
        SubmitRequest {
            spec: JobSpec {
                command: Some(vec!["true".into()]),
                ..Default::default()
            },
            cwd: "/tmp".into(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
            user: String::new(),
            idempotency_key: None,
            repro: None,
        }
    }

    #[test]
    fn an_ordinary_environment_passes() {
        let req = request(&[
            ("PATH", "/usr/bin:/bin".into()),
            ("BASH_FUNC_f%%", "() { :; }".into()),
        ]);
        validate_submit_request(&req).unwrap();
    }

    #[test]
    fn the_submitters_variables_are_checked_and_named() {
        let e = validate_submit_request(&request(&[("FOO", "a\0b".into())])).unwrap_err();
        assert_eq!(e.field, "env.FOO");
        let e = validate_submit_request(&request(&[("FOO", "x".repeat(2_000_000))])).unwrap_err();
        assert!(
            e.message.contains("1.9 MiB") && e.message.contains("unset it"),
            "{e}"
        );
        assert!(validate_submit_request(&request(&[("A=B", "v".into())])).is_err());
        assert!(validate_submit_request(&request(&[("", "v".into())])).is_err());
    }

    #[test]
    fn the_merged_environment_must_fit() {
        // Each part fits alone; together they exceed the total.
        let half = "x".repeat(100_000);
        let mut req = request(
            &(0..6)
                .map(|i| (["A0", "A1", "A2", "A3", "A4", "A5"][i], half.clone()))
                .collect::<Vec<_>>(),
        );
        req.spec.env = (0..6).map(|i| (format!("B{i}"), half.clone())).collect();
        let e = validate_submit_request(&req).unwrap_err();
        assert_eq!(e.field, "env");
        assert!(e.message.contains("in all"), "{e}");
        // A spec variable overriding a submitter's one is counted once.
        let mut req = request(&[("A", half.clone())]);
        req.spec.env.insert("A".into(), half);
        validate_submit_request(&req).unwrap();
    }

    #[test]
    fn an_oversized_capture_is_refused_by_name() {
        let mut req = request(&[]);
        req.repro = Some(gpuq_api::repro::Repro {
            notes: vec!["x".repeat(gpuq_api::repro::MAX_REPRO_BYTES)],
            ..Default::default()
        });
        let e = validate_submit_request(&req).unwrap_err();
        assert_eq!(e.field, "repro");
        assert!(e.message.contains("--no-repro"), "{e}");
        req.repro = Some(Default::default());
        validate_submit_request(&req).unwrap();
    }

    #[test]
    fn cwd_user_and_key_are_checked() {
        let mut req = request(&[]);
        req.cwd = "/tmp/\0".into();
        assert_eq!(validate_submit_request(&req).unwrap_err().field, "cwd");
        let mut req = request(&[]);
        req.user = "bob\n".into();
        assert_eq!(validate_submit_request(&req).unwrap_err().field, "user");
        let mut req = request(&[]);
        req.idempotency_key = Some("k".repeat(300));
        assert_eq!(
            validate_submit_request(&req).unwrap_err().field,
            "idempotency_key"
        );
    }
}
