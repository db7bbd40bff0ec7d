// The synchronous exec of a delegate gives what execPlugin (async, node:child_process) gives.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { execPlugin } from '../../../src/cni/delegate';
import { execPluginSync } from '../../../src/util/plugin-exec-sync';
import { spawnSyncLean } from '../../../src/util/spawn-sync';

const dir = mkdtempSync(join(tmpdir(), 'plugin-exec-sync-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function plugin(name: string, body: string, mode = 0o755): string {
  const file = join(dir, name);
  writeFileSync(file, `#!/bin/sh\n${body}\n`);
  chmodSync(file, mode);
  return file;
}

const env = { PATH: process.env.PATH, CNI_COMMAND: 'ADD' };

describe('execPluginSync', () => {
  it('passes stdin and environment, returns stdout, stderr and the exit code as execPlugin does', async () => {
    const file = plugin('echoes', 'cat; echo "$CNI_COMMAND" >&2; exit 3');
    const want = { stdout: '{"cniVersion":"1.0.0"}', stderr: 'ADD\n', exitCode: 3 };
    expect(await execPluginSync(file, env, '{"cniVersion":"1.0.0"}')).toEqual(want);
    expect(await execPlugin(file, env, '{"cniVersion":"1.0.0"}')).toEqual(want);
  });

  it('a plugin that exits without reading its stdin still gives its error object (no EPIPE failure)', async () => {
    const file = plugin('no-read', `echo '{"code":7,"msg":"bad"}'; exit 1`);
    const big = 'x'.repeat(1 << 20); // more than a pipe holds: the write must meet the closed pipe
    const want = { stdout: '{"code":7,"msg":"bad"}\n', stderr: '', exitCode: 1 };
    expect(await execPluginSync(file, env, big)).toEqual(want);
    expect(await execPlugin(file, env, big)).toEqual(want);
    expect(spawnSyncLean(file, [], { input: big })).toEqual({ stdout: want.stdout, stderr: '', status: 1, signal: null });
  });

  it('a plugin killed by a signal exits 128, as with execPlugin', async () => {
    const file = plugin('killed', 'kill -9 $$');
    expect(await execPluginSync(file, env, '')).toMatchObject({ exitCode: 128 });
    expect(await execPlugin(file, env, '')).toMatchObject({ exitCode: 128 });
  });

  it('a file that cannot be run is the same CNI error as with execPlugin', async () => {
    const file = plugin('not-executable', 'exit 0', 0o644);
    const msg = `cannot run plugin ${file}: spawn ${file} EACCES`;
    await expect(execPluginSync(file, env, '')).rejects.toMatchObject({ code: 999, message: msg });
    await expect(execPlugin(file, env, '')).rejects.toMatchObject({ code: 999, message: msg });
  });
});
