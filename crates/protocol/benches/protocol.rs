//! Parser and writer micro-benchmarks: `cargo bench -p oncerpc-protocol --bench protocol`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oncerpc_protocol::{Entry, Message, RawValue, parse, write_result};

const SINGLE: &str =
    r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42,"subtrahend":23},"id":1}"#;

fn batch_body(n: usize) -> String {
    let entries: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","method":"add","params":[{i},{}],"id":{i}}}"#, i * 2))
        .collect();
    format!("[{}]", entries.join(","))
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Bytes(SINGLE.len() as u64));
    g.bench_function("single", |b| {
        b.iter(|| {
            let Ok(Message::Single(Entry::Valid(r))) = parse(black_box(SINGLE.as_bytes())) else {
                unreachable!()
            };
            black_box(r);
        })
    });
    let batch = batch_body(50);
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.bench_function("batch_50", |b| {
        b.iter(|| {
            let Ok(Message::Batch(entries)) = parse(black_box(batch.as_bytes())) else { unreachable!() };
            assert_eq!(entries.len(), 50);
            black_box(entries);
        })
    });
    g.finish();

    let Ok(Message::Single(Entry::Valid(req))) = parse(SINGLE.as_bytes()) else { unreachable!() };
    let result = RawValue::from_string(r#"{"difference":19}"#.to_owned()).unwrap();
    c.bench_function("write_result", |b| {
        let mut out = Vec::with_capacity(128);
        b.iter(|| {
            out.clear();
            write_result(&mut out, black_box(req.id), black_box(&result));
            black_box(&out);
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
