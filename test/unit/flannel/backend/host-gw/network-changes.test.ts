// HostGwNetwork's passes on the fake kernel: the first full pass routes every
// peer and logs one summary line; a changes pass (from the leases that
// changed, or from a new list compared with the last) runs only the lines
// for the peers that changed, reads nothing, and ends where a full pass would.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import type { Lease } from '../../../../../src/flannel/lease';
import { Reporter } from '../../../../../src/flannel/log';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import { HostGwNetwork } from '../../../../../src/flannel/backend/host-gw/network';
import { FakeKernel } from '../../../../support/fake-kernel';

const CFG = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"host-gw"}}');
const ext = { dev: 'eth0', localIP: IP.parse('192.168.88.1')!, publicIP: IP.parse('192.168.88.1')!, mtu: 1500, subnets: [Prefix.parse('192.168.88.0/24')!] };
const lease = (n: number, host = n): Lease => ({ subnet: Prefix.parse(`10.88.${n}.0/24`)!, attrs: { backendType: 'host-gw', publicIP: IP.parse(`192.168.88.${host}`)! } });

describe('HostGwNetwork changes passes', () => {
  let kernel: FakeKernel;
  let logs: string[];
  let net: HostGwNetwork;
  beforeEach(async () => {
    kernel = FakeKernel.withUnderlay().install();
    logs = [];
    net = new HostGwNetwork(CFG, ext, { log: (m) => logs.push(m), problems: new Reporter((m) => logs.push(m)), resync: () => {} });
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')! });
  });
  afterEach(() => kernel.uninstall());

  const routes = () => kernel.routesIn().filter((r) => r.dev === 'eth0' && r.dst.startsWith('10.88.')).map((r) => `${r.dst} via ${r.gateway}`).sort();
  const linesSince = (calls: number) => {
    const ran = kernel.calls.slice(calls);
    expect(ran.every((c) => c.argv.includes('-batch'))).toBe(true); // no show: nothing read
    return ran.flatMap((c) => c.input!.trim().split('\n'));
  };

  it('from the leases that changed: only their routes, nothing read; the same end as a full pass', async () => {
    const leases = Array.from({ length: 100 }, (_, i) => lease(i + 2));
    expect(await net.reconcileChanges({ removed: [], added: [] }, 'too early')).toBeUndefined();
    const [first] = await net.reconcile(leases, 'start', true);
    expect(first).toMatchObject({ up: true, wanted: 100, failed: [] });
    expect(logs).toEqual(['100 route changes (start): 100 added, 0 removed or replaced']);
    // -v=2: every change, no summary
    const verbose: string[] = [];
    const v2 = new HostGwNetwork(CFG, ext, { log: (m) => verbose.push(m), detail: 2, problems: new Reporter((m) => verbose.push(m)), resync: () => {} });
    v2.attach({ subnet: Prefix.parse('10.88.1.0/24')! });
    kernel.routes.set('', kernel.routes.get('')!.filter((r) => !r.dst.startsWith('10.88.')));
    await v2.reconcile(leases, 'start', true);
    expect(verbose).toHaveLength(100);
    expect(verbose[0]).toBe('route 10.88.2.0/24 via 192.168.88.2 dev eth0: added (start)');
    expect(net.programmedInFull()).toBe(true);
    let calls = kernel.calls.length;
    const moved = lease(9, 209);
    const [st] = (await net.reconcileChanges({ removed: [leases[7], leases[20]], added: [moved, lease(150)] }, 'changes'))!;
    expect(st).toMatchObject({ up: true, wanted: 100, failed: [] });
    expect(linesSince(calls).sort()).toEqual([
      'route del 10.88.22.0/24 via 192.168.88.22 dev eth0',
      'route del 10.88.9.0/24 via 192.168.88.9 dev eth0',
      'route replace 10.88.150.0/24 via 192.168.88.150 dev eth0',
      'route replace 10.88.9.0/24 via 192.168.88.209 dev eth0',
    ]);
    expect(logs.slice(1)).toEqual([
      'route 10.88.9.0/24 via 192.168.88.9 dev eth0: removed (now via 192.168.88.209 dev eth0) (changes)',
      'route 10.88.22.0/24 via 192.168.88.22 dev eth0: removed (no lease) (changes)',
      'route 10.88.9.0/24 via 192.168.88.209 dev eth0: added (changes)',
      'route 10.88.150.0/24 via 192.168.88.150 dev eth0: added (changes)',
    ]);
    const now = leases.filter((l) => l !== leases[7] && l !== leases[20]).concat(moved, lease(150));
    // a changes pass from a list (a store without deltas): compared with the last one, one route
    const third = now.concat(lease(151));
    calls = kernel.calls.length;
    await net.reconcile(third, 'list changed', false);
    expect(linesSince(calls)).toEqual(['route replace 10.88.151.0/24 via 192.168.88.151 dev eth0']);
    const afterChanges = routes();
    calls = kernel.calls.length;
    await net.reconcile(third, 'periodic', true);
    expect(kernel.calls.slice(calls).some((c) => !c.argv.includes('-batch'))).toBe(true); // a full pass reads
    expect(routes()).toEqual(afterChanges); // and finds nothing to repair
    expect(afterChanges).toHaveLength(101);
  });

  it('a route removed by hand is left to the full pass; a refused change makes the next pass a full one', async () => {
    const resyncs: string[] = [];
    net = new HostGwNetwork(CFG, ext, { log: (m) => logs.push(m), problems: new Reporter((m) => logs.push(m)), resync: (why) => resyncs.push(why) });
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')! });
    const leases = [lease(2), lease(3)];
    await net.reconcile(leases, 'start', true);
    const table = kernel.routes.get('')!;
    table.splice(table.findIndex((r) => r.dst === '10.88.2.0/24'), 1);
    await net.reconcileChanges({ removed: [], added: [lease(4)] }, 'changes');
    expect(routes()).toEqual(['10.88.3.0/24 via 192.168.88.3', '10.88.4.0/24 via 192.168.88.4']);
    logs.length = 0;
    await net.reconcile([...leases, lease(4)], 'periodic', true);
    expect(routes()).toEqual(['10.88.2.0/24 via 192.168.88.2', '10.88.3.0/24 via 192.168.88.3', '10.88.4.0/24 via 192.168.88.4']);
    expect(logs).toEqual(['route 10.88.2.0/24 via 192.168.88.2 dev eth0: was missing, put back (periodic)']); // drift, said as such
    kernel.failures.push({ match: '10.88.5.0', msg: 'Error: Nexthop has invalid gateway.' });
    const [st] = (await net.reconcileChanges({ removed: [], added: [lease(5)] }, 'changes'))!;
    expect(st.failed).toEqual(['10.88.5.0/24']);
    expect(resyncs).toEqual(['IPv4 routes: some changes were refused']);
    expect(net.programmedInFull()).toBe(false);
    expect(await net.reconcileChanges({ removed: [], added: [] }, 'changes')).toBeUndefined(); // the daemon lists and runs a pass that reads
  });
});
