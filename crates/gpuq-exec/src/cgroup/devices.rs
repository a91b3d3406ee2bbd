//! The devices a job may open: its own GPUs' nodes, the NVIDIA control nodes
//! every CUDA process needs, and the ordinary character devices. One list,
//! written as v1 `devices.allow` lines or compiled into the v2 program.

use super::bpf::{ACC_MKNOD, ACC_READ, ACC_WRITE};
use std::path::Path;

/// `/dev/nvidiaN` is 195:N; `nvidiactl` 195:255; `nvidia-modeset` 195:254.
pub const NVIDIA_MAJOR: u32 = 195;
pub const NVIDIACTL_MINOR: u32 = 255;
pub const NVIDIA_MODESET_MINOR: u32 = 254;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Char,
    Block,
}

/// One allowed device (`minor: None`: every minor of the major).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRule {
    pub kind: DeviceKind,
    pub major: u32,
    pub minor: Option<u32>,
    /// `ACC_*` bits granted.
    pub access: u32,
}

impl DeviceRule {
    pub fn char(major: u32, minor: Option<u32>, access: u32) -> Self {
        Self {
            kind: DeviceKind::Char,
            major,
            minor,
            access,
        }
    }

    /// The rule as a v1 `devices.allow` line: `c 195:1 rw`.
    pub fn v1_line(&self) -> String {
        let kind = match self.kind {
            DeviceKind::Char => 'c',
            DeviceKind::Block => 'b',
        };
        let minor = self.minor.map_or("*".to_string(), |m| m.to_string());
        let mut access = String::new();
        for (bit, c) in [(ACC_READ, 'r'), (ACC_WRITE, 'w'), (ACC_MKNOD, 'm')] {
            if self.access & bit != 0 {
                access.push(c);
            }
        }
        format!("{kind} {}:{minor} {access}", self.major)
    }
}

/// InfiniBand's verbs and management nodes (`/dev/infiniband/uverbsN`,
/// `umadN`, `issmN`): a fixed major, every minor.
pub const INFINIBAND_MAJOR: u32 = 231;
/// The misc driver's major: `rdma_cm` and `fuse` are minors of it.
pub const MISC_MAJOR: u32 = 10;

/// The dynamic majors of NVIDIA's other nodes, from `/proc/devices`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverMajors {
    /// `nvidia-uvm` (its minor 0 is `nvidia-uvm`, 1 is `nvidia-uvm-tools`).
    pub uvm: Option<u32>,
    /// `nvidia-caps`: MIG's capability nodes.
    pub caps: Option<u32>,
    /// `nvidia-nvswitch`: the NVSwitch nodes of an HGX board.
    pub nvswitch: Option<u32>,
    /// `nvidia-caps-imex-channels`: IMEX channels (multi-node NVLink).
    pub imex: Option<u32>,
}

