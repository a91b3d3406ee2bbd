//! Cron expressions evaluated in civil (wall-clock) time.
//!
//! A [`Cron`] knows no time zones: the caller turns an instant into the wall
//! clock of the schedule's zone, asks for the next matching wall-clock time and
//! maps it back, deciding itself what a DST gap or overlap means.

use std::fmt;
use std::str::FromStr;

/// A wall-clock second in some time zone (no zone attached).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Civil {
    pub year: i32,
    /// 1-12
    pub month: u8,
    /// 1-31
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
}

impl Civil {
    /// Day of the week, 0 = Sunday .. 6 = Saturday (proleptic Gregorian).
    pub fn weekday(&self) -> u8 {
        // 1970-01-01 was a Thursday.
        let days = days_from_civil(self.year.into(), self.month.into(), self.day.into());
        (days + 4).rem_euclid(7) as u8
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm). Plain arithmetic: an
/// out-of-range month or day gives a meaningless number, never a panic.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (m, d) = (i64::from(month), i64::from(day));
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// One field's name (as error messages call it), bounds and names; a name's
/// value is its index plus `min` (JAN = 1, SUN = 0).
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

impl Field {
    const fn new(name: &'static str, min: u32, max: u32, names: &'static [&'static str]) -> Self {
        Field {
            name,
            min,
            max,
            names,
        }
    }
}

const SECOND: Field = Field::new("second", 0, 59, &[]);
const MINUTE: Field = Field::new("minute", 0, 59, &[]);
const HOUR: Field = Field::new("hour", 0, 23, &[]);
const DOM: Field = Field::new("day of month", 1, 31, &[]);
const MONTH: Field = Field::new("month", 1, 12, &MONTH_NAMES);
const DOW: Field = Field::new("day of week", 0, 7, &DAY_NAMES);

/// A parsed cron expression; each field is a bit set of the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    seconds: u64,
    minutes: u64,
    hours: u64,
    doms: u64,
    months: u64,
    /// Bits 0-6, Sunday = 0 (a 7 in the text is folded onto 0).
    dows: u64,
    /// Vixie cron: a day field whose text starts with `*` is "unrestricted",
    /// and only when both day fields are restricted does either one suffice.
    dom_star: bool,
    dow_star: bool,
    has_seconds: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cron {input:?}: {why}; write it like \"30 2 * * 1-5\" (minute hour day-of-month month day-of-week)")]
pub struct CronError {
    pub input: String,
    /// The field at fault ("minute", "day of week", ...), if it is one field.
    pub field: Option<&'static str>,
    pub why: String,
}

impl FromStr for Cron {
    type Err = CronError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |field: Option<&'static str>, why: String| CronError {
            input: input.to_string(),
            field,
            why,
        };
        let text = input.trim();
        let expanded = match text.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            m if m.starts_with('@') => {
                let why = format!("{text:?} is not a known macro (use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)");
                return Err(err(None, why));
            }
            _ => text,
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let (sec, rest) = match parts.len() {
            5 => ("0", &parts[..]),
            6 => (parts[0], &parts[1..]),
            0 => return Err(err(None, "it is empty".into())),
            n => {
                let why = format!("it has {n} fields, expected 5, or 6 with a leading second");
                return Err(err(None, why));
            }
        };
        let field = |t: &str, f: &Field| parse_field(t, f).map_err(|why| err(Some(f.name), why));
        // Fields are checked left to right, so the first error is the leftmost.
        let (seconds, minutes) = (field(sec, &SECOND)?, field(rest[0], &MINUTE)?);
        let (hours, doms, months) = (
            field(rest[1], &HOUR)?,
            field(rest[2], &DOM)?,
            field(rest[3], &MONTH)?,
        );
        let mut dows = field(rest[4], &DOW)?;
        if dows & (1 << 7) != 0 {
            dows = (dows & !(1 << 7)) | 1;
        }
        let cron = Cron {
            text: text.to_string(),
            seconds,
            minutes,
            hours,
            doms,
            months,
            dows,
            dom_star: rest[2].starts_with('*'),
            dow_star: rest[4].starts_with('*'),
            has_seconds: parts.len() == 6,
        };
        // "0 0 30 2 *" would silently never run; say so now (a leap year's
        // February counts as 29 days). A restricted weekday can always match.
        let possible = (1..=12).any(|m| {
            let last = days_in_month(2000, m);
            cron.months & (1 << m) != 0 && cron.doms & ((1u64 << (last + 1)) - 2) != 0
        });
        if cron.dow_star && !possible {
            let why = format!("day of month {} never occurs in month {}", rest[2], rest[3]);
            return Err(err(Some(DOM.name), why));
        }
        Ok(cron)
    }
}

