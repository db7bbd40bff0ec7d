// The daemon against an in-memory store with etcd's semantics (through the
// store manager, as in production) and the fake kernel (test/support/fake-kernel.ts:
// links, neighbours, FDB, routes) with a fake firewall: every command the
// daemon runs is answered by the model, and the tests check the state it ends in. Nothing here touches
// the machine; for that reason the overlays here are IPv4 only (an IPv6
// overlay makes the daemon set net.ipv6.conf.all.forwarding of its own
// namespace, the machine's): flannel-ipv6.test.ts runs those in namespaces.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon, DaemonOptions } from '../../../../src/flannel/daemon/daemon';
import { DaemonMetrics } from '../../../../src/flannel/daemon/metrics';
import { Prefix } from '../../../../src/net/ip';
import { StoreManager } from '../../../../src/flannel/store/store-manager';
import type { HeldLease, SubnetManager } from '../../../../src/flannel/manager';
import { VxlanNetwork } from '../../../../src/flannel/backend/vxlan/network';
import { FakeFirewall } from '../../../support/fake-firewall';
import { FakeKernel, type FakeLink } from '../../../support/fake-kernel';
import { MemStore } from '../../../support/mem-store';
import { waitFor } from '../../../support/wait';

/** The node: eth0 on the underlay; the daemon's `ip`/`bridge` commands change the fake kernel, its firewall commands the fake firewall. */
function fakeNode(): FakeKernel {
  const kernel = FakeKernel.withUnderlay();
  kernel.firewall = new FakeFirewall();
  return kernel.install();
}

/** A VXLAN device as an earlier run left it. */
const vtep = (name: string, id: number, mac: string, addrs: FakeLink['addrs'] = []): FakeLink =>
  FakeKernel.link({ name, mtu: 1450, mac, addrs, vxlan: { id, local: '192.168.88.1', link: 'eth0', port: 8472, learning: false } });

/** Whether a peer's neighbour, FDB entry and route are all in place on the VTEP. */
function programmed(kernel: FakeKernel, subnet: string, mac: string, publicIP: string, dev = 'flannel.1'): boolean {
  const vtepIP = subnet.split('/')[0];
  return (
    kernel.neigh().some((n) => n.dev === dev && n.dst === vtepIP && n.lladdr === mac) &&
    kernel.fdb().some((f) => f.dev === dev && f.mac === mac && f.dst === publicIP) &&
    kernel.routesIn().some((r) => r.dev === dev && r.dst === subnet && r.gateway === vtepIP)
  );
}

/** Every `ip` batch line the daemon sent, as text. */
const ipLines = (kernel: FakeKernel) => kernel.ipLines().map((l) => l.line);

const peerValue = (n: number, mac = `0a:00:00:00:00:${n.toString(16).padStart(2, '0')}`) =>
  `{"PublicIP":"192.168.88.${n}","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${mac}"}}`;
/** The daemon's timers (reconciles, renewals, resyncs) on a clock the test moves: "a dozen reconciles" is exact, however busy the machine. */
const fakeClock = () => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
const peerMac = (n: number) => `0a:00:00:00:00:${n.toString(16).padStart(2, '0')}`;

