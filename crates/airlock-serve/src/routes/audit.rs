//! The audit log: records through filters (an agent's token sees only its own requests'), or
//! followed as an NDJSON stream.

use std::convert::Infallible;

use axum::body::Body as HttpBody;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::mpsc;

use airlock_audit::Filter;

use crate::app::{blocking, Authed, Shared};
use crate::error::{ApiError, ApiResult};

/// Records one answer holds at most (the rest: ask again with `since`, or follow).
const MAX_RECORDS: usize = 10_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    session: Option<String>,
    /// An action or a family of them: `run`, `run.result`, `session`, `apply`…
    action: Option<String>,
    /// RFC 3339 time: only records at or after it.
    since: Option<String>,
    /// Only refusals and denials.
    #[serde(default)]
    denied: bool,
    /// Keep the answer open and send records as they are written (NDJSON).
    #[serde(default)]
    follow: bool,
    /// At most this many records (not with follow); default and most: 10000.
    limit: Option<usize>,
}

pub async fn records(
    State(app): State<Shared>,
    authed: Authed,
    headers: axum::http::HeaderMap,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(query) = query?;
    let since = query.since.as_deref().map(since_of).transpose()?;
    let filter = Filter {
        session: query.session.clone(),
        profile: None,
        since,
        actions: query.action.clone().into_iter().collect(),
        denied: query.denied,
        token: None,
    };
    let (caller, slot) = (authed.caller, authed.slot);
    if query.follow {
        // A follower holds a thread for as long as it reads: it counts as one of its token's runs.
        let run_slot = app.limiter.run_slot(&authed.token.id).await?;
        let id = authed.token.id.clone();
        // A follower ends with its token, and one that came with the page's login with the login.
        let login = authed.page_login.clone();
        let token_valid = move || {
            app.tokens.is_valid(&id) && login.as_ref().is_none_or(|c| app.logins.get(c).is_some())
        };
        // A browser's EventSource asks for server-sent events; every other client gets NDJSON.
        let events = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("text/event-stream"));
        return Ok(follow(caller, filter, run_slot, token_valid, events));
    }
    let limit = query.limit.unwrap_or(MAX_RECORDS).clamp(1, MAX_RECORDS);
    let records = blocking(slot, move || {
        let (mut records, filter) = airlock_core::audit::records(&caller, filter)?;
        let mut found = Vec::new();
        while found.len() < limit {
            match records
                .next_matching(&filter)
                .map_err(airlock_core::Error::from)?
            {
                Some(record) => found.push(record),
                None => break,
            }
        }
        Ok(found)
    })
    .await?;
    Ok(Json(serde_json::json!({ "records": records })).into_response())
}

/// `since` as records spell their times (RFC 3339 UTC, to the millisecond), which the filter
/// compares as text: a time written otherwise (`2026-12-01 20:00:00`, no `Z`) would compare
/// wrongly, its space sorting before any record's `T`.
fn since_of(text: &str) -> Result<String, ApiError> {
    let at = humantime::parse_rfc3339_weak(text).map_err(|_| {
        ApiError::bad_request(
            "bad_since",
            format!("since {text:?}: give an RFC 3339 time in UTC (2026-12-01T20:00:00Z)"),
        )
    })?;
    Ok(humantime::format_rfc3339_millis(at).to_string())
}

/// Follow the log on a thread of its own until the client goes away, or its token is revoked or
/// expires (a follower is not a way to go on reading with a token that opens nothing).
fn follow(
    caller: airlock_core::Caller,
    filter: Filter,
    slot: tokio::sync::OwnedSemaphorePermit,
    token_valid: impl Fn() -> bool + Send + 'static,
    events: bool,
) -> Response {
    let (lines, receiver) = mpsc::channel::<Bytes>(64);
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let Ok((mut records, filter)) = airlock_core::audit::records(&caller, filter) else {
            return;
        };
        loop {
            if !token_valid() {
                return;
            }
            while let Ok(Some(record)) = records.next_matching(&filter) {
                let json = serde_json::Value::Object(record).to_string();
                // A record is one line of JSON (no newline inside): one event's data line.
                let text = if events {
                    format!("data: {json}\n\n")
                } else {
                    format!("{json}\n")
                };
                if lines.blocking_send(Bytes::from(text)).is_err() {
                    return;
                }
            }
            if lines.is_closed() {
                return;
            }
            records.wait();
        }
    });
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let line = receiver.recv().await?;
        Some((Ok::<Bytes, Infallible>(line), receiver))
    });
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                if events {
                    "text/event-stream"
                } else {
                    "application/x-ndjson"
                },
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        HttpBody::from_stream(stream),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::since_of;

    #[test]
    fn since_is_spelled_as_records_spell_their_times() {
        for (given, spelled) in [
            ("2026-12-01T20:00:00Z", "2026-12-01T20:00:00.000Z"),
            ("2026-12-01 20:00:00", "2026-12-01T20:00:00.000Z"),
            ("2026-12-01T20:00:00.5+00:00", "2026-12-01T20:00:00.500Z"),
        ] {
            assert_eq!(since_of(given).unwrap(), spelled, "{given}");
        }
        // A record of 10:00 that day is before it, as text too.
        assert!("2026-12-01T10:00:00.000Z" < since_of("2026-12-01 20:00:00").unwrap().as_str());
        for bad in [
            "yesterday",
            "2026-12-01T20:00:00+01:00",
            "1969-12-31T23:59:59Z",
            "",
        ] {
            assert_eq!(since_of(bad).unwrap_err().code, "bad_since", "{bad}");
        }
    }
}
