//! A stand-in for NVIDIA's `libnvidia-ml.so`, so tests can run the real
//! `nvml-wrapper` code path without a GPU.
//!
//! Every exported function re-reads the JSON file named by
//! `GPUQ_NVML_STAND_IN_STATE`, so a test can change values while a process
//! runs. Only the functions gpuq uses are exported; nvml-wrapper resolves the
//! others lazily and reports `FailedToLoadSymbol` only if one is called.
//! Signatures and layouts follow nvml-wrapper-sys 0.10 (checked by a test).

// Exported names must be NVML's exact C names. The safety contract of every
// exported function is NVML's C API (valid pointers or null, which we reject).
#![allow(non_snake_case, clippy::missing_safety_doc)]

use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint, c_ulonglong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Environment variable naming the JSON state file.
pub const STATE_ENV: &str = "GPUQ_NVML_STAND_IN_STATE";

type Ret = c_uint;
type Device = *mut c_void;
type EventSet = *mut c_void;

const SUCCESS: Ret = 0;
const ERR_UNINITIALIZED: Ret = 1;
const ERR_INVALID_ARGUMENT: Ret = 2;
const ERR_INSUFFICIENT_SIZE: Ret = 7;
const ERR_DRIVER_NOT_LOADED: Ret = 9;
const ERR_TIMEOUT: Ret = 10;
const ERR_GPU_IS_LOST: Ret = 15;
const ERR_ARGUMENT_VERSION_MISMATCH: Ret = 25;
const ERR_UNKNOWN: Ret = 999;

const EVENT_XID_CRITICAL: c_ulonglong = 8;
/// What real NVML reports for "no MIG instance" ids.
const NO_ID: c_uint = 0xFFFF_FFFF;
/// `NVML_STRUCT_VERSION(Memory, 2)`: size | 2 << 24.
const MEMORY_V2_VERSION: c_uint = 40 | 2 << 24;

#[derive(Deserialize)]
struct State {
    #[serde(default = "default_driver_version")]
    driver_version: String,
    /// As NVML gives it: 1000 × major + 10 × minor.
    #[serde(default = "default_cuda_version")]
    cuda_driver_version: i32,
    #[serde(default)]
    devices: Vec<Dev>,
}

fn default_cuda_version() -> i32 {
    12040
}

fn default_driver_version() -> String {
    "550.54.15".into()
}

// Non-zero serde defaults without one function per field.
fn n32<const N: u32>() -> u32 {
    N
}
fn n64<const N: u64>() -> u64 {
    N
}

/// One device of the state file; only `uuid` and `name` are required.
#[derive(Deserialize)]
struct Dev {
    uuid: String,
    name: String,
    #[serde(default)]
    bus_id: Option<String>,
    /// The device's minor number (`/dev/nvidiaN`); default: its index.
    #[serde(default)]
    minor: Option<u32>,
    #[serde(default = "n64::<85899345920>")]
    memory_total: u64,
    #[serde(default)]
    memory_used: u64,
    #[serde(default)]
    gpu_util: u32,
    #[serde(default)]
    mem_util: u32,
    #[serde(default = "n32::<40>")]
    temperature: u32,
    #[serde(default = "n32::<60000>")]
    power_mw: u32,
    #[serde(default = "n32::<1410>")]
    sm_clock_mhz: u32,
    #[serde(default)]
    energy_mj: u64,
    #[serde(default)]
    ecc_uncorrected_volatile: u64,
    #[serde(default)]
    lost: bool,
    #[serde(default)]
    processes: Vec<Process>,
    #[serde(default)]
    xid_events: Vec<u64>,
}

#[derive(Deserialize)]
struct Process {
    pid: u32,
    used_memory: u64,
}

// C structs, laid out as in nvml-wrapper-sys 0.10 (see the layout test).
#[repr(C)]
pub struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
pub struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

#[repr(C)]
pub struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
pub struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

