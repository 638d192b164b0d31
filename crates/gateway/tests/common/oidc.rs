//! A real authorization server for the tests: oidc-provider (`tests/clients/oidc_provider.mjs`,
//! installed by `scripts/test.sh` into `ONCERPC_OIDC_DIR`), on a loopback port, issuing
//! client-credentials JWT access tokens for oncerpc's resource.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::mcp_clients::{client_script, skip};

/// `orders.create` (a command needing `orders:write`) and `orders.read` (a query needing
/// `orders:read`), each one step on `up` (`charge`, `look`).
pub fn scoped_methods(up: &super::upstream::Upstream) -> String {
    format!(
        r#"
[[methods]]
name = "orders.create"
kind = "command"
scopes = ["orders:write"]
  [[methods.steps]]
  name = "charge"
  url = "{}"

[[methods]]
name = "orders.read"
kind = "query"
scopes = ["orders:read"]
  [[methods.steps]]
  name = "look"
  url = "{}"
"#,
        up.url("charge"),
        up.url("look")
    )
}

/// The resource (audience) oncerpc is to the authorization server.
pub const RESOURCE: &str = "http://oncerpc.test/";

/// The console's client at the authorization server ([`Provider::serve_console`]).
pub const CONSOLE_CLIENT: (&str, &str) = ("oncerpc-console", "oncerpc-console-s3cr3t-0006");

pub struct Provider {
    dir: PathBuf,
    child: Option<Child>,
    pub port: u16,
}

fn node_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("ONCERPC_OIDC_DIR").map(PathBuf::from);
    if dir.is_none() {
        skip("the authorization server oidc-provider (ONCERPC_OIDC_DIR)");
    }
    dir
}

fn node(dir: &Path) -> Command {
    let mut cmd = Command::new(dir.join("node_modules/.bin/node"));
    cmd.arg(client_script("oidc_provider.mjs")).env("NODE_PATH", dir.join("node_modules"));
    cmd
}

impl Provider {
    /// A provider (not started) whose keys go in `keys`; `None` (skipped) without one.
    pub fn new(keys: &Path) -> Option<Provider> {
        let _ = node_dir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Some(Provider { dir: keys.to_owned(), child: None, port })
    }

    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Make the signing key `kid` (ES256): its private JWK and PEM, in the keys folder.
    pub fn keygen(&self, kid: &str) {
        let status = node(&node_dir().unwrap()).args(["keygen", kid]).arg(&self.dir).status().unwrap();
        assert!(status.success(), "keygen {kid}");
    }

    /// The PEM of key `kid` (to craft tokens as an attacker with the key would).
    pub fn pem(&self, kid: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(format!("{kid}.pem"))).unwrap()
    }

    /// (Re)start serving, signing with the first of `kids`, publishing all; waits until it
    /// answers.
    pub async fn serve(&mut self, kids: &[&str]) {
        self.serve_for(kids, RESOURCE).await
    }

    /// [`serve`](Self::serve), issuing tokens for `resource`.
    pub async fn serve_for(&mut self, kids: &[&str], resource: &str) {
        self.serve_with(kids, resource, None).await
    }

    /// [`serve`](Self::serve), with the console's client ([`CONSOLE_CLIENT`]) redirecting to
    /// exactly `redirect` (the gateway's `/console/oidc/callback`) and the development login
    /// and consent pages (any login, any password; `name@org` has `org_id` = `org`).
    pub async fn serve_console(&mut self, kids: &[&str], redirect: &str) {
        self.serve_with(kids, RESOURCE, Some(redirect)).await
    }

    async fn serve_with(&mut self, kids: &[&str], resource: &str, console_redirect: Option<&str>) {
        self.stop();
        let mut cmd = node(&node_dir().unwrap());
        if let Some(r) = console_redirect {
            cmd.env("ONCERPC_CONSOLE_REDIRECT", r);
        }
        cmd.args(["serve", &self.port.to_string(), resource]);
        for kid in kids {
            cmd.arg(self.dir.join(format!("{kid}.jwk.json")));
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        self.child = Some(child);
        let url = format!("{}/.well-known/openid-configuration", self.issuer());
        for _ in 0..200 {
            if super::http_client().get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the authorization server did not start");
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// An access token for oncerpc's resource by the client-credentials grant.
    pub async fn token(&self, client: &str, secret: &str, scope: &str) -> String {
        self.token_for(client, secret, scope, RESOURCE).await
    }

    /// An access token for `resource` by the client-credentials grant.
    pub async fn token_for(&self, client: &str, secret: &str, scope: &str, resource: &str) -> String {
        let resp = super::http_client()
            .post(format!("{}/token", self.issuer()))
            .basic_auth(client, Some(secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "grant_type=client_credentials&scope={}&resource={}",
                scope.replace(' ', "%20"),
                resource.replace(':', "%3A").replace('/', "%2F")
            ))
            .send()
            .await
            .unwrap();
        let body: Value = resp.json().await.unwrap();
        body["access_token"].as_str().unwrap_or_else(|| panic!("no token: {body}")).to_owned()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.stop();
    }
}
