//! Job spec files (`gpuq submit job.yaml`): YAML (or JSON, which is YAML) into a [`JobSpec`].

use gpuq_core::JobSpec;
use std::path::Path;

/// Largest spec: what the daemon reads in one request.
const MAX_SPEC_BYTES: usize = 4 * 1024 * 1024;
/// Deepest nesting of `[` and `{`. A spec needs 2 or 3; the YAML parser's time
/// grows with depth times length (100,000 deep takes minutes), so deeper text
/// is refused before it is parsed.
const MAX_FLOW_DEPTH: usize = 16;

/// Reads and checks a spec file; the error names the file, the field and the line.
pub fn load(path: &Path) -> Result<JobSpec, String> {
    load_in(path, None)
}

/// A spec file, its environment's files read relative to `cwd` when given
/// (`--cwd`), else to the spec's own `cwd`, else the current directory.
pub fn load_in(path: &Path, cwd: Option<&str>) -> Result<JobSpec, String> {
    let text = read(path)?;
    let at = |e: String| format!("{}: {e}", path.display());
    check_size_and_depth(&text).map_err(at)?;
    let mut spec = parse_unchecked(&text).map_err(at)?;
    if let Some(c) = cwd {
        spec.cwd = Some(c.to_string());
    }
    read_env_inputs(&mut spec).map_err(at)?;
    spec.validate().map_err(|e| at(e.to_string()))?;
    Ok(spec)
}

/// A spec or sweep file's text, bounded.
pub fn read(path: &Path) -> Result<String, String> {
    if !path.exists() {
        return Err(format!(
            "{}: no such spec file (a lone argument ending in .yaml, .yml or .json is read as a job spec)",
            path.display()
        ));
    }
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_SPEC_BYTES as u64 + 1).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(text)
}

use gpuq_core::pyenv::{EnvInputs, EnvKind, MAX_INPUT_BYTES};
use std::path::PathBuf;

