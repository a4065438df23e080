//! The `stdout` destination: each record as the JSON line it is stored as, what a cluster's log
//! collector reads from a container's stdout. Nothing else of airlock's is written to stdout by
//! `airlock serve`, and a reader can tell a record from any other line anyway: a JSON object
//! with `seq`, `prev` and `hash` (`airlock log verify --from` skips the rest).

use std::io::Write;

use airlock_audit::Tailed;

use crate::pump::{Delivery, Sink};

/// Records as lines on a stream: stdout, or anything else that takes bytes.
pub struct LineSink<W> {
    out: W,
}

impl<W: Write + Send> LineSink<W> {
    pub fn new(out: W) -> LineSink<W> {
        LineSink { out }
    }
}

impl<W: Write + Send> Sink for LineSink<W> {
    fn deliver(&mut self, batch: &[Tailed]) -> Delivery {
        // The whole batch in one write: on stdout, under its lock, no other line gets between.
        let mut text = Vec::with_capacity(batch.iter().map(|r| r.line.len() + 1).sum());
        for record in batch {
            text.extend_from_slice(&record.line);
            text.push(b'\n');
        }
        match self.out.write_all(&text).and_then(|()| self.out.flush()) {
            Ok(()) => Delivery::Delivered { note: None },
            Err(e) => Delivery::Retry {
                after: None,
                why: format!("cannot write the records: {e}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_audit::{AuditLog, Sync, Tail};
    use serde_json::json;

    #[test]
    fn the_lines_are_the_stored_ones_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path(), Sync::Never);
        log.append("run.intent", json!({"argv": ["echo", "é\u{1b}"]}))
            .unwrap();
        log.append("run.result", json!({"exit_code": 0})).unwrap();
        let mut tail = Tail::after(&log.path(), None);
        let batch: Vec<Tailed> = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
        let mut sink = LineSink::new(Vec::new());
        assert_eq!(sink.deliver(&batch), Delivery::Delivered { note: None });
        assert_eq!(sink.out, std::fs::read(log.path()).unwrap());
    }

    #[test]
    fn a_stream_that_fails_is_a_retry() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path(), Sync::Never);
        log.append("run.intent", json!({})).unwrap();
        let mut tail = Tail::after(&log.path(), None);
        let batch: Vec<Tailed> = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
        assert!(matches!(
            LineSink::new(Closed).deliver(&batch),
            Delivery::Retry { after: None, .. }
        ));
    }
}
