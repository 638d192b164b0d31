use super::*;

const WRK_OUT: &str = "Running 10s test @ http://127.0.0.1:40000/rpc
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.52ms  612.35us  21.43ms   84.11%
    Req/Sec    21.30k     1.02k   23.61k    70.50%
  Latency Distribution
     50%    1.44ms
     75%    1.73ms
     90%    2.11ms
     99%    3.50ms
  424117 requests in 10.00s, 62.70MB read
  Socket errors: connect 0, read 2, write 0, timeout 7
  Non-2xx or 3xx responses: 13
Requests/sec:  42397.61
Transfer/sec:      6.27MB
";

#[test]
fn parses_wrk_latency_output() {
    let st = wrk::parse(WRK_OUT).unwrap();
    assert_eq!(st.requests, 424_117);
    assert_eq!(st.duration_s, 10.0);
    assert_eq!(st.req_per_s, 42_397.61);
    assert_eq!(st.p50_ms, 1.44);
    assert_eq!(st.p99_ms, 3.5);
    assert_eq!(st.non_2xx, 13);
    assert_eq!((st.read_errors, st.timeouts), (2, 7));
    assert_eq!(st.socket_errors(), 9);
}

#[test]
fn parses_a_clean_run_and_units() {
    let out = WRK_OUT
        .replace("  Socket errors: connect 0, read 2, write 0, timeout 7\n", "")
        .replace("  Non-2xx or 3xx responses: 13\n", "")
        .replace("1.44ms", "812.00us")
        .replace("3.50ms", "1.20s");
    let st = wrk::parse(&out).unwrap();
    assert_eq!((st.non_2xx, st.socket_errors()), (0, 0));
    assert!((st.p50_ms - 0.812).abs() < 1e-9);
    assert_eq!(st.p99_ms, 1200.0);
    assert_eq!(wrk::duration_ms("2.00m"), Some(120_000.0));
    assert_eq!(wrk::duration_ms("12"), None);
    assert!(wrk::parse("unable to connect to 127.0.0.1:1 Connection refused").is_err());
}

#[test]
fn bodies_match_their_answers() {
    let single: serde_json::Value = serde_json::from_str(&bodies::single("add")).unwrap();
    assert_eq!(single["params"], serde_json::json!([1, 2]));
    let batch: Vec<serde_json::Value> = serde_json::from_str(&bodies::batch("sum")).unwrap();
    let answers: Vec<serde_json::Value> = serde_json::from_str(&bodies::batch_answer()).unwrap();
    assert_eq!(batch.len(), bodies::BATCH_SIZE);
    assert_eq!(answers.len(), bodies::BATCH_SIZE);
    for (q, a) in batch.iter().zip(&answers) {
        assert_eq!(q["id"], a["id"]);
        assert_eq!(a["result"], 3);
    }
    let (head, tail) = bodies::increment_halves();
    assert_eq!(format!("{head}k-1{tail}"), bodies::increment("k-1"));
    serde_json::from_str::<serde_json::Value>(bodies::SINGLE_ANSWER).unwrap();
    serde_json::from_str::<serde_json::Value>(bodies::PARSE_ERROR).unwrap();
    serde_json::from_str::<serde_json::Value>(bodies::FLOW_BODY).unwrap();
}

#[test]
fn mcp_bodies_and_headers() {
    use serde_json::{Value, json};
    let v: Value = serde_json::from_str(&bodies::mcp_call("add", bodies::ADD_ARGS, true)).unwrap();
    assert_eq!(v["method"], "tools/call");
    assert_eq!(v["params"]["name"], "add");
    assert_eq!(v["params"]["arguments"], json!({"a": 1, "b": 2}));
    assert_eq!(v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    assert!(v["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].is_object());
    let v: Value = serde_json::from_str(&bodies::mcp_call("add", bodies::ADD_ARGS, false)).unwrap();
    assert!(v["params"].get("_meta").is_none(), "the session era carries no _meta");
    let (head, tail) = bodies::mcp_increment_halves(true);
    let whole = format!("{head}k-7{tail}");
    assert_eq!(whole, bodies::mcp_increment("k-7", true));
    let v: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(v["params"]["arguments"], json!({"by": 1, "idempotency_key": "k-7"}));
    let rpc: Value = serde_json::from_str(bodies::ADD_RPC).unwrap();
    assert_eq!(rpc["params"], json!({"a": 1, "b": 2}));
    serde_json::from_str::<Value>(bodies::ADD_RPC_ANSWER).unwrap();
    serde_json::from_str::<Value>(&bodies::mcp_initialize()).unwrap();

    let h = bodies::mcp_headers("add", None);
    let get = |h: &[(String, String)], k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get(&h, "MCP-Protocol-Version").as_deref(), Some("2026-07-28"));
    assert_eq!(get(&h, "Mcp-Method").as_deref(), Some("tools/call"));
    assert_eq!(get(&h, "Mcp-Name").as_deref(), Some("add"));
    assert_eq!(get(&h, "Accept").as_deref(), Some("application/json, text/event-stream"));
    let h = bodies::mcp_headers("add", Some("s-1"));
    assert_eq!(get(&h, "Mcp-Session-Id").as_deref(), Some("s-1"));
    assert_eq!(get(&h, "Mcp-Name"), None);
}

#[test]
fn judges_tool_results() {
    use serde_json::json;
    let oncerpc = json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"3"}],
            "structuredContent":{"result":3},"isError":false,"resultType":"complete"}});
    assert!(bodies::judge_tool_result(&oncerpc, Some("3")).is_ok());
    let rmcp =
        json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"3"}],"isError":false}});
    assert!(bodies::judge_tool_result(&rmcp, Some("3")).is_ok());
    let wrong =
        json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"4"}],"isError":false}});
    assert!(bodies::judge_tool_result(&wrong, Some("3")).is_err());
    let failed =
        json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"3"}],"isError":true}});
    assert!(bodies::judge_tool_result(&failed, Some("3")).is_err());
    let no_flag = json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"3"}]}});
    assert!(bodies::judge_tool_result(&no_flag, Some("3")).is_err(), "isError:false is required");
    let bad_sc = json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"3"}],
            "structuredContent":{"result":4},"isError":false}});
    assert!(bodies::judge_tool_result(&bad_sc, Some("3")).is_err());
    let err = json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}});
    assert!(bodies::judge_tool_result(&err, None).is_err());
}

