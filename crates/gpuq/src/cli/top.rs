//! `gpuq top`: a live view of every GPU and running job, like nvitop.
//!
//! The view is a pure function of [`View`] (drawn into any ratatui backend, so
//! tests draw into a `TestBackend`); keys change the view; the loop refreshes
//! the data every second, and at once when the event stream reports a change.

use super::output::{safe, span};
use super::{CliError, CmdResult};
use gpuq_api::home::now_ms;
use gpuq_api::{Client, GpuHistory, GpuStatus};
use gpuq_core::{Job, JobId, JobState};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Gauge, Paragraph, Row, Sparkline, Table, Wrap};
use ratatui::Frame;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Id,
    User,
    Gpus,
    Util,
    Memory,
    Runtime,
}

impl SortKey {
    fn next(self) -> Self {
        use SortKey::*;
        match self {
            Id => User,
            User => Gpus,
            Gpus => Util,
            Util => Memory,
            Memory => Runtime,
            Runtime => Id,
        }
    }
    fn name(self) -> &'static str {
        match self {
            SortKey::Id => "id",
            SortKey::User => "user",
            SortKey::Gpus => "gpus",
            SortKey::Util => "util",
            SortKey::Memory => "memory",
            SortKey::Runtime => "runtime",
        }
    }
}

/// Everything the screen shows.
pub struct View {
    pub gpus: Vec<GpuStatus>,
    pub history: Vec<GpuHistory>,
    pub jobs: Vec<Job>,
    pub now: i64,
    pub sort: SortKey,
    pub user_filter: Option<String>,
    /// Typing a user name to filter by (after `u`).
    pub typing: Option<String>,
    pub selected: usize,
    /// A job's log tail, shown instead of the job table.
    pub log: Option<(JobId, String)>,
}

/// A job row: the job and its GPUs' current utilisation and memory.
pub struct JobRow<'a> {
    pub job: &'a Job,
    pub util: Option<f64>,
    pub memory_mib: Option<u64>,
    pub runtime_ms: i64,
}

impl View {
    pub fn new() -> Self {
        Self {
            gpus: vec![],
            history: vec![],
            jobs: vec![],
            now: 0,
            sort: SortKey::Id,
            user_filter: None,
            typing: None,
            selected: 0,
            log: None,
        }
    }

    /// Running jobs after the filter, in the chosen order.
    pub fn rows(&self) -> Vec<JobRow<'_>> {
        let mut rows: Vec<JobRow> = self
            .jobs
            .iter()
            .filter(|j| j.state == JobState::Running)
            .filter(|j| self.user_filter.as_ref().is_none_or(|u| &j.user == u))
            .map(|job| {
                let held: Vec<&GpuStatus> =
                    self.gpus.iter().filter(|g| g.job == Some(job.id)).collect();
                let utils: Vec<f64> = held
                    .iter()
                    .filter_map(|g| g.reading.as_ref()?.util_percent)
                    .collect();
                let from_processes: u64 = held
                    .iter()
                    .flat_map(|g| g.processes.iter())
                    .filter(|p| p.job == Some(job.id))
                    .filter_map(|p| p.memory_mib)
                    .sum();
                let from_gpus: Option<u64> = held
                    .iter()
                    .map(|g| g.reading.as_ref()?.memory_used_mib)
                    .sum();
                JobRow {
                    job,
                    util: (!utils.is_empty())
                        .then(|| utils.iter().sum::<f64>() / utils.len() as f64),
                    memory_mib: if from_processes > 0 {
                        Some(from_processes)
                    } else {
                        from_gpus
                    },
                    runtime_ms: job.started_at.map_or(0, |s| self.now - s),
                }
            })
            .collect();
        let f = |x: Option<f64>| x.unwrap_or(-1.0);
        match self.sort {
            SortKey::Id => rows.sort_by_key(|r| r.job.id),
            SortKey::User => {
                rows.sort_by(|a, b| a.job.user.cmp(&b.job.user).then(a.job.id.cmp(&b.job.id)))
            }
            SortKey::Gpus => rows.sort_by_key(|r| std::cmp::Reverse(r.job.gpus.len())),
            SortKey::Util => rows.sort_by(|a, b| f(b.util).total_cmp(&f(a.util))),
            SortKey::Memory => rows.sort_by_key(|r| std::cmp::Reverse(r.memory_mib)),
            SortKey::Runtime => rows.sort_by_key(|r| std::cmp::Reverse(r.runtime_ms)),
        }
        rows
    }

    pub fn selected_job(&self) -> Option<JobId> {
        self.rows().get(self.selected).map(|r| r.job.id)
    }
}

