//! A disk that misbehaves on cue: a FUSE file system passed through to a real directory, under a
//! member's data dir, that can lose every write not yet fsynced (a power loss, as LazyFS
//! models one), fail fsyncs with EIO, or hold them until released (a stalled device).
//!
//! Writes reach the backing directory at once, so a running member reads back what it wrote.
//! What a power loss would keep is tracked beside them: each file's length at its last fsync,
//! and the bytes that writes since then overwrote below that length. [`FaultyDisk::power_loss`]
//! puts those bytes back and cuts each file to that length. Like LazyFS, only file data is at
//! risk: creations, renames and deletions are durable at once (ext4's ordered mode comes close
//! for the renames the log makes after an fsync).
//!
//! Every open is direct I/O and every attribute uncached, so the kernel holds no copy of a
//! file that a power loss could leave stale. Mounting needs root (`/dev/fuse`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// What the disk does with an fsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// Makes the file's data durable.
    Works,
    /// Fails with EIO and makes nothing durable (what a dying device or a full thin volume does).
    Fails,
    /// Waits until the mode changes (a device that stopped answering).
    Stalls,
}

/// What [`FaultyDisk::power_loss`] took away.
#[derive(Debug, Default, Clone, Copy)]
pub struct Loss {
    /// Files that lost data.
    pub files: usize,
    /// Bytes cut off the ends of files.
    pub bytes_cut: u64,
    /// Bytes of overwrites undone below the synced length.
    pub bytes_restored: u64,
}

/// Counts since mounting.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub fsyncs: u64,
    pub failed_fsyncs: u64,
    pub stalled_fsyncs: u64,
}

/// A mounted faulty disk; unmounted on drop.
pub struct FaultyDisk {
    shared: Arc<Shared>,
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

impl FaultyDisk {
    /// Mounts a faulty disk at `mountpoint` (created if missing), passing through to `backing`
    /// (created if missing; what is in it counts as durable).
    pub fn mount(mountpoint: &Path, backing: &Path) -> Result<FaultyDisk> {
        fs::create_dir_all(mountpoint)
            .with_context(|| format!("create mountpoint {}", mountpoint.display()))?;
        fs::create_dir_all(backing)
            .with_context(|| format!("create backing dir {}", backing.display()))?;
        let shared = Arc::new(Shared::new(backing.to_path_buf()));
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("baton-faulty-disk".into()),
            fuser::MountOption::Subtype("faulty".into()),
        ];
        // Threads enough that a stalled fsync holds only its caller, as on a real device.
        config.n_threads = Some(4);
        let fs = PassThrough {
            shared: Arc::clone(&shared),
        };
        let session = fuser::spawn_mount(fs, mountpoint, &config).with_context(|| {
            format!(
                "mount a FUSE file system at {} (root only)",
                mountpoint.display()
            )
        })?;
        Ok(FaultyDisk {
            shared,
            session: Some(session),
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// What fsyncs do from now on; a stalled one goes on when the mode changes.
    pub fn set_fsync(&self, mode: Fsync) {
        *self.shared.fsync.lock().expect("fsync mode") = mode;
        self.shared.fsync_changed.notify_all();
    }

    /// Throws away every write not yet fsynced, as a power loss would. Only while nothing has
    /// the disk's files open for writing (kill the member first).
    pub fn power_loss(&self) -> Result<Loss> {
        let mut files = self.shared.files.lock().expect("file table");
        let mut loss = Loss::default();
        for (rel, state) in files.iter_mut() {
            let path = self.shared.backing.join(rel);
            let file = match OpenOptions::new().write(true).open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("open {}", path.display())),
            };
            let len = file.metadata()?.len();
            let mut lost = false;
            for (at, bytes) in state.overwritten.drain(..).rev() {
                file.write_all_at(&bytes, at)
                    .with_context(|| format!("restore {}", path.display()))?;
                loss.bytes_restored += bytes.len() as u64;
                lost = true;
            }
            if len > state.synced_len {
                file.set_len(state.synced_len)
                    .with_context(|| format!("cut {}", path.display()))?;
                loss.bytes_cut += len - state.synced_len;
                lost = true;
            }
            loss.files += usize::from(lost);
        }
        Ok(loss)
    }

    /// Makes everything written so far durable, as the kernel's background writeback would
    /// (for a member that never fsyncs, whose writes only that can save).
    pub fn write_back(&self) -> Result<()> {
        let mut files = self.shared.files.lock().expect("file table");
        for (rel, state) in files.iter_mut() {
            let path = self.shared.backing.join(rel);
            match fs::metadata(&path) {
                Ok(meta) => state.synced_len = meta.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("stat {}", path.display())),
            }
            state.overwritten.clear();
        }
        Ok(())
    }

