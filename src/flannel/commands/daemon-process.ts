// The overlay daemon running on this node, found in /proc: `vxlan-flannel
// status` without flags describes it with the flags and FLANNELD_* variables
// it was started with (a lease dir, etcd endpoints, a subnet file elsewhere,
// set in /etc/default/vxlan-flannel or a unit), not with the defaults. "On
// this node" is this network namespace: a node of the tests, or a container
// with the host's network, is one. flanneld counts too: it takes the same
// flags.
import * as fs from 'node:fs';
import { basename } from 'node:path';

export interface DaemonProcess {
  pid: number;
  /** Ours (`vxlan-flannel daemon`) or flannel's own. */
  kind: 'vxlan-flannel' | 'flanneld';
  /** Its flags: the arguments after `daemon` (ours) or after the program (flanneld). */
  args: string[];
  /** Its environment (the FLANNELD_* variables, ETCD_PASSWORD, NODE_NAME); undefined when it cannot be read (not root). */
  env?: Record<string, string>;
  /** It sees the files this process sees (same mount namespace): the paths in its flags are ours too. */
  sameFiles: boolean;
}

/** A /proc file of NUL-terminated strings (cmdline, environ), each string; an empty one inside is kept. */
const readNul = (file: string): string[] => {
  const parts = fs.readFileSync(file, 'latin1').split('\0');
  return parts.at(-1) === '' ? parts.slice(0, -1) : parts;
};

/** Its flags when `argv` runs the daemon: `[node] .../vxlan-flannel daemon ...` or `.../flanneld ...`. */
export function daemonArgs(argv: readonly string[]): Pick<DaemonProcess, 'kind' | 'args'> | undefined {
  if (argv.length && basename(argv[0]) === 'flanneld') return { kind: 'flanneld', args: argv.slice(1) };
  // the standalone executable, or the script under node; `flannel` is the same executable
  for (const i of [0, 1]) {
    const ours = argv.length > i + 1 && ['vxlan-flannel', 'flannel'].includes(basename(argv[i])) && argv[i + 1] === 'daemon';
    if (ours) return { kind: 'vxlan-flannel', args: argv.slice(i + 2) };
  }
  return undefined;
}

function readEnv(pid: number, proc: string): Record<string, string> | undefined {
  try {
    const env: Record<string, string> = {};
    for (const kv of readNul(`${proc}/${pid}/environ`)) {
      const eq = kv.indexOf('=');
      if (eq > 0) env[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
    return env;
  } catch {
    return undefined; // another user's process: its flags are still there
  }
}

const nsOf = (proc: string, pid: number | 'self', ns: 'net' | 'mnt') => {
  try {
    return fs.readlinkSync(`${proc}/${pid}/ns/${ns}`);
  } catch {
    return undefined;
  }
};

/** The daemons running in this network namespace, oldest (lowest pid) first. */
export function findDaemons(proc = '/proc'): DaemonProcess[] {
  const net = nsOf(proc, 'self', 'net');
  const mnt = nsOf(proc, 'self', 'mnt');
  const found: DaemonProcess[] = [];
  for (const name of fs.readdirSync(proc)) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    const pid = Number(name);
    let cmd: Pick<DaemonProcess, 'kind' | 'args'> | undefined;
    try {
      cmd = daemonArgs(readNul(`${proc}/${pid}/cmdline`));
    } catch {
      continue; // gone meanwhile
    }
    if (!cmd || nsOf(proc, pid, 'net') !== net) continue;
    found.push({ pid, ...cmd, env: readEnv(pid, proc), sameFiles: nsOf(proc, pid, 'mnt') === mnt });
  }
  return found.sort((a, b) => a.pid - b.pid);
}

/** Its command line for the status report, with the value of --etcd-password hidden. */
export function describeDaemon(d: DaemonProcess): string {
  const args: string[] = [];
  for (let i = 0; i < d.args.length; i++) {
    const a = d.args[i];
    if (/^--?etcd-password=/.test(a)) args.push(`${a.slice(0, a.indexOf('=') + 1)}***`);
    else if (/^--?etcd-password$/.test(a) && i + 1 < d.args.length) args.push(a, '***'), i++;
    else args.push(a);
  }
  return `pid ${d.pid}: ${d.kind === 'flanneld' ? 'flanneld' : 'vxlan-flannel daemon'}${args.length ? ` ${args.join(' ')}` : ''}`;
}
