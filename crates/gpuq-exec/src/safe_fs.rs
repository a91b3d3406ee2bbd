//! Files a root process touches in directories a user may write, or whose path a
//! user may influence: opened relative to a directory descriptor, never through a
//! symlink, regular files only, reads bounded. A FIFO, a device or a link planted
//! by a user is refused, not followed.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn cstr(name: &std::ffi::OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL byte in a path"))
}

/// A single path component: no separator, not `.` or `..`.
fn component(name: &str) -> std::io::Result<CString> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ));
    }
    cstr(std::ffi::OsStr::new(name))
}

fn check(rc: libc::c_int) -> std::io::Result<libc::c_int> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// An open directory; every name below is resolved from it, one component at a time.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    /// Opens a directory by absolute or relative path. The last component is not
    /// followed if it is a symlink; earlier ones must be trusted by the caller (the
    /// daemon's home is checked at start-up).
    pub fn open(path: &Path) -> std::io::Result<Dir> {
        let c = cstr(path.as_os_str())?;
        // SAFETY: a valid C string; the returned descriptor is owned below.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// A subdirectory, not through a symlink.
    pub fn dir(&self, name: &str) -> std::io::Result<Dir> {
        let c = component(name)?;
        // SAFETY: our directory descriptor and a valid C string.
        let fd = check(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The uid that owns this directory.
    pub fn owner(&self) -> std::io::Result<u32> {
        // SAFETY: fstat on our descriptor into a zeroed struct we own.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            check(libc::fstat(self.fd.as_raw_fd(), &mut st))?;
            Ok(st.st_uid)
        }
    }

    fn open_at(&self, name: &str, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<File> {
        let c = component(name)?;
        // SAFETY: our directory descriptor and a valid C string.
        let fd = check(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Reads at most `max` bytes of a regular file. `owner`: the file must belong
    /// to that uid (a file another account linked in is not read).
    pub fn read_regular(
        &self,
        name: &str,
        max: u64,
        owner: Option<u32>,
    ) -> std::io::Result<Vec<u8>> {
        let file = self.open_regular(name, owner)?;
        let mut buf = Vec::new();
        file.take(max).read_to_end(&mut buf)?;
        Ok(buf)
    }

    /// Creates (mode 0600) or opens a regular file for writing, never through a link.
    pub fn create(&self, name: &str, append: bool) -> std::io::Result<File> {
        let flags = libc::O_WRONLY | libc::O_CREAT | if append { libc::O_APPEND } else { 0 };
        let file = self.open_at(name, flags, 0o600)?;
        if !file.metadata()?.file_type().is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{name} is not a regular file"),
            ));
        }
        Ok(file)
    }

    /// Writes `contents` to `name` through a new temporary file and a rename: a
    /// reader sees the old file or the whole new one, and a link planted at either
    /// name is replaced, never written through.
    pub fn write_atomically(&self, name: &str, contents: &[u8]) -> std::io::Result<()> {
        let tmp = format!("{name}.tmp");
        let _ = self.remove(&tmp);
        let mut file = self.open_at(&tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
        file.write_all(contents)?;
        self.rename(&tmp, name)
    }

    pub fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        let (a, b) = (component(from)?, component(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: our directory descriptor and valid C strings.
        check(unsafe { libc::renameat(fd, a.as_ptr(), fd, b.as_ptr()) }).map(drop)
    }

    /// Removes a file (a link itself, never its target).
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        let c = component(name)?;
        // SAFETY: our directory descriptor and a valid C string.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(drop)
    }

    /// The owner and group of this directory.
    pub fn owner_and_group(&self) -> std::io::Result<(u32, u32)> {
        // SAFETY: fstat on our descriptor into a zeroed struct we own.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            check(libc::fstat(self.fd.as_raw_fd(), &mut st))?;
            Ok((st.st_uid, st.st_gid))
        }
    }

    /// A subdirectory, made (with `mode`, then given to `owner`) when missing.
    pub fn dir_or_make(
        &self,
        name: &str,
        mode: libc::mode_t,
        owner: Option<(u32, u32)>,
    ) -> std::io::Result<Dir> {
        let c = component(name)?;
        // SAFETY: our directory descriptor and a valid C string.
        let made = unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode) } == 0;
        if !made {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        let dir = self.dir(name)?;
        if made {
            if let Some((uid, gid)) = owner {
                chown_fd(dir.fd.as_raw_fd(), uid, gid)?;
            }
        }
        Ok(dir)
    }

    /// Opens a regular file for reading (not a link, FIFO or device); with
    /// `owner`, only one that belongs to that uid (not a file another account linked in).
    pub fn open_regular(&self, name: &str, owner: Option<u32>) -> std::io::Result<File> {
        let file = self.open_at(name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let meta = file.metadata()?;
        use std::os::unix::fs::MetadataExt;
        if !meta.file_type().is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{name} is not a regular file"),
            ));
        }
        if owner.is_some_and(|uid| meta.uid() != uid) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{name} belongs to another account"),
            ));
        }
        Ok(file)
    }

    /// Creates a new file (it must not exist), mode 0600 given to `owner`.
    pub fn create_new(&self, name: &str, owner: Option<(u32, u32)>) -> std::io::Result<File> {
        let file = self.open_at(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
        if let Some((uid, gid)) = owner {
            chown_fd(file.as_raw_fd(), uid, gid)?;
        }
        Ok(file)
    }

    /// The entries of this directory: names with what they are and their size;
    /// links and special files are listed as `Other` and never followed.
    pub fn entries(&self) -> std::io::Result<Vec<Entry>> {
        // /proc/self/fd/N names this very directory (the kernel resolves it by
        // descriptor, not by path), so a rename under us changes nothing.
        let listing = std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))?;
        let mut out = Vec::new();
        for entry in listing {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let c = component(&name)?;
            // SAFETY: fstatat on our descriptor, not following a link, into a struct we own.
            let st = unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstatat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                ) != 0
                {
                    continue;
                }
                st
            };
            let kind = match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => EntryKind::File,
                libc::S_IFDIR => EntryKind::Dir,
                _ => EntryKind::Other,
            };
            out.push(Entry {
                name,
                kind,
                size: st.st_size.max(0) as u64,
                modified_ms: st.st_mtime * 1000 + st.st_mtime_nsec / 1_000_000,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes an entry; a directory with everything in it (at most `depth`
    /// levels), never following a link.
    pub fn remove_all(&self, name: &str, depth: usize) -> std::io::Result<()> {
        let c = component(name)?;
        match self.dir(name) {
            Ok(sub) => {
                if depth == 0 {
                    return Err(std::io::Error::other("too deeply nested to remove"));
                }
                for e in sub.entries()? {
                    sub.remove_all(&e.name, depth - 1)?;
                }
                // SAFETY: our directory descriptor and a valid C string.
                check(unsafe {
                    libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR)
                })
                .map(drop)
            }
            // Not a directory (a file, or a link, which O_NOFOLLOW refused): unlink it.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)) => {
                self.remove(name)
            }
            Err(e) => Err(e),
        }
    }
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: EntryKind,
    pub size: u64,
    /// Last modification, ms since the epoch (of the entry itself, never a link's target).
    pub modified_ms: i64,
}

