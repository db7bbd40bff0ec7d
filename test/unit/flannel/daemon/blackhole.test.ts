// ensureBlackhole against a recorded `ip`: what it reads, what it adds and
// removes (ours only: our metric, inside the network), and nothing on a
// second pass. The kernel's side (the bridge's route winning) is in the
// kube integration test.
import { afterEach, describe, expect, it } from 'vitest';
import { Prefix } from '../../../../src/net/ip';
import { Runner, setRunner } from '../../../../src/iproute/exec';
import { BLACKHOLE_METRIC, ensureBlackhole, removeBlackhole } from '../../../../src/flannel/daemon/blackhole';

describe('ensureBlackhole', () => {
  let prev: Runner | undefined;
  afterEach(() => prev && setRunner(prev));

  /** A table of blackhole routes, answering `ip -json -4|-6 route show type blackhole root N`, `ip route add|del blackhole`. */
  const fake = (routes: { dst: string; metric?: number }[]) => {
    const calls: string[] = [];
    prev = setRunner(async (argv) => {
      const cmd = argv.join(' ');
      calls.push(cmd);
      let m: RegExpExecArray | null;
      if ((m = /^ip -json -[46] route show type blackhole root (\S+)$/.exec(cmd))) {
        const net = Prefix.parse(m[1])!;
        const inside = routes.filter((r) => Prefix.parse(r.dst)?.family === net.family && net.contains(Prefix.parse(r.dst)!.network));
        return { stdout: JSON.stringify(inside.map((r) => ({ type: 'blackhole', dst: r.dst, ...(r.metric ? { metric: r.metric } : {}), flags: [] }))), stderr: '', code: 0 };
      }
      if ((m = /^ip -[46] route (add|del) blackhole (\S+) metric (\d+)$/.exec(cmd))) {
        if (m[1] === 'add') routes.push({ dst: m[2], metric: Number(m[3]) });
        else routes.splice(routes.findIndex((r) => r.dst === m![2] && r.metric === Number(m![3])), 1);
        return { stdout: '', stderr: '', code: 0 };
      }
      throw new Error(`unexpected ${cmd}`);
    });
    return { calls, routes };
  };

  it('adds ours with its metric, removes ours for another subnet, leaves others\' alone, and then has nothing to do', async () => {
    const k = fake([{ dst: '10.244.9.0/24', metric: BLACKHOLE_METRIC }, { dst: '10.244.8.0/24' }, { dst: '10.99.0.0/24', metric: BLACKHOLE_METRIC }]);
    const subnet = Prefix.parse('10.244.1.0/24')!;
    const net = Prefix.parse('10.244.0.0/16')!;
    expect(await ensureBlackhole(subnet, net)).toEqual(['removed the blackhole route to 10.244.9.0/24 (not our subnet)', 'added a blackhole route to 10.244.1.0/24 (metric 1024)']);
    expect(k.routes).toEqual([{ dst: '10.244.8.0/24' }, { dst: '10.99.0.0/24', metric: 1024 }, { dst: '10.244.1.0/24', metric: 1024 }]);
    expect(await ensureBlackhole(subnet, net)).toEqual([]);
    expect(k.calls.at(-1)).toBe('ip -json -4 route show type blackhole root 10.244.0.0/16');
  });

  it('IPv6: the same with -6', async () => {
    const k = fake([]);
    expect(await ensureBlackhole(Prefix.parse('fd00:10:244:1::/64')!, Prefix.parse('fd00:10:244::/56')!)).toEqual(['added a blackhole route to fd00:10:244:1::/64 (metric 1024)']);
    expect(k.calls).toEqual(['ip -json -6 route show type blackhole root fd00:10:244::/56', 'ip -6 route add blackhole fd00:10:244:1::/64 metric 1024']);
  });

  it('removeBlackhole: ours to that subnet goes, nothing else; none there: nothing run but the read', async () => {
    const k = fake([{ dst: '10.244.1.0/24', metric: BLACKHOLE_METRIC }, { dst: '10.244.1.0/24' }]);
    await removeBlackhole(Prefix.parse('10.244.1.0/24')!);
    expect(k.routes).toEqual([{ dst: '10.244.1.0/24' }]);
    await removeBlackhole(Prefix.parse('10.244.1.0/24')!);
    expect(k.calls.filter((c) => c.includes(' del '))).toEqual(['ip -4 route del blackhole 10.244.1.0/24 metric 1024']);
  });
});
