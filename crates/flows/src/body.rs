//! Reading a step's answer body: whole but capped, or only its start.

/// Reading an answer body stopped.
pub(crate) enum ReadError {
    TooLarge,
    Io(reqwest::Error),
}

/// The whole body, refused as soon as it is known to be larger than `max`: by its
/// `Content-Length`, else while streaming (nothing past the chunk that crosses `max` is read).
pub(crate) async fn read_capped(resp: &mut reqwest::Response, max: usize) -> Result<Vec<u8>, ReadError> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Io)? {
        if body.len() + chunk.len() > max {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most the first `limit` bytes of a body (what could be read; errors end it).
pub(crate) async fn read_prefix(resp: &mut reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(limit - body.len())]),
            _ => break,
        }
    }
    body
}