    pub fn counts(&self) -> Counts {
        *self.shared.counts.lock().expect("counts")
    }
}

impl Drop for FaultyDisk {
    fn drop(&mut self) {
        // A stalled fsync would keep a worker thread, and the unmount, waiting.
        self.set_fsync(Fsync::Works);
        if let Some(session) = self.session.take() {
            let _ = session.umount_and_join();
        }
    }
}

/// What a power loss would keep of one file.
#[derive(Debug, Default)]
struct FileState {
    /// Its length at its last fsync.
    synced_len: u64,
    /// Bytes below `synced_len` that writes since then replaced, oldest first, with where.
    overwritten: Vec<(u64, Vec<u8>)>,
}

struct Shared {
    backing: PathBuf,
    /// Inode number → path relative to the backing dir (the root is the empty path).
    inodes: Mutex<Inodes>,
    /// Regular files by relative path.
    files: Mutex<HashMap<PathBuf, FileState>>,
    open: Mutex<HashMap<u64, OpenFile>>,
    next_handle: AtomicU64,
    fsync: Mutex<Fsync>,
    fsync_changed: Condvar,
    counts: Mutex<Counts>,
}

struct OpenFile {
    file: Arc<File>,
    rel: PathBuf,
    append: bool,
}

#[derive(Default)]
struct Inodes {
    paths: HashMap<u64, PathBuf>,
    numbers: HashMap<PathBuf, u64>,
    next: u64,
}

impl Inodes {
    fn number(&mut self, rel: &Path) -> u64 {
        if let Some(&ino) = self.numbers.get(rel) {
            return ino;
        }
        self.next += 1;
        let ino = self.next;
        self.paths.insert(ino, rel.to_path_buf());
        self.numbers.insert(rel.to_path_buf(), ino);
        ino
    }

    fn forget_path(&mut self, rel: &Path) {
        if let Some(ino) = self.numbers.remove(rel) {
            self.paths.remove(&ino);
        }
    }

    /// `from` and everything under it now live at `to`.
    fn rename(&mut self, from: &Path, to: &Path) {
        self.forget_path(to);
        let moved: Vec<(PathBuf, u64)> = self
            .numbers
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (old, ino) in moved {
            let new = moved_to(&old, from, to);
            self.numbers.remove(&old);
            self.numbers.insert(new.clone(), ino);
            self.paths.insert(ino, new);
        }
    }
}

