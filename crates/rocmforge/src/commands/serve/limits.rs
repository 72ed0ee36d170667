//! What clients may hold of the server, with defaults and flags: how long
//! they may take to send a request, how many connections and how many
//! bytes of request bodies they may hold open together, and how many
//! requests may wait for the model. Past a limit the server answers at once
//! (413, 408 or 503 with `Retry-After`, OpenAI's error JSON) instead of
//! holding memory or a connection for as long as a client likes.
//! docs/server.md lists the defaults.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full};

use super::errors::ApiError;
use super::routes::{Shared, READ_LIMIT};

#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Seconds a client has to send its request headers, from the
    /// connection's start or its previous request.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    header_timeout: u64,
    /// Seconds a client has to send its request body, once its headers
    /// are in (408 after that).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    body_timeout: u64,
    /// Most connections open at once; more are answered 503 and closed.
    #[arg(long, default_value_t = 512, value_name = "N")]
    max_connections: usize,
    /// Most MiB of request bodies being read at once, over all
    /// connections; a body that would pass it is answered 503.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    max_buffered_mib: usize,
    /// Most requests waiting for the model; more are answered 503 with
    /// `Retry-After`.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_queue: usize,
}

/// The limits in force.
#[derive(Debug, Clone)]
pub struct Limits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub max_buffered: usize,
    pub max_queue: usize,
}

impl LimitArgs {
    pub fn limits(&self) -> Result<Limits, String> {
        let at_least_one = |v: u64, flag: &str| match v {
            0 => Err(format!("--{flag} must be at least 1")),
            v => Ok(v),
        };
        Ok(Limits {
            header_timeout: Duration::from_secs(at_least_one(
                self.header_timeout,
                "header-timeout",
            )?),
            body_timeout: Duration::from_secs(at_least_one(self.body_timeout, "body-timeout")?),
            max_connections: at_least_one(self.max_connections as u64, "max-connections")? as usize,
            max_buffered: (at_least_one(self.max_buffered_mib as u64, "max-buffered-mib")?
                as usize)
                .saturating_mul(1 << 20),
            max_queue: at_least_one(self.max_queue as u64, "max-queue")? as usize,
        })
    }
}

/// Bytes of request bodies being read or waiting for their handler, over
/// all connections.
#[derive(Debug, Default)]
pub struct BodyBudget {
    used: AtomicUsize,
}

/// A body's share of the budget, given back when dropped.
struct Held {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Held {
    /// Takes `n` more bytes if the budget (of `max`) has room.
    fn take(&mut self, n: usize, max: usize) -> bool {
        let budget = &self.budget.used;
        let took = budget.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(n).filter(|&u| u <= max)
        });
        if took.is_ok() {
            self.bytes += n;
        }
        took.is_ok()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Reads a request's body before its handler runs: refused at once where
/// its declared length passes [`READ_LIMIT`] (413), cut off at that limit
/// or when it takes longer than the body timeout (408), and refused (503)
/// where it would take the bodies being read past their budget. The body
/// the handler gets holds its share of the budget until it is consumed.
pub async fn read_body(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let declared = declared_length(&parts.headers);
    if declared.is_some_and(|n| n > READ_LIMIT as u64) {
        return ApiError::too_large().into_response();
    }
    // Within READ_LIMIT: fits a usize.
    let declared = declared.map(|n| n as usize);
    let mut held = Held {
        budget: st.body_budget.clone(),
        bytes: 0,
    };
    let max = st.limits.max_buffered;
    let busy =
        || ApiError::busy("Too many request bytes are being received at once; try again shortly");
    // A declared length is taken from the budget whole, before any byte,
    // and the buffer allocated once; a body of unknown length takes what
    // each chunk adds to the buffer's capacity.
    if declared.is_some_and(|n| !held.take(n, max)) {
        return busy().into_response();
    }
    let read = async {
        let mut body = body;
        let mut buf = Vec::with_capacity(declared.unwrap_or(0));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                ApiError::invalid(format!("Cannot read the request body: {e}"), None)
            })?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            if buf.len() + data.len() > READ_LIMIT {
                return Err(ApiError::too_large());
            }
            let capacity = buf.capacity();
            buf.extend_from_slice(&data);
            let grown = buf.capacity() - capacity;
            if grown > 0 && !held.take(grown, max) {
                return Err(busy());
            }
        }
        Ok(Bytes::from(buf))
    };
    let bytes = match tokio::time::timeout(st.limits.body_timeout, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return e.into_response(),
        Err(_) => return ApiError::timeout(st.limits.body_timeout).into_response(),
    };
    // The budget is given back once the handler has taken the body.
    let body = Full::new(bytes).map_frame(move |frame| {
        let _ = &held;
        frame
    });
    next.run(Request::from_parts(parts, Body::new(body))).await
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}