impl Default for View {
    fn default() -> Self {
        Self::new()
    }
}

/// What a key asks of the loop.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    OpenLog(JobId),
}

pub fn on_key(view: &mut View, key: KeyCode) -> Action {
    if let Some(text) = &mut view.typing {
        match key {
            KeyCode::Enter => {
                let name = text.trim().to_string();
                view.user_filter = (!name.is_empty()).then_some(name);
                view.typing = None;
                view.selected = 0;
            }
            KeyCode::Esc => view.typing = None,
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) => text.push(c),
            _ => {}
        }
        return Action::None;
    }
    if view.log.is_some() {
        if matches!(key, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
            view.log = None;
        }
        return Action::None;
    }
    match key {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('s') => {
            view.sort = view.sort.next();
            Action::None
        }
        KeyCode::Char('u') => {
            view.typing = Some(String::new());
            Action::None
        }
        KeyCode::Char('a') => {
            view.user_filter = None;
            Action::None
        }
        KeyCode::Down | KeyCode::Char('j') => {
            let n = view.rows().len();
            view.selected = (view.selected + 1).min(n.saturating_sub(1));
            Action::None
        }
        KeyCode::Up | KeyCode::Char('k') => {
            view.selected = view.selected.saturating_sub(1);
            Action::None
        }
        KeyCode::Enter | KeyCode::Char('l') => match view.selected_job() {
            Some(id) => Action::OpenLog(id),
            None => Action::None,
        },
        _ => Action::None,
    }
}

pub fn draw(frame: &mut Frame, view: &View) {
    let gpu_height = (view.gpus.len() as u16).clamp(1, 16) + 2;
    let areas = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(gpu_height),
            Constraint::Min(3),
            Constraint::Length(1),
        ])
        .split(frame.area());
    draw_gpus(frame, areas[0], view);
    match &view.log {
        Some((id, text)) => {
            let lines = areas[1].height.saturating_sub(2) as usize;
            let tail: Vec<&str> = text.lines().collect();
            let shown = tail[tail.len().saturating_sub(lines)..].join("\n");
            frame.render_widget(
                Paragraph::new(shown).wrap(Wrap { trim: false }).block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title(format!(" log of job {id} (Esc: back) ")),
                ),
                areas[1],
            );
        }
        None => draw_jobs(frame, areas[1], view),
    }
    let help = match &view.typing {
        Some(t) => format!("filter by user: {t}_   (Enter: apply, Esc: cancel)"),
        None => format!(
            "q quit  s sort ({})  u filter by user{}  a all users  ↑↓ select  Enter log",
            view.sort.name(),
            view.user_filter
                .as_ref()
                .map(|u| format!(" [{u}]"))
                .unwrap_or_default()
        ),
    };
    frame.render_widget(
        Paragraph::new(help).style(Style::default().add_modifier(Modifier::REVERSED)),
        areas[2],
    );
}