/// Gives a file we opened to `uid`/`gid`; nothing to do when it is ours already.
fn chown_fd(fd: libc::c_int, uid: u32, gid: u32) -> std::io::Result<()> {
    // SAFETY: geteuid cannot fail.
    if uid == unsafe { libc::geteuid() } {
        return Ok(());
    }
    // SAFETY: fchown on a descriptor we own.
    check(unsafe { libc::fchown(fd, uid, gid) }).map(drop)
}

/// Reads at most `max` bytes of the regular file `path` with `account`'s rights
/// (a child that dropped to it reads it), giving up after `timeout`: what a root
/// daemon reads for a user is what that user could read, and a FIFO or a device
/// there cannot stall or flood it.
pub fn read_as(
    path: &Path,
    account: &crate::RunAs,
    max: u64,
    timeout: std::time::Duration,
) -> std::io::Result<Vec<u8>> {
    // `dd` with a byte count reads no more than asked, however long the file is.
    let mut cmd = std::process::Command::new("/bin/dd");
    cmd.arg(format!("if={}", path.display()))
        .arg("iflag=nofollow,nonblock,count_bytes")
        .arg(format!("count={max}"))
        .arg("status=none")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let meta_path = path.to_path_buf();
    let mut child = spawn_as(&mut cmd, account)?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let read = (&mut stdout).take(max).read_to_end(&mut out);
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        read.map(|_| (out, err))
    });
    let status = wait_for(child, timeout, || {
        format!(
            "{}: took longer than {timeout:?} to read",
            meta_path.display()
        )
    })?;
    let (out, err) = reader
        .join()
        .map_err(|_| std::io::Error::other("the reader thread panicked"))??;
    if !status.success() {
        let err = err.trim();
        let why = err.rsplit(": ").next().unwrap_or(err);
        return Err(std::io::Error::other(format!(
            "cannot read {}: {}",
            meta_path.display(),
            if why.is_empty() { "failed" } else { why }
        )));
    }
    Ok(out)
}

