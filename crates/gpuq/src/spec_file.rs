//! Job spec files (`gpuq submit job.yaml`): YAML (or JSON, which is YAML) into a [`JobSpec`].

use gpuq_core::JobSpec;
use std::path::Path;

/// Reads and checks a spec file; the error names the file, the field and the line.
pub fn load(path: &Path) -> Result<JobSpec, String> {
    if !path.exists() {
        return Err(format!(
            "{}: no such spec file (a lone argument ending in .yaml, .yml or .json is read as a job spec)",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn parse(text: &str) -> Result<JobSpec, String> {
    let spec: JobSpec = serde_yaml_ng::from_str(text).map_err(|e| {
        let msg = e.to_string();
        if msg.contains("unknown field") {
            format!("{msg}; see docs/job-spec.schema.json for the fields")
        } else {
            msg
        }
    })?;
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

/// True when a lone positional argument names a spec file rather than a command
/// (whether or not the file exists: a misspelt name is an error, not a command).
pub fn looks_like_spec(arg: &str) -> bool {
    let lower = arg.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_field() {
        let spec = parse(
            "name: train\nrun: |\n  echo a\n  echo b\ngpus: 2\npriority: high\nretries: 3\ntime_limit: 2h\n\
             grace: 10s\nenv:\n  LR: '0.1'\ncwd: /tmp\nproject: vision\nafter: [4, 5]\npreemptible: true\n",
        )
        .unwrap();
        assert_eq!(spec.name.as_deref(), Some("train"));
        assert_eq!(spec.gpus, 2);
        assert_eq!(spec.time_limit.unwrap().as_millis(), 7_200_000);
        assert_eq!(spec.after, vec![4, 5]);
        assert_eq!(spec.env["LR"], "0.1");
        assert!(spec.preemptible);
    }

    #[test]
    fn unknown_field_names_field_and_line() {
        let e = parse("command: [python, train.py]\ngpu: 2\n").unwrap_err();
        assert!(e.contains("unknown field `gpu`"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn bad_duration_and_empty_command_are_explained() {
        let e = parse("command: [x]\ntime_limit: soon\n").unwrap_err();
        assert!(
            e.contains("time_limit") && e.contains("write it like"),
            "{e}"
        );
        let e = parse("command: []\n").unwrap_err();
        assert!(e.contains("command"), "{e}");
        let e = parse("gpus: 1\n").unwrap_err();
        assert!(e.contains("no command"), "{e}");
    }

    #[test]
    fn garbage_never_panics() {
        for text in [
            "",
            "[",
            "{{{",
            "- - -",
            "gpus: -1",
            "after: [x]",
            "env: 3",
            "\u{0}",
            "run: 5",
            "a: b: c",
        ] {
            let _ = parse(text);
        }
    }
}

#[cfg(test)]
mod fuzz {
    use super::parse;
    use proptest::prelude::*;

    const FIELDS: &[&str] = &[
        "name",
        "command",
        "run",
        "gpus",
        "priority",
        "retries",
        "time_limit",
        "grace",
        "env",
        "cwd",
        "project",
        "after",
        "preemptible",
        "gpu",
        "x",
    ];

    fn yamlish() -> impl Strategy<Value = String> {
        let value = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            "[a-z0-9 :.,-]{0,12}",
            Just("[a, b]".to_string()),
            Just("{k: v}".to_string()),
            Just("|\n  echo hi".to_string()),
            Just("~".to_string()),
            Just("\"\\u0000\"".to_string()),
        ];
        proptest::collection::vec((proptest::sample::select(FIELDS), value), 0..8)
            .prop_map(|kv| kv.into_iter().map(|(k, v)| format!("{k}: {v}\n")).collect())
    }

    proptest! {
        /// Arbitrary bytes and field soup: an error or a valid spec, never a panic.
        #[test]
        fn any_text_is_accepted_or_refused_without_panic(text in "\\PC{0,200}") {
            let _ = parse(&text);
        }

        #[test]
        fn field_soup_is_accepted_or_refused_without_panic(text in yamlish()) {
            if let Ok(spec) = parse(&text) {
                prop_assert!(spec.validate().is_ok());
            }
        }

        #[test]
        fn durations_never_panic(text in "\\PC{0,30}") {
            let _ = text.parse::<gpuq_core::DurationSpec>();
        }
    }
}
