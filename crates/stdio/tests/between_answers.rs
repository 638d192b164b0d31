//! A notification sent while no message is being answered (the session's own, such as a list
//! that changed) is written at once, in the session's framing, not held until the next answer.

use std::sync::Arc;

use oncerpc_stdio::{Outbox, serve};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Notify;

#[tokio::test]
async fn a_notification_between_two_answers_is_written_at_once() {
    let (mut client, server_input) = tokio::io::duplex(4096);
    let (server_output, output) = tokio::io::duplex(4096);
    let later = Arc::new(Notify::new());
    let trigger = later.clone();
    let serving = async move {
        serve(
            async |_body: &[u8], outbox: &Outbox| {
                let (outbox, later) = (outbox.clone(), later.clone());
                // After the answer, when the test says so: no request is in hand then.
                tokio::spawn(async move {
                    later.notified().await;
                    outbox.send(
                        br#"{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}"#.to_vec(),
                    );
                });
                Some(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec())
            },
            |_| false,
            server_input,
            server_output,
            1 << 20,
            std::future::pending(),
        )
        .await
    };
    let talking = async move {
        client.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n").await.unwrap();
        let mut lines = BufReader::new(output).lines();
        let answer = lines.next_line().await.unwrap().unwrap();
        assert_eq!(answer, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        trigger.notify_one();
        // The input stays open: nothing else would make the loop write.
        let note = lines.next_line().await.unwrap().unwrap();
        assert_eq!(note, r#"{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}"#);
        drop(client);
    };
    let (served, ()) = tokio::join!(serving, talking);
    assert!(served.is_ok(), "EOF ends the session cleanly");
}
