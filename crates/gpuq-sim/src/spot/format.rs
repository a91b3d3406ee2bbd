//! The provider-neutral spot data format, and the converter from the
//! `<zone>_<device>.csv` + price-JSON layout of the "Can't Be Late" traces.
//!
//! A data directory holds:
//!
//! * `zones.csv`: `zone,on_demand_per_hour`, one row per zone;
//! * `<zone>.csv` per zone: `time,available,spot_per_hour`, one row per tick,
//!   `time` in ISO 8601 (`2023-02-15T22:08:16Z`, a space for the `T`, an
//!   offset or none for UTC) or in seconds since the Unix epoch, at a regular
//!   tick (inferred from the first two rows), the same rows in every zone;
//!   `available` 1 when a spot instance could be had, 0 when not.

use super::SpotError;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Header of a zone file.
pub const ZONE_HEADER: &str = "time,available,spot_per_hour";
/// Header of `zones.csv`.
pub const ZONES_HEADER: &str = "zone,on_demand_per_hour";
/// The list of zones and their on-demand prices.
pub const ZONES_FILE: &str = "zones.csv";

/// The traces of some zones, read from a data directory in the format.
#[derive(Debug, Clone, Serialize)]
pub struct Traces {
    pub zones: Vec<String>,
    /// On-demand price per zone, dollars per hour.
    pub on_demand_per_h: Vec<f64>,
    /// Time of the first row, milliseconds since the Unix epoch.
    pub start_ms: i64,
    /// The tick, seconds (inferred).
    pub tick_s: f64,
    pub available: Vec<Vec<bool>>,
    pub prices: Vec<Vec<f64>>,
}

impl Traces {
    pub fn rows(&self) -> usize {
        self.available.first().map_or(0, Vec::len)
    }
}

fn data_err(path: &Path, why: String) -> SpotError {
    SpotError::Data {
        path: path.to_path_buf(),
        why,
    }
}

