// Drift repaired from the kernel's notifications (kernel-watch.ts, drift.ts),
// on the fake kernel, whose monitors report each change as iproute2 prints
// it: entries changed by hand are put back by a changes pass that reads
// nothing; the events of our own commands cause no command; a monitor that
// ends is reported, and a full pass asked for once it runs again.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IP, Prefix } from '../../../../../src/net/ip';
import type { Lease } from '../../../../../src/flannel/lease';
import { Reporter } from '../../../../../src/flannel/log';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import { VxlanNetwork } from '../../../../../src/flannel/backend/vxlan/network';
import { HostGwNetwork } from '../../../../../src/flannel/backend/host-gw/network';
import { FakeKernel } from '../../../../support/fake-kernel';

const CFG = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}');
const ext = { dev: 'eth0', localIP: IP.parse('192.168.88.1')!, publicIP: IP.parse('192.168.88.1')!, mtu: 1500, subnets: [] };
const hex = (n: number) => n.toString(16).padStart(2, '0');
const lease = (n: number): Lease => ({
  subnet: Prefix.parse(`10.88.${n}.0/24`)!,
  attrs: { backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:${hex(n)}`, publicIP: IP.parse(`192.168.88.${n}`)! },
});
const NOTHING = { removed: [], added: [] };

describe('VxlanNetwork: drift from the kernel\'s notifications', () => {
  let kernel: FakeKernel;
  let net: VxlanNetwork;
  let asked: { changed: string[]; resync: string[]; watching: [boolean, string][] };
  const leases = Array.from({ length: 10 }, (_, i) => lease(i + 2));
  beforeEach(async () => {
    kernel = FakeKernel.withUnderlay().install();
    asked = { changed: [], resync: [], watching: [] };
    net = new VxlanNetwork(CFG, ext, {
      log: () => {},
      problems: new Reporter(() => {}),
      resync: (why) => asked.resync.push(why),
      changed: (why) => asked.changed.push(why),
      watching: (up, why) => asked.watching.push([up, why]),
    });
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')! }, await net.leaseAttrs(undefined));
    await net.setUp();
    net.watchKernel();
    await net.reconcile(leases, 'start', true);
  });
  afterEach(() => {
    net.stop();
    kernel.uninstall();
  });

  const state = () => ({
    neigh: kernel.neigh().filter((n) => n.dev === 'flannel.1').map((n) => `${n.dst} ${n.lladdr}`).sort(),
    fdb: kernel.fdb().filter((f) => f.dev === 'flannel.1').map((f) => `${f.mac} ${f.dst}`).sort(),
    routes: kernel.routesIn().filter((r) => r.dev === 'flannel.1').map((r) => `${r.dst} ${r.gateway}`).sort(),
  });
  /** The batch lines a changes pass with no lease change ran. */
  const kernelOnlyPass = async () => {
    const from = kernel.calls.length;
    const [st] = (await net.reconcileChanges(NOTHING, 'kernel'))!;
    const ran = kernel.calls.slice(from);
    return { st, ran, lines: ran.flatMap((c) => c.input?.trim().split('\n') ?? []).sort() };
  };

  it('watches flannel.1\'s family and its FDB; our own commands\' events change nothing', async () => {
    expect(kernel.running().map((m) => m.argv.join(' '))).toEqual(['ip -4 -oneline monitor label neigh route', 'bridge monitor fdb']);
    expect(asked.changed.length).toBe(30); // the start's 30 entries, each reported
    const { ran } = await kernelOnlyPass();
    expect(ran).toEqual([]); // nothing read, nothing run
  });

  it('entries deleted or changed by hand are put back, entries no lease explains removed, by one pass that reads nothing', async () => {
    const programmed = state();
    await kernelOnlyPass(); // the start's events
    asked.changed.length = 0;
    kernel.byHand(['ip', 'route', 'del', '10.88.3.0/24', 'dev', 'flannel.1']);
    kernel.byHand(['ip', 'neigh', 'replace', '10.88.4.0', 'lladdr', '0a:00:00:00:99:99', 'dev', 'flannel.1', 'nud', 'permanent']);
    kernel.byHand(['bridge', 'fdb', 'del', '0a:00:00:00:00:05', 'dev', 'flannel.1', 'self']);
    kernel.byHand(['bridge', 'fdb', 'replace', '0a:00:00:00:00:06', 'dst', '192.168.88.66', 'dev', 'flannel.1', 'self', 'permanent']);
    kernel.byHand(['ip', 'neigh', 'del', '10.88.7.0', 'dev', 'flannel.1']);
    kernel.byHand(['ip', 'route', 'replace', '10.88.200.0/24', 'via', '10.88.200.0', 'dev', 'flannel.1', 'onlink']);
    kernel.byHand(['ip', 'route', 'replace', '10.77.0.0/16', 'via', '192.168.88.254', 'dev', 'eth0']); // not ours: left alone
    expect(asked.changed).toHaveLength(7 - 1); // the eth0 route is not about the VTEP
    const { st, ran, lines } = await kernelOnlyPass();
    expect(ran.every((c) => c.argv.includes('-batch'))).toBe(true); // no listing
    expect(lines).toEqual([
      'fdb replace 0a:00:00:00:00:05 dst 192.168.88.5 dev flannel.1 self permanent',
      'fdb replace 0a:00:00:00:00:06 dst 192.168.88.6 dev flannel.1 self permanent',
      'neigh replace 10.88.4.0 lladdr 0a:00:00:00:00:04 dev flannel.1 nud permanent',
      'neigh replace 10.88.7.0 lladdr 0a:00:00:00:00:07 dev flannel.1 nud permanent',
      'route del 10.88.200.0/24 dev flannel.1',
      'route replace 10.88.3.0/24 via 10.88.3.0 dev flannel.1 onlink',
    ]);
    expect(st).toMatchObject({ up: true, wanted: 10, failed: [] });
    expect(state()).toEqual(programmed);
    expect(kernel.routesIn().some((r) => r.dst === '10.77.0.0/16')).toBe(true);
    // the repairs' own events: nothing more
    expect((await kernelOnlyPass()).ran).toEqual([]);
    expect(asked.resync).toEqual([]);
  });

  it('a change by hand that agrees with the leases asks for no command; a lease change and a repair share one pass', async () => {
    await kernelOnlyPass();
    kernel.byHand(['ip', 'route', 'replace', '10.88.8.0/24', 'via', '10.88.8.0', 'dev', 'flannel.1', 'onlink']);
    expect((await kernelOnlyPass()).ran).toEqual([]);
    kernel.byHand(['ip', 'route', 'del', '10.88.9.0/24', 'dev', 'flannel.1']);
    const from = kernel.calls.length;
    await net.reconcileChanges({ removed: [leases[0]], added: [] }, 'lease 10.88.2.0/24 deleted');
    const lines = kernel.calls.slice(from).flatMap((c) => c.input!.trim().split('\n'));
    expect(lines.filter((l) => l.startsWith('route')).sort()).toEqual(['route del 10.88.2.0/24 dev flannel.1', 'route replace 10.88.9.0/24 via 10.88.9.0 dev flannel.1 onlink']);
  });

  it('the VTEP deleted by hand: the repair fails on the missing device and a full pass is asked for (it makes the VTEP again)', async () => {
    await kernelOnlyPass();
    kernel.byHand(['ip', 'link', 'del', 'dev', 'flannel.1']);
    await kernelOnlyPass();
    expect(asked.resync).toEqual(['flannel.1: some changes were refused']);
    await net.reconcile(leases, 'resync', true);
    expect(state().routes).toHaveLength(10);
  });

  it('a monitor that ends is reported; once it runs again a full pass is asked for (events were missed meanwhile)', async () => {
    const [ip] = kernel.running();
    kernel.endMonitor(ip);
    expect(asked.watching).toEqual([[false, 'ip monitor exited (SIGKILL); starting it again in 1 s']]);
    // the monitor's own restart is KeptMonitor's (its test); here the owner's side of it
    ip.handlers.started();
    expect(asked.resync).toEqual(['ip monitor running again']);
    expect(asked.watching.at(-1)).toEqual([true, 'ip monitor running again']);
  });
});

describe('HostGwNetwork: drift from the kernel\'s notifications', () => {
  const HG = parseNetworkConfig('{"Network":"10.88.0.0/16","Backend":{"Type":"host-gw"}}');
  const hg = (n: number): Lease => ({ subnet: Prefix.parse(`10.88.${n}.0/24`)!, attrs: { backendType: 'host-gw', publicIP: IP.parse(`192.168.88.${n}`)! } });
  let kernel: FakeKernel;
  afterEach(() => kernel.uninstall());

  it('a peer route deleted or changed by hand is put back, one added by hand removed, without reading the routes', async () => {
    kernel = FakeKernel.withUnderlay().install();
    const net = new HostGwNetwork(HG, ext, { log: () => {}, problems: new Reporter(() => {}), resync: () => {}, changed: () => {} });
    net.attach({ subnet: Prefix.parse('10.88.1.0/24')! });
    net.watchKernel();
    await net.reconcile([2, 3, 4].map(hg), 'start', true);
    expect(kernel.running().map((m) => m.argv.join(' '))).toEqual(['ip -4 -oneline monitor label route']);
    await net.reconcileChanges(NOTHING, 'echo');
    kernel.byHand(['ip', 'route', 'del', '10.88.3.0/24', 'dev', 'eth0']);
    kernel.byHand(['ip', 'route', 'replace', '10.88.4.0/24', 'via', '192.168.88.44', 'dev', 'eth0']);
    kernel.byHand(['ip', 'route', 'replace', '10.88.99.0/24', 'via', '192.168.88.99', 'dev', 'eth0']);
    const from = kernel.calls.length;
    await net.reconcileChanges(NOTHING, 'kernel');
    const ran = kernel.calls.slice(from);
    expect(ran.map((c) => c.argv.join(' '))).toEqual(['ip -force -batch -']);
    expect(ran[0].input!.trim().split('\n').sort()).toEqual([
      'route del 10.88.4.0/24 via 192.168.88.44 dev eth0',
      'route del 10.88.99.0/24 via 192.168.88.99 dev eth0',
      'route replace 10.88.3.0/24 via 192.168.88.3 dev eth0',
      'route replace 10.88.4.0/24 via 192.168.88.4 dev eth0',
    ]);
    expect(kernel.routesIn().filter((r) => r.dev === 'eth0' && r.gateway).map((r) => `${r.dst} ${r.gateway}`).sort()).toEqual([
      '10.88.2.0/24 192.168.88.2', '10.88.3.0/24 192.168.88.3', '10.88.4.0/24 192.168.88.4',
    ]);
    const again = kernel.calls.length;
    await net.reconcileChanges(NOTHING, 'echo');
    expect(kernel.calls.slice(again)).toEqual([]);
    net.stop();
  });
});
