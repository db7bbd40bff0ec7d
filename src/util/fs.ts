// Small filesystem helpers shared by the plugins' state stores. They use the
// plain syscalls (fs.rmSync and recursive mkdir load extra code on first use,
// which every short-lived plugin process would pay for), and look before they
// leap where the common case would otherwise throw: an fs exception costs more
// than the stat that avoids it.
import * as fs from 'node:fs';
import { dirname, join, basename } from 'node:path';

const isCode = (err: unknown, code: string) => (err as NodeJS.ErrnoException)?.code === code;

/** Removes a file; a missing one is fine. */
export function removeFile(path: string): void {
  if (!fs.existsSync(path)) return;
  try {
    fs.unlinkSync(path);
  } catch (err) {
    if (!isCode(err, 'ENOENT')) throw err;
  }
}

/**
 * Creates a directory (and missing parents) with `mode`; an existing one is
 * left as it is. Parents are made one by one: Node's recursive mkdir reports
 * ENOENT for any failure, hiding the real cause (EROFS, EACCES, ENOSPC).
 */
export function ensureDir(path: string, mode = 0o700): void {
  if (fs.existsSync(path)) return;
  try {
    fs.mkdirSync(path, { mode });
  } catch (err) {
    if (isCode(err, 'EEXIST')) return;
    const parent = dirname(path);
    if (!isCode(err, 'ENOENT') || parent === path) throw err;
    ensureDir(parent, mode);
    try {
      fs.mkdirSync(path, { mode });
    } catch (again) {
      if (!isCode(again, 'EEXIST')) throw again;
    }
  }
}

/** Reads a file, or undefined when it does not exist. */
export function readIfExists(path: string): string | undefined {
  if (!fs.existsSync(path)) return undefined;
  try {
    return fs.readFileSync(path, 'utf8');
  } catch (err) {
    if (isCode(err, 'ENOENT')) return undefined;
    throw err;
  }
}

/** Flags of a temp file: made here or failing (never an existing file), and never through a symlink. */
const EXCLUSIVE = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW;

/**
 * A new, empty file beside `path`, open for writing (mode 0600), for an
 * atomic replace of `path`. Its name is this process's and random: writers
 * of the same path in other containers all run as pid 1, and a file or
 * symlink planted at a name must not be written through (O_EXCL fails on
 * it; a few names are tried). Uniqueness, not secrecy, is what the random
 * part is for: O_EXCL is what keeps it safe.
 */
export function createTempBeside(path: string): { fd: number; tmp: string } {
  for (let attempt = 1; ; attempt++) {
    const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${Math.random().toString(36).slice(2, 10)}.tmp`);
    try {
      return { fd: fs.openSync(tmp, EXCLUSIVE, 0o600), tmp };
    } catch (err) {
      if (!isCode(err, 'EEXIST') || attempt === 8) throw err;
    }
  }
}

/**
 * Moves the temp file `tmp` (written and closed) over `path`; on failure the
 * temp file is removed and the error thrown.
 */
export function replaceWith(tmp: string, path: string): void {
  try {
    fs.renameSync(tmp, path);
  } catch (err) {
    removeFile(tmp);
    throw err;
  }
}

/**
 * Replaces `path` with `content` atomically (write a temp file beside it, then
 * rename), so readers see the old or the new content, never a torn one. The
 * mode is set through the descriptor, exactly (not masked by the umask).
 * `durable` syncs the data first, for state that must survive a power cut.
 */
export function writeFileAtomic(path: string, content: string, opts: { mode?: number; durable?: boolean } = {}): void {
  const { fd, tmp } = createTempBeside(path);
  try {
    fs.writeSync(fd, content);
    if (opts.mode !== undefined && opts.mode !== 0o600) fs.fchmodSync(fd, opts.mode);
    if (opts.durable) fs.fdatasyncSync(fd);
  } catch (err) {
    fs.closeSync(fd);
    removeFile(tmp);
    throw err;
  }
  fs.closeSync(fd);
  replaceWith(tmp, path);
}

/** Removes a directory tree (rarely used: off the hot path). */
export function removeTree(path: string): void {
  fs.rmSync(path, { recursive: true, force: true });
}
