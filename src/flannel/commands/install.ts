// What kube-flannel's init containers do, as subcommands of ours:
//   install-plugin  the CNI plugin executable into the host's /opt/cni/bin
//   install-conf    the ConfigMap's cni-conf.json to /etc/cni/net.d/10-flannel.conflist
// Both replace their target atomically (a temp file beside it, then rename):
// a kubelet may be running the old plugin or reading the old config at that
// moment, and sees the old file or the new one, never a torn one. A target
// that already holds the same bytes is left alone (no write per pod restart).
// Nothing is changed when the input is refused.
import * as fs from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { removeFile, writeFileAtomic } from '../../util/fs';

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

/** Copies `source` to `target` through a temp file beside it, made executable, synced, then renamed over it. */
function copyExecutableAtomic(source: string, target: string): void {
  const tmp = join(dirname(target), `.${basename(target)}.${process.pid}.tmp`);
  try {
    fs.copyFileSync(source, tmp);
    fs.chmodSync(tmp, 0o755);
    const fd = fs.openSync(tmp, 'r');
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, target);
  } catch (err) {
    removeFile(tmp);
    throw err;
  }
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
  if (!fs.statSync(destDir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`${destDir} is not a directory (mount the host's CNI bin directory there)`);
  const done: string[] = [];
  for (const n of [...new Set(names)]) {
    const target = join(destDir, n);
    if (sameFile(target, source)) {
      done.push(`${target} is up to date`);
      continue;
    }
    copyExecutableAtomic(source, target);
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
  try {
    text = fs.readFileSync(source, 'utf8');
  } catch (err) {
    throw new Error(`cannot read ${source}: ${(err as Error).message}`);
  }
  let conf: unknown;
  try {
    conf = JSON.parse(text);
  } catch (err) {
    throw new Error(`${source} is not JSON: ${(err as Error).message}`);
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
  // a CNI config is read by the runtime and by tools that list networks: readable by all, as flannel's
  writeFileAtomic(target, text, { mode: 0o644, durable: true });
  fs.chmodSync(target, 0o644);
  return `installed ${target}`;
}