/// Whether `account` may enter `dir`, found out with that account's own rights
/// (a short-lived child drops to it, then `env --chdir` tries), so the answer says
/// nothing the account could not have seen itself. The `chdir` happens after the
/// exec, so a directory on a mount that never answers (a hung NFS or FUSE server)
/// costs the caller at most `ENTER_TIMEOUT`.
pub fn can_enter_as(dir: &Path, account: &crate::RunAs) -> std::io::Result<()> {
    let mut chdir = std::ffi::OsString::from("--chdir=");
    chdir.push(dir.as_os_str());
    let mut cmd = std::process::Command::new("/usr/bin/env");
    cmd.arg("-i")
        .arg(chdir)
        .arg("/bin/true")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = spawn_as(&mut cmd, account)?;
    let stderr = child.stderr.take();
    let status = wait_for(child, ENTER_TIMEOUT, || {
        format!("{} did not answer within {ENTER_TIMEOUT:?}", dir.display())
    })?;
    if status.success() {
        return Ok(());
    }
    let mut said = String::new();
    if let Some(mut err) = stderr {
        let _ = err.read_to_string(&mut said);
    }
    // env says "cannot change directory to 'D': <strerror>".
    let why = said.trim().rsplit(": ").next().unwrap_or("").to_string();
    Err(match why.as_str() {
        "Permission denied" => std::io::Error::from_raw_os_error(libc::EACCES),
        "No such file or directory" => std::io::Error::from_raw_os_error(libc::ENOENT),
        "Not a directory" => std::io::Error::from_raw_os_error(libc::ENOTDIR),
        _ => std::io::Error::other(if why.is_empty() {
            "cannot enter it".into()
        } else {
            why
        }),
    })
}

/// Spawns `cmd` as `account`: supplementary groups, gid, then uid, before the exec.
fn spawn_as(
    cmd: &mut std::process::Command,
    account: &crate::RunAs,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let (uid, gid, groups) = (account.uid, account.gid, account.groups.clone());
    // SAFETY: only async-signal-safe calls on data captured before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Waits for `child` at most `timeout`; past it the child is killed and reaped
/// on a thread of its own (it may be stuck in the kernel), and the error says `what`.
fn wait_for(
    mut child: std::process::Child,
    timeout: std::time::Duration,
    what: impl FnOnce() -> String,
) -> std::io::Result<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            std::thread::spawn(move || child.wait());
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, what()));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// How long `can_enter_as` waits for a directory to answer.
const ENTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Checks that no account but `uid` (or root) can change what `path` names: every
/// directory and link the path passes through as written, and every one it is
/// led to, belongs to `uid` or root, and none is writable by group or others,
/// except a sticky directory such as /tmp (where nobody can rename another's
/// entry). The same rule as OpenSSH's StrictModes, applied to the route as well
/// as to where it ends: a link in a labmate's directory would otherwise decide
/// where root reads and writes.
pub fn check_trusted(path: &Path, uid: u32) -> Result<(), String> {
    walk(path, uid, false).map(|_| ())
}

/// Makes the directory `path` and any missing above it, checking every
/// component as `check_trusted` does before using it and each new directory
/// after making it (a name someone else took first is refused, not entered).
/// For a root process given a path a user may influence (GPUQ_HOME). Returns
/// the path resolved.
pub fn make_trusted_dir(path: &Path, uid: u32) -> Result<PathBuf, String> {
    walk(path, uid, true)
}

/// Links followed in one walk before it is called a loop (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Resolves `path` one component at a time as the kernel would, checking each
/// directory and link on the way (`make`: creating missing directories).
fn walk(path: &Path, uid: u32, make: bool) -> Result<PathBuf, String> {
    use std::collections::VecDeque;
    use std::path::Component;
    let shown = path.display();
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("{shown}: {e}"))?
            .join(path)
    };
    let mut todo: VecDeque<std::ffi::OsString> = VecDeque::new();
    let push_parts = |p: &Path, todo: &mut VecDeque<std::ffi::OsString>| {
        let parts: Vec<_> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        for part in parts.into_iter().rev() {
            todo.push_front(part);
        }
    };
    push_parts(&absolute, &mut todo);
    let root = PathBuf::from("/");
    let meta = std::fs::symlink_metadata(&root).map_err(|e| format!("/: {e}"))?;
    check_entry(&root, &meta, uid, todo.is_empty())?;
    let mut at = root;
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            // `at` holds no link, so its parent is what `..` names.
            at.pop();
            continue;
        }
        let next = at.join(&part);
        let meta = match std::fs::symlink_metadata(&next) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && make => {
                match std::fs::create_dir(&next) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(format!("cannot create {}: {e}", next.display()))
                    }
                    _ => std::fs::symlink_metadata(&next),
                }
            }
            other => other,
        }
        .map_err(|e| format!("{}: {e}", next.display()))?;
        if meta.file_type().is_symlink() {
            use std::os::unix::fs::MetadataExt;
            if meta.uid() != uid && meta.uid() != 0 {
                return Err(format!(
                    "{} is a link that belongs to uid {}, not to root: whoever owns it decides where it \
                     leads; give the real path",
                    next.display(),
                    meta.uid()
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(format!("{shown}: too many levels of links"));
            }
            let target =
                std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            push_parts(&target, &mut todo);
            continue;
        }
        check_entry(&next, &meta, uid, todo.is_empty())?;
        at = next;
    }
    Ok(at)
}

