// Batches sent to one kept `ip -force -batch -` child (batch-session.ts), against a stand-in `ip`
// on PATH that speaks the same protocol (each failed line reported on stderr as "<why>\nCommand
// failed -:<N>", N counted from its start): each batch's failures come back numbered from 1 as a
// process of its own would give them, one child serves every batch, and a child that dies fails
// the batch in flight and is started again for the next.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { batchSessions } from '../../../src/iproute/batch-session';
import { runBatch } from '../../../src/iproute/batch';
import { setRunner, type Runner } from '../../../src/iproute/exec';

let dir: string;
let path: string | undefined;
let prev: Runner;
let sessions: ReturnType<typeof batchSessions>;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'batch-session-'));
  // the stand-in: counts its lines, fails "fail ..." lines, dies on "die", and logs its pid once
  writeFileSync(
    join(dir, 'ip'),
    `#!/bin/sh\necho $$ >> ${dir}/pids\nn=0\nwhile read -r l; do n=$((n+1)); case "$l" in fail*) echo "Error: $l" >&2; echo "Command failed -:$n" >&2;; die*) exit 2;; cni-ts-batch-end) echo 'Object "cni-ts-batch-end" is unknown, try "ip help".' >&2; echo "Command failed -:$n" >&2;; esac; done\n`,
  );
  chmodSync(join(dir, 'ip'), 0o755);
  path = process.env.PATH;
  process.env.PATH = `${dir}:${path}`;
  sessions = batchSessions(async () => ({ stdout: 'fallback', stderr: '', code: 0 }));
  prev = setRunner(sessions.runner);
});
afterEach(() => {
  sessions.close();
  setRunner(prev);
  process.env.PATH = path;
  rmSync(dir, { recursive: true, force: true });
});

const pids = () => readFileSync(join(dir, 'pids'), 'utf8').trim().split('\n');

describe('batch sessions', () => {
  it('one child for every batch; each batch\'s failed lines numbered from its first', async () => {
    expect((await runBatch('ip', [['route', 'replace', 'a'], ['fail', 'one'], ['route', 'replace', 'b']])).errors).toEqual([undefined, 'Error: fail one', undefined]);
    expect((await runBatch('ip', [['fail', 'two'], ['fail', 'three']])).errors).toEqual(['Error: fail two', 'Error: fail three']);
    expect((await runBatch('ip', [['route', 'replace', 'c']])).errors).toEqual([undefined]);
    expect(pids()).toHaveLength(1);
  });

  it('batches asked for together run one after the other, each with its own failures', async () => {
    const [a, b] = await Promise.all([runBatch('ip', [['fail', 'a'], ['ok']]), runBatch('ip', [['ok'], ['fail', 'b']])]);
    expect([a.errors, b.errors]).toEqual([['Error: fail a', undefined], [undefined, 'Error: fail b']]);
  });

  it('a child that dies fails the batch in flight; the next batch starts another', async () => {
    await expect(runBatch('ip', [['ok'], ['die']])).rejects.toThrow(/ip -batch exited \(status 2\) during a batch/);
    expect((await runBatch('ip', [['fail', 'after']])).errors).toEqual(['Error: fail after']);
    expect(pids()).toHaveLength(2);
  });

  it('other commands (a listing, another namespace) and large batches (a full pass) go to the runner before it', async () => {
    expect((await sessions.runner(['ip', '-json', 'route', 'show'])).stdout).toBe('fallback');
    expect((await sessions.runner(['ip', '-force', '-batch', '-'], 'ok\n'.repeat(65))).stdout).toBe('fallback');
    expect((await sessions.runner(['ip', '-force', '-batch', '-'], 'ok\n'.repeat(64))).stdout).toBe('');
  });

  it('a batch that failed on a device index (iproute2 caches them: a device made again has a new one) ends its child; the next batch starts another', async () => {
    expect((await runBatch('ip', [['ok'], ['fail', 'bridge:', 'unknown', 'ifindex.']])).errors).toEqual([undefined, 'Error: fail bridge: unknown ifindex.']);
    expect((await runBatch('ip', [['fail', 'other']])).errors).toEqual(['Error: fail other']);
    expect((await runBatch('ip', [['fail', 'other', 'again']])).errors).toEqual(['Error: fail other again']);
    expect(pids()).toHaveLength(2); // a failure of another kind keeps the child
  });

  it('a device added, deleted or renamed (a command, or a line of a batch) runs in a process of its own, and the children are ended after it', async () => {
    await runBatch('ip', [['ok']]);
    for (const argv of [['ip', 'link', 'add', 'name', 'v', 'type', 'vxlan'], ['ip', 'link', 'del', 'dev', 'v'], ['ip', 'link', 'set', 'dev', 'v', 'name', 'w']]) {
      expect((await sessions.runner(argv)).stdout).toBe('fallback');
    }
    expect((await sessions.runner(['ip', '-force', '-batch', '-'], 'addr replace 10.0.0.1/32 dev v\nlink add name v type vxlan id 1\n')).stdout).toBe('fallback');
    expect(pids()).toHaveLength(1);
    await runBatch('ip', [['ok']]);
    expect(pids()).toHaveLength(2);
    // a device brought up or its MTU changed keeps its index: the child stays
    expect((await sessions.runner(['ip', 'link', 'set', 'dev', 'v', 'up'])).stdout).toBe('fallback');
    await runBatch('ip', [['ok']]);
    expect(pids()).toHaveLength(2);
  });

  it('a child is ended after 512 lines (iproute2 keeps memory per line) and another started for the next batch', async () => {
    for (let i = 0; i < 9; i++) await runBatch('ip', Array.from({ length: 60 }, () => ['ok']));
    expect(pids()).toHaveLength(1); // 8 x 61 lines before the ninth: under 512
    await runBatch('ip', [['ok']]);
    expect(pids()).toHaveLength(2); // 549 before it: a new child
  });
});