/// A spec's text into a checked spec. Pure: a spec naming a Python
/// environment must carry its files' contents (`python.inputs`); reading them
/// is the caller's, with the right account's rights (`load_in`, `fill_env_inputs`).
pub fn parse(text: &str) -> Result<JobSpec, String> {
    check_size_and_depth(text)?;
    let spec = parse_unchecked(text)?;
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

/// A spec's text, its environment's files read with `read` relative to its
/// `cwd`, else to `base` (the daemon reads a scheduled spec's files with its
/// user's rights this way).
pub fn parse_with_inputs(
    text: &str,
    base: &Path,
    read: InputReader<'_>,
) -> Result<JobSpec, String> {
    check_size_and_depth(text)?;
    let mut spec = parse_unchecked(text)?;
    fill_env_inputs(&mut spec, base, read)?;
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

fn parse_unchecked(text: &str) -> Result<JobSpec, String> {
    let spec: JobSpec = serde_yaml_ng::from_str(text).map_err(|e| {
        let msg = plain_types(&e.to_string());
        if msg.contains("unknown field") {
            format!("{msg}; see docs/job-spec.schema.json for the fields")
        } else {
            msg
        }
    })?;
    Ok(spec)
}

/// serde's type names ("expected u32") in words a user can act on: `retries: -1`
/// reads "expected a whole number, 0 or more".
pub(crate) fn plain_types(msg: &str) -> String {
    let mut out = msg.to_string();
    for (ty, words) in [
        ("u8", "a whole number from 0 to 255"),
        ("u16", "a whole number from 0 to 65535"),
        ("u32", "a whole number, 0 or more (at most 4294967295)"),
        ("u64", "a whole number, 0 or more"),
        ("i64", "a whole number"),
        ("f64", "a number"),
    ] {
        for end in [" ", ",", ";", ")"] {
            out = out.replace(
                &format!("expected {ty}{end}"),
                &format!("expected {words}{end}"),
            );
        }
        if out.ends_with(&format!("expected {ty}")) {
            out.truncate(out.len() - ty.len());
            out.push_str(words);
        }
    }
    out
}

/// Reads one of a spec's environment files (at most [`MAX_INPUT_BYTES`]).
pub type InputReader<'a> = &'a dyn Fn(&Path) -> Result<String, String>;

/// The client's reader: the file as the user running the command sees it.
pub fn read_local(path: &Path) -> Result<String, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.len() > MAX_INPUT_BYTES as u64 || !meta.is_file() {
        return Err(format!(
            "{} is not a file of at most {}",
            path.display(),
            gpuq_core::limits::human_bytes(MAX_INPUT_BYTES)
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Fills `python.inputs` from the files the spec names (relative to the
/// spec's `cwd`, else the current directory), read by this process.
pub fn read_env_inputs(spec: &mut JobSpec) -> Result<(), String> {
    if spec.python.is_none() {
        return Ok(());
    }
    let base = std::env::current_dir()
        .map_err(|e| format!("cannot read the current directory: {e}; pass --cwd"))?;
    fill_env_inputs(spec, &base, &read_local)
}

/// Fills `python.inputs` with `read`, paths relative to the spec's `cwd`, else `base`.
pub fn fill_env_inputs(
    spec: &mut JobSpec,
    base: &Path,
    read: InputReader<'_>,
) -> Result<(), String> {
    let Some(py) = spec.python.as_mut() else {
        return Ok(());
    };
    if py.inputs.is_some() {
        return Ok(());
    }
    let dir = spec
        .cwd
        .as_ref()
        .map_or_else(|| base.to_path_buf(), PathBuf::from);
    let get = |rel: &str, file: &str, field: &str| -> Result<String, String> {
        let path = if file.is_empty() {
            dir.join(rel)
        } else {
            dir.join(rel).join(file)
        };
        read(&path).map_err(|e| {
            format!(
                "{field}: {e}; paths are relative to the job's directory ({})",
                dir.display()
            )
        })
    };
    let mut inputs = EnvInputs::default();
    match (py.kind(), &py.requirements, &py.project) {
        (EnvKind::Requirements, Some(r), _) => {
            inputs.requirements_txt = Some(get(r, "", "python.requirements")?);
        }
        (EnvKind::Project, _, Some(p)) => {
            inputs.pyproject_toml = Some(get(p, "pyproject.toml", "python.project")?);
            inputs.uv_lock = Some(
                get(p, "uv.lock", "python.project")
                    .map_err(|e| format!("{e} (run `uv lock` in the project first)"))?,
            );
        }
        _ => return Ok(()),
    }
    py.inputs = Some(inputs);
    Ok(())
}

/// Refuses text too large or too deeply nested to parse safely.
pub(crate) fn check_size_and_depth(text: &str) -> Result<(), String> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(format!(
            "the spec is larger than {}, the most the daemon accepts; keep large data in files",
            gpuq_core::limits::human_bytes(MAX_SPEC_BYTES)
        ));
    }
    let depth = flow_depth(text);
    if depth > MAX_FLOW_DEPTH {
        return Err(format!(
            "brackets ([ or {{) nest {depth} deep; a job spec needs 2 or 3 and the limit is {MAX_FLOW_DEPTH}"
        ));
    }
    Ok(())
}

/// How deep `[` and `{` nest, counting those in strings too (an upper bound).
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
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
    fn a_negative_count_names_the_field_and_what_it_takes() {
        let e = parse("command: [x]\nretries: -1\n").unwrap_err();
        assert!(e.starts_with("retries: "), "{e}");
        assert!(e.contains("a whole number, 0 or more"), "{e}");
        assert!(!e.contains("u32"), "{e}");
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

    /// A valid spec's fields, each written on one line.
    const VALID: &[(&str, &str)] = &[
        ("name", "fuzz"),
        ("command", "[python, train.py]"),
        ("gpus", "1"),
        ("priority", "normal"),
        ("retries", "2"),
        ("time_limit", "2h"),
        ("env", "{LR: '0.1'}"),
        ("cwd", "/tmp"),
        ("project", "vision"),
        ("after", "[1, 2]"),
        ("preemptible", "true"),
    ];

    fn odd_yaml_value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|f| f.to_string()),
            prop::sample::select(vec![
                "18446744073709551616",
                "-1",
                "1e400",
                ".nan",
                ".inf",
                "0x10",
                "0o777",
                "~",
                "[]",
                "{}",
                "''",
                "&a [*a]",
                "*undefined",
                "!!binary aGVsbG8=",
                "!custom 3",
                "\"\\0\"",
                "\"\\uD800\"",
                "\"\\u202e\"",
                "|\n  multi\n  line",
                "? complex",
                "- item",
                "{a: 1, a: 2}",
                "[1, [2, [3]]]",
                "\"\\x00\"",
                "yes",
                "NO",
            ])
            .prop_map(str::to_string),
            (1usize..5000).prop_map(|n| "[".repeat(n)),
            (1usize..300).prop_map(|n| format!("{}1{}", "[".repeat(n), "]".repeat(n))),
            (1usize..300).prop_map(|n| "{a: ".repeat(n)),
            // Any unicode, as a YAML (JSON) string.
            "\\PC{0,30}".prop_map(|t| serde_json::Value::from(t).to_string()),
            ".{0,30}".prop_map(|t| serde_json::Value::from(t).to_string()),
            (1usize..200_000).prop_map(|n| "x".repeat(n)),
        ]
    }

    /// A valid spec with a cached Python environment (its files' contents inline).
    const VALID_ENV: &[(&str, &str)] = &[
        ("command", "[python, train.py]"),
        (
            "python",
            "{requirements: requirements.txt, version: '3.12', inputs: {requirements_txt: \"numpy==2.0\\n\"}}",
        ),
        ("setup", "'pip install -e .'"),
        ("gpus", "1"),
    ];
    /// A valid container job.
    const VALID_IMAGE: &[(&str, &str)] = &[
        ("command", "[python, train.py]"),
        ("image", "localhost/train:1"),
        ("gpus", "2"),
    ];

    /// A valid spec with one field's value replaced, dropped or repeated.
    fn near_valid() -> impl Strategy<Value = String> {
        prop_oneof![
            near_valid_of(VALID),
            near_valid_of(VALID_ENV),
            near_valid_of(VALID_IMAGE)
        ]
    }

    fn near_valid_of(
        base: &'static [(&'static str, &'static str)],
    ) -> impl Strategy<Value = String> {
        (
            0..base.len(),
            odd_yaml_value(),
            prop::sample::select(vec!["replace", "drop", "repeat", "inline"]),
        )
            .prop_map(|(at, odd, how)| {
                let mut text = String::new();
                for (i, (field, value)) in base.iter().enumerate() {
                    match (i == at, how) {
                        (false, _) => text.push_str(&format!("{field}: {value}\n")),
                        (true, "replace") => text.push_str(&format!("{field}: {odd}\n")),
                        (true, "drop") => {}
                        (true, "repeat") => {
                            text.push_str(&format!("{field}: {value}\n{field}: {odd}\n"))
                        }
                        (true, _) => text.push_str(&format!("{field}: {value}{odd}\n")),
                    }
                }
                text
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Near-valid specs: refused with a message, or valid; never a panic.
        #[test]
        fn mutated_specs_are_accepted_or_refused_without_panic(text in near_valid()) {
            match parse(&text) {
                Ok(spec) => prop_assert!(spec.validate().is_ok()),
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }

    #[test]
    fn the_environment_and_image_bases_are_valid() {
        for base in [VALID_ENV, VALID_IMAGE] {
            let text: String = base.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
            parse(&text).unwrap();
        }
    }

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused() {
        let mut bomb = String::from("name: &a [x, x, x, x, x, x, x, x, x]\n");
        for (prev, next) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .windows(2)
            .map(|w| (w[0], w[1]))
        {
            bomb.push_str(&format!("env: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        bomb.push_str("command: *h\n");
        let started = std::time::Instant::now();
        assert!(parse(&bomb).is_err());
        assert!(parse(&format!("command: {}", "[".repeat(100_000))).is_err());
        assert!(parse(&format!("env: {}", "{a: ".repeat(100_000))).is_err());
        let e = parse(&format!("command: {}", "[".repeat(100_000))).unwrap_err();
        assert!(e.contains("nest 100000 deep"), "{e}");
        // At the limit the parser stays fast even for the largest spec.
        let at_limit = format!("{}1{},", "[".repeat(15), "]".repeat(15));
        let wide = format!(
            "command: [{}]",
            at_limit.repeat(super::MAX_SPEC_BYTES / at_limit.len() - 1)
        );
        assert!(parse(&wide).is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
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