/// Where `path`, `from` or under it, is once `from` is renamed to `to`. (`to.join("")` would
/// add a trailing slash, which makes a file's path "not a directory".)
fn moved_to(path: &Path, from: &Path, to: &Path) -> PathBuf {
    match path.strip_prefix(from) {
        Ok(rest) if rest.as_os_str().is_empty() => to.to_path_buf(),
        Ok(rest) => to.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

const TTL: Duration = Duration::ZERO;
const ROOT: u64 = 1;

impl Shared {
    fn new(backing: PathBuf) -> Shared {
        let inodes = Inodes {
            paths: HashMap::from([(ROOT, PathBuf::new())]),
            numbers: HashMap::from([(PathBuf::new(), ROOT)]),
            next: ROOT,
        };
        Shared {
            backing,
            inodes: Mutex::new(inodes),
            files: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            fsync: Mutex::new(Fsync::Works),
            fsync_changed: Condvar::new(),
            counts: Mutex::new(Counts::default()),
        }
    }

    fn inodes(&self) -> MutexGuard<'_, Inodes> {
        self.inodes.lock().expect("inode table")
    }

    fn rel(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.inodes()
            .paths
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.rel(parent)?.join(name))
    }

    fn attr(&self, rel: &Path) -> Result<FileAttr, Errno> {
        let meta = fs::symlink_metadata(self.backing.join(rel)).map_err(Errno::from)?;
        let ino = self.inodes().number(rel);
        let time = |secs: i64, nanos: i64| {
            UNIX_EPOCH + Duration::new(secs.max(0) as u64, nanos.clamp(0, 999_999_999) as u32)
        };
        let kind = if meta.is_dir() {
            FileType::Directory
        } else if meta.file_type().is_symlink() {
            FileType::Symlink
        } else {
            FileType::RegularFile
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size: meta.len(),
            blocks: meta.blocks(),
            atime: time(meta.atime(), meta.atime_nsec()),
            mtime: time(meta.mtime(), meta.mtime_nsec()),
            ctime: time(meta.ctime(), meta.ctime_nsec()),
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: meta.blksize() as u32,
            flags: 0,
        })
    }

    /// A file the table has not seen is as durable as it is now (it was there before).
    fn file_state<'a>(
        &self,
        files: &'a mut HashMap<PathBuf, FileState>,
        rel: &Path,
        len: u64,
    ) -> &'a mut FileState {
        files.entry(rel.to_path_buf()).or_insert(FileState {
            synced_len: len,
            overwritten: Vec::new(),
        })
    }

    /// Before bytes `[at, at + len)` of `rel` change: keeps what a power loss would bring back.
    fn before_change(&self, file: &File, rel: &Path, at: u64, len: u64) -> std::io::Result<()> {
        let current = file.metadata()?.len();
        let mut files = self.files.lock().expect("file table");
        let state = self.file_state(&mut files, rel, current);
        let end = (at + len).min(state.synced_len).min(current);
        if at < end {
            let mut old = vec![0; (end - at) as usize];
            file.read_exact_at(&mut old, at)?;
            state.overwritten.push((at, old));
        }
        Ok(())
    }

    fn fsync(&self, rel: Option<&Path>, file: Option<&File>) -> Result<(), Errno> {
        let mut mode = self.fsync.lock().expect("fsync mode");
        let mut stalled = false;
        while *mode == Fsync::Stalls {
            if !stalled {
                self.counts.lock().expect("counts").stalled_fsyncs += 1;
                stalled = true;
            }
            mode = self.fsync_changed.wait(mode).expect("fsync mode");
        }
        let mut counts = self.counts.lock().expect("counts");
        counts.fsyncs += 1;
        if *mode == Fsync::Fails {
            counts.failed_fsyncs += 1;
            return Err(Errno::EIO);
        }
        drop(counts);
        drop(mode);
        if let (Some(rel), Some(file)) = (rel, file) {
            let len = file.metadata().map_err(Errno::from)?.len();
            let mut files = self.files.lock().expect("file table");
            let state = self.file_state(&mut files, rel, len);
            state.synced_len = len;
            state.overwritten.clear();
        }
        Ok(())
    }

    fn open_file(&self, rel: &Path, file: File, flags: i32) -> u64 {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.open.lock().expect("open files").insert(
            handle,
            OpenFile {
                file: Arc::new(file),
                rel: rel.to_path_buf(),
                append: flags & libc::O_APPEND != 0,
            },
        );
        handle
    }

    fn handle(&self, fh: FileHandle) -> Result<(Arc<File>, PathBuf, bool), Errno> {
        let open = self.open.lock().expect("open files");
        let f = open.get(&fh.0).ok_or(Errno::EBADF)?;
        Ok((Arc::clone(&f.file), f.rel.clone(), f.append))
    }
}

/// Opens `path` as FUSE's `flags` ask, less O_APPEND (writes come with their offset).
fn open_backing(path: &Path, flags: i32, create_mode: Option<u32>) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => options.write(true),
        libc::O_RDWR => options.read(true).write(true),
        _ => options.read(true),
    };
    if let Some(mode) = create_mode {
        options.create(true).write(true).mode(mode);
        if flags & libc::O_EXCL != 0 {
            options.create_new(true);
        }
    }
    options.custom_flags(flags & libc::O_TRUNC);
    options.open(path)
}

struct PassThrough {
    shared: Arc<Shared>,
}

impl PassThrough {
    /// `unlink` and `rmdir`: removes the name with `op` and forgets it.
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        op: fn(&Path) -> std::io::Result<()>,
        reply: ReplyEmpty,
    ) {
        let rel = match self.shared.child(parent, name) {
            Ok(rel) => rel,
            Err(e) => return reply.error(e),
        };
        let result = op(&self.shared.backing.join(&rel));
        if result.is_ok() {
            self.shared.inodes().forget_path(&rel);
            self.shared.files.lock().expect("file table").remove(&rel);
        }
        done(result, reply)
    }
}

fn reply_entry(shared: &Shared, rel: &Path, reply: ReplyEntry) {
    match shared.attr(rel) {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn done(result: std::io::Result<()>, reply: ReplyEmpty) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(Errno::from(e)),
    }
}

