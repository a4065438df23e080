//! A progress line on stderr for work that can take seconds (a diff or an apply of thousands of
//! files), so that a person at a terminal does not take airlock for hung. Only on a terminal:
//! in a pipe, or with --json, nothing is written (scripts read stderr too), and the line is
//! erased before anything else is printed.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long work goes quietly before the line appears: most diffs and applies are done by then.
const QUIET_FOR: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(250);

/// The progress line of one piece of work; it is erased, and its thread ended, when dropped.
pub struct Progress {
    done: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Say `what` is being done (e.g. "reading session 3f2a's changes") while it takes longer than a
    /// second, when stderr is a terminal and the output is not JSON.
    pub fn start(what: String, json: bool) -> Progress {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let shown = !json && std::io::stderr().is_terminal();
        let thread = shown.then(|| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || tick(&what, &done, quiet_for()))
        });
        Progress { done, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        let (lock, wake) = &*self.done;
        if let Ok(mut done) = lock.lock() {
            *done = true;
        }
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Until `done`: nothing for `quiet`, then `what` and the seconds gone by, redrawn in place; the
/// line is erased at the end if it was drawn.
fn tick(what: &str, done: &(Mutex<bool>, Condvar), quiet: Duration) {
    let (lock, wake) = done;
    let started = Instant::now();
    let mut drawn = false;
    let Ok(mut finished) = lock.lock() else {
        return;
    };
    loop {
        let wait = if drawn {
            TICK
        } else {
            quiet.saturating_sub(started.elapsed())
        };
        finished = match wake.wait_timeout_while(finished, wait, |finished| !*finished) {
            Ok((finished, _)) => finished,
            Err(_) => return,
        };
        if *finished {
            break;
        }
        let seconds = started.elapsed().as_secs();
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[Kairlock: {what}… {seconds} s");
        let _ = stderr.flush();
        drawn = true;
    }
    if drawn {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[K");
        let _ = stderr.flush();
    }
}

/// [`QUIET_FOR`]; the test suite's debug build may shorten it (`AIRLOCK_TEST_PROGRESS_AFTER_MS`)
/// to see the line without work that takes a second. Release builds never look.
fn quiet_for() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("AIRLOCK_TEST_PROGRESS_AFTER_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        return Duration::from_millis(ms);
    }
    QUIET_FOR
}
