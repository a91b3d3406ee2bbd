//! The cgroup v2 device filter: a `BPF_PROG_TYPE_CGROUP_DEVICE` program built
//! from raw instructions (no libbpf, no compiled object), loaded with `bpf(2)`
//! and attached to a job's group. The kernel runs it on every open or mknod of
//! a device node by a process of the group: it returns 1 (allow) for a device
//! on the allow-list and 0 (deny, `EPERM`) for any other.

use super::devices::{DeviceKind, DeviceRule};
use super::CgroupError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// One eBPF instruction, as the kernel reads it (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    /// dst_reg in the low nibble, src_reg in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// Opcodes (linux/bpf_common.h, linux/bpf.h).
const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const ALU64_AND_K: u8 = 0x57;
const ALU64_RSH_K: u8 = 0x77;
const ALU64_MOV_K: u8 = 0xb7;
const ALU64_MOV_X: u8 = 0xbf;
const JMP_JNE_K: u8 = 0x55;
const EXIT: u8 = 0x95;

// `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }`:
// access_type is the device type in the low 16 bits, the access in the high.
const CTX_ACCESS_TYPE: i16 = 0;
const CTX_MAJOR: i16 = 4;
const CTX_MINOR: i16 = 8;
/// `BPF_DEVCG_DEV_BLOCK` / `BPF_DEVCG_DEV_CHAR`.
const DEV_BLOCK: i32 = 1;
const DEV_CHAR: i32 = 2;
/// `BPF_DEVCG_ACC_MKNOD | READ | WRITE`.
pub const ACC_MKNOD: u32 = 1;
pub const ACC_READ: u32 = 2;
pub const ACC_WRITE: u32 = 4;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (dst & 0xf) | (src << 4),
        off,
        imm,
    }
}

/// The program for `rules`: everything else is denied.
///
/// Registers: r1 the context; r2 the device type; r3 the access bits; r4 the
/// major; r5 the minor; r6 scratch.
pub fn program(rules: &[DeviceRule]) -> Vec<Insn> {
    let mut p = vec![
        insn(LDX_MEM_W, 2, 1, CTX_ACCESS_TYPE, 0),
        insn(ALU64_MOV_X, 3, 2, 0, 0),
        insn(ALU64_AND_K, 2, 0, 0, 0xffff),
        insn(ALU64_RSH_K, 3, 0, 0, 16),
        insn(LDX_MEM_W, 4, 1, CTX_MAJOR, 0),
        insn(LDX_MEM_W, 5, 1, CTX_MINOR, 0),
    ];
    for rule in rules {
        // Each test jumps past the rest of this rule when it does not match.
        let mut body = vec![insn(
            JMP_JNE_K,
            2,
            0,
            0,
            match rule.kind {
                DeviceKind::Char => DEV_CHAR,
                DeviceKind::Block => DEV_BLOCK,
            },
        )];
        // Access asked beyond what the rule grants: not this rule.
        body.push(insn(ALU64_MOV_X, 6, 3, 0, 0));
        body.push(insn(ALU64_AND_K, 6, 0, 0, !(rule.access as i32)));
        body.push(insn(JMP_JNE_K, 6, 0, 0, 0));
        body.push(insn(JMP_JNE_K, 4, 0, 0, rule.major as i32));
        if let Some(minor) = rule.minor {
            body.push(insn(JMP_JNE_K, 5, 0, 0, minor as i32));
        }
        body.push(insn(ALU64_MOV_K, 0, 0, 0, 1));
        body.push(insn(EXIT, 0, 0, 0, 0));
        let len = body.len() as i16;
        for (at, i) in body.iter_mut().enumerate() {
            if i.code == JMP_JNE_K {
                // Offsets count from the next instruction: land on the next rule.
                i.off = len - at as i16 - 1;
            }
        }
        p.extend(body);
    }
    p.push(insn(ALU64_MOV_K, 0, 0, 0, 0));
    p.push(insn(EXIT, 0, 0, 0, 0));
    p
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
/// Other programs on the group or above it (a service manager's) stay and are
/// all run; each must allow.
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The `BPF_PROG_LOAD` part of `union bpf_attr` (up to expected_attach_type).
#[repr(C)]
#[derive(Default)]
struct LoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The `BPF_PROG_ATTACH` part of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> libc::c_long {
    // SAFETY: `attr` is a live, zero-padded repr(C) struct of the layout the
    // kernel expects for `cmd`, and its size is passed with it.
    unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    }
}

