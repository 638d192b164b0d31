//! [`serve`]: HTTP/1.1 connections on hyper, with the connection limits of SPEC §12 —
//! header, idle and TLS-handshake timeouts, `max_connections` (past it: `503`, then close) —
//! and graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use futures::future::Either;
use oncerpc_protocol::{ErrorCode, RpcError};
use tokio::sync::Semaphore;

use crate::{FrontDoor, head, tls};

/// Connection-level limits of [`serve`] (SPEC §12).
#[derive(Clone)]
pub struct ServeConfig {
    /// A connection that has not sent complete request headers by then is closed.
    pub header_timeout: Duration,
    /// A kept-alive connection with no request in progress for this long is closed.
    pub idle_timeout: Duration,
    /// Open connections at once; beyond it a new connection gets `503` and is closed.
    pub max_connections: usize,
    /// Where refused connections are counted (`oncerpc_overloaded_total{door="connections"}`).
    pub metrics: Option<oncerpc_core::metrics::Metrics>,
    /// Terminate TLS on every connection (`[tls]`); the handshake must finish within
    /// `header_timeout`.
    pub tls: Option<Arc<tls::ListenerTls>>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            metrics: None,
            tls: None,
        }
    }
}

/// Requests in progress on one connection and when the last one began or ended.
struct Activity {
    active: AtomicUsize,
    last: std::sync::Mutex<tokio::time::Instant>,
}

