//! `gpuq show --repro ID`: what a job was submitted from and ran on.
//! `--diff` prints the captured diff raw (for `git apply`), `--json` everything.

use super::output::{ago, print_json};
use super::{CliError, CmdResult};
use gpuq_api::home::now_ms;
use gpuq_api::repro::{GitInfo, Repro, RuntimeInfo, Withheld, HIDDEN};
use gpuq_api::Client;
use gpuq_core::limits::human_bytes;
use gpuq_core::JobId;
use std::io::IsTerminal;

pub async fn run(client: &Client, id: JobId, json: bool, diff: bool) -> CmdResult {
    let view = client.repro(id).await?;
    if diff {
        return print_diff(id, view.repro.as_ref());
    }
    if json {
        print_json(&view);
        return Ok(0);
    }
    let row = |k: &str, v: String| outln!("{k:<12} {v}");
    row("job", id.to_string());
    match &view.repro {
        Some(r) => print_repro(id, r, &row),
        None => row(
            "recorded",
            "nothing: submitted with --no-repro (or GPUQ_NO_REPRO), or by a client that does not capture".into(),
        ),
    }
    for rt in &view.runtime {
        row(&format!("attempt {}", rt.attempt), runtime_line(rt));
    }
    Ok(0)
}

fn print_diff(id: JobId, repro: Option<&Repro>) -> CmdResult {
    let git = repro.and_then(|r| r.git.as_ref()).ok_or_else(|| {
        CliError::failure(format!(
            "job {id} has no git record (it was not submitted from a git checkout, or without a capture)"
        ))
    })?;
    if repro.is_some_and(|r| r.withheld.is_some()) && git.dirty {
        return Err(CliError::failure(format!(
            "job {id}'s diff is its owner's: only they or an admin (`admins` in gpuq.toml) may read it"
        )));
    }
    if git.diff_truncated {
        errln!(
            "gpuq: warning: only part of job {id}'s diff was kept ({} of {}); it holds whole files where it could",
            human_bytes(git.diff.len()),
            human_bytes(git.diff_bytes as usize)
        );
    }
    if git.diff.is_empty() && !git.dirty {
        errln!("gpuq: job {id} was submitted from a clean checkout: no diff");
    }
    // Exact for `| git apply` (CRLF files included); on a terminal, cleaned.
    if std::io::stdout().is_terminal() {
        out!("{}", git.diff);
    } else {
        super::output::write_stdout_bytes(git.diff.as_bytes());
    }
    Ok(0)
}

fn print_repro(id: JobId, r: &Repro, row: &dyn Fn(&str, String)) {
    let now = now_ms();
    row(
        "captured",
        format!(
            "{} on {}, in {} ms",
            ago(r.captured_at, now),
            r.hostname,
            r.capture_ms
        ),
    );
    match (&r.script, r.command.is_empty()) {
        (Some(script), _) => {
            let mut lines = script.lines();
            row("script", lines.next().unwrap_or("").to_string());
            for l in lines {
                outln!("{:<12} {l}", "");
            }
        }
        (None, false) => row("command", shell_words(&r.command)),
        (None, true) => {}
    }
    row("cwd", r.cwd.clone());
    match &r.git {
        Some(g) => print_git(id, g, r.withheld, row),
        None => row(
            "git",
            "none (not a git checkout, or git is not installed)".into(),
        ),
    }
    match &r.python {
        Some(p) => {
            let venv = p
                .virtual_env
                .as_ref()
                .map(|v| format!(" (environment {v})"))
                .unwrap_or_default();
            row("python", format!("{} {}{venv}", p.version, p.executable));
            if let Some(w) = r.withheld.filter(|w| w.packages > 0) {
                row(
                    "packages",
                    format!("{} (the list is its owner's and admins' only)", w.packages),
                );
            }
            if !p.packages.is_empty() {
                row(
                    "packages",
                    format!(
                        "{} (gpuq show --repro --json {id} lists them)",
                        p.packages.len()
                    ),
                );
            }
            if let Some(lock) = &p.lock {
                let hash: String = lock.sha256.chars().take(12).collect();
                row("lock", format!("{} sha256 {hash}", lock.path));
            }
        }
        None => row("python", "none found".into()),
    }
    let hidden = r.env.values().filter(|v| *v == HIDDEN).count();
    row(
        "env",
        format!(
            "{} variables, {hidden} hidden (gpuq show --repro --json {id} shows them)",
            r.env.len()
        ),
    );
    for (n, note) in r.notes.iter().enumerate() {
        row(if n == 0 { "notes" } else { "" }, note.clone());
    }
}

