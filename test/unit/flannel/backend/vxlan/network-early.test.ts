// VxlanNetwork.programEarly on the fake kernel: at start-up, while the list
// of leases is still read in pages, each page's peers are put in place
// against one reading of the kernel, nothing is removed, and the full pass
// after the list reads the kernel again and removes what no lease asks for.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import type { Lease } from '../../../../../src/flannel/lease';
import { Reporter } from '../../../../../src/flannel/log';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import type { Backend } from '../../../../../src/flannel/backend/backend';
import { VxlanNetwork } from '../../../../../src/flannel/backend/vxlan/network';
import { FakeKernel } from '../../../../support/fake-kernel';

const CFG = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}');
const ext = { dev: 'eth0', localIP: IP.parse('192.168.88.1')!, publicIP: IP.parse('192.168.88.1')!, mtu: 1500, subnets: [] };
const hex = (n: number) => n.toString(16).padStart(2, '0');
const lease = (n: number): Lease => ({
  subnet: Prefix.parse(`10.88.${n}.0/24`)!,
  attrs: { backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:${hex(n)}`, publicIP: IP.parse(`192.168.88.${n}`)! },
});

describe('VxlanNetwork.programEarly', () => {
  let kernel: FakeKernel;
  let logs: string[];
  const started = async (): Promise<Backend> => {
    const net = new VxlanNetwork(CFG, ext, { log: (m) => logs.push(m), problems: new Reporter((m) => logs.push(m)), resync: () => {} });
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')! }, await net.leaseAttrs(undefined));
    await net.setUp();
    return net;
  };
  beforeEach(async () => {
    kernel = new FakeKernel();
    kernel.links().set('eth0', FakeKernel.link({ name: 'eth0', kind: 'veth', mtu: 1500, mac: '52:54:00:00:00:01', addrs: [{ family: 'inet', local: '192.168.88.1', prefixlen: 24 }] }));
    kernel.install();
    logs = [];
    // an earlier run programmed peer 2 (still listed) and peer 50 (gone since)
    await (await started()).reconcile([lease(2), lease(50)], 'start', true);
  });
  afterEach(() => kernel.uninstall());

  const state = () => ({
    neigh: kernel.neigh().filter((n) => n.dev === 'flannel.1').map((n) => `${n.dst} ${n.lladdr}`).sort(),
    fdb: kernel.fdb().filter((f) => f.dev === 'flannel.1').map((f) => `${f.mac} ${f.dst}`).sort(),
    routes: kernel.routesIn().filter((r) => r.dev === 'flannel.1').map((r) => `${r.dst} ${r.gateway}`).sort(),
  });
  const since = (calls: number) => {
    const ran = kernel.calls.slice(calls);
    return {
      reads: ran.filter((c) => !c.argv.includes('-batch')).length,
      lines: ran.filter((c) => c.argv.includes('-batch')).flatMap((c) => c.input!.trim().split('\n')).sort(),
    };
  };

  it('two pages: the kernel read once, the listed peer in place untouched, the stale one kept, each page\'s peers added; the full pass then removes the stale one', async () => {
    const net = await started();
    logs.length = 0;
    let calls = kernel.calls.length;
    expect(await net.programEarly!([lease(2), lease(3)], 'start')).toBe(3);
    const first = since(calls);
    expect(first.reads).toBeGreaterThan(0);
    expect(first.lines).toEqual([
      'fdb replace 0a:00:00:00:00:03 dst 192.168.88.3 dev flannel.1 self permanent',
      'neigh replace 10.88.3.0 lladdr 0a:00:00:00:00:03 dev flannel.1 nud permanent',
      'route replace 10.88.3.0/24 via 10.88.3.0 dev flannel.1 onlink',
    ]);
    calls = kernel.calls.length;
    expect(await net.programEarly!([lease(4), lease(5)], 'start')).toBe(6);
    const second = since(calls);
    expect(second.reads).toBe(0); // planned against the first reading
    expect(second.lines.filter((l) => !l.includes('10.88.4.0') && !l.includes('10.88.5.0') && !l.includes(':04 ') && !l.includes(':05 '))).toEqual([]);
    expect(second.lines).toHaveLength(6);
    expect(state().routes).toEqual(['10.88.2.0/24 10.88.2.0', '10.88.3.0/24 10.88.3.0', '10.88.4.0/24 10.88.4.0', '10.88.5.0/24 10.88.5.0', '10.88.50.0/24 10.88.50.0']);
    expect(state().fdb).toContain('0a:00:00:00:00:32 192.168.88.50');
    expect(logs).toEqual([]); // the daemon logs one summary
    expect(net.programmedInFull()).toBe(false); // the full pass decides

    calls = kernel.calls.length;
    const [st] = await net.reconcile([2, 3, 4, 5].map(lease), 'start', true);
    expect(st).toMatchObject({ up: true, wanted: 4, failed: [], staleLeft: 0 });
    const full = since(calls);
    expect(full.reads).toBeGreaterThan(0); // it compares with the kernel again
    expect(full.lines).toEqual(['fdb del 0a:00:00:00:00:32 dst 192.168.88.50 dev flannel.1 self', 'neigh del 10.88.50.0 dev flannel.1', 'route del 10.88.50.0/24 dev flannel.1']);
    expect(state()).toEqual({
      neigh: [2, 3, 4, 5].map((n) => `10.88.${n}.0 0a:00:00:00:00:0${n}`),
      fdb: [2, 3, 4, 5].map((n) => `0a:00:00:00:00:0${n} 192.168.88.${n}`),
      routes: [2, 3, 4, 5].map((n) => `10.88.${n}.0/24 10.88.${n}.0`),
    });
    expect(net.programmedInFull()).toBe(true);
  });

  it('the reading is dropped by the full pass: a later call reads the kernel again', async () => {
    const net = await started();
    await net.programEarly!([lease(3)], 'start');
    await net.reconcile([lease(2), lease(3)], 'start', true);
    const calls = kernel.calls.length;
    expect(await net.programEarly!([lease(3)], 'again')).toBe(0); // in place, as the new reading shows
    expect(since(calls).reads).toBeGreaterThan(0);
  });

  it('a VTEP that is down is skipped (the full pass brings it up); a refused change is not counted and does not throw', async () => {
    const net = await started();
    kernel.links().get('flannel.1')!.up = false;
    let calls = kernel.calls.length;
    expect(await net.programEarly!([lease(3)], 'start')).toBe(0);
    expect(since(calls).lines).toEqual([]);
    expect(await net.programEarly!([lease(4)], 'start')).toBe(0);
    await net.reconcile([2, 3, 4].map(lease), 'start', true);
    expect(kernel.links().get('flannel.1')!.up).toBe(true);

    const other = await started();
    kernel.failures.push({ match: '10.88.7.0/24', msg: 'Error: Nexthop has invalid gateway.' });
    calls = kernel.calls.length;
    expect(await other.programEarly!([lease(6), lease(7)], 'start')).toBe(5); // 6: three; 7: neighbour and FDB, not its route
    expect(since(calls).lines).toHaveLength(6);
  });
});