pub(super) fn read(path: &Path) -> Result<String, SpotError> {
    std::fs::read_to_string(path).map_err(|source| SpotError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads `dir` in the format; `only` picks zones (in that order), else all of
/// `zones.csv` in its order.
pub fn load(dir: &Path, only: Option<&[String]>) -> Result<Traces, SpotError> {
    let zones_path = dir.join(ZONES_FILE);
    let listed = parse_zones(&zones_path, &read(&zones_path)?)?;
    // A zone file that zones.csv does not price is a mistake, not noise.
    let names: BTreeSet<&str> = listed.iter().map(|(z, _)| z.as_str()).collect();
    let entries = std::fs::read_dir(dir).map_err(|source| SpotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut unlisted = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        let Some(stem) = p
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|_| p.extension().is_some_and(|x| x == "csv"))
        else {
            continue;
        };
        if stem == "zones" || names.contains(stem) {
            continue;
        }
        let first = read(&p)?.lines().next().unwrap_or("").trim().to_lowercase();
        if first == ZONE_HEADER {
            unlisted.push(p);
        }
    }
    unlisted.sort();
    if let Some(p) = unlisted.first() {
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        return Err(data_err(
            p,
            format!(
                "a zone file with no row in {}: add `{stem},<on-demand dollars per hour>` to it, or remove the file",
                zones_path.display()
            ),
        ));
    }
    let picked: Vec<(String, f64)> = match only {
        None => listed,
        Some(want) => {
            let mut v = Vec::new();
            for z in want {
                let Some(row) = listed.iter().find(|(n, _)| n == z) else {
                    return Err(data_err(
                        &zones_path,
                        format!(
                            "no zone {z:?} (--zones); it lists {}",
                            names.iter().copied().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                };
                v.push(row.clone());
            }
            v
        }
    };
    let mut out = Traces {
        zones: Vec::new(),
        on_demand_per_h: Vec::new(),
        start_ms: 0,
        tick_s: 0.0,
        available: Vec::new(),
        prices: Vec::new(),
    };
    let mut first: Option<(PathBuf, i64, i64, usize)> = None;
    for (zone, od) in picked {
        let path = dir.join(format!("{zone}.csv"));
        if !path.is_file() {
            return Err(data_err(
                &zones_path,
                format!(
                    "zone {zone:?} is listed but {} does not exist: add it ({ZONE_HEADER}) or drop the row",
                    path.display()
                ),
            ));
        }
        let z = parse_zone(&path, &read(&path)?)?;
        match &first {
            None => {
                first = Some((path.clone(), z.start_ms, z.tick_ms, z.available.len()));
                out.start_ms = z.start_ms;
                out.tick_s = z.tick_ms as f64 / 1000.0;
            }
            Some((p0, s0, t0, n0)) => {
                let (p0, s0, t0, n0) = (p0.display(), *s0, *t0, *n0);
                if z.tick_ms != t0 {
                    return Err(data_err(
                        &path,
                        format!(
                            "misaligned ticks: its tick is {} s, the tick of {p0} is {} s; every zone must have the same tick",
                            z.tick_ms as f64 / 1000.0,
                            t0 as f64 / 1000.0
                        ),
                    ));
                }
                if z.start_ms != s0 || z.available.len() != n0 {
                    return Err(data_err(
                        &path,
                        format!(
                            "misaligned ticks: its rows run from {} for {} ticks, those of {p0} from {} for {n0}; every zone must have the same rows (the same first time and count)",
                            fmt_ms(z.start_ms),
                            z.available.len(),
                            fmt_ms(s0)
                        ),
                    ));
                }
            }
        }
        out.zones.push(zone);
        out.on_demand_per_h.push(od);
        out.available.push(z.available);
        out.prices.push(z.prices);
    }
    if out.zones.is_empty() {
        return Err(data_err(&zones_path, "no zone".into()));
    }
    Ok(out)
}

fn fmt_ms(ms: i64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.3} s", ms as f64 / 1000.0)
    }
}

/// Rows of `zones.csv`.
fn parse_zones(path: &Path, text: &str) -> Result<Vec<(String, f64)>, SpotError> {
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, h)| h.trim().to_lowercase());
    if header.as_deref() != Some(ZONES_HEADER) {
        return Err(data_err(
            path,
            format!(
                "line 1: header {:?}, expected {ZONES_HEADER}",
                header.unwrap_or_default()
            ),
        ));
    }
    let mut out: Vec<(String, f64)> = Vec::new();
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 2 {
            return Err(data_err(
                path,
                format!("line {n}: {} fields, expected 2 ({ZONES_HEADER})", f.len()),
            ));
        }
        let zone = f[0];
        if zone.is_empty() || zone.contains(['/', '\\']) || zone == "zones" {
            return Err(data_err(
                path,
                format!(
                    "line {n}, field zone: {zone:?} is not a zone name (its file is <zone>.csv)"
                ),
            ));
        }
        let od: f64 = f[1].parse().ok().filter(|p: &f64| p.is_finite() && *p >= 0.0).ok_or_else(|| {
            data_err(
                path,
                format!("line {n}, field on_demand_per_hour: {:?} is not a price (dollars per hour, e.g. 3.06)", f[1]),
            )
        })?;
        if out.iter().any(|(z, _)| z == zone) {
            return Err(data_err(
                path,
                format!("line {n}, field zone: {zone:?} is listed twice"),
            ));
        }
        out.push((zone.to_string(), od));
    }
    Ok(out)
}

struct Zone {
    start_ms: i64,
    tick_ms: i64,
    available: Vec<bool>,
    prices: Vec<f64>,
}

