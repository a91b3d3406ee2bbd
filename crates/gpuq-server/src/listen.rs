//! Who may hold a connection to the daemon, and for how long. Every connection
//! costs the daemon a descriptor, and a daemon out of descriptors can neither
//! answer anyone nor read its jobs' exit records.
//!
//! On the unix socket the kernel names the peer: each account (not root, not
//! the daemon's own) holds at most `[connections] max_per_user` at once. Over
//! TCP nobody is known until a request proves who sent it, so connections
//! that have not yet carried an authenticated request are few
//! (`max_unauthenticated`, and `max_unauthenticated_per_address` from one
//! address): past either bound the oldest such connection is closed to make
//! room. A flood of half-sent requests thus only pushes out its own, while a
//! real client's request, sent as soon as it connects, is answered. Once
//! authenticated, a connection counts against its user (not the daemon's
//! owner): at most `max_tcp_per_user` each, so that one token's streams
//! (`gpuq events`, `gpuq logs -f`) cannot take every TCP connection from the
//! dashboard and the jobs' MLflow clients. All TCP connections together stay
//! under `max_tcp` (itself kept under the descriptor limit); one over it is
//! closed at once.
//! On both listeners a request's headers must arrive within `header_timeout`.

use crate::config::ConnectionsConfig;
use crate::identity::{self, Caller, Identity};
use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Notify, Semaphore};

/// Refused connections answered at once (each read briefly, then closed); the
/// rest are closed without an answer, so refusing never costs descriptors.
const REFUSALS_AT_ONCE: usize = 16;

fn http1(limits: &ConnectionsConfig) -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout.as_std());
    b
}

/// Answers a refused connection with `503` and `message`, then closes it:
/// after reading what the client sent (a client that finds its connection
/// closed before it wrote would not see the answer), briefly, and only a few
/// at once.
fn refuse<S>(stream: S, message: &str, refusing: &Arc<Semaphore>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        return;
    };
    let body = serde_json::json!({ "error": message }).to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _permit = permit;
        let mut stream = stream;
        let mut buf = vec![0u8; 16 * 1024];
        let second = Duration::from_secs(1);
        let _ = tokio::time::timeout(second, stream.read(&mut buf)).await;
        let _ = tokio::time::timeout(second, stream.write_all(answer.as_bytes())).await;
    });
}

/// An accepted stream that holds its connection's slot for as long as its
/// descriptor is open, upgraded (a terminal, a WebSocket) or not. The slot
/// goes first, then the descriptor: a slot's descriptor is always open.
struct Counted<G, S> {
    _slot: G,
    stream: S,
}

