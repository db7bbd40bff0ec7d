// Runs a plugin bundle (CommonJS source held as a string) compiled with a V8
// code cache. Every CNI call is a new process, so without a cache V8 parses
// and compiles the same code on every ADD; with it, the compiled functions of
// the last run of the same command are loaded instead (about a third of our
// start-up beyond `node -e 0`, see docs/speed.md).
//
// A code cache is code: whoever can write one runs as root in the next call
// (V8 checks only its own version, flags and the source's length). So the
// cache lives in a root-only directory (default /var/cache/cni-ts, or
// CNI_TS_CODE_CACHE_DIR; "off" disables it), used only when:
// - every component of its path is opened without following a symlink
//   (O_NOFOLLOW, one component at a time through the parent's descriptor), and
//   each, checked on the open descriptor, is a directory owned by root (or
//   us) that nobody else can write: the cache directory itself not group- or
//   world-writable, a parent not either unless it is sticky (/tmp), where
//   nobody else can rename or remove what we own;
// - the file is a regular file of ours, not group- or world-writable, and
//   starts with the SHA-256 of the exact source it was made from (build.mjs
//   computes it): V8 would take a cache of another source of the same length;
// - its V8 data is intact: V8 checks only the data's length, and bytes
//   flipped inside it make V8 abort the process (a fatal error, not an
//   exception) before it could rewrite the file: every later call would die
//   the same way. So the data is stored twice, the second copy byte-swapped
//   in 32-bit words, and the copies are compared before V8 sees either: a
//   native swap and memcmp (~0.05 ms for 200 KB), where a checksum computed
//   in JavaScript costs 1.4-2 ms per call, in WebAssembly ~0.5 ms, and
//   node:zlib's crc32 ~3 ms to load. A byte changed in one copy, or the same
//   change made to both (the swap puts it on different bytes of the data),
//   a truncated or zeroed file: each fails the comparison.
// Files are written whole, once: a new name (O_EXCL, 0600), synced, renamed
// into place. Only our own file names are ever removed (caches of older
// builds). Any problem with the cache only means compiling as usual.
import { Script } from 'node:vm';
import * as fs from 'node:fs';
import { isAbsolute, normalize } from 'node:path';

const DEFAULT_DIR = '/var/cache/cni-ts';
const COMMANDS = ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS', 'VERSION'];
const DIGEST_BYTES = 64; // the source's SHA-256, hex
const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY } = fs.constants;
const S_ISVTX = 0o1000; // the sticky bit

/** What a bundle is run with: the CommonJS module variables of its host. */
export interface ModuleScope {
  exports: unknown;
  require: NodeRequire;
  module: unknown;
  filename: string;
  dirname: string;
}

/** A bundle: its source, its id ("<bundle>-<hash>", e.g. "bridge-0123abcd...") and the SHA-256 (hex) of the source. */
export interface Bundle {
  source: string;
  id: string;
  sha256: string;
}

function cacheDir(): string | undefined {
  const dir = process.env.CNI_TS_CODE_CACHE_DIR || DEFAULT_DIR;
  return isAbsolute(dir) ? normalize(dir) : undefined; // "off" (or any relative path) disables it
}

/** A path to `name` inside the directory open as `fd` (Node has no openat: the kernel resolves /proc/self/fd/N to that directory). */
const inside = (fd: number, name: string) => `/proc/self/fd/${fd}/${name}`;

const uid = () => process.geteuid?.() ?? -1;
const ownedByUs = (st: fs.Stats) => st.uid === 0 || st.uid === uid();

/**
 * Opens `dir` one component at a time, never through a symlink, checking each
 * on its descriptor; creates the last one (0700) when `create`. Undefined when
 * any check fails.
 */
