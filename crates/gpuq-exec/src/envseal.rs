//! A lab-wide environment (`[envs] shared = true`) made immutable once built.
//!
//! The build runs as the user who first asked for it, in a directory that user
//! owns; left so, they could change it afterwards (a `.pth` file runs in every
//! labmate's job, as the labmate). Sealing moves the built tree out of the
//! user's reach (into `.seal/`, the daemon's, 0700), copies it into a fresh
//! tree the daemon's account owns (directories 0755, files 0644 or 0755: new
//! inodes, so a descriptor the builder kept open writes nothing that is used),
//! and renames the copy into place. The builder's tree goes to `.trash/` for
//! its owner to remove. Every reference that leaves the environment (a link,
//! the interpreter's `home` in `pyvenv.cfg`, a path in a `.pth` file), judged
//! where it finally leads through the environment's own links, must lead to
//! files nobody but root can change, or the environment is refused. The copy
//! takes each file as large as it was when opened, and at most `envs.max_size`
//! in all (the builder's processes are gone by then: the builder ends them).

use crate::envbuild::EnvCache;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Deeper than this is not a Python environment.
const MAX_DEPTH: usize = 64;
/// A `.pth` file is read whole to be checked, up to this much.
const MAX_PTH_BYTES: u64 = 1 << 20;
/// The mark of a sealed environment, under its `.gpuq/`.
const SEALED: &str = "sealed";
/// Links followed while resolving one path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// What sealing did: the result, and the builder's tree, retired, for its
/// owner to remove (`EnvCache::remover`).
#[derive(Debug)]
pub struct Seal {
    pub result: Result<(), String>,
    pub retired: Option<PathBuf>,
}

impl EnvCache {
    /// Makes the environment of `key`, just built, immutable (see the module's
    /// documentation), copying at most `max_bytes`. Done already (a restart
    /// between sealing and recording it): nothing to do.
    pub fn seal(&self, key: &str, now_ms: i64, max_bytes: u64) -> Seal {
        let done = |result| Seal {
            result,
            retired: None,
        };
        if self.is_sealed(key) {
            return done(Ok(()));
        }
        let seal_dir = self.root().join(".seal");
        if let Err(e) = private_dir(&seal_dir) {
            return done(Err(format!("{}: {e}", seal_dir.display())));
        }
        let staging = seal_dir.join(format!("{key}.{now_ms}"));
        let fresh = seal_dir.join(format!("{key}.{now_ms}.new"));
        // Out of the builder's reach by name: `.seal` is the daemon's, 0700.
        if let Err(e) = std::fs::rename(self.dir(key), &staging) {
            // Gone: a seal that a restart cut short moved it; the waiting jobs get a fresh build.
            return done(Err(if e.kind() == std::io::ErrorKind::NotFound {
                "the build was cut short (its directory is gone)".to_string()
            } else {
                format!("cannot move the build aside: {e}")
            }));
        }
        let result = copy_sealed(&staging, &fresh, &self.dir(key), max_bytes)
            .and_then(|()| std::fs::rename(&fresh, self.dir(key)).map_err(|e| e.to_string()));
        if result.is_err() {
            // Ours alone: nothing the builder can reach.
            let _ = std::fs::remove_dir_all(&fresh);
        }
        let trash = self.trash().join(format!("{key}.{now_ms}"));
        let retired = std::fs::rename(&staging, &trash).ok().map(|()| trash);
        Seal { result, retired }
    }

    /// The environment of `key` is a sealed one: its directory and its mark are
    /// the daemon's account's.
    pub fn is_sealed(&self, key: &str) -> bool {
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        crate::safe_fs::Dir::open(&self.dir(key))
            .and_then(|d| {
                if d.owner()? != me {
                    return Err(std::io::Error::other("not the daemon's"));
                }
                d.dir(".gpuq")?.open_regular(SEALED, Some(me))
            })
            .is_ok()
    }
}

