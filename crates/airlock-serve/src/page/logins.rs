//! The page's logins: a cookie's value names one, and through it the operator token it was made
//! for. Kept in the server's memory only: a server started again logs every page out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::ApiError;

/// How long a login lasts (its token's own end, if sooner, ends it too).
pub const LOGIN_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// Logins kept at once; past it the oldest is dropped.
const MAX_LOGINS: usize = 256;

#[derive(Debug, Clone)]
pub struct Login {
    pub token_id: String,
    /// What every request that changes something sends back in `X-Airlock-CSRF`: a page of
    /// another origin cannot read it, nor set that header on a request the browser lets through.
    pub csrf: String,
    pub since: Instant,
}

#[derive(Default)]
pub struct Logins {
    open: Mutex<HashMap<String, Login>>,
    refusals: Mutex<Refusals>,
}

/// Refused logins not yet on record.
#[derive(Default)]
struct Refusals {
    pending: u64,
    /// Why the last of them was refused.
    last: String,
    /// When the last record of them was written.
    recorded: Option<Instant>,
}

/// Refused logins are recorded at most this often, counted.
const REFUSALS_RECORDED_EVERY: Duration = Duration::from_secs(1);

impl Logins {
    /// Open a login for `token_id`: the cookie's value and the login.
    pub fn open(&self, token_id: &str) -> Result<(String, Login), ApiError> {
        let cookie = secret()?;
        let login = Login {
            token_id: token_id.to_string(),
            csrf: secret()?,
            since: Instant::now(),
        };
        let mut open = self.lock()?;
        open.retain(|_, login| login.since.elapsed() < LOGIN_LIFETIME);
        if open.len() >= MAX_LOGINS {
            let oldest = open
                .iter()
                .min_by_key(|(_, login)| login.since)
                .map(|(cookie, _)| cookie.clone());
            if let Some(oldest) = oldest {
                open.remove(&oldest);
            }
        }
        open.insert(cookie.clone(), login.clone());
        Ok((cookie, login))
    }

    /// The login a cookie's value names, if it is still open.
    pub fn get(&self, cookie: &str) -> Option<Login> {
        let mut open = self.lock().ok()?;
        match open.get(cookie) {
            Some(login) if login.since.elapsed() < LOGIN_LIFETIME => Some(login.clone()),
            Some(_) => {
                open.remove(cookie);
                None
            }
            None => None,
        }
    }

    /// Count a refused login (refused for `why`); `record(count, why)` the refusals not on
    /// record yet when the last record of them is [`REFUSALS_RECORDED_EVERY`] old. What is
    /// left is recorded by [`Logins::flush`], which the server calls every second.
    pub fn refused(&self, why: String, record: impl FnOnce(u64, &str)) {
        let Ok(mut refusals) = self.refusals.lock() else {
            return;
        };
        refusals.pending += 1;
        refusals.last = why;
        Self::record_due(&mut refusals, record);
    }

    /// Record the refusals not on record yet, if the last record of them is old enough.
    pub fn flush(&self, record: impl FnOnce(u64, &str)) {
        if let Ok(mut refusals) = self.refusals.lock() {
            Self::record_due(&mut refusals, record);
        }
    }

    fn record_due(refusals: &mut Refusals, record: impl FnOnce(u64, &str)) {
        let due = refusals
            .recorded
            .is_none_or(|at| at.elapsed() >= REFUSALS_RECORDED_EVERY);
        if refusals.pending > 0 && due {
            record(refusals.pending, &refusals.last);
            refusals.pending = 0;
            refusals.recorded = Some(Instant::now());
        }
    }

    pub fn close(&self, cookie: &str) {
        if let Ok(mut open) = self.lock() {
            open.remove(cookie);
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Login>>, ApiError> {
        self.open
            .lock()
            .map_err(|_| ApiError::internal("the page's logins were lost — please report it"))
    }
}

fn secret() -> Result<String, ApiError> {
    airlock_core::page_login::new_secret().map_err(ApiError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_is_found_by_its_cookie_only_until_closed() {
        let logins = Logins::default();
        let (cookie, login) = logins.open("0011").unwrap();
        assert_eq!(logins.get(&cookie).unwrap().token_id, "0011");
        assert_ne!(cookie, login.csrf);
        assert_eq!(cookie.len(), 64);
        assert!(logins.get("other").is_none());
        logins.close(&cookie);
        assert!(logins.get(&cookie).is_none());
    }

    #[test]
    fn refusals_are_recorded_at_most_once_a_second_and_counted() {
        let logins = Logins::default();
        let mut recorded = Vec::new();
        for n in 0..5 {
            logins.refused(format!("no {n}"), |count, why| {
                recorded.push((count, why.to_string()))
            });
        }
        assert_eq!(recorded, [(1, "no 0".to_string())]);
        // Nothing is due within the second; then the rest, with the last reason.
        logins.flush(|count, why| recorded.push((count, why.to_string())));
        assert_eq!(recorded.len(), 1);
        logins.refusals.lock().unwrap().recorded = Some(Instant::now() - REFUSALS_RECORDED_EVERY);
        logins.flush(|count, why| recorded.push((count, why.to_string())));
        assert_eq!(recorded[1], (4, "no 4".to_string()));
        logins.refusals.lock().unwrap().recorded = Some(Instant::now() - REFUSALS_RECORDED_EVERY);
        logins.flush(|_, _| panic!("nothing is pending"));
    }
}
