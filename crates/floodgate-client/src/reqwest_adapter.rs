//! [`ReqwestService`]: a `reqwest::Client` as a tower service, so the layer can wrap it
//! (feature `reqwest`).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use floodgate_client::{PoliteLayer, ReqwestService};
//! use tower::{Layer, Service};
//!
//! let mut client = PoliteLayer::new().layer(ReqwestService::new(reqwest::Client::new()));
//! let request = http::Request::get("http://127.0.0.1:8080/v1/things").body(bytes::Bytes::new())?;
//! std::future::poll_fn(|cx| client.poll_ready(cx)).await?;
//! let response = client.call(request).await?;
//! println!("{}", response.status());
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower::Service;

/// A `reqwest::Client` taking `http::Request<Bytes>` (cheap to copy for retries) and
/// answering `http::Response<reqwest::Body>`.
#[derive(Clone, Debug, Default)]
pub struct ReqwestService {
    client: reqwest::Client,
}

impl ReqwestService {
    /// Wraps `client`.
    pub fn new(client: reqwest::Client) -> ReqwestService {
        ReqwestService { client }
    }
}

impl Service<Request<Bytes>> for ReqwestService {
    type Response = Response<reqwest::Body>;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, reqwest::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let request = reqwest::Request::try_from(request)?;
            let response = client.execute(request).await?;
            Ok(Response::from(response))
        })
    }
}
