//! What changed between a job's capture and a fresh one, in words (for `gpuq rerun`).

use gpuq_api::repro::{GitInfo, Repro};
use std::collections::{BTreeMap, BTreeSet};

/// Changes of the code (commit, uncommitted changes, untracked files, lock
/// file) and of the interpreter (version, packages), each a short phrase.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    pub code: Vec<String>,
    pub environment: Vec<String>,
}

pub fn changes(old: &Repro, new: &Repro) -> Changes {
    let mut c = Changes::default();
    match (&old.git, &new.git) {
        (Some(a), Some(b)) => git_changes(a, b, &mut c.code),
        (Some(_), None) => c
            .code
            .push("the directory is no longer a git checkout".into()),
        (None, Some(_)) => c.code.push("the directory is now a git checkout".into()),
        (None, None) => {}
    }
    let (a, b) = (old.python.as_ref(), new.python.as_ref());
    let lock = |p: Option<&gpuq_api::repro::PythonInfo>| p.and_then(|p| p.lock.clone());
    match (lock(a), lock(b)) {
        (Some(x), Some(y)) if x.sha256 != y.sha256 || x.path != y.path => {
            c.code.push(format!("{} changed", file_name(&y.path)))
        }
        (Some(x), None) => c.code.push(format!("{} is gone", file_name(&x.path))),
        (None, Some(y)) => c.code.push(format!("{} is new", file_name(&y.path))),
        _ => {}
    }
    if let (Some(a), Some(b)) = (a, b) {
        if a.executable != b.executable {
            c.environment
                .push(format!("python {} → {}", a.executable, b.executable));
        } else if a.version != b.version {
            c.environment
                .push(format!("python {} → {}", a.version, b.version));
        }
        // Empty is "not recorded" (no pip, too slow), not "none installed".
        if !a.packages.is_empty() && !b.packages.is_empty() {
            let (x, y): (BTreeSet<&String>, BTreeSet<&String>) =
                (a.packages.iter().collect(), b.packages.iter().collect());
            let names = |s: &BTreeSet<&String>, t: &BTreeSet<&String>| -> BTreeSet<String> {
                s.difference(t).map(|p| package_name(p)).collect()
            };
            let n = names(&x, &y).union(&names(&y, &x)).count();
            if n > 0 {
                c.environment.push(differ(n, "package", "packages"));
            }
        }
    }
    c
}

fn git_changes(a: &GitInfo, b: &GitInfo, out: &mut Vec<String>) {
    if a.root != b.root {
        out.push(format!("checkout {} → {}", a.root, b.root));
    }
    if a.commit != b.commit {
        let short = |c: &Option<String>| {
            c.as_deref()
                .map(|c| c.chars().take(7).collect())
                .unwrap_or_else(|| "(no commit)".to_string())
        };
        out.push(format!(
            "commit {} → {}",
            short(&a.commit),
            short(&b.commit)
        ));
    }
    let same_diff = if !a.dirty && !b.dirty {
        true
    } else if !a.diff_sha256.is_empty() && !b.diff_sha256.is_empty() {
        a.diff_sha256 == b.diff_sha256
    } else {
        a.diff_bytes == b.diff_bytes && a.diff == b.diff
    };
    if !same_diff {
        let n = files_differing(&a.diff, &b.diff);
        out.push(if n > 0 {
            differ(n, "file", "files")
        } else {
            "the uncommitted changes differ".into()
        });
    }
    let (x, y): (BTreeSet<&String>, BTreeSet<&String>) =
        (a.untracked.iter().collect(), b.untracked.iter().collect());
    let mut moved: Vec<String> = y.difference(&x).map(|n| format!("+{n}")).collect();
    moved.extend(x.difference(&y).map(|n| format!("-{n}")));
    if !moved.is_empty() {
        let more = moved.len().saturating_sub(3);
        moved.truncate(3);
        let mut text = format!("untracked files {}", moved.join(" "));
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        out.push(text);
    }
}

