//! What keeps one client from starving the others: requests per second and concurrent runs, per
//! token. (Body size and output kept are limits of the router and of each run.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

#[derive(Debug, Clone, Copy)]
pub struct Quotas {
    /// Requests per second a token may make, on average; twice that in a burst.
    pub requests_per_second: u32,
    /// Runs of one token at the same time.
    pub runs_per_token: u32,
}

/// A token bucket: `rate` a second, `burst` at most.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Requests of one token in progress at once, besides its runs: each may hold one of the threads
/// core's operations run on (for as long as it waits for a session another run holds, say), and
/// those threads are every token's.
pub const REQUESTS_IN_PROGRESS_PER_TOKEN: usize = 16;

/// How long a run waits for one of its token's places before it is refused (it holds one of the
/// token's [`REQUESTS_IN_PROGRESS_PER_TOKEN`] meanwhile, so the wait is bounded twice over).
pub const RUN_PLACE_WAIT: Duration = Duration::from_secs(1);

pub struct Limiter {
    quotas: Quotas,
    buckets: Mutex<HashMap<String, Bucket>>,
    runs: Mutex<HashMap<String, Arc<Semaphore>>>,
    in_progress: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Limiter {
    pub fn new(quotas: Quotas) -> Limiter {
        Limiter {
            quotas,
            buckets: Mutex::new(HashMap::new()),
            runs: Mutex::new(HashMap::new()),
            in_progress: Mutex::new(HashMap::new()),
        }
    }

    /// Count a request of `token`; refuse it (429) past its rate.
    pub fn admit(&self, token: &str) -> Result<(), ApiError> {
        let rate = f64::from(self.quotas.requests_per_second.max(1));
        let burst = rate * 2.0;
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .map_err(|_| ApiError::internal("the rate limiter failed"))?;
        let bucket = buckets.entry(token.to_string()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(burst);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            let mut err = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "this token made more than {} requests a second: slow down (airlock serve --requests-per-second)",
                    self.quotas.requests_per_second
                ),
            );
            err.retry_after = Some(1);
            return Err(err);
        }
        bucket.tokens -= 1.0;
        Ok(())
    }

    /// A place for one more run of `token`, held until the run ends; 429 when it has as many as
    /// it may, now.
    pub fn try_run_slot(&self, token: &str) -> Result<OwnedSemaphorePermit, ApiError> {
        let semaphore = self.runs_of(token)?;
        semaphore
            .try_acquire_owned()
            .map_err(|_| self.too_many_runs())
    }

    /// A place for one more run of `token`, waiting up to [`RUN_PLACE_WAIT`] for one to free;
    /// 429 after. A client that reads its answer and asks again at once must not be refused
    /// for the moment the server takes to let go of the place the answer held (the last bytes
    /// sent, the worker reaped): with as many clients as places, one request in five was.
    pub async fn run_slot(&self, token: &str) -> Result<OwnedSemaphorePermit, ApiError> {
        let semaphore = self.runs_of(token)?;
        if let Ok(permit) = semaphore.clone().try_acquire_owned() {
            return Ok(permit);
        }
        match tokio::time::timeout(RUN_PLACE_WAIT, semaphore.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(self.too_many_runs()),
        }
    }

    fn runs_of(&self, token: &str) -> Result<Arc<Semaphore>, ApiError> {
        semaphore_of(&self.runs, token, self.quotas.runs_per_token as usize)
    }

    fn too_many_runs(&self) -> ApiError {
        let mut err = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_runs",
            format!(
                "this token has {} runs going already: wait for one to end (airlock serve --runs-per-token)",
                self.quotas.runs_per_token
            ),
        );
        err.retry_after = Some(1);
        err
    }

    /// A place for one more request of `token` in progress, held until its operation ends (its
    /// body read, its core call done); 429 past [`REQUESTS_IN_PROGRESS_PER_TOKEN`].
    pub fn request_slot(&self, token: &str) -> Result<OwnedSemaphorePermit, ApiError> {
        let semaphore = semaphore_of(&self.in_progress, token, REQUESTS_IN_PROGRESS_PER_TOKEN)?;
        semaphore.try_acquire_owned().map_err(|_| {
            let mut err = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                format!(
                    "this token has {REQUESTS_IN_PROGRESS_PER_TOKEN} requests in progress already: wait for their answers"
                ),
            );
            err.retry_after = Some(1);
            err
        })
    }
}

/// The semaphore of `token` in `map`, made with `permits` the first time.
fn semaphore_of(
    map: &Mutex<HashMap<String, Arc<Semaphore>>>,
    token: &str,
    permits: usize,
) -> Result<Arc<Semaphore>, ApiError> {
    let mut map = map
        .lock()
        .map_err(|_| ApiError::internal("the request limiter failed"))?;
    Ok(map
        .entry(token.to_string())
        .or_insert_with(|| Arc::new(Semaphore::new(permits)))
        .clone())
}
