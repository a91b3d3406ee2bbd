//! The Python part of a capture: the interpreter the job would run, its
//! version and virtual environment, its packages (`pip freeze`, cached per
//! environment), and the project's lock file.

use super::{hex, run_bounded, Context};
use gpuq_api::repro::{LockInfo, PythonInfo, MAX_PACKAGES};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Lock files, first found wins. A pip-tools `requirements.txt` (one with a
/// `requirements.in` beside it) counts too.
const LOCK_FILES: &[&str] = &[
    "uv.lock",
    "poetry.lock",
    "pdm.lock",
    "Pipfile.lock",
    "pixi.lock",
    "conda-lock.yml",
    "requirements.lock",
    "requirements-lock.txt",
];
/// A lock file larger than this is named but not hashed.
const MAX_LOCK_BYTES: u64 = 64 * 1024 * 1024;
/// Most of `pip freeze` read.
const MAX_FREEZE_BYTES: usize = 4 * 1024 * 1024;
/// Longest `pip freeze` line kept (a VCS reference can be long, not this long).
const MAX_LINE: usize = 4096;

/// Prints, one a line: executable, version, prefix, base prefix, whether pip
/// is there, the site directories (tab-separated). Only `sys` first, so a
/// module of the project named like a standard one can break no more than a line.
const PROBE: &str = r#"import sys
v = sys.version_info
print(sys.executable)
print("%d.%d.%d" % (v[0], v[1], v[2]))
print(sys.prefix)
print(getattr(sys, "base_prefix", sys.prefix))
try:
    import importlib.util
    print(1 if importlib.util.find_spec("pip") else 0)
except Exception:
    print(0)
try:
    import site
    print("\t".join(site.getsitepackages() + [site.getusersitepackages()]))
except Exception:
    print("")
"#;

/// `None` when no interpreter is found (the job is not a Python one, or its
/// interpreter is missing: the job will say so itself).
pub fn capture(
    ctx: &Context<'_>,
    deadline: Instant,
    notes: &mut Vec<String>,
) -> Option<PythonInfo> {
    let interpreter = interpreter(ctx)?;
    let mut probe = Command::new(&interpreter);
    // In the job's directory: pyenv picks the version from its `.python-version`.
    probe.args(["-c", PROBE]).current_dir(ctx.cwd).envs(ctx.env);
    let out = match run_bounded(&mut probe, 64 * 1024, deadline) {
        Ok(out) if out.success() => out.text(),
        Ok(out) if out.timed_out() => {
            notes.push(format!(
                "python: {} did not answer in time",
                interpreter.display()
            ));
            return None;
        }
        _ => {
            notes.push(format!("python: {} did not run", interpreter.display()));
            return None;
        }
    };
    let lines: Vec<&str> = out.lines().collect();
    let line = |i: usize| lines.get(i).map(|s| s.trim()).unwrap_or("");
    let executable = if line(0).is_empty() {
        interpreter.display().to_string()
    } else {
        line(0).to_string()
    };
    let (prefix, base_prefix) = (line(2), line(3));
    let virtual_env = if !prefix.is_empty() && prefix != base_prefix {
        Some(prefix.to_string())
    } else {
        // conda: an environment is a prefix of its own, not a venv.
        ctx.env
            .get("CONDA_PREFIX")
            .cloned()
            .or_else(|| std::env::var("CONDA_PREFIX").ok())
            .filter(|c| !c.is_empty() && executable.starts_with(c.as_str()))
    };
    let mut info = PythonInfo {
        version: line(1).to_string(),
        virtual_env,
        lock: find_lock(ctx.cwd, notes),
        ..Default::default()
    };
    if line(4) == "1" {
        let sites: Vec<&str> = line(5).split('\t').filter(|s| !s.is_empty()).collect();
        info.packages = freeze(ctx, &executable, &info.version, &sites, deadline, notes);
    } else {
        notes.push(format!(
            "python: pip is not installed for {executable}; its packages are not recorded"
        ));
    }
    info.executable = executable;
    Some(info)
}

/// The interpreter the job would run: the one its command names (`python3 …`,
/// `.venv/bin/python …`, `env python …`, a program whose `#!` names one such as
/// `torchrun`), or the first one a shell script names (`bash -c "python …"`, a
/// spec's `run`). A job that names none is not a Python job: nothing is started
/// to ask (a submit of `true` costs no interpreter start).
fn interpreter(ctx: &Context<'_>) -> Option<PathBuf> {
    let path_var = ctx
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let resolve = |name: &str| resolve(name, ctx.cwd, &path_var);
    let named_in = |script: &str| {
        script
            .split(|c: char| c.is_whitespace() || ";&|()`$\"'".contains(c))
            .find(|w| is_python_name(base_name(w)))
            .and_then(&resolve)
    };
    match ctx.argv {
        Some(argv) => {
            let program = program_of(argv)?;
            if is_python_name(base_name(program)) {
                return resolve(program);
            }
            if let Some(interp) = resolve(program).and_then(|p| shebang_python(&p)) {
                return resolve(&interp);
            }
            if ["sh", "bash", "zsh", "dash"].contains(&base_name(program)) {
                return named_in(&argv[1..].join(" "));
            }
            None
        }
        None => ctx.script.and_then(named_in),
    }
}

/// The program an argument vector runs, through `env [-flags] [VAR=value]…`.
fn program_of(argv: &[String]) -> Option<&str> {
    let mut args = argv.iter().map(String::as_str);
    let first = args.next()?;
    if base_name(first) != "env" {
        return Some(first);
    }
    args.find(|a| !a.starts_with('-') && !a.contains('='))
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `python`, `python3`, `python3.11`, `pypy3`.
fn is_python_name(name: &str) -> bool {
    ["python", "pypy"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// A name with a `/` relative to the job's directory; a bare one on PATH.
fn resolve(name: &str, cwd: &Path, path_var: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = cwd.join(name);
        return is_executable(&p).then_some(p);
    }
    path_var
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The Python interpreter a script's `#!` line names (`/x/.venv/bin/python`,
/// or `python3` after `/usr/bin/env`), if it names one.
fn shebang_python(script: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = std::str::from_utf8(head[..n].strip_prefix(b"#!")?)
        .ok()?
        .lines()
        .next()?;
    parse_shebang(line)
}

fn parse_shebang(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let program = if base_name(first) == "env" {
        words.find(|w| !w.starts_with('-') && !w.contains('='))?
    } else {
        first
    };
    is_python_name(base_name(program)).then(|| program.to_string())
}

/// `pip freeze`, from the cache when the environment has not changed since
/// (same interpreter, same site directories' modification times: installing
/// or removing a package changes its site directory). A freeze that does not
/// finish in time goes on in the background and fills the cache for next time.
fn freeze(
    ctx: &Context<'_>,
    executable: &str,
    version: &str,
    sites: &[&str],
    deadline: Instant,
    notes: &mut Vec<String>,
) -> Vec<String> {
    use sha2::Digest;
    let mtime = |p: &str| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos())
    };
    let mut key = format!("{executable}\n{version}\n{}\n", mtime(executable));
    for s in sites {
        key.push_str(&format!("{s} {}\n", mtime(s)));
    }
    let name = format!(
        "pip-freeze-{}.txt",
        &hex(&sha2::Sha256::digest(key.as_bytes()))[..32]
    );
    let cache = ctx
        .cache
        .as_ref()
        .filter(|dir| std::fs::create_dir_all(dir).is_ok())
        .map(|dir| dir.join(name));
    let text = match &cache {
        Some(file) => match read_bounded(file) {
            Some(text) => Some(text),
            None => freeze_into(ctx, executable, file, deadline, notes),
        },
        None => {
            let mut cmd = Command::new(executable);
            cmd.args(["-m", "pip", "freeze", "--disable-pip-version-check"])
                .current_dir(ctx.cwd)
                .envs(ctx.env);
            match run_bounded(&mut cmd, MAX_FREEZE_BYTES, deadline) {
                Ok(out) if out.success() => Some(String::from_utf8_lossy(&out.stdout).into_owned()),
                Ok(out) if out.timed_out() => {
                    notes.push(
                        "python: `pip freeze` did not finish in time; packages not recorded".into(),
                    );
                    None
                }
                _ => {
                    notes.push("python: `pip freeze` failed; packages not recorded".into());
                    None
                }
            }
        }
    };
    let Some(text) = text else {
        return Vec::new();
    };
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.chars().take(MAX_LINE).collect())
        .collect();
    if lines.len() > MAX_PACKAGES {
        notes.push(format!(
            "python: only the first {MAX_PACKAGES} of {} packages are recorded",
            lines.len()
        ));
        lines.truncate(MAX_PACKAGES);
    }
    lines
}

/// Runs `pip freeze` into `file` (through a temporary name, so a reader never
/// sees half of it) and waits for it until `deadline`; past it, leaves it
/// running. A `.pending` marker keeps submits made meanwhile from starting more.
fn freeze_into(
    ctx: &Context<'_>,
    executable: &str,
    file: &Path,
    deadline: Instant,
    notes: &mut Vec<String>,
) -> Option<String> {
    use std::os::unix::process::CommandExt;
    let slow = "python: `pip freeze` takes longer than the time allowed; it goes on in the \
                background and later submits take the packages from its result";
    let pending = file.with_extension("pending");
    if !claim(&pending) {
        notes.push(slow.into());
        return None;
    }
    let script = r#"trap 'rm -f "$1.$$" "$2"' EXIT
"$0" -m pip freeze --disable-pip-version-check > "$1.$$" 2>/dev/null && mv -f "$1.$$" "$1""#;
    let spawned = Command::new("sh")
        .args(["-c", script, executable])
        .arg(file)
        .arg(&pending)
        .current_dir(ctx.cwd)
        .envs(ctx.env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own group: a Ctrl-C after submit does not cut the cache's fill short.
        .process_group(0)
        .spawn();
    let Ok(mut child) = spawned else {
        let _ = std::fs::remove_file(&pending);
        return None;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait().map(|s| s.success()).unwrap_or(false));
    });
    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(true) => read_bounded(file),
        Ok(false) => {
            notes.push("python: `pip freeze` failed; packages not recorded".into());
            None
        }
        Err(_) => {
            notes.push(slow.into());
            None
        }
    }
}

