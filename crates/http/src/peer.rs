//! The client address of a request, put in its extensions by the listener where a route needs
//! it (the console's log-in throttle).

/// A request's client address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub std::net::IpAddr);
