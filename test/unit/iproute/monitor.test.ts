// The kernel's notifications as iproute2 6.1 prints them (lines recorded from
// `ip -4 -oneline monitor label neigh route` and `bridge monitor fdb` on this
// project's machines), parsed into the entries the JSON listings give; lines
// that are not a device's unicast entry are left alone. And a monitor child
// kept running: started again after it ends, with backoff, saying so.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { KeptMonitor, parseFdbMonitorLine, parseIpMonitorLine, setMonitorSpawn, type MonitorSpawn } from '../../../src/iproute/monitor';

describe('monitor lines', () => {
  it('neighbours: added, changed, deleted, not resolved; with their state words', () => {
    expect(parseIpMonitorLine('[NEIGH]10.9.2.0 dev vx0 lladdr 0a:00:00:00:00:02 PERMANENT ')).toEqual({
      kind: 'neigh', deleted: false, dev: 'vx0', entry: { dst: '10.9.2.0', lladdr: '0a:00:00:00:00:02', state: ['PERMANENT'] },
    });
    expect(parseIpMonitorLine('[NEIGH]Deleted 10.9.2.0 dev vx0 lladdr 0a:00:00:00:00:04 PERMANENT ')).toMatchObject({ deleted: true, entry: { dst: '10.9.2.0' } });
    expect(parseIpMonitorLine('[NEIGH]10.9.2.0 dev vx0 FAILED ')).toEqual({ kind: 'neigh', deleted: false, dev: 'vx0', entry: { dst: '10.9.2.0', state: ['FAILED'] } });
    expect(parseIpMonitorLine('[NEIGH]fd80:0:0:5:: dev flannel-v6.1 lladdr 0a:59:00:00:00:05 router STALE')).toMatchObject({ dev: 'flannel-v6.1', entry: { dst: 'fd80:0:0:5::', state: ['STALE'] } });
    // the kernel asking a resolver, and proxy entries, are not neighbours
    expect(parseIpMonitorLine('[NEIGH]miss 10.9.3.0 dev vx0 INCOMPLETE')).toBeUndefined();
    expect(parseIpMonitorLine('[NEIGH]10.9.3.9 dev vx0 proxy')).toBeUndefined();
  });

  it('routes of the main table with a device: gateway, onlink, protocol, metric; others are not read', () => {
    expect(parseIpMonitorLine('[ROUTE]10.9.2.0/24 via 10.9.2.0 dev vx0 onlink ')).toEqual({
      kind: 'route', deleted: false, route: { dst: '10.9.2.0/24', gateway: '10.9.2.0', dev: 'vx0', flags: ['onlink'] },
    });
    expect(parseIpMonitorLine('[ROUTE]Deleted 10.9.2.0/24 via 10.9.2.7 dev vx0 onlink ')).toMatchObject({ deleted: true, route: { gateway: '10.9.2.7' } });
    expect(parseIpMonitorLine('[ROUTE]fd80::/64 via fd80:: dev vx0 metric 1024 onlink pref medium')).toEqual({
      kind: 'route', deleted: false, route: { dst: 'fd80::/64', gateway: 'fd80::', dev: 'vx0', metric: 1024, flags: ['onlink'] },
    });
    expect(parseIpMonitorLine('[ROUTE]fd00::/64 dev vx0 proto kernel metric 256 pref medium')).toMatchObject({ route: { dst: 'fd00::/64', protocol: 'kernel' } });
    expect(parseIpMonitorLine('[ROUTE]10.9.5.5 dev vx0 scope link ')).toEqual({ kind: 'route', deleted: false, route: { dst: '10.9.5.5', dev: 'vx0', scope: 'link' } });
    // a device named like a flag is the device, not a flag
    expect(parseIpMonitorLine('[ROUTE]10.9.6.0/24 via 10.9.6.1 dev onlink')).toEqual({ kind: 'route', deleted: false, route: { dst: '10.9.6.0/24', gateway: '10.9.6.1', dev: 'onlink' } });
    for (const other of [
      '[ROUTE]local 10.9.0.0 dev vx0 table local proto kernel scope host src 10.9.0.0 ',
      '[ROUTE]Deleted local fd00::1 dev vx0 table local proto kernel metric 0 pref medium',
      '[ROUTE]blackhole 10.99.0.0/24 ',
      '[ROUTE]10.98.0.0/24 \\\tnexthop via 10.9.2.0 dev vx0 weight 1 onlink \\\tnexthop via 10.9.3.0 dev vx0 weight 1 onlink ',
      '[ROUTE]10.97.0.0/24 via 10.9.2.0 dev vx0 table 100',
      '10.9.2.0 dev vx0 lladdr 0a:00:00:00:00:02 PERMANENT', // no label: not ip monitor's
      '[ADDR]2: vx0    inet 10.9.0.0/32 scope global vx0',
    ]) expect(parseIpMonitorLine(other), other).toBeUndefined();
  });

  it('FDB entries of a device, with their remote; a bridge port\'s learned entries too (the caller picks its devices)', () => {
    expect(parseFdbMonitorLine('0a:00:00:00:00:02 dev vx0 dst 172.16.0.2 self permanent')).toEqual({
      kind: 'fdb', deleted: false, dev: 'vx0', entry: { mac: '0a:00:00:00:00:02', dst: '172.16.0.2', flags: ['self'], state: 'permanent' },
    });
    expect(parseFdbMonitorLine('Deleted 0a:00:00:00:00:01 dev vx0 dst 172.16.0.1 self permanent')).toMatchObject({ deleted: true, entry: { dst: '172.16.0.1' } });
    expect(parseFdbMonitorLine('00:00:00:00:00:00 dev flannel.1 dst 192.168.1.2 self permanent')).toMatchObject({ entry: { mac: '00:00:00:00:00:00' } });
    expect(parseFdbMonitorLine('52:54:00:12:34:56 dev veth1 master cni0 ')).toEqual({ kind: 'fdb', deleted: false, dev: 'veth1', entry: { mac: '52:54:00:12:34:56', flags: ['master'] } });
    expect(parseFdbMonitorLine('33:33:00:00:00:01 dev cni0 self permanent')).toMatchObject({ dev: 'cni0', entry: { state: 'permanent' } });
    expect(parseFdbMonitorLine('Deleted dev vx0 port 1')).toBeUndefined();
  });
});