/// Parses one field into a bit set; the error text names the field.
fn parse_field(text: &str, f: &Field) -> Result<u64, String> {
    let name = f.name;
    let mut mask = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("{name} {text:?} has an empty list item"));
        }
        let (range, step) = match item.split_once('/') {
            None => (item, None),
            Some((range, s)) => match number(s) {
                Some(n) if n > 0 => (range, Some(n)),
                _ => {
                    return Err(format!(
                        "{name} step {s:?} in {item:?} must be a number of 1 or more"
                    ))
                }
            },
        };
        let (lo, hi) = if range == "*" {
            (f.min, f.max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a, f, item)?, value(b, f, item)?);
            if a > b {
                return Err(format!("{name} range {item:?} runs backwards (ranges do not wrap around); write the smaller value first or split it in two"));
            }
            (a, b)
        } else {
            let v = value(range, f, item)?;
            if step.is_some() {
                return Err(format!(
                    "{name} {item:?} has a step but no range; write it as {v}-{}/n or */n",
                    f.max
                ));
            }
            (v, v)
        };
        for v in (lo..=hi).step_by(step.unwrap_or(1) as usize) {
            mask |= 1 << v;
        }
    }
    Ok(mask)
}

fn value(tok: &str, f: &Field, item: &str) -> Result<u32, String> {
    let name = f.name;
    let v = match f.names.iter().position(|n| n.eq_ignore_ascii_case(tok)) {
        Some(i) => i as u32 + f.min,
        None => number(tok).ok_or_else(|| match (tok.is_empty(), f.names.first()) {
            (true, _) => format!("{name} {item:?} is missing a number"),
            (false, None) => format!("{name} {tok:?} is not a number"),
            (false, Some(n)) => format!("{name} {tok:?} is not a number or a name like {n}"),
        })?,
    };
    if v < f.min || v > f.max {
        let extra = if f.max == 7 {
            " (0 and 7 are Sunday)"
        } else {
            ""
        };
        return Err(format!(
            "{name} {tok} is out of range {}-{}{extra}",
            f.min, f.max
        ));
    }
    Ok(v)
}

/// ASCII digits only (no sign, no spaces); saturates, so a huge number is
/// reported as out of range rather than "not a number".
fn number(tok: &str) -> Option<u32> {
    if tok.is_empty() {
        return None;
    }
    tok.bytes().try_fold(0u32, |acc, b| {
        b.is_ascii_digit()
            .then(|| acc.saturating_mul(10).saturating_add(u32::from(b - b'0')))
    })
}

/// The smallest value in `mask` that is `>= from`.
fn next_bit(mask: u64, from: u32) -> Option<u32> {
    let rest = if from >= 64 {
        0
    } else {
        mask & (u64::MAX << from)
    };
    (rest != 0).then(|| rest.trailing_zeros())
}

impl Cron {
    /// The first matching time strictly after `after` (seconds precision), or
    /// None if none within 5 years. An invalid `after` (day 31 of April, hour
    /// 99) is taken by its place in the (year, month, .., second) order.
    pub fn next_after(&self, after: Civil) -> Option<Civil> {
        let limit = Civil {
            year: after.year.saturating_add(5),
            ..after
        };
        let mut y = i64::from(after.year);
        let (mut mo, mut d) = (u32::from(after.month), u32::from(after.day));
        let (mut h, mut mi) = (u32::from(after.hour), u32::from(after.minute));
        let mut s = u32::from(after.second) + 1;
        if mo == 0 || d == 0 {
            // Below the first valid day: every time of that first day is later.
            (mo, d, h, mi, s) = (mo.max(1), 1, 0, 0, 0);
        }
        // Each step either accepts a field or moves to the next value its set
        // allows, resetting the finer fields, so impossible months, days,
        // hours and minutes are skipped whole. Every step moves forward.
        loop {
            if y > i64::from(limit.year) {
                return None;
            }
            match next_bit(self.months, mo) {
                None => (y, mo, d, h, mi, s) = (y + 1, 1, 1, 0, 0, 0),
                Some(m) if m != mo => (mo, d, h, mi, s) = (m, 1, 0, 0, 0),
                Some(_) if d > days_in_month(y, mo) => (mo, d, h, mi, s) = (mo + 1, 1, 0, 0, 0),
                Some(_) if !self.day_matches(y, mo, d) => (d, h, mi, s) = (d + 1, 0, 0, 0),
                Some(_) => match next_bit(self.hours, h) {
                    None => (d, h, mi, s) = (d + 1, 0, 0, 0),
                    Some(v) if v != h => (h, mi, s) = (v, 0, 0),
                    Some(_) => match next_bit(self.minutes, mi) {
                        None => (h, mi, s) = (h + 1, 0, 0),
                        Some(v) if v != mi => (mi, s) = (v, 0),
                        Some(_) => match next_bit(self.seconds, s) {
                            None => (mi, s) = (mi + 1, 0),
                            Some(v) => {
                                // All fields fit in u8 here: each is a set bit < 64.
                                let found = Civil {
                                    year: i32::try_from(y).ok()?,
                                    month: mo as u8,
                                    day: d as u8,
                                    hour: h as u8,
                                    minute: mi as u8,
                                    second: v as u8,
                                };
                                return (found <= limit).then_some(found);
                            }
                        },
                    },
                },
            }
        }
    }

