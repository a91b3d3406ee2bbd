//! Real cgroups (as root, on a host with them): devices through the v1
//! controller and through the v2 program, the memory limit and its OOM
//! counter, and emptying a group whose processes left their process group.
//! Elsewhere these tests have nothing to act on and return at once.

use super::*;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Groups made for one test under this process's own groups, removed after.
/// `None` unless run as root on a host with v1 devices and a cgroup2 mount.
pub(super) struct Sandbox {
    pub(super) mounts: detect::Mounts,
}

impl Sandbox {
    pub(super) fn new(tag: &str) -> Option<Self> {
        // SAFETY: plain syscall.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let own = detect::mounts().ok()?;
        let name = format!("gpuq-unit-{tag}-{}", std::process::id());
        let mut mounts = detect::Mounts::default();
        for (c, p) in &own.v1 {
            let d = p.join(&name);
            std::fs::create_dir_all(&d).ok()?;
            v1::prepare_parent(c, &d).ok()?;
            mounts.v1.insert(c.clone(), d);
        }
        if let Some((p, _)) = &own.v2 {
            let d = p.join(&name);
            std::fs::create_dir_all(&d).ok()?;
            mounts.v2 = Some((d, format!("/{name}")));
        }
        (!mounts.v1.is_empty() && mounts.v1.contains_key("devices") && mounts.v2.is_some())
            .then_some(Self { mounts })
    }

    fn confinement(&self, devices: DeviceChoice) -> Confinement {
        let cfg = ConfinementConfig {
            devices,
            max_processes: 64,
            ..Default::default()
        };
        Confinement::from_mounts(&cfg, &self.mounts).expect("confinement")
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for d in self
            .mounts
            .v1
            .values()
            .chain(self.mounts.v2.iter().map(|(p, _)| p))
        {
            let _ = remove_tree(d);
        }
    }
}