describe('KeptMonitor', () => {
  let spawned: { argv: readonly string[]; exited(why: string): void; started(): void; stopped: boolean }[];
  let prev: MonitorSpawn;
  beforeEach(() => {
    vi.useFakeTimers();
    spawned = [];
    prev = setMonitorSpawn((argv, h) => {
      const child = { argv, exited: h.exited, started: h.started, stopped: false };
      spawned.push(child);
      return { stop: () => (child.stopped = true) };
    });
  });
  afterEach(() => {
    setMonitorSpawn(prev);
    vi.useRealTimers();
  });

  it('starts again after it ends, 1 s, 2 s, 4 s ... later (30 s at most), saying why each time; nothing after stop', async () => {
    const events: string[] = [];
    const m = new KeptMonitor(['ip', '-4', 'monitor'], { line: () => {}, trouble: () => {}, running: () => events.push('running'), ended: (why) => events.push(why) });
    m.start();
    spawned[0].started();
    expect(events).toEqual(['running']);
    for (const wait of [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000]) {
      spawned.at(-1)!.exited('ip monitor exited (SIGKILL)');
      expect(events.at(-1)).toBe(`ip monitor exited (SIGKILL); starting it again in ${wait / 1000} s`);
      const n = spawned.length;
      await vi.advanceTimersByTimeAsync(wait - 1);
      expect(spawned).toHaveLength(n);
      await vi.advanceTimersByTimeAsync(1);
      expect(spawned).toHaveLength(n + 1);
    }
    // one that ran a minute starts the backoff over
    await vi.advanceTimersByTimeAsync(60_000);
    spawned.at(-1)!.exited('ip monitor exited (status 1)');
    expect(events.at(-1)).toBe('ip monitor exited (status 1); starting it again in 1 s');
    await vi.advanceTimersByTimeAsync(1000);
    const n = spawned.length;
    m.stop();
    expect(spawned.at(-1)!.stopped).toBe(true);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(spawned).toHaveLength(n);
  });
});