#[repr(C)]
pub struct EventData {
    device: Device,
    event_type: c_ulonglong,
    event_data: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// Event sets (id → registered device indices) and delivered-XID counts live
/// for the whole process, like the driver's. Counts are keyed by UUID so a
/// rewritten state file does not replay events already delivered.
struct Registry {
    next_set: usize,
    sets: BTreeMap<usize, Vec<usize>>,
    delivered: BTreeMap<String, usize>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next_set: 1,
    sets: BTreeMap::new(),
    delivered: BTreeMap::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn load() -> Option<State> {
    let text = std::fs::read(std::env::var_os(STATE_ENV)?).ok()?;
    serde_json::from_slice(&text).ok()
}

fn state() -> Result<State, Ret> {
    load().ok_or(ERR_UNINITIALIZED)
}

/// Runs `f`, turning a panic into NVML_ERROR_UNKNOWN: unwinding out of an
/// `extern "C"` function would abort the calling process.
fn guard(f: impl FnOnce() -> Result<(), Ret>) -> Ret {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => ERR_UNKNOWN,
    }
}

/// Handles are `index + 1` cast to a pointer: non-null, and no state to free.
fn handle(index: usize) -> Device {
    (index + 1) as Device
}

/// The device behind a handle, with its index; a lost device answers nothing.
fn dev(device: Device) -> Result<(usize, Dev), Ret> {
    let index = (device as usize)
        .checked_sub(1)
        .ok_or(ERR_INVALID_ARGUMENT)?;
    let dev = state()?.devices.into_iter().nth(index);
    match dev.ok_or(ERR_INVALID_ARGUMENT)? {
        d if d.lost => Err(ERR_GPU_IS_LOST),
        d => Ok((index, d)),
    }
}

unsafe fn out<T>(ptr: *mut T, value: T) -> Result<(), Ret> {
    if ptr.is_null() {
        return Err(ERR_INVALID_ARGUMENT);
    }
    ptr.write(value);
    Ok(())
}

/// Copies `s` NUL-terminated into a caller buffer of `len` bytes.
unsafe fn out_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(ERR_INVALID_ARGUMENT);
    }
    if s.len() >= len as usize {
        return Err(ERR_INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
    buf.add(s.len()).write(0);
    Ok(())
}

/// `s` as a NUL-terminated C array, truncated to fit.
fn c_array<const N: usize>(s: &str) -> [c_char; N] {
    let mut array = [0; N];
    for (dst, b) in array.iter_mut().zip(s.bytes().take(N.saturating_sub(1))) {
        *dst = b as c_char;
    }
    array
}

fn pci_info(index: usize, d: &Dev) -> PciInfo {
    let default = || format!("00000000:{:02X}:00.0", index + 1);
    let id = d.bus_id.clone().unwrap_or_else(default);
    // "DDDDDDDD:BB:DD.F", hexadecimal; the legacy form has a 4-digit domain.
    let mut parts = id
        .split([':', '.'])
        .map(|p| u32::from_str_radix(p, 16).unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    let (domain, bus, device, function) = (next(), next(), next(), next());
    let legacy = format!("{:04X}:{bus:02X}:{device:02X}.{function}", domain & 0xFFFF);
    PciInfo {
        bus_id_legacy: c_array(&legacy),
        domain,
        bus,
        device,
        pci_device_id: 0,
        pci_sub_system_id: 0,
        bus_id: c_array(&id),
    }
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> Ret {
    guard(|| load().map(drop).ok_or(ERR_DRIVER_NOT_LOADED))
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Ret {
    nvmlInit_v2()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> Ret {
    guard(|| state().map(drop))
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    let s = match result {
        SUCCESS => c"Success",
        ERR_UNINITIALIZED => c"Uninitialized",
        ERR_INVALID_ARGUMENT => c"Invalid Argument",
        ERR_INSUFFICIENT_SIZE => c"Insufficient Size",
        ERR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        ERR_TIMEOUT => c"Timeout",
        ERR_GPU_IS_LOST => c"GPU is lost",
        ERR_ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(buf: *mut c_char, len: c_uint) -> Ret {
    guard(|| out_str(buf, len, &state()?.driver_version))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut std::ffi::c_int) -> Ret {
    guard(|| out(version, state()?.cuda_driver_version))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Ret {
    guard(|| out(count, state()?.devices.len() as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Device) -> Ret {
    guard(|| match state()?.devices.len() > index as usize {
        true => out(device, handle(index as usize)),
        false => Err(ERR_INVALID_ARGUMENT),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: Device, buf: *mut c_char, len: c_uint) -> Ret {
    guard(|| out_str(buf, len, &dev(device)?.1.uuid))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: Device, buf: *mut c_char, len: c_uint) -> Ret {
    guard(|| out_str(buf, len, &dev(device)?.1.name))
}

/// Exports `fn name(device, extra args…, *mut T) -> nvmlReturn_t`, the shape
/// of most NVML getters; `$e` sees the `(index, Dev)` pattern and yields a
/// `Result<T, Ret>`.
macro_rules! device_getters {
    ($($name:ident($($arg:ident: $at:ty),*) -> $t:ty = |$p:pat_param| $e:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(device: Device, $($arg: $at,)* value: *mut $t) -> Ret {
            guard(|| {
                let $p = dev(device)?;
                let result: Result<$t, Ret> = $e;
                out(value, result?)
            })
        }
    )*};
}

device_getters! {
    nvmlDeviceGetIndex() -> c_uint = |(i, _)| Ok(i as c_uint);
    nvmlDeviceGetMinorNumber() -> c_uint = |(i, d)| Ok(d.minor.unwrap_or(i as c_uint));
    nvmlDeviceGetPciInfo_v3() -> PciInfo = |(i, d)| Ok(pci_info(i, &d));
    nvmlDeviceGetMemoryInfo() -> Memory = |(_, d)| Ok(Memory {
        total: d.memory_total,
        free: d.memory_total.saturating_sub(d.memory_used),
        used: d.memory_used,
    });
    nvmlDeviceGetUtilizationRates() -> Utilization =
        |(_, d)| Ok(Utilization { gpu: d.gpu_util, memory: d.mem_util });
    // NVML_TEMPERATURE_GPU (0) is the only sensor NVML defines.
    nvmlDeviceGetTemperature(sensor: c_uint) -> c_uint = |(_, d)| match sensor {
        0 => Ok(d.temperature),
        _ => Err(ERR_INVALID_ARGUMENT),
    };
    nvmlDeviceGetPowerUsage() -> c_uint = |(_, d)| Ok(d.power_mw);
    // GRAPHICS(0) and SM(1) run together; MEM(2) and VIDEO(3) get A100-like constants.
    nvmlDeviceGetClockInfo(kind: c_uint) -> c_uint = |(_, d)| match kind {
        0 | 1 => Ok(d.sm_clock_mhz),
        2 => Ok(1593),
        3 => Ok(1275),
        _ => Err(ERR_INVALID_ARGUMENT),
    };
    nvmlDeviceGetTotalEnergyConsumption() -> c_ulonglong = |(_, d)| Ok(d.energy_mj);
    // Only uncorrected(1) + volatile(0) is modelled; the other counters read 0.
    nvmlDeviceGetTotalEccErrors(error: c_uint, counter: c_uint) -> c_ulonglong =
        |(_, d)| match (error, counter) {
            (1, 0) => Ok(d.ecc_uncorrected_volatile),
            (0..=1, 0..=1) => Ok(0),
            _ => Err(ERR_INVALID_ARGUMENT),
        };
    nvmlDeviceGetSupportedEventTypes() -> c_ulonglong = |_| Ok(EVENT_XID_CRITICAL);
    // Devices sit in groups of four by index (as on one NVLink board):
    // NVML_TOPOLOGY_INTERNAL (0) same device, SINGLE (10) same group, else SYSTEM (50).
    nvmlDeviceGetTopologyCommonAncestor(other: Device) -> c_uint = |(a, _)| {
        let b = dev(other)?.0;
        Ok(if a == b { 0 } else if a / 4 == b / 4 { 10 } else { 50 })
    };
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: Device, memory: *mut MemoryV2) -> Ret {
    guard(|| {
        let d = dev(device)?.1;
        if memory.is_null() {
            return Err(ERR_INVALID_ARGUMENT);
        }
        // Real NVML rejects a caller that did not set the struct version.
        if (*memory).version != MEMORY_V2_VERSION {
            return Err(ERR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = (d.memory_total, d.memory_used);
        let free = total.saturating_sub(used);
        let version = MEMORY_V2_VERSION;
        out(
            memory,
            MemoryV2 {
                version,
                total,
                reserved: 0,
                free,
                used,
            },
        )
    })
}

/// Two-call protocol: a buffer too small (first call: count 0, null buffer)
/// gets the needed count and NVML_ERROR_INSUFFICIENT_SIZE; success with
/// count 0 means "no processes".
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: Device,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> Ret {
    guard(|| {
        let procs = dev(device)?.1.processes;
        if count.is_null() {
            return Err(ERR_INVALID_ARGUMENT);
        }
        let capacity = *count as usize;
        *count = procs.len() as c_uint;
        if capacity < procs.len() {
            return Err(ERR_INSUFFICIENT_SIZE);
        }
        if infos.is_null() && !procs.is_empty() {
            return Err(ERR_INVALID_ARGUMENT);
        }
        for (i, p) in procs.iter().enumerate() {
            infos.add(i).write(ProcessInfo {
                pid: p.pid,
                used_gpu_memory: p.used_memory,
                gpu_instance_id: NO_ID,
                compute_instance_id: NO_ID,
            });
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut EventSet) -> Ret {
    guard(|| {
        state()?;
        if set.is_null() {
            return Err(ERR_INVALID_ARGUMENT);
        }
        let mut reg = registry();
        let id = reg.next_set;
        reg.next_set += 1;
        reg.sets.insert(id, Vec::new());
        out(set, id as EventSet)
    })
}

/// Only the XID bit is recorded; other requested types are accepted but
/// never fire (gpuq only waits for XIDs).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: Device,
    types: c_ulonglong,
    set: EventSet,
) -> Ret {
    guard(|| {
        let index = dev(device)?.0;
        let mut reg = registry();
        let devices = reg.sets.get_mut(&(set as usize));
        let devices = devices.ok_or(ERR_INVALID_ARGUMENT)?;
        if types & EVENT_XID_CRITICAL != 0 && !devices.contains(&index) {
            devices.push(index);
        }
        Ok(())
    })
}

/// Delivers the next undelivered XID of any registered device, re-reading
/// the state file every 10 ms until `timeout_ms` runs out.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: EventSet,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> Ret {
    guard(|| {
        if data.is_null() {
            return Err(ERR_INVALID_ARGUMENT);
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
        loop {
            let devices = state()?.devices;
            let mut reg = registry();
            let registered = reg.sets.get(&(set as usize)).cloned();
            for index in registered.ok_or(ERR_INVALID_ARGUMENT)? {
                let Some(d) = devices.get(index) else {
                    continue;
                };
                let delivered = reg.delivered.entry(d.uuid.clone()).or_default();
                if let Some(&xid) = d.xid_events.get(*delivered) {
                    *delivered += 1;
                    return out(
                        data,
                        EventData {
                            device: handle(index),
                            event_type: EVENT_XID_CRITICAL,
                            event_data: xid,
                            gpu_instance_id: NO_ID,
                            compute_instance_id: NO_ID,
                        },
                    );
                }
            }
            drop(reg); // not held while sleeping
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ERR_TIMEOUT);
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: EventSet) -> Ret {
    guard(|| {
        state()?;
        let removed = registry().sets.remove(&(set as usize));
        removed.map(drop).ok_or(ERR_INVALID_ARGUMENT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper_sys::bindings as sys;
    use serde_json::json;
    use std::ffi::CStr;
    use std::mem::{align_of, offset_of, size_of, zeroed};
    use std::ptr::null_mut;

    macro_rules! same_layout {
        ($ours:ty, $theirs:ty, $(($a:ident, $b:ident)),+) => {
            assert_eq!(size_of::<$ours>(), size_of::<$theirs>(), stringify!($theirs));
            assert_eq!(align_of::<$ours>(), align_of::<$theirs>(), stringify!($theirs));
            $(assert_eq!(offset_of!($ours, $a), offset_of!($theirs, $b), stringify!($b));)+
        };
    }

    #[test]
    #[rustfmt::skip]
    fn structs_match_nvml_wrapper_sys() {
        same_layout!(MemoryV2, sys::nvmlMemory_v2_t,
            (version, version), (total, total), (reserved, reserved), (free, free), (used, used));
        same_layout!(Memory, sys::nvmlMemory_t, (total, total), (free, free), (used, used));
        same_layout!(ProcessInfo, sys::nvmlProcessInfo_t, (pid, pid),
            (used_gpu_memory, usedGpuMemory), (gpu_instance_id, gpuInstanceId),
            (compute_instance_id, computeInstanceId));
        same_layout!(PciInfo, sys::nvmlPciInfo_t, (bus_id_legacy, busIdLegacy), (domain, domain),
            (bus, bus), (device, device), (pci_device_id, pciDeviceId),
            (pci_sub_system_id, pciSubSystemId), (bus_id, busId));
        same_layout!(Utilization, sys::nvmlUtilization_t, (gpu, gpu), (memory, memory));
        same_layout!(EventData, sys::nvmlEventData_t, (device, device), (event_type, eventType),
            (event_data, eventData), (gpu_instance_id, gpuInstanceId),
            (compute_instance_id, computeInstanceId));
        assert_eq!(size_of::<MemoryV2>() as c_uint, MEMORY_V2_VERSION & 0xFF_FFFF);
    }

    /// The state file is named by a process-wide env var: one test at a time.
    static ENV_LOCK: Mutex<()> = Mutex::new(());

    fn with_state(json: serde_json::Value) -> (MutexGuard<'static, ()>, tempfile::NamedTempFile) {
        let lock = ENV_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), json.to_string()).unwrap();
        std::env::set_var(STATE_ENV, file.path());
        (lock, file)
    }

    unsafe fn handle_of(index: c_uint) -> Device {
        let mut h = null_mut();
        assert_eq!(nvmlDeviceGetHandleByIndex_v2(index, &mut h), SUCCESS);
        h
    }

    #[test]
    fn missing_or_invalid_state_means_no_driver() {
        let (_lock, file) = with_state(json!({}));
        let mut count = 7;
        unsafe {
            assert_eq!(nvmlInit_v2(), SUCCESS);
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), SUCCESS);
            assert_eq!(count, 0);
            std::fs::write(file.path(), "not json").unwrap();
            assert_eq!(nvmlInit_v2(), ERR_DRIVER_NOT_LOADED);
            std::env::remove_var(STATE_ENV);
            assert_eq!(nvmlInit_v2(), ERR_DRIVER_NOT_LOADED);
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), ERR_UNINITIALIZED);
            assert_eq!(nvmlShutdown(), ERR_UNINITIALIZED);
        }
    }

    #[test]
    fn reads_device_values_and_rejects_bad_arguments() {
        let dev = json!({"uuid": "GPU-a", "name": "A100", "bus_id": "00000000:07:00.0",
            "memory_total": 1000, "memory_used": 300, "sm_clock_mhz": 1200});
        let (_lock, _file) = with_state(json!({ "devices": [dev] }));
        unsafe {
            let h = handle_of(0);
            let mut buf = [0 as c_char; 96];
            assert_eq!(nvmlDeviceGetUUID(h, buf.as_mut_ptr(), 96), SUCCESS);
            assert_eq!(CStr::from_ptr(buf.as_ptr()), c"GPU-a");
            assert_eq!(
                nvmlDeviceGetUUID(h, buf.as_mut_ptr(), 5),
                ERR_INSUFFICIENT_SIZE
            );
            let mut mem: MemoryV2 = zeroed();
            mem.version = MEMORY_V2_VERSION;
            assert_eq!(nvmlDeviceGetMemoryInfo_v2(h, &mut mem), SUCCESS);
            assert_eq!((mem.total, mem.free, mem.used), (1000, 700, 300));
            mem.version = 1;
            let mismatch = ERR_ARGUMENT_VERSION_MISMATCH;
            assert_eq!(nvmlDeviceGetMemoryInfo_v2(h, &mut mem), mismatch);
            let mut pci: PciInfo = zeroed();
            assert_eq!(nvmlDeviceGetPciInfo_v3(h, &mut pci), SUCCESS);
            assert_eq!((pci.domain, pci.bus, pci.device), (0, 7, 0));
            assert_eq!(CStr::from_ptr(pci.bus_id_legacy.as_ptr()), c"0000:07:00.0");
            let mut value = 0;
            assert_eq!(nvmlDeviceGetClockInfo(h, 1, &mut value), SUCCESS);
            assert_eq!(value, 1200);
            assert_eq!(nvmlDeviceGetTemperature(h, 0, &mut value), SUCCESS);
            assert_eq!(value, 40, "default");
            let mut other = null_mut();
            let invalid = ERR_INVALID_ARGUMENT;
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(1, &mut other), invalid);
            assert_eq!(nvmlDeviceGetPowerUsage(h, null_mut()), invalid);
            assert_eq!(nvmlDeviceGetPowerUsage(null_mut(), &mut value), invalid);
        }
    }

    #[test]
    fn processes_use_the_two_call_protocol() {
        let procs = json!([{"pid": 11, "used_memory": 100}, {"pid": 12, "used_memory": 200}]);
        let (_lock, _file) = with_state(json!({"devices": [
            {"uuid": "GPU-a", "name": "A", "processes": []},
            {"uuid": "GPU-b", "name": "B", "processes": procs}]}));
        let get = nvmlDeviceGetComputeRunningProcesses_v3;
        let mut count = 0;
        unsafe {
            assert_eq!(get(handle_of(0), &mut count, null_mut()), SUCCESS);
            assert_eq!(count, 0);
            let busy = handle_of(1);
            assert_eq!(get(busy, &mut count, null_mut()), ERR_INSUFFICIENT_SIZE);
            assert_eq!(count, 2);
            let mut infos: Vec<ProcessInfo> = (0..5).map(|_| zeroed()).collect();
            count = 5;
            assert_eq!(get(busy, &mut count, infos.as_mut_ptr()), SUCCESS);
            assert_eq!(count, 2);
            let p = &infos[1];
            assert_eq!((p.pid, p.used_gpu_memory), (12, 200));
            assert_eq!((p.gpu_instance_id, p.compute_instance_id), (NO_ID, NO_ID));
        }
    }

    #[test]
    fn lost_device_answers_gpu_is_lost() {
        let dev = json!({"uuid": "GPU-a", "name": "A", "lost": true});
        let (_lock, _file) = with_state(json!({ "devices": [dev] }));
        let mut value = 0;
        let mut buf = [0 as c_char; 96];
        unsafe {
            let h = handle_of(0);
            assert_eq!(nvmlDeviceGetTemperature(h, 0, &mut value), ERR_GPU_IS_LOST);
            assert_eq!(nvmlDeviceGetIndex(h, &mut value), ERR_GPU_IS_LOST);
            assert_eq!(nvmlDeviceGetUUID(h, buf.as_mut_ptr(), 96), ERR_GPU_IS_LOST);
        }
    }

    #[test]
    fn xid_events_are_delivered_once() {
        let devs = |xids: &[u64]| {
            json!({"devices": [{"uuid": "GPU-x0", "name": "A"},
                {"uuid": "GPU-x1", "name": "A", "xid_events": xids}]})
        };
        let (_lock, file) = with_state(devs(&[79]));
        let (mut set, mut types) = (null_mut(), 0);
        unsafe {
            let mut data: EventData = zeroed();
            assert_eq!(
                nvmlDeviceGetSupportedEventTypes(handle_of(1), &mut types),
                SUCCESS
            );
            assert_eq!(types, EVENT_XID_CRITICAL);
            assert_eq!(nvmlEventSetCreate(&mut set), SUCCESS);
            for i in 0..2 {
                assert_eq!(nvmlDeviceRegisterEvents(handle_of(i), types, set), SUCCESS);
            }
            assert_eq!(nvmlEventSetWait_v2(set, &mut data, 0), SUCCESS);
            let got = (data.device, data.event_type, data.event_data);
            assert_eq!(got, (handle_of(1), 8, 79));
            assert_eq!(nvmlEventSetWait_v2(set, &mut data, 30), ERR_TIMEOUT);
            // A new XID appended to the file is picked up; the old one is not replayed.
            std::fs::write(file.path(), devs(&[79, 48]).to_string()).unwrap();
            assert_eq!(nvmlEventSetWait_v2(set, &mut data, 0), SUCCESS);
            assert_eq!(data.event_data, 48);
            assert_eq!(nvmlEventSetWait_v2(set, &mut data, 0), ERR_TIMEOUT);
            assert_eq!(nvmlEventSetFree(set), SUCCESS);
            assert_eq!(nvmlEventSetWait_v2(set, &mut data, 0), ERR_INVALID_ARGUMENT);
        }
    }
}