/// One directory or file on a trusted route: `uid`'s or root's, and writable
/// by no one else (a sticky directory on the way is fine).
fn check_entry(p: &Path, meta: &std::fs::Metadata, uid: u32, last: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(format!(
            "{} belongs to uid {}, not to root: anyone who owns it could change what the daemon reads",
            p.display(),
            meta.uid()
        ));
    }
    let sticky = meta.mode() & 0o1000 != 0;
    if meta.mode() & 0o022 != 0 && !(meta.is_dir() && sticky && !last) {
        return Err(format!(
            "{} is writable by group or others (mode {:o}): `chmod go-w {}`",
            p.display(),
            meta.mode() & 0o7777,
            p.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_devices_are_refused_and_reads_are_bounded() {
        let t = tempfile::tempdir().unwrap();
        let secret = t.path().join("secret");
        std::fs::write(&secret, "root only").unwrap();
        std::os::unix::fs::symlink(&secret, t.path().join("link")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", t.path().join("zero")).unwrap();
        let fifo = cstr(t.path().join("fifo").as_os_str()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::write(t.path().join("big"), vec![b'x'; 10_000]).unwrap();
        let dir = Dir::open(t.path()).unwrap();

        let err = dir.read_regular("link", 100, None).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        assert!(dir.read_regular("zero", 100, None).is_err());
        let started = std::time::Instant::now();
        assert!(
            dir.read_regular("fifo", 100, None).is_err(),
            "a FIFO is not read"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "and not waited on"
        );
        assert_eq!(dir.read_regular("big", 100, None).unwrap().len(), 100);
        assert!(dir.read_regular("../secret", 100, None).is_err());
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        assert!(dir.read_regular("big", 10, Some(me + 1)).is_err());
        assert!(dir.read_regular("big", 10, Some(me)).is_ok());

        // Writing replaces a planted link instead of writing through it.
        dir.write_atomically("link", b"record").unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only");
        assert_eq!(
            std::fs::read_to_string(t.path().join("link")).unwrap(),
            "record"
        );
        std::os::unix::fs::symlink(&secret, t.path().join("out.tmp")).unwrap();
        dir.write_atomically("out", b"x").unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only");
        assert!(dir.create("zero", true).is_err());
        assert!(Dir::open(&t.path().join("link")).is_err());
    }

    #[test]
    fn every_link_on_the_way_is_checked_not_only_where_it_leads() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink("real/../real", &link).unwrap();
        // A link of one's own is followed, and what it leads to is checked.
        let made = make_trusted_dir(&link.join("home/sub"), me).unwrap();
        assert_eq!(made, real.join("home/sub"));
        assert!(real.join("home/sub").is_dir());
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = make_trusted_dir(&link.join("more"), me).unwrap_err();
        assert!(err.contains("writable by group or others"), "{err}");
        assert!(!real.join("more").exists());
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Another account's link decides where it leads: refused, nothing made.
        let (owner, checker) = if me == 0 { (4242, 0) } else { (me, me + 1) };
        if me == 0 {
            std::os::unix::fs::lchown(&link, Some(owner), None).unwrap();
        }
        let err = make_trusted_dir(&link.join("other"), checker).unwrap_err();
        assert!(err.contains("belongs to uid"), "{err}");
        assert!(!real.join("other").exists());
        assert!(check_trusted(&link.join("home"), checker).is_err());
    }

    #[test]
    fn a_path_others_can_change_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        let file = t.path().join("gpuq.toml");
        std::fs::write(&file, "").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            check_trusted(&file, me),
            Ok(()),
            "a tempdir under sticky /tmp is fine"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check_trusted(&file, me)
            .unwrap_err()
            .contains("writable by group or others"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            check_trusted(&file, me).is_err(),
            "a writable directory above"
        );
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        if me == 0 {
            assert!(
                check_trusted(&file, 4242).is_ok(),
                "root's files are trusted"
            );
        } else {
            assert!(check_trusted(&file, me + 1)
                .unwrap_err()
                .contains("belongs to uid"));
        }
    }
}
