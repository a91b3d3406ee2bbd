//! Reading the `<zone>_<device>.csv` + price-JSON layout of the "Can't Be
//! Late" traces (for the converter), and a published results file.

use super::SpotError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The traces of some zones, read from a directory in that layout.
#[derive(Debug, Clone)]
pub struct Legacy {
    pub zones: Vec<String>,
    /// Seconds since the Unix epoch of every row (the same in every zone).
    pub times: Vec<i64>,
    pub available: Vec<Vec<bool>>,
    pub prices: Vec<Vec<f64>>,
}

/// Reads `zones` from `dir`: `<zone>_*.csv` (exactly one per zone) and the
/// price series of the JSON file in `dir` under the CSV's file stem.
pub fn load(dir: &Path, zones: &[String]) -> Result<Legacy, SpotError> {
    let entries = std::fs::read_dir(dir).map_err(|source| SpotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = Vec::new();
    for e in entries {
        let e = e.map_err(|source| SpotError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        files.push(e.path());
    }
    files.sort();
    let data_err = |path: &Path, why: String| SpotError::Data {
        path: path.to_path_buf(),
        why,
    };
    let mut price_map: Option<(PathBuf, BTreeMap<String, Vec<f64>>)> = None;
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "json"))
    {
        let text = read(f)?;
        if let Ok(m) = serde_json::from_str::<BTreeMap<String, Vec<f64>>>(&text) {
            price_map = Some((f.clone(), m));
            break;
        }
    }
    let (price_path, price_map) = price_map.ok_or_else(|| {
        data_err(
            dir,
            "no JSON file of price series ({zone: [price, ...]})".into(),
        )
    })?;
    let mut out = Legacy {
        zones: zones.to_vec(),
        times: Vec::new(),
        available: Vec::new(),
        prices: Vec::new(),
    };
    for zone in zones {
        let prefix = format!("{zone}_");
        let csvs: Vec<&PathBuf> = files
            .iter()
            .filter(|f| {
                f.extension().is_some_and(|x| x == "csv")
                    && f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&prefix))
            })
            .collect();
        let [csv] = csvs.as_slice() else {
            return Err(data_err(
                dir,
                format!("expected one {prefix}*.csv, found {}", csvs.len()),
            ));
        };
        let (times, avail) = parse_availability(&read(csv)?).map_err(|why| data_err(csv, why))?;
        let stem = csv.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let prices = price_map
            .get(stem)
            .ok_or_else(|| data_err(&price_path, format!("no price series {stem:?}")))?;
        if prices.len() < avail.len() {
            return Err(data_err(
                &price_path,
                format!(
                    "{stem}: {} prices for {} availability rows",
                    prices.len(),
                    avail.len()
                ),
            ));
        }
        if prices.iter().any(|p| !(p.is_finite() && *p >= 0.0)) {
            return Err(data_err(
                &price_path,
                format!("{stem}: a price is negative or not a number"),
            ));
        }
        if out.times.is_empty() {
            out.times = times;
        } else if out.times != times {
            return Err(data_err(
                csv,
                "timestamps differ from the first zone's".into(),
            ));
        }
        out.prices.push(prices[..avail.len()].to_vec());
        out.available.push(avail);
    }
    Ok(out)
}

use super::format::read;

/// The zones of a directory in that layout: `<zone>` of every `<zone>_*.csv`
/// whose header is `date,availability`, sorted.
pub fn zone_files(dir: &Path) -> Result<Vec<String>, SpotError> {
    let entries = std::fs::read_dir(dir).map_err(|source| SpotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut zones = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((zone, _)) = name.strip_suffix(".csv").and_then(|n| n.split_once('_')) else {
            continue;
        };
        let head = read(&p)?;
        if head
            .lines()
            .next()
            .is_some_and(|h| h.trim().eq_ignore_ascii_case("date,availability"))
        {
            zones.push(zone.to_string());
        }
    }
    zones.sort();
    zones.dedup();
    if zones.is_empty() {
        return Err(SpotError::Data {
            path: dir.to_path_buf(),
            why: "no <zone>_<device>.csv file with a date,availability header".into(),
        });
    }
    Ok(zones)
}

