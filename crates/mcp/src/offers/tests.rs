use super::*;

/// A source that answers with what it was sent.
struct Echo;

impl Source for Echo {
    fn forward<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, Result<Value, RpcError>> {
        Box::pin(async move { Ok(json!({ "method": method, "params": params })) })
    }
}

fn item(json: Value, own: &str) -> Item {
    Item { json, own: own.to_owned() }
}

fn offer(scopes: &[&str]) -> Offer {
    Offer {
        resources: vec![item(json!({ "uri": "file:///a.txt", "name": "a" }), "file:///a.txt")],
        templates: vec![item(json!({ "uriTemplate": "note://{id}", "name": "note" }), "note://{id}")],
        prompts: vec![item(json!({ "name": "pay_summary" }), "summary")],
        completions: true,
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    }
}

fn raw(v: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&v).unwrap()
}

async fn answer(o: &Offers, method: &str, params: Value, grant: &Grant) -> Result<Value, RpcError> {
    o.answer(method, Some(&raw(params)), grant).await.map(|t| serde_json::from_str(&t).unwrap())
}

#[test]
fn templates_match_their_uris_only() {
    assert!(matches("note://{id}", "note://42"));
    assert!(!matches("note://{id}", "note://4/2"), "a simple variable has no slash");
    assert!(matches("file:///{+path}", "file:///a/b/c.txt"));
    assert!(matches("users://{user}/profile", "users://ann/profile"));
    assert!(!matches("users://{user}/profile", "users://ann/other"));
    assert!(!matches("note://{id}", "note://"), "a variable stands for something");
    assert!(!matches("note://{id", "note://x"), "an unclosed brace is literal");
    assert!(matches("ünï://{x}", "ünï://é"));
}

#[tokio::test]
async fn requests_reach_their_source_under_its_own_names_and_unknown_ones_are_refused() {
    let offers = Offers::default();
    let mut changes = offers.subscribe();
    let echo = Arc::new(Echo);
    offers.set("pay", offer(&[]), echo.clone());
    let heard: Vec<Arc<str>> = std::iter::from_fn(|| changes.try_recv().ok()).collect();
    assert_eq!(heard.len(), 2, "resources and prompts changed: {heard:?}");
    let all = Grant::All;

    let got =
        answer(&offers, "prompts/get", json!({ "name": "pay_summary", "arguments": { "n": "1" } }), &all)
            .await
            .unwrap();
    assert_eq!(got["params"], json!({ "name": "summary", "arguments": { "n": "1" } }));
    let read = answer(&offers, "resources/read", json!({ "uri": "note://7" }), &all).await.unwrap();
    assert_eq!(read["params"], json!({ "uri": "note://7" }), "a template's URI goes to its source");
    let done = answer(
        &offers,
        "completion/complete",
        json!({ "ref": { "type": "ref/prompt", "name": "pay_summary" }, "argument": { "name": "n", "value": "" } }),
        &all,
    )
    .await
    .unwrap();
    assert_eq!(done["params"]["ref"], json!({ "type": "ref/prompt", "name": "summary" }));

    let unknown = answer(&offers, "resources/read", json!({ "uri": "nope://x" }), &all).await.unwrap_err();
    let data: Value = serde_json::from_str(unknown.data.as_ref().unwrap().get()).unwrap();
    assert_eq!((unknown.code.code(), data), (-32602, json!({ "uri": "nope://x" })));
    let unknown = answer(&offers, "prompts/get", json!({ "name": "summary" }), &all).await.unwrap_err();
    assert_eq!(unknown.code.code(), -32602, "the upstream's own name is not the exported one");
    for bad in [json!({}), json!({ "uri": 3 })] {
        let e = answer(&offers, "resources/read", bad, &all).await.unwrap_err();
        assert_eq!(e.code.code(), -32602);
    }
    let e = answer(&offers, "completion/complete", json!({ "ref": { "type": "ref/tool" } }), &all).await;
    assert_eq!(e.unwrap_err().code.code(), -32602);

    // Setting the same offer again changes nothing: nobody is told.
    offers.set("pay", offer(&[]), echo.clone());
    assert!(changes.try_recv().is_err());
}

#[tokio::test]
async fn lists_show_what_the_caller_may_use_and_capabilities_follow_the_offer() {
    let offers = Offers::default();
    let mut caps = json!({});
    offers.capabilities(&mut caps);
    assert_eq!(caps, json!({}), "nothing offered, nothing declared");

    offers.set("pay", offer(&["pay:read"]), Arc::new(Echo));
    let mut other = offer(&[]);
    other.resources[0].json["name"] = json!("the second a");
    other.prompts = vec![];
    other.completions = false;
    offers.set("docs", other, Arc::new(Echo));
    assert!(offers.scoped());
    offers.capabilities(&mut caps);
    assert_eq!(caps["resources"], json!({ "listChanged": true }));
    assert_eq!(caps["prompts"], json!({ "listChanged": true }));
    assert_eq!(caps["completions"], json!({}));

    let none = Grant::scopes(["other".to_owned()]);
    let listed = answer(&offers, "resources/list", json!({}), &none).await.unwrap();
    assert_eq!(listed["resources"].as_array().unwrap().len(), 1, "docs' only: {listed}");
    assert_eq!(listed["resources"][0]["name"], "the second a");
    let prompts = answer(&offers, "prompts/list", json!({}), &none).await.unwrap();
    assert_eq!(prompts, json!({ "prompts": [] }));
    let refused = answer(&offers, "prompts/get", json!({ "name": "pay_summary" }), &none).await.unwrap_err();
    assert_eq!(refused.code.code(), -32010);

    let all = answer(&offers, "resources/list", json!({}), &Grant::All).await.unwrap();
    let names: Vec<&str> =
        all["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a"], "one URI is one resource: the first source's");
    let bad = answer(&offers, "resources/list", json!({ "cursor": "99" }), &Grant::All).await.unwrap_err();
    assert_eq!(bad.code.code(), -32602);

    offers.set("pay", Offer::default(), Arc::new(Echo));
    offers.set("docs", Offer::default(), Arc::new(Echo));
    let mut caps = json!({});
    offers.capabilities(&mut caps);
    assert_eq!(caps, json!({}), "offered no more, declared no more");
    let gone = answer(&offers, "resources/list", json!({}), &Grant::All).await.unwrap_err();
    assert_eq!(gone.code.code(), -32601, "nor answered");
}
