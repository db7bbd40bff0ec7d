// What kube-flannel's init containers do, as subcommands of ours:
//   install-plugin  the CNI plugin executable into the host's /opt/cni/bin
//   install-conf    the ConfigMap's cni-conf.json to /etc/cni/net.d/10-flannel.conflist
// Both replace their target atomically (a temp file beside it, then rename):
// a kubelet may be running the old plugin or reading the old config at that
// moment, and sees the old file or the new one, never a torn one. A target
// that already holds the same bytes is left alone (no write per pod restart).
// Nothing is changed when the input is refused.
//
// They write into the host's directories from a container, where several
// may run at once (all as pid 1) and where a file may have been planted: the
// temp file is created exclusively under a random name, never through a
// symlink, written, given its mode and synced through its descriptor, then
// renamed; no path is chmod'ed afterwards. What is copied is never made
// readable or executable by more than the source was, and install-plugin
// copies only an executable of ours (its build stamp).
import * as fs from 'node:fs';
import { dirname, join } from 'node:path';
import { readBuildStamp } from '../../cni/build-stamp';
import { createTempBeside, removeFile, replaceWith, writeFileAtomic } from '../../util/fs';

/** The names the one executable answers to (build.mjs links it under each). */
export const PLUGIN_NAMES = ['flannel', 'bridge', 'host-local', 'vxlan-flannel'] as const;

/** Whether `path` holds exactly `data`'s bytes (compared in chunks: executables are 100 MB). */
function sameFile(path: string, source: string): boolean {
  let a: number | undefined;
  let b: number | undefined;
  try {
    if (fs.statSync(path).size !== fs.statSync(source).size) return false;
    a = fs.openSync(path, 'r');
    b = fs.openSync(source, 'r');
    const x = Buffer.alloc(1 << 20);
    const y = Buffer.alloc(1 << 20);
    for (;;) {
      const n = fs.readSync(a, x);
      const m = fs.readSync(b, y);
      if (n !== m || !x.subarray(0, n).equals(y.subarray(0, m))) return false;
      if (n === 0) return true;
    }
  } catch {
    return false;
  } finally {
    if (a !== undefined) fs.closeSync(a);
    if (b !== undefined) fs.closeSync(b);
  }
}

/** Copies `source` to `target` through a temp file beside it: written, given `mode` and synced through its descriptor, then renamed over it. */
function copyExecutableAtomic(source: string, target: string, mode: number): void {
  const { fd, tmp } = createTempBeside(target);
  let from: number | undefined;
  try {
    from = fs.openSync(source, fs.constants.O_RDONLY);
    const buf = Buffer.allocUnsafe(1 << 20);
    for (let n = fs.readSync(from, buf); n > 0; n = fs.readSync(from, buf)) {
      for (let done = 0; done < n; ) done += fs.writeSync(fd, buf, done, n - done);
    }
    fs.fchmodSync(fd, mode);
    fs.fsyncSync(fd);
  } catch (err) {
    fs.closeSync(fd);
    removeFile(tmp);
    throw err;
  } finally {
    if (from !== undefined) fs.closeSync(from);
  }
  fs.closeSync(fd);
  replaceWith(tmp, target);
}

/**
 * Puts `source` into `destDir` under each of `names` (one copy each, never a
 * hard link between them: a later `cp -f` over one name, as flannel's own
 * init container does, would rewrite every name sharing its inode). Returns
 * one line per name: "installed <path>" or "<path> is up to date".
 */
export function installPlugin(source: string, destDir: string, names: readonly string[]): string[] {
  for (const n of names) {
    if (!(PLUGIN_NAMES as readonly string[]).includes(n)) throw new Error(`plugin name ${JSON.stringify(n)} is not one of ${PLUGIN_NAMES.join(', ')}`);
  }
  if (!names.length) throw new Error('no plugin name given');
  let st: fs.Stats;
  try {
    st = fs.statSync(source);
  } catch (err) {
    throw new Error(`cannot read the plugin executable ${source}: ${(err as Error).message}`);
  }
  if (!st.isFile()) throw new Error(`the plugin executable ${source} is not a file`);
  if (!readBuildStamp(source)) throw new Error(`${source} is not an executable of cni-ts (it has no build stamp): only the plugins are installed`);
  // never more than the source allows: rwxr-xr-x at most
  const mode = st.mode & 0o755;
  if (!(mode & 0o100)) throw new Error(`the plugin executable ${source} is not executable (mode ${(st.mode & 0o7777).toString(8)})`);
  if (!fs.statSync(destDir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`${destDir} is not a directory (mount the host's CNI bin directory there)`);
  const done: string[] = [];
  for (const n of [...new Set(names)]) {
    const target = join(destDir, n);
    if (sameFile(target, source)) {
      done.push(`${target} is up to date`);
      continue;
    }
    copyExecutableAtomic(source, target, mode);
    done.push(`installed ${target}`);
  }
  return done;
}

/**
 * flannel's install-conf: copies the CNI config `source` to `target`
 * atomically. The text must be a JSON object naming a network ("name") and
 * either a plugin list ("plugins") or one plugin ("type"): a runtime that
 * read anything else would fail every pod on the node.
 */
export function installConf(source: string, target: string): string {
  let text: string;
  let sourceMode: number;
  try {
    sourceMode = fs.statSync(source).mode;
    text = fs.readFileSync(source, 'utf8');
  } catch (err) {
    throw new Error(`cannot read ${source}: ${(err as Error).message}`);
  }
  let conf: unknown;
  try {
    conf = JSON.parse(text);
  } catch {
    throw new Error(`${source} is not JSON`); // not the parser's message: it quotes the text, and the file may be anyone's
  }
  if (typeof conf !== 'object' || conf === null || Array.isArray(conf)) throw new Error(`${source} is not a JSON object`);
  const c = conf as Record<string, unknown>;
  if (typeof c.name !== 'string' || !c.name) throw new Error(`${source}: field "name" must be a non-empty string`);
  if (c.plugins !== undefined) {
    if (!Array.isArray(c.plugins) || !c.plugins.length) throw new Error(`${source}: field "plugins" must be a non-empty list`);
    c.plugins.forEach((p, i) => {
      if (typeof p !== 'object' || p === null || typeof (p as Record<string, unknown>).type !== 'string') throw new Error(`${source}: field "plugins[${i}].type" must be a string`);
    });
  } else if (typeof c.type !== 'string') throw new Error(`${source}: neither a plugin list (field "plugins") nor a plugin (field "type")`);
  if (!fs.statSync(dirname(target), { throwIfNoEntry: false })?.isDirectory()) throw new Error(`${dirname(target)} is not a directory (mount the host's CNI config directory there)`);
  let current: string | undefined;
  try {
    current = fs.readFileSync(target, 'utf8');
  } catch {
    current = undefined;
  }
  if (current === text) return `${target} is up to date`;
  // a CNI config is read by the runtime and by tools that list networks: readable by all, as flannel's,
  // unless the source itself is not
  writeFileAtomic(target, text, { mode: 0o644 & sourceMode, durable: true });
  return `installed ${target}`;
}
