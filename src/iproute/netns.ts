// Network namespaces by name. `ip` enters a namespace itself when it is given
// the namespace's name (`ip -n NAME`, and `netns exec NAME cmd` lines of its
// batch), which saves the nsenter process a path needs. The name is the one
// `ip netns add` (or a runtime: containerd's /var/run/netns/cni-..., podman's
// /run/netns/netns-...) bound under ip's NETNS_RUN_DIR; a namespace known
// only by another path (/proc/<pid>/ns/net) has none and is entered with nsenter.
import { statSync, statfsSync } from 'node:fs';
import { basename, join } from 'node:path';

/**
 * Where `ip` looks names up: its NETNS_RUN_DIR is /run/netns on Debian and
 * /var/run/netns upstream. A name counts only when it means the same
 * namespace in both (they are one directory where /var/run is /run).
 */
let runDirs: readonly string[] = ['/run/netns', '/var/run/netns'];

/**
 * False once `ip` could not enter a namespace itself in this process: it
 * remounts /sys for the namespace, which a confined runtime may forbid
 * (nsenter needs no mounts).
 */
let ipEnters = true;

/** The file system types a namespace path may be on: nsfs (a bind mount, /proc/<pid>/ns/net), and proc on kernels before 3.19. */
export const NSFS_MAGIC = 0x6e736673;
const PROC_SUPER_MAGIC = 0x9fa0;

/** A path's file system type (statfs). Tests of the fake kernel replace it: their namespaces are plain files. */
let fsTypeOf = (path: string): number => statfsSync(path).type;

export function setFsTypeOf(next: (path: string) => number): (path: string) => number {
  const prev = fsTypeOf;
  fsTypeOf = next;
  return prev;
}

/**
 * Why `path` is not a network namespace file, or undefined when it is one
 * (one statfs: what Go's ns.GetNS checks too, "unknown FS magic"). Checked
 * before anything changes: `ip` entering an ordinary file fails later, with
 * only "RTNETLINK answers: Invalid argument".
 */
export function netnsProblem(path: string): string | undefined {
  let type: number;
  try {
    type = fsTypeOf(path);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'does not exist' : `cannot be read (${(err as NodeJS.ErrnoException).code})`;
  }
  if (type === NSFS_MAGIC || type === PROC_SUPER_MAGIC) return undefined;
  return `is not a network namespace (a file on a file system of type 0x${type.toString(16)}, not nsfs)`;
}

/** Replaces the directories names are looked up in (unit tests); returns the previous ones. */
export function setNetnsRunDirs(dirs: readonly string[]): readonly string[] {
  const prev = runDirs;
  runDirs = dirs;
  ipEnters = true;
  return prev;
}

/** `ip -n` failed to set up a namespace here: enter them with nsenter from now on. */
export function ipCannotEnterNetns(): void {
  ipEnters = false;
}

/**
 * The name `ip -n` can enter the namespace at `path` by: the file of that
 * name in every run directory is the very namespace `path` is (same nsfs
 * inode). Undefined when there is none, or ip cannot enter namespaces here.
 */
export function ipNetnsName(path: string): string | undefined {
  const name = basename(path);
  if (!ipEnters || name === '.' || name === '..') return undefined;
  try {
    const target = statSync(path, { throwIfNoEntry: false });
    if (!target) return undefined;
    for (const dir of runDirs) {
      const named = statSync(join(dir, name), { throwIfNoEntry: false });
      if (!named || named.dev !== target.dev || named.ino !== target.ino) return undefined;
    }
    return name;
  } catch {
    return undefined; // a run directory we cannot read: no name
  }
}