/// Runs python code in the groups; its stdout.
fn run_in(groups: &JobGroups, code: &str) -> (Option<i32>, String) {
    let files = groups.procs_files();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", code]);
    // SAFETY: the test child only writes control files before its exec (the
    // supervisor itself opens them before the fork and only writes there).
    unsafe {
        cmd.pre_exec(move || {
            for f in &files {
                std::fs::write(f, "0")?;
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("python3 runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

fn open_errno(groups: &JobGroups, path: &Path) -> String {
    let code = format!(
        "import os\ntry:\n    os.close(os.open({:?}, os.O_RDWR))\n    print('opened')\nexcept OSError as e:\n    print(e.errno)\n",
        path.display().to_string()
    );
    run_in(groups, &code).1
}

fn nodes() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (name, minor) in [("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)] {
        let p = std::ffi::CString::new(tmp.path().join(name).to_str().unwrap()).unwrap();
        // SAFETY: mknod on a path we own.
        let rc =
            unsafe { libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(195, minor)) };
        assert_eq!(rc, 0, "mknod {name}");
    }
    tmp
}

#[test]
fn a_job_opens_its_gpu_and_not_another_through_either_device_path() {
    for via in [DeviceChoice::V1, DeviceChoice::Bpf] {
        let Some(sb) = Sandbox::new(&format!("{via:?}")) else {
            return;
        };
        let c = sb.confinement(via);
        assert!(c.confines_devices(), "{}", c.describe());
        let spec = GroupSpec {
            gpu_minors: vec![1],
            ..Default::default()
        };
        let g = c.create("job-7-1", &spec).unwrap().unwrap();
        let dev = nodes();
        let enxio = libc::ENXIO.to_string();
        let eperm = libc::EPERM.to_string();
        assert_eq!(
            open_errno(&g, &dev.path().join("nvidia1")),
            enxio,
            "{via:?}: own GPU"
        );
        assert_eq!(
            open_errno(&g, &dev.path().join("nvidia0")),
            eperm,
            "{via:?}: another GPU"
        );
        assert_eq!(
            open_errno(&g, &dev.path().join("nvidiactl")),
            enxio,
            "{via:?}: control node"
        );
        assert_eq!(
            open_errno(&g, Path::new("/dev/null")),
            "opened",
            "{via:?}: /dev/null"
        );
        g.kill_all(EMPTY_WITHIN).unwrap();
        g.remove().unwrap();
        // Without GPUs: not even the control node.
        let g = c.create("job-7-2", &GroupSpec::default()).unwrap().unwrap();
        assert_eq!(
            open_errno(&g, &dev.path().join("nvidiactl")),
            eperm,
            "{via:?}"
        );
        g.remove().unwrap();
    }
}

#[test]
fn processes_that_left_the_process_group_are_killed_and_the_group_removed() {
    let Some(sb) = Sandbox::new("kill") else {
        return;
    };
    let c = sb.confinement(DeviceChoice::V1);
    // Through cgroup.kill (v2), and through the v1 freezer alone.
    for name in ["job-8-1", "job-8-2"] {
        let mut g = c.create(name, &GroupSpec::default()).unwrap().unwrap();
        if name == "job-8-2" {
            let v2 = g.v2.take().unwrap();
            strays_killed(&g);
            remove_tree(&v2).unwrap();
        } else {
            strays_killed(&g);
        }
    }
}

fn strays_killed(g: &JobGroups) {
    let files = g.procs_files();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "setsid sleep 300 & (sleep 300 &) ; exit 0"]);
    // SAFETY: as in run_in.
    unsafe {
        cmd.pre_exec(move || {
            for f in &files {
                std::fs::write(f, "0")?;
            }
            Ok(())
        });
    }
    cmd.status().unwrap();
    assert_eq!(g.procs().len(), 2, "two stray sleeps");
    assert_eq!(g.signal(0), 2);
    // Signalled while frozen (no pid recycled between the read and the
    // signal), and thawed after.
    assert_eq!(g.signal_outside(0, 0), 2);
    if let Some(f) = g.v1.get("freezer") {
        let state = std::fs::read_to_string(f.join("freezer.state")).unwrap();
        assert_eq!(state.trim(), "THAWED");
    }
    if let Some(v2) = &g.v2 {
        let events = std::fs::read_to_string(v2.join("cgroup.events")).unwrap();
        assert!(events.lines().any(|l| l == "frozen 0"), "{events}");
    }
    g.kill_all(EMPTY_WITHIN).unwrap();
    assert!(g.procs().is_empty());
    g.remove().unwrap();
    assert!(g.dirs().iter().all(|d| !d.exists()));
}

#[test]
fn memory_past_the_limit_is_an_oom_kill_counted_by_the_group() {
    let Some(sb) = Sandbox::new("oom") else {
        return;
    };
    let c = sb.confinement(DeviceChoice::V1);
    let spec = GroupSpec {
        memory_mib: 64,
        ..Default::default()
    };
    let g = c.create("job-9-1", &spec).unwrap().unwrap();
    let (code, _) = run_in(
        &g,
        "b = bytearray(300 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n",
    );
    assert_eq!(code, None, "killed by a signal");
    let u = usage::read_usage(&g);
    assert!(u.oom_killed && !u.node_oom_killed, "{u:?}");
    assert_eq!(u.memory_limit_bytes, Some(64 << 20));
    assert!(u.memory_peak_bytes.unwrap() > 32 << 20, "{u:?}");
    assert!(u.cpu_seconds.is_some());
    g.remove().unwrap();
}

/// The jobs' common limit is reached because of a neighbour: the kernel kills
/// a process of a job that stayed well under its own limit. That job is not
/// blamed ("out of memory at its limit"): the kill is the node's.
#[test]
fn a_job_killed_because_all_jobs_together_ran_out_is_not_blamed() {
    let Some(sb) = Sandbox::new("neighbour") else {
        return;
    };
    let c = sb.confinement(DeviceChoice::V1);
    // All jobs together: 150 MiB. The hog has no limit of its own, the
    // victim a generous 1 GiB of which it uses 100 MiB.
    c.limit_all_jobs_memory(150).unwrap();
    let hog = c
        .create("job-10-1", &GroupSpec::default())
        .unwrap()
        .unwrap();
    let victim = c
        .create(
            "job-11-1",
            &GroupSpec {
                memory_mib: 1024,
                ..Default::default()
            },
        )
        .unwrap()
        .unwrap();
    // The kernel's choice is made certain: the victim scores highest, the hog
    // is never chosen (its 100 MiB then fit once the victim is gone).
    let files = victim.procs_files();
    let mut held = Command::new("python3");
    held.args([
        "-c",
        "import sys,time\nopen('/proc/self/oom_score_adj','w').write('1000')\nb = bytearray(100 << 20)\n\
         for i in range(0, len(b), 4096): b[i] = 1\nprint('held', flush=True)\ntime.sleep(60)\n",
    ]);
    held.stdout(std::process::Stdio::piped());
    // SAFETY: as in run_in.
    unsafe {
        held.pre_exec(move || {
            for f in &files {
                std::fs::write(f, "0")?;
            }
            Ok(())
        });
    }
    let mut held = held.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(held.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "held");
    let (code, _) = run_in(
        &hog,
        "open('/proc/self/oom_score_adj','w').write('-1000')\nb = bytearray(100 << 20)\n\
         for i in range(0, len(b), 4096): b[i] = 1\n",
    );
    assert_eq!(code, Some(0), "the hog fits once the victim is gone");
    let status = held.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the victim was OOM-killed"
    );
    let u = usage::read_usage(&victim);
    assert!(!u.oom_killed, "not at its own limit: {u:?}");
    assert!(u.node_oom_killed, "{u:?}");
    let u = usage::read_usage(&hog);
    assert!(!u.oom_killed && !u.node_oom_killed, "{u:?}");
    for g in [hog, victim] {
        g.kill_all(EMPTY_WITHIN).unwrap();
        g.remove().unwrap();
    }
}

/// A group of the same name left from an earlier life (a daemon killed with
/// -9 before it removed it) is never reused with its processes and limits.
#[test]
fn a_group_left_from_an_earlier_life_is_emptied_and_made_anew() {
    let Some(sb) = Sandbox::new("stale") else {
        return;
    };
    let c = sb.confinement(DeviceChoice::V1);
    let old = c
        .create(
            "job-12-1",
            &GroupSpec {
                memory_mib: 64,
                ..Default::default()
            },
        )
        .unwrap()
        .unwrap();
    let files = old.procs_files();
    let mut cmd = Command::new("sleep");
    cmd.arg("300");
    // SAFETY: as in run_in.
    unsafe {
        cmd.pre_exec(move || {
            for f in &files {
                std::fs::write(f, "0")?;
            }
            Ok(())
        });
    }
    let mut left = cmd.spawn().unwrap();
    assert_eq!(old.procs().len(), 1);
    let new = c
        .create(
            "job-12-1",
            &GroupSpec {
                memory_mib: 128,
                ..Default::default()
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(new.dirs(), old.dirs(), "the same name");
    assert!(new.procs().is_empty(), "nothing of the earlier life in it");
    let status = left.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    let limit = std::fs::read_to_string(new.v1["memory"].join("memory.limit_in_bytes")).unwrap();
    assert_eq!(limit.trim(), (128u64 << 20).to_string(), "its own limit");
    new.remove().unwrap();
}

#[test]
fn groups_are_named_by_job_and_attempt() {
    assert_eq!(group_name(12, 3), "job-12-3");
    assert_eq!(parse_group_name("job-12-3"), Some((12, 3)));
    assert_eq!(parse_group_name("daemon"), None);
}

#[test]
fn off_says_why() {
    let cfg = ConfinementConfig {
        mode: ConfineMode::Off,
        ..Default::default()
    };
    let c = Confinement::detect(&cfg).unwrap();
    assert!(!c.is_on());
    assert_eq!(c.describe(), "none: [confinement] mode = \"off\"");
    let none = Confinement::from_mounts(&ConfinementConfig::default(), &detect::Mounts::default())
        .unwrap();
    assert_eq!(none.describe(), "none: no cgroup filesystem is mounted");
}

#[test]
fn the_config_section_reads_and_refuses_a_bound_no_job_can_start_under() {
    let c: ConfinementConfig = serde_json::from_str(r#"{"devices": "bpf"}"#).unwrap();
    assert_eq!(
        (c.mode, c.devices, c.max_processes),
        (ConfineMode::Auto, DeviceChoice::Bpf, 4096)
    );
    assert!(c.check().is_ok());
    let few = ConfinementConfig {
        max_processes: 3,
        ..Default::default()
    };
    assert!(few
        .check()
        .unwrap_err()
        .starts_with("confinement.max_processes: 3"));
    assert!(serde_json::from_str::<ConfinementConfig>(r#"{"devices": "v3"}"#).is_err());
}
