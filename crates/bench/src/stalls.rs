//! Stalled connections held open during a run (the edge row of the benchmark): slow-loris
//! clients that send part of a request and wait. Each one the server closes (its header or
//! body timeout) is opened again, so the count stays at N for the whole run, as a persistent
//! attacker's would.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Request headers, never finished.
const HEADER_STALL: &[u8] = b"POST /rpc HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n";
/// Complete headers and one byte of a 99-byte body.
const BODY_STALL: &[u8] =
    b"POST /rpc HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: 99\r\n\r\n{";
/// How often closed connections are noticed and opened again.
const SWEEP: Duration = Duration::from_millis(250);

/// `n_headers` connections stalled in their headers and `n_bodies` in their bodies, kept
/// open until [`Stalls::stop`].
pub struct Stalls {
    stop: Arc<AtomicBool>,
    reopened: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

fn open(addr: SocketAddr, header_stall: bool) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.write_all(if header_stall { HEADER_STALL } else { BODY_STALL })?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Closed by the server, or answered (a `408`, then closed): either way, no longer stalling.
fn ended(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    !matches!(s.read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

impl Stalls {
    /// Open every connection (an error when one cannot be opened), then keep them open from
    /// a thread of their own.
    pub fn start(addr: SocketAddr, n_headers: usize, n_bodies: usize) -> Result<Stalls, String> {
        raise_nofile_limit();
        let mut slots: Vec<(bool, Option<TcpStream>)> = Vec::with_capacity(n_headers + n_bodies);
        for i in 0..n_headers + n_bodies {
            let header_stall = i < n_headers;
            let s = open(addr, header_stall).map_err(|e| format!("stalled connection {i}: {e}"))?;
            slots.push((header_stall, Some(s)));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reopened = Arc::new(AtomicU64::new(0));
        let (stop2, reopened2) = (stop.clone(), reopened.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                std::thread::sleep(SWEEP);
                for (header_stall, slot) in &mut slots {
                    if slot.as_mut().is_none_or(ended) {
                        *slot = open(addr, *header_stall).ok();
                        reopened2.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Ok(Stalls { stop, reopened, thread: Some(thread) })
    }

    /// Close them all; how many times one was opened again because the server ended it.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.reopened.load(Ordering::Relaxed)
    }
}

impl Drop for Stalls {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Thousands of sockets need more than the usual soft limit of 1,024 descriptors: raise it
/// to the hard limit (the servers the harness starts afterwards inherit it).
pub fn raise_nofile_limit() {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
