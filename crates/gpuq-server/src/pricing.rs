//! This node's prices, resolved once at start-up from `[cost]` and the catalog,
//! and the calendar (time zone, days, weeks, months) that reports, budgets and
//! schedules use.

use crate::config::{BudgetPeriod, CostConfig};
use gpuq_core::catalog::{parse_instances, Catalog};
use gpuq_core::cost::Micros;
use gpuq_core::Millis;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

#[derive(Debug, Clone)]
pub struct Pricing {
    /// One GPU for an hour on this node; `None`: no price set.
    pub gpu_hour: Option<Micros>,
    /// A job without GPUs for an hour.
    pub cpu_job_hour: Option<Micros>,
    /// Where the price comes from, in words (shown by `gpuq cost`).
    pub basis: String,
    pub catalog: Catalog,
    pub tz: TimeZone,
}

impl Pricing {
    pub fn resolve(c: &CostConfig) -> Result<Pricing, String> {
        let mut catalog = Catalog::builtin();
        if let Some(path) = &c.catalog {
            // SAFETY: geteuid cannot fail.
            if unsafe { libc::geteuid() } == 0 {
                gpuq_exec::safe_fs::check_trusted(path, 0)
                    .map_err(|e| format!("cost.catalog: root reads only root-owned files: {e}"))?;
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cost.catalog: cannot read {}: {e}", path.display()))?;
            let rows = parse_instances(&text, &path.display().to_string())
                .map_err(|e| format!("cost.catalog: {e}"))?;
            catalog.override_with(rows);
        }
        let tz = match &c.timezone {
            None => TimeZone::UTC,
            Some(name) => TimeZone::get(name).map_err(|e| {
                format!("cost.timezone: {name:?} is not a known time zone ({e}); use an IANA name like \"Asia/Shanghai\" or \"UTC\"")
            })?,
        };
        let money = |key: &str, v: Option<f64>| -> Result<Option<Micros>, String> {
            v.map(|d| {
                Micros::from_dollars(d).ok_or_else(|| format!("cost.{key}: {d} is not a price"))
            })
            .transpose()
        };
        let cpu_job_hour = money("cpu_job_hour", c.cpu_job_hour)?;
        let (gpu_hour, basis) = match (&c.instance, c.gpu_hour) {
            (Some(key), _) => {
                let row = catalog.instance(key).ok_or_else(|| {
                    let provider = key.split('/').next().unwrap_or("");
                    let mut near: Vec<String> = catalog
                        .instances
                        .iter()
                        .filter(|r| r.provider.eq_ignore_ascii_case(provider))
                        .map(|r| r.key())
                        .collect();
                    near.truncate(8);
                    format!(
                        "cost.instance: {key:?} is not in the price catalog; write provider/region/instance_type{}, \
                         or add it with cost.catalog, or set cost.gpu_hour instead",
                        if near.is_empty() { String::new() } else { format!(" (e.g. {})", near.join(", ")) }
                    )
                })?;
                let price = row.per_gpu_hour(c.spot).ok_or_else(|| {
                    format!("cost.instance: {key} has no spot price in the catalog; set spot = false or cost.gpu_hour")
                })?;
                let basis = format!(
                    "{} {} ({} × {}) at {}/h ÷ {} GPUs = {}/GPU-hour; source {} ({})",
                    row.key(),
                    if c.spot { "spot" } else { "on-demand" },
                    row.gpus,
                    row.gpu_model,
                    if c.spot {
                        row.spot.unwrap_or_default()
                    } else {
                        row.on_demand
                    },
                    row.gpus,
                    price,
                    row.source,
                    row.as_of
                );
                (Some(price), basis)
            }
            (None, Some(d)) => {
                let price = money("gpu_hour", Some(d))?;
                (
                    price,
                    format!("{}/GPU-hour (cost.gpu_hour)", price.unwrap_or_default()),
                )
            }
            (None, None) => (
                None,
                "no price set for this node ([cost] in gpuq.toml): costs are not shown".into(),
            ),
        };
        Ok(Pricing {
            gpu_hour,
            cpu_job_hour,
            basis,
            catalog,
            tz,
        })
    }

    /// What an attempt with `gpus` GPUs costs per hour here.
    pub fn rate(&self, gpus: u32) -> Option<Micros> {
        gpuq_core::cost::attempt_rate(gpus, self.gpu_hour, self.cpu_job_hour)
    }

    pub fn tz_name(&self) -> String {
        self.tz.iana_name().unwrap_or("UTC").to_string()
    }

    fn zoned(&self, at: Millis) -> Zoned {
        Timestamp::from_millisecond(at)
            .unwrap_or(Timestamp::UNIX_EPOCH)
            .to_zoned(self.tz.clone())
    }

    fn start_of(&self, date: Date) -> Millis {
        date.to_zoned(self.tz.clone())
            .map(|z| z.timestamp().as_millisecond())
            .unwrap_or(0)
    }

    /// The period containing `at`: its start and end (epoch ms) in this node's time zone.
    pub fn period(&self, period: BudgetPeriod, at: Millis) -> (Millis, Millis) {
        let date = self.zoned(at).date();
        let (first, next) = match period {
            BudgetPeriod::Day => (date, date.tomorrow().unwrap_or(date)),
            BudgetPeriod::Week => {
                let back = date.weekday().to_monday_zero_offset() as i64;
                let monday = date.checked_sub(back.days()).unwrap_or(date);
                (monday, monday.checked_add(7.days()).unwrap_or(monday))
            }
            BudgetPeriod::Month => {
                let first = date.first_of_month();
                (first, first.checked_add(1.month()).unwrap_or(first))
            }
        };
        (self.start_of(first), self.start_of(next))
    }

    /// The local date of an instant, for `--by day` keys and reports.
    pub fn day_of(&self, at: Millis) -> Date {
        self.zoned(at).date()
    }

    /// Local midnights from the day of `since` up to `until`.
    pub fn day_starts(&self, since: Millis, until: Millis) -> Vec<(Date, Millis)> {
        let mut out = Vec::new();
        let mut day = self.day_of(since);
        loop {
            let start = self.start_of(day);
            if start >= until || out.len() > 3700 {
                break;
            }
            out.push((day, start));
            match day.tomorrow() {
                Ok(d) => day = d,
                Err(_) => break,
            }
        }
        out
    }

    /// Reads a time as users write it: epoch ms, a date (`2026-11-01`, local
    /// midnight), a month (`2026-11`), or a span ago (`7d`, `12h`).
    pub fn parse_time(&self, text: &str, now: Millis) -> Result<Millis, String> {
        let t = text.trim();
        if let Ok(ms) = t.parse::<i64>() {
            return Ok(ms);
        }
        if let Ok(d) = t.parse::<Date>() {
            return Ok(self.start_of(d));
        }
        if let Ok(d) = format!("{t}-01").parse::<Date>() {
            return Ok(self.start_of(d));
        }
        if let Ok(span) = t.parse::<gpuq_core::DurationSpec>() {
            return Ok(now - span.as_millis() as i64);
        }
        Err(format!(
            "{text:?} is not a time; write a date (2026-11-01), a month (2026-11) or a span ago (7d)"
        ))
    }

    /// The first and last instant of a month written `2026-11`.
    pub fn month(&self, text: &str) -> Result<(Millis, Millis), String> {
        let first: Date = format!("{}-01", text.trim())
            .parse()
            .map_err(|_| format!("month {text:?}: write it like 2026-11"))?;
        let next = first.checked_add(1.month()).map_err(|e| e.to_string())?;
        Ok((self.start_of(first), self.start_of(next)))
    }

    /// A wall-clock reading of `at`, for cron.
    pub fn civil(&self, at: Millis) -> gpuq_core::cron::Civil {
        let z = self.zoned(at);
        gpuq_core::cron::Civil {
            year: z.year() as i32,
            month: z.month() as u8,
            day: z.day() as u8,
            hour: z.hour() as u8,
            minute: z.minute() as u8,
            second: z.second() as u8,
        }
    }

    /// The instant of a wall-clock time (a time skipped by a DST change maps forward).
    pub fn instant(&self, c: gpuq_core::cron::Civil) -> Option<Millis> {
        let dt = jiff::civil::DateTime::new(
            c.year as i16,
            c.month as i8,
            c.day as i8,
            c.hour as i8,
            c.minute as i8,
            c.second as i8,
            0,
        )
        .ok()?;
        dt.to_zoned(self.tz.clone())
            .ok()
            .map(|z| z.timestamp().as_millisecond())
    }

    /// "2026-11-29 14:00 CST"
    pub fn show(&self, at: Millis) -> String {
        self.zoned(at).strftime("%Y-%m-%d %H:%M:%S %Z").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pricing(toml: &str) -> Result<Pricing, String> {
        let c = crate::config::Config::parse(toml)?;
        Pricing::resolve(&c.cost)
    }

    #[test]
    fn prices_come_from_the_catalog_or_the_config_and_none_is_none() {
        let p = pricing("[cost]\ngpu_hour = 1.5\ncpu_job_hour = 0.04\n").unwrap();
        assert_eq!(p.rate(2), Some(Micros(3_000_000)));
        assert_eq!(p.rate(0), Some(Micros(40_000)));
        let none = pricing("").unwrap();
        assert_eq!((none.rate(1), none.rate(0)), (None, None));
        assert!(none.basis.contains("no price"));
        let row = &Catalog::builtin().instances[0];
        let p = pricing(&format!("[cost]\ninstance = \"{}\"\n", row.key())).unwrap();
        assert_eq!(p.gpu_hour, row.per_gpu_hour(false));
        assert!(p.basis.contains(&row.source));
        let e = pricing("[cost]\ninstance = \"aws/us-east-1/p99.huge\"\n").unwrap_err();
        assert!(
            e.contains("cost.instance") && e.contains("not in the price catalog"),
            "{e}"
        );
        let e = pricing("[cost]\ntimezone = \"Mars/Olympus\"\n").unwrap_err();
        assert!(e.contains("cost.timezone"), "{e}");
    }

    #[test]
    fn periods_follow_the_local_calendar() {
        let p = pricing("[cost]\ntimezone = \"Asia/Shanghai\"\n").unwrap();
        // 2026-11-30 17:00 UTC is 2026-12-01 01:00 in Shanghai: December there.
        let at = 1_796_058_000_000;
        let (start, end) = p.period(BudgetPeriod::Month, at);
        assert_eq!(p.show(start), "2026-12-01 00:00:00 CST");
        assert_eq!(p.show(end), "2027-01-01 00:00:00 CST");
        let (monday, next) = p.period(BudgetPeriod::Week, at);
        assert_eq!(p.show(monday), "2026-11-30 00:00:00 CST");
        assert_eq!(next - monday, 7 * 86_400_000);
        assert_eq!(p.parse_time("2026-12", 0).unwrap(), start);
        assert_eq!(p.parse_time("7d", 10 * 86_400_000).unwrap(), 3 * 86_400_000);
        assert!(p
            .parse_time("last tuesday", 0)
            .unwrap_err()
            .contains("2026-11-01"));
    }
}
