// HostGwNetwork.programEarly on the fake kernel: at start-up, while the list
// of leases is still read in pages, each page's routes are put in place
// against one reading of the routes, none is removed, and the full pass
// after the list reads them again and removes what no lease asks for.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import type { Lease } from '../../../../../src/flannel/lease';
import { Reporter } from '../../../../../src/flannel/log';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import type { Backend } from '../../../../../src/flannel/backend/backend';
import { HostGwNetwork } from '../../../../../src/flannel/backend/host-gw/network';
import { FakeKernel } from '../../../../support/fake-kernel';

const CFG = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"host-gw"}}');
const ext = { dev: 'eth0', localIP: IP.parse('192.168.88.1')!, publicIP: IP.parse('192.168.88.1')!, mtu: 1500, subnets: [Prefix.parse('192.168.88.0/24')!] };
const lease = (n: number, host = n): Lease => ({ subnet: Prefix.parse(`10.88.${n}.0/24`)!, attrs: { backendType: 'host-gw', publicIP: IP.parse(`192.168.88.${host}`)! } });

describe('HostGwNetwork.programEarly', () => {
  let kernel: FakeKernel;
  let logs: string[];
  const started = (): Backend => {
    const net = new HostGwNetwork(CFG, ext, { log: (m) => logs.push(m), problems: new Reporter((m) => logs.push(m)), resync: () => {} });
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')! });
    return net;
  };
  beforeEach(async () => {
    kernel = new FakeKernel();
    kernel.links().set('eth0', FakeKernel.link({ name: 'eth0', kind: 'veth', mtu: 1500, mac: '52:54:00:00:00:01', addrs: [{ family: 'inet', local: '192.168.88.1', prefixlen: 24 }] }));
    kernel.install();
    logs = [];
    // an earlier run routed peer 2 (still listed), peer 3 via the address it had then, and peer 50 (gone since)
    await started().reconcile([lease(2), lease(3, 33), lease(50)], 'start', true);
  });
  afterEach(() => kernel.uninstall());

  const routes = () => kernel.routesIn().filter((r) => r.dev === 'eth0' && r.dst.startsWith('10.88.')).map((r) => `${r.dst} via ${r.gateway}`).sort();
  const since = (calls: number) => {
    const ran = kernel.calls.slice(calls);
    return {
      reads: ran.filter((c) => !c.argv.includes('-batch')).length,
      lines: ran.filter((c) => c.argv.includes('-batch')).flatMap((c) => c.input!.trim().split('\n')),
    };
  };

  it('two pages: the routes read once, a right route untouched, a wrong one put right, the stale one kept; the full pass then removes it', async () => {
    const net = started();
    logs.length = 0;
    let calls = kernel.calls.length;
    expect(await net.programEarly!([lease(2), lease(3), lease(4)], 'start')).toBe(3);
    const first = since(calls);
    expect(first.reads).toBe(1);
    expect(first.lines).toEqual([
      'route del 10.88.3.0/24 via 192.168.88.33 dev eth0',
      'route replace 10.88.3.0/24 via 192.168.88.3 dev eth0',
      'route replace 10.88.4.0/24 via 192.168.88.4 dev eth0',
    ]);
    calls = kernel.calls.length;
    expect(await net.programEarly!([lease(5)], 'start')).toBe(1);
    expect(since(calls)).toEqual({ reads: 0, lines: ['route replace 10.88.5.0/24 via 192.168.88.5 dev eth0'] });
    expect(routes()).toEqual([2, 3, 4, 5, 50].map((n) => `10.88.${n}.0/24 via 192.168.88.${n}`));
    expect(logs).toEqual([]); // the daemon logs one summary
    expect(net.programmedInFull()).toBe(false); // the full pass decides

    calls = kernel.calls.length;
    const [st] = await net.reconcile([2, 3, 4, 5].map((n) => lease(n)), 'start', true);
    expect(st).toMatchObject({ up: true, wanted: 4, failed: [], staleLeft: 0 });
    expect(since(calls)).toEqual({ reads: 1, lines: ['route del 10.88.50.0/24 via 192.168.88.50 dev eth0'] });
    expect(routes()).toEqual([2, 3, 4, 5].map((n) => `10.88.${n}.0/24 via 192.168.88.${n}`));
    expect(net.programmedInFull()).toBe(true);
  });

  it('the reading is dropped by the full pass; a refused route is not counted and does not throw', async () => {
    const net = started();
    await net.programEarly!([lease(4)], 'start');
    await net.reconcile([lease(2), lease(3), lease(4)], 'start', true);
    let calls = kernel.calls.length;
    expect(await net.programEarly!([lease(4)], 'again')).toBe(0); // in place, as the new reading shows
    expect(since(calls).reads).toBe(1);

    const other = started();
    kernel.failures.push({ match: '10.88.7.0/24', msg: 'Error: Nexthop has invalid gateway.' });
    calls = kernel.calls.length;
    expect(await other.programEarly!([lease(6), lease(7)], 'start')).toBe(1);
    expect(since(calls).lines).toHaveLength(2);
  });
});
