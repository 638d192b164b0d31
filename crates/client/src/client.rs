//! [`Client`] and its builder.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::error::Error;
use crate::http::HttpTransport;
use crate::retry::RetryPolicy;
use crate::stdio::StdioTransport;

pub(crate) enum Transport {
    Http(HttpTransport),
    Stdio(Box<StdioTransport>),
}

/// A client of one oncerpc server: cheap to clone (clones share connections).
///
/// ```no_run
/// # async fn demo() -> Result<(), oncerpc_client::Error> {
/// use oncerpc_client::Client;
/// use serde_json::{Value, json};
///
/// let client = Client::http("http://127.0.0.1:8080").api_key("acme-secret").build()?;
/// let total: Value = client.command("counter.increment", json!({"by": 5})).await?.result;
/// let sum: i64 = client.query("sum", [1, 2, 4]).await?.result;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) transport: Arc<Transport>,
    pub(crate) policy: RetryPolicy,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let door = match &*self.transport {
            Transport::Http(h) => h.url(""),
            Transport::Stdio(_) => "stdio".into(),
        };
        f.debug_struct("Client").field("door", &door).field("policy", &self.policy).finish()
    }
}

impl Client {
    /// A client of the HTTP doors at `url` (`http://host:port`; a trailing `/rpc` is
    /// accepted). Set the API key and timeouts on the builder.
    pub fn http(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            policy: RetryPolicy::default(),
        }
    }

    /// A client of a stdio daemon, e.g. `Client::stdio("oncerpc", ["stdio"])`: started on
    /// the first call (and again if it exits), spoken to in newline-delimited JSON, one request
    /// at a time. Dropping the last clone closes its stdin, and the daemon exits. Flows and
    /// events are HTTP only.
    pub fn stdio<I, S>(program: impl Into<OsString>, args: I) -> Client
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let transport = StdioTransport::new(program.into(), args.into_iter().map(Into::into).collect());
        Client { transport: Arc::new(Transport::Stdio(Box::new(transport))), policy: RetryPolicy::default() }
    }

    /// The same client (same connections, same daemon) with another retry policy.
    pub fn with_policy(&self, policy: RetryPolicy) -> Client {
        Client { transport: self.transport.clone(), policy }
    }

    /// The retry policy calls start from.
    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    pub(crate) fn http_transport(&self) -> Result<&HttpTransport, Error> {
        match &*self.transport {
            Transport::Http(h) => Ok(h),
            Transport::Stdio(_) => {
                Err(Error::InvalidCall("flows and events are served over HTTP only".into()))
            }
        }
    }
}

/// Params as a value; `null` (e.g. `()`) means none.
/// A call's params as JSON (`null`: none), or why they do not serialise.
pub(crate) fn to_params(params: impl Serialize) -> Result<Option<Value>, String> {
    match serde_json::to_value(params) {
        Ok(Value::Null) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(e) => Err(format!("the params do not serialise: {e}")),
    }
}

/// Settings of an HTTP [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    api_key: Option<String>,
    connect_timeout: Duration,
    policy: RetryPolicy,
}

impl ClientBuilder {
    /// Sent as `X-API-Key` on every request (never logged).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The whole call, every attempt and wait included (default 30 s).
    pub fn deadline(mut self, d: Duration) -> Self {
        self.policy.deadline = d;
        self
    }

    /// One attempt at most (default 10 s).
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.policy.attempt_timeout = d;
        self
    }

    /// Establishing a connection at most (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Retries after the first attempt at most (default: as many as the deadline allows).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.policy.max_retries = Some(n);
        self
    }

    /// The backoff: the first ceiling, doubled per attempt up to `max` (defaults 100 ms, 5 s).
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.policy.base = base;
        self.policy.max_backoff = max;
        self
    }

    /// The whole retry policy at once.
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The client; an invalid URL or API key is an error here, before anything is sent.
    pub fn build(self) -> Result<Client, Error> {
        let transport = HttpTransport::new(&self.url, self.api_key.as_deref(), self.connect_timeout)?;
        Ok(Client { transport: Arc::new(Transport::Http(transport)), policy: self.policy })
    }
}
