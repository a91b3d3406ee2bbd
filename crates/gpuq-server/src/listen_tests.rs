//! The connection bounds of `listen.rs`, without a daemon.

use super::*;

fn tcp(max_tcp: usize, waiting: usize, per_address: usize) -> Tcp {
    let limits = ConnectionsConfig {
        max_tcp,
        max_unauthenticated: waiting,
        max_unauthenticated_per_address: per_address,
        ..ConnectionsConfig::default()
    };
    Tcp {
        state: Arc::default(),
        next_id: Arc::default(),
        limits: Arc::new(limits),
    }
}

fn user(name: &str) -> Caller {
    Caller {
        user: name.into(),
        admin: false,
        owner: false,
    }
}

#[test]
fn one_user_holds_at_most_max_tcp_per_user_authenticated_connections() {
    let mut t = tcp(100, 100, 100);
    Arc::get_mut(&mut t.limits).unwrap().max_tcp_per_user = 2;
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let bob: Vec<_> = (0..3).map(|_| t.admit(ip).unwrap()).collect();
    bob[0].0.authenticated(&user("bob")).unwrap();
    bob[1].0.authenticated(&user("bob")).unwrap();
    // Another request on a counted connection is not counted again.
    bob[1].0.authenticated(&user("bob")).unwrap();
    let e = bob[2].0.authenticated(&user("bob")).unwrap_err();
    assert!(e.contains("bob") && e.contains("max_tcp_per_user"), "{e}");
    // The refused one stays among the unauthenticated, to be closed.
    assert!(t.state().waiting.contains_key(&bob[2].0 .0.id));
    // Others have their own share, and the owner none.
    let carol = t.admit(ip).unwrap();
    carol.0.authenticated(&user("carol")).unwrap();
    let owner = Caller {
        owner: true,
        ..user("alice")
    };
    let mine: Vec<_> = (0..5).map(|_| t.admit(ip).unwrap()).collect();
    for m in &mine {
        m.0.authenticated(&owner).unwrap();
    }
    // A closed connection gives its user's slot back.
    let mut bob = bob;
    bob.remove(0);
    let again = t.admit(ip).unwrap();
    again.0.authenticated(&user("bob")).unwrap();
    drop((bob, again, carol, mine));
    assert!(t.state().per_user.is_empty());
}

fn evicted(slot: &TcpSlot) -> bool {
    let state = slot.0 .0.tcp.state();
    !state.waiting.contains_key(&slot.0 .0.id) && !slot.0 .0.authenticated.load(Ordering::Relaxed)
}

#[test]
fn unauthenticated_connections_push_out_the_oldest_not_the_newest() {
    let t = tcp(100, 3, 2);
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let b: IpAddr = "10.0.0.2".parse().unwrap();
    let a1 = t.admit(a).unwrap();
    let a2 = t.admit(a).unwrap();
    // A third from the same address pushes out that address's oldest.
    let a3 = t.admit(a).unwrap();
    assert!(evicted(&a1) && !evicted(&a2) && !evicted(&a3));
    // Another address: the pool is full, so the oldest of all goes.
    let b1 = t.admit(b).unwrap();
    let b2 = t.admit(b).unwrap();
    assert!(evicted(&a2) && !evicted(&a3) && !evicted(&b1) && !evicted(&b2));
    // An authenticated connection is never pushed out, nor counted.
    b1.0.authenticated(&user("bob")).unwrap();
    let _b3 = t.admit(b).unwrap();
    let _b4 = t.admit(b).unwrap();
    assert!(!evicted(&b1) && evicted(&b2));
    assert_eq!(t.state().waiting.len(), 3);
    // Every slot is given back when its connection ends.
    drop((a1, a2, a3, b1, b2, _b3, _b4));
    let state = t.state();
    assert_eq!(
        (state.open, state.waiting.len(), state.waiting_from.len()),
        (0, 0, 0)
    );
}

fn slot(t: Take) -> (ConnectionSlot, Arc<SocketEntry>) {
    match t {
        Take::Slot(slot, entry) => (slot, entry),
        Take::Closing => panic!("closing"),
        Take::Full => panic!("full"),
    }
}