impl<G: Unpin, S: AsyncRead + Unpin> AsyncRead for Counted<G, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<G: Unpin, S: AsyncWrite + Unpin> AsyncWrite for Counted<G, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Whether the other end of a connected socket has closed (or shut down its
/// writing side): what a client that is done with its connection leaves.
fn peer_gone(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd of ours; a zero timeout never blocks.
    let ready = unsafe { libc::poll(&mut p, 1, 0) };
    ready == 1 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// One socket connection: its descriptor (open while it is listed) and the
/// signal that ends its task when its client is found gone.
struct SocketEntry {
    fd: RawFd,
    gone: Notify,
}

/// One account's open socket connections, by id.
type UidConnections = BTreeMap<u64, Arc<SocketEntry>>;

/// Open socket connections per uid. A connection counts exactly as long as
/// its descriptor is open (its slot goes with it). When an account is at its
/// cap, the tasks of those whose client has already gone (while the task has
/// not yet noticed: a busy daemon, a request in flight) are told to end, and
/// the newcomer waits briefly for them to close instead of being refused. An
/// upgraded one (a terminal, a WebSocket) is in its relay's hands, which ends
/// it once the other side has seen the client go: it counts until then.
#[derive(Clone, Default)]
struct OpenConnections {
    by_uid: Arc<Mutex<HashMap<u32, UidConnections>>>,
    next_id: Arc<AtomicU64>,
    /// Woken whenever a slot is given back.
    freed: Arc<Notify>,
}

/// What `OpenConnections::take` found.
enum Take {
    Slot(ConnectionSlot, Arc<SocketEntry>),
    /// At the cap, but some of them are closing (their clients are gone).
    Closing,
    Full,
}

struct ConnectionSlot {
    open: OpenConnections,
    uid: u32,
    id: u64,
}

impl OpenConnections {
    fn take(&self, uid: u32, fd: RawFd, limit: usize) -> Take {
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        let open = by_uid.entry(uid).or_default();
        if open.len() >= limit {
            // Each still counts until it is closed: a relay keeps a
            // half-closed (shut down for writing) upgraded connection open.
            let mut closing = false;
            for e in open.values() {
                if peer_gone(e.fd) {
                    e.gone.notify_one();
                    closing = true;
                }
            }
            return if closing { Take::Closing } else { Take::Full };
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(SocketEntry {
            fd,
            gone: Notify::new(),
        });
        open.insert(id, Arc::clone(&entry));
        let slot = ConnectionSlot {
            open: self.clone(),
            uid,
            id,
        };
        Take::Slot(slot, entry)
    }

    /// A slot once those closing have closed, waiting at most `wait`.
    async fn take_within(
        &self,
        uid: u32,
        fd: RawFd,
        limit: usize,
        wait: Duration,
    ) -> Option<(ConnectionSlot, Arc<SocketEntry>)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Listening before looking: a slot given back in between still wakes us.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.take(uid, fd, limit) {
                Take::Slot(slot, entry) => return Some((slot, entry)),
                Take::Full => return None,
                Take::Closing => {}
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return None;
            }
        }
    }

    #[cfg(test)]
    fn count(&self, uid: u32) -> usize {
        let by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        by_uid.get(&uid).map_or(0, BTreeMap::len)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut by_uid = self.open.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = by_uid.get_mut(&self.uid) {
            open.remove(&self.id);
            if open.is_empty() {
                by_uid.remove(&self.uid);
            }
        }
        drop(by_uid);
        self.open.freed.notify_waiters();
    }
}

/// Serves the API on the unix socket; each connection carries its peer's identity.
pub async fn serve_socket(
    listener: tokio::net::UnixListener,
    app: Router,
    identity: Arc<Identity>,
    limits: ConnectionsConfig,
) {
    let open = OpenConnections::default();
    let refusing = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    // Newcomers waiting for a closing connection's slot, a few at once.
    let waiting = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("unix socket accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(cred) = stream.peer_cred() else {
            continue;
        };
        let uid = cred.uid();
        let limit = if uid == 0 || uid == identity.owner_uid {
            usize::MAX
        } else {
            limits.max_per_user
        };
        let message = move || {
            format!(
                "{} already has {} connections open to this daemon, the most one account may \
                 ([connections] max_per_user in gpuq.toml); close some (gpuq logs -f, gpuq events, \
                 gpuq top, gpuq shell --attach) and try again",
                identity::user_name(uid),
                limits.max_per_user
            )
        };
        let serve = {
            let (app, identity, limits) = (app.clone(), Arc::clone(&identity), limits.clone());
            move |stream, slot, entry| {
                serve_socket_connection(stream, slot, entry, app, identity.peer(uid), &limits)
            }
        };
        match open.take(uid, stream.as_raw_fd(), limit) {
            Take::Slot(slot, entry) => serve(stream, slot, entry),
            Take::Full => refuse(stream, &message(), &refusing),
            Take::Closing => {
                let Ok(permit) = waiting.clone().try_acquire_owned() else {
                    refuse(stream, &message(), &refusing);
                    continue;
                };
                let (open, refusing) = (open.clone(), Arc::clone(&refusing));
                tokio::spawn(async move {
                    let _permit = permit;
                    let wait = Duration::from_secs(2);
                    match open.take_within(uid, stream.as_raw_fd(), limit, wait).await {
                        Some((slot, entry)) => serve(stream, slot, entry),
                        None => refuse(stream, &message(), &refusing),
                    }
                });
            }
        }
    }
}

/// Serves one socket connection as `caller`, holding `slot` for as long as its
/// descriptor is open, upgraded or not.
fn serve_socket_connection(
    stream: tokio::net::UnixStream,
    slot: ConnectionSlot,
    entry: Arc<SocketEntry>,
    app: Router,
    caller: Caller,
    limits: &ConnectionsConfig,
) {
    let service = hyper_util::service::TowerToHyperService::new(app.layer(axum::Extension(caller)));
    let builder = http1(limits);
    let io = TokioIo::new(Counted {
        _slot: slot,
        stream,
    });
    tokio::spawn(async move {
        // Upgrades: a shell's terminal and a notebook's WebSockets.
        let conn = builder.serve_connection(io, service).with_upgrades();
        // Ended, or handed to an upgrade's relay (the slot goes with it).
        tokio::select! {
            _ = conn => {}
            _ = entry.gone.notified() => {}
        }
    });
}

