// VxlanNetwork's passes on the fake kernel: the first full pass programs
// every peer and logs one summary line; a changes pass from the leases that
// changed (reconcileChanges) runs only the lines for those peers, reads
// nothing from the kernel, and leaves the tables as a full pass would.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import type { Lease } from '../../../../../src/flannel/lease';
import { Reporter } from '../../../../../src/flannel/log';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import { VxlanNetwork } from '../../../../../src/flannel/backend/vxlan/network';
import { FakeKernel } from '../../../../support/fake-kernel';

const CFG = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}');
const ext = { dev: 'eth0', localIP: IP.parse('192.168.88.1')!, publicIP: IP.parse('192.168.88.1')!, mtu: 1500, subnets: [] };
const hex = (n: number) => n.toString(16).padStart(2, '0');
const lease = (n: number, gen = 0): Lease => ({
  subnet: Prefix.parse(`10.88.${n}.0/24`)!,
  attrs: { backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:${hex(gen)}:${hex(n)}`, publicIP: IP.parse(`192.168.${88 + gen}.${n}`)! },
});

describe('VxlanNetwork changes passes', () => {
  let kernel: FakeKernel;
  let logs: string[];
  let net: VxlanNetwork;
  beforeEach(async () => {
    kernel = FakeKernel.withUnderlay().install();
    logs = [];
    net = new VxlanNetwork(CFG, ext, { log: (m) => logs.push(m), problems: new Reporter((m) => logs.push(m)), resync: () => {} });
    const attrs = await net.leaseAttrs(undefined);
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')! }, attrs);
    await net.setUp();
  });
  afterEach(() => kernel.uninstall());

  const state = () => ({
    neigh: kernel.neigh().filter((n) => n.dev === 'flannel.1').map((n) => `${n.dst} ${n.lladdr}`).sort(),
    fdb: kernel.fdb().filter((f) => f.dev === 'flannel.1').map((f) => `${f.mac} ${f.dst}`).sort(),
    routes: kernel.routesIn().filter((r) => r.dev === 'flannel.1').map((r) => `${r.dst} ${r.gateway}`).sort(),
  });

  it('plans only the changed peers from the leases that changed, without reading the kernel, and ends where a full pass would', async () => {
    const leases = Array.from({ length: 100 }, (_, i) => lease(i + 2));
    expect(await net.reconcileChanges({ removed: [], added: [] }, 'too early')).toBeUndefined(); // nothing programmed yet: the daemon lists
    logs.length = 0;
    const [first] = await net.reconcile(leases, 'start', true);
    expect(first).toMatchObject({ up: true, wanted: 100, failed: [] });
    expect(logs).toEqual(['300 changes (start): 100 neigh added, 100 fdb added, 100 route added']);
    const calls = kernel.calls.length;
    // one MAC changed, one node gone, one new
    const changedMac = lease(9, 1);
    const now = leases.filter((l) => l !== leases[7] && l !== leases[20]).concat(changedMac, lease(200));
    const [st] = (await net.reconcileChanges({ removed: [leases[7], leases[20]], added: [changedMac, lease(200)] }, 'changes'))!;
    expect(st).toMatchObject({ up: true, wanted: 100, failed: [] });
    const ran = kernel.calls.slice(calls);
    expect(ran.every((c) => c.argv.includes('-batch'))).toBe(true); // no show: nothing read
    const lines = ran.flatMap((c) => c.input!.trim().split('\n')).sort();
    expect(lines).toEqual([
      'fdb del 0a:00:00:00:00:09 dst 192.168.88.9 dev flannel.1 self',
      'fdb del 0a:00:00:00:00:16 dst 192.168.88.22 dev flannel.1 self',
      'fdb replace 0a:00:00:00:00:c8 dst 192.168.88.200 dev flannel.1 self permanent',
      'fdb replace 0a:00:00:00:01:09 dst 192.168.89.9 dev flannel.1 self permanent',
      'neigh del 10.88.22.0 dev flannel.1',
      'neigh replace 10.88.200.0 lladdr 0a:00:00:00:00:c8 dev flannel.1 nud permanent',
      'neigh replace 10.88.9.0 lladdr 0a:00:00:00:01:09 dev flannel.1 nud permanent',
      'route del 10.88.22.0/24 dev flannel.1',
      'route replace 10.88.200.0/24 via 10.88.200.0 dev flannel.1 onlink',
    ]);
    const afterChanges = state();
    await net.reconcile(now, 'periodic', true);
    expect(state()).toEqual(afterChanges); // the full pass found nothing to repair
    expect(afterChanges.routes).toHaveLength(100);
  });
});

describe('VxlanNetwork on a dual-stack lease', () => {
  const CFG6 = parseNetworkConfig('{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88:0:1::/48","Backend":{"Type":"vxlan"}}');
  const ext6 = { ...ext, localIPv6: IP.parse('fd88:88::1')!, publicIPv6: IP.parse('fd88:88::1')! };
  const dual = (n: number, gen = 0): Lease => ({
    ...lease(n, gen),
    ipv6Subnet: Prefix.parse(`fd88:0:1:${hex(n)}::/64`)!,
    attrs: { ...lease(n, gen).attrs, v6Vni: 1, v6VtepMAC: `0a:00:00:00:6${gen}:${hex(n)}`, publicIPv6: IP.parse(`fd88:88::${hex(n)}`)! },
  });
  let kernel: FakeKernel;
  afterEach(() => kernel.uninstall());

  it('both VTEPs are programmed by one ip, one bridge and one ip process per pass, not one set per family', async () => {
    kernel = FakeKernel.withUnderlay().install();
    const net = new VxlanNetwork(CFG6, ext6, { log: () => {}, problems: new Reporter(() => {}), resync: () => {} });
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')!, ipv6Subnet: Prefix.parse('fd88:0:1:1::/64')! }, await net.leaseAttrs(undefined));
    await net.setUp();
    const leases = [2, 3, 4].map((n) => dual(n));
    const batches = (from: number) => kernel.calls.slice(from).filter((c) => c.argv.includes('-batch')).map((c) => c.argv[0]);
    let from = kernel.calls.length;
    const states = await net.reconcile(leases, 'start', true);
    expect(states.map((s) => [s.vtep, s.wanted, s.failed])).toEqual([['flannel.1', 3, []], ['flannel-v6.1', 3, []]]);
    expect(batches(from)).toEqual(['ip', 'bridge', 'ip']);
    // one node's two VTEP MACs changed: a neighbour and FDB entries per family, in two processes
    from = kernel.calls.length;
    const changed = dual(3, 1);
    await net.reconcileChanges({ removed: [leases[1]], added: [changed] }, 'changes');
    expect(batches(from)).toEqual(['ip', 'bridge']);
    const lines = kernel.calls.slice(from).flatMap((c) => c.input!.trim().split('\n'));
    expect(lines.filter((l) => l.startsWith('neigh')).sort()).toEqual([
      'neigh replace 10.88.3.0 lladdr 0a:00:00:00:01:03 dev flannel.1 nud permanent',
      'neigh replace fd88:0:1:3:: lladdr 0a:00:00:00:61:03 dev flannel-v6.1 nud permanent',
    ]);
    expect(kernel.neigh().filter((n) => n.dst === 'fd88:0:1:3::').map((n) => n.lladdr)).toEqual(['0a:00:00:00:61:03']);
  });
});