fn print_git(id: JobId, g: &GitInfo, withheld: Option<Withheld>, row: &dyn Fn(&str, String)) {
    let branch = g
        .branch
        .as_ref()
        .map(|b| format!(" on {b}"))
        .unwrap_or_else(|| " (detached HEAD)".into());
    row(
        "git",
        format!(
            "{}{branch} in {}",
            g.commit.as_deref().unwrap_or("(no commit yet)"),
            g.root
        ),
    );
    if let Some(remote) = &g.remote {
        row("remote", remote.clone());
    }
    let changes = if !g.dirty {
        "none: the checkout was clean".to_string()
    } else if withheld.is_some() {
        let hash: String = g.diff_sha256.chars().take(12).collect();
        format!(
            "{} of uncommitted changes (sha256 {hash}); what they say is its owner's and admins' only",
            human_bytes(g.diff_bytes as usize)
        )
    } else {
        let (files, added, removed) = diff_stat(&g.diff);
        let cut = if g.diff_truncated {
            format!(
                " in the part kept ({} of {})",
                human_bytes(g.diff.len()),
                human_bytes(g.diff_bytes as usize)
            )
        } else {
            String::new()
        };
        format!(
            "{} changed, +{added} -{removed}{cut}; gpuq show --repro --diff {id} prints them (| git apply applies them)",
            if files == 1 { "1 file".to_string() } else { format!("{files} files") }
        )
    };
    row("changes", changes);
    if let Some(w) = withheld.filter(|w| w.untracked > 0) {
        row(
            "untracked",
            format!(
                "{} (the names are its owner's and admins' only)",
                w.untracked
            ),
        );
    }
    if !g.untracked.is_empty() {
        let shown: Vec<&str> = g.untracked.iter().take(5).map(String::as_str).collect();
        let more = g.untracked.len() - shown.len();
        let mut text = shown.join(", ");
        match (more, g.untracked_truncated) {
            (0, false) => {}
            (n, false) => text.push_str(&format!(" (+{n} more)")),
            (n, true) => text.push_str(&format!(" (+{n} more, and more not recorded)")),
        }
        row("untracked", text);
    }
}

/// Files, added and removed lines of a diff.
fn diff_stat(diff: &str) -> (usize, usize, usize) {
    let (mut files, mut added, mut removed) = (0, 0, 0);
    for line in diff.lines() {
        if line.starts_with("diff --git ") {
            files += 1;
        } else if line.starts_with('+') && !line.starts_with("+++ ") {
            added += 1;
        } else if line.starts_with('-') && !line.starts_with("--- ") {
            removed += 1;
        }
    }
    (files, added, removed)
}

fn runtime_line(rt: &RuntimeInfo) -> String {
    let gpus: Vec<String> = rt
        .gpus
        .iter()
        .map(|g| {
            let uuid = g
                .uuid
                .as_ref()
                .map(|u| format!(" ({u})"))
                .unwrap_or_default();
            format!("GPU {} {}{uuid}", g.index, g.model)
        })
        .collect();
    let mut parts = vec![format!("on {}", rt.hostname)];
    if gpus.is_empty() {
        parts.push("no GPUs".into());
    } else {
        parts.push(gpus.join(", "));
    }
    if let Some(d) = &rt.driver_version {
        parts.push(format!("driver {d}"));
    }
    if let Some(c) = &rt.cuda_version {
        parts.push(format!("CUDA {c}"));
    }
    if let Some(e) = &rt.environment {
        if let Some(key) = &e.key {
            // The exact packages are in --json (and `gpuq envs show KEY`).
            parts.push(format!(
                "environment {key} (Python {}, {} packages)",
                e.python.as_deref().unwrap_or("?"),
                e.packages.len()
            ));
        }
        if let Some(image) = &e.image {
            parts.push(format!("image {image}"));
        }
    }
    parts.join(", ")
}

/// The command as a shell would need it typed (quoted where needed).
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_is_summed_up() {
        let diff = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-old\n+new\n+more\ndiff --git a/y b/y\n";
        assert_eq!(diff_stat(diff), (2, 2, 1));
    }

    #[test]
    fn commands_are_quoted_as_a_shell_needs() {
        let argv = ["python", "train.py", "--name", "a b", "it's"].map(String::from);
        assert_eq!(
            shell_words(&argv),
            r"python train.py --name 'a b' 'it'\''s'"
        );
    }
}