/// The daemon's own directory, 0700: made, or checked and tightened.
fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(path)?;
    // SAFETY: geteuid cannot fail.
    if !meta.is_dir() || meta.uid() != unsafe { libc::geteuid() } {
        return Err(std::io::Error::other("not a directory of the daemon's"));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Copies the built tree `from` into the new directory `to`, whose contents
/// will live at `final_root`, at most `max_bytes` of files; then checks what
/// leaves the environment.
fn copy_sealed(from: &Path, to: &Path, final_root: &Path, max_bytes: u64) -> Result<(), String> {
    let src =
        open_dir_at(None, from.as_os_str()).map_err(|e| format!("{}: {e}", from.display()))?;
    let dst = make_dir_at(None, to.as_os_str()).map_err(|e| format!("{}: {e}", to.display()))?;
    let walk = Walk::new(final_root, to, max_bytes);
    walk.copy(&src, &dst, Path::new(""), 0)?;
    // Judged once the whole copy is there: a path may go through any link in it.
    for (rel, target, verb) in walk.leads.take() {
        walk.check_leads(&rel, &target, verb)?;
    }
    let gpuq = OsStr::new(".gpuq");
    let meta = open_dir_at(Some(&dst), gpuq)
        .or_else(|_| make_dir_at(Some(&dst), gpuq))
        .map_err(|e| format!(".gpuq: {e}"))?;
    create_at(&meta, OsStr::new(SEALED)).map_err(|e| format!(".gpuq/{SEALED}: {e}"))?;
    chmod(&meta, 0o755)?;
    walk.check_interpreter(&to.join("pyvenv.cfg"))?;
    chmod(&dst, 0o755)
}

struct Walk<'a> {
    final_root: &'a Path,
    /// The copy, which will live at `final_root`: where links are read.
    copy_root: &'a Path,
    /// Bytes of files the copy may still take.
    left: Cell<u64>,
    cap: u64,
    /// What leads out, to check once the copy is whole: where, to what, how.
    leads: RefCell<Vec<(PathBuf, PathBuf, &'static str)>>,
}

impl<'a> Walk<'a> {
    fn new(final_root: &'a Path, copy_root: &'a Path, cap: u64) -> Self {
        Walk {
            final_root,
            copy_root,
            left: Cell::new(cap),
            cap,
            leads: RefCell::new(Vec::new()),
        }
    }

    /// Takes `size` bytes off what the copy may still take.
    fn spend(&self, rel: &Path, size: u64) -> Result<(), String> {
        let left = self.left.get();
        if size > left {
            return Err(format!(
                "it holds more than envs.max_size ({} MiB) of files (at {}): raise [envs] max_size \
                 in gpuq.toml, or build a smaller environment",
                self.cap >> 20,
                rel.display()
            ));
        }
        self.left.set(left - size);
        Ok(())
    }

    fn copy(&self, src: &OwnedFd, dst: &OwnedFd, rel: &Path, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("{}: nested too deeply", rel.display()));
        }
        for name in names(src).map_err(|e| format!("{}: {e}", rel.display()))? {
            let here = rel.join(&name);
            let shown = || here.display().to_string();
            let st = stat_at(src, &name).map_err(|e| format!("{}: {e}", shown()))?;
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    let s =
                        open_dir_at(Some(src), &name).map_err(|e| format!("{}: {e}", shown()))?;
                    let d =
                        make_dir_at(Some(dst), &name).map_err(|e| format!("{}: {e}", shown()))?;
                    self.copy(&s, &d, &here, depth + 1)?;
                    chmod(&d, 0o755)?;
                }
                libc::S_IFREG => {
                    let s = open_file_at(src, &name).map_err(|e| format!("{}: {e}", shown()))?;
                    // As large as it is now: a writer left behind cannot make it grow.
                    let size = s.metadata().map_err(|e| format!("{}: {e}", shown()))?.len();
                    self.spend(&here, size)?;
                    let mut s = s.take(size);
                    let mut d = create_at(dst, &name).map_err(|e| format!("{}: {e}", shown()))?;
                    if name.as_bytes().ends_with(b".pth") {
                        // What is checked is what is written: read once.
                        let mut text = Vec::new();
                        (&mut s)
                            .take(MAX_PTH_BYTES)
                            .read_to_end(&mut text)
                            .and_then(|_| d.write_all(&text))
                            .map_err(|e| format!("{}: {e}", shown()))?;
                        self.check_pth(&here, &String::from_utf8_lossy(&text));
                    } else {
                        std::io::copy(&mut s, &mut d).map_err(|e| format!("{}: {e}", shown()))?;
                    }
                    let exec = st.st_mode & 0o111 != 0;
                    chmod_file(&d, if exec { 0o755 } else { 0o644 })?;
                }
                libc::S_IFLNK => {
                    let target = link_at(src, &name).map_err(|e| format!("{}: {e}", shown()))?;
                    self.leads.borrow_mut().push((
                        here.clone(),
                        PathBuf::from(&target),
                        "links to",
                    ));
                    symlink_at(dst, &name, &target).map_err(|e| format!("{}: {e}", shown()))?;
                }
                _ => {
                    return Err(format!(
                        "{} is a FIFO, a socket or a device: an environment holds none",
                        shown()
                    ))
                }
            }
        }
        Ok(())
    }

    /// `target`, written at `rel` (relative to the environment), leads inside
    /// the environment or to files only root can change.
    fn check_leads(&self, rel: &Path, target: &Path, verb: &str) -> Result<(), String> {
        let Some(resolved) = self.resolve(rel, target)? else {
            return Ok(());
        };
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        crate::safe_fs::check_trusted(&resolved, me).map_err(|why| {
            format!(
                "{} {verb} {}, which others than root can change ({why}); a lab-wide environment \
                 may only lead to files root owns: use a Python root installed (the system's \
                 python3, or `uv python install --install-dir /opt/python` as root) and packages \
                 from an index, not from a user's directory",
                rel.display(),
                target.display()
            )
        })
    }

    /// Where `target`, written at `rel`, finally leads, as the kernel will
    /// resolve it once the copy is in place: through the copy's own links
    /// (never as text: `h -> /home` then `h/me/lib` leads to /home/me/lib).
    /// `None`: inside the environment (or nowhere: nothing will appear in
    /// it). `Some(path)`: out of it, the rest to judge on the real filesystem.
    fn resolve(&self, rel: &Path, target: &Path) -> Result<Option<PathBuf>, String> {
        let parts = |p: &Path| -> Vec<OsString> {
            p.components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_os_string()),
                    Component::ParentDir => Some("..".into()),
                    _ => None,
                })
                .collect()
        };
        let mut at = if target.is_absolute() {
            PathBuf::from("/")
        } else {
            self.final_root
                .join(rel)
                .parent()
                .unwrap_or(self.final_root)
                .to_path_buf()
        };
        let mut todo: VecDeque<OsString> = parts(target).into();
        let mut links = 0;
        while let Some(part) = todo.pop_front() {
            if part == ".." {
                at.pop();
                continue;
            }
            let next = at.join(&part);
            let Ok(inside) = next.strip_prefix(self.final_root) else {
                if at.starts_with(self.final_root) || !self.final_root.starts_with(&next) {
                    // Out: the rest is the real filesystem's to resolve.
                    let mut out = next;
                    out.extend(todo);
                    return Ok(Some(out));
                }
                // Still on the way down to the environment.
                at = next;
                continue;
            };
            let copy = self.copy_root.join(inside);
            let Ok(meta) = std::fs::symlink_metadata(&copy) else {
                return Ok(None);
            };
            if meta.file_type().is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!("{}: too many levels of links", rel.display()));
                }
                let to =
                    std::fs::read_link(&copy).map_err(|e| format!("{}: {e}", rel.display()))?;
                if to.is_absolute() {
                    at = PathBuf::from("/");
                }
                for p in parts(&to).into_iter().rev() {
                    todo.push_front(p);
                }
                continue;
            }
            at = next;
        }
        Ok((!at.starts_with(self.final_root)).then_some(at))
    }

    /// A `.pth` file's path lines join `sys.path` (as `site` reads them:
    /// relative to its directory; `#` comments and `import` lines are not
    /// paths): they must lead to trusted places too (checked once the copy
    /// is whole).
    fn check_pth(&self, rel: &Path, text: &str) {
        for line in text.lines() {
            let line = line.trim_end();
            if line.is_empty()
                || line.starts_with('#')
                || line.starts_with("import ")
                || line.starts_with("import\t")
            {
                continue;
            }
            self.leads.borrow_mut().push((
                rel.to_path_buf(),
                PathBuf::from(line),
                "adds to sys.path",
            ));
        }
    }

    /// `home` in `pyvenv.cfg`: where the interpreter and its standard library are.
    fn check_interpreter(&self, cfg: &Path) -> Result<(), String> {
        let Ok(text) = std::fs::read_to_string(cfg) else {
            return Ok(());
        };
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == "home" {
                    self.check_leads(
                        Path::new("pyvenv.cfg"),
                        Path::new(v.trim()),
                        "names its interpreter in",
                    )?;
                }
            }
        }
        Ok(())
    }
}

