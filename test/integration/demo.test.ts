// `make demo` as a newcomer runs it (root, after make build): the bridge demo
// and the overlay demo (test/demo/*.sh) succeed, show what they promise, and
// leave nothing behind: no namespace, no process, no temp directory; the
// overlay demo also when one of its steps fails.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, runProcess, sh } from './helpers';

const env = { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' };
const demo = (name: string, extra: Record<string, string> = {}) => runProcess(['bash', join(ROOT, 'test/demo', name)], { ...env, ...extra }, '');

/** Whether a process still runs. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** What the overlay demo made, from its output: the daemons' pids and the temp directory. */
function made(out: string): { pids: number[]; dir: string } {
  const pids = /^daemon pids: ([\d ]+)$/m.exec(out)?.[1].split(' ').map(Number) ?? [];
  const dir = /^removed: namespaces ovdemo-\*, the daemons, (\S+)$/m.exec(out)?.[1] ?? '';
  return { pids, dir };
}

function expectNothingLeft(out: string, prefixes: string[]): void {
  const netns = sh(['ip', 'netns', 'list']);
  for (const p of prefixes) expect(netns, `namespaces ${p}*`).not.toContain(p);
  expect(sh(['ip', '-br', 'link'])).not.toMatch(/ovdemo|cni-demo/);
  const { pids, dir } = made(out);
  for (const pid of pids) expect(alive(pid), `daemon ${pid}`).toBe(false);
  if (dir) expect(existsSync(dir), dir).toBe(false);
}

describe('make demo', () => {
  it('the bridge demo: ADD, a ping to the gateway, CHECK, DEL; nothing left', async () => {
    const r = await demo('bridge-demo.sh');
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/2 packets transmitted, 2 received/);
    expect(r.stdout).toContain('CHECK: ok');
    expect(r.stdout).toContain('masquerade rules left: 0');
    expectNothingLeft(r.stdout, ['cni-demo-']);
  }, 120_000);

  it('the overlay demo: two nodes, a pod on each through the flannel plugin, a ping across, status and /metrics; nothing left', async () => {
    const r = await demo('overlay-demo.sh');
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(made(r.stdout).pids).toHaveLength(2);
    expect(r.stdout).toMatch(/ovdemo-p1 on n1: 10\.250\.\d+\.\d+\novdemo-p2 on n2: 10\.250\.\d+\.\d+\n/);
    expect(r.stdout).toMatch(/3 packets transmitted, 3 received, 0% packet loss/);
    // status without flags found the daemon on n1 and every peer in place
    expect(r.stdout).toMatch(/\ndaemon: {2}pid \d+: vxlan-flannel daemon --iface eth0 --lease-dir \S+ --subnet-file /);
    expect(r.stdout).toMatch(/\n {2}10\.250\.\d+\.0\/24 +192\.168\.250\.2 +\S+ +ok +ok +ok\nstate: {3}ok\n/);
    expect(r.stdout).toMatch(/^flannel_peers\{family="ipv4"\} 1$/m);
    expect(r.stdout).toMatch(/^process_resident_memory_bytes \d+$/m);
    expect(r.stdout).toContain('n1: DEL ok\nn2: DEL ok');
    expectNothingLeft(r.stdout, ['ovdemo-']);
  }, 180_000);

  it('the overlay demo failing halfway (its pods attached): exit 1, and still nothing left', async () => {
    const r = await demo('overlay-demo.sh', { OVERLAY_DEMO_FAIL: 'pods' });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('overlay demo failed (exit 1); everything it made is removed');
    expect(made(r.stdout).pids).toHaveLength(2);
    expectNothingLeft(r.stdout, ['ovdemo-']);
  }, 180_000);
});
