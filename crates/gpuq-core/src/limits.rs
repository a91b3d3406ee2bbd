//! Size limits on what a job hands to exec(2), checked at submit.
//!
//! Linux refuses one argument or `KEY=VALUE` string of 128 KiB or more
//! (MAX_ARG_STRLEN) and refuses argv and envp together beyond ARG_MAX (a quarter
//! of the stack limit: 2 MiB with the usual 8 MiB stack), so a job over them
//! could never start. gpuq refuses such a job when it is submitted, naming the
//! field, rather than storing it (every listing carries its spec) and failing it
//! later. The totals below add up to about 1.7 MiB with the pointers exec
//! counts, which leaves room under 2 MiB for the variables gpuq sets itself.

use crate::SpecError;
use std::collections::BTreeMap;

/// One argument or `KEY=VALUE` string, its terminating NUL included (Linux's MAX_ARG_STRLEN).
pub const MAX_ARG_STRLEN: usize = 128 * 1024;
/// A job's whole environment (the submitter's with the spec's on top), `=` and NULs included.
pub const MAX_ENV_TOTAL: usize = 1024 * 1024;
/// Variables in a job's environment.
pub const MAX_ENV_VARS: usize = 4096;
/// A job's command line, all arguments with their NULs.
pub const MAX_ARGV_TOTAL: usize = 512 * 1024;
/// Arguments of a job's command.
pub const MAX_ARGS: usize = 16 * 1024;
/// A path (Linux's PATH_MAX, with the NUL).
pub const MAX_PATH: usize = 4096;
/// Jobs one job may wait for (`after`).
pub const MAX_AFTER: usize = 4096;
/// A name, project or user: characters.
pub const MAX_LABEL: usize = 200;
/// Shown in messages instead of a huge or unprintable name.
const SHOWN_NAME: usize = 64;

/// Where an environment comes from: the names allowed and the advice differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvSource {
    /// The spec's `env` (`--env`, `env:`): names are letters, digits and `_`.
    Spec,
    /// The submitter's environment, captured by `gpuq submit`: any name exec accepts.
    Submitter,
}

impl EnvSource {
    fn advice(self) -> &'static str {
        match self {
            EnvSource::Spec => "pass large data in a file and its path in the variable",
            EnvSource::Submitter => {
                "unset it before submitting, or pass large data in a file and its path in a variable"
            }
        }
    }
    fn whose(self) -> &'static str {
        match self {
            EnvSource::Spec => "",
            EnvSource::Submitter => " (in the submitting environment)",
        }
    }
}

/// Bytes a variable takes in the program's environment: `KEY=VALUE` and its NUL.
pub fn env_entry_size(key: &str, value: &str) -> usize {
    key.len() + value.len() + 2
}

/// Bytes an argument takes: itself and its NUL.
pub fn arg_size(arg: &str) -> usize {
    arg.len() + 1
}

/// A name as messages show it: escaped, and cut short when long.
pub fn shown(name: &str) -> String {
    let escaped: String = name.escape_debug().collect();
    match escaped.char_indices().nth(SHOWN_NAME) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped,
    }
}

/// A byte count in words: `812 bytes`, `128 KiB`, `130.5 KiB`, `1.9 MiB`.
pub fn human_bytes(n: usize) -> String {
    const KIB: usize = 1024;
    let (unit, name) = match n {
        0..KIB => return format!("{n} bytes"),
        KIB..1_048_576 => (KIB, "KiB"),
        _ => (KIB * KIB, "MiB"),
    };
    if n / unit * unit == n {
        format!("{} {name}", n / unit)
    } else {
        format!("{:.1} {name}", n as f64 / unit as f64)
    }
}

