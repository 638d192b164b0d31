//! The HTTP transport: one pooled reqwest client (rustls), the API key on every request.

use std::time::Duration;

use reqwest::header::HeaderValue;

use crate::error::Error;
use crate::transport::{Failed, Reply, from_reqwest};

pub(crate) struct HttpTransport {
    client: reqwest::Client,
    /// `scheme://host:port[/prefix]`, without a trailing `/`.
    base: String,
    api_key: Option<HeaderValue>,
}

impl HttpTransport {
    pub(crate) fn new(
        url: &str,
        api_key: Option<&str>,
        connect_timeout: Duration,
    ) -> Result<HttpTransport, Error> {
        let parsed =
            reqwest::Url::parse(url).map_err(|e| Error::Config(format!("invalid URL {url:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::Config(format!("invalid URL {url:?}: the scheme must be http or https")));
        }
        let mut base = url.trim_end_matches('/').to_owned();
        if let Some(stripped) = base.strip_suffix("/rpc") {
            base = stripped.to_owned();
        }
        let api_key = api_key
            .map(|k| {
                let mut v = HeaderValue::from_str(k)
                    .map_err(|_| Error::Config("the API key is not a valid header value".into()))?;
                v.set_sensitive(true);
                Ok::<_, Error>(v)
            })
            .transpose()?;
        // reqwest is built without a TLS provider of its own (the workspace uses ring only):
        // make ring the process default unless an embedder installed one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(Duration::from_secs(50))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Config(format!("the HTTP client cannot be built: {e}")))?;
        Ok(HttpTransport { client, base, api_key })
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POST `body` to `path` with `headers`; the answer, whatever its status.
    pub(crate) async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        headers: &[(&'static str, String)],
        timeout: Duration,
    ) -> Result<Reply, Failed> {
        let mut req = self
            .client
            .post(self.url(path))
            .timeout(timeout)
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            req = req.header(*name, value.as_str());
        }
        self.send(req, timeout).await
    }

    /// GET `path`; the answer, whatever its status.
    pub(crate) async fn get(&self, path: &str, timeout: Duration) -> Result<Reply, Failed> {
        self.send(self.client.get(self.url(path)).timeout(timeout), timeout).await
    }

    async fn send(&self, mut req: reqwest::RequestBuilder, timeout: Duration) -> Result<Reply, Failed> {
        if let Some(key) = &self.api_key {
            req = req.header("x-api-key", key.clone());
        }
        let resp = req.send().await.map_err(|e| from_reqwest(&e, timeout))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.map_err(|e| from_reqwest(&e, timeout))?;
        Ok(Reply::from_headers(status, &headers, body.to_vec()))
    }
}
