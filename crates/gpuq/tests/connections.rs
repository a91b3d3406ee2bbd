//! Connections that would hurt everyone: a flood of half-sent requests over
//! TCP from someone with no credentials (the daemon's descriptors stay
//! bounded, half-sent requests are dropped after `header_timeout`, and
//! `gpuq ls` over TCP keeps answering promptly), the bound on all TCP
//! connections, and one user's many well-behaved clients on the socket
//! (clients that closed, mid-request or idle, no longer count: no 503, no reset).

mod common;
mod raw_http;

use common::*;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Half-sent requests held at once by the flood (its oldest closed beyond).
const FLOOD_HELD: usize = 1500;
/// Connections the flood opens before `gpuq ls` is timed.
const FLOOD_OPENED: usize = 4000;

/// Room for the flood's descriptors and the test's own.
fn raise_descriptor_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on our own process with a struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur
    }
}

fn daemon_pid(d: &Daemon) -> u32 {
    let text = std::fs::read_to_string(d.path().join("daemon.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["pid"]
        .as_u64()
        .unwrap() as u32
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// `gpuq ls` over TCP (GPUQ_URL and the daemon's token), timed.
fn timed_ls(d: &Daemon) -> Duration {
    let t = Instant::now();
    let out = output_within(&mut d.cmd(&["ls"]), Duration::from_secs(60)).expect("gpuq ls ends");
    let took = t.elapsed();
    assert!(out.status.success(), "gpuq ls: {}", stderr(&out));
    took
}

#[test]
fn half_sent_requests_over_tcp_leave_gpuq_ls_answering_and_descriptors_bounded() {
    let limit = raise_descriptor_limit();
    assert!(
        limit as usize > FLOOD_HELD + 500,
        "RLIMIT_NOFILE {limit} is too low for this test"
    );
    let d = Daemon::start_with_config("sim:1", "[connections]\nheader_timeout = \"2s\"\n");
    let job = d.submit(&["--", "true"]);
    d.wait(job);
    let addr = d.url.strip_prefix("http://").unwrap().to_string();
    let pid = daemon_pid(&d);
    let before = timed_ls(&d);
    let (stop, opened, refused) = (
        AtomicBool::new(false),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let (mut during, mut most_fds) = (Vec::new(), 0);
    std::thread::scope(|s| {
        // The flood: no credentials, each connection half a request, opened as
        // fast as the daemon takes them for as long as the checks last.
        s.spawn(|| {
            let mut held = VecDeque::new();
            while !stop.load(Ordering::Relaxed) {
                match TcpStream::connect(&addr) {
                    Ok(mut c) => {
                        let _ = c.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: gpuq\r\nX-Slow: ");
                        held.push_back(c);
                        if held.len() > FLOOD_HELD {
                            held.pop_front();
                        }
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        });
        let flooding = eventually(Duration::from_secs(120), || {
            opened.load(Ordering::Relaxed) >= FLOOD_OPENED
        });
        if flooding {
            for _ in 0..5 {
                during.push(timed_ls(&d));
                most_fds = most_fds.max(open_descriptors(pid));
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(flooding, "the flood opened {:?}", opened);
    });
    let worst = during.iter().max().copied().unwrap();
    eprintln!(
        "gpuq ls over TCP: {before:?} alone; during a flood of {} half-sent connections \
         ({FLOOD_HELD} held at once): {during:?}; the daemon held at most {most_fds} descriptors",
        opened.load(Ordering::Relaxed)
    );
    assert!(
        worst < Duration::from_secs(5),
        "gpuq ls took {worst:?} during the flood (alone: {before:?})"
    );
    // At most the unauthenticated few (1024 by default) and the daemon's own.
    assert!(
        most_fds < 1024 + 200,
        "the daemon held {most_fds} descriptors during the flood"
    );
    // Once the flood stops, what it left is gone.
    assert!(
        eventually(Duration::from_secs(20), || open_descriptors(pid) < 200),
        "the daemon still holds {} descriptors",
        open_descriptors(pid)
    );
}

#[test]
fn a_half_sent_request_is_dropped_after_the_header_timeout() {
    let d = Daemon::start_with_config("sim:1", "[connections]\nheader_timeout = \"1s\"\n");
    let addr = d.url.strip_prefix("http://").unwrap();
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: gpuq\r\n")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 1024];
    // Closed by the daemon (EOF, or a reset), not left open.
    let n = c.read(&mut buf).unwrap_or(0);
    let waited = t.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "still open after {waited:?}: {:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert!(
        waited >= Duration::from_millis(800),
        "closed at once: {waited:?}"
    );
    // A complete request on a fresh connection is answered as ever.
    assert_eq!(raw_http::get(&d.url, &d.token(), "/v1/jobs").status, 200);
}

#[test]
fn past_max_tcp_a_new_connection_is_refused_at_once() {
    let d = Daemon::start_with_config("sim:1", "[connections]\nmax_tcp = 8\n");
    let addr = d.url.strip_prefix("http://").unwrap();
    let token = d.token();
    // Eight authenticated clients keep their connections open.
    let held: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            let req = format!(
                "GET /v1/info HTTP/1.1\r\nHost: gpuq\r\nAuthorization: Bearer {token}\r\n\r\n"
            );
            c.write_all(req.as_bytes()).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut buf = [0u8; 4096];
            let n = c.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            c
        })
        .collect();
    let t = Instant::now();
    let over = raw_http::get(&d.url, &token, "/v1/info");
    assert_eq!(over.status, 503, "{}", over.text());
    assert!(over.text().contains("max_tcp"), "{}", over.text());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop(held);
    assert!(
        eventually(Duration::from_secs(10), || {
            raw_http::get(&d.url, &token, "/v1/info").status == 200
        }),
        "room again once they closed"
    );
}

/// A labmate's script on the socket: `hold N` opens N keep-alive connections,
/// each answered once, then closes them all; `polls N JOB` sends N long-polls
/// on a job and closes each before its answer. Prints what it saw.
#[cfg(feature = "system-tests")]
const SOCKET_CLIENT: &str = r#"
import socket, sys
path, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s
seen = []
if what == "hold":
    held = []
    for _ in range(n):
        s = conn()
        s.sendall(b"GET /v1/info HTTP/1.1\r\nHost: gpuq\r\n\r\n")
        seen.append(s.recv(12).decode())
        held.append(s)
    for s in held:
        s.close()
else:
    job = sys.argv[4]
    for _ in range(n):
        s = conn()
        s.sendall(("GET /v1/jobs/%s/wait?timeout=300 HTTP/1.1\r\nHost: gpuq\r\n\r\n" % job).encode())
        s.close()
        seen.append("closed")
print(" ".join(sorted(set(seen))))
"#;

#[cfg(feature = "system-tests")]
#[test]
fn one_users_many_well_behaved_clients_on_the_socket_are_all_served() {
    const MATE: &str = "gpuqtestb";
    ensure_user(MATE);
    let d = Daemon::start_strict("sim:1", "");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let job = d.submit_as(MATE, 0, &["sleep", "300"]);
    d.wait_running(job);
    let socket = d.path().join("gpuq.sock").display().to_string();
    let script = |args: &[&str]| {
        let out = std::process::Command::new("runuser")
            .args(["-u", MATE, "--", "python3", "-c", SOCKET_CLIENT, &socket])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    let served = |out: &std::process::Output| {
        assert!(
            out.status.success(),
            "exit {:?}: {}",
            out.status.code(),
            stderr(out)
        );
        assert!(!stderr(out).contains("503"), "{}", stderr(out));
    };
    // In a row, more than the per-account cap (64) of them.
    for _ in 0..80 {
        served(&as_user(&d, MATE, &["ls"]));
    }
    for round in 0..3 {
        // Clients that closed first: 64 long-polls dropped before their answer,
        // then 64 keep-alive connections closed while idle; at once after
        // each, 30 clients in parallel.
        if round == 1 {
            assert_eq!(script(&["polls", "64", &job.to_string()]), "closed");
        }
        if round == 2 {
            assert_eq!(script(&["hold", "64"]), "HTTP/1.1 200");
        }
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..30)
                .map(|_| s.spawn(|| as_user(&d, MATE, &["ls"])))
                .collect();
            for r in runs {
                served(&r.join().unwrap());
            }
        });
    }
    d.ok(&["cancel", &job.to_string()]);
}

/// Opens `GET /v1/events` with `token` and reads its answer's head: a
/// long-lived stream on success, else the whole (closed) answer.
fn open_events(addr: &str, token: &str) -> (TcpStream, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    let req =
        format!("GET /v1/events HTTP/1.1\r\nHost: gpuq\r\nAuthorization: Bearer {token}\r\n\r\n");
    c.write_all(req.as_bytes()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    (c, String::from_utf8_lossy(&head).into_owned())
}

#[test]
fn one_users_event_streams_over_tcp_leave_the_others_served() {
    const CAP: usize = 6;
    let d = Daemon::start_with_config(
        "sim:1",
        &format!("single_user = true\n[connections]\nmax_tcp_per_user = {CAP}\n"),
    );
    let addr = d.url.strip_prefix("http://").unwrap().to_string();
    let token = |user: &str| {
        d.ok(&["token", "create", "--user", user])
            .trim()
            .to_string()
    };
    let (bob, carol) = (token("bob"), token("carol"));
    let ls_as = |token: &str| {
        let mut c = d.cmd(&["ls"]);
        c.env("GPUQ_TOKEN", token);
        output_within(&mut c, Duration::from_secs(60)).expect("gpuq ls ends")
    };
    // Bob holds as many event streams as one user may.
    let streams: Vec<TcpStream> = (0..CAP)
        .map(|i| {
            let (c, head) = open_events(&addr, &bob);
            assert!(head.starts_with("HTTP/1.1 200"), "stream {i}: {head}");
            c
        })
        .collect();
    // His next one is refused, naming the limit, and closed.
    let (mut over, head) = open_events(&addr, &bob);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let mut rest = String::new();
    let _ = over.read_to_string(&mut rest);
    let said = format!("{head}{rest}");
    assert!(
        said.contains("bob") && said.contains("max_tcp_per_user"),
        "{said}"
    );
    let bobs_ls = ls_as(&bob);
    assert!(!bobs_ls.status.success());
    assert!(
        stderr(&bobs_ls).contains("max_tcp_per_user"),
        "{}",
        stderr(&bobs_ls)
    );
    // Carol, over TCP with her own token, is served as ever, many times over.
    for _ in 0..2 * CAP {
        let out = ls_as(&carol);
        assert!(out.status.success(), "carol's gpuq ls: {}", stderr(&out));
    }
    let (_carols, head) = open_events(&addr, &carol);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Bob's streams closed, his slots come back.
    drop(streams);
    assert!(
        eventually(Duration::from_secs(20), || ls_as(&bob).status.success()),
        "bob is served again once his streams closed"
    );
}

#[test]
fn max_tcp_stays_under_the_descriptor_limit() {
    // A daemon whose descriptor limit is 1024 (soft and hard): max_tcp 4096
    // could never be reached, accept would fail for everyone first.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("gpuq.toml"), as_tests_config("")).unwrap();
    let mut server = std::process::Command::new("prlimit")
        .args([
            "--nofile=1024:1024",
            "--",
            GPUQ,
            "server",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--gpus", "sim:1"])
        .env("GPUQ_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(home.path().join("daemon.log")).unwrap_or_default();
    let started = eventually(Duration::from_secs(30), || log().contains("listening on"));
    let said = log();
    let _ = std::process::Command::new(GPUQ)
        .args(["server", "stop"])
        .env("GPUQ_HOME", home.path())
        .output();
    let _ = server.kill();
    let _ = server.wait();
    assert!(started, "daemon.log: {said}");
    assert!(
        said.contains("max_tcp 4096 lowered to 768"),
        "daemon.log: {said}"
    );
}