/// One zone file: rows at a regular tick, inferred from the first two.
fn parse_zone(path: &Path, text: &str) -> Result<Zone, SpotError> {
    let bad = |n: usize, field: &str, why: String| {
        data_err(path, format!("line {n}, field {field}: {why}"))
    };
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, h)| h.trim().to_lowercase());
    if header.as_deref() != Some(ZONE_HEADER) {
        return Err(data_err(
            path,
            format!(
                "line 1: header {:?}, expected {ZONE_HEADER}",
                header.unwrap_or_default()
            ),
        ));
    }
    let mut times: Vec<(i64, usize)> = Vec::new();
    let mut available = Vec::new();
    let mut prices = Vec::new();
    let mut tick: Option<i64> = None;
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let n = i + 1;
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 3 {
            return Err(data_err(
                path,
                format!("line {n}: {} fields, expected 3 ({ZONE_HEADER})", f.len()),
            ));
        }
        let t = parse_time(f[0]).ok_or_else(|| {
            bad(
                n,
                "time",
                format!(
                    "{:?} is neither ISO 8601 (2023-02-15T22:08:16Z) nor seconds since the epoch",
                    f[0]
                ),
            )
        })?;
        let a = match f[1] {
            "1" => true,
            "0" => false,
            x => {
                return Err(bad(
                    n,
                    "available",
                    format!("{x:?}, expected 1 (a spot instance could be had) or 0"),
                ))
            }
        };
        let p: f64 = match f[2].parse::<f64>() {
            Ok(p) if p.is_finite() && p >= 0.0 => p,
            _ if f[2].is_empty() => {
                return Err(bad(n, "spot_per_hour", "missing: every row needs the spot price (dollars per hour), also when not available".into()))
            }
            _ => return Err(bad(n, "spot_per_hour", format!("{:?} is not a price (dollars per hour)", f[2]))),
        };
        if let Some(&(prev, pn)) = times.last() {
            let step = t - prev;
            if step == 0 {
                return Err(bad(
                    n,
                    "time",
                    format!(
                        "{} again (line {pn} has it): a duplicate time; keep one row per tick",
                        f[0]
                    ),
                ));
            }
            if step < 0 {
                return Err(bad(
                    n,
                    "time",
                    format!("{} is before line {pn}'s: rows must be in time order", f[0]),
                ));
            }
            match tick {
                None => tick = Some(step),
                Some(k) if step == k => {}
                Some(k) if step % k == 0 => {
                    return Err(bad(
                        n,
                        "time",
                        format!(
                            "a gap: {} s after line {pn}, the tick is {} s (inferred from the first two rows), so {} ticks are missing; add their rows (available 0 if unknown)",
                            step as f64 / 1000.0,
                            k as f64 / 1000.0,
                            step / k - 1
                        ),
                    ))
                }
                Some(k) => {
                    return Err(bad(
                        n,
                        "time",
                        format!(
                            "misaligned tick: {} s after line {pn}, the tick is {} s (inferred from the first two rows); resample the rows to a regular tick",
                            step as f64 / 1000.0,
                            k as f64 / 1000.0
                        ),
                    ))
                }
            }
        }
        times.push((t, n));
        available.push(a);
        prices.push(p);
    }
    let (Some(&(start, _)), Some(tick)) = (times.first(), tick) else {
        return Err(data_err(
            path,
            format!(
                "{} row(s): at least two are needed to infer the tick",
                times.len()
            ),
        ));
    };
    Ok(Zone {
        start_ms: start,
        tick_ms: tick,
        available,
        prices,
    })
}

/// Milliseconds since the Unix epoch of ISO 8601 (`YYYY-MM-DD[T ]HH:MM[:SS[.f]]`
/// with `Z`, `+HH:MM`, `-HH:MM` or nothing for UTC) or of epoch seconds.
pub fn parse_time(s: &str) -> Option<i64> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
        && !s[1..].contains('-')
    {
        let x: f64 = s.parse().ok()?;
        return x.is_finite().then(|| (x * 1000.0).round() as i64);
    }
    let (d, rest) = s.split_once(['T', ' ', 't'])?;
    let mut d = d.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    if d.next().is_some() {
        return None;
    }
    // Offset: Z, or a sign after the time.
    let (time, offset_min) = if let Some(t) = rest.strip_suffix(['Z', 'z']) {
        (t, 0)
    } else if let Some(at) = rest.rfind(['+', '-']) {
        let (t, o) = rest.split_at(at);
        let sign = if o.starts_with('-') { -1 } else { 1 };
        let o = &o[1..];
        let (oh, om) = o
            .split_once(':')
            .unwrap_or((o.get(..2)?, o.get(2..).unwrap_or("0")));
        let (oh, om): (i64, i64) = (
            oh.parse().ok()?,
            if om.is_empty() { 0 } else { om.parse().ok()? },
        );
        (t, sign * (oh * 60 + om))
    } else {
        (rest, 0)
    };
    let mut t = time.split(':');
    let hh: i64 = t.next()?.parse().ok()?;
    let mm: i64 = t.next()?.parse().ok()?;
    let sec: f64 = match t.next() {
        Some(x) => x.parse().ok()?,
        None => 0.0,
    };
    if t.next().is_some()
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || hh > 23
        || mm > 59
        || !(0.0..61.0).contains(&sec)
    {
        return None;
    }
    let base = crate::trace::unix_seconds(y, m, day, hh, mm, 0) - offset_min * 60;
    Some(base * 1000 + (sec * 1000.0).round() as i64)
}