/// `date,availability` rows: `YYYY-MM-DD HH:MM:SS` (or with a `T`), `0`/`1`.
fn parse_availability(text: &str) -> Result<(Vec<i64>, Vec<bool>), String> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim().eq_ignore_ascii_case("date,availability") => {}
        h => {
            return Err(format!(
                "header {:?}, expected date,availability",
                h.map(|x| x.1)
            ))
        }
    }
    let mut times = Vec::new();
    let mut avail = Vec::new();
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {line:?}", i + 1);
        let (d, a) = line.split_once(',').ok_or_else(|| bad("no comma"))?;
        let t = parse_datetime(d.trim()).ok_or_else(|| bad("bad date"))?;
        let a = match a.trim() {
            "1" | "1.0" => true,
            "0" | "0.0" => false,
            _ => return Err(bad("availability is not 0 or 1")),
        };
        if times.last().is_some_and(|&p| t <= p) {
            return Err(bad("time does not increase"));
        }
        times.push(t);
        avail.push(a);
    }
    if times.is_empty() {
        return Err("no rows".into());
    }
    Ok((times, avail))
}

/// Seconds since the Unix epoch of `YYYY-MM-DD HH:MM:SS` (UTC).
pub(super) fn parse_datetime(s: &str) -> Option<i64> {
    let (d, t) = s.split_once([' ', 'T'])?;
    let mut d = d.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = t.split(':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next().unwrap_or(Some(0))?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(crate::trace::unix_seconds(y, m, day, hh, mm, ss))
}

/// A published figure: per window (by index in the evaluation) dollars.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Published {
    /// (strategy, region or "" for multi-region) -> window number -> cost.
    pub costs: BTreeMap<String, BTreeMap<usize, f64>>,
}

impl Published {
    fn key(strategy: &str, zone: &str) -> String {
        if zone.is_empty() {
            strategy.to_string()
        } else {
            format!("{strategy}@{zone}")
        }
    }

    pub fn get(&self, strategy: &str, zone: &str) -> Option<&BTreeMap<usize, f64>> {
        self.costs.get(&Self::key(strategy, zone))
    }
}

/// Reads published results: rows of `strategy, region, env_start_hours,
/// cost, trace_mode`; rows with a `trace_mode` (summaries) are skipped; a row
/// belongs to the window whose start (`starts_h`, hours into the data) is
/// within half a tick (`tick_h`) of its `env_start_hours`; others are skipped.
pub fn load_published(path: &Path, starts_h: &[f64], tick_h: f64) -> Result<Published, SpotError> {
    let text = read(path)?;
    let bad = |why: String| SpotError::Data {
        path: path.to_path_buf(),
        why,
    };
    let mut rows = text.lines().filter(|l| !l.trim().is_empty()).map(split_csv);
    let header = rows.next().ok_or_else(|| bad("empty".into()))?;
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| bad(format!("no column {name}")))
    };
    let (cs, cr, ce, cc, cm) = (
        col("strategy")?,
        col("region")?,
        col("env_start_hours")?,
        col("cost")?,
        col("trace_mode")?,
    );
    let mut out = Published::default();
    for r in rows {
        let get = |i: usize| r.get(i).map(String::as_str).unwrap_or("");
        if !get(cm).is_empty() {
            continue;
        }
        let start: f64 = get(ce)
            .parse()
            .map_err(|_| bad(format!("env_start_hours {:?}", get(ce))))?;
        let cost: f64 = get(cc)
            .parse()
            .map_err(|_| bad(format!("cost {:?}", get(cc))))?;
        let Some(w) = starts_h
            .iter()
            .position(|s| (s - start).abs() <= tick_h / 2.0)
        else {
            continue;
        };
        let zone = get(cr).split('_').next().unwrap_or("");
        out.costs
            .entry(Published::key(get(cs), zone))
            .or_default()
            .insert(w, cost);
    }
    Ok(out)
}

/// One CSV line, with double-quoted fields.
pub(super) fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}
