//! Every line a request causes carries its correlation id (SPEC §7): the access line by
//! itself, the lines an execution logs through the span opened where the execution starts.
//! Duplicates answered from what the process knows open no span and log one line.
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oncerpc_core::{
    Context, Dispatcher, DispatcherConfig, IdempotencyConfig, MemoryStore, MethodSpec, Mode, Registry,
    RequestMeta, typed,
};
use oncerpc_protocol::RpcError;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap().lines().map(str::to_owned).collect()
    }
}

fn dispatcher(runs: Arc<AtomicUsize>) -> Dispatcher {
    let mut registry = Registry::new();
    registry
        .register(
            "pay",
            MethodSpec::command(),
            typed(move |_ctx: Context, _p: serde_json::Value| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    tracing::warn!("charging the card");
                    Ok::<_, RpcError>(serde_json::json!({ "charged": true }))
                }
            }),
        )
        .unwrap();
    let config = DispatcherConfig {
        idempotency: IdempotencyConfig { mode: Mode::Dev, ..IdempotencyConfig::default() },
        ..DispatcherConfig::default()
    };
    Dispatcher::with_store(registry, config, Arc::new(MemoryStore::new(1000)))
}

async fn pay(d: &Dispatcher, id: &str, key: Option<&str>) -> String {
    let params = match key {
        Some(k) => format!(r#"{{"idempotency_key":"{k}"}}"#),
        None => "{}".to_owned(),
    };
    let body = format!(r#"{{"jsonrpc":"2.0","method":"pay","params":{params},"id":"{id}"}}"#);
    String::from_utf8(d.handle(body.as_bytes(), &RequestMeta::default()).await.body.unwrap()).unwrap()
}

#[test]
fn execution_lines_and_access_lines_carry_the_correlation_id() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let runs = Arc::new(AtomicUsize::new(0));
    let d = dispatcher(runs.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Global: executions run on the runtime's worker threads (the only test of this binary).
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let (first, dup) = rt.block_on(async {
        let first = pay(&d, "c-1", Some("key-1")).await;
        let dup = pay(&d, "c-2", Some("key-1")).await;
        pay(&d, "c-3", None).await;
        (first, dup)
    });
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the duplicate did not run, the keyless call did");
    assert_eq!(first.replace("c-1", "c-2"), dup, "the duplicate replays the first answer");
    let lines = captured.lines();
    let of = |id: &str| -> Vec<&String> {
        lines.iter().filter(|l| l.contains(&format!("correlation_id={id}"))).collect()
    };
    // The executed command: its handler's line (through the span) and its access line.
    let one = of("c-1");
    assert!(one.iter().any(|l| l.contains("charging the card")), "{lines:#?}");
    let access: Vec<_> = one.iter().filter(|l| l.contains(" request ") || l.ends_with(" request")).collect();
    assert_eq!(access.len(), 1, "one access line for c-1: {lines:#?}");
    assert!(access[0].contains("idempotency_status=new"), "{access:?}");
    assert_eq!(access[0].matches("correlation_id=").count(), 1, "the id once: {access:?}");
    // The duplicate: its access line only, with its own id once.
    let two = of("c-2");
    assert_eq!(two.len(), 1, "{lines:#?}");
    assert!(two[0].contains("idempotency_status=duplicate"), "{two:?}");
    assert_eq!(two[0].matches("correlation_id=").count(), 1, "{two:?}");
    // A keyless command (development mode) runs in a span too.
    let three = of("c-3");
    assert!(three.iter().any(|l| l.contains("charging the card")), "{lines:#?}");
    // No handler line without an id.
    for l in lines.iter().filter(|l| l.contains("charging the card")) {
        assert!(l.contains("correlation_id="), "{l}");
    }
}