impl DriverMajors {
    /// Reads `/proc/devices` (absent entries: no such driver loaded).
    pub fn read() -> Self {
        Self::parse(&std::fs::read_to_string("/proc/devices").unwrap_or_default())
    }

    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        let mut chars = false;
        for line in text.lines() {
            match line.trim() {
                "Character devices:" => chars = true,
                "Block devices:" => chars = false,
                l if chars => {
                    let mut parts = l.split_whitespace();
                    let (Some(major), Some(name)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let Ok(major) = major.parse() else { continue };
                    match name {
                        "nvidia-uvm" => out.uvm = Some(major),
                        "nvidia-caps" => out.caps = Some(major),
                        "nvidia-nvswitch" => out.nvswitch = Some(major),
                        "nvidia-caps-imex-channels" => out.imex = Some(major),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// Where `nvidia-modprobe` is looked for (the driver package installs it
/// setuid root in one of these).
const NVIDIA_MODPROBE: &[&str] = &[
    "/usr/bin/nvidia-modprobe",
    "/usr/sbin/nvidia-modprobe",
    "/bin/nvidia-modprobe",
];

/// Loads `nvidia-uvm` and makes its nodes (`nvidia-modprobe -u -c=0`), for a
/// daemon whose GPUs come from the real driver: without persistenced the
/// module may not be loaded at boot, and a confined job's own libcuda then
/// cannot load it (no mknod, and no rule for a major that did not exist when
/// its group was made). Returns the line for the daemon's log.
pub fn load_uvm() -> String {
    if DriverMajors::read().uvm.is_some() {
        return "nvidia-uvm is loaded".into();
    }
    let Some(prog) = NVIDIA_MODPROBE.iter().find(|p| Path::new(p).is_file()) else {
        return "nvidia-uvm is not loaded and nvidia-modprobe was not found: CUDA jobs \
                under confinement will fail until it is (run nvidia-modprobe -u -c=0 or \
                start nvidia-persistenced)"
            .into();
    };
    let ran = std::process::Command::new(prog)
        .args(["-u", "-c=0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match (ran, DriverMajors::read().uvm) {
        (_, Some(major)) => format!("{prog} -u -c=0 loaded nvidia-uvm (major {major})"),
        (Ok(out), None) => format!(
            "{prog} -u -c=0 did not load nvidia-uvm ({}; {}): CUDA jobs under confinement \
             will fail until it is loaded",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        (Err(e), None) => format!("cannot run {prog}: {e}"),
    }
}

/// Minors of the misc driver (major 10) a training job uses, from `/proc/misc`
/// (`MINOR NAME` per line; absent: the module is not loaded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MiscMinors {
    /// `/dev/infiniband/rdma_cm`: RDMA connection manager (NCCL over IB, UCX).
    pub rdma_cm: Option<u32>,
    /// `/dev/fuse`: user-space filesystems (squashfuse, gcsfuse, s3fs).
    pub fuse: Option<u32>,
}

impl MiscMinors {
    pub fn read() -> Self {
        Self::parse(&std::fs::read_to_string("/proc/misc").unwrap_or_default())
    }

    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(minor), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(minor) = minor.parse() else { continue };
            match name {
                "rdma_cm" => out.rdma_cm = Some(minor),
                "fuse" => out.fuse = Some(minor),
                _ => {}
            }
        }
        out
    }
}

/// Which `nvidia-caps` minors belong to which GPU, from
/// `/proc/driver/nvidia-caps/mig-minors`: lines `gpuN/giX/access M` and
/// `gpuN/giX/ciY/access M` (N: the GPU's minor number), and the global
/// `config M` and `monitor M`, which no job is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigMinors {
    /// (GPU minor, cap minor).
    per_gpu: Vec<(u32, u32)>,
}

/// Where the driver lists the MIG capability minors.
pub const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";

impl MigMinors {
    /// The driver's table; none where MIG's caps do not exist (no caps then).
    pub fn read() -> Self {
        Self::parse(&std::fs::read_to_string(MIG_MINORS).unwrap_or_default())
    }

    pub fn parse(text: &str) -> Self {
        let per_gpu = text
            .lines()
            .filter_map(|line| {
                let (path, minor) = line.trim().rsplit_once(char::is_whitespace)?;
                let gpu = path.trim().strip_prefix("gpu")?.split('/').next()?;
                Some((gpu.parse().ok()?, minor.trim().parse().ok()?))
            })
            .collect();
        Self { per_gpu }
    }

    /// The cap minors of the GPUs with these minor numbers.
    pub fn of(&self, gpu_minors: &[u32]) -> Vec<u32> {
        self.per_gpu
            .iter()
            .filter(|(g, _)| gpu_minors.contains(g))
            .map(|&(_, m)| m)
            .collect()
    }
}

/// What the host's drivers say about the devices a job may need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostDevices {
    pub majors: DriverMajors,
    pub misc: MiscMinors,
    pub mig: MigMinors,
}

impl HostDevices {
    /// Read at each job's start: a driver loaded since the daemon started counts.
    pub fn read() -> Self {
        Self {
            majors: DriverMajors::read(),
            misc: MiscMinors::read(),
            mig: MigMinors::read(),
        }
    }
}

/// Why a `[confinement] allow_devices` entry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("confinement.allow_devices: \"{entry}\" is not a device rule ({why}); write \"c MAJOR:MINOR rw\" (c or b, MINOR or *, access r, w or rw)")]
pub struct BadDeviceRule {
    pub entry: String,
    pub why: &'static str,
}

/// Parses a site's own rule, in v1's `devices.allow` form: `c 10:200 rw`,
/// `c 243:* r`, `b 8:0 rw`. No `m`: a job makes no device nodes; no `a`: the
/// point is an allow-list.
pub fn parse_rule(entry: &str) -> Result<DeviceRule, BadDeviceRule> {
    let bad = |why| BadDeviceRule {
        entry: entry.to_string(),
        why,
    };
    let parts: Vec<&str> = entry.split_whitespace().collect();
    let [kind, numbers, access] = parts[..] else {
        return Err(bad("three fields expected: type, MAJOR:MINOR, access"));
    };
    let kind = match kind {
        "c" => DeviceKind::Char,
        "b" => DeviceKind::Block,
        _ => return Err(bad("the type is c (character) or b (block)")),
    };
    let (major, minor) = numbers
        .split_once(':')
        .ok_or_else(|| bad("MAJOR:MINOR expected"))?;
    let major: u32 = major
        .parse()
        .map_err(|_| bad("the major is a number (no * : one driver per rule)"))?;
    let minor = match minor {
        "*" => None,
        m => Some(m.parse().map_err(|_| bad("the minor is a number or *"))?),
    };
    let mut bits = 0;
    for c in access.chars() {
        bits |= match c {
            'r' => ACC_READ,
            'w' => ACC_WRITE,
            'm' => return Err(bad("m (mknod) is not granted: jobs make no device nodes")),
            _ => return Err(bad("the access is r, w or rw")),
        };
    }
    if major > i32::MAX as u32 || minor.is_some_and(|m| m > i32::MAX as u32) {
        return Err(bad("the number is out of range"));
    }
    Ok(DeviceRule {
        kind,
        major,
        minor,
        access: bits,
    })
}

/// What a job with GPUs of these minor numbers may open: the ordinary
/// devices, the HPC ones a training job uses (InfiniBand, rdma_cm, fuse) and
/// the site's own (`extra`), and only with GPUs the NVIDIA nodes: its GPUs',
/// the control nodes, and of MIG's caps only its GPUs'. A job without GPUs
/// gets no NVIDIA node at all. Read and write only: no rule grants mknod.
pub fn allow_list(gpu_minors: &[u32], host: &HostDevices, extra: &[DeviceRule]) -> Vec<DeviceRule> {
    let rw = ACC_READ | ACC_WRITE;
    let mut rules: Vec<DeviceRule> = [
        (1, Some(3)), // null
        (1, Some(5)), // zero
        (1, Some(7)), // full
        (1, Some(8)), // random
        (1, Some(9)), // urandom
        (5, Some(0)), // tty
        (5, Some(2)), // ptmx
        (136, None),  // pts
        // InfiniBand verbs (uverbsN), umad and issm: which HCA is not a
        // per-job resource here, as on Slurm without a gres for it.
        (INFINIBAND_MAJOR, None),
    ]
    .into_iter()
    .map(|(major, minor)| DeviceRule::char(major, minor, rw))
    .collect();
    for minor in [host.misc.rdma_cm, host.misc.fuse].into_iter().flatten() {
        rules.push(DeviceRule::char(MISC_MAJOR, Some(minor), rw));
    }
    rules.extend_from_slice(extra);
    if gpu_minors.is_empty() {
        return rules;
    }
    let majors = &host.majors;
    for &m in gpu_minors {
        rules.push(DeviceRule::char(NVIDIA_MAJOR, Some(m), rw));
    }
    rules.push(DeviceRule::char(NVIDIA_MAJOR, Some(NVIDIACTL_MINOR), rw));
    rules.push(DeviceRule::char(
        NVIDIA_MAJOR,
        Some(NVIDIA_MODESET_MINOR),
        rw,
    ));
    if let Some(uvm) = majors.uvm {
        rules.push(DeviceRule::char(uvm, Some(0), rw));
        rules.push(DeviceRule::char(uvm, Some(1), rw));
    }
    if let Some(caps) = majors.caps {
        // MIG: only the instances' caps of the job's own GPUs; config and
        // monitor (the admin's) are not given.
        for m in host.mig.of(gpu_minors) {
            rules.push(DeviceRule::char(caps, Some(m), ACC_READ));
        }
    }
    for major in [majors.nvswitch, majors.imex].into_iter().flatten() {
        rules.push(DeviceRule::char(major, None, rw));
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICES: &str = "Character devices:\n  1 mem\n195 nvidia\n231 infiniband_verbs\n508 nvidia-uvm\n509 nvidia-caps\n510 nvidia-nvswitch\n511 nvidia-caps-imex-channels\n\nBlock devices:\n  7 loop\n";
    const MISC: &str = "229 fuse\n 58 rdma_cm\n235 autofs\n  1 psaux\n";
    // Two GPUs (minors 0 and 1), each with one GPU instance and one compute
    // instance, as the driver lists them.
    const MIG: &str = "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\ngpu1/gi2/access 156\n";

    fn host() -> HostDevices {
        HostDevices {
            majors: DriverMajors::parse(DEVICES),
            misc: MiscMinors::parse(MISC),
            mig: MigMinors::parse(MIG),
        }
    }

    fn lines(rules: &[DeviceRule]) -> Vec<String> {
        rules.iter().map(DeviceRule::v1_line).collect()
    }

    #[test]
    fn reads_the_dynamic_majors_and_the_misc_minors() {
        assert_eq!(
            DriverMajors::parse(DEVICES),
            DriverMajors {
                uvm: Some(508),
                caps: Some(509),
                nvswitch: Some(510),
                imex: Some(511),
            }
        );
        assert_eq!(
            DriverMajors::parse("Character devices:\n  1 mem\n"),
            DriverMajors::default()
        );
        assert_eq!(
            MiscMinors::parse(MISC),
            MiscMinors {
                rdma_cm: Some(58),
                fuse: Some(229)
            }
        );
        assert_eq!(MiscMinors::parse("garbage\n"), MiscMinors::default());
    }

    #[test]
    fn mig_caps_are_those_of_the_jobs_gpus_only() {
        let mig = MigMinors::parse(MIG);
        assert_eq!(mig.of(&[0]), [12, 13]);
        assert_eq!(mig.of(&[1]), [147, 148, 156]);
        assert_eq!(mig.of(&[0, 1]).len(), 5);
        assert!(mig.of(&[2]).is_empty());
        // No table: no caps.
        assert!(MigMinors::parse("").of(&[0]).is_empty());
        let got = lines(&allow_list(&[1], &host(), &[]));
        for m in [147, 148, 156] {
            assert!(got.contains(&format!("c 509:{m} r")), "{got:?}");
        }
        for m in [1, 2, 12, 13] {
            assert!(!got.contains(&format!("c 509:{m} r")), "{m}: {got:?}");
        }
        assert!(!got.iter().any(|l| l.starts_with("c 509:*")), "{got:?}");
        let no_table = HostDevices {
            mig: MigMinors::default(),
            ..host()
        };
        assert!(!lines(&allow_list(&[1], &no_table, &[]))
            .iter()
            .any(|l| l.starts_with("c 509:")));
    }

    #[test]
    fn a_job_gets_its_gpus_the_control_nodes_and_the_hpc_devices() {
        let got = lines(&allow_list(&[1], &host(), &[]));
        for want in [
            "c 195:1 rw",
            "c 195:255 rw",
            "c 195:254 rw",
            "c 508:0 rw",
            "c 508:1 rw",
            "c 136:* rw",
            "c 231:* rw",
            "c 10:58 rw",
            "c 10:229 rw",
            "c 510:* rw",
            "c 511:* rw",
        ] {
            assert!(got.contains(&want.to_string()), "{want}: {got:?}");
        }
        assert!(!got.iter().any(|l| l.starts_with("c 195:0 ")));
        // No console, and no rule grants mknod.
        assert!(!got.iter().any(|l| l.starts_with("c 5:1 ")), "{got:?}");
        assert!(!got.iter().any(|l| l.ends_with('m')), "{got:?}");
        // A job without GPUs: InfiniBand and fuse, but no NVIDIA node.
        let none = allow_list(&[], &host(), &[]);
        assert!(lines(&none).contains(&"c 231:* rw".to_string()));
        assert!(none
            .iter()
            .all(|r| ![NVIDIA_MAJOR, 508, 509, 510, 511].contains(&r.major)));
    }

    #[test]
    fn a_sites_own_rules_are_parsed_and_added() {
        let r = parse_rule("c 10:200 rw").unwrap();
        assert_eq!(r, DeviceRule::char(10, Some(200), ACC_READ | ACC_WRITE));
        assert_eq!(
            parse_rule(" b  8:* r ").unwrap(),
            DeviceRule {
                kind: DeviceKind::Block,
                major: 8,
                minor: None,
                access: ACC_READ
            }
        );
        let got = lines(&allow_list(&[], &host(), &[r]));
        assert!(got.contains(&"c 10:200 rw".to_string()));
        for bad in [
            "c 10:200",
            "x 10:200 rw",
            "c 10 rw",
            "c *:1 rw",
            "c 10:x rw",
            "c 10:200 rwm",
            "c 10:200 q",
            "a",
            "",
            "c 99999999999:1 rw",
        ] {
            let e = parse_rule(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("confinement.allow_devices: ") && e.contains("c MAJOR:MINOR rw"),
                "{bad}: {e}"
            );
        }
    }
}
