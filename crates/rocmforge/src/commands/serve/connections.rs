//! The accept loop: each connection served by hyper's HTTP/1 (what
//! `axum::serve` runs, configured here for what it does not set): at most
//! [`Limits::max_connections`] open at once, a connection over that cap
//! answered 503 and closed, and a client that does not finish its request
//! headers within [`Limits::header_timeout`] cut off (a slow-header client
//! otherwise holds its connection forever).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::errors::ApiError;
use super::limits::Limits;

/// Most bytes hyper buffers for one connection.
const READ_BUFFER: usize = 64 << 10;

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = http1::Builder::new();
    // A connection's read buffer is hyper's 400 KiB at most by default,
    // filled ahead of the handler: 64 KiB keeps hundreds of open
    // connections to a few MiB each side of the caps.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(READ_BUFFER);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: the listener stays.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            continue;
        };
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        tokio::spawn(async move {
            // A connection's errors (a client gone, a header timeout) end
            // that connection only.
            let _ = connection.await;
            drop(permit);
        });
    }
}

/// Answers a connection over the cap with a 503 and closes it, without
/// reading its request (bounded: a client that does not read is dropped).
async fn refuse(mut stream: TcpStream) {
    let busy = ApiError::busy("Too many open connections; try again shortly");
    let body = busy.body().to_string();
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\n\
         retry-after: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        busy.status.as_u16(),
        busy.status.canonical_reason().unwrap_or(""),
        busy.retry_after.unwrap_or(1),
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}