/// Loads the program (the kernel verifies it) and returns its descriptor.
pub fn load(prog: &[Insn]) -> Result<OwnedFd, CgroupError> {
    let license = c"GPL";
    let mut name = [0u8; 16];
    name[..10].copy_from_slice(b"gpuq_devcg");
    let mut attr = LoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: prog.len() as u32,
        insns: prog.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    let fd = sys_bpf(BPF_PROG_LOAD, &mut attr);
    if fd >= 0 {
        // SAFETY: a descriptor the kernel just returned to us.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    }
    let err = std::io::Error::last_os_error();
    // Load again with the verifier's log, for a reason worth reading.
    let mut log = vec![0u8; 16 * 1024];
    attr.log_level = 1;
    attr.log_size = log.len() as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    let _ = sys_bpf(BPF_PROG_LOAD, &mut attr);
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let verifier = String::from_utf8_lossy(&log[..end]).trim().to_string();
    Err(CgroupError::BpfLoad {
        source: err,
        verifier,
    })
}

/// Loads the filter for `rules` and attaches it to the cgroup2 group `group`.
/// The attachment holds the program: it lives as long as the group.
pub fn attach(group: &Path, rules: &[DeviceRule]) -> Result<(), CgroupError> {
    let prog = load(&program(rules))?;
    let dir = std::fs::File::open(group).map_err(|e| CgroupError::io(group, e))?;
    let mut attr = AttachAttr {
        target_fd: dir.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..Default::default()
    };
    if sys_bpf(BPF_PROG_ATTACH, &mut attr) != 0 {
        return Err(CgroupError::BpfAttach {
            path: group.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(p: &[Insn]) -> Vec<u8> {
        p.iter()
            .flat_map(|i| {
                let mut b = vec![i.code, i.regs];
                b.extend(i.off.to_le_bytes());
                b.extend(i.imm.to_le_bytes());
                b
            })
            .collect()
    }

    #[test]
    fn instructions_are_encoded_as_the_kernel_reads_them() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        // r2 = *(u32 *)(r1 + 0): code 0x61, dst 2, src 1.
        assert_eq!(
            bytes(&[insn(LDX_MEM_W, 2, 1, 0, 0)]),
            [0x61, 0x12, 0, 0, 0, 0, 0, 0]
        );
        // if r4 != 195 goto +3
        assert_eq!(
            bytes(&[insn(JMP_JNE_K, 4, 0, 3, 195)]),
            [0x55, 0x04, 3, 0, 195, 0, 0, 0]
        );
        assert_eq!(
            bytes(&[insn(EXIT, 0, 0, 0, 0)]),
            [0x95, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn an_empty_list_denies_everything_and_each_rule_jumps_to_the_next() {
        let p = program(&[]);
        assert_eq!(
            &p[p.len() - 2..],
            &[insn(ALU64_MOV_K, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]
        );
        let rules = [
            DeviceRule::char(195, Some(1), ACC_READ | ACC_WRITE),
            DeviceRule::char(136, None, ACC_READ | ACC_WRITE),
        ];
        let p = program(&rules);
        // Prologue 6, rule with minor 8, rule without 7, epilogue 2.
        assert_eq!(p.len(), 6 + 8 + 7 + 2);
        // Every jump of the first rule lands on the first instruction of the second.
        for (at, i) in p[6..14].iter().enumerate() {
            if i.code == JMP_JNE_K {
                assert_eq!(6 + at as i16 + 1 + i.off, 14, "jump at {at}");
            }
        }
        assert_eq!(p[6 + 4], insn(JMP_JNE_K, 4, 0, 3, 195));
        assert_eq!(p[6 + 5], insn(JMP_JNE_K, 5, 0, 2, 1));
    }

    /// Interprets the program as the kernel would, for a device access.
    fn run(p: &[Insn], kind: i32, access: u32, major: u32, minor: u32) -> u64 {
        let ctx = [kind as u32 | (access << 16), major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                LDX_MEM_W => r[dst] = ctx[(r[src] as usize + i.off as usize) / 4] as u64,
                ALU64_MOV_X => r[dst] = r[src],
                ALU64_MOV_K => r[dst] = i.imm as i64 as u64,
                ALU64_AND_K => r[dst] &= i.imm as i64 as u64,
                ALU64_RSH_K => r[dst] >>= i.imm,
                JMP_JNE_K => {
                    if r[dst] != i.imm as i64 as u64 {
                        pc = (pc as i64 + i.off as i64) as usize;
                    }
                }
                EXIT => return r[0],
                c => panic!("unknown opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn the_program_allows_exactly_the_listed_devices_and_accesses() {
        let rw = ACC_READ | ACC_WRITE;
        let rules = [
            DeviceRule::char(195, Some(1), rw),
            DeviceRule::char(195, Some(255), rw),
            DeviceRule::char(136, None, rw | ACC_MKNOD),
        ];
        let p = program(&rules);
        let char_ = DEV_CHAR;
        assert_eq!(run(&p, char_, ACC_READ, 195, 1), 1);
        assert_eq!(run(&p, char_, rw, 195, 255), 1);
        assert_eq!(run(&p, char_, rw, 195, 0), 0, "another GPU");
        assert_eq!(run(&p, char_, ACC_MKNOD, 195, 1), 0, "mknod not granted");
        assert_eq!(run(&p, char_, rw, 136, 7), 1, "any pts");
        assert_eq!(run(&p, DEV_BLOCK, rw, 195, 1), 0, "a block device");
        assert_eq!(run(&p, char_, rw, 1, 3), 0, "not listed");
    }

    #[test]
    fn the_default_list_compiled_allows_the_hpc_devices_and_only_the_jobs_mig_caps() {
        use crate::cgroup::devices::{
            allow_list, parse_rule, DriverMajors, HostDevices, MigMinors, MiscMinors,
        };
        let host = HostDevices {
            majors: DriverMajors::parse(
                "Character devices:\n195 nvidia\n508 nvidia-uvm\n509 nvidia-caps\n510 nvidia-nvswitch\n511 nvidia-caps-imex-channels\n",
            ),
            misc: MiscMinors::parse("229 fuse\n 58 rdma_cm\n"),
            mig: MigMinors::parse(
                "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\n",
            ),
        };
        let site = parse_rule("c 10:200 rw").unwrap();
        let p = program(&allow_list(&[1], &host, &[site]));
        let (c, rw, r) = (DEV_CHAR, ACC_READ | ACC_WRITE, ACC_READ);
        assert_eq!(run(&p, c, rw, 195, 1), 1, "its GPU");
        assert_eq!(run(&p, c, rw, 195, 0), 0, "another GPU");
        assert_eq!(run(&p, c, rw, 231, 0), 1, "uverbs0");
        assert_eq!(run(&p, c, rw, 231, 192), 1, "issm0");
        assert_eq!(run(&p, c, rw, 10, 58), 1, "rdma_cm");
        assert_eq!(run(&p, c, rw, 10, 229), 1, "fuse");
        assert_eq!(run(&p, c, rw, 10, 200), 1, "the site's own");
        assert_eq!(run(&p, c, rw, 10, 57), 0, "another misc device");
        assert_eq!(run(&p, c, rw, 510, 3), 1, "nvswitch");
        assert_eq!(run(&p, c, rw, 511, 0), 1, "imex channel");
        assert_eq!(run(&p, c, r, 509, 147), 1, "its GPU instance's cap");
        assert_eq!(run(&p, c, r, 509, 148), 1, "its compute instance's cap");
        assert_eq!(run(&p, c, r, 509, 12), 0, "GPU 0's cap");
        assert_eq!(run(&p, c, r, 509, 1), 0, "MIG config");
        assert_eq!(run(&p, c, r, 509, 2), 0, "MIG monitor");
        assert_eq!(run(&p, c, rw, 5, 1), 0, "console");
        assert_eq!(run(&p, c, rw, 5, 0), 1, "tty");
        assert_eq!(run(&p, c, ACC_MKNOD, 136, 3), 0, "mknod of a pts");
        assert_eq!(run(&p, c, ACC_MKNOD, 1, 3), 0, "mknod of null");
    }
}
