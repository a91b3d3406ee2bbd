//! The price catalog: cloud instance types with their on-demand and spot prices
//! (each row with its source and date), and GPU models with their memory and
//! speed. A built-in copy ships with gpuq (`catalog/*.csv`); users add or
//! override rows with their own file of the same format.

use crate::cost::Micros;
use serde::Serialize;

const BUILTIN_INSTANCES: &str = include_str!("../catalog/instances.csv");
const BUILTIN_GPUS: &str = include_str!("../catalog/gpus.csv");

const INSTANCE_HEADER: &str = "provider,region,instance_type,gpu_model,gpus,gpu_memory_gib,vcpus,on_demand_usd_per_hour,spot_usd_per_hour,source,as_of";

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct InstancePrice {
    pub provider: String,
    pub region: String,
    pub instance_type: String,
    pub gpu_model: String,
    pub gpus: u32,
    pub gpu_memory_gib: u32,
    pub vcpus: Option<u32>,
    pub on_demand: Micros,
    pub spot: Option<Micros>,
    pub source: String,
    pub as_of: String,
}

impl InstancePrice {
    /// `provider/region/instance_type`, the name config files use.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.provider, self.region, self.instance_type)
    }

    /// The price of one of its GPUs for an hour (on-demand, or spot when asked and known).
    pub fn per_gpu_hour(&self, spot: bool) -> Option<Micros> {
        let total = if spot { self.spot? } else { self.on_demand };
        (self.gpus > 0).then(|| Micros(total.0 / self.gpus as i64))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuModel {
    pub model: String,
    pub memory_gib: u32,
    /// Dense BF16 (FP16 where the card has no BF16) tensor TFLOPS: a rough speed.
    pub tflops: f64,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file} line {line}: {why}")]
pub struct CatalogError {
    pub file: String,
    pub line: usize,
    pub why: String,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub instances: Vec<InstancePrice>,
    pub gpus: Vec<GpuModel>,
}

impl Catalog {
    /// The catalog shipped with this build.
    pub fn builtin() -> Catalog {
        Catalog {
            instances: parse_instances(BUILTIN_INSTANCES, "built-in instances.csv")
                .expect("the built-in catalog parses (tested)"),
            gpus: parse_gpus(BUILTIN_GPUS).expect("the built-in GPU list parses (tested)"),
        }
    }

    /// Adds rows; a row with the same provider/region/instance type replaces the built-in one.
    pub fn override_with(&mut self, rows: Vec<InstancePrice>) {
        for row in rows {
            match self.instances.iter_mut().find(|r| r.key() == row.key()) {
                Some(existing) => *existing = row,
                None => self.instances.push(row),
            }
        }
    }

    pub fn instance(&self, key: &str) -> Option<&InstancePrice> {
        self.instances
            .iter()
            .find(|r| r.key().eq_ignore_ascii_case(key))
    }

    pub fn gpu(&self, model: &str) -> Option<&GpuModel> {
        self.gpus
            .iter()
            .find(|g| g.model.eq_ignore_ascii_case(model))
    }

    /// The cheapest on-demand price of one GPU of `model` for an hour, and where.
    pub fn cheapest(&self, model: &str) -> Option<(Micros, &InstancePrice)> {
        self.instances
            .iter()
            .filter(|r| r.gpu_model.eq_ignore_ascii_case(model))
            .filter_map(|r| Some((r.per_gpu_hour(false)?, r)))
            .min_by_key(|(p, _)| *p)
    }

    /// The catalog model of a GPU as the driver names it ("NVIDIA A100-SXM4-80GB",
    /// "Tesla T4", "NVIDIA GeForce RTX 4090"), using its memory to tell variants apart.
    pub fn model_for(&self, name: &str, memory_mib: u64) -> Option<&GpuModel> {
        let tokens: Vec<String> = name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|t| !t.is_empty())
            .map(|t| t.to_ascii_uppercase())
            .collect();
        let mut candidates: Vec<String> = tokens.clone();
        candidates.extend(tokens.windows(2).map(|w| format!("{}{}", w[0], w[1])));
        let base = |m: &str| m.split('-').next().unwrap_or("").to_ascii_uppercase();
        let memory_gib = memory_mib as f64 / 1024.0;
        self.gpus
            .iter()
            .filter(|g| candidates.contains(&base(&g.model)))
            .min_by(|a, b| {
                let da = (a.memory_gib as f64 - memory_gib).abs();
                let db = (b.memory_gib as f64 - memory_gib).abs();
                da.total_cmp(&db)
            })
    }
}

