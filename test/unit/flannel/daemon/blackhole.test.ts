// ensureBlackhole against the fake kernel: what it reads, what it adds and
// removes (ours only: our metric, inside the network), and nothing on a
// second pass. The kernel's side (the bridge's route winning) is in the
// kube integration test.
import { afterEach, describe, expect, it } from 'vitest';
import { Prefix } from '../../../../src/net/ip';
import { FakeKernel } from '../../../support/fake-kernel';
import { BLACKHOLE_METRIC, ensureBlackhole, removeBlackhole } from '../../../../src/flannel/daemon/blackhole';

describe('ensureBlackhole', () => {
  let kernel: FakeKernel;
  afterEach(() => kernel.uninstall());

  /** The fake kernel with these blackhole routes; `calls` the commands run, `routes` the blackhole routes it has. */
  const fake = (routes: { dst: string; metric?: number }[]) => {
    kernel = new FakeKernel().install();
    kernel.routesIn().push(...routes.map((r) => ({ type: 'blackhole' as const, ...r })));
    return {
      get calls() {
        return kernel.calls.map((c) => c.argv.join(' '));
      },
      get routes() {
        return kernel.routesIn().filter((r) => r.type === 'blackhole').map(({ type: _, ...r }) => r);
      },
    };
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
