// host-local in-process, through the CNI boundary the executable uses
// (skel.handle: env + stdin in, printed output and exit code out).
import * as fs from 'node:fs';
import fsModule from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { vi } from 'vitest';
import { handle } from '../../../src/cni/skel';
import { hostLocal } from '../../../src/ipam/host-local';

export async function runHostLocal(command: string, conf: object, id = 'dummy', ifname = 'eth0', args = '') {
  const env = { CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_NETNS: '/some/where', CNI_IFNAME: ifname, CNI_PATH: '/nowhere', CNI_ARGS: args };
  const out = await handle(hostLocal, env, () => JSON.stringify(conf));
  return { ...out, json: out.stdout ? JSON.parse(out.stdout) : undefined };
}

/**
 * A filesystem with no free space at all: every call that could take space
 * fails with ENOSPC (the spies replace node:fs's own functions, which its ESM
 * view then mirrors). Unlinking and reading still work.
 */
export function withNoSpace<T>(fn: () => Promise<T>): Promise<T> {
  const fail = () => {
    throw Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC', errno: -28 });
  };
  const creating = (flags: unknown) => (typeof flags === 'number' ? (flags & fs.constants.O_CREAT) !== 0 : flags !== undefined && flags !== 'r');
  const realOpen = fsModule.openSync;
  const spies = [
    vi.spyOn(fsModule, 'writeFileSync').mockImplementation(fail),
    vi.spyOn(fsModule, 'writeSync').mockImplementation(fail),
    vi.spyOn(fsModule, 'mkdirSync').mockImplementation(fail),
    vi.spyOn(fsModule, 'linkSync').mockImplementation(fail),
    vi.spyOn(fsModule, 'renameSync').mockImplementation(fail),
    vi.spyOn(fsModule, 'openSync').mockImplementation(((path: fs.PathLike, flags?: fs.OpenMode, mode?: fs.Mode) =>
      creating(flags) && !fs.existsSync(path) ? fail() : realOpen(path, flags as fs.OpenMode, mode)) as typeof fs.openSync),
  ];
  syncBuiltinESMExports();
  return fn().finally(() => {
    for (const s of spies) s.mockRestore();
    syncBuiltinESMExports();
  });
}