/// A TCP connection, in its requests' extensions: the auth marks it once a
/// request proves who sent it, and from then on it is no longer one of the
/// unauthenticated few that a newcomer may push out.
#[derive(Clone)]
pub struct TcpConnection(Arc<Entry>);

struct Entry {
    id: u64,
    ip: IpAddr,
    tcp: Tcp,
    authenticated: AtomicBool,
    /// The user whose share it counts against, once authenticated (none for
    /// the daemon's owner, who has no cap, as on the socket).
    user: OnceLock<String>,
    /// A request's headers arrived: a client that means it, most likely.
    started: AtomicBool,
    evicted: Notify,
}

impl TcpConnection {
    /// Counts the connection as `caller`'s from its first authenticated
    /// request on; `Err` (what to tell the client) when `caller` already holds
    /// `max_tcp_per_user` connections: it stays unauthenticated, to be closed.
    fn authenticated(&self, caller: &Caller) -> Result<(), String> {
        let e = &self.0;
        let max = e.tcp.limits.max_tcp_per_user;
        let mut state = e.tcp.state();
        if e.authenticated.load(Ordering::Relaxed) {
            return Ok(());
        }
        if !caller.owner {
            let held = state.per_user.entry(caller.user.clone()).or_insert(0);
            if *held >= max {
                if *held == 0 {
                    state.per_user.remove(&caller.user);
                }
                return Err(format!(
                    "{} already has {max} TCP connections open to this daemon, the most one user \
                     may ([connections] max_tcp_per_user in gpuq.toml); close some (gpuq logs -f, \
                     gpuq events, gpuq top, dashboard tabs) and try again",
                    caller.user
                ));
            }
            *held += 1;
            let _ = e.user.set(caller.user.clone());
        }
        e.authenticated.store(true, Ordering::Relaxed);
        state.forget(e.id, e.ip);
        Ok(())
    }
}

/// Marks the request's TCP connection as one whose request arrived whole.
async fn started(req: Request, next: axum::middleware::Next) -> axum::response::Response {
    if let Some(c) = req.extensions().get::<TcpConnection>() {
        c.0.started.store(true, Ordering::Relaxed);
    }
    next.run(req).await
}

/// Marks the request's TCP connection as one that proved it is `caller`'s;
/// `Err` (a message naming the limit) when `caller` holds too many already.
pub fn authenticated(req: &Request, caller: &Caller) -> Result<(), String> {
    match req.extensions().get::<TcpConnection>() {
        Some(c) => c.authenticated(caller),
        None => Ok(()),
    }
}

/// Keeps `max_tcp` under the descriptor limit, with room for everything else
/// the daemon holds (the socket's connections, job records, log streams, the
/// database): past the limit `accept` fails for everyone instead of the
/// newest client getting its 503.
pub fn fit_descriptor_limit(limits: &mut ConnectionsConfig) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit on our own process with a struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return;
    }
    let nofile = usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX);
    let reserve = (nofile / 4).max(256);
    let room = nofile.saturating_sub(reserve).max(16);
    if limits.max_tcp > room {
        tracing::warn!(
            "[connections] max_tcp {} lowered to {room}: the daemon may open {nofile} descriptors \
             (RLIMIT_NOFILE) and keeps {reserve} for jobs, logs and the socket; raise the limit \
             (LimitNOFILE= in a systemd unit, ulimit -n) for more",
            limits.max_tcp
        );
        limits.max_tcp = room;
    }
}

/// The TCP listener's accounting.
#[derive(Clone)]
struct Tcp {
    state: Arc<Mutex<TcpState>>,
    next_id: Arc<AtomicU64>,
    limits: Arc<ConnectionsConfig>,
}

#[derive(Default)]
struct TcpState {
    open: usize,
    /// Not yet authenticated, oldest first (ids grow).
    waiting: BTreeMap<u64, (IpAddr, Arc<Entry>)>,
    waiting_from: HashMap<IpAddr, usize>,
    /// Authenticated connections by user (the owner's are not counted).
    per_user: HashMap<String, usize>,
}

