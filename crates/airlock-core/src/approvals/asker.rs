//! The asking side, in the run's supervisor: the gate's [`Approver`] for one run. It records
//! the question (audit first, then the file others read), offers it to the profile's webhook,
//! and waits for the answer file; nobody in time, or the run stopped meanwhile, is a refusal it
//! writes itself, under the same lock as a person's answer.
//!
//! One approval per host and port per run: a second connect there while one waits waits for
//! the same answer, and once answered every later connect of the run gets the same answer
//! without asking again ("allow once" is once per run: a program that retries or opens a second
//! connection is not asked twice, and a denial is not asked again either).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use airlock_egress::gate::{Approver, Question};
use airlock_rules::Decision;
use serde::Serialize;

use super::{answer_path, lock, profile_line, question_path, read_json, write_atomically};
use super::{Answer, Approval, ApprovalStatus};
use crate::error::Error;

/// How often a waiting approval looks for its answer and for what ends it (an answer file's
/// appearance; the kill switch's flags).
const POLL: Duration = Duration::from_millis(100);
/// How often it reads the persistent switches (`airlock disable`).
const SWITCHES_POLL: Duration = Duration::from_secs(1);
/// The most approvals of one run waiting at once: more is a program asking for many hosts, and
/// a person cannot answer a flood anyway. Past it a connection is refused at once.
pub(crate) const MAX_WAITING: usize = 8;

/// What the run knows of one host and port.
enum Known {
    /// Asked; the connects there wait for this.
    Waiting(Arc<Waiter>),
    /// Answered: the answer holds for the rest of the run.
    Decided(Decision),
}

#[derive(Default)]
struct Waiter {
    decision: Mutex<Option<Decision>>,
    ready: Condvar,
}

/// A run's approver.
pub(crate) struct RunApprover {
    pub(crate) state_dir: PathBuf,
    pub(crate) audit: crate::audit::Log,
    pub(crate) session: Option<String>,
    pub(crate) profile: String,
    /// The run: its supervisor's pid (this process's).
    pub(crate) run: u32,
    pub(crate) timeout: Duration,
    pub(crate) webhook: Option<String>,
    known: Mutex<HashMap<(String, u16), Known>>,
    /// Set when the run ends: what still waits is refused.
    ended: AtomicBool,
}

/// `approval.asked`.
#[derive(Serialize)]
struct Asked<'a> {
    id: &'a str,
    session: Option<&'a str>,
    profile: &'a str,
    run: u32,
    host: &'a str,
    port: u16,
    program: Option<&'a str>,
    entry: &'a str,
    expires_at: u64,
    timeout_seconds: u64,
}

/// `approval.expired` and `approval.ended`: refused without a person's answer, and why.
#[derive(Serialize)]
struct Closed<'a> {
    id: &'a str,
    session: Option<&'a str>,
    profile: &'a str,
    run: u32,
    host: &'a str,
    port: u16,
    why: &'a str,
}

fn deny(rule: impl Into<String>) -> Decision {
    Decision {
        allowed: false,
        rule: rule.into(),
    }
}

impl RunApprover {
    pub(crate) fn new(
        state_dir: PathBuf,
        audit: crate::audit::Log,
        session: Option<String>,
        profile: String,
        timeout: Duration,
        webhook: Option<String>,
    ) -> RunApprover {
        RunApprover {
            state_dir,
            audit,
            session,
            profile,
            run: std::process::id(),
            timeout,
            webhook,
            known: Mutex::new(HashMap::new()),
            ended: AtomicBool::new(false),
        }
    }

