//! The git part of a capture: commit, branch, remote, the diff of tracked
//! changes (capped) and the untracked names (capped).

use super::{hex, run_bounded, Bounded};
use gpuq_api::repro::{strip_credentials, GitInfo, MAX_DIFF_BYTES, MAX_UNTRACKED};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Most of `git status` read: beyond [`MAX_UNTRACKED`] names nothing more is kept anyway.
const MAX_STATUS_BYTES: usize = 1024 * 1024;
/// Small answers (a path, a hash, a branch, the remotes).
const SMALL: usize = 64 * 1024;

/// `None` when git is not installed, `dir` is not in a checkout, or git refuses
/// it (another user's repository): none of those is the submitter's mistake.
pub fn capture(dir: &Path, deadline: Instant, notes: &mut Vec<String>) -> Option<GitInfo> {
    let git = |args: &[&str], keep: usize| -> Option<Bounded> {
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(dir)
            .arg("--no-optional-locks")
            .args(args)
            // Never a password prompt, a pager or a locale's words.
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_PAGER", "cat")
            .env("LC_ALL", "C");
        run_bounded(&mut cmd, keep, deadline).ok()
    };
    let top = git(&["rev-parse", "--show-toplevel"], SMALL)?;
    if top.timed_out() {
        notes.push("git: `git rev-parse` did not answer in time; the code is not recorded".into());
        return None;
    }
    if !top.success() {
        return None;
    }
    let ok_text = |b: Option<Bounded>| b.filter(Bounded::success).map(|b| b.text());
    let commit = ok_text(git(
        &["rev-parse", "--verify", "-q", "HEAD^{commit}"],
        SMALL,
    ));
    let branch = ok_text(git(&["symbolic-ref", "-q", "--short", "HEAD"], SMALL));
    let remote = ok_text(git(
        &["config", "--get-regexp", r"^remote\..*\.url$"],
        SMALL,
    ))
    .and_then(|t| pick_remote(&t))
    .map(|u| strip_credentials(&u));
    let mut info = GitInfo {
        root: top.text(),
        commit,
        branch,
        remote,
        ..Default::default()
    };
    let status = git(
        &["status", "--porcelain=v1", "-z", "--untracked-files=normal"],
        MAX_STATUS_BYTES,
    );
    let (tracked_changes, complete) = match &status {
        Some(s) if s.success() => {
            let parsed = parse_porcelain(&s.stdout);
            info.untracked = parsed.untracked;
            info.untracked_truncated =
                parsed.untracked_truncated || s.total > s.stdout.len() as u64;
            (parsed.tracked_changes, s.total == s.stdout.len() as u64)
        }
        Some(s) if s.timed_out() => {
            notes.push(
                "git: `git status` did not answer in time; untracked files are not recorded".into(),
            );
            (true, false)
        }
        _ => (true, false),
    };
    // A clean status saves the diff; a cut or failed one does not say, so the diff decides.
    if tracked_changes || !complete {
        // Against the empty tree in a repository without commits: its staged files.
        let base = if info.commit.is_some() {
            "HEAD"
        } else {
            "--cached"
        };
        let args = [
            "diff",
            base,
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
        ];
        match git(&args, MAX_DIFF_BYTES + 1) {
            Some(d) if d.success() || d.timed_out() => {
                let kept = cut_diff(&d.stdout, MAX_DIFF_BYTES);
                info.diff = String::from_utf8_lossy(kept).into_owned();
                info.diff_bytes = d.total;
                info.diff_truncated = d.timed_out() || (kept.len() as u64) < d.total;
                info.dirty = d.total > 0;
                if d.timed_out() {
                    notes
                        .push("git: `git diff` did not finish in time; the diff is partial".into());
                } else if d.total > 0 {
                    info.diff_sha256 = hex(&d.sha256);
                }
            }
            _ => notes.push("git: `git diff` failed; the changes are not recorded".into()),
        }
    }
    Some(info)
}

/// The remote to record from `git config --get-regexp` lines
/// (`remote.NAME.url URL`): `origin`, else the first.
fn pick_remote(lines: &str) -> Option<String> {
    let remotes: Vec<(&str, &str)> = lines
        .lines()
        .filter_map(|l| {
            let (key, url) = l.split_once(' ')?;
            let name = key.strip_prefix("remote.")?.strip_suffix(".url")?;
            Some((name, url.trim()))
        })
        .collect();
    remotes
        .iter()
        .find(|(n, _)| *n == "origin")
        .or(remotes.first())
        .map(|(_, u)| u.to_string())
}

#[derive(Debug, Default, PartialEq)]
pub(super) struct Porcelain {
    /// A tracked file differs from HEAD (staged or not).
    pub tracked_changes: bool,
    pub untracked: Vec<String>,
    pub untracked_truncated: bool,
}

