// The flock(2) lock: exclusion, the bounded wait, and a dead holder costing nothing.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withLock } from '../../../src/util/lock';
import { CniError } from '../../../src/cni/errors';
import { waitFor } from '../../support/wait';

let dir: string;
let lockFile: string;
beforeEach(() => {
  dir = fs.mkdtempSync(join(tmpdir(), 'lock-'));
  lockFile = join(dir, 'lock');
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

/** flock(1) processes this process started that are still running (a withLock waiting in the kernel). */
function waitingFlocks(): number {
  let n = 0;
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const [state, ppid] = stat.slice(close + 2).split(' ');
      if (stat.slice(stat.indexOf('(') + 1, close) === 'flock' && Number(ppid) === process.pid && state !== 'Z') n++;
    } catch {
      // gone meanwhile
    }
  }
  return n;
}

/**
 * Another process holding the lock: flock(1) takes it and, without forking,
 * becomes `cat`, which echoes a line once it runs (so once the lock is held).
 */
async function holder() {
  const child = spawn('flock', ['--exclusive', '--no-fork', lockFile, 'cat'], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin.write('held\n');
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('error', reject);
  });
  const closed = new Promise<void>((r) => child.once('close', () => r()));
  return { child, closed };
}

describe('withLock', () => {
  it('creates the lock file and runs the function holding the lock', async () => {
    const got = await withLock(lockFile, 1000, async () => 42);
    expect(got).toBe(42);
    expect(fs.statSync(lockFile).isFile()).toBe(true);
  });

  it('excludes: a second holder waits until the first is done', async () => {
    const order: string[] = [];
    let release!: () => void;
    const first = withLock(lockFile, 1000, async () => {
      order.push('first in');
      await new Promise<void>((r) => (release = r));
      order.push('first out');
    });
    expect(order).toEqual(['first in']); // withLock took the free lock at once
    const second = withLock(lockFile, 30_000, async () => void order.push('second'));
    await waitFor('the second call to wait for the lock in flock(1)', () => waitingFlocks() === 1, 30_000);
    expect(order).toEqual(['first in']);
    release();
    await Promise.all([first, second]);
    expect(order).toEqual(['first in', 'first out', 'second']);
  });

  it('gives up after the timeout with code 11, naming the lock', async () => {
    const h = await holder();
    try {
      const started = Date.now();
      const err = await withLock(lockFile, 300, async () => 'never').catch((e) => e);
      expect(err).toBeInstanceOf(CniError);
      expect(err.code).toBe(11);
      expect(err.message).toBe(`timed out after 300 ms waiting for the lock ${lockFile}`);
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    } finally {
      h.child.kill('SIGKILL');
      await h.closed;
    }
  });

  it('a holder killed with SIGKILL frees the lock: the waiting call gets it, long before its timeout', async () => {
    const h = await holder();
    const waiting = withLock(lockFile, 60_000, async () => Date.now());
    await waitFor('the call to wait for the lock in flock(1)', () => waitingFlocks() === 1, 30_000);
    const killedAt = Date.now();
    h.child.kill('SIGKILL');
    const latency = (await waiting) - killedAt; // a lock the kernel did not free would time out after 60 s (code 11)
    console.log(`lock taken ${latency} ms after its holder was killed`);
    expect(latency).toBeLessThan(30_000);
  });

  it('blocking (a plugin call): one flock(1) waits in the kernel, the call blocked meanwhile, until the holder lets go', async () => {
    // a holder in another process that lets go after 400 ms (this process blocks: it cannot release it)
    const h = spawn('flock', ['--exclusive', lockFile, 'sleep', '0.4'], { stdio: 'ignore' });
    await waitFor('the holder to hold the lock', () => fs.readFileSync('/proc/locks', 'utf8').includes('FLOCK'), 30_000);
    const started = Date.now();
    let ticks = 0;
    const timer = setInterval(() => ticks++, 10);
    const got = await withLock(lockFile, 60_000, async () => Date.now(), { blocking: true });
    clearInterval(timer);
    expect(got - started).toBeGreaterThanOrEqual(200); // it waited for the holder
    expect(ticks).toBe(0); // blocked: no timer ran while it waited
    await new Promise((r) => h.once('close', r));
  });

  it('blocking: gives up after the timeout with code 11, naming the lock', async () => {
    const h = await holder();
    try {
      const err = await withLock(lockFile, 300, async () => 'never', { blocking: true }).catch((e) => e);
      expect(err).toBeInstanceOf(CniError);
      expect([err.code, err.message]).toEqual([11, `timed out after 300 ms waiting for the lock ${lockFile}`]);
    } finally {
      h.child.kill('SIGKILL');
      await h.closed;
    }
  });

  it('a lock file that cannot be opened is an I/O failure naming it', async () => {
    const err = await withLock(join(dir, 'missing', 'lock'), 100, async () => 0).catch((e) => e);
    expect(err).toMatchObject({ code: 5, message: `cannot open the lock file ${join(dir, 'missing', 'lock')}: ENOENT` });
  });
});
