// Runs a plugin bundle (CommonJS source held as a string) compiled with a V8
// code cache. Every CNI call is a new process, so without a cache V8 parses
// and compiles the same code on every ADD; with it, the compiled functions of
// the last run of the same command are loaded instead (about a third of our
// start-up beyond `node -e 0`, see docs/speed.md).
//
// The cache lives in a root-only directory (default /var/cache/cni-ts, or
// CNI_TS_CODE_CACHE_DIR; "off" disables it), one file per bundle build, Node
// version and command. V8 itself rejects a cache
// that does not match the source or its own version; any problem with the
// cache only means compiling as usual. Files are written whole (temp file +
// rename), once.
import { Script } from 'node:vm';
import * as fs from 'node:fs';
import { isAbsolute, join } from 'node:path';

const DEFAULT_DIR = '/var/cache/cni-ts';
const COMMANDS = ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS', 'VERSION'];

/** What a bundle is run with: the CommonJS module variables of its host. */
export interface ModuleScope {
  exports: unknown;
  require: NodeRequire;
  module: unknown;
  filename: string;
  dirname: string;
}

function cacheDir(): string | undefined {
  const dir = process.env.CNI_TS_CODE_CACHE_DIR || DEFAULT_DIR;
  return isAbsolute(dir) ? dir : undefined; // "off" (or any relative path) disables it
}

/** The cache directory is trusted only when it is ours and nobody else can write it. */
function trusted(dir: string): boolean {
  try {
    const st = fs.statSync(dir);
    return st.isDirectory() && st.uid === process.getuid?.() && (st.mode & 0o022) === 0;
  } catch {
    return false;
  }
}

function read(file: string): Buffer | undefined {
  try {
    return fs.readFileSync(file);
  } catch {
    return undefined;
  }
}

/** Writes the cache once; drops the caches of older builds of the same bundle. Never fails the call. */
function write(dir: string, name: string, id: string, data: Buffer): void {
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (!trusted(dir)) return;
    const tmp = join(dir, `.${name}.${process.pid}`);
    fs.writeFileSync(tmp, data, { mode: 0o600 });
    fs.renameSync(tmp, join(dir, name));
    const bundle = id.slice(0, id.lastIndexOf('-') + 1);
    for (const old of fs.readdirSync(dir)) {
      if (old.startsWith(bundle) && !old.startsWith(id)) fs.rmSync(join(dir, old), { force: true });
    }
  } catch {
    // a cache we cannot write is only a slower start
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

/**
 * Compiles `source`, the bundle `id` ("<bundle>-<hash of the source>", e.g.
 * "bridge-0123abcd..."), with the code cache and runs it as a CommonJS module
 * in `scope`.
 */
export function runWithCodeCache(source: string, id: string, scope: ModuleScope): void {
  const kind = cacheKind();
  const dir = kind ? cacheDir() : undefined;
  const name = `${id}-${process.version}-${process.arch}-${kind}.v8`;
  const cached = dir && trusted(dir) ? read(join(dir, name)) : undefined;
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, {
    filename: scope.filename,
    cachedData: cached,
  });
  if (dir && (!cached || script.cachedDataRejected)) {
    // At exit the cache also holds every function this run compiled on the way.
    // Only a call that succeeded writes it: one that failed early would leave out
    // the functions of the normal path, and every later call would compile them.
    process.once('exit', (code) => code === 0 && write(dir, name, id, script.createCachedData()));
  }
  script.runInThisContext()(scope.exports, scope.require, scope.module, scope.filename, scope.dirname);
}