fn draw_gpus(frame: &mut Frame, area: Rect, view: &View) {
    let block = Block::default().borders(Borders::ALL).title(" GPUs ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if view.gpus.is_empty() {
        frame.render_widget(Paragraph::new("no GPUs on this node"), inner);
        return;
    }
    for (i, g) in view.gpus.iter().take(inner.height as usize).enumerate() {
        let row = Rect {
            y: inner.y + i as u16,
            height: 1,
            ..inner
        };
        let cols = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([
                Constraint::Length(34),
                Constraint::Length(22),
                Constraint::Min(10),
                Constraint::Length(22),
            ])
            .split(row);
        let r = g.reading.as_ref();
        let util = r.and_then(|r| r.util_percent).unwrap_or(0.0);
        let label = format!(
            "{:>2} {:<16} {:>3.0}% {:>3}C",
            g.index,
            shorten(&g.model, 16),
            util,
            r.and_then(|r| r.temperature_c)
                .map(|t| t.to_string())
                .unwrap_or("-".into())
        );
        frame.render_widget(Paragraph::new(label), cols[0]);
        let mem = r.and_then(|r| r.memory_used_mib).unwrap_or(0);
        let ratio = if g.memory_mib > 0 {
            (mem as f64 / g.memory_mib as f64).clamp(0.0, 1.0)
        } else {
            0.0
        };
        frame.render_widget(
            Gauge::default()
                .ratio(ratio)
                .label(format!("{}/{}G", mem / 1024, g.memory_mib / 1024))
                .gauge_style(Style::default().fg(if ratio > 0.95 {
                    Color::Red
                } else {
                    Color::Cyan
                })),
            cols[1],
        );
        let spark: Vec<u64> = view
            .history
            .iter()
            .find(|h| h.index == g.index)
            .map(|h| {
                h.points
                    .iter()
                    .map(|p| p.util_percent.unwrap_or(0.0).round() as u64)
                    .collect()
            })
            .unwrap_or_default();
        let width = cols[2].width as usize;
        let spark = &spark[spark.len().saturating_sub(width)..];
        frame.render_widget(
            Sparkline::default()
                .data(spark)
                .max(100)
                .style(Style::default().fg(Color::Green)),
            cols[2],
        );
        let holder = match (g.job, &g.user) {
            (Some(j), Some(u)) => format!(" job {j} {}", safe::one_line(u)),
            _ => " free".into(),
        };
        frame.render_widget(Paragraph::new(holder), cols[3]);
    }
}

fn draw_jobs(frame: &mut Frame, area: Rect, view: &View) {
    let rows = view.rows();
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let style = if i == view.selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else {
                Style::default()
            };
            Row::new(vec![
                Cell::from(r.job.id.to_string()),
                Cell::from(safe::one_line(&r.job.user).into_owned()),
                Cell::from(super::output::gpu_list(&r.job.gpus)),
                Cell::from(r.util.map(|u| format!("{u:.0}%")).unwrap_or("-".into())),
                Cell::from(
                    r.memory_mib
                        .map(|m| format!("{m} MiB"))
                        .unwrap_or("-".into()),
                ),
                Cell::from(ram_text(r.job.host_usage.as_ref())),
                Cell::from(cpu_text(r.job.host_usage.as_ref(), r.runtime_ms)),
                Cell::from(span(r.runtime_ms)),
                Cell::from(shorten(r.job.name.as_deref().unwrap_or(&r.job.command), 40)),
            ])
            .style(style)
        })
        .collect();
    let queued = view
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Queued)
        .count();
    let title = format!(" {} running, {queued} queued ", rows.len());
    let table = Table::new(
        body,
        [
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(11),
            Constraint::Length(13),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Min(10),
        ],
    )
    .header(
        Row::new(vec![
            "JOB", "USER", "GPUS", "UTIL", "GPU MEM", "RAM PEAK", "CPU", "RUNTIME", "NAME",
        ])
        .style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(Line::from(vec![Span::raw(title)])),
    );
    frame.render_widget(table, area);
}