/// Splits one CSV line; fields may be double-quoted (with `""` for a quote).
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Parses an instances file (the header line must match the built-in one).
pub fn parse_instances(text: &str, file: &str) -> Result<Vec<InstancePrice>, CatalogError> {
    let err = |line: usize, why: String| CatalogError {
        file: file.to_string(),
        line,
        why,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    match lines.next() {
        Some((_, h)) if h.trim() == INSTANCE_HEADER => {}
        _ => {
            return Err(err(
                1,
                format!("the first line must be the header: {INSTANCE_HEADER}"),
            ))
        }
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        let f = fields(line);
        if f.len() != 11 {
            return Err(err(n, format!("{} fields, expected 11", f.len())));
        }
        let number = |k: usize, name: &str| -> Result<u32, CatalogError> {
            f[k].trim()
                .parse()
                .map_err(|_| err(n, format!("{name} {:?} is not a whole number", f[k])))
        };
        let money = |k: usize, name: &str| -> Result<Micros, CatalogError> {
            Micros::parse_dollars(&f[k]).ok_or_else(|| {
                err(
                    n,
                    format!("{name} {:?} is not an amount in dollars like 1.29", f[k]),
                )
            })
        };
        rows.push(InstancePrice {
            provider: f[0].trim().to_string(),
            region: f[1].trim().to_string(),
            instance_type: f[2].trim().to_string(),
            gpu_model: f[3].trim().to_string(),
            gpus: number(4, "gpus")?,
            gpu_memory_gib: number(5, "gpu_memory_gib")?,
            vcpus: if f[6].trim().is_empty() {
                None
            } else {
                Some(number(6, "vcpus")?)
            },
            on_demand: money(7, "on_demand_usd_per_hour")?,
            spot: if f[8].trim().is_empty() {
                None
            } else {
                Some(money(8, "spot_usd_per_hour")?)
            },
            source: f[9].trim().to_string(),
            as_of: f[10].trim().to_string(),
        });
    }
    Ok(rows)
}

fn parse_gpus(text: &str) -> Result<Vec<GpuModel>, CatalogError> {
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let f = fields(line);
        let err = |why: &str| CatalogError {
            file: "gpus.csv".into(),
            line: i + 1,
            why: why.into(),
        };
        if f.len() != 4 {
            return Err(err("expected 4 fields"));
        }
        out.push(GpuModel {
            model: f[0].trim().to_string(),
            memory_gib: f[1].trim().parse().map_err(|_| err("memory_gib"))?,
            tflops: f[2].trim().parse().map_err(|_| err("bf16_dense_tflops"))?,
            source: f[3].trim().to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalog_is_complete_and_sourced() {
        let c = Catalog::builtin();
        assert!(c.instances.len() >= 5, "{}", c.instances.len());
        for r in &c.instances {
            assert!(r.source.starts_with("http"), "{} has no source", r.key());
            assert!(!r.as_of.is_empty(), "{} has no date", r.key());
            assert!(
                c.gpu(&r.gpu_model).is_some(),
                "{}: unknown model {}",
                r.key(),
                r.gpu_model
            );
            assert!(r.on_demand > Micros::ZERO);
        }
        for g in &c.gpus {
            assert!(g.memory_gib > 0 && g.tflops > 0.0, "{g:?}");
        }
    }

    #[test]
    fn driver_names_map_to_catalog_models() {
        let c = Catalog::builtin();
        let model = |name: &str, gib: u64| c.model_for(name, gib * 1024).map(|m| m.model.clone());
        if c.gpu("A100-80GB").is_some() && c.gpu("A100-40GB").is_some() {
            assert_eq!(
                model("NVIDIA A100-SXM4-80GB", 80).as_deref(),
                Some("A100-80GB")
            );
            assert_eq!(
                model("NVIDIA A100-PCIE-40GB", 40).as_deref(),
                Some("A100-40GB")
            );
        }
        if c.gpu("T4").is_some() {
            assert_eq!(model("Tesla T4", 15).as_deref(), Some("T4"));
        }
        if c.gpu("L4").is_some() && c.gpu("L40S").is_some() {
            assert_eq!(model("NVIDIA L4", 22).as_deref(), Some("L4"));
            assert_eq!(model("NVIDIA L40S", 45).as_deref(), Some("L40S"));
        }
        if c.gpu("RTX4090").is_some() {
            assert_eq!(
                model("NVIDIA GeForce RTX 4090", 24).as_deref(),
                Some("RTX4090")
            );
        }
        assert_eq!(model("Matrox G200", 1), None);
    }

    #[test]
    fn user_rows_override_and_bad_rows_name_the_line() {
        let mut c = Catalog::builtin();
        let mine = format!(
            "{INSTANCE_HEADER}\nlab,-,box1,A100-80GB,8,80,128,8.00,,https://lab.example/price,2026-11\n"
        );
        c.override_with(parse_instances(&mine, "mine.csv").unwrap());
        let row = c.instance("lab/-/box1").unwrap();
        assert_eq!(row.per_gpu_hour(false), Some(Micros(1_000_000)));
        assert_eq!(row.per_gpu_hour(true), None, "no spot price: none, not $0");
        let bad = format!("{INSTANCE_HEADER}\nlab,-,box1,A100,8,80,,eight,,src,2026\n");
        let e = parse_instances(&bad, "mine.csv").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(
            e.to_string().contains("on_demand_usd_per_hour \"eight\""),
            "{e}"
        );
        assert!(parse_instances("a,b\n", "x.csv")
            .unwrap_err()
            .why
            .contains("header"));
    }
}
