use super::*;
use crate::cli::Store;

fn snap(new: u64, dup: u64, counter: i64) -> Snap {
    Snap {
        metrics: format!(
            "oncerpc_idempotency_total{{method=\"counter.increment\",status=\"new\"}} {new}\n\
                 oncerpc_idempotency_total{{method=\"counter.increment\",status=\"duplicate\"}} {dup}\n\
                 oncerpc_requests_total{{method=\"counter.increment\",kind=\"command\",outcome=\"ok\"}} {}\n",
            new + dup
        ),
        counter: Some(counter),
        upstream_calls: None,
    }
}

#[test]
fn verification_of_new_keys() {
    let sc = Scenario::Command { store: Store::Memory, dup: false };
    // wrk counted 1000; 3 more were in flight when it stopped.
    let (ok, text) = verify(&sc, Server::Oncerpc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1013));
    assert!(ok, "{text}");
    // Requests in flight at wrk's stop may run without being counted in the metrics.
    let (ok, text) = verify(&sc, Server::Oncerpc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1020));
    assert!(ok && text.contains("7 executions"), "{text}");
    // More executions than requests sent: something ran twice.
    let (ok, text) = verify(&sc, Server::Oncerpc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1080));
    assert!(!ok && text.contains("counter"), "{text}");
    // Fewer executions than counted as new.
    let (ok, _) = verify(&sc, Server::Oncerpc, 1000, 64, &snap(10, 5, 10), &snap(1013, 5, 1012));
    assert!(!ok);
    // Fewer new than wrk answered.
    let (ok, _) = verify(&sc, Server::Oncerpc, 1000, 64, &snap(10, 5, 10), &snap(900, 5, 900));
    assert!(!ok);
}

#[test]
fn verification_of_duplicates() {
    let sc = Scenario::Command { store: Store::Sqlite, dup: true };
    let (ok, text) = verify(&sc, Server::Oncerpc, 500, 64, &snap(1000, 0, 1000), &snap(1000, 520, 1000));
    assert!(ok, "{text}");
    let (ok, text) = verify(&sc, Server::Oncerpc, 500, 64, &snap(1000, 0, 1000), &snap(1001, 520, 1001));
    assert!(!ok && text.contains("new +1"), "{text}");
}

#[test]
fn verification_of_mcp_rows() {
    let m = |ok: u64, err: u64, counter: i64, dup: u64| Snap {
        metrics: format!(
            "oncerpc_mcp_requests_total{{method=\"tools/call\",outcome=\"ok\"}} {ok}\n\
                 oncerpc_mcp_requests_total{{method=\"tools/call\",outcome=\"tool_error\"}} {err}\n\
                 oncerpc_mcp_requests_total{{method=\"tools/list\",outcome=\"ok\"}} 9\n\
                 oncerpc_idempotency_total{{method=\"counter.increment\",status=\"duplicate\"}} {dup}\n\
                 oncerpc_requests_total{{method=\"add\",kind=\"query\",outcome=\"ok\"}} {ok}\n"
        ),
        counter: Some(counter),
        upstream_calls: None,
    };
    let add = Scenario::McpAdd { conns: 64 };
    assert!(verify(&add, Server::OncerpcMcp, 100, 64, &m(0, 0, 0, 0), &m(110, 0, 0, 0)).0);
    assert!(!verify(&add, Server::OncerpcMcp, 100, 64, &m(0, 0, 0, 0), &m(99, 0, 0, 0)).0);
    let (ok, text) = verify(&add, Server::OncerpcMcp, 100, 64, &m(0, 0, 0, 0), &m(100, 1, 0, 0));
    assert!(!ok && text.contains("another outcome"), "{text}");
    assert!(verify(&add, Server::Oncerpc, 100, 64, &m(0, 0, 0, 0), &m(100, 0, 0, 0)).0, "/rpc: add ok");
    let cmd = Scenario::McpCommand { conns: 64 };
    assert!(verify(&cmd, Server::OncerpcMcpSession, 100, 64, &m(0, 0, 5, 0), &m(100, 0, 105, 0)).0);
    let (ok, text) = verify(&cmd, Server::OncerpcMcp, 100, 64, &m(0, 0, 5, 0), &m(100, 0, 105, 3));
    assert!(!ok && text.contains("duplicate +3"), "{text}");
    assert!(!verify(&cmd, Server::OncerpcMcp, 100, 64, &m(0, 0, 5, 0), &m(100, 0, 50, 0)).0);
}

#[test]
fn judges_mcp_answers() {
    let resp = |status: u16, body: &str| Resp {
        status,
        idempotency: None,
        session: None,
        body: Bytes::from(body.to_owned()),
    };
    let add = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"3"}],"structuredContent":{"result":3},"isError":false}}"#;
    assert!(judge_mcp(&resp(200, add), None).is_ok());
    assert!(judge_mcp(&resp(400, add), None).is_err());
    assert!(judge_mcp(&resp(200, &format!("event: message\ndata: {add}\n\n")), None).is_err());
    let cmd = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"total\":4}"}],"structuredContent":{"total":4},"isError":false,"_meta":{"io.oncerpc/idempotency-status":"new"}}}"#;
    assert!(judge_mcp(&resp(200, cmd), Some("new")).is_ok());
    assert!(judge_mcp(&resp(200, cmd), Some("duplicate")).is_err());
    assert!(judge_mcp(&resp(200, add), Some("new")).is_err());
}

#[test]
fn verification_of_batches() {
    let m = |ok: u64| Snap {
        metrics: format!("oncerpc_requests_total{{method=\"sum\",kind=\"query\",outcome=\"ok\"}} {ok}\n"),
        ..Snap::default()
    };
    let sc = Scenario::Batch { conns: 64 };
    assert!(verify(&sc, Server::Oncerpc, 100, 64, &m(0), &m(5000)).0);
    assert!(!verify(&sc, Server::Oncerpc, 100, 64, &m(0), &m(4999)).0);
}

#[test]
fn judges_answers() {
    let resp = |status: u16, idem: Option<&str>, body: &str| Resp {
        status,
        idempotency: idem.map(str::to_owned),
        session: None,
        body: Bytes::from(body.to_owned()),
    };
    assert!(
        judge_fixed(&resp(200, None, r#"{"id":1,"jsonrpc":"2.0","result":3}"#), bodies::SINGLE_ANSWER)
            .is_ok()
    );
    assert!(
        judge_fixed(&resp(200, None, r#"{"jsonrpc":"2.0","result":4,"id":1}"#), bodies::SINGLE_ANSWER)
            .is_err()
    );
    assert!(judge_fixed(&resp(500, None, bodies::SINGLE_ANSWER), bodies::SINGLE_ANSWER).is_err());
    let ok = r#"{"jsonrpc":"2.0","result":{"total":7},"id":1}"#;
    assert!(judge_keyed(false, "new", &resp(200, Some("new"), ok), None).is_ok());
    assert!(judge_keyed(false, "duplicate", &resp(200, Some("new"), ok), None).is_err());
    let stored = Bytes::from_static(br#"{"jsonrpc":"2.0","result":{"total":6},"id":1}"#);
    assert!(judge_keyed(false, "duplicate", &resp(200, Some("duplicate"), ok), Some(&stored)).is_err());
    let flow = r#"{"step":"reserve","n":3}"#;
    assert!(judge_keyed(true, "new", &resp(200, Some("new"), flow), None).is_ok());
    assert!(judge_keyed(true, "new", &resp(200, Some("new"), "{}"), None).is_err());
}
