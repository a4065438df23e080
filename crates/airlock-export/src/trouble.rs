//! The exporter's own trouble, told to a person on stderr: never into the stream it exports (the
//! stdout destination is that stream), and at most once a while for the same destination, so that
//! a collector down for a day is a line a minute, not a flood.

use std::time::{Duration, Instant};

/// How often a destination's trouble is said at most.
pub const QUIET_FOR: Duration = Duration::from_secs(60);

pub struct Trouble {
    destination: &'static str,
    /// When trouble was last said, and how many times since it went unsaid.
    said: Option<Instant>,
    unsaid: u64,
    /// Failed deliveries since the last success.
    failures: u64,
    say: Box<dyn FnMut(&str) + Send>,
}

impl Trouble {
    /// Trouble for `destination`, said on stderr.
    pub fn on_stderr(destination: &'static str) -> Trouble {
        Trouble::new(destination, Box::new(say_on_stderr))
    }

    pub fn new(destination: &'static str, say: Box<dyn FnMut(&str) + Send>) -> Trouble {
        Trouble {
            destination,
            said: None,
            unsaid: 0,
            failures: 0,
            say,
        }
    }

    /// Say something once, whatever else was said (a note about the log, a start).
    pub fn note(&mut self, what: &str) {
        (self.say)(&format!("airlock: export to {}: {what}", self.destination));
    }

    /// A delivery failed: said now, or counted until a while has passed since the last saying.
    pub fn failed(&mut self, now: Instant, what: &str) {
        self.failures += 1;
        if self
            .said
            .is_some_and(|at| now.duration_since(at) < QUIET_FOR)
        {
            self.unsaid += 1;
            return;
        }
        let more = match self.unsaid {
            0 => String::new(),
            n => format!(" ({n} more failures since the last message)"),
        };
        self.note(&format!(
            "{what}; the records wait in the audit log and are sent when it answers{more}"
        ));
        self.said = Some(now);
        self.unsaid = 0;
    }

    /// A delivery went through: if trouble was said, say that it is over.
    pub fn delivered(&mut self) {
        if self.failures > 0 && self.said.is_some() {
            let failures = self.failures;
            self.note(&format!(
                "delivering again, after {failures} failed attempts"
            ));
        }
        self.failures = 0;
        self.said = None;
        self.unsaid = 0;
    }
}

fn say_on_stderr(line: &str) {
    use std::io::Write as _;
    // writeln! rather than eprintln!, which panics when stderr is closed.
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn failures_are_said_once_a_while_and_the_recovery_once() {
        let heard = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = heard.clone();
        let mut trouble = Trouble::new(
            "otlp",
            Box::new(move |line| sink.lock().unwrap().push(line.to_string())),
        );
        let start = Instant::now();
        trouble.failed(start, "cannot connect to http://c:4318/v1/logs");
        for i in 1..=5 {
            trouble.failed(start + Duration::from_secs(i), "cannot connect");
        }
        trouble.failed(start + QUIET_FOR + Duration::from_secs(1), "HTTP 503");
        trouble.delivered();
        trouble.delivered();
        let heard = heard.lock().unwrap();
        assert_eq!(heard.len(), 3, "{heard:?}");
        assert!(heard[0].starts_with("airlock: export to otlp: cannot connect to http://c:4318"));
        assert!(
            heard[1].contains("HTTP 503") && heard[1].contains("(5 more failures"),
            "{heard:?}"
        );
        assert!(
            heard[2].contains("delivering again, after 7 failed attempts"),
            "{heard:?}"
        );
    }
}
