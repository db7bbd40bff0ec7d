// spawnSyncLean: child_process.spawnSync's results without loading child_process.
import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { spawnSyncLean } from '../../../src/util/spawn-sync';

describe('spawnSyncLean', () => {
  it('matches child_process.spawnSync: stdin, large outputs, exit code, signal, environment', () => {
    expect(spawnSyncLean('cat', [], { input: 'héllo' })).toEqual({ stdout: 'héllo', stderr: '', status: 0, signal: null });
    expect(spawnSyncLean('sh', ['-c', 'head -c 300000 /dev/zero | tr "\\0" x; echo e >&2; exit 4'])).toEqual({ stdout: 'x'.repeat(300000), stderr: 'e\n', status: 4, signal: null });
    expect(spawnSyncLean('sh', ['-c', 'kill -9 $$'])).toMatchObject({ status: null, signal: 'SIGKILL' });
    process.env.CNI_TS_SPAWN_TEST = 'seen';
    try {
      expect(spawnSyncLean('sh', ['-c', 'echo $CNI_TS_SPAWN_TEST']).stdout).toBe('seen\n');
      // An environment of its own replaces ours.
      expect(spawnSyncLean('/bin/sh', ['-c', 'echo ${CNI_TS_SPAWN_TEST-unset} ${OTHER}'], { env: { OTHER: 'given' } }).stdout).toBe('unset given\n');
    } finally {
      delete process.env.CNI_TS_SPAWN_TEST;
    }
    expect(() => spawnSyncLean('no-such-program-cni-ts', [])).toThrow(expect.objectContaining({ code: 'ENOENT' }));
  });

  it('hands the child extra descriptors as fd 3, 4, ...', () => {
    const dir = mkdtempSync(join(tmpdir(), 'spawn-sync-'));
    try {
      writeFileSync(join(dir, 'a'), 'from fd 3');
      writeFileSync(join(dir, 'b'), 'from fd 4');
      const [a, b] = [openSync(join(dir, 'a'), 'r'), openSync(join(dir, 'b'), 'r')];
      try {
        expect(spawnSyncLean('sh', ['-c', 'cat <&3; echo; cat <&4'], { extraFds: [a, b] }).stdout).toBe('from fd 3\nfrom fd 4');
      } finally {
        closeSync(a);
        closeSync(b);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('does not load node:child_process (the point of it) in a fresh process, and falls back to it where the binding is refused', async () => {
    const { build } = await import('esbuild');
    const probe = `import { spawnSyncLean } from ${JSON.stringify(resolve(__dirname, '../../../src/util/spawn-sync.ts'))};
      const r = spawnSyncLean('sh', ['-c', 'echo ran']);
      process.stdout.write(JSON.stringify({ out: r.stdout, childProcess: process.moduleLoadList.includes('NativeModule child_process') }));`;
    const out = await build({ stdin: { contents: probe, resolveDir: __dirname, loader: 'ts' }, bundle: true, platform: 'node', format: 'cjs', write: false, logLevel: 'silent' });
    const run = (flags: string[]) => JSON.parse(spawnSync(process.execPath, [...flags, '-e', out.outputFiles[0].text], { encoding: 'utf8', env: { PATH: process.env.PATH } }).stdout);
    expect(run([])).toEqual({ out: 'ran\n', childProcess: false });
    // Where the binding is refused (the permission model), child_process does the same job.
    expect(run(['--experimental-permission', '--allow-fs-read=*', '--allow-child-process'])).toEqual({ out: 'ran\n', childProcess: true });
  });
});