    /// The run is over: approvals still waiting end, refused; waited for (at most `within`),
    /// so that their records are written before the run's process exits.
    pub(crate) fn end(&self, within: Duration) {
        self.ended.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + within;
        let waiting = || {
            self.known
                .lock()
                .is_ok_and(|known| known.values().any(|k| matches!(k, Known::Waiting(_))))
        };
        while waiting() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ask, wait, and say what came of it.
    fn ask(&self, question: &Question) -> Decision {
        let id = match crate::tokens::random_hex(8) {
            Ok(hex) => format!("ap_{hex}"),
            Err(e) => return deny(format!("cannot ask a person: {e}")),
        };
        let asked_at = crate::session::now();
        let expires_at = asked_at + self.timeout.as_secs().max(1);
        let approval = Approval {
            id: id.clone(),
            status: ApprovalStatus::Pending,
            session: self.session.clone(),
            profile: self.profile.clone(),
            run: self.run,
            host: question.host.clone(),
            port: question.port,
            program: question.program.clone(),
            entry: question.entry.clone(),
            asked_at,
            expires_at,
            timeout_seconds: self.timeout.as_secs(),
            seconds_left: 0,
            profile_line: profile_line(&question.host, question.port),
            answer: None,
        };
        // In the log (durably) before anyone can see it; nobody is asked what the log lacks.
        if let Err(e) = self.record_question(&approval) {
            return deny(format!("cannot ask a person: {e}"));
        }
        if let Some(url) = &self.webhook {
            super::webhook::offer(url.clone(), approval.clone(), self.audit.clone());
        }
        self.wait(&approval)
    }

    fn record_question(&self, approval: &Approval) -> Result<(), Error> {
        let fields = serde_json::to_value(Asked {
            id: &approval.id,
            session: approval.session.as_deref(),
            profile: &approval.profile,
            run: approval.run,
            host: &approval.host,
            port: approval.port,
            program: approval.program.as_deref(),
            entry: &approval.entry,
            expires_at: approval.expires_at,
            timeout_seconds: approval.timeout_seconds,
        })?;
        crate::audit::append(&self.audit, "approval.asked", fields)?;
        super::prune(&self.state_dir);
        write_atomically(&question_path(&self.state_dir, &approval.id), approval)
    }

    /// Wait for the answer, the clock, or the end of the run.
    fn wait(&self, approval: &Approval) -> Decision {
        let id = &approval.id;
        let deadline = Instant::now() + self.timeout;
        let mut switches_read = Instant::now();
        loop {
            if let Ok(Some(answer)) = read_json::<Answer>(&answer_path(&self.state_dir, id)) {
                let decision = decision_of(id, &answer);
                // A yes holds only for a run that may still connect: one paused, cut off or
                // disabled since is refused all the same (the switches read now, not a second
                // ago).
                let mut now = Instant::now()
                    .checked_sub(SWITCHES_POLL)
                    .unwrap_or_else(Instant::now);
                return match self.stopped(&mut now).filter(|_| decision.allowed) {
                    Some(why) => deny(format!("{why} (approval {id} was answered after it)")),
                    None => decision,
                };
            }
            if let Some(why) = self.stopped(&mut switches_read) {
                return self.close(approval, ApprovalStatus::Ended, &why);
            }
            if Instant::now() >= deadline {
                let why = format!(
                    "nobody answered within {} s (ask_timeout)",
                    self.timeout.as_secs()
                );
                return self.close(approval, ApprovalStatus::Expired, &why);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Why the run may no longer connect anywhere, if it may not: it ended, was killed or
    /// paused, its network was cut, or airlock was disabled for its profile.
    fn stopped(&self, switches_read: &mut Instant) -> Option<String> {
        if self.ended.load(Ordering::SeqCst) {
            return Some("the run ended before anyone answered".into());
        }
        let flags = crate::control::run_flags(&self.state_dir, self.run);
        if let Some(why) = flags {
            return Some(why);
        }
        if switches_read.elapsed() >= SWITCHES_POLL {
            *switches_read = Instant::now();
            if let Err(e) = crate::control::check_enabled(&self.state_dir, &self.profile) {
                return Some(e.to_string());
            }
        }
        None
    }

    /// Refuse it for `why`, unless a person's answer came first (under the lock, whoever is
    /// first is the answer): `approval.expired` or `approval.ended` before the answer file.
    fn close(&self, approval: &Approval, status: ApprovalStatus, why: &str) -> Decision {
        let refused = deny(why);
        let Ok(_lock) = lock(&self.state_dir) else {
            return refused;
        };
        if let Ok(Some(answer)) = read_json::<Answer>(&answer_path(&self.state_dir, &approval.id)) {
            // A yes that came first is still no yes for a run that may not connect now (closed
            // as ended: paused, cut off, killed, disabled); one that beat the clock holds.
            let decision = decision_of(&approval.id, &answer);
            return match (decision.allowed, status) {
                (true, ApprovalStatus::Ended) => refused,
                _ => decision,
            };
        }
        let action = match status {
            ApprovalStatus::Expired => "approval.expired",
            _ => "approval.ended",
        };
        let closed = Closed {
            id: &approval.id,
            session: approval.session.as_deref(),
            profile: &approval.profile,
            run: approval.run,
            host: &approval.host,
            port: approval.port,
            why,
        };
        if let Ok(fields) = serde_json::to_value(closed) {
            let _ = crate::audit::append(&self.audit, action, fields);
        }
        let answer = Answer {
            status,
            by: "nobody".into(),
            reason: Some(why.to_string()),
            at: crate::session::now(),
        };
        let _ = write_atomically(&answer_path(&self.state_dir, &approval.id), &answer);
        refused
    }
}

/// The gate's decision for an answer, naming who gave it.
fn decision_of(id: &str, answer: &Answer) -> Decision {
    let reason = answer
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    match answer.status {
        ApprovalStatus::AllowedOnce => Decision {
            allowed: true,
            rule: format!("allowed for this run by {} (approval {id})", answer.by),
        },
        ApprovalStatus::AllowedSession => Decision {
            allowed: true,
            rule: format!("allowed for this session by {} (approval {id})", answer.by),
        },
        ApprovalStatus::Denied => deny(format!("denied by {}{reason} (approval {id})", answer.by)),
        ApprovalStatus::Expired | ApprovalStatus::Ended | ApprovalStatus::Pending => deny(
            answer
                .reason
                .clone()
                .unwrap_or_else(|| format!("nobody answered (approval {id})")),
        ),
    }
}

impl Approver for RunApprover {
    fn decide(&self, question: &Question) -> Decision {
        let key = (question.host.clone(), question.port);
        let (waiter, asks) = {
            let Ok(mut known) = self.known.lock() else {
                return deny("cannot ask a person: the approvals' table is poisoned");
            };
            match known.get(&key) {
                Some(Known::Decided(decision)) => return decision.clone(),
                Some(Known::Waiting(waiter)) => (waiter.clone(), false),
                None => {
                    let waiting = known
                        .values()
                        .filter(|k| matches!(k, Known::Waiting(_)))
                        .count();
                    if waiting >= MAX_WAITING {
                        return deny(format!(
                            "{MAX_WAITING} approvals of this run wait already: answer those first"
                        ));
                    }
                    let waiter = Arc::new(Waiter::default());
                    known.insert(key.clone(), Known::Waiting(waiter.clone()));
                    (waiter, true)
                }
            }
        };
        if asks {
            let decision = self.ask(question);
            if let Ok(mut known) = self.known.lock() {
                known.insert(key, Known::Decided(decision.clone()));
            }
            if let Ok(mut slot) = waiter.decision.lock() {
                *slot = Some(decision.clone());
            }
            waiter.ready.notify_all();
            return decision;
        }
        let Ok(mut slot) = waiter.decision.lock() else {
            return deny("cannot ask a person: the approvals' table is poisoned");
        };
        loop {
            if let Some(decision) = slot.as_ref() {
                return decision.clone();
            }
            slot = match waiter.ready.wait(slot) {
                Ok(slot) => slot,
                Err(_) => return deny("cannot ask a person: the approvals' table is poisoned"),
            };
        }
    }
}