/// A running job's memory as its cgroup counts it: the peak so far over its
/// limit ("9.1G/64G"), "OOM" once the kernel killed a process of it there;
/// "-" when it runs unconfined.
fn ram_text(u: Option<&gpuq_core::job::HostUsage>) -> String {
    let Some(u) = u else { return "-".into() };
    let g = |b: u64| {
        let gib = b as f64 / (1u64 << 30) as f64;
        if gib >= 1.0 {
            let t = format!("{gib:.1}");
            format!("{}G", t.strip_suffix(".0").unwrap_or(&t))
        } else {
            format!("{}M", b >> 20)
        }
    };
    let mut t = match (u.memory_peak_bytes, u.memory_limit_bytes) {
        (Some(p), Some(l)) => format!("{}/{}", g(p), g(l)),
        (Some(p), None) => g(p),
        (None, Some(l)) => format!("?/{}", g(l)),
        (None, None) => "-".into(),
    };
    if u.oom_killed {
        t.push_str(" OOM");
    }
    t
}

/// Cores busy on average since the attempt began, over the cores it was
/// given ("2.1/8"); "-" when unconfined or not yet measurable.
fn cpu_text(u: Option<&gpuq_core::job::HostUsage>, runtime_ms: i64) -> String {
    let Some(cpu) = u.and_then(|u| u.cpu_seconds) else {
        return "-".into();
    };
    if runtime_ms <= 0 {
        return "-".into();
    }
    let busy = format!("{:.1}", cpu / (runtime_ms as f64 / 1000.0));
    match u.and_then(|u| u.cpus) {
        Some(n) => format!("{busy}/{n}"),
        None => busy,
    }
}

/// Every string of a job the table shows passes here: cleaned, then cut.
fn shorten(s: &str, max: usize) -> String {
    super::output::shorten(&safe::one_line(s), max)
}

/// Reads everything the view shows.
async fn refresh(client: &Client, view: &mut View) -> Result<(), gpuq_api::ApiError> {
    let now = now_ms();
    view.gpus = client.gpus().await?;
    view.history = client.gpu_history(now - 10 * 60_000).await?;
    let running = client
        .list(&[JobState::Running, JobState::Queued], Some(5000))
        .await?;
    view.jobs = running;
    view.now = now;
    let n = view.rows().len();
    view.selected = view.selected.min(n.saturating_sub(1));
    Ok(())
}

pub async fn run(client: &Client, args: TopArgs) -> CmdResult {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(CliError::usage(
            "gpuq top needs a terminal; for scripts use `gpuq gpus --json` or `gpuq events --json`",
        ));
    }
    let interval = Duration::from_secs_f64(args.interval.clamp(0.1, 3600.0));
    // The event stream marks the view stale on any job change or alert.
    let stale = Arc::new(Notify::new());
    let follower = {
        let client = client.clone();
        let stale = stale.clone();
        tokio::spawn(async move {
            let _ = client
                .follow_events(None, None, |_, _| {
                    stale.notify_one();
                    true
                })
                .await;
        })
    };
    let mut terminal = ratatui::init();
    let mut keys = KeyReader::start();
    let result = show(client, &mut terminal, &mut keys.events, &stale, interval).await;
    keys.stop();
    ratatui::restore();
    follower.abort();
    result
}

