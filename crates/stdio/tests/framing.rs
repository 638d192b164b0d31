//! Framing unit tests: reads split and merged in every way a pipe can deliver them.

use oncerpc_protocol::ErrorCode;
use oncerpc_stdio::{Frame, FrameReader, Framing, ReadError};
use tokio_test::io::Builder;

const MAX: usize = 1024;

async fn frames_from_chunks(chunks: &[&[u8]]) -> (Vec<Frame>, ReadError, Option<Framing>) {
    let mut b = Builder::new();
    for c in chunks {
        b.read(c);
    }
    let mut r = FrameReader::new(b.build(), MAX);
    let mut out = Vec::new();
    loop {
        match r.next().await {
            Ok(f) => out.push(f),
            Err(e) => return (out, e, r.framing()),
        }
    }
}

fn msg(s: &str) -> Frame {
    Frame::Message(s.as_bytes().to_vec())
}

const A: &str = r#"{"jsonrpc":"2.0","method":"a","id":1}"#;
const B: &str = r#"{"jsonrpc":"2.0","method":"b"}"#;

fn cl(body: &str) -> String {
    format!("Content-Length: {}\r\n\r\n{body}", body.len())
}

#[tokio::test]
async fn a_content_length_frame_split_across_many_reads() {
    let whole = cl(A);
    // One byte per read.
    let chunks: Vec<&[u8]> = whole.as_bytes().chunks(1).collect();
    let (frames, end, framing) = frames_from_chunks(&chunks).await;
    assert_eq!(frames, vec![msg(A)]);
    assert_eq!(end, ReadError::Eof);
    assert_eq!(framing, Some(Framing::ContentLength));
    // Split inside the header name, the value, the separator and the body.
    let w = whole.as_bytes();
    let cuts = [10, 17, 18, 19, 20, 21, 30, w.len()]; // inside the name, the value, "\r\n\r\n", the body
    let mut chunks = Vec::new();
    let mut at = 0;
    for c in cuts {
        chunks.push(&w[at..c]);
        at = c;
    }
    let (frames, _, _) = frames_from_chunks(&chunks).await;
    assert_eq!(frames, vec![msg(A)]);
}

#[tokio::test]
async fn several_frames_in_one_read() {
    let all = format!("{}{}{}", cl(A), cl(B), cl(A));
    let (frames, end, _) = frames_from_chunks(&[all.as_bytes()]).await;
    assert_eq!(frames, vec![msg(A), msg(B), msg(A)]);
    assert_eq!(end, ReadError::Eof);
}

#[tokio::test]
async fn header_names_in_any_case_and_extra_headers_are_accepted() {
    let all = format!(
        "content-length: {}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{A}\
         CONTENT-LENGTH:{}\r\nX-Whatever: 1\r\n\r\n{B}\
         Content-Type: application/json\r\ncOnTeNt-LeNgTh:   {} \r\n\r\n{A}",
        A.len(),
        B.len(),
        A.len()
    );
    let (frames, end, _) = frames_from_chunks(&[all.as_bytes()]).await;
    assert_eq!(frames, vec![msg(A), msg(B), msg(A)]);
    assert_eq!(end, ReadError::Eof);
}

#[tokio::test]
async fn bare_newline_headers_and_blank_lines_between_frames_are_tolerated() {
    let all = format!("Content-Length: {}\n\n{A}\r\n\r\nContent-Length: {}\r\n\r\n{B}", A.len(), B.len());
    let (frames, _, _) = frames_from_chunks(&[all.as_bytes()]).await;
    assert_eq!(frames, vec![msg(A), msg(B)]);
}

#[tokio::test]
async fn ndjson_with_a_batch_on_one_line() {
    let batch = format!("[{A},{B}]");
    let input = format!("\n  {A}\n{batch}\r\n\n{B}");
    let (frames, end, framing) = frames_from_chunks(&[input.as_bytes()]).await;
    assert_eq!(framing, Some(Framing::Ndjson));
    assert_eq!(frames, vec![msg(A), msg(&batch), msg(B)], "blank lines skipped, last line without \\n kept");
    assert_eq!(end, ReadError::Eof);
    // The same split byte by byte.
    let chunks: Vec<&[u8]> = input.as_bytes().chunks(1).collect();
    let (frames, _, _) = frames_from_chunks(&chunks).await;
    assert_eq!(frames, vec![msg(A), msg(&batch), msg(B)]);
}