/// `git status --porcelain=v1 -z`: entries `XY PATH\0`, renames and copies
/// followed by their source path `\0`; `??` marks an untracked path.
pub(super) fn parse_porcelain(out: &[u8]) -> Porcelain {
    let mut p = Porcelain::default();
    let mut entries = out.split(|&b| b == 0).filter(|e| !e.is_empty());
    while let Some(entry) = entries.next() {
        if entry.len() < 4 || entry[2] != b' ' {
            continue; // cut off at the end of a bounded read
        }
        let (x, y) = (entry[0], entry[1]);
        let path = String::from_utf8_lossy(&entry[3..]).into_owned();
        if (x, y) == (b'?', b'?') {
            if p.untracked.len() < MAX_UNTRACKED {
                p.untracked.push(path);
            } else {
                p.untracked_truncated = true;
            }
            continue;
        }
        if (x, y) != (b'!', b'!') {
            p.tracked_changes = true;
        }
        if matches!(x, b'R' | b'C') || matches!(y, b'R' | b'C') {
            entries.next(); // the source path
        }
    }
    p
}

/// The first `max` bytes of a diff or fewer, ending where a file's part ends
/// when it can (a patch of whole files still applies), else at a line's end.
pub(super) fn cut_diff(diff: &[u8], max: usize) -> &[u8] {
    if diff.len() <= max {
        return diff;
    }
    let head = &diff[..max];
    const NEXT_FILE: &[u8] = b"\ndiff --git ";
    // `diff` (not `head`): a file that starts right at the cap counts too.
    let boundary = diff[..(max + NEXT_FILE.len()).min(diff.len())]
        .windows(NEXT_FILE.len())
        .rposition(|w| w == NEXT_FILE)
        .filter(|&at| at < max);
    match boundary {
        Some(at) if at > 0 => &diff[..at + 1],
        _ => match head.iter().rposition(|&b| b == b'\n') {
            Some(at) => &diff[..at + 1],
            None => &[],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_separates_tracked_changes_from_untracked_names() {
        let out = b" M src/a.rs\0?? new file.txt\0R  b.rs\0old b.rs\0?? data/\0";
        let p = parse_porcelain(out);
        assert!(p.tracked_changes);
        assert_eq!(p.untracked, ["new file.txt", "data/"]);
        assert!(!p.untracked_truncated);

        let only_untracked = parse_porcelain(b"?? x\0");
        assert!(!only_untracked.tracked_changes);
        // The source path of a rename is not an entry of its own, even when it looks like one.
        let rename = parse_porcelain(b"R  new\0?? looks-untracked\0");
        assert!(rename.untracked.is_empty());
        // A read cut in the middle of an entry keeps what was whole.
        let cut = parse_porcelain(b"?? a\0?");
        assert_eq!(cut.untracked, ["a"]);
        assert_eq!(parse_porcelain(b""), Porcelain::default());
    }

    #[test]
    fn untracked_names_are_capped() {
        let out: Vec<u8> = (0..MAX_UNTRACKED + 5)
            .flat_map(|i| format!("?? f{i}\0").into_bytes())
            .collect();
        let p = parse_porcelain(&out);
        assert_eq!(p.untracked.len(), MAX_UNTRACKED);
        assert!(p.untracked_truncated);
    }

    #[test]
    fn the_remote_is_origin_or_the_first() {
        let lines = "remote.upstream.url https://a/x.git\nremote.origin.url git@b:y.git\n";
        assert_eq!(pick_remote(lines).as_deref(), Some("git@b:y.git"));
        assert_eq!(
            pick_remote("remote.fork.url /srv/r.git\n").as_deref(),
            Some("/srv/r.git")
        );
        assert_eq!(pick_remote(""), None);
        // A dotted remote name.
        assert_eq!(pick_remote("remote.my.fork.url u\n").as_deref(), Some("u"));
    }

    #[test]
    fn a_long_diff_is_cut_after_whole_files() {
        let a = "diff --git a/a b/a\n+1\n+2\n";
        let b = "diff --git a/b b/b\n+3\n";
        let diff = format!("{a}{b}");
        assert_eq!(cut_diff(diff.as_bytes(), 1000), diff.as_bytes());
        // Room for a and part of b: a only.
        assert_eq!(cut_diff(diff.as_bytes(), a.len() + 5), a.as_bytes());
        // Exactly a: a.
        assert_eq!(cut_diff(diff.as_bytes(), a.len()), a.as_bytes());
        // Not even one whole file: whole lines of it.
        assert_eq!(cut_diff(diff.as_bytes(), 23), b"diff --git a/a b/a\n+1\n");
        assert_eq!(cut_diff(b"abcdef", 3), b"");
    }
}