/// The loop: refresh when due or when the event stream says something changed,
/// redraw, and act on keys as they come.
async fn show(
    client: &Client,
    terminal: &mut ratatui::DefaultTerminal,
    events: &mut mpsc::UnboundedReceiver<Event>,
    stale: &Notify,
    interval: Duration,
) -> CmdResult {
    let mut view = View::new();
    let mut due = true;
    let mut next = tokio::time::Instant::now();
    loop {
        if due {
            refresh(client, &mut view).await?;
            due = false;
            next = tokio::time::Instant::now() + interval;
        }
        terminal
            .draw(|f| draw(f, &view))
            .map_err(|e| CliError::failure(format!("cannot draw: {e}")))?;
        let event = tokio::select! {
            event = events.recv() => event,
            _ = stale.notified() => { due = true; continue; }
            _ = tokio::time::sleep_until(next) => { due = true; continue; }
        };
        let Some(event) = event else {
            return Err(CliError::failure("the terminal's input ended"));
        };
        let Event::Key(k) = event else { continue }; // a resize: redraw
        if k.kind != KeyEventKind::Press {
            continue;
        }
        match on_key(&mut view, k.code) {
            Action::Quit => return Ok(0),
            Action::OpenLog(id) => {
                let text = match client.log(id, None, 0, false).await {
                    // Escapes in a log would act on the terminal under the TUI.
                    Ok(chunk) => safe::text(&String::from_utf8_lossy(&chunk.data)).into_owned(),
                    Err(e) => format!("cannot read the log: {e}"),
                };
                view.log = Some((id, text));
            }
            Action::None => {}
        }
    }
}

