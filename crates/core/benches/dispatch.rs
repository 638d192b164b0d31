//! End-to-end dispatch benchmarks: body bytes → parse → policy → handler → response bytes,
//! through `Dispatcher::handle`, for one call and for a batch of 50.
//!
//! `cargo bench -p oncerpc-core --bench dispatch -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oncerpc_core::protocol::RpcError;
use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, RequestMeta, typed};

fn dispatcher() -> Dispatcher {
    let mut registry = Registry::new();
    registry
        .register(
            "add",
            MethodSpec::query().description("a + b"),
            typed(|_ctx: Context, (a, b): (i64, i64)| async move { Ok::<_, RpcError>(a + b) }),
        )
        .expect("register add");
    Dispatcher::new(registry, DispatcherConfig::default())
}

fn batch_body(n: usize) -> String {
    let entries: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","method":"add","params":[{i},{}],"id":{i}}}"#, i * 2))
        .collect();
    format!("[{}]", entries.join(","))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let d = dispatcher();
    let meta = RequestMeta::default();

    let single = br#"{"jsonrpc":"2.0","method":"add","params":[40,2],"id":1}"#;
    let reply = rt.block_on(d.handle(single, &meta));
    assert_eq!(reply.body.as_deref(), Some(&br#"{"jsonrpc":"2.0","result":42,"id":1}"#[..]));

    let batch = batch_body(50);
    let reply = rt.block_on(d.handle(batch.as_bytes(), &meta));
    let body = String::from_utf8(reply.body.expect("a batch reply")).unwrap();
    assert!(
        body.starts_with(r#"[{"jsonrpc":"2.0","result":0,"id":0},{"jsonrpc":"2.0","result":3,"id":1},"#),
        "{body}"
    );
    assert!(body.ends_with(r#"{"jsonrpc":"2.0","result":147,"id":49}]"#), "{body}");

    let mut g = c.benchmark_group("dispatch");
    g.throughput(Throughput::Elements(1));
    g.bench_function("single", |b| {
        b.iter(|| black_box(rt.block_on(d.handle(black_box(single), &meta))));
    });
    g.throughput(Throughput::Elements(50));
    g.bench_function("batch_50", |b| {
        b.iter(|| black_box(rt.block_on(d.handle(black_box(batch.as_bytes()), &meta))));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