impl Filesystem for PassThrough {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.shared.child(parent, name) {
            Ok(rel) => reply_entry(&self.shared, &rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.shared.rel(ino).and_then(|rel| self.shared.attr(&rel)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = (|| -> Result<FileAttr, Errno> {
            let rel = self.shared.rel(ino)?;
            let path = self.shared.backing.join(&rel);
            if let Some(mode) = mode {
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                    .map_err(Errno::from)?;
            }
            if let Some(size) = size {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(Errno::from)?;
                let len = file.metadata().map_err(Errno::from)?.len();
                if size < len {
                    self.shared
                        .before_change(&file, &rel, size, len - size)
                        .map_err(Errno::from)?;
                }
                file.set_len(size).map_err(Errno::from)?;
            }
            self.shared.attr(&rel)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.shared.child(parent, name).and_then(|rel| {
            let path = self.shared.backing.join(&rel);
            fs::create_dir(&path).map_err(Errno::from)?;
            fs::set_permissions(&path, fs::Permissions::from_mode(mode & !umask))
                .map_err(Errno::from)?;
            Ok(rel)
        });
        match result {
            Ok(rel) => reply_entry(&self.shared, &rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, |p| fs::remove_file(p), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, |p| fs::remove_dir(p), reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let (from, to) = match (
            self.shared.child(parent, name),
            self.shared.child(newparent, newname),
        ) {
            (Ok(from), Ok(to)) => (from, to),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        let result = fs::rename(
            self.shared.backing.join(&from),
            self.shared.backing.join(&to),
        );
        if result.is_ok() {
            self.shared.inodes().rename(&from, &to);
            let mut files = self.shared.files.lock().expect("file table");
            files.remove(&to);
            let moved: Vec<PathBuf> = files
                .keys()
                .filter(|p| p.starts_with(&from))
                .cloned()
                .collect();
            for old in moved {
                let state = files.remove(&old).expect("listed");
                files.insert(moved_to(&old, &from, &to), state);
            }
            drop(files);
            let mut open = self.shared.open.lock().expect("open files");
            for f in open.values_mut() {
                if f.rel.starts_with(&from) {
                    f.rel = moved_to(&f.rel, &from, &to);
                }
            }
        }
        done(result, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = self.shared.rel(ino).and_then(|rel| {
            let path = self.shared.backing.join(&rel);
            let file = open_backing(&path, flags.0, None).map_err(Errno::from)?;
            if flags.0 & libc::O_TRUNC != 0 {
                let mut files = self.shared.files.lock().expect("file table");
                files.entry(rel.clone()).or_default();
            }
            Ok(self.shared.open_file(&rel, file, flags.0))
        });
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.shared.child(parent, name).and_then(|rel| {
            let path = self.shared.backing.join(&rel);
            let file = open_backing(&path, flags, Some(mode & !umask)).map_err(Errno::from)?;
            // A new file: nothing of it is durable before its first fsync.
            self.shared
                .files
                .lock()
                .expect("file table")
                .insert(rel.clone(), FileState::default());
            let fh = self.shared.open_file(&rel, file, flags);
            Ok((self.shared.attr(&rel)?, fh))
        });
        match result {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.shared.handle(fh).and_then(|(file, _, _)| {
            let mut buf = vec![0; size as usize];
            let mut got = 0;
            while got < buf.len() {
                match file.read_at(&mut buf[got..], offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Errno::from(e)),
                }
            }
            buf.truncate(got);
            Ok(buf)
        });
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.shared.handle(fh).and_then(|(file, rel, append)| {
            let at = if append {
                file.metadata().map_err(Errno::from)?.len()
            } else {
                offset
            };
            self.shared
                .before_change(&file, &rel, at, data.len() as u64)
                .map_err(Errno::from)?;
            file.write_all_at(data, at).map_err(Errno::from)?;
            Ok(data.len() as u32)
        });
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.shared.open.lock().expect("open files").remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self
            .shared
            .handle(fh)
            .and_then(|(file, rel, _)| self.shared.fsync(Some(&rel), Some(&file)));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.shared.rel(ino) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let rel = match self.shared.rel(ino) {
            Ok(rel) => rel,
            Err(e) => return reply.error(e),
        };
        let listing = match fs::read_dir(self.shared.backing.join(&rel)) {
            Ok(listing) => listing,
            Err(e) => return reply.error(Errno::from(e)),
        };
        let mut entries: Vec<(u64, FileType, OsString)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for entry in listing.flatten() {
            let kind = match entry.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory,
                Ok(t) if t.is_symlink() => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            let child = self.shared.inodes().number(&rel.join(entry.file_name()));
            entries.push((child, kind, entry.file_name()));
        }
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.shared.fsync(None, None) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let path = std::ffi::CString::new(self.shared.backing.as_os_str().as_encoded_bytes())
            .expect("no NUL in a path");
        // SAFETY: `path` is NUL-terminated and `stats` a writable statvfs that the call fills.
        let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
            return reply.error(Errno::from(std::io::Error::last_os_error()));
        }
        reply.statfs(
            stats.f_blocks,
            stats.f_bfree,
            stats.f_bavail,
            stats.f_files,
            stats.f_ffree,
            stats.f_bsize as u32,
            stats.f_namemax as u32,
            stats.f_frsize as u32,
        );
    }
}