function openTrustedDir(dir: string, create: boolean): number | undefined {
  const parts = dir.split('/').filter(Boolean);
  let fd: number | undefined;
  try {
    fd = fs.openSync('/', O_RDONLY | O_DIRECTORY);
    for (let i = 0; i <= parts.length; i++) {
      const st = fs.fstatSync(fd);
      const last = i === parts.length;
      const othersWrite = (st.mode & 0o022) !== 0;
      if (!st.isDirectory() || !ownedByUs(st) || (othersWrite && (last || (st.mode & S_ISVTX) === 0))) throw new Error('untrusted');
      if (last) return fd;
      const next = inside(fd, parts[i]);
      if (create && i === parts.length - 1) {
        try {
          fs.mkdirSync(next, { mode: 0o700 });
        } catch {
          // there already, or not makeable: the open below decides
        }
      }
      const child = fs.openSync(next, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      fs.closeSync(fd);
      fd = child;
    }
  } catch {
    if (fd !== undefined) fs.closeSync(fd);
  }
  return undefined;
}

/**
 * The V8 data of cache file `name` in `dirFd` ("<source digest><data><data
 * byte-swapped>"), when it is ours, was made from the source with digest
 * `sha256`, and both copies of the data are the same.
 */
function read(dirFd: number, name: string, sha256: string): Buffer | undefined {
  let fd: number | undefined;
  try {
    fd = fs.openSync(inside(dirFd, name), O_RDONLY | O_NOFOLLOW);
    const st = fs.fstatSync(fd);
    if (!st.isFile() || st.uid !== uid() || (st.mode & 0o022) !== 0) return undefined;
    const file = fs.readFileSync(fd);
    const size = (file.length - DIGEST_BYTES) / 2;
    if (size <= 0 || size % 4 !== 0 || file.toString('latin1', 0, DIGEST_BYTES) !== sha256) return undefined;
    const data = file.subarray(DIGEST_BYTES, DIGEST_BYTES + size);
    return data.equals(file.subarray(DIGEST_BYTES + size).swap32()) ? data : undefined;
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** Our cache file names: "<bundle>-<16 hex>-v<node version>-<arch>-<kind>.v8" (the bundle may end in ".sea"). */
const OURS = /^[a-z-]+(\.sea)?-[0-9a-f]{16}-v\d+\.\d+\.\d+-\w+-(ADD|DEL|CHECK|GC|STATUS|VERSION|cli)\.v8$/;

/** Writes the cache once; drops our caches of older builds of the same bundle. Never fails the call. */
function write(dirFd: number, name: string, bundle: Bundle, data: Buffer): void {
  const tmp = `.${name}.${process.pid}`;
  try {
    if (data.length % 4 !== 0) return; // V8 pads its data to whole words; anything else is not stored
    const fd = fs.openSync(inside(dirFd, tmp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
    try {
      fs.writeSync(fd, Buffer.concat([Buffer.from(bundle.sha256, 'latin1'), data, Buffer.from(data).swap32()]));
      fs.fsyncSync(fd); // the data reaches the disk before the name: a power cut leaves the old file or the whole new one
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(inside(dirFd, tmp), inside(dirFd, name));
    const prefix = bundle.id.slice(0, bundle.id.lastIndexOf('-') + 1);
    for (const old of fs.readdirSync(inside(dirFd, '.'))) {
      if (OURS.test(old) && old.startsWith(prefix) && !old.startsWith(bundle.id)) fs.rmSync(inside(dirFd, old), { force: true });
    }
  } catch {
    // a cache we cannot write is only a slower start
    fs.rmSync(inside(dirFd, tmp), { force: true });
  }
}

/**
 * One cache per command (each compiles different functions); an operator's
 * command line (any argument) has its own; unknown commands get none.
 */
function cacheKind(): string | undefined {
  const command = process.env.CNI_COMMAND;
  if (command === undefined || process.argv.length > 2) return 'cli';
  return COMMANDS.includes(command) ? command : undefined;
}

/** Compiles `bundle` with the code cache and runs it as a CommonJS module in `scope`. */
export function runWithCodeCache(bundle: Bundle, scope: ModuleScope): void {
  const kind = cacheKind();
  const dir = kind ? cacheDir() : undefined;
  const name = `${bundle.id}-${process.version}-${process.arch}-${kind}.v8`;
  const dirFd = dir ? openTrustedDir(dir, false) : undefined;
  const cached = dirFd !== undefined ? read(dirFd, name, bundle.sha256) : undefined;
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${bundle.source}\n})`, {
    filename: scope.filename,
    cachedData: cached,
  });
  if (dir && (!cached || script.cachedDataRejected)) {
    // At exit the cache also holds every function this run compiled on the way.
    // Only a call that succeeded writes it: one that failed early would leave out
    // the functions of the normal path, and every later call would compile them.
    process.once('exit', (code) => {
      if (code !== 0) return;
      const fd = dirFd ?? openTrustedDir(dir, true);
      if (fd !== undefined) write(fd, name, bundle, script.createCachedData());
    });
  }
  script.runInThisContext()(scope.exports, scope.require, scope.module, scope.filename, scope.dirname);
}