impl Activity {
    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
    }

    fn begin(self: &Arc<Self>) -> ActiveRequest {
        self.active.fetch_add(1, Ordering::SeqCst);
        self.touch();
        ActiveRequest(self.clone())
    }

    /// Resolves once the connection has had no request in progress for `idle`.
    async fn idle(&self, idle: Duration) {
        loop {
            if self.active.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(idle).await;
                continue;
            }
            let deadline = *self.last.lock().unwrap_or_else(|e| e.into_inner()) + idle;
            if deadline <= tokio::time::Instant::now() {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// One request in progress; dropping it (answered, or the client left) ends it.
struct ActiveRequest(Arc<Activity>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.0.touch();
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The body of an answer that streams (MCP's server-sent events): while it waits for the
/// server's next event the request is in progress, however long the call runs; once an event
/// is handed to hyper it is the client's turn, and a client that takes none for the idle time
/// is closed like an idle connection, so one that stopped reading holds nothing for long.
/// An answer of known size (every other one) is not wrapped: its request ended with it.
struct Streaming {
    body: Body,
    activity: Arc<Activity>,
    waiting: Option<ActiveRequest>,
}

impl Streaming {
    /// The answer to the request `active`, which ends with it (known size) or with its
    /// body's first event (a stream).
    fn wrap(resp: hyper::Response<Body>, active: ActiveRequest) -> hyper::Response<Body> {
        use axum::body::HttpBody;
        if resp.body().size_hint().exact().is_some() {
            return resp;
        }
        let activity = active.0.clone();
        resp.map(|body| Body::new(Streaming { body, activity, waiting: Some(active) }))
    }
}

impl axum::body::HttpBody for Streaming {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.body).poll_frame(cx);
        match polled {
            // The server's turn: in progress.
            std::task::Poll::Pending => {
                if this.waiting.is_none() {
                    this.waiting = Some(this.activity.begin());
                }
            }
            // An event handed on, or the end: the client's turn.
            std::task::Poll::Ready(_) => this.waiting = None,
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A future polled only when its own waker fired: the connection's task wakes for every read
/// and write, and its idle timer needs none of those polls (each was ~200 instructions of a
/// query's).
struct Gated<F> {
    fut: std::pin::Pin<Box<F>>,
    flag: Arc<Flag>,
}

/// Whether the inner future was woken, and the task to wake then.
struct Flag {
    woken: std::sync::atomic::AtomicBool,
    task: futures::task::AtomicWaker,
}

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> Gated<F> {
    fn new(fut: F) -> Self {
        let flag = Flag { woken: true.into(), task: futures::task::AtomicWaker::new() };
        Gated { fut: Box::pin(fut), flag: Arc::new(flag) }
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.flag.task.register(cx.waker());
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return std::task::Poll::Pending;
        }
        let waker = std::task::Waker::from(self.flag.clone());
        self.fut.as_mut().poll(&mut std::task::Context::from_waker(&waker))
    }
}

/// The complete answer to a connection over `max_connections`.
fn refusal() -> Vec<u8> {
    let body = oncerpc_protocol::error_body(&RpcError::new(ErrorCode::Overloaded));
    let mut out = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Answer `503` on a connection over the limit, then close it (after a short drain of what the
/// client sent, so that the close does not reset the answer away).
async fn refuse(mut tcp: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        tcp.write_all(&refusal()).await?;
        tcp.shutdown().await?;
        let mut buf = [0u8; 1024];
        while tcp.read(&mut buf).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// One accepted connection, served on its own task (after the TLS handshake, if any).
struct Connection {
    builder: Arc<hyper::server::conn::http1::Builder>,
    /// The first request head must arrive within it ([`head::first`]); the later ones are
    /// held to it by `idle` (below).
    header_timeout: Duration,
    door: Live,
    watcher: hyper_util::server::graceful::Watcher,
    /// With no request in progress for this long the connection is closed: the lesser of
    /// the idle and the header timeouts. A request is in progress from its complete head
    /// to its answer (a streamed answer: while its body waits for the server, [`Streaming`]),
    /// so this also bounds the wait for the next complete head — what
    /// hyper's `header_read_timeout` did, with a timer and an allocation per request.
    idle: Duration,
    peer: std::net::SocketAddr,
}

impl Connection {
    async fn serve<I>(self, mut io: I)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection { builder, header_timeout, door, watcher, idle, peer } = self;
        // hyper's buffers only once a head has arrived: a stalled connection holds what it
        // sent, not 16 KiB (`head.rs`).
        let Some(first) = head::first(&mut io, header_timeout).await else {
            tracing::debug!(%peer, "connection closed before its first request head arrived");
            return;
        };
        let io = head::Prefixed::new(first, io);
        let activity = Arc::new(Activity {
            active: AtomicUsize::new(0),
            last: std::sync::Mutex::new(tokio::time::Instant::now()),
        });
        // The router as it is: layering it per connection (e.g. axum's `ConnectInfo`) rebuilds
        // and boxes every route for each connection and adds an extension per request;
        // nothing reads the peer address.
        let act = activity.clone();
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            let active = act.begin();
            // The console's log-in throttles failures per client address: only that route
            // gets the address (an extension on every request would cost every request).
            if req.uri().path() == crate::console::LOGIN_PATH {
                req.extensions_mut().insert(crate::peer::Peer(peer.ip()));
            }
            // The door current now answers this request to its end, whatever a reload swaps
            // in meanwhile (one lock-free load per request).
            let current = door.0.load();
            let fut = match &current.rpc {
                Some(st) if req.method() == hyper::Method::POST && req.uri().path() == "/rpc" => {
                    let st = st.clone();
                    Either::Left(async move {
                        Ok::<_, std::convert::Infallible>(crate::rpc::handle(&st, req.map(Body::new)).await)
                    })
                }
                _ => {
                    let svc = hyper_util::service::TowerToHyperService::new(current.router.clone());
                    Either::Right(hyper::service::Service::call(&svc, req))
                }
            };
            async move {
                let resp = fut.await;
                resp.map(|r| Streaming::wrap(r, active))
            }
        });
        let conn = watcher.watch(builder.serve_connection(hyper_util::rt::TokioIo::new(io), svc));
        tokio::select! {
            served = conn => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
            }
            // No request in progress: dropping the connection closes it.
            () = Gated::new(activity.idle(idle)) => tracing::debug!(%peer, "idle connection closed"),
        }
    }
}

/// Serve `door` (a [`FrontDoor`], or any `Router`) on `listener` until `shutdown` resolves,
/// then stop accepting and wait for in-flight requests to finish. HTTP/1.1 on hyper's own
/// connection machinery: headers must arrive within `header_timeout` (the first head:
/// `head::first`; later ones: the connection's idle timer), idle kept-alive connections are
/// closed after `idle_timeout`, and at most `max_connections` are open at once.
pub async fn serve(
    listener: tokio::net::TcpListener,
    door: impl Into<FrontDoor>,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_live(listener, Live::new(door.into()), config, shutdown).await
}

/// A front door that can be replaced while it is served ([`serve_live`]): a reload builds the
/// next configuration's door ([`FrontDoor::successor`]) and [`replace`](Live::replace)s it.
/// Each request is answered by the door current when it arrived, to its end (a streamed
/// answer too); every request that arrives after the swap, on any connection (kept-alive
/// ones included), gets the new one. Nothing is closed by a swap.
#[derive(Clone)]
pub struct Live(Arc<arc_swap::ArcSwap<FrontDoor>>);

impl Live {
    pub fn new(door: FrontDoor) -> Live {
        Live(Arc::new(arc_swap::ArcSwap::from_pointee(door)))
    }

    /// The door current now.
    pub fn current(&self) -> Arc<FrontDoor> {
        self.0.load_full()
    }

    /// Answer every later request with `door`.
    pub fn replace(&self, door: FrontDoor) {
        self.0.store(Arc::new(door));
    }
}

/// [`serve`] a [`Live`] door: each request is answered by the door current when it arrived.
pub async fn serve_live(
    listener: tokio::net::TcpListener,
    door: Live,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::TokioTimer;
    let mut builder = hyper::server::conn::http1::Builder::new();
    // No `header_read_timeout`: the connection's idle timer holds later heads to the header
    // timeout (see `Connection::idle`).
    builder.timer(TokioTimer::new()).header_read_timeout(None).keep_alive(true);
    let builder = Arc::new(builder);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut last_warn: Option<tokio::time::Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if let Some(m) = &config.metrics {
                m.overloaded("connections");
            }
            let now = tokio::time::Instant::now();
            if last_warn.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
                last_warn = Some(now);
                tracing::warn!(
                    max_connections = config.max_connections,
                    "connection limit reached: refusing new connections with 503"
                );
            }
            tokio::spawn(refuse(tcp));
            continue;
        };
        let conn = Connection {
            builder: builder.clone(),
            header_timeout: config.header_timeout,
            door: door.clone(),
            watcher: graceful.watcher(),
            idle: config.idle_timeout.min(config.header_timeout),
            peer,
        };
        match config.tls.clone() {
            None => {
                tokio::spawn(async move {
                    let _permit = permit;
                    conn.serve(tcp).await;
                });
            }
            Some(tls) => {
                let (timeout, metrics) = (config.header_timeout, config.metrics.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    // A client that never finishes its handshake is held to the header timeout.
                    let failed = match tokio::time::timeout(timeout, tls.acceptor().accept(tcp)).await {
                        Ok(Ok(stream)) => return conn.serve(stream).await,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, %peer, "TLS handshake failed");
                            "error"
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            "timeout"
                        }
                    };
                    if let Some(m) = metrics {
                        m.tls_handshake_failed(failed);
                    }
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C).
///
/// The handlers are installed when this function is called, not when the future is first
/// polled: a signal that arrives while the first request is being handled (before anything
/// awaits the future) is then caught rather than killing the process with the default action.
/// Call it inside the runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let install = |kind: SignalKind, name: &'static str| {
            signal(kind).inspect_err(|e| tracing::warn!(error = %e, "cannot install the {name} handler")).ok()
        };
        let term = install(SignalKind::terminate(), "SIGTERM");
        let int = install(SignalKind::interrupt(), "SIGINT");
        async move {
            async fn received(signal: Option<Signal>) {
                match signal {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = received(int) => tracing::info!("SIGINT received, shutting down"),
                () = received(term) => tracing::info!("SIGTERM received, shutting down"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C received, shutting down");
    }
}