/// Files whose part of the diff is not the same in both (present in one only, or different).
fn files_differing(a: &str, b: &str) -> usize {
    let (x, y) = (by_file(a), by_file(b));
    let keys: BTreeSet<&&str> = x.keys().chain(y.keys()).collect();
    keys.into_iter().filter(|k| x.get(*k) != y.get(*k)).count()
}

/// A diff's parts by their `diff --git` line.
fn by_file(diff: &str) -> BTreeMap<&str, &str> {
    let mut parts = BTreeMap::new();
    let starts: Vec<usize> = diff
        .match_indices("diff --git ")
        .map(|(i, _)| i)
        .filter(|&i| i == 0 || diff.as_bytes()[i - 1] == b'\n')
        .collect();
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(diff.len());
        let part = &diff[start..end];
        let header = part.lines().next().unwrap_or("");
        parts.insert(header, part);
    }
    parts
}

/// `torch==2.3.0` → `torch`; `-e git+https://…#egg=x` as it is.
fn package_name(line: &str) -> String {
    line.split(['=', ' ', '@'])
        .next()
        .unwrap_or(line)
        .trim()
        .to_ascii_lowercase()
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// "1 file differs", "2 files differ".
fn differ(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one} differs")
    } else {
        format!("{n} {many} differ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuq_api::repro::{LockInfo, PythonInfo};

    fn repro(commit: &str, diff: &str, untracked: &[&str]) -> Repro {
        Repro {
            git: Some(GitInfo {
                root: "/p".into(),
                commit: Some(commit.into()),
                dirty: !diff.is_empty(),
                diff: diff.into(),
                diff_bytes: diff.len() as u64,
                untracked: untracked.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const A: &str = "diff --git a/a b/a\n+1\n";
    const B: &str = "diff --git a/b b/b\n+2\n";

    #[test]
    fn the_same_code_has_no_changes() {
        let r = repro("abc1234ffff", &format!("{A}{B}"), &["n.py"]);
        assert_eq!(changes(&r, &r.clone()), Changes::default());
    }

    #[test]
    fn commits_diffs_and_untracked_files_are_named() {
        let old = repro("abc1234ffff", &format!("{A}{B}"), &["n.py", "gone.txt"]);
        let new = repro(
            "def5678eeee",
            "diff --git a/a b/a\n+9\ndiff --git a/c b/c\n+3\n",
            &["n.py", "x/"],
        );
        let c = changes(&old, &new);
        assert_eq!(
            c.code,
            [
                "commit abc1234 → def5678",
                // a changed, b is gone, c is new.
                "3 files differ",
                "untracked files +x/ -gone.txt",
            ]
        );
        assert!(c.environment.is_empty());
        let clean = repro("abc1234ffff", "", &[]);
        assert_eq!(
            changes(&clean, &repro("abc1234ffff", A, &[])).code,
            ["1 file differs"]
        );
    }

    #[test]
    fn locks_interpreters_and_packages_are_compared() {
        let py = |version: &str, packages: &[&str], lock: &str| PythonInfo {
            executable: "/usr/bin/python3".into(),
            version: version.into(),
            packages: packages.iter().map(|s| s.to_string()).collect(),
            lock: Some(LockInfo {
                path: "/p/uv.lock".into(),
                sha256: lock.into(),
            }),
            ..Default::default()
        };
        let old = Repro {
            python: Some(py("3.11.7", &["numpy==1.26.0", "torch==2.3.0"], "aa")),
            ..Default::default()
        };
        let new = Repro {
            python: Some(py(
                "3.12.1",
                &["numpy==1.26.0", "torch==2.4.0", "tqdm==4"],
                "bb",
            )),
            ..Default::default()
        };
        let c = changes(&old, &new);
        assert_eq!(c.code, ["uv.lock changed"]);
        assert_eq!(
            c.environment,
            ["python 3.11.7 → 3.12.1", "2 packages differ"]
        );
        assert_eq!(package_name("Torch==2.3"), "torch");
        assert_eq!(package_name("pkg @ file:///x"), "pkg");
    }
}
