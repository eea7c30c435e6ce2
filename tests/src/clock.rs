//! Wall-clock jumps for one process: the LD_PRELOAD shim in `tests/shim/clockshim.c`, built
//! with the machine's gcc during the test run, and the offset file that drives it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

const SOURCE: &str = include_str!("../shim/clockshim.c");

/// The shared object, built once per test process (into the temp dir, named by the source's
/// hash, renamed into place so concurrent test processes never load a half-written file).
pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| build().unwrap_or_else(|e| panic!("clock shim: {e}")))
}

fn build() -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    SOURCE.hash(&mut hasher);
    let dir = std::env::temp_dir().join("redlock-clockshim");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let target = dir.join(format!("clockshim-{:016x}.so", hasher.finish()));
    if target.is_file() {
        return Ok(target);
    }
    let gcc = gcc()?;
    let source = dir.join(format!("clockshim-{}.c", std::process::id()));
    let partial = dir.join(format!("clockshim-{}.so.part", std::process::id()));
    std::fs::write(&source, SOURCE).map_err(|e| e.to_string())?;
    let status = std::process::Command::new(gcc)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&partial)
        .arg(&source)
        .status()
        .map_err(|e| format!("could not run gcc: {e}"))?;
    let _ = std::fs::remove_file(&source);
    if !status.success() {
        return Err(format!("gcc failed: {status}"));
    }
    std::fs::rename(&partial, &target).map_err(|e| e.to_string())?;
    Ok(target)
}

/// The 8-byte offset file of one shimmed process: a little-endian i64 in milliseconds added
/// to its `CLOCK_REALTIME`. Removed on drop.
#[derive(Debug)]
pub struct ClockOffset {
    path: PathBuf,
    file: File,
}

impl ClockOffset {
    /// A new offset file at zero.
    pub fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!(
            "redlock-clockshim/offset-{}-{n}",
            std::process::id()
        ));
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("offset file {}: {e}", path.display()));
        let offset = Self { path, file };
        offset.set(0);
        offset
    }

    /// The file's path (the shim's `CLOCKSHIM_FILE`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets the offset in milliseconds (negative: the clock steps back).
    pub fn set(&self, offset_ms: i64) {
        self.file
            .write_all_at(&offset_ms.to_le_bytes(), 0)
            .unwrap_or_else(|e| panic!("offset file: {e}"));
    }

    /// Jumps the clock by `by` forward.
    pub fn forward(&self, by: Duration) {
        self.set(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }

    /// Steps the clock back by `by`.
    pub fn back(&self, by: Duration) {
        self.set(-i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }

    /// The environment a shimmed process needs: `LD_PRELOAD` and `CLOCKSHIM_FILE`.
    pub fn env(&self) -> [(&'static str, PathBuf); 2] {
        [
            ("LD_PRELOAD", shim().to_path_buf()),
            ("CLOCKSHIM_FILE", self.path.clone()),
        ]
    }
}

impl Default for ClockOffset {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ClockOffset {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The C compiler that builds the shim: `gcc` on `PATH`. It is only looked up here;
/// `cargo xtask test` installs it first on a fresh machine (`xtask/src/install.rs`).
///
/// # Errors
/// A message saying how to get one when there is none.
pub fn gcc() -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("gcc"))
                .find(|candidate| candidate.is_file())
        })
        .ok_or_else(|| {
            "gcc not found on PATH: run `cargo xtask test` (it installs Debian's gcc) or install it"
                .to_owned()
        })
}