#[tokio::test]
async fn ndjson_line_over_the_limit_is_answered_and_reading_goes_on() {
    let long = format!("{{\"x\":\"{}\"}}", "y".repeat(MAX * 3));
    let input = format!("{A}\n{long}\n{B}\n");
    let (frames, end, _) = frames_from_chunks(&[input.as_bytes()]).await;
    assert_eq!(frames.len(), 3);
    assert_eq!(frames[0], msg(A));
    match &frames[1] {
        Frame::Bad(e) => assert_eq!(e.code, ErrorCode::InvalidRequest),
        other => panic!("{other:?}"),
    }
    assert_eq!(frames[2], msg(B));
    assert_eq!(end, ReadError::Eof);
}

#[tokio::test]
async fn body_over_the_limit_is_skipped_answered_and_reading_goes_on() {
    let big = "z".repeat(MAX + 10);
    let input = format!("{}Content-Length: {}\r\n\r\n{big}{}", cl(A), big.len(), cl(B));
    let (frames, end, _) = frames_from_chunks(&[input.as_bytes()]).await;
    assert_eq!(frames.len(), 3);
    assert!(matches!(&frames[1], Frame::Bad(e) if e.code == ErrorCode::InvalidRequest));
    assert_eq!(frames[2], msg(B));
    assert_eq!(end, ReadError::Eof);
}

#[tokio::test]
async fn malformed_header_line_with_a_length_is_answered_and_reading_goes_on() {
    let input = format!("Content-Length: {}\r\nthis is not a header\r\n\r\n{A}{}", A.len(), cl(B));
    let (frames, end, _) = frames_from_chunks(&[input.as_bytes()]).await;
    assert!(matches!(&frames[0], Frame::Bad(e) if e.code == ErrorCode::ParseError), "{frames:?}");
    assert_eq!(frames[1], msg(B));
    assert_eq!(end, ReadError::Eof);
}

#[tokio::test]
async fn unframeable_input_is_fatal_with_a_reason_and_an_answer() {
    for (input, why) in [
        ("Content-Type: x\r\n\r\n{}".to_string(), "without Content-Length"),
        ("Content-Length: ten\r\n\r\n{}".to_string(), "not a number"),
        (format!("Content-Length: {}\r\n\r\n{{\"jsonrpc\"", A.len()), "inside a frame body"),
        ("Content-Length: 5\r\n".to_string(), "inside a header block"),
    ] {
        let (frames, end, _) = frames_from_chunks(&[input.as_bytes()]).await;
        assert!(frames.is_empty(), "{input:?}");
        match end {
            ReadError::Fatal { reason, answer } => {
                assert!(reason.contains(why), "{reason:?} should say {why:?}");
                assert_eq!(answer.expect("an answer").code, ErrorCode::ParseError);
            }
            other => panic!("{input:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn answers_use_the_clients_framing_and_ndjson_answers_are_one_line() {
    let mut out = Vec::new();
    Framing::ContentLength.encode(b"{\"a\":1}", &mut out);
    assert_eq!(out, b"Content-Length: 7\r\n\r\n{\"a\":1}");
    out.clear();
    Framing::Ndjson.encode(b"{\n  \"a\": \"x\\ny\"\r\n}", &mut out);
    assert_eq!(out, b"{   \"a\": \"x\\ny\"  }\n");
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["a"], "x\ny");
}

#[tokio::test]
async fn empty_input_is_a_clean_eof() {
    let (frames, end, framing) = frames_from_chunks(&[b"  \n"]).await;
    assert!(frames.is_empty());
    assert_eq!((end, framing), (ReadError::Eof, None));
}