    fn day_matches(&self, y: i64, mo: u32, d: u32) -> bool {
        let dom = self.doms & (1 << d) != 0;
        let wd = (days_from_civil(y, mo, d) + 4).rem_euclid(7);
        let dow = self.dows & (1 << wd) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// Whether the expression has the leading seconds field (6 fields).
    pub fn has_seconds(&self) -> bool {
        self.has_seconds
    }

    /// The expression as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A civil time from a date and a second of the day.
    fn at((y, m, d): (i64, i64, i64), sod: i64) -> Civil {
        let (year, month, day) = (y as i32, m as u8, d as u8);
        let (hour, minute, second) = ((sod / 3600) as u8, (sod / 60 % 60) as u8, (sod % 60) as u8);
        Civil {
            year,
            month,
            day,
            hour,
            minute,
            second,
        }
    }
    /// "2026-05-01 10:07:30"
    fn t(text: &str) -> Civil {
        let n: Vec<i64> = text
            .split(['-', ' ', ':'])
            .map(|x| x.parse().unwrap())
            .collect();
        at((n[0], n[1], n[2]), n[3] * 3600 + n[4] * 60 + n[5])
    }
    fn next(text: &str, after: &str) -> Option<Civil> {
        text.parse::<Cron>().unwrap().next_after(t(after))
    }

    #[test]
    fn known_schedules() {
        #[rustfmt::skip]
        let cases = [
            ("*/15 * * * *", "2026-05-01 10:07:30", "2026-05-01 10:15:00"),
            ("*/15 * * * *", "2026-05-01 23:45:00", "2026-05-02 00:00:00"),
            // Friday 9:00 -> Monday 9:00, over the weekend.
            ("0 9 * * 1-5", "2026-11-27 09:00:00", "2026-11-30 09:00:00"),
            ("0 9 * * MON-fri", "2026-11-28 08:00:00", "2026-11-30 09:00:00"),
            ("0 0 29 2 *", "2026-01-01 00:00:00", "2028-02-29 00:00:00"),
            ("0 0 31 * *", "2026-04-01 00:00:00", "2026-05-31 00:00:00"),
            // Both day fields restricted: any Friday or any 13th.
            ("0 0 13 * FRI", "2026-01-01 00:00:00", "2026-01-02 00:00:00"),
            ("0 0 13 * FRI", "2026-01-09 00:00:00", "2026-01-13 00:00:00"),
            ("0 0 13 * *", "2026-01-01 00:00:00", "2026-01-13 00:00:00"),
            ("0 0 * * FRI", "2026-01-02 00:00:00", "2026-01-09 00:00:00"),
            // "*/2" counts as unrestricted (Vixie), so both must match: odd Fridays.
            ("0 0 */2 * FRI", "2026-01-01 00:00:00", "2026-01-09 00:00:00"),
            ("@hourly", "2026-01-01 10:00:00", "2026-01-01 11:00:00"),
            ("@weekly", "2026-11-25 00:00:00", "2026-11-29 00:00:00"),
            ("@Yearly", "2026-12-31 23:59:59", "2027-01-01 00:00:00"),
            ("*/2 * * * * *", "2026-01-01 10:00:00", "2026-01-01 10:00:02"),
            ("*/2 * * * * *", "2026-12-31 23:59:59", "2027-01-01 00:00:00"),
            ("10-50/20 * * * *", "2026-01-01 10:30:00", "2026-01-01 10:50:00"),
            ("10-50/20 * * * *", "2026-01-01 10:50:00", "2026-01-01 11:10:00"),
            ("0 0 * * 7", "2026-11-25 00:00:00", "2026-11-29 00:00:00"),
            ("0 0 1 jan,Jul *", "2026-02-01 00:00:00", "2026-07-01 00:00:00"),
            // Invalid starts are placed by their order, never a panic.
            ("* * * * *", "2026-00-00 00:00:00", "2026-01-01 00:00:00"),
            ("* * * * *", "2026-02-30 99:00:00", "2026-03-01 00:00:00"),
        ];
        for (text, after, want) in cases {
            assert_eq!(next(text, after), Some(t(want)), "{text} after {after}");
        }
        // 2100 is no leap year, and 2104 is more than 5 years away.
        assert_eq!(next("0 0 29 2 *", "2097-03-01 00:00:00"), None);
        let end = t("2147483647-13-40 99:99:99");
        assert_eq!("* * * * *".parse::<Cron>().unwrap().next_after(end), None);
        let c: Cron = " */2 * * * * * ".parse().unwrap();
        assert!(c.has_seconds() && !"* * * * *".parse::<Cron>().unwrap().has_seconds());
        assert_eq!(
            (c.as_str(), c.to_string()),
            ("*/2 * * * * *", c.as_str().to_string())
        );
    }

    #[test]
    fn weekday_of_known_dates() {
        for (date, wd) in [
            ("2026-11-29", 0),
            ("2000-01-01", 6),
            ("1970-01-01", 4),
            ("2024-02-29", 4),
        ] {
            assert_eq!(t(&format!("{date} 12:00:00")).weekday(), wd, "{date}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let e = "0 25 * * *".parse::<Cron>().unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"cron "0 25 * * *": hour 25 is out of range 0-23; write it like "30 2 * * 1-5" (minute hour day-of-month month day-of-week)"#
        );
        for (text, field, needle) in [
            ("60 * * * *", "minute", "out of range 0-59"),
            ("* * 0 * *", "day of month", "out of range 1-31"),
            ("* * * 13 *", "month", "out of range 1-12"),
            ("* * * FOO *", "month", "not a number or a name"),
            ("* * * * 8", "day of week", "out of range 0-7"),
            ("60 * * * * *", "second", "out of range 0-59"),
            ("5-1 * * * *", "minute", "backwards"),
            ("*/0 * * * *", "minute", "step"),
            ("1,,2 * * * *", "minute", "empty list item"),
            ("1- * * * *", "minute", "missing a number"),
            ("5/10 * * * *", "minute", "no range"),
            ("* 99999999999 * * *", "hour", "out of range"),
            ("0 0 30 2 *", "day of month", "never occurs"),
            ("99 * * * 8", "minute", "out of range"),
        ] {
            let e = text.parse::<Cron>().unwrap_err();
            assert_eq!(e.field, Some(field), "{e}");
            assert!(e.why.starts_with(field) && e.why.contains(needle), "{e}");
        }
        for text in ["", "  ", "* * * *", "* * * * * * *", "@reboot"] {
            assert_eq!(text.parse::<Cron>().unwrap_err().field, None, "{text:?}");
        }
    }

    /// What a generated expression should allow, computed without the parser.
    #[derive(Debug)]
    struct Expect {
        text: String,
        /// second, minute, hour, day of month, month, day of week
        sets: [Vec<bool>; 6],
        dom_star: bool,
        dow_star: bool,
        seconds: bool,
    }

    /// The naive checker: one civil time against the expected sets.
    fn matches(e: &Expect, t: Civil) -> bool {
        let has = |i: usize, v: u8| e.sets[i][usize::from(v)];
        has(0, t.second) && has(1, t.minute) && has(2, t.hour) && day_matches(e, t)
    }
    fn day_matches(e: &Expect, t: Civil) -> bool {
        let wd = usize::from(t.weekday());
        let (dom, dow) = (
            e.sets[3][usize::from(t.day)],
            e.sets[5][wd] || (wd == 0 && e.sets[5][7]),
        );
        let day = if e.dom_star || e.dow_star {
            dom && dow
        } else {
            dom || dow
        };
        e.sets[4][usize::from(t.month)] && day
    }

    /// A random field: its text, the values it allows, and whether it starts with `*`.
    fn field(
        min: u32,
        max: u32,
        names: &'static [&'static str],
    ) -> impl Strategy<Value = (String, Vec<bool>, bool)> {
        let item = (0u8..5, min..=max, min..=max, 1u32..20, any::<bool>());
        proptest::collection::vec(item, 1..4).prop_map(move |items| {
            let mut set = vec![false; max as usize + 1];
            let tok = |v: u32, named: bool| match names.get((v - min) as usize) {
                Some(n) if named => n.to_lowercase(),
                _ => v.to_string(),
            };
            let texts: Vec<String> = items
                .iter()
                .map(|&(kind, a, b, n, named)| {
                    let (lo, hi) = (a.min(b), a.max(b));
                    let (text, lo, hi, step) = match kind {
                        0 => ("*".to_string(), min, max, 1),
                        1 => (format!("*/{n}"), min, max, n),
                        2 => (tok(lo, named), lo, lo, 1),
                        3 => (format!("{}-{}", tok(lo, named), tok(hi, named)), lo, hi, 1),
                        _ => (
                            format!("{}-{}/{n}", tok(lo, named), tok(hi, named)),
                            lo,
                            hi,
                            n,
                        ),
                    };
                    (lo..=hi)
                        .step_by(step as usize)
                        .for_each(|v| set[v as usize] = true);
                    text
                })
                .collect();
            (texts.join(","), set, items[0].0 <= 1)
        })
    }

    fn expr() -> impl Strategy<Value = Expect> {
        let days = (
            field(1, 31, &[]),
            field(1, 12, &MONTH_NAMES),
            field(0, 7, &DAY_NAMES),
        );
        let times = (
            field(0, 59, &[]),
            field(0, 59, &[]),
            field(0, 23, &[]),
            any::<bool>(),
        );
        (times, days).prop_map(|((s, mi, h, seconds), (dom, mo, dow))| {
            let five = format!("{} {} {} {} {}", mi.0, h.0, dom.0, mo.0, dow.0);
            let zero = (0..60).map(|v| v == 0).collect();
            let (text, s) = if seconds {
                (format!("{} {five}", s.0), s.1)
            } else {
                (five, zero)
            };
            let sets = [s, mi.1, h.1, dom.1, mo.1, dow.1];
            Expect {
                text,
                sets,
                dom_star: dom.2,
                dow_star: dow.2,
                seconds,
            }
        })
    }

    fn secs(t: Civil) -> i64 {
        let days = days_from_civil(t.year.into(), t.month.into(), t.day.into());
        days * 86_400 + i64::from(t.hour) * 3600 + i64::from(t.minute) * 60 + i64::from(t.second)
    }

    /// Inverse of `secs` (Hinnant's civil_from_days).
    fn civil(s: i64) -> Civil {
        let (z, sod) = (s.div_euclid(86_400) + 719_468, s.rem_euclid(86_400));
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let (d, m) = (
            doy - (153 * mp + 2) / 5 + 1,
            if mp < 10 { mp + 3 } else { mp - 9 },
        );
        at((yoe + era * 400 + i64::from(m <= 2), m, d), sod)
    }

    proptest! {
        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}", near in "[0-9a-zA-Z*/, @-]{0,30}") {
            for s in [text, near] {
                if let Ok(c) = s.parse::<Cron>() {
                    let _ = c.next_after(t("2026-01-01 00:00:00"));
                }
            }
        }

