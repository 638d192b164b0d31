//! A TCP proxy on loopback in front of a real server, that a test can "block": it then
//! cuts every open connection and refuses new ones, as a dead or firewalled store would.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

pub struct Proxy {
    pub addr: SocketAddr,
    blocked: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Proxy to `target` (`host:port`).
    pub async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let blocked = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (b, c) = (blocked.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { continue };
                if b.load(Ordering::SeqCst) {
                    drop(inbound); // refused
                    continue;
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                c.lock().await.push(task);
            }
        });
        Proxy { addr, blocked, conns, accept }
    }

    /// Cut every connection and refuse new ones.
    pub async fn block(&self) {
        self.blocked.store(true, Ordering::SeqCst);
        for t in self.conns.lock().await.drain(..) {
            t.abort();
        }
    }

    pub fn unblock(&self) {
        self.blocked.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// `host:port` of a `scheme://[user@]host:port[/path]` URL.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// The same URL pointing at `addr` instead of its host:port.
pub fn via(url: &str, addr: SocketAddr) -> String {
    url.replacen(&host_port(url), &addr.to_string(), 1)
}