/// Takes the marker of a running freeze; one older than a few minutes was
/// left by a freeze that died, and is taken over.
fn claim(marker: &Path) -> bool {
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(marker)
            .is_ok()
    };
    if create() {
        return true;
    }
    let stale = std::fs::metadata(marker)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > std::time::Duration::from_secs(300));
    stale && std::fs::remove_file(marker).is_ok() && create()
}

fn read_bounded(file: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(file)
        .ok()?
        .take(MAX_FREEZE_BYTES as u64)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The project's lock file: in the job's directory or a parent, up to the
/// project's root (the first with `.git` or `pyproject.toml`); outside a
/// project only the directory itself is looked at.
fn find_lock(cwd: &Path, notes: &mut Vec<String>) -> Option<LockInfo> {
    let mut nearest = None;
    let mut in_project = false;
    for dir in cwd.ancestors() {
        if nearest.is_none() {
            nearest = lock_in(dir);
        }
        if dir.join(".git").exists() || dir.join("pyproject.toml").is_file() {
            in_project = true;
            break;
        }
    }
    // No project root above: a lock further up is not this job's.
    let found = if in_project { nearest } else { lock_in(cwd) };
    let path = found?;
    let sha256 = match hash_file(&path) {
        Some(h) => h,
        None => {
            notes.push(format!(
                "python: {} is over {} MiB or unreadable; not hashed",
                path.display(),
                MAX_LOCK_BYTES >> 20
            ));
            String::new()
        }
    };
    Some(LockInfo {
        path: path.display().to_string(),
        sha256,
    })
}

fn lock_in(dir: &Path) -> Option<PathBuf> {
    LOCK_FILES
        .iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
        .or_else(|| {
            let txt = dir.join("requirements.txt");
            (txt.is_file() && dir.join("requirements.in").is_file()).then_some(txt)
        })
}

fn hash_file(path: &Path) -> Option<String> {
    use sha2::Digest;
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > MAX_LOCK_BYTES {
        return None;
    }
    let mut hasher = sha2::Sha256::new();
    let mut reader = std::io::BufReader::new(file.take(MAX_LOCK_BYTES));
    let mut buf = [0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(_) => return None,
        }
    }
    Some(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_program_and_python_names_are_recognised() {
        assert_eq!(program_of(&argv(&["python3", "x.py"])), Some("python3"));
        assert_eq!(
            program_of(&argv(&["/usr/bin/env", "-S", "A=1", "python", "x.py"])),
            Some("python")
        );
        assert_eq!(program_of(&argv(&[])), None);
        for name in ["python", "python3", "python3.11", "pypy3"] {
            assert!(is_python_name(name), "{name}");
        }
        for name in ["python-config", "ipython", "torchrun", "sh"] {
            assert!(!is_python_name(name), "{name}");
        }
        assert_eq!(
            parse_shebang("/usr/bin/env python3").as_deref(),
            Some("python3")
        );
        assert_eq!(
            parse_shebang("/x/.venv/bin/python -u").as_deref(),
            Some("/x/.venv/bin/python")
        );
        assert_eq!(parse_shebang("/bin/bash"), None);
    }

    #[test]
    fn the_interpreter_named_in_the_command_is_the_one() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join(".venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = |p: &Path, text: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(p, text).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        exe(&bin.join("python"), "");
        let shebang = format!("#!{}\n", bin.join("python").display());
        exe(&bin.join("torchrun"), &shebang);
        let env = Default::default();
        let with = |words: &[&str]| {
            let a = argv(words);
            interpreter(&Context {
                cwd: dir.path(),
                argv: Some(&a),
                script: None,
                env: &env,
                cache: None,
            })
        };
        let script = |text: &str| {
            interpreter(&Context {
                cwd: dir.path(),
                argv: None,
                script: Some(text),
                env: &env,
                cache: None,
            })
        };
        assert_eq!(
            with(&[".venv/bin/python", "train.py"]),
            Some(bin.join("python"))
        );
        // A launcher installed in the venv names its interpreter in its `#!`.
        assert_eq!(
            with(&[".venv/bin/torchrun", "train.py"]),
            Some(bin.join("python"))
        );
        assert_eq!(with(&["./missing/python", "x.py"]), None);
        // A shell names its Python in its script; a job naming none is not a Python job.
        assert_eq!(
            with(&["bash", "-c", "cd x && .venv/bin/python -u train.py"]),
            Some(bin.join("python"))
        );
        assert_eq!(
            script("set -e\n.venv/bin/python train.py\n"),
            Some(bin.join("python"))
        );
        assert_eq!(with(&["true"]), None);
        assert_eq!(with(&["bash", "-c", "make all"]), None);
        assert_eq!(script("echo hello"), None);
    }

    #[test]
    fn a_lock_file_is_found_up_to_the_project_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        let sub = root.join("src/train");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join("uv.lock"), "version = 1\n").unwrap();
        let mut notes = Vec::new();
        let lock = find_lock(&sub, &mut notes).unwrap();
        assert_eq!(lock.path, root.join("uv.lock").display().to_string());
        // sha256("version = 1\n")
        assert_eq!(lock.sha256.len(), 64);
        let again = find_lock(&root, &mut notes).unwrap();
        assert_eq!(again, lock);

        // A pip-tools requirements.txt counts; a plain one does not.
        let other = dir.path().join("other");
        std::fs::create_dir_all(other.join(".git")).unwrap();
        std::fs::write(other.join("requirements.txt"), "torch==2.3\n").unwrap();
        assert_eq!(find_lock(&other, &mut notes), None);
        std::fs::write(other.join("requirements.in"), "torch\n").unwrap();
        assert!(find_lock(&other, &mut notes)
            .unwrap()
            .path
            .ends_with("requirements.txt"));
        assert!(notes.is_empty());
    }
}