        #[test]
        fn weekday_advances_daily(day in -1_000_000i64..1_000_000) {
            let (a, b) = (civil(day * 86_400), civil((day + 1) * 86_400));
            prop_assert_eq!(secs(a), day * 86_400);
            prop_assert_eq!((a.weekday() + 1) % 7, b.weekday());
        }

        /// next_after finds a matching time after the start, and nothing
        /// matches in between: every whole day between is checked at day
        /// level, and near answers second by second (minute by minute).
        #[test]
        fn next_after_is_the_first_match(e in expr(), start_s in secs(t("2000-01-01 00:00:00"))..secs(t("2100-01-01 00:00:00"))) {
            let start = civil(start_s);
            let cron = match e.text.parse::<Cron>() {
                Ok(c) => c,
                Err(err) => {
                    // The only valid-syntax rejection: a day that never occurs.
                    prop_assert!(e.dow_star && err.why.contains("never occurs"), "{}", err);
                    return Ok(());
                }
            };
            let (step, window) = if e.seconds { (1, 6 * 3600) } else { (60, 3 * 86_400) };
            let first = if e.seconds { start_s + 1 } else { (start_s.div_euclid(60) + 1) * 60 };
            let end = match cron.next_after(start) {
                Some(r) => {
                    prop_assert!(r > start && matches(&e, r), "{} after {:?} gave {:?}", e.text, start, r);
                    secs(r)
                }
                None => first + window,
            };
            let day = |s: i64| s.div_euclid(86_400);
            for d in day(start_s) + 1..day(end) {
                // Every time field allows something, so a matching day would hold a match.
                prop_assert!(!day_matches(&e, civil(d * 86_400)), "{} skipped {:?}", e.text, civil(d * 86_400));
            }
            if end - first <= window {
                for x in (first..end).step_by(step) {
                    prop_assert!(!matches(&e, civil(x)), "{} after {:?} skipped {:?}", e.text, start, civil(x));
                }
            }
        }
    }
}
