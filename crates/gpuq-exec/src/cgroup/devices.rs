//! The devices a job may open: its own GPUs' nodes, the NVIDIA control nodes
//! every CUDA process needs, and the ordinary character devices. One list,
//! written as v1 `devices.allow` lines or compiled into the v2 program.

use super::bpf::{ACC_MKNOD, ACC_READ, ACC_WRITE};

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

/// The dynamic majors of NVIDIA's other nodes, from `/proc/devices`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverMajors {
    /// `nvidia-uvm` (its minor 0 is `nvidia-uvm`, 1 is `nvidia-uvm-tools`).
    pub uvm: Option<u32>,
    /// `nvidia-caps`: MIG's capability nodes.
    pub caps: Option<u32>,
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
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// What a job with GPUs of these minor numbers may open. A job without GPUs
/// gets no NVIDIA node at all.
pub fn allow_list(gpu_minors: &[u32], majors: &DriverMajors) -> Vec<DeviceRule> {
    let rw = ACC_READ | ACC_WRITE;
    let rwm = rw | ACC_MKNOD;
    let mut rules: Vec<DeviceRule> = [
        (1, Some(3)), // null
        (1, Some(5)), // zero
        (1, Some(7)), // full
        (1, Some(8)), // random
        (1, Some(9)), // urandom
        (5, Some(0)), // tty
        (5, Some(1)), // console
        (5, Some(2)), // ptmx
        (136, None),  // pts
    ]
    .into_iter()
    .map(|(major, minor)| DeviceRule::char(major, minor, rwm))
    .collect();
    if gpu_minors.is_empty() {
        return rules;
    }
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
        // MIG: a process opens the capability nodes of its instances; which
        // minors are whose is the driver's business, so the whole major (only
        // the GPUs' own nodes above decide which GPU is reached).
        rules.push(DeviceRule::char(caps, None, ACC_READ));
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_dynamic_majors() {
        let text = "Character devices:\n  1 mem\n195 nvidia\n508 nvidia-uvm\n509 nvidia-caps\n\nBlock devices:\n  7 loop\n";
        assert_eq!(
            DriverMajors::parse(text),
            DriverMajors {
                uvm: Some(508),
                caps: Some(509)
            }
        );
        assert_eq!(
            DriverMajors::parse("Character devices:\n  1 mem\n"),
            DriverMajors::default()
        );
    }

    #[test]
    fn a_job_gets_its_gpus_and_the_control_nodes_only() {
        let lines: Vec<String> = allow_list(
            &[1],
            &DriverMajors {
                uvm: Some(508),
                caps: None,
            },
        )
        .iter()
        .map(DeviceRule::v1_line)
        .collect();
        assert!(lines.contains(&"c 195:1 rw".to_string()));
        assert!(lines.contains(&"c 195:255 rw".to_string()));
        assert!(lines.contains(&"c 508:0 rw".to_string()));
        assert!(lines.contains(&"c 136:* rwm".to_string()));
        assert!(!lines.iter().any(|l| l.starts_with("c 195:0 ")));
        let none = allow_list(
            &[],
            &DriverMajors {
                uvm: Some(508),
                caps: Some(509),
            },
        );
        assert!(none
            .iter()
            .all(|r| r.major != NVIDIA_MAJOR && r.major != 508 && r.major != 509));
    }
}