/// Terminal input on a thread of its own: crossterm reads block, and the
/// client's runtime is single-threaded, so reading there would stall it.
struct KeyReader {
    events: mpsc::UnboundedReceiver<Event>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl KeyReader {
    fn start() -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Polls briefly so a stop request is seen within 100 ms.
                while !stop.load(Ordering::Relaxed) {
                    match event::poll(Duration::from_millis(100)) {
                        Ok(false) => continue,
                        Ok(true) => {}
                        Err(_) => break,
                    }
                    let Ok(e) = event::read() else { break };
                    if tx.send(e).is_err() {
                        break;
                    }
                }
            })
        };
        Self {
            events,
            stop,
            thread,
        }
    }

    /// Waits for the thread, so no key is read after the terminal is restored.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuq_core::telemetry::GpuReading;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn job(id: JobId, user: &str, gpus: Vec<u32>, started: i64) -> Job {
        let spec: gpuq_core::JobSpec =
            serde_json::from_value(serde_json::json!({"command": ["python", "train.py"]})).unwrap();
        Job {
            id,
            name: Some(format!("run-{id}")),
            user: user.into(),
            project: None,
            state: JobState::Running,
            priority: Default::default(),
            gpus_requested: gpus.len() as u32,
            gpus,
            node: Some("n1".into()),
            command: "python train.py".into(),
            cwd: "/".into(),
            attempt: 1,
            failures: 0,
            held_by: None,
            eligible_at: None,
            exit_code: None,
            signal: None,
            reason: None,
            submitted_at: 0,
            started_at: Some(started),
            ended_at: None,
            spec,
            cost: None,
            array_id: None,
            array_index: None,
            array_limit: None,
            host_usage: None,
        }
    }

    fn gpu(index: u32, holder: Option<(JobId, &str)>, util: f64, mem: u64) -> GpuStatus {
        GpuStatus {
            node: "n1".into(),
            index,
            uuid: format!("GPU-{index}"),
            model: "Simulated A100".into(),
            memory_mib: 81920,
            job: holder.map(|h| h.0),
            user: holder.map(|h| h.1.to_string()),
            job_name: None,
            reading: Some(GpuReading {
                index,
                util_percent: Some(util),
                memory_used_mib: Some(mem),
                temperature_c: Some(55),
                ..Default::default()
            }),
            processes: vec![],
        }
    }

    fn view() -> View {
        let mut v = View::new();
        v.now = 3_600_000;
        v.gpus = vec![
            gpu(0, Some((7, "ana")), 95.0, 40960),
            gpu(1, Some((9, "bo")), 0.0, 1024),
            gpu(2, None, 0.0, 0),
        ];
        v.jobs = vec![job(7, "ana", vec![0], 0), job(9, "bo", vec![1], 3_000_000)];
        v
    }

    fn screen(v: &View) -> String {
        let mut t = Terminal::new(TestBackend::new(110, 16)).unwrap();
        t.draw(|f| draw(f, v)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn shows_gpus_holders_and_jobs_with_their_usage() {
        let s = screen(&view());
        assert!(s.contains("job 7 ana"), "{s}");
        assert!(s.contains(" free"), "{s}");
        assert!(s.contains("2 running, 0 queued"), "{s}");
        let ana = s.lines().find(|l| l.contains("run-7")).expect("job 7 row");
        assert!(
            ana.contains("95%") && ana.contains("40960 MiB") && ana.contains("1h"),
            "{ana}"
        );
    }

    #[test]
    fn a_confined_jobs_memory_and_cores_are_shown_beside_its_gpus() {
        let mut v = view();
        v.jobs[0].host_usage = Some(gpuq_core::job::HostUsage {
            oom_killed: false,
            memory_peak_bytes: Some(9 * (1 << 30) + (1 << 30) / 10),
            memory_limit_bytes: Some(64 << 30),
            // An hour at 2.1 cores of the 8 it was given.
            cpu_seconds: Some(2.1 * 3600.0),
            cpus: Some(8),
        });
        v.jobs[1].host_usage = Some(gpuq_core::job::HostUsage {
            oom_killed: true,
            memory_peak_bytes: Some(512 << 20),
            memory_limit_bytes: Some(512 << 20),
            ..Default::default()
        });
        let s = screen(&v);
        assert!(s.contains("RAM PEAK") && s.contains("CPU"), "{s}");
        let ana = s.lines().find(|l| l.contains("run-7")).expect("job 7 row");
        assert!(ana.contains("9.1G/64G") && ana.contains("2.1/8"), "{ana}");
        let bo = s.lines().find(|l| l.contains("run-9")).expect("job 9 row");
        assert!(bo.contains("512M/512M OOM"), "{bo}");
    }

    #[test]
    fn a_hostile_name_is_drawn_escaped() {
        let mut v = view();
        v.jobs[0].name = Some("\x1b]0;T\x07\u{202e}x".into());
        let s = screen(&v);
        assert!(s.contains("\\x1b]0;T\\x07\\u{202e}x"), "{s}");
        assert!(!s.contains(['\x1b', '\x07', '\u{202e}']), "{s:?}");
    }

    #[test]
    fn keys_sort_filter_open_a_log_and_quit() {
        let mut v = view();
        assert_eq!(v.rows()[0].job.id, 7);
        on_key(&mut v, KeyCode::Char('s')); // user
        on_key(&mut v, KeyCode::Char('s')); // gpus
        on_key(&mut v, KeyCode::Char('s')); // util
        assert_eq!(v.sort, SortKey::Util);
        assert_eq!(v.rows()[0].job.id, 7, "busiest first");
        on_key(&mut v, KeyCode::Char('s')); // memory
        on_key(&mut v, KeyCode::Char('s')); // runtime
        assert_eq!(v.rows()[0].job.id, 7, "longest running first");
        on_key(&mut v, KeyCode::Char('u'));
        for c in "bo".chars() {
            on_key(&mut v, KeyCode::Char(c));
        }
        assert!(screen(&v).contains("filter by user: bo_"));
        on_key(&mut v, KeyCode::Enter);
        assert_eq!(v.rows().iter().map(|r| r.job.id).collect::<Vec<_>>(), [9]);
        assert!(screen(&v).contains("1 running"));
        assert_eq!(on_key(&mut v, KeyCode::Enter), Action::OpenLog(9));
        v.log = Some((9, "epoch 1 loss 0.5\n".into()));
        assert!(screen(&v).contains("epoch 1 loss 0.5"));
        assert_eq!(
            on_key(&mut v, KeyCode::Esc),
            Action::None,
            "Esc leaves the log"
        );
        on_key(&mut v, KeyCode::Char('a'));
        assert_eq!(v.rows().len(), 2);
        assert_eq!(on_key(&mut v, KeyCode::Char('q')), Action::Quit);
    }
}