/// Checks one variable: its name, NUL bytes, and its size.
pub fn check_env_var(key: &str, value: &str, source: EnvSource) -> Result<(), SpecError> {
    let field = || format!("env.{}", shown(key));
    let whose = source.whose();
    if key.is_empty() {
        return Err(SpecError::new(
            "env",
            format!("a variable{whose} has an empty name; give it a name"),
        ));
    }
    if key.contains('\0') || value.contains('\0') {
        let part = if key.contains('\0') { "name" } else { "value" };
        return Err(SpecError::new(
            field(),
            format!(
                "the {part}{whose} contains a NUL byte, which no environment can hold; remove it"
            ),
        ));
    }
    match source {
        EnvSource::Spec => {
            let valid = !key.starts_with(|c: char| c.is_ascii_digit())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(SpecError::new(
                    field(),
                    "variable names are letters, digits and _, not starting with a digit",
                ));
            }
        }
        EnvSource::Submitter => {
            if key.contains('=') {
                return Err(SpecError::new(
                    field(),
                    format!("the name{whose} contains '=', which separates name and value; rename the variable"),
                ));
            }
        }
    }
    let size = env_entry_size(key, value);
    if size > MAX_ARG_STRLEN {
        return Err(SpecError::new(
            field(),
            format!(
                "the variable{whose} is {}; the limit is {} for one variable (Linux's MAX_ARG_STRLEN); {}",
                human_bytes(size),
                human_bytes(MAX_ARG_STRLEN),
                source.advice()
            ),
        ));
    }
    Ok(())
}

/// Checks the count and total size of a whole environment.
pub fn check_env_totals(vars: usize, bytes: usize, what: &str) -> Result<(), SpecError> {
    if vars > MAX_ENV_VARS {
        return Err(SpecError::new(
            "env",
            format!("{what} has {vars} variables; the limit is {MAX_ENV_VARS}; pass fewer (e.g. unset unneeded ones, or put settings in a file)"),
        ));
    }
    if bytes > MAX_ENV_TOTAL {
        return Err(SpecError::new(
            "env",
            format!(
                "{what} takes {} in all; the limit is {} (with the command it must fit Linux's ARG_MAX); pass large data in files",
                human_bytes(bytes),
                human_bytes(MAX_ENV_TOTAL)
            ),
        ));
    }
    Ok(())
}

/// Checks every variable of `env`, then its count and total size.
pub fn check_env(env: &BTreeMap<String, String>, source: EnvSource) -> Result<(), SpecError> {
    let mut total = 0;
    for (key, value) in env {
        check_env_var(key, value, source)?;
        total += env_entry_size(key, value);
    }
    let what = match source {
        EnvSource::Spec => "the job's env",
        EnvSource::Submitter => "the submitting environment",
    };
    check_env_totals(env.len(), total, what)
}

/// Checks a job's argument vector: NULs, each argument's size, their count and total.
pub fn check_argv(argv: &[String], field: &str) -> Result<(), SpecError> {
    if argv.len() > MAX_ARGS {
        return Err(SpecError::new(
            field,
            format!(
                "{} arguments; the limit is {MAX_ARGS}; pass long lists in a file",
                argv.len()
            ),
        ));
    }
    let mut total = 0;
    for (i, arg) in argv.iter().enumerate() {
        if arg.contains('\0') {
            return Err(SpecError::new(
                field,
                format!(
                    "argument {i} contains a NUL byte, which no program can receive; remove it"
                ),
            ));
        }
        if arg_size(arg) > MAX_ARG_STRLEN {
            return Err(SpecError::new(
                field,
                format!(
                    "argument {i} is {}; the limit is {} for one argument (Linux's MAX_ARG_STRLEN); pass large data in a file",
                    human_bytes(arg_size(arg)),
                    human_bytes(MAX_ARG_STRLEN)
                ),
            ));
        }
        total += arg_size(arg);
    }
    if total > MAX_ARGV_TOTAL {
        return Err(SpecError::new(
            field,
            format!(
                "the command line is {}; the limit is {}; pass large data in a file",
                human_bytes(total),
                human_bytes(MAX_ARGV_TOTAL)
            ),
        ));
    }
    Ok(())
}

/// Checks a short label shown in listings (a job name, a project, a user):
/// 1 to [`MAX_LABEL`] characters, none of them control characters.
pub fn check_label(value: &str, field: &str) -> Result<(), SpecError> {
    let chars = value.chars().count();
    let why = if value.is_empty() {
        "it is empty".to_string()
    } else if chars > MAX_LABEL {
        format!("it is {chars} characters long")
    } else if let Some(c) = value.chars().find(|c| c.is_control()) {
        format!("it contains the control character {:?}", c)
    } else if let Some(c) = value.chars().find(|c| is_bidi_control(*c)) {
        // They reorder what a terminal shows: a listing could lie.
        format!(
            "it contains U+{:04X}, which reorders the text around it",
            c as u32
        )
    } else {
        return Ok(());
    };
    Err(SpecError::new(
        field,
        format!("{why}; give 1 to {MAX_LABEL} printable characters"),
    ))
}

