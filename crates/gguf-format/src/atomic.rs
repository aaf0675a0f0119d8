//! Atomic output files: written into a temporary beside the target, renamed over it only
//! once complete.
//!
//! The temporary is created with `O_CREAT | O_EXCL` under an unpredictable name
//! (`.<name>.<random>.tmp`, by `tempfile`), so a symlink or file planted at a guessable
//! name can never be followed or clobbered; it is removed when the [`AtomicFile`] is
//! dropped without [`AtomicFile::commit`] — on every error path and on unwinding. The
//! target is checked up front: a directory is refused before any work is done.
//!
//! A process that must end without unwinding (a second Ctrl-C, a second SIGTERM) calls
//! [`remove_pending`] first: every temporary not yet committed or dropped is removed.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The temporaries of every live, uncommitted [`AtomicFile`].
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn pending() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes the temporary of every [`AtomicFile`] still being written (neither committed
/// nor dropped), for a process about to exit without running destructors
/// (`std::process::exit` from a signal handler thread). Their targets are untouched.
pub fn remove_pending() {
    remove_pending_where(|_| true);
}

fn remove_pending_where(pick: impl Fn(&Path) -> bool) {
    pending().retain(|p| {
        if !pick(p) {
            return true;
        }
        let _ = std::fs::remove_file(p);
        false
    });
}

/// Keeps a temporary's path in [`PENDING`] while its file is live.
#[derive(Debug)]
struct Registered(PathBuf);

impl Registered {
    fn new(p: &Path) -> Registered {
        pending().push(p.to_path_buf());
        Registered(p.to_path_buf())
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut v = pending();
        if let Some(i) = v.iter().position(|p| *p == self.0) {
            v.swap_remove(i);
        }
    }
}

use crate::{Error, Result};

/// A file being written to `target` atomically.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    target: PathBuf,
    // after `tmp` (fields drop in order): the path leaves the list once the file is gone
    registered: Registered,
}

impl AtomicFile {
    /// Creates the temporary for `target` in the target's directory.
    pub fn create(target: impl AsRef<Path>) -> Result<AtomicFile> {
        let target = target.as_ref().to_path_buf();
        let io = |source| Error::Io { path: target.clone(), source };
        if target.is_dir() {
            return Err(io(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")));
        }
        let name = target.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prefix = format!(".{name}.");
        let mut b = tempfile::Builder::new();
        b.prefix(&prefix).suffix(".tmp");
        // The finished file gets the mode a plain create would give it (0666 less the
        // umask), not the temporary's private 0600.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            b.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let tmp = b.tempfile_in(&dir).map_err(io)?;
        let registered = Registered::new(tmp.path());
        Ok(AtomicFile { tmp, target, registered })
    }

    /// The temporary's path (for error messages).
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// The final path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The open temporary file.
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// Syncs the temporary and renames it over the target.
    pub fn commit(self) -> Result<()> {
        // bound in this order so that on an early return `tmp` (removed) drops first
        let AtomicFile { registered, target, tmp } = self;
        tmp.as_file().sync_all().map_err(|source| Error::Io { path: tmp.path().to_path_buf(), source })?;
        // a failed persist drops (removes) the temporary it hands back
        let r = tmp.persist(&target).map(drop).map_err(|e| Error::Io { path: target.clone(), source: e.error });
        drop(registered);
        r
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tmp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

/// Writes `bytes` to `path` atomically.
pub fn write(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes).map_err(|source| Error::Io { path: f.temp_path().to_path_buf(), source })?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temps(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn writes_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.bin");
        write(&p, b"one").unwrap();
        write(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(temps(d.path()).is_empty());
    }

    #[test]
    fn dropped_without_commit_removes_the_temporary_and_keeps_the_target() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.bin");
        std::fs::write(&p, b"old").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.write_all(b"partial").unwrap();
            assert_eq!(temps(d.path()).len(), 1);
        }
        assert!(temps(d.path()).is_empty());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
    }

    #[test]
    fn remove_pending_removes_only_live_uncommitted_temporaries() {
        let d = tempfile::tempdir().unwrap();
        let (a, b, c) = (d.path().join("a.bin"), d.path().join("b.bin"), d.path().join("c.bin"));
        let mut fa = AtomicFile::create(&a).unwrap();
        fa.write_all(b"a").unwrap();
        let fb = AtomicFile::create(&b).unwrap();
        write(&c, b"c").unwrap();
        drop(fb);
        let live = fa.temp_path().to_path_buf();
        assert!(pending().contains(&live));
        assert_eq!(temps(d.path()).len(), 1);
        // only this test's directory: other tests' files are live in this process
        remove_pending_where(|p| p.starts_with(d.path()));
        assert!(temps(d.path()).is_empty() && !live.exists());
        assert_eq!(std::fs::read(&c).unwrap(), b"c", "a committed file stays");
        assert!(!a.exists() && !b.exists());
        drop(fa);
        assert!(!pending().iter().any(|p| p.starts_with(d.path())));
    }

    #[test]
    fn a_directory_target_is_refused_before_anything_is_written() {
        let d = tempfile::tempdir().unwrap();
        let e = write(d.path(), b"x").unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
        assert!(temps(d.path()).is_empty());
        assert!(temps(d.path().parent().unwrap())
            .iter()
            .all(|n| !n.contains(&*d.path().file_name().unwrap().to_string_lossy())));
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_at_the_old_guessable_name_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let p = d.path().join("out.bin");
        // every name the old scheme could pick
        for n in 0..4 {
            let guess = d.path().join(format!(".out.bin.{}.{n}.tmp", std::process::id()));
            std::os::unix::fs::symlink(&victim, &guess).unwrap();
        }
        std::os::unix::fs::symlink(&victim, d.path().join(format!(".out.bin.{}.tmp", std::process::id()))).unwrap();
        write(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
    }

    #[cfg(unix)]
    #[test]
    fn the_output_gets_a_normal_mode() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.bin");
        write(&p, b"x").unwrap();
        let plain = d.path().join("plain.bin");
        std::fs::write(&plain, b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), mode(&plain), "the mode of a plain create");
    }
}