fn cstr(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL byte in a name"))
}

fn check(rc: libc::c_int) -> std::io::Result<libc::c_int> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn dirfd(at: Option<&OwnedFd>) -> libc::c_int {
    at.map_or(libc::AT_FDCWD, |d| d.as_raw_fd())
}

fn open_dir_at(at: Option<&OwnedFd>, name: &OsStr) -> std::io::Result<OwnedFd> {
    let c = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid descriptor (or AT_FDCWD) and C string; the result is owned below.
    let fd = check(unsafe { libc::openat(dirfd(at), c.as_ptr(), flags) })?;
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new directory (it must not exist), 0700 until its contents are in.
fn make_dir_at(at: Option<&OwnedFd>, name: &OsStr) -> std::io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: a valid descriptor (or AT_FDCWD) and C string.
    check(unsafe { libc::mkdirat(dirfd(at), c.as_ptr(), 0o700) })?;
    open_dir_at(at, name)
}

fn open_file_at(at: &OwnedFd, name: &OsStr) -> std::io::Result<File> {
    let c = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: our descriptor and a valid C string.
    let fd = check(unsafe { libc::openat(at.as_raw_fd(), c.as_ptr(), flags) })?;
    // SAFETY: a fresh descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    // Swapped for something else since it was listed: refused.
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

fn create_at(at: &OwnedFd, name: &OsStr) -> std::io::Result<File> {
    let c = cstr(name)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: our descriptor and a valid C string.
    let fd =
        check(unsafe { libc::openat(at.as_raw_fd(), c.as_ptr(), flags, 0o600 as libc::c_uint) })?;
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn stat_at(at: &OwnedFd, name: &OsStr) -> std::io::Result<libc::stat> {
    let c = cstr(name)?;
    // SAFETY: our descriptor, a valid C string and a zeroed struct we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        check(libc::fstatat(
            at.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ))?;
        Ok(st)
    }
}