/// What the converter wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Converted {
    pub zones: Vec<String>,
    pub rows: usize,
    pub tick_s: f64,
    /// The source rows' real spacing, seconds: min, median, max.
    pub source_steps_s: (i64, i64, i64),
}

/// Converts the `<zone>_<device>.csv` (`date,availability`) + price JSON layout
/// (`{"<zone>_<device>": [dollars per hour, one per row]}`) in `src` into the
/// format in `out`: every zone file of `src`, with `on_demand_per_h` for all
/// (that layout has no on-demand price). Row `i` is written at the first
/// row's time plus `i` ticks: the layout's model counts each row as one tick
/// (`tick_s`, or the first step of the rows when `None`), whatever the rows'
/// real spacing (reported).
pub fn convert(
    src: &Path,
    out: &Path,
    on_demand_per_h: f64,
    tick_s: Option<f64>,
) -> Result<Converted, SpotError> {
    if !(on_demand_per_h.is_finite() && on_demand_per_h >= 0.0) {
        return Err(SpotError::Usage(format!(
            "--on-demand-per-hour {on_demand_per_h}: expected a price in dollars per hour"
        )));
    }
    let zones = super::data::zone_files(src)?;
    let legacy = super::data::load(src, &zones)?;
    let steps: Vec<i64> = legacy.times.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = steps.clone();
    sorted.sort_unstable();
    let first_step = steps.first().copied().unwrap_or(0);
    let tick = match tick_s {
        Some(t) if t.is_finite() && t > 0.0 => t,
        Some(t) => {
            return Err(SpotError::Usage(format!(
                "--tick {t}: expected seconds > 0"
            )))
        }
        None if first_step > 0 => first_step as f64,
        None => {
            return Err(data_err(
                src,
                "fewer than two rows: no tick to infer".into(),
            ))
        }
    };
    std::fs::create_dir_all(out).map_err(|source| SpotError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let write = |p: PathBuf, text: String| {
        std::fs::write(&p, text).map_err(|source| SpotError::Io { path: p, source })
    };
    let mut z = format!("{ZONES_HEADER}\n");
    for zone in &zones {
        z.push_str(&format!("{zone},{on_demand_per_h}\n"));
    }
    write(out.join(ZONES_FILE), z)?;
    let t0 = legacy.times.first().copied().unwrap_or(0);
    for (k, zone) in zones.iter().enumerate() {
        let mut text = format!("{ZONE_HEADER}\n");
        for (i, (a, p)) in legacy.available[k]
            .iter()
            .zip(&legacy.prices[k])
            .enumerate()
        {
            let t = t0 as f64 + i as f64 * tick;
            text.push_str(&format!("{},{},{}\n", fmt_epoch(t), *a as u8, p));
        }
        write(out.join(format!("{zone}.csv")), text)?;
    }
    Ok(Converted {
        zones,
        rows: legacy.times.len(),
        tick_s: tick,
        source_steps_s: (
            sorted.first().copied().unwrap_or(0),
            sorted.get(sorted.len() / 2).copied().unwrap_or(0),
            sorted.last().copied().unwrap_or(0),
        ),
    })
}

fn fmt_epoch(t: f64) -> String {
    if t.fract() == 0.0 {
        format!("{}", t as i64)
    } else {
        format!("{t:.3}")
    }
}