/// Unicode's explicit bidirectional formatting characters.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Checks a path: not empty, no NUL, at most PATH_MAX.
pub fn check_path(path: &str, field: &str) -> Result<(), SpecError> {
    if path.is_empty() {
        return Err(SpecError::new(field, "give a directory path"));
    }
    if path.contains('\0') {
        return Err(SpecError::new(
            field,
            "the path contains a NUL byte, which no path can hold; remove it",
        ));
    }
    if path.len() >= MAX_PATH {
        return Err(SpecError::new(
            field,
            format!(
                "the path is {}; the limit is {} (Linux's PATH_MAX)",
                human_bytes(path.len()),
                human_bytes(MAX_PATH - 1)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(812), "812 bytes");
        assert_eq!(human_bytes(128 * 1024), "128 KiB");
        assert_eq!(human_bytes(1024 * 1024), "1 MiB");
        assert_eq!(human_bytes(2_000_000), "1.9 MiB");
    }

    #[test]
    fn long_or_odd_names_are_shown_short_and_escaped() {
        assert_eq!(shown("A\0B"), "A\\0B");
        let long = shown(&"x".repeat(1000));
        assert_eq!(long.chars().count(), SHOWN_NAME + 1);
    }

    #[test]
    fn the_entry_limit_is_linux_max_arg_strlen() {
        // "K=" + value + NUL: exactly MAX_ARG_STRLEN passes, one more byte does not.
        let at = "v".repeat(MAX_ARG_STRLEN - 3);
        check_env_var("K", &at, EnvSource::Spec).unwrap();
        let over = "v".repeat(MAX_ARG_STRLEN - 2);
        let e = check_env_var("K", &over, EnvSource::Spec).unwrap_err();
        assert_eq!(e.field, "env.K");
        assert!(e.message.contains("the limit is 128 KiB"), "{e}");
    }

    #[test]
    fn submitter_names_may_be_anything_but_empty_eq_or_nul() {
        check_env_var("BASH_FUNC_f%%", "() { :; }", EnvSource::Submitter).unwrap();
        for bad in ["", "A=B", "A\0"] {
            assert!(
                check_env_var(bad, "v", EnvSource::Submitter).is_err(),
                "{bad:?}"
            );
        }
        let e = check_env_var("HOME", "a\0b", EnvSource::Submitter).unwrap_err();
        assert!(
            e.message.contains("NUL") && e.message.contains("submitting"),
            "{e}"
        );
    }

    #[test]
    fn totals_are_bounded() {
        let many: BTreeMap<String, String> = (0..=MAX_ENV_VARS)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        let e = check_env(&many, EnvSource::Submitter).unwrap_err();
        assert_eq!(e.field, "env");
        assert!(e.message.contains("4097 variables"), "{e}");
        let big: BTreeMap<String, String> = (0..10)
            .map(|i| (format!("V{i}"), "x".repeat(120 * 1024)))
            .collect();
        let e = check_env(&big, EnvSource::Spec).unwrap_err();
        assert!(
            e.message.contains("1.2 MiB") && e.message.contains("limit is 1 MiB"),
            "{e}"
        );
    }

    #[test]
    fn labels_say_what_is_wrong() {
        check_label("train-42 (ré)", "name").unwrap();
        let e = check_label("a\nb", "name").unwrap_err();
        assert!(e.message.contains("'\\n'"), "{e}");
        let e = check_label(&"é".repeat(201), "project").unwrap_err();
        assert_eq!(e.field, "project");
        assert!(e.message.contains("201 characters"), "{e}");
        assert!(check_label("", "name").is_err());
        let e = check_label("\u{202e}gpj.exe", "name").unwrap_err();
        assert!(e.message.contains("U+202E"), "{e}");
    }

    #[test]
    fn argv_checks_name_the_argument() {
        let argv = vec!["python".to_string(), "a\0".to_string()];
        let e = check_argv(&argv, "command").unwrap_err();
        assert!(e.message.contains("argument 1"), "{e}");
        let many = vec!["a".to_string(); MAX_ARGS + 1];
        assert!(check_argv(&many, "command").is_err());
        let wide = vec!["a".repeat(100 * 1024); 6];
        let e = check_argv(&wide, "command").unwrap_err();
        assert!(e.message.contains("command line"), "{e}");
    }
}
