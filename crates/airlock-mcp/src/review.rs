//! What the agent may see of its session: the changes (paged, with hazards) and the audit log.
//! Core reads both, as the caller's; nothing here decides what the caller may see.

use std::collections::VecDeque;

use airlock_core::DiffRequest;
use airlock_core::Refusal;

use crate::host::Client;
use crate::runs::review_note;
use crate::tools::{Changes, Log};

/// Changed files a page of `changes` lists, with their patch.
const PAGE: usize = 50;

pub async fn changes(host: &Client, page: usize) -> Result<Changes, Refusal> {
    let page = page.max(1);
    let Some(session) = host.current_session().await else {
        return Ok(Changes {
            session: None,
            files: Vec::new(),
            patch: String::new(),
            trees: Vec::new(),
            page,
            pages: 0,
            review: "No command has run yet: nothing changed.".into(),
        });
    };
    let caller = host.caller.clone();
    let request = DiffRequest {
        session: session.clone(),
        paths: Vec::new(),
        no_ignored: false,
    };
    // A patch is made in memory from both sides of each file: a page whose files hold more than
    // the server shows of a run's output (twice) is listed without it.
    let largest_patch_input = host.runner.keep_output.saturating_mul(2);
    let (files, patch, pages, trees) = host.core(move || {
        let diff = airlock_core::diff(&caller, &request)?;
        let io = |e: std::io::Error| airlock_core::Error::Argument {
            arg: "changes".into(),
            why: format!("cannot read the session's changes: {e}"),
        };
        let entries = diff.entries().map_err(io)?;
        let pages = entries.len().div_ceil(PAGE);
        // Saturating: a page number near the top of its type is a page past the end, not an
        // overflow (nor a range ending before it starts).
        let end = page.saturating_mul(PAGE).min(entries.len());
        let range = (page - 1).saturating_mul(PAGE).min(end)..end;
        let input = diff.patch_input_bytes(range.clone());
        let patch = if input > largest_patch_input {
            format!("(the patch of this page's files, {input} bytes of content, is too large to show here: a person sees it with airlock diff)")
        } else {
            let mut patch = Vec::new();
            diff.write_patch_of(&mut patch, range.clone()).map_err(io)?;
            String::from_utf8_lossy(&patch).into_owned()
        };
        let files = entries[range]
            .iter()
            .filter_map(|entry| serde_json::to_value(entry).ok())
            .collect::<Vec<_>>();
        let trees = diff
            .trees()
            .iter()
            .filter_map(|tree| serde_json::to_value(tree).ok())
            .collect::<Vec<_>>();
        Ok((files, patch, pages, trees))
    })
    .await?;
    Ok(Changes {
        review: review_note(&session),
        session: Some(session),
        files,
        patch,
        trees,
        page,
        pages,
    })
}

/// The session's latest `limit` audit records, oldest first.
pub async fn log(host: &Client, limit: usize) -> Result<Log, Refusal> {
    let Some(session) = host.current_session().await else {
        return Ok(Log {
            session: None,
            records: Vec::new(),
        });
    };
    let caller = host.caller.clone();
    let filter = airlock_audit::Filter {
        session: Some(session.clone()),
        ..airlock_audit::Filter::default()
    };
    let records = host
        .core(move || {
            let (mut records, filter) = airlock_core::audit::records(&caller, filter)?;
            let mut latest = VecDeque::with_capacity(limit);
            while let Some(record) = records
                .next_matching(&filter)
                .map_err(airlock_core::Error::from)?
            {
                if latest.len() == limit {
                    latest.pop_front();
                }
                latest.push_back(serde_json::Value::Object(record));
            }
            Ok(Vec::from(latest))
        })
        .await?;
    Ok(Log {
        session: Some(session),
        records,
    })
}
