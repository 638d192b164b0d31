//! The operator console as a browser signs in to it: the log-in form's CSRF token and
//! pre-login cookie, the API key posted, the session cookie kept.
#![allow(dead_code)]

use super::process::Http;

/// Sign in to the console of the gateway `http` reaches with `key`; the session cookie
/// (`name=value`).
pub async fn session(http: &Http, key: &str) -> String {
    let form = http.get("/console/login", &[]).await;
    assert_eq!(form.status, 200, "{}", form.body);
    let pre = form.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
    let csrf =
        form.body.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let client = super::http_client_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let resp = client
        .post(http.url("/console/login"))
        .header("cookie", &pre)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("api_key={key}&csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let session = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|v| v.starts_with("oncerpc_console="));
    session.expect("a session").split(';').next().unwrap().to_owned()
}