impl TcpState {
    fn forget(&mut self, id: u64, ip: IpAddr) -> bool {
        if self.waiting.remove(&id).is_none() {
            return false;
        }
        if let Some(n) = self.waiting_from.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.waiting_from.remove(&ip);
            }
        }
        true
    }

    /// Closes the oldest unauthenticated connection (from `ip` if given):
    /// first of those that never completed a request's headers (a flood of
    /// half-sent requests pushes out its own), then of the others.
    fn evict_oldest(&mut self, ip: Option<IpAddr>) {
        let from_ip = |from: &IpAddr| ip.is_none() || ip == Some(*from);
        let silent = self
            .waiting
            .iter()
            .find(|(_, (from, e))| from_ip(from) && !e.started.load(Ordering::Relaxed));
        let oldest = silent
            .or_else(|| self.waiting.iter().find(|(_, (from, _))| from_ip(from)))
            .map(|(id, (from, entry))| (*id, *from, Arc::clone(entry)));
        if let Some((id, from, entry)) = oldest {
            self.forget(id, from);
            entry.evicted.notify_one();
        }
    }
}

/// Given back when a TCP connection's task ends, however it ends.
struct TcpSlot(TcpConnection);

impl Drop for TcpSlot {
    fn drop(&mut self) {
        let entry = &self.0 .0;
        let mut state = entry.tcp.state();
        state.forget(entry.id, entry.ip);
        state.open -= 1;
        if let Some(user) = entry.user.get() {
            if let Some(n) = state.per_user.get_mut(user) {
                *n -= 1;
                if *n == 0 {
                    state.per_user.remove(user);
                }
            }
        }
    }
}

impl Tcp {
    fn state(&self) -> std::sync::MutexGuard<'_, TcpState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new connection from `ip`, or `None` over `max_tcp`.
    fn admit(&self, ip: IpAddr) -> Option<TcpSlot> {
        let l = &self.limits;
        let mut state = self.state();
        if state.open >= l.max_tcp {
            return None;
        }
        if state.waiting_from.get(&ip).copied().unwrap_or(0) >= l.max_unauthenticated_per_address {
            state.evict_oldest(Some(ip));
        }
        if state.waiting.len() >= l.max_unauthenticated {
            state.evict_oldest(None);
        }
        let entry = Arc::new(Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            ip,
            tcp: self.clone(),
            authenticated: AtomicBool::new(false),
            user: OnceLock::new(),
            started: AtomicBool::new(false),
            evicted: Notify::new(),
        });
        state.open += 1;
        state.waiting.insert(entry.id, (ip, Arc::clone(&entry)));
        *state.waiting_from.entry(ip).or_insert(0) += 1;
        Some(TcpSlot(TcpConnection(entry)))
    }
}

/// Serves the API over TCP until `shutdown` resolves, then lets the
/// connections finish their requests (as `axum::serve` does).
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnectionsConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let tcp = Tcp {
        state: Arc::default(),
        next_id: Arc::default(),
        limits: Arc::new(limits.clone()),
    };
    let refusing = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    // Dropped when shutdown begins; every connection task holds `open_rx`.
    let (stop_tx, stop_rx) = watch::channel(());
    let (open_tx, open_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(stop_rx);
    });
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, most likely: those in use free up.
                    tracing::warn!("TCP accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop_tx.closed() => break,
        };
        let ip = match peer.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        let Some(slot) = tcp.admit(ip) else {
            let message = format!(
                "this daemon has {} TCP connections open, the most it takes \
                 ([connections] max_tcp in gpuq.toml); try again shortly",
                limits.max_tcp
            );
            refuse(stream, &message, &refusing);
            continue;
        };
        // Small writes go out at once: a terminal's keystrokes and a kernel's
        // messages through the proxy would otherwise wait on delayed ACKs (~40 ms).
        let _ = stream.set_nodelay(true);
        let conn = slot.0.clone();
        let service = hyper_util::service::TowerToHyperService::new(
            app.clone()
                .layer(axum::middleware::from_fn(started))
                .layer(axum::Extension(conn)),
        );
        let builder = http1(&limits);
        let stop = stop_tx.clone();
        let open = open_rx.clone();
        let entry = Arc::clone(&slot.0 .0);
        let io = TokioIo::new(Counted {
            _slot: slot,
            stream,
        });
        tokio::spawn(async move {
            let _open = open;
            let conn = builder.serve_connection(io, service).with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                // Pushed out by newer unauthenticated connections: closed now.
                _ = entry.evicted.notified() => return,
                _ = stop.closed() => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    drop(listener);
    drop(open_rx);
    open_tx.closed().await;
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
