//! A writer that keeps what a `tracing` subscriber writes, for the tests that read the logs
//! (a token must never appear in them; spans must carry their fields).

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// Every byte written through any of its clones, kept in memory.
#[derive(Debug, Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// What was written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The lines written so far.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// The lines holding every one of `parts`.
    pub fn with(&self, parts: &[&str]) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|line| parts.iter().all(|part| line.contains(part)))
            .collect()
    }
}
