//! On a hybrid host (v1 controllers and a cgroup2 mount, as root) the default
//! `devices = "auto"` confines devices twice: the v1 rules, and the device
//! program on the job's cgroup2 group, so a process that moved itself out of
//! its v1 devices group is still held by the program. Elsewhere these tests
//! have nothing to act on and return at once.

use super::tests::Sandbox;
use super::*;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// errno of opening `path` (or "opened") from a process in the job's cgroup2
/// group only: outside its v1 devices group, as one that moved itself out.
fn open_in_v2_only(v2: &Path, path: &Path) -> String {
    let procs = v2.join("cgroup.procs");
    let code = format!(
        "import os\ntry:\n    os.close(os.open({:?}, os.O_RDWR))\n    print('opened')\nexcept OSError as e:\n    print(e.errno)\n",
        path.display().to_string()
    );
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &code]);
    // SAFETY: the child only writes one control file before its exec.
    unsafe {
        cmd.pre_exec(move || std::fs::write(&procs, "0"));
    }
    let out = cmd.output().expect("python3 runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn auto_on_a_hybrid_host_attaches_the_device_program_beside_the_v1_rules() {
    let Some(sb) = Sandbox::new("hybrid") else {
        return;
    };
    let cfg = ConfinementConfig {
        max_processes: 64,
        ..Default::default()
    };
    let c = Confinement::from_mounts(&cfg, &sb.mounts).expect("confinement");
    let described = c.describe();
    assert!(
        described.starts_with("cgroup v1 (devices") && described.contains("+ v2 device program"),
        "{described}"
    );
    let spec = GroupSpec {
        gpu_minors: vec![1],
        ..Default::default()
    };
    let g = c.create("job-9-1", &spec).unwrap().unwrap();
    // The v1 rules: no console, no mknod.
    let list = std::fs::read_to_string(g.v1["devices"].join("devices.list")).unwrap();
    assert!(list.contains("c 195:1 rw"), "{list}");
    assert!(list.contains("c 231:* rw"), "{list}");
    assert!(!list.contains("c 5:1 "), "{list}");
    assert!(!list.lines().any(|l| l.ends_with('m')), "{list}");
    // The program holds a process that is in the v2 group only.
    let dev = tempfile::tempdir().unwrap();
    for (name, minor) in [("nvidia0", 0), ("nvidia1", 1)] {
        let p = std::ffi::CString::new(dev.path().join(name).to_str().unwrap()).unwrap();
        // SAFETY: mknod on a path we own.
        let rc =
            unsafe { libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(195, minor)) };
        assert_eq!(rc, 0, "mknod {name}");
    }
    let v2 = g.v2.clone().unwrap();
    assert_eq!(
        open_in_v2_only(&v2, &dev.path().join("nvidia0")),
        libc::EPERM.to_string(),
        "another GPU, outside the v1 group"
    );
    assert_eq!(
        open_in_v2_only(&v2, &dev.path().join("nvidia1")),
        libc::ENXIO.to_string(),
        "its own GPU"
    );
    g.kill_all(EMPTY_WITHIN).unwrap();
    g.remove().unwrap();
    // Asked for v1 alone: no program.
    let only_v1 = ConfinementConfig {
        devices: DeviceChoice::V1,
        ..cfg
    };
    let c = Confinement::from_mounts(&only_v1, &sb.mounts).unwrap();
    assert!(!c.describe().contains("device program"), "{}", c.describe());
}