#[tokio::test]
async fn a_socket_connection_counts_until_its_descriptor_closes() {
    let open = OpenConnections::default();
    let pairs: Vec<_> = (0..3)
        .map(|_| std::os::unix::net::UnixStream::pair().unwrap())
        .collect();
    let mut slots: Vec<_> = pairs
        .iter()
        .map(|(ours, _)| slot(open.take(7, ours.as_raw_fd(), 3)))
        .collect();
    assert_eq!(open.count(7), 3);
    // At the cap while every client is there: refused.
    let (extra, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    assert!(matches!(open.take(7, extra.as_raw_fd(), 3), Take::Full));
    // One client shut down its end; its task has not noticed yet. It is
    // told to end, and still counts until it has.
    let (_, theirs) = &pairs[1];
    theirs.shutdown(std::net::Shutdown::Write).unwrap();
    let fd = extra.as_raw_fd();
    assert!(matches!(open.take(7, fd, 3), Take::Closing));
    let gone = Arc::clone(&slots[1].1);
    let told = tokio::time::timeout(Duration::from_secs(5), gone.gone.notified()).await;
    assert!(told.is_ok(), "the gone client's task is told");
    assert_eq!(open.count(7), 3);
    // A newcomer waiting gets the slot as soon as that one closes.
    let waiting = {
        let open = open.clone();
        tokio::spawn(async move { open.take_within(7, fd, 3, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    slots.remove(1);
    let (late, _) = waiting.await.unwrap().expect("room once it closed");
    assert_eq!(open.count(7), 3);
    // A connection half-closed by its client whose descriptor stays open
    // (an upgraded one: its relay holds it, deaf to `gone`) still counts.
    pairs[0].1.shutdown(std::net::Shutdown::Write).unwrap();
    let quick = open.take_within(7, fd, 3, Duration::from_millis(200)).await;
    assert!(quick.is_none(), "counted while its descriptor is open");
    assert_eq!(open.count(7), 3);
    drop(slots);
    drop(late);
    assert_eq!(open.count(7), 0);
    // Other accounts have their own count.
    assert!(matches!(open.take(8, fd, 1), Take::Slot(..)));
}

#[test]
fn half_sent_connections_go_before_one_whose_request_arrived() {
    let t = tcp(100, 3, 3);
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let client = t.admit(ip).unwrap();
    client.0 .0.started.store(true, Ordering::Relaxed);
    let flood: Vec<_> = (0..20).map(|_| t.admit(ip).unwrap()).collect();
    assert!(!evicted(&client), "the client that sent its request stays");
    assert!(flood[..18].iter().all(evicted));
}

#[test]
fn the_bounds_come_from_gpuq_toml_and_bad_ones_name_the_key() {
    let c = crate::config::Config::parse(
        "[connections]\nmax_tcp = 100\nmax_per_user = 8\nheader_timeout = \"3s\"\n",
    )
    .unwrap();
    let c = c.connections;
    assert_eq!((c.max_tcp, c.max_per_user), (100, 8));
    assert_eq!(c.header_timeout.as_millis(), 3000);
    assert_eq!(c.max_unauthenticated, 1024, "the default");
    for (bad, key) in [
        ("max_tcp = 0", "connections.max_tcp"),
        (
            "max_unauthenticated_per_address = 0",
            "max_unauthenticated_per_address",
        ),
        ("header_timeout = \"10ms\"", "connections.header_timeout"),
        ("max_tcp = -1", "max_tcp"),
        ("max_connections = 5", "max_connections"),
    ] {
        let e = crate::config::Config::parse(&format!("[connections]\n{bad}\n")).unwrap_err();
        assert!(e.contains(key), "{bad}: {e}");
    }
}

#[test]
fn past_max_tcp_a_connection_is_refused() {
    let t = tcp(2, 10, 10);
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let one = t.admit(ip).unwrap();
    let _two = t.admit(ip).unwrap();
    assert!(t.admit(ip).is_none());
    drop(one);
    assert!(t.admit(ip).is_some());
}