#[test]
fn lua_headers_go_before_the_functions() {
    let h = vec![("Mcp-Name".to_owned(), "add".to_owned())];
    let s = lua::with_headers(&lua::new_key_body("t", "a", "b"), &h);
    let at = s.find("wrk.headers[\"Mcp-Name\"] = \"add\"").expect("header line");
    assert!(at < s.find("function").unwrap(), "{s}");
    assert!(s.find("Content-Type").unwrap() < at, "{s}");
    let s = lua::with_headers(&lua::fixed("t", "{}"), &h);
    assert!(s.contains("wrk.headers[\"Mcp-Name\"] = \"add\"\nwrk.body"), "{s}");
}

#[test]
fn lua_scripts_quote_bodies_verbatim() {
    let s = lua::fixed("t", "[[x]]");
    assert!(s.contains("wrk.body = [=[[[x]]]=]"), "{s}");
    assert!(lua::fixed("t", "a]=]b").contains("[==[a]=]b]==]"));
    let s = lua::new_key_body("t", "{\"a\":\"", "\"}");
    assert!(s.contains("function request()") && s.contains("thread:set(\"tid\""), "{s}");
    let s = lua::cycled_key_header("t", "X-Idempotency-Key", "{}", 1000);
    assert!(s.contains("local keys = 1000") && s.contains("wrk.headers[\"X-Idempotency-Key\"]"), "{s}");
}

#[test]
fn reads_prometheus_samples() {
    let text = "# HELP oncerpc_idempotency_total x\n\
            oncerpc_idempotency_total{method=\"counter.increment\",status=\"new\"} 12\n\
            oncerpc_idempotency_total{method=\"counter.increment\",status=\"duplicate\"} 3\n\
            oncerpc_idempotency_total{method=\"orders.create\",status=\"new\"} 5\n\
            oncerpc_requests_total{method=\"sum\",kind=\"query\",outcome=\"ok\"} 7\n\
            oncerpc_requests_total{method=\"sum\",kind=\"query\",outcome=\"-32602\"} 1\n\
            oncerpc_in_flight_requests 2\n";
    let new =
        prom::value(text, "oncerpc_idempotency_total", &[("method", "counter.increment"), ("status", "new")]);
    assert_eq!(new, 12.0);
    assert_eq!(prom::value(text, "oncerpc_idempotency_total", &[("status", "new")]), 17.0);
    let bad = prom::sum(text, "oncerpc_requests_total", |l| {
        l.contains(&("method", "sum")) && !l.contains(&("outcome", "ok"))
    });
    assert_eq!(bad, 1.0);
    assert_eq!(prom::value(text, "oncerpc_in_flight_requests", &[]), 2.0);
    assert_eq!(prom::value(text, "oncerpc_idempotency", &[]), 0.0);
}

#[test]
fn reads_proc_files() {
    let status = "Name:\toncerpc\nVmPeak:\t  100 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
    assert_eq!(procfs::vm_hwm_kib(status), Some(20480));
    assert_eq!(procfs::vm_rss_kib(status), Some(10240));
    let stat = "42 (tokio (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 2 3";
    assert_eq!(procfs::cpu_ticks(stat), Some(300));
    let m = "cpu  100 5 50 800 20 1 2 0 0 0\ncpu0 1 2 3 4\n";
    assert_eq!(procfs::machine_ticks(m), Some((158, 978)));
    let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\n\
                    used_cpu_sys_children:9.000000\r\nused_cpu_sys_main_thread:1.000000\r\n";
    assert_eq!(procfs::redis_cpu(info), Some(3.75));
    assert_eq!(procfs::redis_cpu("# CPU\r\n"), None);
}

#[test]
fn medians() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[4.0, 1.0]), 2.5);
    assert!(median(&[]).is_nan());
}
