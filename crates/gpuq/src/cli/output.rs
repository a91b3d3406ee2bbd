//! Human output: aligned tables, state colours on a terminal, relative times;
//! and the writers every command prints through.

use gpuq_core::{JobState, Millis};
use std::io::{IsTerminal, Write};

pub mod safe;

/// `println!` for a command's output: a closed pipe (`gpuq ls | head -1`) ends
/// the process quietly, as it ends coreutils, instead of panicking.
macro_rules! outln {
    () => {
        $crate::cli::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` with the same care as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics: a failed write to stderr has nowhere to be reported.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Every line a command prints is cleaned here, whatever it holds: an API
/// string a command forgot to clean still cannot act on the terminal.
pub fn write_stdout(text: std::fmt::Arguments) {
    let keep = safe::Keep {
        lines: true,
        returns: false,
        palette: colour_enabled(),
    };
    let result = match text.as_str() {
        Some(s) => std::io::stdout()
            .lock()
            .write_all(safe::clean(s, keep).as_bytes()),
        None => std::io::stdout()
            .lock()
            .write_all(safe::clean(&text.to_string(), keep).as_bytes()),
    };
    if let Err(e) = result {
        output_failed(e);
    }
}

/// Raw bytes (a log), flushed so a pipe sees them at once.
pub fn write_stdout_bytes(data: &[u8]) {
    let result = {
        let mut out = std::io::stdout().lock();
        out.write_all(data).and_then(|_| out.flush())
    };
    if let Err(e) = result {
        output_failed(e);
    }
}

pub fn write_stderr(text: std::fmt::Arguments) {
    let keep = safe::Keep {
        lines: true,
        returns: true,
        palette: false,
    };
    let text = text.to_string();
    let _ = std::io::stderr()
        .lock()
        .write_all(safe::clean(&text, keep).as_bytes());
}

/// Stdout is gone. A closed pipe ends the process by SIGPIPE, exactly as it ends
/// `yes | head -1` (the shell sees 141 and says nothing); any other failure
/// (a full disk) is an error.
fn output_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: plain syscalls; the default action of SIGPIPE terminates the process.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
        std::process::exit(141);
    }
    write_stderr(format_args!("gpuq: cannot write the output: {e}\n"));
    std::process::exit(1);
}

pub fn colour_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none())
}

pub fn paint_state(state: JobState, colour: bool) -> String {
    if !colour {
        return state.to_string();
    }
    let code = match state {
        JobState::Queued => "33",
        JobState::Running => "36",
        JobState::Succeeded => "32",
        JobState::Failed | JobState::Lost => "31",
        JobState::Cancelled | JobState::Preempted => "35",
    };
    format!("\x1b[{code}m{state}\x1b[0m")
}

/// Width of text as a terminal shows it, ignoring colour escapes.
fn visible_width(s: &str) -> usize {
    let mut width = 0;
    let mut in_escape = false;
    for c in s.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, _) => width += 1,
        }
    }
    width
}

/// Each column's width: its widest cell (or header).
pub fn column_widths(header: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(header.len()) {
            widths[i] = widths[i].max(visible_width(cell));
        }
    }
    widths
}

/// The terminal's width in columns, when stdout is a terminal.
pub fn terminal_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    // SAFETY: TIOCGWINSZ fills the struct we own.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    Some(if ok && size.ws_col > 0 {
        size.ws_col as usize
    } else {
        80
    })
}

/// Prints rows under a header, columns padded to the widest cell; the last column is not padded.
/// A value shown on one line (a cell, a field of `show`): cleaned (see
/// [`safe`]), newlines escaped, gpuq's own colours kept.
pub fn field(s: &str) -> std::borrow::Cow<'_, str> {
    let keep = safe::Keep {
        palette: colour_enabled(),
        ..safe::Keep::default()
    };
    safe::clean(s, keep)
}

/// Every cell is shown on one line, cleaned (see [`field`]).
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| field(cell).into_owned()).collect())
        .collect();
    let rows = &rows[..];
    let widths = column_widths(header, rows);
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < cells.len() {
                out.push_str(&" ".repeat(widths[i] - visible_width(cell) + 2));
            }
        }
        outln!("{}", out.trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// "12s ago", "3m ago", "2h ago", "4d ago".
pub fn ago(at: Millis, now: Millis) -> String {
    format!("{} ago", span((now - at).max(0)))
}

/// A compact duration: "850ms", "12s", "3m04s", "2h05m", "4d03h".
pub fn span(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

pub fn gpu_list(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `--json`: the exact values, every control character escaped the JSON way.
pub fn print_json<T: serde::Serialize>(value: &T) {
    let mut text = serde_json::to_string_pretty(value).expect("API types serialize");
    text.push('\n');
    write_stdout_bytes(safe::json(&text).as_bytes());
}

/// One compact JSON object per line (streams), flushed so pipes see it at once.
pub fn print_json_line<T: serde::Serialize>(value: &T) {
    let mut line = serde_json::to_string(value).expect("API types serialize");
    line.push('\n');
    write_stdout_bytes(safe::json(&line).as_bytes());
}

/// A figure with `places` decimals, never "-0.00": a rounding error below zero is zero.
pub fn fixed(x: f64, places: usize) -> String {
    let text = format!("{x:.places$}");
    match text.strip_prefix('-') {
        Some(digits) if digits.chars().all(|c| c == '0' || c == '.') => digits.to_string(),
        _ => text,
    }
}

/// A duration in words: "7 days", "1 day 12 hours", "30 minutes".
pub fn long_duration(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "day"),
        (3_600_000, "hour"),
        (60_000, "minute"),
        (1000, "second"),
    ];
    let mut left = ms;
    let mut parts = Vec::new();
    for (size, unit) in UNITS {
        if left >= size {
            parts.push(gpuq_core::plural(left / size, unit));
            left %= size;
        }
    }
    if parts.is_empty() {
        return format!("{ms} ms");
    }
    parts.join(" ")
}

/// Fits a sentence into `max` characters, dropping the least telling words
/// first: parenthesised details, then whole clauses from the end (marked
/// " …"); a first clause still too long is cut.
pub fn fit(text: &str, max: usize) -> String {
    let count = |s: &str| s.chars().count();
    if count(text) <= max {
        return text.to_string();
    }
    let plain = without_parentheses(text);
    if count(&plain) <= max {
        return plain;
    }
    let mut kept = String::new();
    for clause in plain.split("; ") {
        let longer = if kept.is_empty() {
            clause.to_string()
        } else {
            format!("{kept}; {clause}")
        };
        if count(&longer) + 2 > max {
            break;
        }
        kept = longer;
    }
    if kept.is_empty() {
        shorten(&plain, max)
    } else {
        kept + " …"
    }
}

/// "jobs 12 (alice, no time limit) and 13" → "jobs 12 and 13".
fn without_parentheses(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                if out.ends_with(' ') {
                    out.pop();
                }
            }
            ')' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Cuts text to `max` characters with an ellipsis.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(850), "850ms");
        assert_eq!(span(12_000), "12s");
        assert_eq!(span(184_000), "3m04s");
        assert_eq!(span(7_500_000), "2h05m");
        assert_eq!(span(4 * 86_400_000 + 3 * 3_600_000), "4d03h");
    }

    #[test]
    fn a_long_reason_keeps_its_telling_words() {
        let why = "waits for 2 GPUs: all 4 are in use by jobs 12 (alice, ends by 14:05:00 at its time limit) \
                   and 13 (bob, no time limit); it is next, as soon as GPUs free up";
        assert_eq!(fit(why, 200), why);
        assert_eq!(
            fit(why, 90),
            "waits for 2 GPUs: all 4 are in use by jobs 12 and 13; it is next, as soon as GPUs free up"
        );
        assert_eq!(
            fit(why, 60),
            "waits for 2 GPUs: all 4 are in use by jobs 12 and 13 …"
        );
        assert_eq!(fit(why, 20).chars().count(), 20);
    }

    #[test]
    fn figures_read_naturally() {
        assert_eq!(fixed(-0.001, 2), "0.00");
        assert_eq!(fixed(-0.0, 2), "0.00");
        assert_eq!(fixed(-1.5, 2), "-1.50");
        assert_eq!(fixed(2.345, 1), "2.3");
        assert_eq!(long_duration(7 * 86_400_000), "7 days");
        assert_eq!(long_duration(86_400_000 + 12 * 3_600_000), "1 day 12 hours");
        assert_eq!(long_duration(60_000), "1 minute");
        assert_eq!(long_duration(500), "500 ms");
    }

    #[test]
    fn colour_codes_do_not_count_as_width() {
        assert_eq!(
            visible_width(&paint_state(JobState::Running, true)),
            "running".len()
        );
    }
}