fn link_at(at: &OwnedFd, name: &OsStr) -> std::io::Result<OsString> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: our descriptor, a valid C string and a buffer of the length given.
    let n = unsafe {
        libc::readlinkat(
            at.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

fn symlink_at(at: &OwnedFd, name: &OsStr, target: &OsStr) -> std::io::Result<()> {
    let (c, t) = (cstr(name)?, cstr(target)?);
    // SAFETY: our descriptor and valid C strings.
    check(unsafe { libc::symlinkat(t.as_ptr(), at.as_raw_fd(), c.as_ptr()) }).map(drop)
}

fn chmod(dir: &OwnedFd, mode: libc::mode_t) -> Result<(), String> {
    // SAFETY: fchmod on a descriptor we own.
    check(unsafe { libc::fchmod(dir.as_raw_fd(), mode) })
        .map(drop)
        .map_err(|e| format!("chmod: {e}"))
}

fn chmod_file(file: &File, mode: libc::mode_t) -> Result<(), String> {
    // SAFETY: fchmod on a descriptor we own.
    check(unsafe { libc::fchmod(file.as_raw_fd(), mode) })
        .map(drop)
        .map_err(|e| format!("chmod: {e}"))
}

/// A directory's entries, by descriptor (a rename under us changes nothing).
fn names(dir: &OwnedFd) -> std::io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        out.push(e?.file_name());
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_sealed_copy_has_plain_modes_keeps_its_links_and_refuses_special_files() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("built");
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::write(from.join("sub/x.py"), "X = 1\n").unwrap();
        std::fs::write(from.join("run"), "#!/bin/sh\n").unwrap();
        std::fs::write(from.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(from.join("sub/a.pth"), "# comment\nimport os\nx\n").unwrap();
        for (p, m) in [("sub", 0o777), ("sub/x.py", 0o666), ("run", 0o4775)] {
            std::fs::set_permissions(from.join(p), std::fs::Permissions::from_mode(m)).unwrap();
        }
        symlink("sub/x.py", from.join("inside")).unwrap();
        symlink("/bin/sh", from.join("python")).unwrap();
        let to = dir.path().join("sealed");
        copy_sealed(&from, &to, &to, 1 << 20).unwrap();
        assert_eq!(mode(&to), 0o755);
        assert_eq!(mode(&to.join("sub")), 0o755);
        assert_eq!(mode(&to.join("sub/x.py")), 0o644);
        assert_eq!(mode(&to.join("run")), 0o755, "no setuid bit survives");
        assert_eq!(
            std::fs::read_to_string(to.join("inside")).unwrap(),
            "X = 1\n"
        );
        assert_eq!(
            std::fs::read_link(to.join("python")).unwrap(),
            Path::new("/bin/sh")
        );
        assert!(to.join(".gpuq").join(SEALED).is_file());

        // A FIFO has no place in an environment.
        let fifo = std::ffi::CString::new(from.join("sub/fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = copy_sealed(&from, &dir.path().join("again"), &to, 1 << 20).unwrap_err();
        assert!(e.contains("sub/fifo") && e.contains("FIFO"), "{e}");
    }

    #[test]
    fn a_path_leading_out_is_judged_where_it_finally_leads() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy");
        std::fs::create_dir_all(copy.join("lib/site")).unwrap();
        std::fs::create_dir_all(copy.join("bin")).unwrap();
        std::fs::write(copy.join("bin/python"), "").unwrap();
        // Out of the environment to a directory anyone may write.
        let open = dir.path().join("open");
        std::fs::create_dir_all(open.join("evil")).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        symlink("/", copy.join("lib/site/h")).unwrap();
        symlink("..", copy.join("lib/site/up")).unwrap();
        let walk = Walk::new(Path::new("/envs/k"), &copy, 0);
        walk.check_leads(Path::new("bin/python3"), Path::new("python"), "links to")
            .unwrap();
        walk.check_leads(
            Path::new("lib/site/a.pth"),
            Path::new("up/site"),
            "adds to sys.path",
        )
        .unwrap();
        // Root's own directory, through a link of the environment: fine.
        walk.check_leads(
            Path::new("lib/site/a.pth"),
            Path::new("h/usr"),
            "adds to sys.path",
        )
        .unwrap();
        // As text `h/...` stays inside; through the link it leads to `open`.
        let through = format!("h{}/evil", open.display());
        for target in [
            through.as_str(),
            "/envs/k/lib/site/h/../../nonexistent-gpuq-dir",
        ] {
            let e = walk
                .check_leads(
                    Path::new("lib/site/a.pth"),
                    Path::new(target),
                    "adds to sys.path",
                )
                .unwrap_err();
            assert!(e.contains("lib/site/a.pth adds to sys.path"), "{e}");
        }
        // Up out of the environment to a place that does not exist: nobody vouches for it.
        assert!(walk
            .check_leads(
                Path::new("lib/site/a.pth"),
                Path::new("../../../../nonexistent-gpuq-dir"),
                "adds to sys.path",
            )
            .is_err());
    }

    #[test]
    fn the_copy_takes_files_as_large_as_they_were_and_stops_at_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("built");
        std::fs::create_dir_all(&from).unwrap();
        std::fs::write(from.join("big"), vec![b'x'; 4096]).unwrap();
        let e = copy_sealed(
            &from,
            &dir.path().join("small"),
            &dir.path().join("small"),
            4095,
        )
        .unwrap_err();
        assert!(e.contains("envs.max_size") && e.contains("big"), "{e}");
        let to = dir.path().join("fits");
        copy_sealed(&from, &to, &to, 4096).unwrap();
        assert_eq!(std::fs::metadata(to.join("big")).unwrap().len(), 4096);
    }
}