describe('the daemon (in-memory store, model of the node)', () => {
  let node: FakeKernel;
  let store: MemStore;
  let dir: string;
  let logs: string[];
  let daemons: Daemon[];

  beforeEach(() => {
    node = fakeNode();
    store = new MemStore();
    dir = mkdtempSync(join(tmpdir(), 'flannel-daemon-'));
    logs = [];
    daemons = [];
  });
  afterEach(async () => {
    vi.useRealTimers();
    for (const d of daemons) await d.stop();
    node.uninstall();
    rmSync(dir, { recursive: true, force: true });
  });

  const daemon = ({ leaseTtlS = 3600, manager, ...o }: Partial<DaemonOptions> & { leaseTtlS?: number; manager?: SubnetManager } = {}): Daemon => {
    const d = new Daemon(manager ?? new StoreManager(store, { leaseTtlS }), {
      iface: 'eth0',
      subnetFile: join(dir, 'subnet.env'),
      reconcileMs: 60_000,
      traffic: { ipMasq: false, randomFully: true, forwardRules: false, resyncMs: 60_000 },
      releaseOnExit: false,
      log: (msg) => logs.push(msg),
      ...o,
    });
    daemons.push(d);
    return d;
  };

  it('programs the peers in the store and writes subnet.env', async () => {
    store.put('10.88.2.0-24', peerValue(2), 600);
    await daemon().start();
    expect(programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2')).toBe(true);
    expect(readFileSync(join(dir, 'subnet.env'), 'utf8')).toMatch(/^FLANNEL_NETWORK=10.88.0.0\/16\nFLANNEL_SUBNET=10.88.\d+.1\/24\n/);
  });

  it('restarted while etcd stops answering right after the lease was taken: the peers stay as programmed, never emptied', async () => {
    // the node as the previous run left it: VTEP, and two peers programmed
    node.links().set('flannel.1', vtep('flannel.1', 1, '0a:00:00:00:00:01', [{ family: 'inet', local: '10.88.1.0', prefixlen: 32 }]));
    for (const n of [2, 3]) {
      node.neigh().push({ dev: 'flannel.1', dst: `10.88.${n}.0`, lladdr: peerMac(n) });
      node.fdb().push({ dev: 'flannel.1', mac: peerMac(n), dst: `192.168.88.${n}` });
      node.routesIn().push({ dev: 'flannel.1', dst: `10.88.${n}.0/24`, gateway: `10.88.${n}.0`, onlink: true });
      store.put(`10.88.${n}.0-24`, peerValue(n), 600);
    }
    store.put('10.88.1.0-24', peerValue(1), 600);
    store.after = (call) => {
      if (call.startsWith('renew 10.88.1.0-24')) store.down = true; // our lease is renewed, then etcd is gone
    };
    await daemon().start();
    expect(programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2')).toBe(true);
    expect(programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3')).toBe(true);
    expect(logs.join('\n')).toMatch(/etcd mem unreachable: connection refused; keeping the overlay as programmed/);
    expect(logs.join('\n')).not.toMatch(/removed/);
  });

  it('a lease advertising our VTEP MAC is never programmed, and said so once', async () => {
    store.put('10.88.1.0-24', peerValue(1), 600); // ours: VTEP MAC 0a:00:00:00:00:01
    store.put('10.88.2.0-24', peerValue(2), 600);
    store.put('10.88.9.0-24', peerValue(9, peerMac(1)), 600); // "192.168.88.9" claims our MAC
    fakeClock();
    await daemon({ reconcileMs: 20 }).start();
    await vi.advanceTimersByTimeAsync(200); // ten reconciles
    expect(programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2')).toBe(true);
    expect(node.fdb().filter((f) => f.mac === peerMac(1))).toEqual([]);
    expect(node.routesIn().map((r) => r.dst)).not.toContain('10.88.9.0/24');
    expect(logs.filter((l) => l.includes('10.88.9.0/24'))).toEqual(["ignoring lease 10.88.9.0/24: BackendData.VtepMAC 0a:00:00:00:00:01 is this node's own VTEP MAC"]);
  });

  it('after a config change (VNI, families, Network), VTEPs and routes of the earlier config are removed at start', async () => {
    node.links().set('flannel.7', vtep('flannel.7', 7, '0a:00:00:00:07:01')); // VNI 7 before
    node.links().set('flannel-v6.7', vtep('flannel-v6.7', 7, '0a:00:00:00:07:06')); // IPv6 was on
    node.links().set('flannel.1', vtep('flannel.1', 1, '0a:00:00:00:00:01', [{ family: 'inet', local: '10.88.1.0', prefixlen: 32 }]));
    node.links().set('flannel.9', FakeKernel.link({ name: 'flannel.9', kind: 'bridge', mtu: 1450, mac: '0a:00:00:00:09:01' })); // not a VTEP: someone else's
    node.routesIn().push({ dev: 'flannel.7', dst: '10.88.4.0/24', gateway: '10.88.4.0', onlink: true });
    node.routesIn().push({ dev: 'flannel.1', dst: '10.77.5.0/24', gateway: '10.77.5.0', onlink: true }); // the Network was 10.77.0.0/16
    store.put('10.88.1.0-24', peerValue(1), 600);
    store.put('10.88.2.0-24', peerValue(2), 600);
    await daemon().start();
    expect([...node.links().keys()].sort()).toEqual(['eth0', 'flannel.1', 'flannel.9']);
    expect(node.routesIn().map((r) => `${r.dst} ${r.dev}`)).toEqual(['10.88.2.0/24 flannel.1']);
    expect(logs.join('\n')).toMatch(/removed flannel.7 \(VNI 7\), a VTEP of an earlier network config/);
  });

  it('keys and values from the store cannot forge log lines', async () => {
    const forged = '\n2030-01-01T00:00:00.000Z vxlan-flannel: FORGED';
    store.put(`10.88.7.0-24${forged}`, peerValue(7), 600);
    store.put('10.88.8.0-24', `nonsense${forged}`, 600); // not JSON: V8 quotes the text, newline and all, in its message
    store.put('10.88.9.0-24', peerValue(9).replace('"vxlan"', JSON.stringify(`vxlan${forged}`)), 600);
    await daemon().start();
    for (const l of logs) expect(l).not.toMatch(/[\n\r\u2028\u2029]/);
    expect(logs.filter((l) => l.includes('FORGED'))).toHaveLength(2);
    expect(logs.find((l) => l.includes('10.88.8.0-24'))).toMatch(/lease is not JSON: .*"nonsense\\u000a2/);
    expect(logs).toContain(`ignoring ${JSON.stringify(`10.88.7.0-24${forged}`)}: not a subnet key`);
  });

  it('a failure met on every reconcile is logged when it appears and when it ends, not on each pass', async () => {
    store.put('10.88.2.0-24', peerValue(2), 600);
    node.failures.push({ match: 'route replace 10.88.2.0/24', msg: 'Error: Nexthop has invalid gateway.' });
    fakeClock();
    await daemon({ reconcileMs: 20 }).start();
    await vi.advanceTimersByTimeAsync(300); // fifteen reconciles
    expect(ipLines(node).filter((c) => c.includes('route replace 10.88.2.0/24')).length).toBeGreaterThan(5);
    expect(logs.filter((l) => l.includes('reconcile failed'))).toEqual([
      'reconcile failed: flannel.1 peers: ip route replace 10.88.2.0/24 via 10.88.2.0 dev flannel.1 onlink: Error: Nexthop has invalid gateway. (1 of 1 peers not programmed: 10.88.2.0/24); retrying on each reconcile',
    ]);
    node.failures.length = 0;
    await vi.advanceTimersByTimeAsync(100); // five more
    expect(programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2')).toBe(true);
    expect(logs.filter((l) => l.includes('programmed again'))).toEqual(['flannel.1: every peer is programmed again']);
    // the watch's reconnect attempts while etcd is away: each message once, not per attempt
    for (let i = 0; i < 4; i++) store.watchError(new Error(i % 2 ? 'The etcd watch stream was unexpectedly ended' : 'etcd mem unreachable'));
    expect(logs.filter((l) => l.startsWith('watch: '))).toEqual(['watch: etcd mem unreachable', 'watch: The etcd watch stream was unexpectedly ended']);
  });

  // (renewal timing, retries and reservations: flannel-store-manager.test.ts, with fake timers)
  it('a renewal refused (another node holds our subnet now) makes the reconcile see the conflict: each logged once, not on every retry', async () => {
    fakeClock();
    store.put('10.88.1.0-24', peerValue(1), 600);
    const d = daemon({ leaseTtlS: 1, reconcileMs: 50 });
    await d.start();
    store.put('10.88.1.0-24', peerValue(9), 600); // 192.168.88.9 took it
    await vi.advanceTimersByTimeAsync(2600); // renewals retried every second, reconciles every 50 ms
    expect(store.calls.filter((c) => c.startsWith('renew 10.88.1.0-24')).length).toBeGreaterThanOrEqual(3);
    expect(logs.filter((l) => l.startsWith('cannot renew'))).toEqual(["cannot renew lease 10.88.1.0/24: it now holds another node's data"]);
    expect(logs.filter((l) => l.startsWith('CONFLICT'))).toHaveLength(1);
  });

  it('--release-on-exit: stopped while the lease is being taken, the lease is given back, not left to expire', async () => {
    store.createDelayMs = 200; // SIGTERM arrives while etcd writes our new lease
    const d = daemon({ releaseOnExit: true });
    const started = d.start().then(() => 'running', (err: Error) => err.message);
    await waitFor('the lease creation to be under way', () => store.calls.some((c) => c.startsWith('create')));
    await d.stop();
    expect(await started).toBe('stopped while starting');
    expect([...store.entries.keys()]).toEqual([]);
    expect(store.calls.filter((c) => c.startsWith('remove'))).toHaveLength(1);
    expect(node.links().has('flannel.1')).toBe(false); // and start() went no further
    expect(logs.join('\n')).toMatch(/released lease 10.88.\d+.0\/24/);
  });

  it('--release-on-exit: stopped while waiting to retry (etcd down), nothing is held and the stop is immediate', async () => {
    store.down = true;
    fakeClock();
    const d = daemon({ releaseOnExit: true });
    const started = d.start().catch((err: Error) => err.message);
    await vi.waitFor(() => expect(logs.some((l) => l.startsWith('cannot read the network config'))).toBe(true));
    const t0 = Date.now();
    await d.stop(); // the clock stands still: a stop that waited for the retry timer would never return
    expect(Date.now()).toBe(t0);
    expect(await started).toBe('stopped');
    expect(store.calls.filter((c) => c.startsWith('remove'))).toEqual([]);
  });

  it('a peer joining just before the watch starts (after the daemon\'s last list) is programmed at once, not at the next periodic reconcile', async () => {
    store.put('10.88.2.0-24', peerValue(2), 600);
    store.beforeWatch = () => store.put('10.88.3.0-24', peerValue(3), 600);
    fakeClock();
    await daemon().start(); // periodic reconcile: every 60 s
    await vi.advanceTimersByTimeAsync(1000); // the watch's replay, not the periodic reconcile
    expect(programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3')).toBe(true);
    expect(programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2')).toBe(true);
  });

  it('Backend.MTU is the underlay\'s: 1400 makes a VTEP of 1350, and FLANNEL_MTU follows', async () => {
    store.config = '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","MTU":1400}}';
    await daemon().start();
    expect(node.links().get('flannel.1')?.mtu).toBe(1350);
    expect(readFileSync(join(dir, 'subnet.env'), 'utf8')).toMatch(/\nFLANNEL_MTU=1350\n/);
  });

  it('GBP and Learning make the VTEP with gbp and learning; a kernel that refuses is named with the field', async () => {
    store.config = '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","GBP":true,"Learning":true}}';
    await daemon().start();
    expect(node.links().get('flannel.1')?.vxlan).toMatchObject({ learning: true, gbp: true });
    await daemons.pop()!.stop();
    node.links().delete('flannel.1');
    node.failures.push({ match: ' gbp', msg: 'Error: RTNETLINK answers: Operation not supported' });
    await expect(daemon().start()).rejects.toThrow(
      /^cannot set up the overlay: VTEP flannel.1: .*Operation not supported \(network config fields "Backend.GBP" and "Backend.Learning" ask for a VXLAN feature: does this kernel support it\?\)$/,
    );
  });

  it('DirectRouting: a peer on eth0\'s subnet gets a plain route via its address (no neighbour, no FDB entry); another peer stays on VXLAN; off again, the direct route goes', async () => {
    store.config = '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan","DirectRouting":true}}';
    store.put('10.88.2.0-24', peerValue(2), 600); // 192.168.88.2: on eth0's 192.168.88.0/24
    store.put('10.88.3.0-24', peerValue(3).replace('192.168.88.3', '192.168.99.3'), 600); // another underlay subnet
    await daemon().start();
    expect(node.routesIn()).toContainEqual({ dev: 'eth0', dst: '10.88.2.0/24', gateway: '192.168.88.2' });
    expect(node.neigh().map((n) => n.dst)).toEqual(['10.88.3.0']);
    expect(node.fdb().map((f) => f.mac)).toEqual([peerMac(3)]);
    expect(programmed(node, '10.88.3.0/24', peerMac(3), '192.168.99.3')).toBe(true);
    expect(logs.join('\n')).toMatch(/DirectRouting \(peers on 192.168.88.0\/24 routed directly\)/);
    // restarted with DirectRouting off: the direct route is found and replaced by VXLAN
    await daemons.pop()!.stop();
    store.config = '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}';
    await daemon().start();
    expect(node.routesIn().filter((r) => r.dev === 'eth0')).toEqual([]);
    expect(programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2')).toBe(true);
  });

  it('--ip-masq and forward rules: put in place at start (FLANNEL_IPMASQ=true), put back on resync, kept on a plain stop, removed with --release-on-exit', async () => {
    const fw = node.firewall!;
    const traffic = { ipMasq: true, randomFully: true, forwardRules: true, resyncMs: 30 };
    fakeClock();
    const d = daemon({ traffic });
    await d.start();
    const subnet = /FLANNEL_SUBNET=10\.88\.(\d+)\.1/.exec(readFileSync(join(dir, 'subnet.env'), 'utf8'))![1];
    expect(readFileSync(join(dir, 'subnet.env'), 'utf8')).toMatch(/\nFLANNEL_IPMASQ=true\n$/);
    const rules = fw.rules(4);
    expect(rules).toContain('-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG');
    expect(rules).toContain(`-A FLANNEL-POSTRTG -s 10.88.${subnet}.0/24 -d 10.88.0.0/16 -m comment --comment "flanneld masq" -j RETURN`);
    expect(rules).toContain('-A FLANNEL-POSTRTG -s 10.88.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully');
    expect(rules).toContain('-A FLANNEL-FWD -d 10.88.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT');
    expect(fw.rules(6)).toEqual([]); // an IPv4 overlay: no IPv6 rules
    expect(logs).toContain('keeping IPv4 masquerade and forward rules (iptables), checked every 0.03 s');
    // nothing to do while all is in place: one listing per table, no restore
    const restores = () => fw.calls.filter((c) => c.startsWith('iptables-restore')).length;
    const before = restores();
    const listings = fw.calls.filter((c) => c === 'iptables-save -t nat').length;
    await vi.advanceTimersByTimeAsync(100); // three resyncs
    expect(fw.calls.filter((c) => c === 'iptables-save -t nat').length).toBeGreaterThanOrEqual(listings + 3);
    expect(restores()).toBe(before);
    // a rule deleted by hand comes back at the next resync
    fw.ipt.get('4 filter')!.get('FORWARD')!.length = 0;
    await vi.advanceTimersByTimeAsync(30);
    expect(fw.rules(4)).toContain('-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD');
    expect(logs).toContain('IPv4 forward rules (iptables) had been changed or removed: put back');
    await daemons.pop()!.stop();
    expect(fw.rules(4)).toEqual(rules); // a plain stop leaves them, as flanneld does
    const leaving = daemon({ traffic, releaseOnExit: true });
    await leaving.start();
    await daemons.pop()!.stop();
    expect(fw.rules(4)).toEqual([]);
    expect(logs).toContain('removed our IPv4 masquerade rules (iptables): the node leaves');
  });

  it('at start: the other backend\'s rules of ours go, and so do the kinds the flags no longer ask for; masquerading is not fully random where flanneld would not make it so', async () => {
    const fw = node.firewall!;
    // an earlier run in nftables mode, and one in iptables mode with --ip-masq
    fw.run(['nft', '-f', '-'], 'add table ip flannel-ipv4\nadd chain ip flannel-ipv4 postrtg { type nat hook postrouting priority srcnat; }\n');
    fw.run(['iptables-restore', '-w', '--noflush'], '*nat\n:FLANNEL-POSTRTG - [0:0]\n-A FLANNEL-POSTRTG -s 10.88.0.0/16 -j RETURN\n-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG\nCOMMIT\n');
    fw.iptablesVersion = '1.6.1';
    await daemon({ traffic: { ipMasq: false, randomFully: true, forwardRules: true, resyncMs: 60_000 } }).start();
    expect(fw.nft.size).toBe(0);
    expect(fw.rules(4).filter((r) => r.includes('POSTRTG'))).toEqual([]);
    expect(logs).toEqual(expect.arrayContaining(['removed our IPv4 masquerade rules (nftables): this run uses iptables', 'removed our IPv4 masquerade rules (iptables): not asked for']));
    expect(readFileSync(join(dir, 'subnet.env'), 'utf8')).toMatch(/\nFLANNEL_IPMASQ=false\n$/);
    await daemons.pop()!.stop();
    // EnableNFTables, --ip-masq, an iptables too old for --random-fully: nftables decides by itself
    store.config = '{"Network":"10.88.0.0/16","EnableNFTables":true,"Backend":{"Type":"vxlan"}}';
    fw.nftNoFullyRandom = true;
    await daemon({ traffic: { ipMasq: true, randomFully: true, forwardRules: true, resyncMs: 60_000 } }).start();
    expect([...fw.nft.get('ip flannel-ipv4')!.keys()].sort()).toEqual(['forward', 'postrtg']);
    expect(fw.rules(4).filter((r) => r.includes('FLANNEL'))).toEqual([]);
    expect(logs.join('\n')).toMatch(/masquerading without --random-fully, as flanneld would here: nft -c -f - failed .*Operation not supported/);
    const masq = fw.calls.filter((c) => c.startsWith('nft -f -') && c.includes('masquerade'));
    expect(masq).toHaveLength(1);
    expect(masq[0]).toMatch(/ masquerade comment/);
    expect(masq[0]).not.toMatch(/fully-random/);
  });

  it('a change seen by the watch is applied without reading the kernel\'s tables; the periodic full pass repairs drift', async () => {
    store.put('10.88.2.0-24', peerValue(2), 600);
    await daemon({ reconcileMs: 400 }).start();
    node.calls.length = 0;
    store.put('10.88.3.0-24', peerValue(3), 600);
    await waitFor('the new peer', () => programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3'));
    const shows = () => node.calls.map((c) => c.argv.join(' ')).filter((c) => / show /.test(c));
    expect(shows()).toEqual([]);
    // an entry removed by hand: nothing watches the kernel, the full pass puts it back
    const routes = node.routesIn();
    routes.splice(routes.findIndex((r) => r.dst === '10.88.2.0/24'), 1);
    await waitFor('the route put back', () => programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2'));
    expect(shows().some((c) => c.includes('route show dev flannel.1'))).toBe(true);
    // said as the drift it is; a new peer's entries are "added"
    expect(logs).toContain('route 10.88.2.0/24 via 10.88.2.0: was missing, put back (periodic reconcile)');
    expect(logs.filter((l) => l.startsWith('route 10.88.3.0/24 via 10.88.3.0: added ('))).toHaveLength(1);
  });

  it('-v: 1 logs a line per reconcile pass, 2 also every change the watch reports; 0 neither', async () => {
    store.put('10.88.2.0-24', peerValue(2), 600);
    for (const logDetail of [0, 1, 2]) {
      logs = [];
      const d = daemon({ logDetail });
      await d.start();
      store.put('10.88.3.0-24', peerValue(3), 600);
      await waitFor('the new peer', () => programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3'));
      await waitFor('the pass logged', () => logDetail < 1 || logs.some((l) => /^changes pass \(.*\): 2 of 2 peers programmed, \d+ ms$/.test(l)));
      expect(logs.some((l) => / pass \(/.test(l)), `-v=${logDetail}`).toBe(logDetail >= 1);
      expect(logs.some((l) => /^full pass \(start\): 1 of 1 peers programmed, \d+ ms$/.test(l)), `-v=${logDetail}`).toBe(logDetail >= 1);
      expect(logs.some((l) => /^watch: \S/.test(l)), `-v=${logDetail}`).toBe(logDetail >= 2);
      await d.stop();
      store.del('10.88.3.0-24');
    }
  });

  it('a store\'s change reaches the backend as a delta (the changed lease, old and new), not as the whole list', async () => {
    for (let n = 2; n < 12; n++) store.put(`10.88.${n}.0-24`, peerValue(n), 600);
    await daemon().start();
    const changes = vi.spyOn(VxlanNetwork.prototype, 'reconcileChanges');
    const listed = vi.spyOn(VxlanNetwork.prototype, 'reconcile');
    store.put('10.88.5.0-24', peerValue(5, '0a:00:00:00:05:55'), 600);
    await waitFor('the new MAC', () => programmed(node, '10.88.5.0/24', '0a:00:00:00:05:55', '192.168.88.5'));
    expect(listed).not.toHaveBeenCalled();
    // (the passes after it carry no lease: they take the kernel's reports of its commands)
    const delta = changes.mock.calls.map((c) => c[0]).filter((d) => d.removed.length + d.added.length > 0).at(-1)!;
    expect([delta.removed.map((l) => l.attrs.vtepMAC), delta.added.map((l) => l.attrs.vtepMAC)]).toEqual([[peerMac(5)], ['0a:00:00:00:05:55']]);
    vi.restoreAllMocks();
  });

  it('the picture the deltas keep is the store\'s: with the store unreachable, a full pass programs what the changes left (one changed, one gone, one new)', async () => {
    for (let n = 2; n < 7; n++) store.put(`10.88.${n}.0-24`, peerValue(n), 600);
    await daemon({ reconcileMs: 60_000 }).start();
    const fresh = [7, 8, 9].find((n) => !store.entries.has(`10.88.${n}.0-24`))!; // not the subnet the daemon took
    store.put('10.88.3.0-24', peerValue(3, '0a:00:00:00:03:33'), 600);
    await waitFor('3\'s new MAC', () => programmed(node, '10.88.3.0/24', '0a:00:00:00:03:33', '192.168.88.3'));
    store.del('10.88.4.0-24');
    await waitFor('4 gone', () => !node.routesIn().some((r) => r.dst === '10.88.4.0/24'));
    store.put(`10.88.${fresh}.0-24`, peerValue(fresh), 600);
    await waitFor('the new one programmed', () => programmed(node, `10.88.${fresh}.0/24`, peerMac(fresh), `192.168.88.${fresh}`));
    // a full pass that cannot list: it programs the picture the three deltas left
    const full = vi.spyOn(VxlanNetwork.prototype, 'reconcile');
    store.down = true;
    (daemons[0] as unknown as { loop: { request(why: string, full: boolean): void } }).loop.request('a test', true);
    await waitFor('a full pass', () => full.mock.calls.length > 0);
    const peers = full.mock.calls[0][0]
      .filter((l) => l.attrs.vtepMAC?.startsWith('0a:00:00:00:')) // not ours (a random MAC)
      .map((l) => `${l.subnet} ${l.attrs.vtepMAC}`);
    expect(peers.sort()).toEqual([`10.88.2.0/24 ${peerMac(2)}`, '10.88.3.0/24 0a:00:00:00:03:33', `10.88.5.0/24 ${peerMac(5)}`, `10.88.6.0/24 ${peerMac(6)}`, `10.88.${fresh}.0/24 ${peerMac(fresh)}`].sort());
    vi.restoreAllMocks();
  });

  it('a changes pass checks our lease only when the change is about it: another lease changing costs no look for ours; ours deleted by hand is written again at once', async () => {
    store.put('10.88.2.0-24', peerValue(2), 600);
    const manager = new StoreManager(store, { leaseTtlS: 3600, previous: { subnet: Prefix.parse('10.88.1.0/24')! } });
    let checks = 0;
    const acquire = manager.acquireLease.bind(manager);
    manager.acquireLease = async (...args): Promise<HeldLease> => {
      const held = await acquire(...args);
      const check = held.check.bind(held);
      held.check = (leases) => (checks++, check(leases));
      return held;
    };
    const metrics = new DaemonMetrics();
    const passes = () => Number(/flannel_reconcile_passes_total\{kind="changes",result="ok"\} (\d+)/.exec(metrics.render())?.[1] ?? 0);
    await daemon({ manager, metrics }).start();
    const atStart = checks;
    expect(atStart).toBeGreaterThan(0); // the first (full) pass checks it
    store.put('10.88.3.0-24', peerValue(3), 600);
    await waitFor('peer 3 by a changes pass', () => programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3') && passes() >= 1);
    expect(checks).toBe(atStart);
    store.del('10.88.1.0-24');
    await waitFor('our lease written again', async () => (await store.list()).leases.some((l) => l.subnet?.toString() === '10.88.1.0/24'));
    expect(checks).toBeGreaterThan(atStart);
    expect(logs).toContain('lease 10.88.1.0/24 was gone in the store: written again');
  });

  it('drift is repaired as the kernel reports it, without a full pass; while a monitor is down, full passes every 10 s fill in', async () => {
    store.put('10.88.1.0-24', peerValue(1), 600);
    for (const n of [2, 3]) store.put(`10.88.${n}.0-24`, peerValue(n), 600);
    const metrics = new DaemonMetrics();
    const fullPasses = () => Number(/flannel_reconcile_passes_total\{kind="full",result="ok"\} (\d+)/.exec(metrics.render())?.[1] ?? 0);
    fakeClock();
    await daemon({ reconcileMs: 300_000, metrics }).start();
    const turns = async () => {
      for (let i = 0; i < 5; i++) await vi.advanceTimersByTimeAsync(1).then(() => new Promise((r) => setImmediate(r)));
    };
    await turns();
    expect(logs).toContain('running: 2 of 2 peers programmed; drift repaired as the kernel reports it, a full reconcile every 300 s');
    node.byHand(['ip', 'route', 'del', '10.88.2.0/24', 'dev', 'flannel.1']);
    await turns();
    expect(programmed(node, '10.88.2.0/24', peerMac(2), '192.168.88.2')).toBe(true);
    expect(logs).toContain('route 10.88.2.0/24 via 10.88.2.0: was missing, put back (kernel: route 10.88.2.0/24 deleted)');
    expect(fullPasses()).toBe(1); // the start's
    // the route monitor ends and cannot start again: no event for the next change by hand; a full pass within 10 s finds it
    node.monitorsFail = true;
    const ipMonitor = node.running().find((m) => m.argv[0] === 'ip')!;
    node.endMonitor(ipMonitor);
    expect(logs.at(-1)).toBe('not following the kernel\'s notifications: ip monitor exited (SIGKILL); starting it again in 1 s; a full reconcile every 10 s meanwhile');
    node.byHand(['ip', 'route', 'del', '10.88.3.0/24', 'dev', 'flannel.1']);
    await vi.advanceTimersByTimeAsync(9000); // restarts at 1, 3 and 7 s fail
    await turns();
    expect(programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3')).toBe(false);
    await vi.advanceTimersByTimeAsync(1000);
    await turns();
    expect(programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3')).toBe(true);
    expect(fullPasses()).toBe(2);
    // running again (the restart at 15 s): a full pass for what it missed, and the long period back
    node.monitorsFail = false;
    await vi.advanceTimersByTimeAsync(5000);
    await turns();
    expect(logs).toContain('following the kernel\'s notifications again (ip monitor running again); a full reconcile every 300 s');
    expect(fullPasses()).toBe(3);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(fullPasses()).toBe(3);
  });

  it('a change seen during a full pass is applied right after that pass (by a changes pass), not at the next periodic one', async () => {
    store.put('10.88.1.0-24', peerValue(1), 600); // ours (192.168.88.1): not a random subnet that could be 10.88.3.0/24
    store.put('10.88.2.0-24', peerValue(2), 600);
    fakeClock();
    await daemon({ reconcileMs: 10_000 }).start();
    // the next full pass stops at its first read of the kernel's tables, until released
    let release: (() => void) | undefined;
    node.gate = (argv) => (!release && argv.includes('show') ? new Promise<void>((r) => (release = r)) : undefined);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(release).toBeDefined();
    store.put('10.88.3.0-24', peerValue(3), 600);
    await vi.advanceTimersByTimeAsync(1000); // passes never overlap, so the change waits
    expect(programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3')).toBe(false);
    release!();
    await vi.advanceTimersByTimeAsync(50); // the full pass ends; the changes pass follows at once (the next full one is 10 s away)
    expect(programmed(node, '10.88.3.0/24', peerMac(3), '192.168.88.3')).toBe(true);
    // by the pass the watch asked for, not by a periodic one
    expect(logs.filter((l) => l.includes('10.88.3.0'))).toEqual([
      'neigh 10.88.3.0 → 0a:00:00:00:00:03: added (put 10.88.3.0-24)',
      'fdb 0a:00:00:00:00:03 → 192.168.88.3: added (put 10.88.3.0-24)',
      'route 10.88.3.0/24 via 10.88.3.0: added (put 10.88.3.0-24)',
    ]);
  });

  it('/metrics: peers, changes, passes and this node\'s pod addresses, as the cluster built here has them', async () => {
    const ipam = join(dir, 'networks');
    mkdirSync(join(ipam, 'cbr0'), { recursive: true });
    for (const f of ['10.88.1.2', '10.88.1.3', '10.88.9.7', 'last_reserved_ip.0', 'lock']) writeFileSync(join(ipam, 'cbr0', f), 'x');
    mkdirSync(join(ipam, 'other'));
    writeFileSync(join(ipam, 'other', '10.99.0.2'), 'x'); // another network's reservation: not ours
    const metrics = new DaemonMetrics({ ipamDir: ipam, relists: () => 4 });
    store.put('10.88.2.0-24', peerValue(2), 600);
    store.put('10.88.3.0-24', peerValue(3), 600);
    const d = new Daemon(new StoreManager(store, { leaseTtlS: 3600, previous: { subnet: Prefix.parse('10.88.1.0/24')! } }), {
      iface: 'eth0', subnetFile: join(dir, 'subnet.env'), reconcileMs: 60_000, releaseOnExit: false, log: (msg) => logs.push(msg), metrics,
      traffic: { ipMasq: false, randomFully: true, forwardRules: false, resyncMs: 60_000 },
    });
    daemons.push(d);
    await d.start();
    const value = (series: string) => {
      const line = metrics.render().split('\n').find((l) => l.startsWith(`${series} `));
      return line === undefined ? undefined : Number(line.slice(series.length + 1));
    };
    expect(value('flannel_peers{family="ipv4"}')).toBe(2);
    expect(value('flannel_peer_changes_applied_total{family="ipv4"}')).toBe(6); // neighbour, FDB entry, route each
    expect(value('flannel_reconcile_passes_total{kind="full",result="ok"}')).toBe(1);
    expect(value('flannel_reconcile_duration_seconds_count{kind="full"}')).toBe(1);
    expect(value('flannel_reconcile_cpu_seconds_total{kind="full"}')).toBeGreaterThan(0);
    expect(value('flannel_last_reconcile_success_timestamp_seconds')).toBeGreaterThan(Date.now() / 1000 - 60);
    expect(value('flannel_relists_total')).toBe(4);
    expect(value('flannel_pod_addresses{network="cbr0",family="ipv4",state="in_use"}')).toBe(2);
    expect(value('flannel_pod_addresses{network="cbr0",family="ipv4",state="free"}')).toBe(251); // 256 - network, gateway, broadcast - 2
    expect(metrics.render()).not.toMatch(/network="other"/);
    store.put('10.88.4.0-24', peerValue(4), 600);
    store.del('10.88.2.0-24');
    await waitFor('the changes pass', () => value('flannel_peers{family="ipv4"}') === 2 && programmed(node, '10.88.4.0/24', peerMac(4), '192.168.88.4'));
    expect(value('flannel_reconcile_passes_total{kind="changes",result="ok"}')).toBeGreaterThanOrEqual(1);
    expect(value('flannel_peer_changes_applied_total{family="ipv4"}')).toBe(12);
    expect(value('flannel_peer_changes_failed_total{family="ipv4"}')).toBeUndefined();
    // the process's own series, under the names Prometheus' client libraries use
    const rss = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))![1]) * 1024;
    expect(value('process_resident_memory_bytes')).toBeGreaterThan(rss / 2);
    expect(value('process_resident_memory_bytes')).toBeLessThan(rss * 2);
    expect(value('nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
    expect(value('nodejs_heap_size_used_bytes')).toBeLessThanOrEqual(value('nodejs_heap_size_total_bytes')!);
    const cpu = value('process_cpu_seconds_total')!;
    expect(cpu).toBeGreaterThan(0);
    for (let x = 0; process.cpuUsage().user < cpu * 1e6 + 20_000; ) x++; // spend 20 ms
    expect(value('process_cpu_seconds_total')).toBeGreaterThan(cpu);
    expect(Math.abs(value('process_start_time_seconds')! - (Date.now() / 1000 - process.uptime()))).toBeLessThan(1);
    // the exposition is well formed: every sample line is "name{labels} number", every family typed
    for (const l of metrics.render().trim().split('\n')) expect(l).toMatch(/^(# (HELP|TYPE) (flannel|process|nodejs)_\w+ .+|(flannel|process|nodejs)_\w+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? ([-+0-9.e]+|\+Inf))$/);
  });

  it('health: reasons until the lease is held and the overlay programmed; ready once started; answered from memory (no command per probe)', async () => {
    const d = daemon({ reconcileMs: 60_000 });
    expect([d.live(), d.ready()]).toEqual([undefined, 'starting: no lease yet']); // start-up is no liveness failure
    store.put('10.88.2.0-24', peerValue(2), 600);
    await d.start();
    expect([d.live(), d.ready()]).toEqual([undefined, undefined]);
    const calls = node.calls.length;
    for (let i = 0; i < 20; i++) expect([d.live(), d.ready()]).toEqual([undefined, undefined]);
    expect(node.calls.length).toBe(calls); // the code before ran `ip` on each /healthz
    // a VTEP deleted by hand that cannot be made again: seen by the next pass, reported until it is repaired
    node.links().delete('flannel.1');
    node.failures.push({ match: 'link add name flannel.1', msg: 'RTNETLINK answers: Operation not permitted' });
    store.put('10.88.200.0-24', peerValue(9), 600); // any change: a reconcile pass
    await waitFor('the VTEP to be reported down', () => d.ready() === 'VTEP flannel.1 not up');
    expect(d.live()).toBe('VTEP flannel.1 not up');
    node.failures.length = 0;
    store.put('10.88.201.0-24', peerValue(10), 600);
    await waitFor('the VTEP to be repaired', () => d.ready() === undefined);
    expect(node.links().has('flannel.1')).toBe(true);
    await d.stop();
    expect([d.live(), d.ready()]).toEqual(['stopping', 'stopping']);
  });

  it('peers the kernel refuses (every `bridge fdb` line): counted and named in the log, not ready, not "programmed"; retried until they are, then ready', async () => {
    for (const n of [2, 3, 4]) store.put(`10.88.${n}.0-24`, peerValue(n), 600);
    // a `bridge` that is not iproute2's (the CNI plugin of that name first on the PATH) refuses every line
    node.failures.push({ match: 'fdb replace', msg: 'Error: bridge: unknown command' });
    const d = daemon({ reconcileMs: 30 });
    await d.start();
    expect(logs.find((l) => l.startsWith('running: '))).toMatch(/^running: 0 of 3 peers programmed; not programmed: 10\.88\.2\.0\/24, 10\.88\.3\.0\/24, 10\.88\.4\.0\/24; .*not ready: 3 of 3 peers not programmed/);
    expect(d.ready()).toBe('3 of 3 peers not programmed (10.88.2.0/24, 10.88.3.0/24, 10.88.4.0/24)');
    expect(d.live()).toBe(d.ready());
    expect(logs.filter((l) => l.includes('reconcile failed'))).toHaveLength(1); // once, though retried on each pass
    expect(logs.find((l) => l.includes('reconcile failed'))).toMatch(/\(3 of 3 peers not programmed: 10\.88\.2\.0\/24, 10\.88\.3\.0\/24, 10\.88\.4\.0\/24\)/);
    // one peer refused, the others accepted
    node.failures.length = 0;
    node.failures.push({ match: `fdb replace ${peerMac(3)}`, msg: 'RTNETLINK answers: Invalid argument' });
    await waitFor('two peers to be programmed', () => d.ready() === '1 of 3 peers not programmed (10.88.3.0/24)');
    node.failures.length = 0;
    await waitFor('every peer to be programmed', () => d.ready() === undefined);
    for (const n of [2, 3, 4]) expect(programmed(node, `10.88.${n}.0/24`, peerMac(n), `192.168.88.${n}`)).toBe(true);
    expect(logs).toContain('flannel.1: every peer is programmed again');
  });

  it('a pass the kernel refused in part is retried by a full pass 10 s later (and again until it completes), not at the next --reconcile-interval', async () => {
    for (const n of [2, 3]) store.put(`10.88.${n}.0-24`, peerValue(n), 600);
    node.failures.push({ match: `fdb replace ${peerMac(3)}`, msg: 'Error: bridge: unknown ifindex.' });
    const metrics = new DaemonMetrics();
    const passes = (result: string) => Number(new RegExp(`flannel_reconcile_passes_total\\{kind="full",result="${result}"\\} (\\d+)`).exec(metrics.render())?.[1] ?? 0);
    fakeClock();
    const d = daemon({ reconcileMs: 300_000, metrics });
    await d.start();
    expect(d.ready()).toBe('1 of 2 peers not programmed (10.88.3.0/24)');
    await vi.advanceTimersByTimeAsync(9_900);
    expect(passes('failed')).toBe(1); // the start's: nothing before 10 s
    await vi.advanceTimersByTimeAsync(100);
    await waitFor('the retry', () => passes('failed') === 2);
    node.failures.length = 0;
    await vi.advanceTimersByTimeAsync(10_000);
    await waitFor('the second retry to program the peer', () => d.ready() === undefined);
    expect(passes('ok')).toBe(1);
    // complete: no more retries, the long period only
    await vi.advanceTimersByTimeAsync(120_000);
    expect(passes('ok') + passes('failed')).toBe(3);
  });

  it('the reasons carry nothing from the store or the kernel: short, one line', async () => {
    store.put('10.88.2.0-24', peerValue(2), 600);
    node.failures.push({ match: 'fdb replace', msg: 'Error: secret kernel text http://10.0.0.1:2379' });
    const d = daemon();
    await d.start();
    expect(d.ready()).toBe('1 of 1 peers not programmed (10.88.2.0/24)');
    expect(d.ready()).not.toMatch(/secret|2379|etcd/);
  });
});
